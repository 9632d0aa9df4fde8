// "Rewind to here" and its undo: the preview of what goes back (files with their diffs; conflicts
// with the reason, the diff an overwrite would apply and an "Overwrite anyway" box each; files
// that cannot be put back; how many messages a chat rewind removes), then the actions. Rewind:
// Rewind files (the primary, files only), Rewind files and chat, or Cancel. Undo: Undo rewind or
// Cancel.

import { useEffect, useState } from 'react'
import { AlertTriangle } from 'lucide-react'
import { useT } from '../i18n'
import type { MessageKey } from '../i18n/en'
import { en } from '../i18n/en'
import { describeError } from '../lib/api'
import {
  diffRows,
  findUserIndex,
  rewind,
  undoRewind,
  type RewindDone,
  type RewindFile,
  type RewindRefusal,
  type RewindReport,
  type UndoReport,
} from '../lib/rewind'
import { Button, ErrorBox, Modal, Spinner } from './ui'

function Diff({ diff }: { diff: string }) {
  return (
    <pre
      tabIndex={0}
      data-testid="rewind-diff"
      className="max-h-60 overflow-auto border-t border-zinc-800 bg-zinc-950 py-1.5 font-mono text-[12px] leading-relaxed"
    >
      {diffRows(diff).map((r, i) => (
        <div
          key={i}
          data-op={r.op}
          className={`flex px-2 ${r.op === 'add' ? 'bg-emerald-500/10 text-emerald-300' : r.op === 'del' ? 'bg-red-500/10 text-red-300' : r.op === 'hunk' ? 'text-sky-400' : 'text-zinc-400'}`}
        >
          <span className="w-4 shrink-0 select-none text-zinc-600">{r.op === 'add' ? '+' : r.op === 'del' ? '−' : ' '}</span>
          <span className="whitespace-pre-wrap break-words">{r.text || ' '}</span>
        </div>
      ))}
    </pre>
  )
}

function FileRow({ f }: { f: RewindFile }) {
  const t = useT()
  return (
    <li className="rounded-lg border border-zinc-800" data-testid="rewind-file" data-path={f.path} data-action={f.action}>
      <div className="flex items-center gap-2 px-3 py-1.5 text-sm">
        <span className="min-w-0 flex-1 truncate font-mono text-zinc-200">{f.path}</span>
        <span className="shrink-0 rounded bg-zinc-800 px-1.5 text-xs text-zinc-300">{t(`rewind.op.${f.action}`)}</span>
      </div>
      {f.binary && <p className="px-3 pb-2 text-xs text-zinc-500">{t('rewind.binary')}</p>}
      {f.diff && <Diff diff={f.diff} />}
    </li>
  )
}

/** The reason in the language on screen (the English text for a code this client does not know). */
function useReason(): (r: RewindRefusal) => string {
  const t = useT()
  return (r) => {
    const key = `rewind.why.${r.code ?? ''}` as MessageKey
    return r.code && key in en ? t(key) : r.reason
  }
}

function Refusals({ title, list, testId }: { title: string; list: RewindRefusal[]; testId: string }) {
  const reason = useReason()
  if (!list.length) return null
  return (
    <section className="mt-4" data-testid={testId}>
      <h3 className="mb-1.5 flex items-center gap-1.5 text-sm font-medium text-amber-300">
        <AlertTriangle size={14} aria-hidden /> {title}
      </h3>
      <ul className="space-y-1 text-sm">
        {list.map((c) => (
          <li key={c.path} className="flex flex-wrap gap-x-2" data-path={c.path} data-code={c.code}>
            <span className="break-all font-mono text-zinc-200">{c.path}</span>
            <span className="text-zinc-500">{reason(c)}</span>
          </li>
        ))}
      </ul>
    </section>
  )
}

