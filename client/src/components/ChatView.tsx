// The chat transcript (streaming Markdown, tool progress blocks, inline errors) and its composer.

import { useEffect, useLayoutEffect, useRef, useState } from 'react'
import { formatTokens, loadContext } from '../lib/usage'
import { AlertTriangle, ArrowDown, Ban, Check, CircleStop, Copy, Network, RotateCcw, Sparkles, TimerOff, Undo2, Wrench, X } from 'lucide-react'
import { useT, type MessageKey } from '../i18n'
import type { ChatData, ChatMessage, ToolBlock } from '../lib/chatStore'
import { buildMessageFrame, type LlmChoice, type MessageFrame, type Selection } from '../lib/selections'
import type { LlmSettings } from '../lib/types'
import { Composer } from './Composer'
import { Logo } from './Logo'
import { Markdown, PlainText, RenderBoundary } from './Markdown'
import { Thinking } from './Thinking'
import { RewindDialog } from './RewindDialog'
import { RewindMarker } from './RewindMarker'
import { loadRewindMark, saveRewindMark, type RewindDone, type UndoReport } from '../lib/rewind'
import { Button, Spinner, useCopy } from './ui'

export function Chips({ selections, onRemove }: { selections: Selection[]; onRemove?: (s: Selection) => void }) {
  const t = useT()
  return (
    <div className="flex flex-wrap gap-1.5" data-testid="chips">
      {selections.map((s) => {
        const skill = s.kind === 'skill'
        return (
          <span
            key={`${s.kind}:${s.id}`}
            data-testid={skill ? 'chip-skill' : 'chip-mcp'}
            className={`inline-flex max-w-full items-center gap-1 rounded-full border px-2 py-0.5 text-xs ${
              skill
                ? 'border-amber-700/60 bg-amber-500/10 text-amber-300'
                : 'border-cyan-700/60 bg-cyan-500/10 text-cyan-300'
            }`}
          >
            {skill ? <Sparkles size={11} /> : <Network size={11} />}
            <span className="truncate">{s.label || s.id}</span>
            {onRemove && (
              <button
                type="button"
                aria-label={t('chat.removeChip', { name: s.label || s.id })}
                onClick={() => onRemove(s)}
                className="-mr-0.5 rounded-full px-1 leading-none hover:bg-white/10"
              >
                ×
              </button>
            )}
          </span>
        )
      })}
    </div>
  )
}

/** What a call works on, in one line: `exec`'s command, else the argument that names a thing
 * (a path, a pattern, a URL, a query), else the arguments as JSON. */
function callSummary(block: ToolBlock): string {
  const a = block.args
  if (!a) return ''
  for (const k of ['command', 'path', 'pattern', 'url', 'query', 'name']) {
    if (typeof a[k] === 'string' && a[k]) return a[k] as string
  }
  const json = JSON.stringify(a)
  return json === '{}' ? '' : json
}

const OUTCOME_STYLE: Record<string, { icon: typeof Check; color: string; key: MessageKey }> = {
  ok: { icon: Check, color: 'text-emerald-400', key: 'tool.outcome.ok' },
  error: { icon: X, color: 'text-red-400', key: 'tool.outcome.error' },
  failed: { icon: X, color: 'text-red-400', key: 'tool.outcome.failed' },
  denied: { icon: Ban, color: 'text-amber-400', key: 'tool.outcome.denied' },
  timeout: { icon: TimerOff, color: 'text-amber-400', key: 'tool.outcome.timeout' },
}

const RAN_KEYS: Record<string, MessageKey> = {
  approved_once: 'tool.ran.approvedOnce',
  approved_for_chat: 'tool.ran.approvedForChat',
  chat_grant: 'tool.ran.chatGrant',
  unasked: 'tool.ran.unasked',
}

/** One tool call: its outcome (✓, ✗, ⊘ declined, timed out), what it worked on, a chip when
 * it ran outside the sandbox and how it got there, and its output to expand. */
