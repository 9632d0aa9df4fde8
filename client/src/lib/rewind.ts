// Rewind (docs/http-api.md §4.1): find the server's index of a user message, then preview or
// apply a rewind of the files the chat changed from it on, and optionally of the chat itself.

import { api } from './api'

export type RewindAction = 'restore' | 'create' | 'delete'

export interface RewindFile {
  path: string
  action: RewindAction
  /** unified diff from the current content to the restored one (text files, preview only) */
  diff?: string
  binary?: boolean
}

export interface RewindRefusal {
  path: string
  /** the reason's code (translated as `rewind.why.<code>`); absent from older servers */
  code?: string
  /** the English reason */
  reason: string
  /** a conflict's preview: what overwriting it anyway would change */
  diff?: string
  binary?: boolean
}

export interface RewindReport {
  chat_id: string
  before_message: number
  dry_run: boolean
  /** the user message rewound to */
  message: string
  removed_messages?: number
  files: RewindFile[]
  conflicts: RewindRefusal[]
  not_rewindable: RewindRefusal[]
  evicted: boolean
  failed?: RewindRefusal[]
}

/**
 * The index, in a `GET …/messages` list, of the user message with `fromEnd` user messages after
 * it (the client may hold only the newest pages, so it counts from the end); -1 when missing.
 */
export function userIndexFromEnd(messages: { role?: unknown }[], fromEnd: number): number {
  let seen = 0
  for (let i = messages.length - 1; i >= 0; i--) {
    if (messages[i]?.role !== 'user') continue
    if (seen === fromEnd) return i
    seen++
  }
  return -1
}

export async function findUserIndex(chatId: string, fromEnd: number): Promise<number> {
  const res = await api.get<{ messages?: { role?: unknown }[] }>(`/sessions/${encodeURIComponent(chatId)}/messages`)
  return userIndexFromEnd(Array.isArray(res?.messages) ? res.messages : [], fromEnd)
}

export function rewind(
  chatId: string,
  beforeMessage: number,
  opts: { dryRun: boolean; chat: boolean; force?: string[] },
): Promise<RewindReport> {
  return api.post<RewindReport>(
    `/sessions/${encodeURIComponent(chatId)}/rewind`,
    { before_message: beforeMessage, files: true, chat: opts.chat, dry_run: opts.dryRun, force: opts.force ?? false },
    { timeoutMs: 120_000 },
  )
}

/** The answer of an undo (or its preview): the files' lists as for a rewind. */
export interface UndoReport extends Omit<RewindReport, 'message' | 'removed_messages'> {
  /** the rewound messages came back (or would) */
  restored: boolean
}

/** Undoes the chat's last rewind (files, and the messages when it took them). */
export function undoRewind(chatId: string, opts: { dryRun: boolean; force?: string[] }): Promise<UndoReport> {
  return api.post<UndoReport>(
    `/sessions/${encodeURIComponent(chatId)}/rewind/undo`,
    { dry_run: opts.dryRun, force: opts.force ?? false },
    { timeoutMs: 120_000 },
  )
}

/** What the transcript's marker says about a rewind just applied (kept per chat across reloads
 * until it is undone or the chat goes on). */
export interface RewindDone {
  message: string
  files: number
  /** entries removed from the chat (a chat rewind) */
  messages?: number
}

const MARK_KEY = 'cashcode.rewound.'

export function loadRewindMark(chatId: string): RewindDone | null {
  try {
    const raw = globalThis.localStorage?.getItem(MARK_KEY + chatId)
    const v = raw ? (JSON.parse(raw) as RewindDone) : null
    return v && typeof v.message === 'string' && typeof v.files === 'number' ? v : null
  } catch {
    return null
  }
}

export function saveRewindMark(chatId: string, mark: RewindDone | null): void {
  try {
    if (mark) globalThis.localStorage?.setItem(MARK_KEY + chatId, JSON.stringify(mark))
    else globalThis.localStorage?.removeItem(MARK_KEY + chatId)
  } catch {
    // not remembered across a reload; shown until then
  }
}

/** The lines of a unified diff to show: headers dropped, each line with its kind. */
export function diffRows(diff: string): { op: 'add' | 'del' | 'hunk' | 'same'; text: string }[] {
  const rows: { op: 'add' | 'del' | 'hunk' | 'same'; text: string }[] = []
  for (const line of diff.split('\n')) {
    if (line.startsWith('+++ ') || line.startsWith('--- ')) continue
    if (line.startsWith('@@')) rows.push({ op: 'hunk', text: line })
    else if (line.startsWith('+')) rows.push({ op: 'add', text: line.slice(1) })
    else if (line.startsWith('-')) rows.push({ op: 'del', text: line.slice(1) })
    else if (line.length) rows.push({ op: 'same', text: line.slice(1) })
  }
  return rows
}
