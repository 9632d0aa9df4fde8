// Skill Market logic (docs/web-client.md §8): labels, query strings, invalid-package entries,
// upload checks and save-error messages.

import { tr, translate, type MessageKey, type Translate } from '../i18n'
import { ApiError } from './api'
import type { Skill, SkillSource } from './types'

export type AppView = 'chat' | 'mcp-market' | 'skill-market' | 'memory' | 'llm-settings' | 'safety' | 'usage'
export const APP_VIEWS: readonly AppView[] = ['chat', 'mcp-market', 'skill-market', 'memory', 'llm-settings', 'safety', 'usage']

export const SOURCE_LABELS: Record<SkillSource, MessageKey> = {
  builtin: 'skills.source.builtin',
  user: 'skills.source.user',
  agent: 'skills.source.agent',
}

export function sourceLabel(source: string, t: Translate = tr): string {
  return t(SOURCE_LABELS[source as SkillSource] ?? SOURCE_LABELS.user)
}

export function isManageable(skill: Pick<Skill, 'mutable' | 'source'>): boolean {
  return skill.mutable && skill.source !== 'builtin'
}

export type AvailabilityTone = 'green' | 'amber' | 'grey' | 'red'

export function availabilityOf(
  skill: Pick<Skill, 'enabled' | 'availability'>,
  t: Translate = tr,
): { label: string; tone: AvailabilityTone } {
  if (!skill.enabled) return { label: t('skills.avail.disabled'), tone: 'grey' }
  switch (skill.availability) {
    case 'available':
      return { label: t('skills.avail.available'), tone: 'green' }
    case 'missing_dependency':
      return { label: t('skills.avail.missing'), tone: 'amber' }
    case 'disabled':
      return { label: t('skills.avail.disabled'), tone: 'grey' }
    default:
      return { label: t('skills.avail.invalid'), tone: 'red' }
  }
}

export interface SkillQuery {
  source?: string
  enabled?: boolean
  availability?: string
  query?: string
  page?: number
  page_size?: number
}

/** Fixed key order (source, enabled, availability, query, page, page_size); blanks dropped. */
export function skillsQueryString(q: SkillQuery): string {
  const params = new URLSearchParams()
  const put = (k: string, v: string | number | boolean | undefined) => {
    if (v === undefined) return
    const s = String(v).trim()
    if (s) params.append(k, s)
  }
  put('source', q.source)
  put('enabled', q.enabled)
  put('availability', q.availability)
  put('query', q.query)
  put('page', q.page)
  put('page_size', q.page_size)
  const s = params.toString()
  return s ? `?${s}` : ''
}

export function pageCount(total: number, pageSize: number): number {
  if (!Number.isFinite(total) || total <= 0 || pageSize <= 0) return 1
  return Math.max(1, Math.ceil(total / pageSize))
}

export interface InvalidPackage {
  key: string
  source: SkillSource
  rawSource: string
  dir: string
  displayDir: string
  errors: string[]
  deletable: boolean
}

function clean(s: string): string {
  // eslint-disable-next-line no-control-regex -- control characters are what is being replaced
  return s.replace(/[\u0000-\u001f\u007f-\u009f]/g, ' ')
}

function cut(s: string, n: number): string {
  const chars = [...s]
  return chars.length > n ? `${chars.slice(0, n).join('')}...` : s
}

export function normaliseInvalid(invalid: Record<string, unknown> | null | undefined, t: Translate = tr): InvalidPackage[] {
  if (!invalid || typeof invalid !== 'object') return []
  const out: InvalidPackage[] = []
  for (const [key, value] of Object.entries(invalid)) {
    if (out.length >= 100) break
    const i = key.indexOf(':')
    const rawSource = i >= 0 ? key.slice(0, i) : ''
    const dir = i >= 0 ? key.slice(i + 1) : key
    const source: SkillSource = rawSource === 'builtin' || rawSource === 'agent' ? rawSource : 'user'
    const list = Array.isArray(value) ? value : []
    const errors = list
      .filter((e): e is string => typeof e === 'string' && e.trim().length > 0)
      .slice(0, 3)
      .map((e) => cut(e, 240))
    out.push({
      key,
      source,
      rawSource: rawSource || 'user',
      dir,
      displayDir: cut(clean(dir), 80),
      errors: errors.length ? errors : [t('skills.invalid.fallback')],
      deletable: source !== 'builtin',
    })
  }
  return out
}

export function invalidDeletePath(pkg: Pick<InvalidPackage, 'rawSource' | 'dir'>): string {
  return `/skills/invalid/${encodeURIComponent(pkg.rawSource)}/${encodeURIComponent(pkg.dir)}`
}

export function isZipName(name: string): boolean {
  return name.trim().toLowerCase().endsWith('.zip')
}

/** The 409 message in English (the test fixture); the screen shows it in its own language. */
export const CONFLICT_MESSAGE = translate('en', 'skills.editor.conflict')

export function saveErrorMessage(e: unknown, t: Translate = tr): { message: string; conflict: boolean } {
  if (e instanceof ApiError && e.status === 409) return { message: t('skills.editor.conflict'), conflict: true }
  if (e instanceof ApiError) return { message: typeof e.detail === 'string' ? e.detail : e.message, conflict: false }
  return { message: e instanceof Error ? e.message : String(e), conflict: false }
}

export function skillPath(name: string, suffix = ''): string {
  return `/skills/${encodeURIComponent(name)}${suffix}`
}
