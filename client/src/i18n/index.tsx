// The client's languages: English and Simplified Chinese (the original client's language).
// `useT()` gives components a translator; `tr()` serves code outside React (thrown errors, the
// chat reducer) in the language currently shown. The language comes from localStorage (set in
// Settings), else from the browser's languages; `<html lang>` follows it.
import { createContext, useCallback, useContext, useEffect, useMemo, useState, type ReactNode } from 'react'
import { en, type MessageKey } from './en'
import { zhCN } from './zh-CN'

export type Lang = 'en' | 'zh-CN'
export const LANGS: readonly Lang[] = ['en', 'zh-CN']
export type { MessageKey }

export const STORAGE_KEY = 'cashcode.lang'
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

export type Vars = Record<string, string | number>

/** Numbers in the current language's digits and grouping (1,234 / 1,234; never "1.234" for zh). */
export function formatNumber(lang: Lang, n: number, opts?: Intl.NumberFormatOptions): string {
  return new Intl.NumberFormat(lang, opts).format(n)
}

/** A calendar date in the language's own order (2026/11/30 for zh-CN, 11/30/2026 for en). */
export function formatDate(lang: Lang, t: number | Date): string {
  return new Date(t).toLocaleDateString(lang)
}

/**
 * `{name}` placeholders are replaced by `vars.name` (numbers formatted for the language); unknown
 * placeholders stay as written. A numeric `count` whose plural category is "one" uses the
 * `<key>.one` entry when there is one ("1 tool", "2 tools"; Chinese has a single form).
 */
export function translate(lang: Lang, key: MessageKey, vars?: Vars): string {
  const dict = DICTS[lang]
  let text: string = dict[key] ?? en[key] ?? key
  if (typeof vars?.count === 'number' && new Intl.PluralRules(lang).select(vars.count) === 'one') {
    const one = dict[`${key}.one` as MessageKey]
    if (one) text = one
  }
  if (!vars) return text
  return text.replace(/\{(\w+)\}/g, (m, name: string) => {
    if (!(name in vars)) return m
    const v = vars[name]
    return typeof v === 'number' ? formatNumber(lang, v) : v
  })
}

export type Translate = (key: MessageKey, vars?: Vars) => string

// The language on screen, for code that runs outside React. Only the provider changes it; unit
// tests of lib code therefore run in English unless they set it.
let current: Lang = 'en'

export function currentLang(): Lang {
  return current
}

export function setCurrentLang(lang: Lang): void {
  current = lang
}

/** Translate in the language on screen. */
export const tr: Translate = (key, vars) => translate(current, key, vars)

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
  const [lang, setLangState] = useState<Lang>(() => {
    const l = fixed ?? initialLang()
    current = l
    return l
  })
  const setLang = useCallback((next: Lang) => {
    current = next
    setLangState(next)
    try {
      globalThis.localStorage?.setItem(STORAGE_KEY, next)
    } catch {
      // not remembered, still switched
    }
  }, [])
  useEffect(() => {
    current = lang
    if (typeof document !== 'undefined') document.documentElement.lang = lang
  }, [lang])
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
