// The chat state machine: sessions, the active chat, transcripts, per-chat generating flags and
// per-chat event sequence numbers. `reduce` is pure; App feeds it WebSocket events and HTTP results.

import { tr, type MessageKey } from '../i18n'
import { addCounts, formatTokens, usageFromEvent, type ContextFill, type TokenCounts } from './usage'
import { startGenerating, stopGenerating, type GeneratingMap } from './generation'
import { approvalFromEvent, type Approval } from './approvals'
import { fromEvent, type Elicitation } from './elicitation'
import { normaliseReceipts, type Selection } from './selections'
import { codedKey, codedText } from './codes'
import type { HistoryMessage, SessionInfo } from './types'

export interface ToolBlock {
  key: string
  callId: string | null
  streamId: number | string | null
  toolName: string
  done: boolean
  result?: string
  /** the call's arguments (`tool_call.arguments`, or the stored call's JSON) */
  args?: Record<string, unknown>
  /** how it ended: ok, error, denied, timeout, failed (`tool_result.outcome`; absent: ok) */
  outcome?: string
  /** how a call outside the sandbox got there (`tool_result.ran`) */
  ran?: string
}

/** A call's arguments as an object: the event's object, or the stored JSON text. */
function argsOf(v: unknown): Record<string, unknown> | undefined {
  let o = v
  if (typeof v === 'string') {
    try {
      o = JSON.parse(v)
    } catch {
      return undefined
    }
  }
  return o && typeof o === 'object' && !Array.isArray(o) ? (o as Record<string, unknown>) : undefined
}

export type MessageRole = 'user' | 'assistant' | 'notice'

export interface ChatMessage {
  id: string
  role: MessageRole
  content: string
  streaming?: boolean
  tools?: ToolBlock[]
  selections?: Selection[]
  /** notices: an inline turn error or a "stopped" marker */
  tone?: 'error' | 'muted'
  /** when this page saw the message start (epoch ms); history carries no times */
  at?: number
  /** assistant: the turn's `done.duration_sec` */
  durationSec?: number
  /** assistant: the model's reasoning (`reasoning` events; history's `reasoning_content`), never part of `content` */
  reasoning?: string
  /** assistant: milliseconds spent reasoning (history's `reasoning_ms`, or measured live) */
  reasoningMs?: number
  /** assistant, live: when the current run of reasoning began (epoch ms) */
  reasoningSince?: number
  /** a notice in the client's own words: shown in the language on screen, even after a switch */
  textKey?: MessageKey
  /** history: the cursors of the records shown as this message (a tool step's fold into the
   * answer after it), so a search hit finds its message */
  cursors?: number[]
  /** user: sent from this tab, not yet tied to its turn (`turn_started`) */
  awaitsTurn?: boolean
  /** user: the `stream_id` of the turn answering it */
  streamId?: number | string | null
  /** `textKey`'s parameters */
  textParams?: Record<string, string | number>
  /** assistant, live: the tokens of the turn's model calls (`usage` events) */
  usage?: TokenCounts
}

export interface ChatData {
  messages: ChatMessage[]
  loaded: boolean
  /** highest event seq applied; events at or below it are duplicates from a replay */
  lastSeq?: number
  /** an attach with `after_seq` is in flight: its replay must apply on top of what we have */
  resume?: boolean
  /** an `attach` of ours is unanswered: its `attached` is not the answer to a `new_chat` */
  attaching?: boolean
  /** a seq was skipped (the server's replay buffer overflowed): reload once the turn ends */
  gap?: boolean
  /** the persisted items loaded so far (newest pages first fetched), oldest first */
  historyItems?: HistoryMessage[]
  /** how many of `messages` were built from `historyItems` (they lead the list) */
  historyCount?: number
  /** index of the first loaded item in the whole history; above 0 there are older pages */
  historyStart?: number
  /** how full the context was after the last model call seen live */
  context?: ContextFill
}

export type ConnState = 'connecting' | 'connected' | 'disconnected' | 'error'

