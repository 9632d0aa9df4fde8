// What a chat costs: the `usage` and `budget_warning` events (docs/usage.md §4), the context
// meter's last reading per chat (kept in localStorage, since `usage` events are not replayed),
// and the Usage page's reports, prices and budgets (docs/usage.md §3).

/** Token counts of one model call, or of a turn's calls added up. */
export interface TokenCounts {
  input: number
  cached: number
  output: number
  reasoning: number
}

/** How full the chat's context was after its last model call. */
export interface ContextFill {
  tokens: number
  /** the turn's context budget in tokens; null when unbounded */
  window: number | null
}

const num = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : null)

/** The counts and context fill a `usage` event carries; null for anything malformed. */
export function usageFromEvent(ev: Record<string, unknown>): { counts: TokenCounts; context: ContextFill } | null {
  const input = num(ev.input_tokens)
  const output = num(ev.output_tokens)
  const tokens = num(ev.context_tokens)
  if (input === null || output === null || tokens === null) return null
  const counts = { input, output, cached: num(ev.cached_input_tokens) ?? 0, reasoning: num(ev.reasoning_tokens) ?? 0 }
  return { counts, context: { tokens, window: num(ev.context_window) } }
}

export function addCounts(a: TokenCounts | undefined, b: TokenCounts): TokenCounts {
  if (!a) return b
  return { input: a.input + b.input, cached: a.cached + b.cached, output: a.output + b.output, reasoning: a.reasoning + b.reasoning }
}

/** 950, 31.4K, 128K, 1.2M: three significant figures at most. */
export function formatTokens(n: number): string {
  if (n < 1000) return String(Math.round(n))
  const [div, unit] = n < 1_000_000 ? [1000, 'K'] : [1_000_000, 'M']
  const v = n / div
  const text = v < 100 ? v.toFixed(1).replace(/\.0$/, '') : String(Math.round(v))
  return text + unit
}

/** The meter's tone: past 80% of the window a warning, past 95% urgent. */
export function fillTone(c: ContextFill): 'ok' | 'warn' | 'full' {
  if (!c.window) return 'ok'
  const share = c.tokens / c.window
  return share >= 0.95 ? 'full' : share >= 0.8 ? 'warn' : 'ok'
}

const KEY = 'cashcode.context.'

export function saveContext(chatId: string, c: ContextFill): void {
  try {
    localStorage.setItem(KEY + chatId, JSON.stringify(c))
  } catch {
    // storage full or off: the meter starts blank after a reload, nothing else is lost
  }
}

export function loadContext(chatId: string): ContextFill | null {
  try {
    const v = JSON.parse(localStorage.getItem(KEY + chatId) ?? 'null') as Record<string, unknown> | null
    const tokens = num(v?.tokens)
    return tokens === null ? null : { tokens, window: num(v?.window) }
  } catch {
    return null
  }
}

/** One group of `GET /api/usage` (or its total). */
export interface UsageGroup {
  key: string
  requests: number
  input_tokens: number
  cached_input_tokens: number
  output_tokens: number
  reasoning_tokens: number
  estimated_requests: number
  unpriced_requests: number
  cost: Record<string, number>
}

export interface UsageReport {
  total: UsageGroup
  groups: UsageGroup[]
  prices_updated: string | null
}

export interface PriceRow {
  provider: string
  model: string
  input: number
  cached_input?: number | null
  output: number
  currency: string
}

export interface Prices {
  updated: string | null
  models: PriceRow[]
}

export interface Cap {
  tokens: number | null
  cost: number | null
}

export interface Budgets {
  chat: Cap
  day: Cap
  background_day: Cap
}

export const BUDGET_NAMES = ['chat', 'day', 'background_day'] as const

/** "0.12 USD + 3.40 CNY"; empty when nothing is priced. */
export function formatCost(cost: Record<string, number> | undefined): string {
  return Object.entries(cost ?? {})
    .filter(([, v]) => v > 0)
    .map(([cur, v]) => `${v < 0.01 ? v.toFixed(4) : v.toFixed(2)} ${cur}`)
    .join(' + ')
}

/** A cap field as typed: empty is no cap; anything else must be a number >= 0. */
export function parseCap(text: string, integer: boolean): number | null | 'invalid' {
  const t = text.trim()
  if (t === '') return null
  const v = Number(t)
  if (!Number.isFinite(v) || v < 0 || (integer && !Number.isInteger(v))) return 'invalid'
  return v
}

/** Bar heights for the day chart: each day's tokens as a share of the largest. */
export function dayBars(groups: UsageGroup[]): { key: string; tokens: number; share: number }[] {
  const rows = groups.map((g) => ({ key: g.key, tokens: g.input_tokens + g.output_tokens }))
  const top = Math.max(1, ...rows.map((r) => r.tokens))
  return rows.map((r) => ({ ...r, share: r.tokens / top }))
}
