// Memory page: what the agent remembers. MEMORY.md and SOUL.md with hash-checked saves (a 409
// offers a reload), MEMORY.md snapshots with a diff against the current file and restore (after a
// confirmation; the server snapshots the current file first), and Dream's status with Run now
// (polled while a run is under way).

import { useCallback, useEffect, useState } from 'react'
import { Brain, History, Play, RefreshCw, RotateCcw } from 'lucide-react'
import { api, describeError } from '../lib/api'
import {
  byteLength,
  dreamBusy,
  formatEpoch,
  isConflict,
  type DreamStatus,
  type MemoryFile,
  type MemoryFiles,
  type MemoryName,
  type SavedFile,
  type Snapshot,
  type SnapshotList,
} from '../lib/memory'
import { useI18n, type MessageKey } from '../i18n'
import { DiffView } from './DiffView'
import { Button, ConfirmDialog, ErrorBox, SkeletonRows, Spinner } from './ui'

const DREAM_POLL_MS = 1000

function FileEditor({
  file,
  maxBytes,
  onSaved,
}: {
  file: MemoryFile
  maxBytes: number
  onSaved: (f: SavedFile) => void
}) {
  const { t } = useI18n()
  const [base, setBase] = useState(file)
  const [draft, setDraft] = useState(file.content)
  const [saving, setSaving] = useState(false)
  const [error, setError] = useState<{ message: string; conflict: boolean } | null>(null)
  const [saved, setSaved] = useState(false)

  // A newer file from the parent (restore, reload) replaces an unchanged draft.
  useEffect(() => {
    if (file.hash === base.hash) return
    if (draft === base.content) setDraft(file.content)
    setBase(file)
    // Only a new file from the parent matters here, not each keystroke.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [file])

  const bytes = byteLength(draft)
  const tooBig = bytes > maxBytes
  const changed = draft !== base.content

  const save = async () => {
    setSaving(true)
    setError(null)
    setSaved(false)
    try {
      const res = await api.put<SavedFile>(`/memory/${file.name}`, { content: draft, expected_hash: base.hash })
      setBase(res)
      setDraft(res.content)
      setSaved(true)
      onSaved(res)
    } catch (e) {
      setError(
        isConflict(e)
          ? { message: t('memory.conflict', { file: file.file }), conflict: true }
          : { message: describeError(e), conflict: false },
      )
    } finally {
      setSaving(false)
    }
  }

  const reload = async () => {
    setError(null)
    try {
      const res = await api.get<MemoryFile>(`/memory/${file.name}`)
      setBase(res)
      setDraft(res.content)
      onSaved({ ...res, snapshot: null })
    } catch (e) {
      setError({ message: describeError(e), conflict: false })
    }
  }

  const hintKey: MessageKey = file.name === 'memory' ? 'memory.memoryHint' : 'memory.soulHint'
  return (
    <section className="rounded-xl border border-zinc-800 bg-zinc-900/40 p-4" data-testid={`memory-editor-${file.name}`}>
      <div className="mb-2 flex flex-wrap items-center gap-2">
        <h2 className="font-mono text-sm font-semibold text-zinc-100">{file.file}</h2>
        <span className="text-xs text-zinc-500">{t(hintKey)}</span>
        <span className={`ml-auto text-xs ${tooBig ? 'text-red-400' : 'text-zinc-500'}`}>
          {t('memory.bytes', { n: bytes, max: maxBytes })}
        </span>
      </div>
      <textarea
        aria-label={file.file}
        data-testid={`memory-content-${file.name}`}
        value={draft}
        spellCheck={false}
        placeholder={t('memory.empty')}
        onChange={(e) => {
          setDraft(e.target.value)
          setSaved(false)
        }}
        className="h-56 w-full resize-y rounded-lg border border-zinc-800 bg-zinc-950 p-3 font-mono text-[13px] leading-relaxed text-zinc-200 outline-none focus:border-emerald-600"
      />
      {error && (
        <div
          role="alert"
          data-testid={`memory-error-${file.name}`}
          className="mt-2 flex items-center gap-3 rounded-lg border border-red-900/60 bg-red-950/40 px-3 py-2 text-sm text-red-300"
        >
          <span className="min-w-0 flex-1">{error.message}</span>
          {error.conflict && (
            <Button onClick={() => void reload()} data-testid={`memory-reload-${file.name}`}>
              <RefreshCw size={13} /> {t('memory.reload')}
            </Button>
          )}
        </div>
      )}
      <div className="mt-2 flex items-center gap-2">
        {saved && !changed && <span className="text-xs text-emerald-400" data-testid={`memory-saved-${file.name}`}>{t('memory.saved')}</span>}
        <div className="ml-auto flex gap-2">
          <Button disabled={!changed || saving} onClick={() => setDraft(base.content)}>
            {t('memory.discard')}
          </Button>
          <Button
            variant="primary"
            disabled={!changed || saving || tooBig}
            onClick={() => void save()}
            data-testid={`memory-save-${file.name}`}
          >
            {saving && <Spinner />} {t('memory.save')}
          </Button>
        </div>
      </div>
    </section>
  )
}

function Snapshots({ current, version, onRestored }: { current: string; version: number; onRestored: (f: SavedFile) => void }) {
  const { t, lang } = useI18n()
  const [list, setList] = useState<SnapshotList | null>(null)
  const [error, setError] = useState<string | null>(null)
  const [open, setOpen] = useState<Snapshot | null>(null)
  const [confirm, setConfirm] = useState<string | null>(null)
  const [busy, setBusy] = useState(false)
  const [restoreError, setRestoreError] = useState<string | null>(null)

  const load = useCallback(async () => {
    setError(null)
    try {
      setList(await api.get<SnapshotList>('/memory/snapshots'))
    } catch (e) {
      setError(describeError(e))
    }
  }, [])

  useEffect(() => {
    void load()
  }, [load, version])

  const show = async (id: string) => {
    if (open?.id === id) return setOpen(null)
    try {
      setOpen(await api.get<Snapshot>(`/memory/snapshots/${encodeURIComponent(id)}`))
    } catch (e) {
      setError(describeError(e))
    }
  }

  return (
    <section className="rounded-xl border border-zinc-800 bg-zinc-900/40 p-4" data-testid="memory-snapshots">
      <div className="mb-2 flex items-center gap-2">
        <History size={16} className="text-zinc-400" />
        <h2 className="text-sm font-semibold text-zinc-100">{t('memory.snapshots')}</h2>
        <span className="text-xs text-zinc-500">{t('memory.snapshotsHint')}</span>
      </div>
      {error && <ErrorBox message={error} onRetry={() => void load()} />}
      {list === null && !error ? (
        <SkeletonRows count={2} />
      ) : list && list.snapshots.length === 0 ? (
        <p className="text-sm text-zinc-500">{t('memory.noSnapshots')}</p>
      ) : (
        <ul className="divide-y divide-zinc-800">
          {(list?.snapshots ?? []).map((s) => (
            <li key={s.id} data-testid="memory-snapshot" data-id={s.id} className="py-2">
              <div className="flex items-center gap-3 text-sm">
                <span className="font-mono text-zinc-300">#{s.id}</span>
                <span className="text-zinc-500">{formatEpoch(s.created_at, lang)}</span>
                <span className="text-xs text-zinc-600">{t('memory.size', { n: s.size })}</span>
                <div className="ml-auto flex gap-1">
                  <Button variant="ghost" onClick={() => void show(s.id)} data-testid="memory-snapshot-diff">
                    {open?.id === s.id ? t('memory.hideDiff') : t('memory.showDiff')}
                  </Button>
                  <Button
                    variant="ghost"
                    onClick={() => {
                      setRestoreError(null)
                      setConfirm(s.id)
                    }}
                    data-testid="memory-snapshot-restore"
                  >
                    <RotateCcw size={14} /> {t('memory.restore')}
                  </Button>
                </div>
              </div>
              {open?.id === s.id && (
                <div className="mt-2">
                  <p className="mb-1 text-xs text-zinc-500">{t('memory.diffLegend', { id: s.id })}</p>
                  <DiffView oldText={current} newText={open.content} testId="memory-diff" />
                </div>
              )}
            </li>
          ))}
        </ul>
      )}
      {list && list.total > list.snapshots.length && (
        <p className="mt-2 text-xs text-zinc-500">{t('memory.moreSnapshots', { n: list.total - list.snapshots.length })}</p>
      )}
      {confirm && (
        <ConfirmDialog
          message={t('memory.restoreConfirm', { id: confirm })}
          confirmLabel={t('memory.restore')}
          busy={busy}
          error={restoreError}
          onCancel={() => setConfirm(null)}
          onConfirm={async () => {
            setBusy(true)
            try {
              const res = await api.post<SavedFile>(`/memory/snapshots/${encodeURIComponent(confirm)}/restore`)
              setConfirm(null)
              setOpen(null)
              onRestored(res)
            } catch (e) {
              setRestoreError(describeError(e))
            } finally {
              setBusy(false)
            }
          }}
        />
      )}
    </section>
  )
}

const OUTCOME_KEYS: Record<string, MessageKey> = {
  written: 'dream.outcome.written',
  nothing_new: 'dream.outcome.nothing_new',
  no_model: 'dream.outcome.no_model',
  failed: 'dream.outcome.failed',
  rejected: 'dream.outcome.rejected',
}

function DreamCard({ onFinished }: { onFinished: () => void }) {
  const { t, lang } = useI18n()
  const [dream, setDream] = useState<DreamStatus | null>(null)
  const [error, setError] = useState<string | null>(null)
  const [starting, setStarting] = useState(false)

  const load = useCallback(async () => {
    try {
      setDream(await api.get<DreamStatus>('/dream'))
      setError(null)
    } catch (e) {
      setError(describeError(e))
    }
  }, [])

  useEffect(() => {
    void load()
  }, [load])

  // Poll while a run is under way; when it ends, MEMORY.md may have changed.
  const busy = dreamBusy(dream)
  useEffect(() => {
    if (!busy) return
    const id = setInterval(() => void load(), DREAM_POLL_MS)
    return () => {
      clearInterval(id)
      onFinished()
    }
  }, [busy, load, onFinished])

  const runNow = async () => {
    setStarting(true)
    setError(null)
    try {
      setDream(await api.post<DreamStatus>('/dream/run'))
    } catch (e) {
      setError(describeError(e))
      void load()
    } finally {
      setStarting(false)
    }
  }

  const last = dream?.last_run
  const u = dream?.undistilled
  return (
    <section className="rounded-xl border border-zinc-800 bg-zinc-900/40 p-4" data-testid="dream-card">
      <div className="mb-2 flex items-center gap-2">
        <Brain size={16} className="text-zinc-400" />
        <h2 className="text-sm font-semibold text-zinc-100">{t('dream.title')}</h2>
        <span className="text-xs text-zinc-500">{t('dream.hint')}</span>
        <Button
          variant="primary"
          className="ml-auto"
          disabled={!dream || busy || starting}
          onClick={() => void runNow()}
          data-testid="dream-run"
        >
          {busy || starting ? <Spinner /> : <Play size={14} />} {busy ? t('dream.running') : t('dream.runNow')}
        </Button>
      </div>
      {error && <ErrorBox message={error} onRetry={() => void load()} />}
      {!dream && !error ? (
        <SkeletonRows count={1} />
      ) : dream ? (
        <dl className="grid grid-cols-[auto_1fr] gap-x-4 gap-y-1 text-sm">
          <dt className="text-zinc-500">{t('dream.lastRun')}</dt>
          <dd className="text-zinc-300" data-testid="dream-last">
            {last ? (
              <>
                {formatEpoch(last.finished_at, lang)} · {t(OUTCOME_KEYS[last.outcome] ?? 'dream.outcome.failed', { records: last.records, chats: last.chats })}
                {last.trigger === 'manual' && <span className="text-zinc-500"> · {t('dream.manual')}</span>}
                {last.detail && <span className="block text-xs text-zinc-500">{last.detail}</span>}
              </>
            ) : (
              t('dream.never')
            )}
          </dd>
          <dt className="text-zinc-500">{t('dream.nextRun')}</dt>
          <dd className="text-zinc-300">
            {dream.enabled && dream.next_run_at ? formatEpoch(dream.next_run_at, lang) : t('dream.timerOff')}
          </dd>
          <dt className="text-zinc-500">{t('dream.undistilled')}</dt>
          <dd className="text-zinc-300" data-testid="dream-undistilled">
            {u && u.records > 0
              ? t('dream.undistilledValue', {
                  records: u.records,
                  chats: u.chats,
                  chars: `${u.chars_capped ? '≥' : ''}${u.chars}`,
                  runs: Math.ceil(u.records / Math.max(1, dream.batch_records)),
                })
              : t('dream.allDistilled')}
          </dd>
        </dl>
      ) : null}
    </section>
  )
}

export function MemoryPage() {
  const { t } = useI18n()
  const [files, setFiles] = useState<MemoryFiles | null>(null)
  const [error, setError] = useState<string | null>(null)
  const [version, setVersion] = useState(0)

  const load = useCallback(async () => {
    setError(null)
    try {
      setFiles(await api.get<MemoryFiles>('/memory'))
    } catch (e) {
      setError(describeError(e))
    }
  }, [])

  useEffect(() => {
    void load()
  }, [load])

  const onSaved = (name: MemoryName) => (f: SavedFile) => {
    setFiles((cur) => (cur ? { ...cur, [name]: f } : cur))
    if (name === 'memory') setVersion((v) => v + 1)
  }

  const afterDream = useCallback(() => {
    void load()
    setVersion((v) => v + 1)
  }, [load])

  return (
    <div className="h-full overflow-y-auto" data-testid="memory-page">
      <div className="mx-auto max-w-4xl space-y-4 px-4 py-6 sm:px-6">
        <header>
          <h1 className="text-xl font-semibold text-zinc-50">{t('memory.title')}</h1>
          <p className="text-sm text-zinc-500">{t('memory.subtitle')}</p>
        </header>
        {error && <ErrorBox message={error} onRetry={() => void load()} />}
        {!files && !error && <SkeletonRows count={2} />}
        {files && (
          <>
            <FileEditor file={files.memory} maxBytes={files.max_bytes} onSaved={onSaved('memory')} />
            <DreamCard onFinished={afterDream} />
            <Snapshots current={files.memory.content} version={version} onRestored={onSaved('memory')} />
            <FileEditor file={files.soul} maxBytes={files.max_bytes} onSaved={onSaved('soul')} />
          </>
        )}
      </div>
    </div>
  )
}
