// MCP elicitation forms (server `elicitation` events): the schema the server checked (flat
// object of string, number, integer, boolean, single- and multi-select enum properties) turned
// into form fields, their starting values (schema defaults), and the same checks the server
// applies, so an answer is only sent when it will be accepted. Pure functions.

import type { MessageKey } from '../i18n'

export interface Choice {
  value: string
  title: string
}

export type FieldKind =
  | { type: 'text'; minLength?: number; maxLength?: number; format?: 'email' | 'uri' | 'date' | 'date-time' }
  | { type: 'number'; integer: boolean; minimum?: number; maximum?: number }
  | { type: 'boolean' }
  | { type: 'select'; choices: Choice[] }
  | { type: 'multiselect'; choices: Choice[]; minItems?: number; maxItems?: number }

export interface Field {
  name: string
  label: string
  description?: string
  required: boolean
  kind: FieldKind
  default?: unknown
}

/** One open form, as the `elicitation` event announced it. */
export interface Elicitation {
  id: string
  chatId: string
  server: string
  message: string
  fields: Field[]
  timeoutSec: number
  /** when the event arrived (ms since epoch), for the countdown */
  receivedAt: number
}

/** Values as the form holds them: text inputs keep strings until they are checked. */
export type FormValues = Record<string, string | boolean | string[]>

export interface FieldError {
  key: MessageKey
  vars?: Record<string, string | number>
}

const FORMATS = ['email', 'uri', 'date', 'date-time'] as const