/** Conflicts: each with its reason, its diff behind a disclosure, and "Overwrite anyway". */
function Conflicts(props: { list: RewindRefusal[]; forced: Set<string>; onToggle: (path: string) => void; disabled: boolean }) {
  const t = useT()
  const reason = useReason()
  if (!props.list.length) return null
  return (
    <section className="mt-4" data-testid="rewind-conflicts">
      <h3 className="mb-1.5 flex items-center gap-1.5 text-sm font-medium text-amber-300">
        <AlertTriangle size={14} aria-hidden /> {t('rewind.conflicts')}
      </h3>
      <ul className="space-y-2 text-sm">
        {props.list.map((c) => {
          const canForce = c.code !== 'through_link'
          return (
            <li key={c.path} className="rounded-lg border border-amber-500/30" data-path={c.path} data-code={c.code} data-testid="rewind-conflict">
              <div className="flex flex-wrap items-center gap-x-3 gap-y-1 px-3 py-1.5">
                <span className="min-w-0 flex-1 break-all font-mono text-zinc-200">{c.path}</span>
                {canForce && (
                  <label className="flex shrink-0 items-center gap-1.5 text-xs text-zinc-300">
                    <input
                      type="checkbox"
                      checked={props.forced.has(c.path)}
                      onChange={() => props.onToggle(c.path)}
                      disabled={props.disabled}
                      data-testid="rewind-overwrite"
                    />
                    {t('rewind.overwrite')}
                  </label>
                )}
                <span className="basis-full text-xs text-zinc-400">{reason(c)}</span>
              </div>
              {c.binary && <p className="px-3 pb-2 text-xs text-zinc-500">{t('rewind.binary')}</p>}
              {c.diff && (
                <details>
                  <summary className="cursor-pointer px-3 pb-1.5 text-xs text-sky-400">{t('rewind.showDiff')}</summary>
                  <Diff diff={c.diff} />
                </details>
              )}
            </li>
          )
        })}
      </ul>
    </section>
  )
}

type Props = {
  chatId: string
  onClose: () => void
} & (
  | {
      mode: 'rewind'
      /** user messages after the chosen one */
      fromEnd: number
      /** applied: what the marker says, and whether the chat's messages went too */
      onRewound: (done: RewindDone, chat: boolean) => void
    }
  | {
      mode: 'undo'
      /** the preview the caller already has (it showed conflicts) */
      preview: UndoReport
      onUndone: (restored: boolean) => void
    }
)

