// Composer selections (Skills / MCPs), the `@` trigger and the outgoing message frame
// (docs/web-client.md §6). Pure functions: the Composer only wires them to the DOM.

import { tr } from '../i18n'
import type { HistoryMessage, McpReceipt, Provider, SkillReceipt } from './types'

export const SKILL_ID_RE = /^[a-z0-9][a-z0-9._-]{0,63}$/
export const MCP_ID_RE = /^[a-z0-9][a-z0-9_-]{0,63}$/
export const MAX_SELECTIONS = 8
export const MAX_LABEL = 100

export type SelectionKind = 'skill' | 'mcp'

export interface Selection {
  kind: SelectionKind
  id: string
  label?: string
}

export class SelectionError extends Error {}

/** NUL removed, trimmed, empty → undefined, over 100 chars → error. */
export function normaliseLabel(label: unknown): string | undefined {
  if (label === undefined || label === null) return undefined
  if (typeof label !== 'string') throw new SelectionError(tr('composer.invalidLabel'))
  // eslint-disable-next-line no-control-regex -- NUL is what is being removed
  const clean = label.replace(/\u0000/g, '').trim()
  if (!clean) return undefined
  if ([...clean].length > MAX_LABEL) throw new SelectionError(tr('composer.labelTooLong', { max: MAX_LABEL }))
  return clean
}

export function validId(kind: SelectionKind, id: string): boolean {
  return (kind === 'skill' ? SKILL_ID_RE : MCP_ID_RE).test(id)
}

/** Adds a selection; a duplicate id of the same kind is ignored (first label wins). */
export function addSelection(list: readonly Selection[], sel: Selection): Selection[] {
  const id = sel.id.trim()
  if (!validId(sel.kind, id)) {
    throw new SelectionError(tr(sel.kind === 'skill' ? 'composer.invalidSkillId' : 'composer.invalidMcpId'))
  }
  const label = normaliseLabel(sel.label)
  if (list.some((s) => s.kind === sel.kind && s.id === id)) return [...list]
  if (list.length >= MAX_SELECTIONS) throw new SelectionError(tr('composer.tooMany', { max: MAX_SELECTIONS }))
  const next: Selection = label === undefined ? { kind: sel.kind, id } : { kind: sel.kind, id, label }
  return [...list, next]
}

export function removeSelection(list: readonly Selection[], kind: SelectionKind, id: string): Selection[] {
  return list.filter((s) => !(s.kind === kind && s.id === id))
}

/** Skills first, then MCPs (the order chips and receipts use). */
export function orderSelections(list: readonly Selection[]): Selection[] {
  return [...list.filter((s) => s.kind === 'skill'), ...list.filter((s) => s.kind === 'mcp')]
}

export function skillLabel(skill: { name: string; display_name?: string | null }): string {
  return skill.display_name?.trim() || skill.name
}

export function mcpLabel(server: { name: string; display_name?: string | null }): string {
  return server.display_name || server.name
}

// ---- `@` trigger ----

export interface MentionTrigger {
  /** index of the `@` */
  start: number
  /** text between the `@` and the caret */
  query: string
}

/** `@` at the start or after whitespace, followed by a query with no whitespace or `@`, up to the caret. */
export function findMentionTrigger(text: string, caret: number): MentionTrigger | null {
  if (caret < 0 || caret > text.length) return null
  let i = caret - 1
  while (i >= 0) {
    const ch = text[i]
    if (ch === '@') break
    if (/\s/.test(ch)) return null
    i--
  }
  if (i < 0) return null
  if (i > 0 && !/\s/.test(text[i - 1])) return null
  return { start: i, query: text.slice(i + 1, caret) }
}

/** Removes `@query` (from the `@` to the caret) and puts the caret where the `@` was. */
export function stripMention(text: string, trigger: MentionTrigger): { text: string; caret: number } {
  const end = trigger.start + 1 + trigger.query.length
  return { text: text.slice(0, trigger.start) + text.slice(end), caret: trigger.start }
}

// ---- picker ----

export interface PickerItem {
  kind: SelectionKind
  id: string
  label: string
  description: string
  toolCount?: number
}

export function filterItems<T extends { id: string; label: string; description?: string }>(
  items: readonly T[],
  query: string,
): T[] {
  const q = query.trim().toLowerCase()
  if (!q) return [...items]
  return items.filter(
    (it) =>
      it.label.toLowerCase().includes(q) ||
      it.id.toLowerCase().includes(q) ||
      (it.description ?? '').toLowerCase().includes(q),
  )
}