export interface State {
  sessions: SessionInfo[]
  sessionsLoaded: boolean
  activeChatId: string | null
  chats: Record<string, ChatData>
  generating: GeneratingMap
  banner: string | null
  /** a `new_chat` is in flight: the next `attached` becomes the active chat */
  awaitingNewChat: boolean
  /** that `new_chat` names a project, so the server may refuse it with a chat-less `error` */
  awaitingProjectChat: boolean
  /** MCP forms waiting for an answer, by chat (opened by `elicitation`, closed by `elicitation_end`) */
  elicitations: Record<string, Elicitation[]>
  /** tool calls waiting for the owner's approval, by chat (`approval_request` … `approval_end`) */
  approvals: Record<string, Approval[]>
  /** chats the server says wait for the owner (`ready.waiting`, the sessions list, `waiting`
   * events), also those this page never opened */
  waitingChats: Record<string, true>
}

export const initialState: State = {
  sessions: [],
  sessionsLoaded: false,
  activeChatId: null,
  chats: {},
  generating: {},
  banner: null,
  awaitingNewChat: false,
  awaitingProjectChat: false,
  elicitations: {},
  approvals: {},
  waitingChats: {},
}

export type ServerEvent = { event: string; [k: string]: unknown }

export type Action =
  | { type: 'ws'; ev: ServerEvent }
  | { type: 'sessions'; sessions: SessionInfo[] }
  | { type: 'history'; chatId: string; messages: HistoryMessage[]; start?: number }
  | { type: 'olderHistory'; chatId: string; messages: HistoryMessage[]; start: number }
  | { type: 'select'; chatId: string }
  | { type: 'newChatRequested'; project?: string }
  | { type: 'sent'; chatId: string; content: string; selections: Selection[] }
  | { type: 'renamed'; chatId: string; title: string }
  | { type: 'deleted'; chatId: string }
  | { type: 'banner'; text: string | null }
  | { type: 'attaching'; chatId: string; replay: boolean }

let idCounter = 0
export function nextId(prefix = 'm'): string {
  idCounter += 1
  return `${prefix}${Date.now().toString(36)}${idCounter.toString(36)}`
}

function str(v: unknown): string | null {
  return typeof v === 'string' ? v : null
}

function num(v: unknown): number | null {
  return typeof v === 'number' && Number.isFinite(v) ? v : null
}

function chatOf(state: State, chatId: string): ChatData {
  return state.chats[chatId] ?? { messages: [], loaded: false }
}

function withChat(state: State, chatId: string, chat: ChatData): State {
  return { ...state, chats: { ...state.chats, [chatId]: chat } }
}

function finaliseStreaming(messages: ChatMessage[]): ChatMessage[] {
  if (!messages.some((m) => m.streaming)) return messages
  return messages.map((m) => (m.streaming ? { ...endReasoning(m), streaming: false } : m))
}

/** Puts the turn's duration on its answer: the last assistant message after the last user message. */
function withDuration(messages: ChatMessage[], sec: number | null): ChatMessage[] {
  if (sec === null) return messages
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i]
    if (m.role === 'user') break
    if (m.role === 'assistant') return messages.map((x, j) => (j === i ? { ...x, durationSec: sec } : x))
  }
  return messages
}

/** Appends streamed reasoning, starting the reasoning clock if it is not running. */
export function withReasoning(m: ChatMessage, text: string, now: number): ChatMessage {
  return { ...m, reasoning: (m.reasoning ?? '') + text, reasoningSince: m.reasoningSince ?? now }
}

/** Stops the reasoning clock (the answer began, or the stream ended), adding the time it ran. */
export function endReasoning(m: ChatMessage, now = Date.now()): ChatMessage {
  if (m.reasoningSince === undefined) return m
  return { ...m, reasoningMs: (m.reasoningMs ?? 0) + Math.max(0, now - m.reasoningSince), reasoningSince: undefined }
}

/** The last message if it is a streaming assistant message, else a fresh one appended. */
function streamingTail(messages: ChatMessage[]): { list: ChatMessage[]; tail: ChatMessage } {
  const last = messages[messages.length - 1]
  if (last && last.role === 'assistant' && last.streaming) {
    return { list: messages.slice(0, -1), tail: last }
  }
  return { list: messages, tail: { id: nextId(), role: 'assistant', content: '', streaming: true, tools: [], at: Date.now() } }
}

function withForms(state: State, chatId: string, forms: Elicitation[]): State {
  const next = { ...state.elicitations }
  if (forms.length) next[chatId] = forms
  else delete next[chatId]
  return { ...state, elicitations: next }
}