function ToolBlockView({ block }: { block: ToolBlock }) {
  const t = useT()
  const result = (block.result ?? '').trim()
  const preview = result.replace(/\s+/g, ' ').slice(0, 120)
  const summary = callSummary(block)
  const outcome = OUTCOME_STYLE[block.outcome ?? 'ok'] ?? OUTCOME_STYLE.error
  const Icon = outcome.icon
  const ranKey = block.ran ? RAN_KEYS[block.ran] : undefined
  return (
    <div
      className="rounded-lg border border-zinc-800 bg-zinc-900/60 px-3 py-2 text-sm"
      data-testid="tool-block"
      data-done={block.done ? 'true' : 'false'}
      data-outcome={block.done ? (block.outcome ?? 'ok') : undefined}
      data-ran={block.ran}
      data-call-id={block.callId ?? undefined}
    >
      <div className="flex min-w-0 flex-wrap items-center gap-x-2 gap-y-1">
        <Wrench size={14} className="shrink-0 text-zinc-500" />
        <span className="shrink-0 font-mono text-[13px] text-zinc-200">{block.toolName}</span>
        {block.done ? (
          <Icon size={15} className={`shrink-0 ${outcome.color}`} aria-label={t(outcome.key)} role="img" data-testid="tool-outcome" />
        ) : (
          <Spinner size={14} className="shrink-0 text-sky-400" />
        )}
        {block.done && block.outcome && block.outcome !== 'ok' && (
          <span className={`shrink-0 text-xs ${outcome.color}`}>{t(outcome.key)}</span>
        )}
        {ranKey && (
          <span
            className="shrink-0 rounded-full border border-amber-500/40 bg-amber-500/10 px-2 py-0.5 text-[11px] text-amber-300"
            data-testid="tool-ran"
          >
            {t(ranKey)}
          </span>
        )}
        {summary && (
          <code className="min-w-0 flex-1 truncate font-mono text-xs text-zinc-400" title={summary} data-testid="tool-args">
            {summary}
          </code>
        )}
      </div>
      {block.done && result && (
        <details className="mt-1 min-w-0">
          <summary className="cursor-pointer truncate font-mono text-xs text-zinc-500 select-none" data-testid="tool-result">
            {preview}
          </summary>
          <pre className="mt-1 max-h-64 overflow-auto font-mono text-xs break-words whitespace-pre-wrap text-zinc-400" data-testid="tool-output">
            {result}
          </pre>
        </details>
      )}
    </div>
  )
}

/** Copy, the time the message arrived, the turn's duration, (last answer only) Regenerate, and
 * (user messages of an idle chat) Rewind to here. */