/** Moves a highlight with wrap-around; an empty list stays at 0. */
export function wrapIndex(index: number, delta: number, length: number): number {
  if (length <= 0) return 0
  return (((index + delta) % length) + length) % length
}

export type PickerLevel = 'category' | 'skill' | 'mcp'

export interface PickerState {
  open: boolean
  level: PickerLevel
  highlight: number
  /** the `@` position the user dismissed; it does not reopen until that trigger is gone */
  suppressedAt: number | null
}

export const closedPicker: PickerState = { open: false, level: 'category', highlight: 0, suppressedAt: null }

/** Re-evaluates the picker after an input or caret move. */
export function syncPicker(state: PickerState, trigger: MentionTrigger | null): PickerState {
  if (!trigger) {
    if (!state.open && state.suppressedAt === null) return state
    return { ...closedPicker }
  }
  if (state.suppressedAt === trigger.start) return state.open ? { ...state, open: false } : state
  if (state.open) return state
  return { open: true, level: 'category', highlight: 0, suppressedAt: null }
}

export function dismissPicker(state: PickerState, trigger: MentionTrigger | null): PickerState {
  return { open: false, level: 'category', highlight: 0, suppressedAt: trigger ? trigger.start : state.suppressedAt }
}

export function pickerBack(state: PickerState): PickerState {
  return { ...state, level: 'category', highlight: 0 }
}

// ---- frames and receipts ----

export interface LlmChoice {
  provider: Provider
  model: string
}

export interface MessageFrame {
  type: 'message'
  chat_id: string
  content: string
  metadata: {
    llm: LlmChoice
    mentioned_skills?: SkillReceipt[]
    selected_mcp_connectors?: McpReceipt[]
  }
}

export function toReceipts(list: readonly Selection[]): {
  mentioned_skills?: SkillReceipt[]
  selected_mcp_connectors?: McpReceipt[]
} {
  const skills = list
    .filter((s) => s.kind === 'skill')
    .map((s) => (s.label ? { name: s.id, label: s.label } : { name: s.id }))
  const mcps = list
    .filter((s) => s.kind === 'mcp')
    .map((s) => (s.label ? { server: s.id, label: s.label } : { server: s.id }))
  const out: { mentioned_skills?: SkillReceipt[]; selected_mcp_connectors?: McpReceipt[] } = {}
  if (skills.length) out.mentioned_skills = skills
  if (mcps.length) out.selected_mcp_connectors = mcps
  return out
}

export type SendCheck = { ok: true; content: string } | { ok: false; reason: string }

/** The spec's send rules: a model and non-blank text are needed; chips alone never send. */
export function checkSend(text: string, llm: LlmChoice | null): SendCheck {
  if (!llm) return { ok: false, reason: tr('composer.needModel') }
  const content = text.trim()
  if (!content) return { ok: false, reason: tr('composer.needText') }
  return { ok: true, content }
}

export function buildMessageFrame(
  chatId: string,
  text: string,
  llm: LlmChoice,
  selections: readonly Selection[],
): MessageFrame {
  return {
    type: 'message',
    chat_id: chatId,
    content: text.trim(),
    metadata: { llm: { provider: llm.provider, model: llm.model }, ...toReceipts(orderSelections(selections)) },
  }
}

/** Persisted receipts → selections: bad ids dropped, bad labels dropped (id kept), deduped, ≤8, skills first. */
export function normaliseReceipts(msg: Pick<HistoryMessage, 'mentioned_skills' | 'selected_mcp_connectors'>): Selection[] {
  const out: Selection[] = []
  const take = (raw: unknown, kind: SelectionKind, key: 'name' | 'server') => {
    if (!Array.isArray(raw)) return
    for (const item of raw) {
      if (out.length >= MAX_SELECTIONS) return
      if (!item || typeof item !== 'object') continue
      const rec = item as Record<string, unknown>
      const id = typeof rec[key] === 'string' ? (rec[key] as string).trim() : ''
      if (!validId(kind, id)) continue
      if (out.some((s) => s.kind === kind && s.id === id)) continue
      let label: string | undefined
      try {
        label = normaliseLabel(rec.label)
      } catch {
        label = undefined
      }
      out.push(label === undefined ? { kind, id } : { kind, id, label })
    }
  }
  take(msg.mentioned_skills, 'skill', 'name')
  take(msg.selected_mcp_connectors, 'mcp', 'server')
  return out
}