function withApprovals(state: State, chatId: string, list: Approval[]): State {
  const next = { ...state.approvals }
  if (list.length) next[chatId] = list
  else delete next[chatId]
  return { ...state, approvals: next }
}

/** A turn that ended has no open form or approval request left (its calls are over). */
function closeForms(state: State, chatId: string): State {
  const s = state.elicitations[chatId] ? withForms(state, chatId, []) : state
  return s.approvals[chatId] ? withApprovals(s, chatId, []) : s
}

/**
 * Persisted items as transcript messages. With `tools=1` the endpoint also returns each tool
 * step (`tool_calls`, then one `tool` result per call); like a live turn, the step's blocks go
 * on the assistant message that answers after them (a turn that ended without text gets an
 * empty one). Unknown roles are skipped.
 */
/** A stored turn's time as `at` (epoch ms), when the server sent a parseable one: history keeps
 * `YYYY-MM-DD HH:MM` in the server's local time, read here as ISO local time. */
function stamp(m: HistoryMessage): { at?: number } {
  const t = typeof m.timestamp === 'string' ? Date.parse(m.timestamp.replace(' ', 'T')) : NaN
  return Number.isFinite(t) ? { at: t } : {}
}

export function historyMessages(items: HistoryMessage[]): ChatMessage[] {
  const out: ChatMessage[] = []
  let pending: ToolBlock[] = []
  let pendingCursors: number[] = []
  const cursorsWith = (m: HistoryMessage | null): { cursors?: number[] } => {
    const own = typeof m?.cursor === 'number' ? [m.cursor] : []
    const all = [...pendingCursors, ...own]
    pendingCursors = []
    return all.length ? { cursors: all } : {}
  }
  const flush = () => {
    if (pending.length) out.push({ id: nextId('h'), role: 'assistant', content: '', tools: pending, ...cursorsWith(null) })
    pending = []
  }
  for (const m of items) {
    if ((m.role === 'tool_calls' || m.role === 'tool') && typeof m.cursor === 'number') pendingCursors.push(m.cursor)
    if (m.role === 'tool_calls') {
      for (const c of Array.isArray(m.tool_calls) ? m.tool_calls : []) {
        pending.push({
          key: nextId('t'),
          callId: str(c?.call_id),
          streamId: null,
          toolName: str(c?.tool_name) || 'tool',
          done: false,
          args: argsOf(c?.arguments),
        })
      }
    } else if (m.role === 'tool') {
      const callId = str(m.call_id)
      const i = pending.findIndex((t) => !t.done && (callId ? t.callId === callId : t.toolName === str(m.tool_name)))
      if (i >= 0) {
        const ended = { outcome: str(m.outcome) ?? undefined, ran: str(m.ran) ?? undefined }
        pending[i] = { ...pending[i], done: true, result: String(m.content ?? ''), ...ended }
      }
    } else if (m.role === 'assistant') {
      // An answer the server wrote in the model's place (the budget stop): in the client's words.
      const note = m.note && typeof m.note === 'object' ? (m.note as { code?: unknown; params?: unknown }) : null
      const content = String(m.content ?? '')
      const base: ChatMessage = {
        id: nextId('h'),
        role: 'assistant',
        content: note ? `[${codedText(note.code, note.params, content.replace(/^\[|\]$/g, ''))}]` : content,
        ...stamp(m),
        ...cursorsWith(m),
      }
      if (typeof m.reasoning_content === 'string' && m.reasoning_content) {
        base.reasoning = m.reasoning_content
        if (typeof m.reasoning_ms === 'number') base.reasoningMs = m.reasoning_ms
      }
      // Receipts and answers of one turn: the blocks go on the turn's last assistant message.
      if (pending.length) base.tools = pending
      pending = []
      out.push(base)
    } else if (m.role === 'user') {
      flush()
      const base: ChatMessage = { id: nextId('h'), role: 'user', content: String(m.content ?? ''), ...stamp(m), ...cursorsWith(m) }
      const selections = normaliseReceipts(m)
      if (selections.length) base.selections = selections
      out.push(base)
    }
  }
  flush()
  return out
}

function isKnownSession(state: State, chatId: string): boolean {
  return state.sessions.some((s) => s.chat_id === chatId)
}

