import { useEffect, useState } from 'react'
import { Menu, RotateCw } from 'lucide-react'
import { useT, type MessageKey } from '../i18n'
import type { ConnState } from '../lib/chatStore'
import { Logo } from './Logo'

const DOT: Record<ConnState, string> = {
  connected: 'bg-emerald-500 shadow-[0_0_8px] shadow-emerald-500/60',
  connecting: 'bg-amber-400 animate-pulse',
  disconnected: 'bg-zinc-500',
  error: 'bg-red-500',
}

const WORD: Record<ConnState, MessageKey> = {
  connected: 'title.conn.connected',
  connecting: 'title.conn.connecting',
  disconnected: 'title.conn.disconnected',
  error: 'title.conn.error',
}

export function TitleBar({
  conn,
  retryIn,
  onMenu,
  onRetry,
}: {
  conn: ConnState
  retryIn: number | null
  onMenu: () => void
  onRetry: () => void
}) {
  const t = useT()
  // Counts down to the next reconnect attempt so the wait is visible.
  const [now, setNow] = useState(() => Date.now())
  const [retryAt, setRetryAt] = useState<number | null>(null)
  useEffect(() => {
    setRetryAt(retryIn === null ? null : Date.now() + retryIn)
    setNow(Date.now())
  }, [retryIn, conn])
  useEffect(() => {
    if (retryAt === null) return
    const timer = setInterval(() => setNow(Date.now()), 500)
    return () => clearInterval(timer)
  }, [retryAt])
  const secs = retryAt === null ? null : Math.max(0, Math.ceil((retryAt - now) / 1000))
  return (
    <header className="flex h-11 shrink-0 items-center gap-2 border-b border-zinc-800/80 bg-panel px-3">
      <button
        type="button"
        onClick={onMenu}
        aria-label={t('title.openMenu')}
        className="rounded-md p-1.5 text-zinc-400 hover:bg-zinc-800 hover:text-zinc-100 sm:hidden"
      >
        <Menu size={18} />
      </button>
      <Logo size={22} />
      <span className="text-[15px] font-semibold tracking-tight text-zinc-100">CashCode</span>
      <div className="ml-auto flex items-center gap-2 text-xs text-zinc-400" data-testid="conn-state" data-state={conn}>
        {conn === 'disconnected' && secs !== null && (
          <button
            type="button"
            onClick={onRetry}
            className="flex items-center gap-1 rounded px-1.5 py-0.5 text-zinc-500 hover:bg-zinc-800 hover:text-zinc-200"
            title={t('title.reconnectNow')}
          >
            <RotateCw size={12} /> {t('title.retryIn', { secs })}
          </button>
        )}
        <span className={`h-2 w-2 rounded-full ${DOT[conn]}`} />
        <span>{t(WORD[conn])}</span>
      </div>
    </header>
  )
}