function isObj(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

function count(v: unknown): number | undefined {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0 ? v : undefined
}

function finite(v: unknown): number | undefined {
  return typeof v === 'number' && Number.isFinite(v) ? v : undefined
}

function choicesOf(list: unknown): Choice[] | null {
  if (!Array.isArray(list) || list.length === 0) return null
  const out: Choice[] = []
  for (const c of list) {
    if (!isObj(c) || typeof c.const !== 'string') return null
    out.push({ value: c.const, title: typeof c.title === 'string' && c.title ? c.title : c.const })
  }
  return out
}

/** Fields of a `requested_schema` (the server's normalised form: enums as `oneOf`/`anyOf`). */
export function parseForm(schema: unknown): Field[] | null {
  if (!isObj(schema) || !isObj(schema.properties)) return null
  const required = Array.isArray(schema.required) ? schema.required.filter((r) => typeof r === 'string') : []
  const fields: Field[] = []
  for (const [name, p] of Object.entries(schema.properties)) {
    if (!isObj(p)) return null
    let kind: FieldKind
    if (p.type === 'string' && p.oneOf !== undefined) {
      const choices = choicesOf(p.oneOf)
      if (!choices) return null
      kind = { type: 'select', choices }
    } else if (p.type === 'string') {
      const format = FORMATS.find((f) => f === p.format)
      kind = { type: 'text', minLength: count(p.minLength), maxLength: count(p.maxLength), format }
    } else if (p.type === 'number' || p.type === 'integer') {
      kind = { type: 'number', integer: p.type === 'integer', minimum: finite(p.minimum), maximum: finite(p.maximum) }
    } else if (p.type === 'boolean') {
      kind = { type: 'boolean' }
    } else if (p.type === 'array' && isObj(p.items)) {
      const choices = choicesOf(p.items.anyOf ?? p.items.oneOf)
      if (!choices) return null
      kind = { type: 'multiselect', choices, minItems: count(p.minItems), maxItems: count(p.maxItems) }
    } else {
      return null
    }
    fields.push({
      name,
      label: typeof p.title === 'string' && p.title ? p.title : name,
      description: typeof p.description === 'string' && p.description ? p.description : undefined,
      required: required.includes(name),
      kind,
      default: p.default,
    })
  }
  return fields
}

/** An `elicitation` event as an open form, or null when it is malformed. */
export function fromEvent(ev: Record<string, unknown>, now: number): Elicitation | null {
  const fields = parseForm(ev.requested_schema)
  if (typeof ev.id !== 'string' || typeof ev.chat_id !== 'string' || !fields) return null
  return {
    id: ev.id,
    chatId: ev.chat_id,
    server: typeof ev.server === 'string' ? ev.server : '',
    message: typeof ev.message === 'string' ? ev.message : '',
    fields,
    timeoutSec: typeof ev.timeout_sec === 'number' && ev.timeout_sec > 0 ? ev.timeout_sec : 0,
    receivedAt: now,
  }
}

/** Starting values: the schema's defaults (SEP-1034), else empty. */
export function initialValues(fields: Field[]): FormValues {
  const out: FormValues = {}
  for (const f of fields) {
    const d = f.default
    switch (f.kind.type) {
      case 'boolean':
        out[f.name] = d === true
        break
      case 'multiselect':
        out[f.name] = Array.isArray(d) ? d.filter((x): x is string => typeof x === 'string') : []
        break
      case 'number':
        out[f.name] = typeof d === 'number' ? String(d) : ''
        break
      default:
        out[f.name] = typeof d === 'string' ? d : ''
    }
  }
  return out
}

const EMAIL = /^[^\s@]+@[^\s@.][^\s@]*\.[^\s@]*[^\s@.]$/
const URI = /^[A-Za-z][A-Za-z0-9+.-]*:\S+$/
const DATE = /^(\d{4})-(\d{2})-(\d{2})$/
const DATE_TIME = /^(\d{4}-\d{2}-\d{2})[Tt]([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d)$/

function validDate(s: string): boolean {
  const m = DATE.exec(s)
  if (!m) return false
  const [y, mo, d] = [Number(m[1]), Number(m[2]), Number(m[3])]
  if (mo < 1 || mo > 12 || d < 1) return false
  return d <= new Date(Date.UTC(y, mo, 0)).getUTCDate()
}

function formatOk(format: string, s: string): boolean {
  switch (format) {
    case 'email':
      return EMAIL.test(s)
    case 'uri':
      return URI.test(s)
    case 'date':
      return validDate(s)
    default: {
      const m = DATE_TIME.exec(s)
      return Boolean(m && validDate(m[1]))
    }
  }
}

/** Code points, as the server counts them. */
function chars(s: string): number {
  return [...s].length
}

/**
 * Checks the values; returns the content to send (empty optional fields left out) or the errors
 * by field name.
 */
export function validate(
  fields: Field[],
  values: FormValues,
): { content: Record<string, unknown>; errors: Record<string, FieldError> } {
  const content: Record<string, unknown> = {}
  const errors: Record<string, FieldError> = {}
  for (const f of fields) {
    const v = values[f.name]
    const k = f.kind
    if (k.type === 'boolean') {
      content[f.name] = v === true
      continue
    }
    if (k.type === 'multiselect') {
      const list = Array.isArray(v) ? v : []
      if (list.length === 0 && !f.required && k.minItems === undefined) continue
      if (k.minItems !== undefined && list.length < k.minItems) errors[f.name] = { key: 'elicit.err.minItems', vars: { n: k.minItems } }
      else if (k.maxItems !== undefined && list.length > k.maxItems) errors[f.name] = { key: 'elicit.err.maxItems', vars: { n: k.maxItems } }
      else if (f.required && list.length === 0) errors[f.name] = { key: 'elicit.err.required' }
      else content[f.name] = list
      continue
    }
    const s = typeof v === 'string' ? v : ''
    if (s === '' || (k.type === 'number' && s.trim() === '')) {
      if (f.required) errors[f.name] = { key: 'elicit.err.required' }
      continue
    }
    if (k.type === 'number') {
      const n = Number(s.trim())
      if (!Number.isFinite(n)) errors[f.name] = { key: 'elicit.err.number' }
      else if (k.integer && !Number.isInteger(n)) errors[f.name] = { key: 'elicit.err.integer' }
      else if (k.minimum !== undefined && n < k.minimum) errors[f.name] = { key: 'elicit.err.min', vars: { n: k.minimum } }
      else if (k.maximum !== undefined && n > k.maximum) errors[f.name] = { key: 'elicit.err.max', vars: { n: k.maximum } }
      else content[f.name] = n
      continue
    }
    if (k.type === 'select') {
      if (k.choices.some((c) => c.value === s)) content[f.name] = s
      else errors[f.name] = { key: 'elicit.err.choice' }
      continue
    }
    const n = chars(s)
    if (k.minLength !== undefined && n < k.minLength) errors[f.name] = { key: 'elicit.err.minLength', vars: { n: k.minLength } }
    else if (k.maxLength !== undefined && n > k.maxLength) errors[f.name] = { key: 'elicit.err.maxLength', vars: { n: k.maxLength } }
    else if (k.format && !formatOk(k.format, s)) errors[f.name] = { key: 'elicit.err.format', vars: { format: k.format } }
    else content[f.name] = s
  }
  return { content, errors }
}

/** The answer frame. */
export function responseFrame(
  e: Pick<Elicitation, 'id' | 'chatId'>,
  action: 'accept' | 'decline' | 'cancel',
  content?: Record<string, unknown>,
): Record<string, unknown> {
  const frame: Record<string, unknown> = { type: 'elicitation_response', chat_id: e.chatId, id: e.id, action }
  if (action === 'accept') frame.content = content ?? {}
  return frame
}