/** Applies a chat-scoped event; returns null for a duplicate (seq already seen). */
function applyChatEvent(state: State, chatId: string, ev: ServerEvent): State | null {
  const seq = num(ev.seq)
  const chat = chatOf(state, chatId)
  if (seq !== null && chat.lastSeq !== undefined && seq <= chat.lastSeq) return null
  const lastSeq = seq !== null ? Math.max(seq, chat.lastSeq ?? 0) : chat.lastSeq
  const gap = Boolean(chat.gap) || (seq !== null && chat.lastSeq !== undefined && seq > chat.lastSeq + 1)
  const put = (s: State, messages: ChatMessage[]): State =>
    withChat(s, chatId, gap ? { ...chat, messages, lastSeq, gap } : { ...chat, messages, lastSeq })
  // After a gap the streamed transcript is incomplete; the persisted one is whole once the turn ends.
  const reloadIfGap = (s: State): State =>
    gap && s.sessions.some((x) => x.chat_id === chatId)
      ? withChat(s, chatId, { messages: [], loaded: false, lastSeq })
      : s

  switch (ev.event) {
    case 'turn_started': {
      // The message a turn answers: this tab's own (sent, not yet tied to a turn), or one sent
      // elsewhere (another tab, or before a reload). A replay may bring it twice.
      const streamId = (ev.stream_id as number | string | undefined) ?? null
      const content = str(ev.message) ?? ''
      if (streamId !== null && chat.messages.some((m) => m.role === 'user' && m.streamId === streamId)) return state
      const own = chat.messages.findLastIndex((m) => m.role === 'user' && m.awaitsTurn)
      const messages =
        own >= 0 && chat.messages[own].content === content
          ? chat.messages.map((m, i) => (i === own ? { ...m, awaitsTurn: undefined, streamId } : m))
          : [...finaliseStreaming(chat.messages), { id: nextId('u'), role: 'user' as const, content, at: Date.now(), streamId }]
      const s = put(state, messages)
      return { ...s, generating: startGenerating(s.generating, chatId) }
    }
    case 'delta': {
      const text = str(ev.text) ?? ''
      const { list, tail } = streamingTail(chat.messages)
      return put(state, [...list, { ...endReasoning(tail), content: tail.content + text }])
    }
    case 'reasoning': {
      const text = str(ev.text) ?? ''
      const { list, tail } = streamingTail(chat.messages)
      return put(state, [...list, withReasoning(tail, text, Date.now())])
    }
    case 'message': {
      // Non-streamed fallback: a complete assistant text.
      const text = str(ev.text) ?? ''
      return put(state, [...finaliseStreaming(chat.messages), { id: nextId(), role: 'assistant', content: text, at: Date.now() }])
    }
    case 'tool_call': {
      const { list, tail } = streamingTail(chat.messages)
      const block: ToolBlock = {
        key: nextId('t'),
        callId: str(ev.call_id),
        streamId: (ev.stream_id as number | string | undefined) ?? null,
        toolName: str(ev.tool_name) ?? 'tool',
        done: false,
        args: argsOf(ev.arguments),
      }
      return put(state, [...list, { ...tail, tools: [...(tail.tools ?? []), block] }])
    }
    case 'tool_result': {
      const callId = str(ev.call_id)
      const toolName = str(ev.tool_name)
      const streamId = (ev.stream_id as number | string | undefined) ?? null
      const result = str(ev.result) ?? ''
      const ended = { outcome: str(ev.outcome) ?? undefined, ran: str(ev.ran) ?? undefined }
      // Match by call_id; without one, the oldest pending block of that stream and tool name.
      let target: { mi: number; ti: number } | null = null
      for (let mi = chat.messages.length - 1; mi >= 0 && !target; mi--) {
        const tools = chat.messages[mi].tools ?? []
        if (callId) {
          const ti = tools.findIndex((t) => t.callId === callId)
          if (ti >= 0) target = { mi, ti }
        } else {
          const ti = tools.findIndex((t) => !t.done && t.toolName === toolName && t.streamId === streamId)
          if (ti >= 0) target = { mi, ti }
        }
      }
      if (!target) return put(state, chat.messages)
      const messages = chat.messages.map((m, mi) =>
        mi !== target.mi
          ? m
          : { ...m, tools: (m.tools ?? []).map((t, ti) => (ti === target.ti ? { ...t, done: true, result, ...ended } : t)) },
      )
      return put(state, messages)
    }
    case 'stream_end':
      return put(state, finaliseStreaming(chat.messages))
    case 'done': {
      const s = closeForms(reloadIfGap(put(state, withDuration(finaliseStreaming(chat.messages), num(ev.duration_sec)))), chatId)
      return { ...s, generating: stopGenerating(s.generating, chatId) }
    }
    case 'elicitation': {
      const form = fromEvent(ev, Date.now())
      const s = put(state, chat.messages)
      // The server sends only forms it checked; anything else is not shown (it times out).
      if (!form) return s
      const open = (s.elicitations[chatId] ?? []).filter((f) => f.id !== form.id)
      return withForms(s, chatId, [...open, form])
    }
    case 'usage': {
      const u = usageFromEvent(ev)
      if (!u) return null
      // The answer being streamed (or the last one) carries the turn's tokens.
      let i = chat.messages.length - 1
      while (i >= 0 && chat.messages[i].role !== 'assistant' && chat.messages[i].role !== 'user') i--
      const messages =
        i >= 0 && chat.messages[i].role === 'assistant'
          ? chat.messages.map((m, j) => (j === i ? { ...m, usage: addCounts(m.usage, u.counts) } : m))
          : chat.messages
      return withChat(state, chatId, { ...chat, messages, context: u.context })
    }
    case 'budget_warning': {
      const budget = str(ev.budget)
      const key: MessageKey =
        budget === 'day' ? 'usage.warnDay' : budget === 'background_day' ? 'usage.warnBackground' : 'usage.warnChat'
      const cap = num(ev.cap_tokens)
      const used = num(ev.tokens)
      const textParams = {
        used: used === null ? '?' : formatTokens(used),
        cap: cap === null ? '' : formatTokens(cap),
      }
      const notice: ChatMessage = {
        id: nextId(),
        role: 'notice',
        content: tr(key, textParams),
        tone: 'muted',
        textKey: key,
        textParams,
      }
      return put(state, [...chat.messages, notice])
    }
    case 'rewound':
      // A rewind changed the chat's files or messages: the persisted transcript is the truth.
      return withChat(state, chatId, { messages: [], loaded: false, lastSeq })
    case 'elicitation_end': {
      const s = put(state, chat.messages)
      return withForms(s, chatId, (s.elicitations[chatId] ?? []).filter((f) => f.id !== ev.id))
    }
    case 'approval_request': {
      const req = approvalFromEvent(ev, Date.now())
      const s = put(state, chat.messages)
      if (!req || req.chatId !== chatId) return s
      // Sent again on attach: the same id replaces the one shown (its countdown restarts).
      const open = (s.approvals[chatId] ?? []).filter((a) => a.id !== req.id)
      return withApprovals(s, chatId, [...open, req])
    }
    case 'approval_end': {
      const s = put(state, chat.messages)
      return withApprovals(s, chatId, (s.approvals[chatId] ?? []).filter((a) => a.id !== ev.id))
    }
    case 'error': {
      const coded = codedKey(ev.code, ev.params)
      const detail = coded ? tr(coded.key, coded.vars).trim() : (str(ev.detail) ?? tr('chat.unknownError'))
      const cancelled = str(ev.detail) === 'cancelled'
      const notice: ChatMessage = cancelled
        ? { id: nextId(), role: 'notice', content: tr('chat.stopped'), tone: 'muted', textKey: 'chat.stopped' }
        : coded
          ? { id: nextId(), role: 'notice', content: detail, tone: 'error', textKey: coded.key, textParams: coded.vars }
          : { id: nextId(), role: 'notice', content: detail, tone: 'error' }
      const s = put(state, [...finaliseStreaming(chat.messages), notice])
      // A failure in a chat the person is not looking at would go unnoticed inline.
      const elsewhere = !cancelled && state.activeChatId !== chatId
      const title = state.sessions.find((x) => x.chat_id === chatId)?.title
      const banner = elsewhere
        ? title
          ? tr('chat.errorIn', { title, detail })
          : tr('chat.errorElsewhere', { detail })
        : s.banner
      return { ...closeForms(reloadIfGap(s), chatId), banner, generating: stopGenerating(s.generating, chatId) }
    }
    case 'session_updated': {
      const title = str(ev.title) ?? ''
      const updated_at = str(ev.updated_at) ?? new Date().toISOString()
      const known = isKnownSession(state, chatId)
      // What the list knows besides the title (the chat's project) stays.
      const prev = state.sessions.find((x) => x.chat_id === chatId)
      const sessions = [{ ...prev, chat_id: chatId, title, updated_at }, ...state.sessions.filter((x) => x.chat_id !== chatId)]
      const nextChat: ChatData = { ...chat, lastSeq, loaded: known ? chat.loaded : true }
      return {
        ...state,
        sessions,
        chats: { ...state.chats, [chatId]: nextChat },
        activeChatId: state.activeChatId ?? chatId,
      }
    }
    default:
      return put(state, chat.messages)
  }
}

