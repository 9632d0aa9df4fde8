// One WebSocket with reconnect backoff (1 s, 2 s, 4 s … capped at 30 s, reset after an open) and an
// application ping every 25 s. Frames are JSON objects; bad JSON is ignored.

import type { ConnState, ServerEvent } from './chatStore'

export const PING_INTERVAL_MS = 25_000

export function backoffDelay(attempt: number): number {
  return Math.min(1000 * 2 ** Math.max(0, attempt), 30_000)
}

export function parseEvent(data: unknown): ServerEvent | null {
  if (typeof data !== 'string') return null
  try {
    const v = JSON.parse(data) as unknown
    if (v && typeof v === 'object' && !Array.isArray(v) && typeof (v as ServerEvent).event === 'string') {
      return v as ServerEvent
    }
  } catch {
    // ignored per protocol: a bad frame never breaks the connection
  }
  return null
}

export interface SocketHandlers {
  onEvent: (ev: ServerEvent) => void
  onState: (state: ConnState, retryInMs: number | null) => void
  onOpen: () => void
}

export class ChatSocket {
  private ws: WebSocket | null = null
  private attempt = 0
  private retryTimer: ReturnType<typeof setTimeout> | null = null
  private pingTimer: ReturnType<typeof setInterval> | null = null
  private closed = false
  private readonly url: string
  private readonly h: SocketHandlers

  constructor(url: string, handlers: SocketHandlers) {
    this.url = url
    this.h = handlers
  }

  connect(): void {
    if (this.closed) return
    this.clearRetry()
    this.h.onState('connecting', null)
    let ws: WebSocket
    try {
      ws = new WebSocket(this.url)
    } catch {
      this.h.onState('error', null)
      this.scheduleReconnect()
      return
    }
    this.ws = ws
    ws.onopen = () => {
      if (this.ws !== ws) return
      this.attempt = 0
      this.h.onState('connected', null)
      this.pingTimer = setInterval(() => this.send({ type: 'ping' }), PING_INTERVAL_MS)
      this.h.onOpen()
    }
    ws.onmessage = (msg) => {
      if (this.ws !== ws) return
      const ev = parseEvent(msg.data)
      if (ev) this.h.onEvent(ev)
    }
    ws.onerror = () => {
      if (this.ws !== ws) return
      this.h.onState('error', null)
    }
    ws.onclose = () => {
      if (this.ws !== ws) return
      this.ws = null
      this.stopPing()
      if (this.closed) return
      this.scheduleReconnect()
    }
  }

  /** Sends a frame; false unless the socket is open (no queue: the caller reports it). */
  send(frame: object): boolean {
    const ws = this.ws
    if (!ws || ws.readyState !== WebSocket.OPEN) return false
    try {
      ws.send(JSON.stringify(frame))
      return true
    } catch {
      return false
    }
  }

  isOpen(): boolean {
    return this.ws?.readyState === WebSocket.OPEN
  }

  /** Skips the remaining backoff wait. */
  retryNow(): void {
    if (this.closed || this.ws) return
    this.attempt = 0
    this.connect()
  }

  close(): void {
    this.closed = true
    this.clearRetry()
    this.stopPing()
    const ws = this.ws
    this.ws = null
    ws?.close()
  }

  private scheduleReconnect(): void {
    const delay = backoffDelay(this.attempt)
    this.attempt += 1
    this.h.onState('disconnected', delay)
    this.clearRetry()
    this.retryTimer = setTimeout(() => this.connect(), delay)
  }

  private clearRetry(): void {
    if (this.retryTimer) clearTimeout(this.retryTimer)
    this.retryTimer = null
  }

  private stopPing(): void {
    if (this.pingTimer) clearInterval(this.pingTimer)
    this.pingTimer = null
  }
}
