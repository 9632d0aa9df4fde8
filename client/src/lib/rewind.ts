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
  reason: string
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
  opts: { dryRun: boolean; chat: boolean },
): Promise<RewindReport> {
  return api.post<RewindReport>(
    `/sessions/${encodeURIComponent(chatId)}/rewind`,
    { before_message: beforeMessage, files: true, chat: opts.chat, dry_run: opts.dryRun },
    { timeoutMs: 120_000 },
  )
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
