// Where the API and the WebSocket live. The server serves this build on its own origin, so the
// defaults follow `location`; under the Vite dev server (5173) they point at the default ports.

export interface Endpoints {
  apiBase: string
  wsUrl: string
}

export interface LocationLike {
  origin: string
  hostname: string
  port: string
  protocol: string
}

export interface EnvLike {
  VITE_API_BASE?: string
  VITE_WS_URL?: string
  DEV?: boolean
}

const DEV_API = 'http://127.0.0.1:8000/api'
const DEV_WS = 'ws://127.0.0.1:8765/'

function trimSlash(s: string): string {
  return s.replace(/\/+$/, '')
}

export function isDevServer(loc: LocationLike, env: EnvLike): boolean {
  return Boolean(env.DEV) || loc.port === '5173'
}

export function defaultEndpoints(loc: LocationLike, env: EnvLike): Endpoints {
  const dev = isDevServer(loc, env)
  const apiBase = env.VITE_API_BASE?.trim()
    ? trimSlash(env.VITE_API_BASE.trim())
    : dev
      ? DEV_API
      : `${trimSlash(loc.origin)}/api`
  const wsScheme = loc.protocol === 'https:' ? 'wss' : 'ws'
  const wsUrl = env.VITE_WS_URL?.trim()
    ? env.VITE_WS_URL.trim()
    : dev
      ? DEV_WS
      : `${wsScheme}://${loc.hostname.includes(':') ? `[${loc.hostname}]` : loc.hostname}:8765/`
  return { apiBase, wsUrl }
}

/** Accepts the server's advertised ws_url only when it is a real ws(s) URL. */
export function acceptWsUrl(value: unknown): string | null {
  if (typeof value !== 'string') return null
  try {
    const u = new URL(value)
    if ((u.protocol === 'ws:' || u.protocol === 'wss:') && u.hostname) return u.toString()
  } catch {
    // not a URL: fall back to the default
  }
  return null
}

/**
 * Resolves the endpoints for this page: an explicit VITE_WS_URL wins, else the server's
 * `/client-config` (so a non-default WS port works), else the default.
 */
export async function resolveEndpoints(
  loc: LocationLike,
  env: EnvLike,
  fetcher: (url: string) => Promise<Response> = (url) =>
    fetch(url, { signal: AbortSignal.timeout(5000) }),
): Promise<Endpoints> {
  const base = defaultEndpoints(loc, env)
  if (env.VITE_WS_URL?.trim()) return base
  try {
    const res = await fetcher(`${base.apiBase}/client-config`)
    if (res.ok) {
      const body = (await res.json()) as { ws_url?: unknown }
      const ws = acceptWsUrl(body?.ws_url)
      if (ws) return { ...base, wsUrl: ws }
    }
  } catch {
    // older server or offline: the default still works for the standard port
  }
  return base
}
