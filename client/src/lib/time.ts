// Relative times for the history list, in the language on screen.

import { currentLang, formatDate, translate, type Lang } from '../i18n'

export function relativeTime(iso: string, now: number = Date.now(), lang: Lang = currentLang()): string {
  const t = Date.parse(iso)
  if (Number.isNaN(t)) return ''
  const diff = Math.max(0, now - t)
  const min = Math.floor(diff / 60_000)
  if (min < 1) return translate(lang, 'time.justNow')
  if (min < 60) return translate(lang, 'time.minutesAgo', { n: min })
  const h = Math.floor(min / 60)
  if (h < 24) return translate(lang, 'time.hoursAgo', { n: h })
  const d = Math.floor(h / 24)
  if (d < 30) return translate(lang, 'time.daysAgo', { n: d })
  return formatDate(lang, t)
}