function MessageActions({ m, onRegenerate, onRewind }: { m: ChatMessage; onRegenerate?: () => void; onRewind?: () => void }) {
  const t = useT()
  const { copied, copy: copyText } = useCopy()
  const copy = () => copyText(m.content)
  const at = m.at ? new Date(m.at) : null
  const btn = 'rounded p-1 text-zinc-500 hover:bg-zinc-800 hover:text-zinc-200 focus-visible:text-zinc-200'
  return (
    <div
      className={`flex items-center gap-1 text-[11px] text-zinc-500 ${m.role === 'user' ? 'justify-end' : ''}`}
      data-testid="msg-actions"
    >
      {m.content && (
        <button type="button" className={btn} onClick={copy} aria-label={t('chat.copyMessage')} title={t('chat.copyMessage')} data-testid="copy-message">
          {copied ? <Check size={13} className="text-emerald-400" /> : <Copy size={13} />}
        </button>
      )}
      {copied && <span role="status">{t('chat.copied')}</span>}
      {onRegenerate && (
        <button type="button" className={btn} onClick={onRegenerate} aria-label={t('chat.regenerate')} title={t('chat.regenerate')} data-testid="regenerate">
          <RotateCcw size={13} />
        </button>
      )}
      {onRewind && (
        <button type="button" className={btn} onClick={onRewind} aria-label={t('rewind.action')} title={t('rewind.action')} data-testid="rewind-here">
          <Undo2 size={13} />
        </button>
      )}
      {at && (
        <time dateTime={at.toISOString()} title={at.toLocaleString()} className="px-1" data-testid="msg-time">
          {at.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' })}
        </time>
      )}
      {m.durationSec !== undefined && (
        <span data-testid="msg-duration">{t('chat.duration', { seconds: m.durationSec.toFixed(1) })}</span>
      )}
      {m.usage && (
        <span
          className="px-1 opacity-0 transition-opacity group-focus-within:opacity-100 group-hover:opacity-100"
          title={t('usage.tokensTitle', {
            input: String(m.usage.input),
            cached: String(m.usage.cached),
            output: String(m.usage.output),
            reasoning: String(m.usage.reasoning),
          })}
          data-testid="msg-tokens"
          data-input={m.usage.input}
          data-output={m.usage.output}
        >
          {t('usage.tokens', { input: formatTokens(m.usage.input), output: formatTokens(m.usage.output) })}
        </span>
      )}
    </div>
  )
}

function MessageView({ m, onRegenerate, onRewind }: { m: ChatMessage; onRegenerate?: () => void; onRewind?: () => void }) {
  const t = useT()
  if (m.role === 'user') {
    return (
      <div className="group flex flex-col items-end gap-1.5" data-testid="msg-user">
        {m.selections && m.selections.length > 0 && <Chips selections={m.selections} />}
        <div
          className="max-w-[90%] rounded-2xl rounded-br-md bg-zinc-800 px-4 py-2.5 text-[15px] whitespace-pre-wrap text-zinc-100 sm:max-w-[75%]"
          data-testid="msg-text"
        >
          {m.content}
        </div>
        <MessageActions m={m} onRewind={onRewind} />
      </div>
    )
  }
  if (m.role === 'notice') {
    const error = m.tone === 'error'
    return (
      <div
        data-testid={error ? 'msg-error' : 'msg-notice'}
        role={error ? 'alert' : undefined}
        className={`flex items-start gap-2 rounded-lg border px-3 py-2 text-sm ${
          error ? 'border-red-900/60 bg-red-950/30 text-red-300' : 'border-zinc-800 bg-zinc-900/40 text-zinc-400'
        }`}
      >
        {error ? <AlertTriangle size={15} className="mt-0.5 shrink-0" /> : <CircleStop size={15} className="mt-0.5 shrink-0" />}
        <span className="min-w-0 break-words">{m.textKey ? t(m.textKey, m.textParams) : m.content}</span>
        {error && onRegenerate && (
          <button type="button" onClick={onRegenerate} className="ml-auto shrink-0 rounded px-1.5 text-xs hover:bg-red-900/40" data-testid="regenerate">
            <RotateCcw size={12} className="mr-1 inline" aria-hidden />
            {t('chat.regenerate')}
          </button>
        )}
      </div>
    )
  }
  return (
    <div className="group space-y-2" data-testid="msg-assistant" data-streaming={m.streaming ? 'true' : 'false'}>
      {m.tools && m.tools.length > 0 && (
        <div className="space-y-1.5">
          {m.tools.map((tool) => (
            <ToolBlockView key={tool.key} block={tool} />
          ))}
        </div>
      )}
      <Thinking m={m} />
      {(m.content || m.streaming) && <Markdown text={m.content} streaming={m.streaming} />}
      {!m.streaming && <MessageActions m={m} onRegenerate={onRegenerate} />}
    </div>
  )
}

/** A message whose rendering throws shows its plain text instead of unmounting the app. */
function SafeMessage({ m, onRegenerate, onRewind }: { m: ChatMessage; onRegenerate?: () => void; onRewind?: () => void }) {
  const t = useT()
  return (
    <RenderBoundary
      resetKey={`${m.content.length}:${m.streaming ? 1 : 0}:${m.tools?.length ?? 0}`}
      fallback={
        <div data-testid={`msg-${m.role}`} className="text-[15px] text-zinc-200">
          <p className="mb-1 text-xs text-zinc-500">{t('chat.renderFailed')}</p>
          <PlainText text={m.content} />
        </div>
      }
    >
      <MessageView m={m} onRegenerate={onRegenerate} onRewind={onRewind} />
    </RenderBoundary>
  )
}

function FirstRun({ onOpenSettings }: { onOpenSettings: () => void }) {
  const t = useT()
  return (
    <div className="mx-auto mt-6 max-w-md rounded-xl border border-amber-800/50 bg-amber-950/20 p-4 text-sm" data-testid="first-run">
      <p className="font-medium text-amber-200">{t('chat.firstRunTitle')}</p>
      <p className="mt-1 text-amber-100/70">{t('chat.firstRunBody')}</p>
      <Button variant="primary" className="mt-3" onClick={onOpenSettings}>
        {t('chat.openSettings')}
      </Button>
    </div>
  )
}

export function ChatView(props: {
  chatId: string | null
  chat: ChatData | undefined
  generating: boolean
  connected: boolean
  llm: LlmSettings | null
  llmVersion: number
  onOpenSettings: () => void
  onSend: (frame: MessageFrame, selections: Selection[]) => boolean
  onCancel: (chatId: string) => void
  queued?: string[]
  onUnqueue?: (index: number) => void
  /** asks for the page of history before the loaded one */
  onLoadOlder?: (chatId: string) => void
  loadingOlder?: boolean
  /** a new chat was asked for and is not open yet: a message sent now would land in this one */
  awaitingChat?: boolean
  /** a search hit to show: the message holding the record with this cursor is scrolled to and
   * highlighted, paging back as needed; `onJumpDone` says whether it was found */
  jumpTo?: { cursor: number; nonce: number } | null
  onJumpDone?: (found: boolean) => void
}) {
  const t = useT()
  const { chatId, chat, generating, onCancel } = props
  const messages = chat?.messages ?? []
  const [choice, setChoice] = useState<LlmChoice | null>(null)
  // Rewind: the chosen user message, counted from the end (the server's index is looked up then).
  const [rewindFrom, setRewindFrom] = useState<number | null>(null)
  // The last rewind of this chat, marked in the transcript with its Undo until the chat goes on.
  const [mark, setMarkState] = useState<{ chatId: string | null; done: RewindDone | null }>({ chatId: null, done: null })
  const markDone = mark.chatId === chatId ? mark.done : chatId ? loadRewindMark(chatId) : null
  const setMark = (done: RewindDone | null) => {
    if (chatId) saveRewindMark(chatId, done)
    setMarkState({ chatId, done })
  }
  const [undoPreview, setUndoPreview] = useState<UndoReport | null>(null)
  // "Rewind undone." stays under the transcript until the chat goes on.
  const [undoneNote, setUndoneNote] = useState<string | null>(null)
  const undone = () => {
    // The turn is back in the chat: its message no longer waits in the composer.
    if (markDone && typeof markDone.messages === 'number') setPrefill({ text: '', nonce: Date.now() })
    setMark(null)
    setUndoneNote(chatId)
  }
  const [prefill, setPrefill] = useState<{ text: string; nonce: number } | null>(null)
  const usersAfter: number[] = []
  {
    let seen = 0
    for (let i = messages.length - 1; i >= 0; i--) {
      usersAfter[i] = seen
      if (messages[i].role === 'user') seen++
    }
  }
  const canRewind = !generating && props.connected && Boolean(chat?.loaded)
  useEffect(() => {
    // A new turn: the rewind can no longer be undone.
    if (generating && chatId && loadRewindMark(chatId)) {
      saveRewindMark(chatId, null)
      setMarkState({ chatId, done: null })
    }
    if (generating) setUndoneNote(null)
  }, [generating, chatId])

  // Esc stops the running turn wherever focus is, unless something else (a dialog, the picker)
  // used the key first.
  useEffect(() => {
    if (!generating || !chatId) return
    const onKey = (e: KeyboardEvent) => {
      if (e.key !== 'Escape' || e.defaultPrevented || document.querySelector('[role="dialog"]')) return
      // Escape in a field of its own (e.g. cancelling a rename) or in a menu means that, not Stop.
      if (e.target instanceof Element && e.target.closest('input, select, [role="menu"]')) return
      onCancel(chatId)
    }
    window.addEventListener('keydown', onKey)
    return () => window.removeEventListener('keydown', onKey)
  }, [generating, chatId, onCancel])

  // Regenerate = the last user message sent again as a new turn (the server has no regenerate
  // frame; the history keeps both turns). Offered on the last answer or error of an idle chat.
  let lastUser = -1
  for (let i = messages.length - 1; i >= 0; i--) {
    if (messages[i].role === 'user') {
      lastUser = i
      break
    }
  }
  let regenerateAt = -1
  for (let i = messages.length - 1; i > lastUser && lastUser >= 0; i--) {
    const role = messages[i].role
    if (role === 'assistant' || (role === 'notice' && messages[i].tone === 'error')) {
      regenerateAt = i
      break
    }
  }
  const regenerate = () => {
    const u = messages[lastUser]
    if (!chatId || !u || !choice || generating) return
    props.onSend(buildMessageFrame(chatId, u.content, choice, u.selections ?? []), u.selections ?? [])
  }
  const canRegenerate = !generating && props.connected && choice !== null
  const scroller = useRef<HTMLDivElement>(null)
  const [following, setFollowing] = useState(true)
  const followRef = useRef(true)

  // Reset following on chat switch.
  useEffect(() => {
    followRef.current = true
    setFollowing(true)
  }, [chatId])

  const last = messages[messages.length - 1]
  const contentKey = `${messages.length}:${last?.content.length ?? 0}:${last?.tools?.length ?? 0}:${
    last?.tools?.filter((t) => t.done).length ?? 0
  }`
  const lastTop = useRef(0)
  useLayoutEffect(() => {
    const el = scroller.current
    if (!el || !followRef.current) return
    // Small increments glide; a chat switch or a history load jumps.
    const distance = el.scrollHeight - el.scrollTop - el.clientHeight
    el.scrollTo({ top: el.scrollHeight, behavior: distance < 400 ? 'smooth' : 'auto' })
  }, [contentKey, chatId, messages.length])

  // Scroll-back: near the top with older pages on the server, ask for the previous one; when it
  // lands above, keep the reader's place (the content grew by exactly the new height).
  const hasOlder = Boolean(chat?.loaded && (chat?.historyStart ?? 0) > 0)
  const firstId = messages[0]?.id
  const anchor = useRef<{ firstId?: string; height: number; top: number } | null>(null)
  const askOlder = () => {
    const el = scroller.current
    if (!el || !chatId || !hasOlder || props.loadingOlder) return
    anchor.current = { firstId, height: el.scrollHeight, top: el.scrollTop }
    props.onLoadOlder?.(chatId)
  }
  useLayoutEffect(() => {
    const el = scroller.current
    const a = anchor.current
    if (!el || !a || a.firstId === firstId) return
    anchor.current = null
    el.scrollTop = a.top + (el.scrollHeight - a.height)
    lastTop.current = el.scrollTop
  }, [firstId])

  // A search hit: find its message (paging back until it is loaded or the history starts),
  // then scroll it to the middle and mark it.
  const [highlightId, setHighlightId] = useState<string | null>(null)
  const { jumpTo, onJumpDone, onLoadOlder, loadingOlder } = props
  useEffect(() => setHighlightId(null), [chatId])
  useEffect(() => {
    if (!jumpTo || !chatId || !chat?.loaded) return
    const target = (chat.messages ?? []).find((m) => m.cursors?.includes(jumpTo.cursor))
    if (target) {
      followRef.current = false
      setFollowing(false)
      setHighlightId(target.id)
      onJumpDone?.(true)
      return
    }
    const older = (chat.historyStart ?? 0) > 0
    if (older) {
      if (!loadingOlder) onLoadOlder?.(chatId)
    } else {
      onJumpDone?.(false)
    }
  }, [jumpTo, chatId, chat, loadingOlder, onLoadOlder, onJumpDone])
  useLayoutEffect(() => {
    if (!highlightId) return
    const el = scroller.current?.querySelector(`[data-msg-id="${highlightId}"]`)
    if (el instanceof HTMLElement) el.scrollIntoView({ block: 'center' })
  }, [highlightId])

  const onScroll = () => {
    const el = scroller.current
    if (!el) return
    if (el.scrollTop < 120 && hasOlder) askOlder()
    const distance = el.scrollHeight - el.scrollTop - el.clientHeight
    const movedUp = el.scrollTop < lastTop.current - 1
    lastTop.current = el.scrollTop
    // Only the reader scrolling up stops following; our own smooth scroll only moves down.
    const f = movedUp ? distance <= 80 : followRef.current || distance <= 80
    if (f !== followRef.current) {
      followRef.current = f
      setFollowing(f)
    }
  }

  const jump = () => {
    followRef.current = true
    setFollowing(true)
    scroller.current?.scrollTo({ top: scroller.current.scrollHeight, behavior: 'smooth' })
  }

  const marker =
    chatId && markDone ? (
      <RewindMarker
        chatId={chatId}
        done={markDone}
        disabled={!canRewind}
        onConflicts={setUndoPreview}
        onUndone={undone}
        onDismiss={() => setMark(null)}
      />
    ) : null
  const empty = messages.length === 0
  const unconfigured = props.llm !== null && !props.llm.configured

  return (
    <div className="relative flex h-full flex-col">
      <div ref={scroller} onScroll={onScroll} className="min-h-0 flex-1 overflow-y-auto" data-testid="transcript">
        {empty ? (
          <div className="flex h-full flex-col items-center justify-center px-4 pb-10">
            <Logo size={120} className="opacity-90" />
            <p className="mt-4 text-sm text-zinc-500">{t('chat.emptyHint')}</p>
            {marker && <div className="mt-6 w-full max-w-3xl px-4">{marker}</div>}
            {unconfigured && <FirstRun onOpenSettings={props.onOpenSettings} />}
          </div>
        ) : (
          <div className="mx-auto w-full max-w-3xl space-y-5 px-4 py-6">
            {unconfigured && <FirstRun onOpenSettings={props.onOpenSettings} />}
            {hasOlder && (
              <div className="flex justify-center" data-testid="older-history">
                {props.loadingOlder ? (
                  <span className="flex items-center gap-2 text-xs text-zinc-500">
                    <Spinner size={12} /> {t('chat.history.loading')}
                  </span>
                ) : (
                  <button
                    type="button"
                    onClick={askOlder}
                    className="rounded-full border border-zinc-800 px-3 py-1 text-xs text-zinc-400 hover:bg-zinc-900"
                  >
                    {t('chat.history.older')}
                  </button>
                )}
              </div>
            )}
            {/* A log region: screen readers announce new messages, once the streamed text settles. */}
            <div role="log" aria-live="polite" aria-busy={generating} className="space-y-5">
              {messages.map((m, i) => (
                <div
                  key={m.id}
                  data-msg-id={m.id}
                  data-highlighted={m.id === highlightId ? 'true' : undefined}
                  className={m.id === highlightId ? 'rounded-xl ring-2 ring-amber-400/60 ring-offset-4 ring-offset-page' : undefined}
                >
                  <SafeMessage
                    m={m}
                    onRegenerate={i === regenerateAt && canRegenerate ? regenerate : undefined}
                    onRewind={m.role === 'user' && canRewind ? () => setRewindFrom(usersAfter[i]) : undefined}
                  />
                </div>
              ))}
            </div>
            {marker}
            {undoneNote === chatId && (
              <p role="status" className="text-center text-xs text-zinc-400" data-testid="rewind-undone">
                {t('rewind.undone')}
              </p>
            )}
          </div>
        )}
      </div>
      {!following && !empty && (
        <button
          type="button"
          onClick={jump}
          className="absolute bottom-36 left-1/2 z-10 flex -translate-x-1/2 items-center gap-1 rounded-full border border-zinc-700 bg-zinc-900/95 px-3 py-1 text-xs text-zinc-300 shadow-lg hover:bg-zinc-800"
        >
          <ArrowDown size={13} /> {t('chat.jumpLatest')}
        </button>
      )}
      {rewindFrom !== null && chatId && (
        <RewindDialog
          mode="rewind"
          chatId={chatId}
          fromEnd={rewindFrom}
          onClose={() => setRewindFrom(null)}
          onRewound={(done, chat) => {
            setMark(done)
            if (chat) setPrefill({ text: done.message, nonce: Date.now() })
          }}
        />
      )}
      {undoPreview && chatId && (
        <RewindDialog
          mode="undo"
          chatId={chatId}
          preview={undoPreview}
          onClose={() => setUndoPreview(null)}
          onUndone={undone}
        />
      )}
      <Composer
        prefill={prefill}
        chatId={props.awaitingChat ? null : chatId}
        generating={props.generating}
        connected={props.connected}
        llmVersion={props.llmVersion}
        onSend={props.onSend}
        onCancel={props.onCancel}
        onChoice={setChoice}
        queued={props.queued}
        onUnqueue={props.onUnqueue}
        context={chatId ? (props.chat?.context ?? loadContext(chatId)) : null}
      />
    </div>
  )
}
