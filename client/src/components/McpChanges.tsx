// MCP tool pinning review: the tools of one server that changed their description or input
// schema since the user approved them (held: invisible to the model), each as a readable diff
// of the old and new description and schema JSON, with Approve per tool and for all.

import { useCallback, useEffect, useState } from 'react'
import { api, describeError } from '../lib/api'
import { changeDiff, type DiffLine, type ToolChanges } from '../lib/mcpDiff'
import { useT } from '../i18n'
import { Button, ErrorBox, Modal, Spinner } from './ui'

const enc = encodeURIComponent

const LINE_CLASS: Record<DiffLine['op'], string> = {
  same: 'text-zinc-400',
  add: 'bg-emerald-500/10 text-emerald-300',
  del: 'bg-red-500/10 text-red-300 line-through decoration-red-400/50',
}
const LINE_MARK: Record<DiffLine['op'], string> = { same: ' ', add: '+', del: '-' }

function Diff({ lines, testId }: { lines: DiffLine[]; testId: string }) {
  return (
    <pre
      className="max-h-64 overflow-auto rounded-md border border-zinc-800 bg-zinc-950 p-2 font-mono text-xs whitespace-pre-wrap"
      data-testid={testId}
    >
      {lines.map((l, i) => (
        <div key={i} className={LINE_CLASS[l.op]} data-op={l.op}>
          {LINE_MARK[l.op]} {l.text}
        </div>
      ))}
    </pre>
  )
}

export function McpChangesModal({
  server,
  displayName,
  onClose,
  onApproved,
}: {
  server: string
  displayName: string
  onClose: () => void
  onApproved: () => void
}) {
  const t = useT()
  const [data, setData] = useState<ToolChanges | null>(null)
  const [error, setError] = useState<string | null>(null)
  const [busy, setBusy] = useState<string | null>(null)

  const load = useCallback(async () => {
    setError(null)
    try {
      setData(await api.get<ToolChanges>(`/mcp/servers/${enc(server)}/changes`))
    } catch (e) {
      setError(describeError(e))
    }
  }, [server])

  useEffect(() => {
    void load()
  }, [load])

  const approve = async (tools: string[] | null, key: string) => {
    setBusy(key)
    setError(null)
    try {
      const res = await api.post<ToolChanges>(`/mcp/servers/${enc(server)}/changes/approve`, tools ? { tools } : {})
      setData(res)
      onApproved()
      if (!res?.changes?.length) onClose()
    } catch (e) {
      setError(describeError(e))
    } finally {
      setBusy(null)
    }
  }

  const changes = data?.changes ?? []
  return (
    <Modal
      wide
      title={t('mcp.pins.title', { name: displayName })}
      onClose={onClose}
      closeDisabled={busy !== null}
      footer={
        <>
          <Button onClick={onClose} disabled={busy !== null}>
            {t('mcp.pins.close')}
          </Button>
          {changes.length > 1 && (
            <Button variant="primary" onClick={() => void approve(null, '*')} disabled={busy !== null} data-testid="mcp-approve-all">
              {busy === '*' && <Spinner />} {t('mcp.pins.approveAll')}
            </Button>
          )}
        </>
      }
    >
      <div className="space-y-4" data-testid="mcp-changes">
        <p className="text-sm text-zinc-400">{t('mcp.pins.intro')}</p>
        {error && <ErrorBox message={error} onRetry={() => void load()} />}
        {data === null && !error && (
          <p className="flex items-center gap-2 text-sm text-zinc-500">
            <Spinner /> {t('mcp.pins.loading')}
          </p>
        )}
        {data !== null && changes.length === 0 && <p className="text-sm text-zinc-500">{t('mcp.pins.none')}</p>}
        {changes.map((c) => {
          const d = changeDiff(c)
          return (
            <section key={c.original_name} className="rounded-lg border border-zinc-800 p-3" data-testid="mcp-change" data-tool={c.original_name}>
              <div className="mb-2 flex items-center gap-2">
                <span className="min-w-0 flex-1 truncate font-mono text-sm text-zinc-100">{c.name}</span>
                <Button
                  variant="primary"
                  onClick={() => void approve([c.original_name], c.original_name)}
                  disabled={busy !== null}
                  data-testid="mcp-approve"
                >
                  {busy === c.original_name && <Spinner />} {t('mcp.pins.approve')}
                </Button>
              </div>
              {!c.old && <p className="mb-2 text-xs text-amber-300">{t('mcp.pins.noOld')}</p>}
              <h3 className="mb-1 text-xs font-medium text-zinc-300">{t('mcp.pins.description')}</h3>
              <Diff lines={d.description} testId="mcp-diff-description" />
              <h3 className="mt-3 mb-1 text-xs font-medium text-zinc-300">{t('mcp.pins.schema')}</h3>
              <Diff lines={d.schema} testId="mcp-diff-schema" />
            </section>
          )
        })}
      </div>
    </Modal>
  )
}
