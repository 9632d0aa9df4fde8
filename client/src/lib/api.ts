// HTTP helper: JSON in/out, uniform error text (docs/web-client.md §10), request timeouts.
// The server's own error text is kept verbatim; only the client's fallbacks are translated.

import { tr } from '../i18n'
import { codedText } from './codes'

export class ApiError extends Error {
  readonly status: number
  readonly method: string
  readonly path: string
  readonly detail: unknown
  /** the server's code for the failure, when it sent one */
  readonly code?: string
  constructor(message: string, status: number, method: string, path: string, detail?: unknown, code?: string) {
    super(message)
    this.name = 'ApiError'
    this.status = status
    this.method = method
    this.path = path
    this.detail = detail
    this.code = code
  }
}

/**
 * The message for a non-2xx response: a string `detail`, else a 422 list as `loc.path: msg; …`,
 * else the text body, else the status text, else "Request failed (N)" (translated).
 */
export function errorMessage(status: number, statusText: string, bodyText: string): string {
  const text = bodyText.trim()
  if (text) {
    try {
      const parsed = JSON.parse(text) as { detail?: unknown; code?: unknown; params?: unknown }
      const detail = parsed?.detail
      if (typeof detail === 'string' && detail.trim()) return codedText(parsed.code, parsed.params, detail)
      if (Array.isArray(detail) && detail.length > 0) {
        const parts = detail.map((item) => {
          const it = item as { loc?: unknown; msg?: unknown }
          const loc = Array.isArray(it.loc) ? it.loc.map(String).join('.') : ''
          const msg = typeof it.msg === 'string' ? it.msg : JSON.stringify(item)
          return loc ? `${loc}: ${msg}` : msg
        })
        return parts.join('; ')
      }
    } catch {
      // not JSON: fall through to the raw text
    }
    return text.length > 500 ? `${text.slice(0, 500)}…` : text
  }
  return statusText.trim() || tr('api.failed', { status: String(status) })
}

let apiBase = 'http://127.0.0.1:8000/api'

export function setApiBase(base: string): void {
  apiBase = base.replace(/\/+$/, '')
}

export function getApiBase(): string {
  return apiBase
}

export interface RequestOptions {
  signal?: AbortSignal
  timeoutMs?: number
}

/** Headers for a request body: JSON gets a Content-Type, FormData gets none (the browser sets the boundary). */
export function headersFor(body: unknown): Record<string, string> {
  if (typeof FormData !== 'undefined' && body instanceof FormData) return {}
  return { 'Content-Type': 'application/json' }
}

export async function request<T>(
  method: string,
  path: string,
  body?: unknown,
  opts: RequestOptions = {},
): Promise<T> {
  const isForm = typeof FormData !== 'undefined' && body instanceof FormData
  const timeout = AbortSignal.timeout(opts.timeoutMs ?? 30_000)
  const signal = opts.signal ? AbortSignal.any([opts.signal, timeout]) : timeout
  let res: Response
  try {
    res = await fetch(`${apiBase}${path}`, {
      method,
      headers: headersFor(body),
      body: body === undefined ? undefined : isForm ? (body as FormData) : JSON.stringify(body),
      signal,
    })
  } catch (e) {
    const aborted = e instanceof DOMException && (e.name === 'TimeoutError' || e.name === 'AbortError')
    if (opts.signal?.aborted) throw e
    throw new ApiError(
      aborted ? tr('api.timeout') : tr('api.unreachable'),
      0,
      method,
      path,
    )
  }
  if (res.status === 204) return undefined as T
  const text = await res.text()
  if (!res.ok) {
    let detail: unknown
    let code: string | undefined
    try {
      const parsed = JSON.parse(text)
      detail = parsed?.detail
      code = typeof parsed?.code === 'string' ? parsed.code : undefined
    } catch {
      detail = undefined
    }
    throw new ApiError(errorMessage(res.status, res.statusText, text), res.status, method, path, detail, code)
  }
  if (!text) return undefined as T
  try {
    return JSON.parse(text) as T
  } catch {
    throw new ApiError(tr('api.malformed'), res.status, method, path)
  }
}

export const api = {
  get: <T>(path: string, opts?: RequestOptions) => request<T>('GET', path, undefined, opts),
  post: <T>(path: string, body?: unknown, opts?: RequestOptions) => request<T>('POST', path, body ?? {}, opts),
  put: <T>(path: string, body: unknown, opts?: RequestOptions) => request<T>('PUT', path, body, opts),
  patch: <T>(path: string, body: unknown, opts?: RequestOptions) => request<T>('PATCH', path, body, opts),
  del: <T>(path: string, opts?: RequestOptions, body?: unknown) => request<T>('DELETE', path, body, opts),
}

export function describeError(e: unknown): string {
  if (e instanceof Error) return e.message
  return String(e)
}
