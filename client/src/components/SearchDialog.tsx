// Search over every chat (docs/search.md §6): a dialog opened from the sidebar or with
// Ctrl/Cmd+K. Queries as the person types (debounced; a late answer to an older query is
// dropped), hits grouped by chat with the matched terms in <mark>, arrow keys and Enter to pick,
// "More results" pages on. Picking a hit hands it to the app, which opens the chat there.

import { useEffect, useRef, useState } from 'react'
import { Search as SearchIcon } from 'lucide-react'
import { useT, type MessageKey } from '../i18n'
import { api, describeError } from '../lib/api'
import { appendPage, groupByChat, searchPath, snippetParts, type SearchHit, type SearchResults } from '../lib/search'
import { Modal, Spinner } from './ui'

/** Quiet time after the last keystroke before a query goes out. */
const DEBOUNCE_MS = 200

/** The key that opens search, as this platform writes it. */
const SHORTCUT = /Mac|iPhone|iPad/.test(navigator.platform) ? '⌘K' : 'Ctrl+K'

const ROLE_KEYS: Record<string, MessageKey> = {
  user: 'search.role.user',
  assistant: 'search.role.assistant',
  tool_calls: 'search.role.tool_calls',
  tool: 'search.role.tool',
  title: 'search.role.title',
}

export function Snippet({ text }: { text: string }) {
  return (
    <>
      {snippetParts(text).map((p, i) =>
        p.mark ? (
          <mark key={i} className="rounded-sm bg-amber-400/25 px-0.5 text-amber-100">
            {p.text}
          </mark>
        ) : (
          <span key={i}>{p.text}</span>
        ),
      )}
    </>
  )
}

export function SearchDialog({ onClose, onOpen }: { onClose: () => void; onOpen: (hit: SearchHit) => void }) {
  const t = useT()
  const [query, setQuery] = useState('')
  const [hits, setHits] = useState<SearchHit[]>([])
  const [next, setNext] = useState<number | null>(null)
  const [busy, setBusy] = useState(false)
  const [error, setError] = useState<string | null>(null)
  const [active, setActive] = useState(0)
  /** the query the shown hits answer */
  const [answered, setAnswered] = useState('')
  const seq = useRef(0)
  const list = useRef<HTMLDivElement>(null)

  useEffect(() => {
    const q = query.trim()
    const mine = ++seq.current
    if (!q) {
      setHits([])
      setNext(null)
      setError(null)
      setBusy(false)
      setAnswered('')
      return
    }
    setBusy(true)
    const timer = window.setTimeout(() => {
      api
        .get<SearchResults>(searchPath(q))
        .then((res) => {
          if (mine !== seq.current) return
          setHits(Array.isArray(res?.hits) ? res.hits : [])
          setNext(typeof res?.next === 'number' ? res.next : null)
          setError(null)
          setActive(0)
          setAnswered(q)
        })
        .catch((e) => {
          if (mine === seq.current) setError(describeError(e))
        })
        .finally(() => {
          if (mine === seq.current) setBusy(false)
        })
    }, DEBOUNCE_MS)
    return () => window.clearTimeout(timer)
  }, [query])

  const more = () => {
    if (next === null || busy) return
    const mine = seq.current
    setBusy(true)
    api
      .get<SearchResults>(searchPath(answered, next))
      .then((res) => {
        if (mine !== seq.current) return
        setHits((shown) => appendPage(shown, Array.isArray(res?.hits) ? res.hits : []))
        setNext(typeof res?.next === 'number' ? res.next : null)
      })
      .catch((e) => {
        if (mine === seq.current) setError(describeError(e))
      })
      .finally(() => {
        if (mine === seq.current) setBusy(false)
      })
  }

  const groups = groupByChat(hits)
  // The flat order the arrow keys walk: as shown, group by group.
  const order = groups.flatMap((g) => g.hits)
  const onKey = (e: React.KeyboardEvent) => {
    if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
      e.preventDefault()
      if (!order.length) return
      const i = (active + (e.key === 'ArrowDown' ? 1 : order.length - 1)) % order.length
      setActive(i)
      list.current?.querySelector(`[data-index="${i}"]`)?.scrollIntoView({ block: 'nearest' })
    } else if (e.key === 'Enter' && order[active]) {
      e.preventDefault()
      onOpen(order[active])
    }
  }

  let index = 0
  return (
    <Modal title={t('search.title')} onClose={onClose} wide>
      <div className="flex flex-col gap-3">
        <label className="flex items-center gap-2 rounded-lg border border-zinc-700 bg-zinc-900 px-3 py-2 focus-within:border-zinc-500">
          <SearchIcon size={16} className="shrink-0 text-zinc-500" />
          <input
            type="search"
            value={query}
            onChange={(e) => setQuery(e.target.value)}
            onKeyDown={onKey}
            aria-label={t('search.input')}
            placeholder={t('search.placeholder')}
            className="min-w-0 flex-1 bg-transparent text-[15px] text-zinc-100 outline-none placeholder:text-zinc-500"
            data-testid="search-input"
            maxLength={1000}
            autoComplete="off"
          />
          {busy && <Spinner size={14} className="shrink-0 text-zinc-400" />}
        </label>
        <div role="status" className="text-xs text-zinc-500" data-testid="search-status">
          {error
            ? null
            : !query.trim()
              ? t('search.hint', { shortcut: SHORTCUT })
              : busy && !answered
                ? t('search.searching')
                : answered && !hits.length && !busy
                  ? t('search.none', { query: answered })
                  : hits.length
                    ? t('search.results', { count: hits.length })
                    : null}
        </div>
        {error && (
          <div role="alert" className="rounded-md border border-red-900/60 bg-red-950/40 px-3 py-2 text-sm text-red-300">
            {t('search.failed', { error })}
          </div>
        )}
        <div ref={list} className="space-y-4" data-testid="search-results">
          {groups.map((g) => (
            <section key={g.chatId} aria-label={g.title} data-testid="search-group" data-chat-id={g.chatId}>
              <h3 className="mb-1 truncate text-xs font-semibold tracking-wide text-zinc-400">{g.title}</h3>
              <ul className="space-y-1">
                {g.hits.map((h) => {
                  const i = index++
                  return (
                    <li key={`${h.chat_id}:${h.cursor}:${h.role}`}>
                      <button
                        type="button"
                        data-index={i}
                        data-active={i === active ? 'true' : undefined}
                        data-testid="search-hit"
                        data-cursor={h.cursor}
                        onMouseEnter={() => setActive(i)}
                        onClick={() => onOpen(h)}
                        className={`w-full rounded-md px-3 py-2 text-left text-sm ${
                          i === active ? 'bg-zinc-800 text-zinc-100' : 'text-zinc-300 hover:bg-zinc-800/60'
                        }`}
                      >
                        <div className="mb-0.5 flex items-center gap-2 text-[11px] text-zinc-500">
                          <span>{ROLE_KEYS[h.role] ? t(ROLE_KEYS[h.role]) : h.role}</span>
                          {h.timestamp && <span>{h.timestamp}</span>}
                        </div>
                        <div className="break-words" data-testid="search-snippet">
                          <Snippet text={h.snippet} />
                        </div>
                      </button>
                    </li>
                  )
                })}
              </ul>
            </section>
          ))}
        </div>
        {next !== null && (
          <button
            type="button"
            onClick={more}
            disabled={busy}
            className="self-center rounded-full border border-zinc-800 px-3 py-1 text-xs text-zinc-400 hover:bg-zinc-900 disabled:opacity-50"
            data-testid="search-more"
          >
            {t('search.more')}
          </button>
        )}
      </div>
    </Modal>
  )
}
