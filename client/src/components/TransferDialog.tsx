// Settings → Export and import: every chat as one zip in a chosen format, and the import of our
// own export, ChatGPT's conversations.json or an Open WebUI export (docs/web-client.md).

import { useRef, useState } from 'react'
import { Download, Upload } from 'lucide-react'
import { useT } from '../i18n'
import { describeError } from '../lib/api'
import { EXPORT_FORMATS, exportAll, importFile, type ExportFormat } from '../lib/transfer'
import { Button, Modal, Spinner } from './ui'

type Status = { kind: 'ok' | 'error'; text: string } | null

export function TransferDialog({ onClose, onImported }: { onClose: () => void; onImported: () => void }) {
  const t = useT()
  const [format, setFormat] = useState<ExportFormat>('jsonl')
  const [busy, setBusy] = useState<'export' | 'import' | null>(null)
  const [status, setStatus] = useState<Status>(null)
  const fileRef = useRef<HTMLInputElement>(null)

  const onExport = async () => {
    setBusy('export')
    setStatus(null)
    try {
      const name = await exportAll(format)
      setStatus({ kind: 'ok', text: t('transfer.exported', { name }) })
    } catch (e) {
      setStatus({ kind: 'error', text: t('transfer.exportFailed', { error: describeError(e) }) })
    } finally {
      setBusy(null)
    }
  }

  const onFile = async (file: File | undefined) => {
    if (!file) return
    setBusy('import')
    setStatus(null)
    try {
      const res = await importFile(file)
      setStatus({ kind: 'ok', text: t('transfer.imported', { count: String(res.imported.length), source: t(`transfer.source.${res.source}`) }) })
      onImported()
    } catch (e) {
      setStatus({ kind: 'error', text: t('transfer.importFailed', { error: describeError(e) }) })
    } finally {
      setBusy(null)
      if (fileRef.current) fileRef.current.value = ''
    }
  }

  return (
    <Modal title={t('transfer.title')} onClose={onClose} closeDisabled={busy !== null}>
      <section className="space-y-2">
        <h3 className="text-sm font-medium text-zinc-200">{t('transfer.exportAll')}</h3>
        <div role="radiogroup" aria-label={t('transfer.format')} className="flex flex-wrap gap-3 text-sm text-zinc-300">
          {EXPORT_FORMATS.map((f) => (
            <label key={f} className="flex items-center gap-1.5">
              <input type="radio" name="export-format" value={f} checked={format === f} onChange={() => setFormat(f)} data-testid={`export-format-${f}`} />
              {t(`transfer.format.${f}`)}
            </label>
          ))}
        </div>
        <Button variant="primary" onClick={onExport} disabled={busy !== null} data-testid="export-all">
          {busy === 'export' ? <Spinner /> : <Download size={14} />} {t('transfer.exportAllButton')}
        </Button>
      </section>
      <section className="mt-5 space-y-2 border-t border-zinc-800 pt-4">
        <h3 className="text-sm font-medium text-zinc-200">{t('transfer.import')}</h3>
        <p className="text-xs text-zinc-500">{t('transfer.importHint')}</p>
        <input
          ref={fileRef}
          type="file"
          accept=".jsonl,.zip,.json,application/json,application/zip"
          className="hidden"
          data-testid="import-file"
          onChange={(e) => void onFile(e.target.files?.[0])}
        />
        <Button onClick={() => fileRef.current?.click()} disabled={busy !== null} data-testid="import-button">
          {busy === 'import' ? <Spinner /> : <Upload size={14} />} {t('transfer.importButton')}
        </Button>
      </section>
      {status && (
        <p
          role={status.kind === 'error' ? 'alert' : 'status'}
          data-testid="transfer-status"
          className={`mt-4 rounded-md border px-3 py-2 text-sm ${
            status.kind === 'error' ? 'border-red-900/60 bg-red-950/40 text-red-300' : 'border-emerald-900/60 bg-emerald-950/30 text-emerald-300'
          }`}
        >
          {status.text}
        </p>
      )}
    </Modal>
  )
}
