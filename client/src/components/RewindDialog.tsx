// "Rewind to here": the preview of what a rewind puts back (files with their diffs, conflicts
// left alone, files that cannot be restored, how many messages a chat rewind removes), then
// Rewind files (the primary, files only), Rewind files and chat, or Cancel.

import { useEffect, useState } from 'react'
import { AlertTriangle } from 'lucide-react'
import { useT } from '../i18n'
import { describeError } from '../lib/api'
import { diffRows, findUserIndex, rewind, type RewindFile, type RewindRefusal, type RewindReport } from '../lib/rewind'
import { Button, ErrorBox, Modal, Spinner } from './ui'

function FileRow({ f }: { f: RewindFile }) {
  const t = useT()
  return (
    <li className="rounded-lg border border-zinc-800" data-testid="rewind-file" data-path={f.path} data-action={f.action}>
      <div className="flex items-center gap-2 px-3 py-1.5 text-sm">
        <span className="min-w-0 flex-1 truncate font-mono text-zinc-200">{f.path}</span>
        <span className="shrink-0 rounded bg-zinc-800 px-1.5 text-xs text-zinc-300">{t(`rewind.op.${f.action}`)}</span>
      </div>
      {f.binary && <p className="px-3 pb-2 text-xs text-zinc-500">{t('rewind.binary')}</p>}
      {f.diff && (
        <pre
          tabIndex={0}
          data-testid="rewind-diff"
          className="max-h-60 overflow-auto border-t border-zinc-800 bg-zinc-950 py-1.5 font-mono text-[12px] leading-relaxed"
        >
          {diffRows(f.diff).map((r, i) => (
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
      )}
    </li>
  )
}

function Refusals({ title, list, testId }: { title: string; list: RewindRefusal[]; testId: string }) {
  if (!list.length) return null
  return (
    <section className="mt-4" data-testid={testId}>
      <h3 className="mb-1.5 flex items-center gap-1.5 text-sm font-medium text-amber-300">
        <AlertTriangle size={14} aria-hidden /> {title}
      </h3>
      <ul className="space-y-1 text-sm">
        {list.map((c) => (
          <li key={c.path} className="flex gap-2" data-path={c.path}>
            <span className="font-mono text-zinc-200">{c.path}</span>
            <span className="text-zinc-500">{c.reason}</span>
          </li>
        ))}
      </ul>
    </section>
  )
}

export function RewindDialog(props: {
  chatId: string
  /** user messages after the chosen one */
  fromEnd: number
  onClose: () => void
  /** the chat was rewound too: its message goes back to the composer */
  onChatRewound: (message: string) => void
}) {
  const { chatId, fromEnd, onClose, onChatRewound } = props
  const t = useT()
  const [index, setIndex] = useState<number | null>(null)
  const [preview, setPreview] = useState<RewindReport | null>(null)
  const [error, setError] = useState<string | null>(null)
  const [busy, setBusy] = useState(false)

  useEffect(() => {
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

  const apply = async (chat: boolean) => {
    if (index === null) return
    setBusy(true)
    setError(null)
    try {
      const report = await rewind(chatId, index, { dryRun: false, chat })
      const failed = report.failed ?? []
      if (failed.length) {
        setError(t('rewind.partial', { count: failed.length }))
        setPreview(report)
        return
      }
      if (chat) onChatRewound(report.message)
      onClose()
    } catch (e) {
      setError(t('rewind.failed', { error: describeError(e) }))
    } finally {
      setBusy(false)
    }
  }

  const files = preview?.files ?? []
  return (
    <Modal
      title={t('rewind.title')}
      wide
      onClose={onClose}
      closeDisabled={busy}
      footer={
        <>
          <Button onClick={onClose} disabled={busy} data-testid="rewind-cancel">
            {t('common.cancel')}
          </Button>
          <Button onClick={() => apply(true)} disabled={busy || !preview} data-testid="rewind-files-chat">
            {t('rewind.filesAndChat')}
          </Button>
          <Button variant="primary" onClick={() => apply(false)} disabled={busy || !preview || !files.length} data-testid="rewind-files">
            {t('rewind.filesButton')}
          </Button>
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
          <h3 className="mb-1.5 text-sm font-medium text-zinc-300">{t('rewind.files')}</h3>
          {files.length ? (
            <ul className="space-y-2">
              {files.map((f) => (
                <FileRow key={f.path} f={f} />
              ))}
            </ul>
          ) : (
            <p className="text-sm text-zinc-500" data-testid="rewind-none">
              {t('rewind.none')}
            </p>
          )}
          <Refusals title={t('rewind.conflicts')} list={preview.conflicts} testId="rewind-conflicts" />
          <Refusals title={t('rewind.notRewindable')} list={preview.not_rewindable} testId="rewind-not-rewindable" />
          {typeof preview.removed_messages === 'number' && (
            <p className="mt-4 text-sm text-zinc-300" data-testid="rewind-messages" data-count={preview.removed_messages}>
              {t('rewind.messagesGo', { n: preview.removed_messages })}
            </p>
          )}
          {preview.evicted && <p className="mt-3 text-xs text-zinc-500">{t('rewind.evicted')}</p>}
        </div>
      )}
    </Modal>
  )
}
