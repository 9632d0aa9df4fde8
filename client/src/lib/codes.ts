// Server texts as codes (docs/http-api.md §1, docs/ws-protocol.md "error"): the server sends the
// English `detail` with a stable `code` and its fields; the client words it in the language on
// screen, and falls back to the detail for a code it does not know (a newer server).

import { en, type MessageKey } from '../i18n/en'
import { tr, type Vars } from '../i18n'

/** The translation key and values of a coded server text; `null` for an unknown code. */
export function codedKey(code: unknown, params: unknown): { key: MessageKey; vars: Vars } | null {
  if (typeof code !== 'string' || !code) return null
  const key = `code.${code}` as MessageKey
  if (!(key in en)) return null
  const p = params && typeof params === 'object' ? (params as Record<string, unknown>) : {}
  const vars: Vars = {}
  for (const [k, v] of Object.entries(p)) {
    if (typeof v === 'string' || typeof v === 'number') vars[k] = v
  }
  if (code === 'budget_reached') {
    const budget = typeof p.budget === 'string' ? p.budget : 'day'
    const whatKey = `code.budget.${budget}` as MessageKey
    vars.what = whatKey in en ? tr(whatKey) : budget
    const tokens = typeof p.tokens === 'number' ? p.tokens : 0
    let spent =
      typeof p.cap_tokens === 'number'
        ? tr('code.budget.tokensOf', { tokens, cap: p.cap_tokens })
        : tr('code.budget.tokens', { tokens })
    if (typeof p.cap_cost === 'number' && typeof p.cost === 'number') {
      spent += `, ${tr('code.budget.cost', { cost: p.cost.toFixed(4), cap: String(p.cap_cost) })}`
    }
    vars.spent = spent
  }
  // A provider's own message is quoted as sent; an empty one leaves no gap.
  if (!('message' in vars)) vars.message = ''
  return { key, vars }
}

/** The text of a coded server message in the language on screen, else `fallback`. */
export function codedText(code: unknown, params: unknown, fallback: string): string {
  const k = codedKey(code, params)
  return k ? tr(k.key, k.vars).trim() : fallback
}
