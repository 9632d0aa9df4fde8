// MCP Market form rules (docs/web-client.md §7): validation, masked header values, and the
// transport (the original's form was SSE only; Streamable HTTP servers, OAuth ones included, too).

import { tr, type Translate } from '../i18n'
import { MCP_ID_RE } from './selections'
import { isHttpUrl } from './url'

export const MASK = '********'
export const HEADER_NAME_RE = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$/
export const MAX_HEADERS = 32

export interface HeaderRow {
  key: string
  name: string
  value: string
  /** the name the stored secret belongs to (only for rows loaded from the server) */
  storedName: string | null
}

/** The transports a user server can use (stdio entries live in the built-in catalog only). */
export type McpTransport = 'sse' | 'streamable_http'

export interface McpForm {
  type: McpTransport
  name: string
  display_name: string
  url: string
  description: string
  headers: HeaderRow[]
}

export type McpFormErrors = Partial<Record<'name' | 'display_name' | 'url' | 'description' | 'headers', string>>

export { isHttpUrl }

export function validateMcpForm(form: McpForm, editing: boolean, t: Translate = tr): McpFormErrors {
  const e: McpFormErrors = {}
  if (!editing && !MCP_ID_RE.test(form.name.trim())) {
    e.name = t('mcp.err.name')
  }
  const title = form.display_name.trim()
  if (!title) e.display_name = t('mcp.err.titleRequired')
  else if ([...title].length > 100) e.display_name = t('common.tooLong', { max: 100 })
  if (!isHttpUrl(form.url)) e.url = t('mcp.err.url')
  if ([...form.description.trim()].length > 1000) e.description = t('common.tooLong', { max: 1000 })
  if (form.headers.length > MAX_HEADERS) e.headers = t('mcp.err.maxHeaders', { max: MAX_HEADERS })
  else {
    const seen = new Set<string>()
    for (const h of form.headers) {
      const name = h.name.trim()
      if (!name) {
        e.headers = t('mcp.err.headerNameRequired')
        break
      }
      if (!HEADER_NAME_RE.test(name)) {
        e.headers = t('mcp.err.headerNameInvalid', { name })
        break
      }
      const lower = name.toLowerCase()
      if (seen.has(lower)) {
        e.headers = t('mcp.err.headerDuplicate', { name })
        break
      }
      seen.add(lower)
      if (!h.value || h.value.length > 4096) {
        e.headers = t('mcp.err.headerValue', { name, max: 4096 })
        break
      }
      if (/[\r\n]/.test(h.value)) {
        e.headers = t('mcp.err.headerNewline', { name })
        break
      }
      if (h.value === MASK && h.storedName !== name) {
        e.headers = t('mcp.err.headerReenter', { name })
        break
      }
    }
  }
  return e
}

/** Renaming a header whose value is still the mask clears it: the stored secret belongs to the old name. */
export function renameHeader(row: HeaderRow, name: string): HeaderRow {
  if (row.value === MASK && row.storedName !== null && name !== row.storedName) {
    return { ...row, name, value: '' }
  }
  return { ...row, name }
}

export function formFromServer(s: {
  type?: string
  name: string
  display_name: string
  url: string
  description: string
  headers: Record<string, string>
}): McpForm {
  return {
    type: s.type === 'streamable_http' ? 'streamable_http' : 'sse',
    name: s.name,
    display_name: s.display_name,
    url: s.url,
    description: s.description ?? '',
    headers: Object.keys(s.headers ?? {}).map((name, i) => ({ key: `h${i}`, name, value: MASK, storedName: name })),
  }
}

export function buildMcpBody(form: McpForm, editing: boolean): Record<string, unknown> {
  const headers: Record<string, string> = {}
  for (const h of form.headers) headers[h.name.trim()] = h.value
  const body: Record<string, unknown> = {
    type: form.type,
    display_name: form.display_name.trim(),
    description: form.description.trim(),
    url: form.url.trim(),
    headers,
  }
  if (!editing) body.name = form.name.trim()
  return body
}