export function RewindDialog(props: Props) {
  const { chatId, onClose } = props
  const t = useT()
  const [index, setIndex] = useState<number | null>(null)
  const [preview, setPreview] = useState<RewindReport | UndoReport | null>(props.mode === 'undo' ? props.preview : null)
  const [error, setError] = useState<string | null>(null)
  const [busy, setBusy] = useState(false)
  const [forced, setForced] = useState<Set<string>>(new Set())
  const fromEnd = props.mode === 'rewind' ? props.fromEnd : -1

  useEffect(() => {
    if (fromEnd < 0) return
    let live = true
    findUserIndex(chatId, fromEnd)
      .then(async (k) => {
        if (k < 0) throw new Error(t('rewind.notFound'))
        // A dry run with the chat too: the same files, plus how many messages would go.
        const report = await rewind(chatId, k, { dryRun: true, chat: true })
        if (!live) return
        setIndex(k)
        setPreview(report)
      })
      .catch((e) => live && setError(describeError(e)))
    return () => {
      live = false
    }
  }, [chatId, fromEnd, t])

  const toggle = (path: string) =>
    setForced((s) => {
      const next = new Set(s)
      if (next.has(path)) next.delete(path)
      else next.add(path)
      return next
    })

  const apply = async (chat: boolean) => {
    setBusy(true)
    setError(null)
    const force = [...forced]
    try {
      if (props.mode === 'undo') {
        const report = await undoRewind(chatId, { dryRun: false, force })
        if (report.failed?.length) {
          setError(t('rewind.partial', { count: report.failed.length }))
          setPreview(report)
          return
        }
        props.onUndone(report.restored)
        onClose()
        return
      }
      if (index === null) return
      const report = await rewind(chatId, index, { dryRun: false, chat, force })
      const failed = report.failed ?? []
      if (failed.length) {
        setError(t('rewind.partial', { count: failed.length }))
        setPreview(report)
        return
      }
      props.onRewound({ message: report.message, files: report.files.length, messages: report.removed_messages }, chat)
      onClose()
    } catch (e) {
      setError(t(props.mode === 'undo' ? 'rewind.undoFailed' : 'rewind.failed', { error: describeError(e) }))
    } finally {
      setBusy(false)
    }
  }

  const files = preview?.files ?? []
  // With every conflict ticked, the files it would write are the ones to count.
  const writes = files.length + (preview?.conflicts ?? []).filter((c) => forced.has(c.path) && !files.some((f) => f.path === c.path)).length
  const undo = props.mode === 'undo'
  const removed = preview && 'removed_messages' in preview ? preview.removed_messages : undefined
  return (
    <Modal
      title={t(undo ? 'rewind.undoTitle' : 'rewind.title')}
      wide
      onClose={onClose}
      closeDisabled={busy}
      footer={
        <>
          <Button onClick={onClose} disabled={busy} data-testid="rewind-cancel">
            {t('common.cancel')}
          </Button>
          {undo ? (
            <Button variant="primary" onClick={() => apply(false)} disabled={busy || !preview} data-testid="rewind-undo-apply">
              {busy && <Spinner />} {t('rewind.undoButton')}
            </Button>
          ) : (
            <>
              <Button onClick={() => apply(true)} disabled={busy || !preview} data-testid="rewind-files-chat">
                {t('rewind.filesAndChat')}
              </Button>
              <Button variant="primary" onClick={() => apply(false)} disabled={busy || !preview || !writes} data-testid="rewind-files">
                {t('rewind.filesButton')}
              </Button>
            </>
          )}
        </>
      }
    >
      {error && <ErrorBox message={error} />}
      {!preview && !error && (
        <p className="flex items-center gap-2 text-sm text-zinc-400" role="status">
          <Spinner size={14} /> {t('rewind.loading')}
        </p>
      )}
      {preview && (
        <div data-testid="rewind-preview">
          {(files.length > 0 || (!preview.conflicts.length && !preview.not_rewindable.length)) && (
            <h3 className="mb-1.5 text-sm font-medium text-zinc-300">{t(undo ? 'rewind.undoFiles' : 'rewind.files')}</h3>
          )}
          {files.length > 0 && (
            <ul className="space-y-2">
              {files.map((f) => (
                <FileRow key={f.path} f={f} />
              ))}
            </ul>
          )}
          {!files.length && !preview.conflicts.length && !preview.not_rewindable.length && (
            <p className="text-sm text-zinc-500" data-testid="rewind-none">
              {t(undo ? 'rewind.undoNone' : 'rewind.none')}
            </p>
          )}
          <Conflicts list={preview.conflicts} forced={forced} onToggle={toggle} disabled={busy} />
          <Refusals title={t('rewind.notRewindable')} list={preview.not_rewindable} testId="rewind-not-rewindable" />
          {typeof removed === 'number' && (
            <p className="mt-4 text-sm text-zinc-300" data-testid="rewind-messages" data-count={removed}>
              {t('rewind.messagesGo', { n: removed })}
            </p>
          )}
          {undo && 'restored' in preview && preview.restored && (
            <p className="mt-4 text-sm text-zinc-300" data-testid="rewind-undo-messages">
              {t('rewind.undoMessages')}
            </p>
          )}
          {preview.evicted && <p className="mt-3 text-xs text-zinc-500">{t('rewind.evicted')}</p>}
        </div>
      )}
    </Modal>
  )
}
