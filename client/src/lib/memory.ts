// Wire types and small helpers of the Memory page (GET/PUT /api/memory…, /api/dream) and of
// the skill versions and evolution proposals shown in the Skill Market.

import { ApiError } from './api'

export type MemoryName = 'memory' | 'soul'

export interface MemoryFile {
  name: MemoryName
  file: string
  content: string
  hash: string
  size: number
}

export interface MemoryFiles {
  max_bytes: number
  memory: MemoryFile
  soul: MemoryFile
}

export interface SavedFile extends MemoryFile {
  /** the snapshot that keeps the replaced MEMORY.md, if any */
  snapshot: string | null
}

export interface SnapshotItem {
  id: string
  created_at: number
  size: number
}

export interface SnapshotList {
  snapshots: SnapshotItem[]
  total: number
}

export interface Snapshot extends SnapshotItem {
  content: string
}

export interface DreamRun {
  started_at: number
  finished_at: number
  outcome: 'written' | 'nothing_new' | 'no_model' | 'failed' | 'rejected' | string
  detail: string | null
  records: number
  chats: number
  trigger: 'timer' | 'manual' | string
}

export interface DreamStatus {
  batch_records: number
  enabled: boolean
  interval_sec: number | null
  last_run: DreamRun | null
  next_run_at: number | null
  queued: boolean
  running: boolean
  undistilled: { records: number; chats: number; chars: number; chars_capped: boolean }
}

export interface SkillVersions {
  name: string
  versions: string[]
}

export interface Proposal {
  id: string
  action: 'create' | 'update' | string
  name: string
  candidate_content: string
  reason: string
  evidence_ids: string[]
  base_hash: string | null
  status: 'pending' | 'rejected' | 'applied' | string
  validation: { valid: boolean; errors: string[] }
  created_at: number
  updated_at: number
  applied_version: string | null
}

export interface ProposalList {
  enabled: boolean
  items: Proposal[]
}

/** A 409 from a hash-checked write: the file changed since the editor read it. */
export function isConflict(e: unknown): boolean {
  return e instanceof ApiError && e.status === 409
}

/** UTF-8 byte length (the server's size limit counts bytes). */
export function byteLength(text: string): number {
  return new TextEncoder().encode(text).length
}

/** Epoch seconds as local date and time, '' for 0 or nonsense. */
export function formatEpoch(sec: number | null | undefined, locale?: string): string {
  if (!sec || !Number.isFinite(sec) || sec <= 0) return ''
  return new Date(sec * 1000).toLocaleString(locale)
}

/** A skill snapshot version `<epoch ms>-<8 hex>` as epoch seconds, null when it is not one. */
export function versionTime(version: string): number | null {
  const m = /^(\d{10,16})-[0-9a-f]+$/.exec(version)
  return m ? Number(m[1]) / 1000 : null
}

/** Dream is busy: a run is under way or asked for. */
export function dreamBusy(d: DreamStatus | null): boolean {
  return Boolean(d && (d.running || d.queued))
}
