// The transcript's mark of a rewind just applied: what went back, and Undo (files and chat). Undo
// asks the server first: with conflicts it opens the undo dialog (`onConflicts`), else it undoes
// at once.

import { useState } from 'react'
import { RotateCcw, X } from 'lucide-react'
import { useT } from '../i18n'
import { describeError } from '../lib/api'
import { undoRewind, type RewindDone, type UndoReport } from '../lib/rewind'
import { Spinner } from './ui'

export function RewindMarker(props: {
  chatId: string
  done: RewindDone
  /** a turn runs or the connection is down */
  disabled: boolean
  onConflicts: (preview: UndoReport) => void
  onUndone: () => void
  onDismiss: () => void
}) {
  const t = useT()
  const { done } = props
  const [busy, setBusy] = useState(false)
  const [error, setError] = useState<string | null>(null)
  const parts = [t('rewind.markerFiles', { count: done.files, n: done.files })]
  if (typeof done.messages === 'number') parts.push(t('rewind.markerMessages', { n: done.messages }))

  const undo = async () => {
    setBusy(true)
    setError(null)
    try {
      const preview = await undoRewind(props.chatId, { dryRun: true })
      if (preview.conflicts.length) {
        props.onConflicts(preview)
        return
      }
      const report = await undoRewind(props.chatId, { dryRun: false })
      if (report.failed?.length) {
        props.onConflicts(report)
        return
      }
      props.onUndone()
    } catch (e) {
      setError(t('rewind.undoFailed', { error: describeError(e) }))
    } finally {
      setBusy(false)
    }
  }

  return (
    <div
      role="status"
      data-testid="rewind-marker"
      className="my-2 flex flex-wrap items-center gap-x-3 gap-y-1 border-y border-dashed border-sky-700/50 px-1 py-2 text-xs text-sky-300"
    >
      <RotateCcw size={13} aria-hidden className="shrink-0" />
      <span className="min-w-0 flex-1 break-words">
        {t('rewind.marker', { message: done.message.length > 80 ? `${done.message.slice(0, 80)}…` : done.message })}
        <span className="text-zinc-400"> · {parts.join(' · ')}</span>
      </span>
      <button
        type="button"
        onClick={undo}
        disabled={busy || props.disabled}
        className="flex shrink-0 items-center gap-1 rounded-md border border-sky-700/60 px-2 py-0.5 text-sky-200 hover:bg-sky-500/10 disabled:opacity-50"
        data-testid="rewind-undo"
      >
        {busy && <Spinner size={11} />} {t('rewind.markerUndo')}
      </button>
      <button
        type="button"
        onClick={props.onDismiss}
        aria-label={t('rewind.markerDismiss')}
        title={t('rewind.markerDismiss')}
        className="shrink-0 rounded p-0.5 text-zinc-500 hover:text-zinc-300"
      >
        <X size={13} />
      </button>
      {error && (
        <p className="basis-full text-red-300" role="alert">
          {error}
        </p>
      )}
    </div>
  )
}
