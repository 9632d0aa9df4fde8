// MCP OAuth in the web client: start a server's authorization (the provider's page opens in a
// new window), then poll the server list until the callback has landed on CashCode.

import { api } from './api'
import type { McpServer } from './types'

const enc = encodeURIComponent

/** Asks the server for the provider's URL (discovery and registration happen there). */
export async function authorizationUrl(name: string): Promise<string> {
  const res = await api.post<{ authorization_url?: unknown }>(`/mcp/servers/${enc(name)}/authorize`, undefined, {
    timeoutMs: 60_000,
  })
  const url = res?.authorization_url
  if (typeof url !== 'string' || !/^https?:\/\//i.test(url)) throw new Error('The server returned no authorization URL')
  return url
}

/** Polls `list` until server `name` shows `auth: "authorized"`; false on timeout or abort. */
export async function waitForAuthorized(
  list: () => Promise<McpServer[]>,
  name: string,
  opts: { intervalMs?: number; timeoutMs?: number; signal?: AbortSignal; sleep?: (ms: number) => Promise<void> } = {},
): Promise<boolean> {
  const interval = opts.intervalMs ?? 1500
  const deadline = Date.now() + (opts.timeoutMs ?? 10 * 60_000)
  const sleep = opts.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)))
  while (Date.now() < deadline && !opts.signal?.aborted) {
    try {
      const servers = await list()
      if (servers.find((s) => s.name === name)?.auth === 'authorized') return true
    } catch {
      // A failed poll is retried until the deadline.
    }
    await sleep(interval)
  }
  return false
}

/**
 * Opens the provider's page. The window is opened at once (inside the click, so no popup
 * blocker stops it) and navigated when the URL is known; it never gets a handle on this page.
 */
export async function openAuthorization(name: string): Promise<void> {
  const w = window.open('about:blank', '_blank')
  try {
    const url = await authorizationUrl(name)
    if (w) {
      w.opener = null
      w.location.href = url
    } else {
      window.open(url, '_blank', 'noopener')
    }
  } catch (e) {
    w?.close()
    throw e
  }
}

export async function signOut(name: string): Promise<void> {
  await api.post(`/mcp/servers/${enc(name)}/sign-out`, undefined, { timeoutMs: 60_000 })
}
