// The client's languages: English and Simplified Chinese (the original client's language).
// `useT()` gives components a translator; `translate()` serves code outside React.
// The language comes from localStorage (set in Settings), else from the browser's languages.
import { createContext, useCallback, useContext, useMemo, useState, type ReactNode } from 'react'
import { en, type MessageKey } from './en'
import { zhCN } from './zh-CN'

export type Lang = 'en' | 'zh-CN'
export const LANGS: readonly Lang[] = ['en', 'zh-CN']
export type { MessageKey }

const STORAGE_KEY = 'cashcode.lang'
const DICTS: Record<Lang, Record<MessageKey, string>> = { en, 'zh-CN': zhCN }

/** The first supported language in `preferred` (browser order); Chinese of any region -> zh-CN. */
export function pickLang(preferred: readonly string[]): Lang {
  for (const tag of preferred) {
    const t = tag.toLowerCase()
    if (t === 'zh' || t.startsWith('zh-')) return 'zh-CN'
    if (t === 'en' || t.startsWith('en-')) return 'en'
  }
  return 'en'
}

export function initialLang(): Lang {
  try {
    const saved = globalThis.localStorage?.getItem(STORAGE_KEY)
    if (saved === 'en' || saved === 'zh-CN') return saved
  } catch {
    // storage disabled: fall through to the browser's languages
  }
  const nav = globalThis.navigator
  return pickLang(nav ? (nav.languages?.length ? nav.languages : [nav.language]) : [])
}

/** `{name}` placeholders are replaced by `vars.name`; unknown placeholders stay as written. */
export function translate(lang: Lang, key: MessageKey, vars?: Record<string, string | number>): string {
  const text = DICTS[lang][key] ?? en[key] ?? key
  if (!vars) return text
  return text.replace(/\{(\w+)\}/g, (m, name: string) => (name in vars ? String(vars[name]) : m))
}

export type Translate = (key: MessageKey, vars?: Record<string, string | number>) => string

interface I18n {
  lang: Lang
  setLang: (lang: Lang) => void
  t: Translate
}

const I18nContext = createContext<I18n>({
  lang: 'en',
  setLang: () => {},
  t: (key, vars) => translate('en', key, vars),
})

export function I18nProvider({ children, lang: fixed }: { children: ReactNode; lang?: Lang }) {
  const [lang, setLangState] = useState<Lang>(() => fixed ?? initialLang())
  const setLang = useCallback((next: Lang) => {
    setLangState(next)
    try {
      globalThis.localStorage?.setItem(STORAGE_KEY, next)
    } catch {
      // not remembered, still switched
    }
    document.documentElement.lang = next
  }, [])
  const value = useMemo<I18n>(
    () => ({ lang, setLang, t: (key, vars) => translate(lang, key, vars) }),
    [lang, setLang],
  )
  return <I18nContext.Provider value={value}>{children}</I18nContext.Provider>
}

export function useI18n(): I18n {
  return useContext(I18nContext)
}

export function useT(): Translate {
  return useContext(I18nContext).t
}