export function reduce(state: State, action: Action): State {
  switch (action.type) {
    case 'ws':
      return reduceEvent(state, action.ev)
    case 'sessions': {
      const sessions = action.sessions
      const activeChatId = state.activeChatId ?? sessions[0]?.chat_id ?? null
      const waitingChats = { ...state.waitingChats }
      for (const s of sessions) if (s.waiting) waitingChats[s.chat_id] = true
      return { ...state, sessions, sessionsLoaded: true, activeChatId, waitingChats }
    }
    case 'history': {
      const chat = chatOf(state, action.chatId)
      const history = historyMessages(action.messages)
      // Live events that arrived while the history was loading belong after it.
      return withChat(state, action.chatId, {
        ...chat,
        loaded: true,
        messages: [...history, ...chat.messages],
        historyItems: action.messages,
        historyCount: history.length,
        historyStart: action.start ?? 0,
      })
    }
    case 'olderHistory': {
      const chat = chatOf(state, action.chatId)
      // Only a page that ends where the loaded history starts (a reload may have reset it).
      if (!chat.loaded || chat.historyStart === undefined || action.start >= chat.historyStart) return state
      if (action.start + action.messages.length !== chat.historyStart) return state
      const items = [...action.messages, ...(chat.historyItems ?? [])]
      const history = historyMessages(items)
      const live = chat.messages.slice(chat.historyCount ?? 0)
      return withChat(state, action.chatId, {
        ...chat,
        messages: [...history, ...live],
        historyItems: items,
        historyCount: history.length,
        historyStart: action.start,
      })
    }
    case 'select':
      if (state.activeChatId === action.chatId) return state
      return { ...state, activeChatId: action.chatId, banner: null }
    case 'newChatRequested':
      return { ...state, awaitingNewChat: true, awaitingProjectChat: Boolean(action.project), banner: null }
    case 'sent': {
      const chat = chatOf(state, action.chatId)
      const msg: ChatMessage = { id: nextId('u'), role: 'user', content: action.content, at: Date.now(), awaitsTurn: true }
      if (action.selections.length) msg.selections = action.selections
      const s = withChat(state, action.chatId, { ...chat, messages: [...finaliseStreaming(chat.messages), msg] })
      return { ...s, generating: startGenerating(s.generating, action.chatId), banner: null }
    }
    case 'renamed':
      return {
        ...state,
        sessions: state.sessions.map((s) => (s.chat_id === action.chatId ? { ...s, title: action.title } : s)),
      }
    case 'deleted': {
      const chats = { ...state.chats }
      delete chats[action.chatId]
      const sessions = state.sessions.filter((s) => s.chat_id !== action.chatId)
      const activeChatId = state.activeChatId === action.chatId ? (sessions[0]?.chat_id ?? null) : state.activeChatId
      return { ...state, chats, sessions, activeChatId, generating: stopGenerating(state.generating, action.chatId) }
    }
    case 'banner':
      return state.banner === action.text ? state : { ...state, banner: action.text }
    case 'attaching': {
      const chat = chatOf(state, action.chatId)
      return withChat(state, action.chatId, { ...chat, resume: action.replay, attaching: true })
    }
  }
}

function reduceEvent(state: State, ev: ServerEvent): State {
  const chatId = str(ev.chat_id)
  switch (ev.event) {
    case 'ready': {
      // A new connection: a `new_chat` sent on the old one will never be answered. Its list of
      // waiting chats replaces what an old connection said.
      const waitingChats = Object.fromEntries(
        (Array.isArray(ev.waiting) ? ev.waiting : []).filter((c): c is string => typeof c === 'string').map((c) => [c, true as const]),
      )
      const base = { ...state, waitingChats, awaitingNewChat: false }
      if (!chatId || base.activeChatId) return base
      const chat = chatOf(base, chatId)
      return { ...withChat(base, chatId, { ...chat, loaded: true }), activeChatId: chatId }
    }
    case 'attached': {
      if (!chatId) return state
      const chat = chatOf(state, chatId)
      const lastSeq = num(ev.last_seq)
      let next: ChatData = { ...chat, resume: false, attaching: false }
      let generating = state.generating
      if (lastSeq !== null) {
        const reload = () => {
          // Events were missed (or the server restarted): the persisted transcript is the truth.
          next = { messages: [], loaded: false, lastSeq }
          generating = stopGenerating(generating, chatId)
        }
        if (ev.reload === true) {
          // The server no longer holds events this client has not seen (e.g. after a restart).
          reload()
        } else if (chat.resume) {
          // The replay that follows `attached` fills the gap, unless the server lost its buffer.
          if (chat.lastSeq !== undefined && lastSeq < chat.lastSeq) reload()
        } else if (chat.lastSeq === undefined) {
          // First subscription: everything up to last_seq is in the persisted history.
          next = { ...next, lastSeq }
        } else if (lastSeq !== chat.lastSeq && chat.loaded) {
          reload()
        } else {
          next = { ...next, lastSeq }
        }
      }
      if (!isKnownSession(state, chatId) && !next.loaded) next = { ...next, loaded: true }
      let s = { ...withChat(state, chatId, next), generating }
      // The answer to our `new_chat`, not to an `attach` still in flight (the chat shown at load
      // whose answer arrives after New chat was clicked must not take the new chat's place).
      if (state.awaitingNewChat && !chat.attaching) {
        s = { ...s, activeChatId: chatId, awaitingNewChat: false, awaitingProjectChat: false }
      }
      return s
    }
    case 'waiting': {
      if (!chatId) return state
      const waitingChats = { ...state.waitingChats }
      if (ev.waiting === true) waitingChats[chatId] = true
      else delete waitingChats[chatId]
      return { ...state, waitingChats }
    }
    case 'pong':
    case 'stop_ack':
      return state
    case 'error': {
      if (!chatId) {
        const detail = codedText(ev.code, ev.params, str(ev.detail) ?? tr('chat.unknownError'))
        // A refused project: no chat comes, so the app may open a plain one again.
        if (state.awaitingProjectChat) {
          return { ...state, banner: detail, awaitingNewChat: false, awaitingProjectChat: false }
        }
        return { ...state, banner: detail }
      }
      return applyChatEvent(state, chatId, ev) ?? state
    }
    case 'turn_started':
    case 'delta':
    case 'reasoning':
    case 'message':
    case 'tool_call':
    case 'tool_result':
    case 'stream_end':
    case 'done':
    case 'session_updated':
    case 'elicitation':
    case 'elicitation_end':
    case 'approval_request':
    case 'approval_end':
    case 'rewound':
    case 'usage':
    case 'budget_warning':
      if (!chatId) return state
      return applyChatEvent(state, chatId, ev) ?? state
    default:
      return state
  }
}

/**
 * The attach frame for a chat: a running turn resumes after the last applied event (the server
 * replays the gap); an idle chat attaches plainly and reloads its history if it missed events.
 */
export function attachFrame(state: State, chatId: string): { chat_id: string; after_seq?: number } {
  if (!state.generating[chatId]) {
    // Opened while one of its turns runs (e.g. after a reload): the turn from its start, its
    // message first, when the server still holds it.
    const running = state.sessions.find((s) => s.chat_id === chatId)?.turn_seq
    if (typeof running === 'number' && state.chats[chatId]?.lastSeq === undefined) return { chat_id: chatId, after_seq: running }
    return { chat_id: chatId }
  }
  return { chat_id: chatId, after_seq: state.chats[chatId]?.lastSeq ?? 0 }
}

/** What a reconnect must re-attach: the open chat and every chat still generating. */
export function reattachPlan(state: State): { chat_id: string; after_seq?: number }[] {
  const ids = new Set<string>()
  if (state.activeChatId) ids.add(state.activeChatId)
  for (const id of Object.keys(state.generating)) ids.add(id)
  return [...ids].map((id) => attachFrame(state, id))
}
