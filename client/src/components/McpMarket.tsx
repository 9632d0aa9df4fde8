// MCP Market: list, connect/disconnect, create/edit (SSE only, masked header secrets), delete.

import { useCallback, useEffect, useRef, useState } from 'react'
import { CheckCircle2, Circle, MoreHorizontal, Pencil, Plus, RefreshCw, ShieldAlert, Trash2, XCircle } from 'lucide-react'
import { useT, type MessageKey } from '../i18n'
import { api, describeError } from '../lib/api'
import {
  buildMcpBody,
  formFromServer,
  MASK,
  MAX_HEADERS,
  renameHeader,
  validateMcpForm,
  type McpForm,
  type McpFormErrors,
} from '../lib/mcpForm'
import type { McpServer } from '../lib/types'
import { openAuthorization, signOut, waitForAuthorized } from '../lib/mcpAuth'
import { McpChangesModal } from './McpChanges'
import { Button, ConfirmDialog, ErrorBox, Field, inputBase, inputClass, Modal, PopupMenu, SkeletonRows, Spinner } from './ui'

const STATUS: Record<string, { label: MessageKey; cls: string }> = {
  disconnected: { label: 'mcp.status.disconnected', cls: 'text-zinc-400' },
  connecting: { label: 'mcp.status.connecting', cls: 'text-amber-300' },
  connected: { label: 'mcp.status.connected', cls: 'text-emerald-400' },
  error: { label: 'mcp.status.error', cls: 'text-red-400' },
}

function StatusIcon({ status }: { status: string }) {
  if (status === 'connected') return <CheckCircle2 size={14} />
  if (status === 'connecting') return <Spinner size={14} />
  if (status === 'error') return <XCircle size={14} />
  return <Circle size={10} fill="currentColor" className="opacity-60" />
}

const enc = encodeURIComponent
let rowKey = 0

function McpFormModal({
  initial,
  onClose,
  onSaved,
}: {
  initial: McpServer | null
  onClose: () => void
  onSaved: () => void
}) {
  const t = useT()
  const editing = initial !== null
  const [form, setForm] = useState<McpForm>(() =>
    initial ? formFromServer(initial) : { type: 'sse', name: '', display_name: '', url: '', description: '', headers: [] },
  )
  const [errors, setErrors] = useState<McpFormErrors>({})
  const [saving, setSaving] = useState(false)
  const [saveError, setSaveError] = useState<string | null>(null)

  const set = (patch: Partial<McpForm>) => setForm((f) => ({ ...f, ...patch }))

  const save = async () => {
    const errs = validateMcpForm(form, editing, t)
    setErrors(errs)
    if (Object.keys(errs).length) return
    setSaving(true)
    setSaveError(null)
    try {
      const body = buildMcpBody(form, editing)
      if (editing) await api.put(`/mcp/servers/${enc(initial.name)}`, body)
      else await api.post('/mcp/servers', body)
      onSaved()
      onClose()
    } catch (e) {
      setSaveError(describeError(e))
    } finally {
      setSaving(false)
    }
  }

  return (
    <Modal
      title={t(editing ? 'mcp.editTitle' : 'mcp.new')}
      onClose={onClose}
      closeDisabled={saving}
      footer={
        <>
          <Button onClick={onClose} disabled={saving}>
            {t('common.cancel')}
          </Button>
          <Button variant="primary" onClick={save} disabled={saving} data-testid="mcp-save">
            {saving && <Spinner />} {t('common.save')}
          </Button>
        </>
      }
    >
      <form
        className="space-y-4"
        onSubmit={(e) => {
          e.preventDefault()
          void save()
        }}
        autoComplete="off"
      >
        <Field label={t('mcp.form.transport')}>
          <select
            className={inputClass}
            value={form.type}
            aria-label={t('mcp.form.transport')}
            data-testid="mcp-transport"
            onChange={(e) => set({ type: e.target.value === 'streamable_http' ? 'streamable_http' : 'sse' })}
          >
            <option value="sse">{t('mcp.form.transport.sse')}</option>
            <option value="streamable_http">{t('mcp.form.transport.http')}</option>
          </select>
        </Field>
        <Field label={t('mcp.form.name')} error={errors.name}>
          <input
            className={`${inputClass} font-mono`}
            value={form.name}
            readOnly={editing}
            placeholder="weather"
            aria-label={t('mcp.form.name')}
            onChange={(e) => set({ name: e.target.value })}
          />
        </Field>
        <Field label={t('mcp.form.displayTitle')} error={errors.display_name}>
          <input
            className={inputClass}
            value={form.display_name}
            maxLength={100}
            aria-label={t('mcp.form.displayTitle')}
            onChange={(e) => set({ display_name: e.target.value })}
          />
        </Field>
        <Field label={t('mcp.form.url')} error={errors.url}>
          <input
            className={`${inputClass} font-mono`}
            value={form.url}
            placeholder={form.type === 'sse' ? 'http://127.0.0.1:9000/sse' : 'https://mcp.example.com/mcp'}
            aria-label={t('mcp.form.url')}
            onChange={(e) => set({ url: e.target.value })}
          />
        </Field>
        <Field label={t('mcp.form.description')} error={errors.description}>
          <textarea
            className={`${inputClass} min-h-16`}
            value={form.description}
            aria-label={t('mcp.form.description')}
            onChange={(e) => set({ description: e.target.value })}
          />
        </Field>
        <div>
          <div className="mb-1.5 flex items-center justify-between">
            <span className="text-[13px] font-medium text-zinc-300">{t('mcp.form.headers')}</span>
            <Button
              variant="ghost"
              className="!px-2 !py-1 text-xs"
              disabled={form.headers.length >= MAX_HEADERS}
              onClick={() =>
                set({ headers: [...form.headers, { key: `n${++rowKey}`, name: '', value: '', storedName: null }] })
              }
            >
              <Plus size={13} /> {t('mcp.form.addHeader')}
            </Button>
          </div>
          {form.headers.length === 0 ? (
            <p className="text-xs text-zinc-600">{t('mcp.form.noHeaders')}</p>
          ) : (
            <div className="space-y-2">
              {form.headers.map((h, i) => (
                <div key={h.key} className="flex gap-2">
                  <input
                    className={`${inputBase} w-2/5 min-w-0 font-mono`}
                    placeholder="Authorization"
                    aria-label={t('mcp.form.headerName')}
                    value={h.name}
                    onChange={(e) => {
                      const headers = [...form.headers]
                      headers[i] = renameHeader(h, e.target.value)
                      set({ headers })
                    }}
                  />
                  <input
                    className={`${inputBase} min-w-0 flex-1 font-mono`}
                    type="password"
                    autoComplete="new-password"
                    placeholder={t(h.storedName && h.name === h.storedName ? 'mcp.form.storedSecret' : 'mcp.form.value')}
                    aria-label={t('mcp.form.headerValue')}
                    value={h.value}
                    onFocus={(e) => h.value === MASK && e.target.select()}
                    onChange={(e) => {
                      const headers = [...form.headers]
                      headers[i] = { ...h, value: e.target.value }
                      set({ headers })
                    }}
                  />
                  <button
                    type="button"
                    aria-label={t('mcp.form.removeHeader')}
                    onClick={() => set({ headers: form.headers.filter((_, j) => j !== i) })}
                    className="rounded-md px-2 text-zinc-500 hover:bg-zinc-800 hover:text-red-400"
                  >
                    <Trash2 size={14} />
                  </button>
                </div>
              ))}
            </div>
          )}
          {errors.headers && <p className="mt-1 text-xs text-red-400">{errors.headers}</p>}
        </div>
        {saveError && <ErrorBox message={saveError} />}
        <button type="submit" hidden />
      </form>
    </Modal>
  )
}

function RowMenu({ onEdit, onDelete }: { onEdit: () => void; onDelete: () => void }) {
  const t = useT()
  const [open, setOpen] = useState(false)
  const ref = useRef<HTMLDivElement>(null)
  return (
    <div ref={ref} className="relative">
      <button
        type="button"
        aria-label={t('mcp.moreActions')}
        aria-haspopup="menu"
        aria-expanded={open}
        onClick={() => setOpen((o) => !o)}
        className="rounded-md p-1.5 text-zinc-500 hover:bg-zinc-800 hover:text-zinc-200"
      >
        <MoreHorizontal size={16} />
      </button>
      <PopupMenu open={open} onClose={() => setOpen(false)} within={ref} className="top-9 right-0 z-20 w-32 overflow-hidden">
        <button
          role="menuitem"
          type="button"
          onClick={() => {
            setOpen(false)
            onEdit()
          }}
          className="flex w-full items-center gap-2 px-3 py-1.5 text-sm text-zinc-200 hover:bg-zinc-800"
        >
          <Pencil size={14} /> {t('common.edit')}
        </button>
        <button
          role="menuitem"
          type="button"
          onClick={() => {
            setOpen(false)
            onDelete()
          }}
          className="flex w-full items-center gap-2 px-3 py-1.5 text-sm text-red-400 hover:bg-zinc-800"
        >
          <Trash2 size={14} /> {t('common.delete')}
        </button>
      </PopupMenu>
    </div>
  )
}

export function McpMarket() {
  const t = useT()
  const [review, setReview] = useState<McpServer | null>(null)
  const [servers, setServers] = useState<McpServer[] | null>(null)
  const [loading, setLoading] = useState(false)
  const [loadError, setLoadError] = useState<string | null>(null)
  const [busy, setBusy] = useState<string | null>(null)
  const [rowErrors, setRowErrors] = useState<Record<string, string>>({})
  const [form, setForm] = useState<{ server: McpServer | null } | null>(null)
  const [confirm, setConfirm] = useState<McpServer | null>(null)
  const [deleting, setDeleting] = useState(false)
  const [deleteError, setDeleteError] = useState<string | null>(null)
  const [authWaiting, setAuthWaiting] = useState<string | null>(null)

  const load = useCallback(async () => {
    setLoading(true)
    setLoadError(null)
    try {
      const res = await api.get<{ servers: McpServer[] }>('/mcp/servers')
      setServers(Array.isArray(res?.servers) ? res.servers : [])
    } catch (e) {
      setLoadError(describeError(e))
    } finally {
      setLoading(false)
    }
  }, [])

  useEffect(() => {
    void load()
  }, [load])

  // Connect on a server that needs OAuth: the provider's page opens, the list is polled until
  // the callback has landed, then the server connects with its new token.
  const authorize = async (s: McpServer) => {
    setBusy(s.name)
    setAuthWaiting(s.name)
    setRowErrors((r) => ({ ...r, [s.name]: '' }))
    try {
      await openAuthorization(s.name)
      const list = async () => (await api.get<{ servers: McpServer[] }>('/mcp/servers'))?.servers ?? []
      if (await waitForAuthorized(list, s.name)) {
        await api.post(`/mcp/servers/${enc(s.name)}/connect`, undefined, { timeoutMs: 60_000 })
      } else {
        setRowErrors((r) => ({ ...r, [s.name]: t('mcp.auth.timedOut') }))
      }
    } catch (e) {
      setRowErrors((r) => ({ ...r, [s.name]: describeError(e) }))
    } finally {
      setAuthWaiting(null)
      setBusy(null)
      await load()
    }
  }

  const logout = async (s: McpServer) => {
    setBusy(s.name)
    try {
      await signOut(s.name)
    } catch (e) {
      setRowErrors((r) => ({ ...r, [s.name]: describeError(e) }))
    } finally {
      setBusy(null)
      await load()
    }
  }

  const toggle = async (s: McpServer) => {
    if (s.auth === 'required' && s.status !== 'connected') return authorize(s)
    setBusy(s.name)
    setRowErrors((r) => ({ ...r, [s.name]: '' }))
    try {
      const action = s.status === 'connected' ? 'disconnect' : 'connect'
      await api.post(`/mcp/servers/${enc(s.name)}/${action}`, undefined, { timeoutMs: 60_000 })
    } catch (e) {
      setRowErrors((r) => ({ ...r, [s.name]: describeError(e) }))
    } finally {
      setBusy(null)
      await load()
    }
  }

  return (
    <div className="h-full overflow-y-auto" data-testid="mcp-market">
      <div className="mx-auto max-w-4xl px-4 py-6 sm:px-6">
        <header className="mb-5 flex flex-wrap items-center gap-3">
          <div className="min-w-0 flex-1">
            <h1 className="text-xl font-semibold text-zinc-50">{t('mcp.title')}</h1>
            <p className="text-sm text-zinc-500">{t('mcp.subtitle')}</p>
          </div>
          <Button variant="ghost" aria-label={t('common.refresh')} onClick={() => void load()} disabled={loading}>
            <RefreshCw size={15} className={loading ? 'animate-spin' : ''} />
          </Button>
          <Button variant="primary" onClick={() => setForm({ server: null })} data-testid="mcp-new">
            <Plus size={15} /> {t('mcp.new')}
          </Button>
        </header>
        {loadError && <ErrorBox message={loadError} onRetry={() => void load()} />}
        {servers === null && !loadError ? (
          <SkeletonRows />
        ) : servers && servers.length === 0 ? (
          <p className="rounded-xl border border-dashed border-zinc-800 px-4 py-10 text-center text-sm text-zinc-500">
            {t('mcp.empty')}
          </p>
        ) : (
          <div className="mt-3 space-y-3">
            {(servers ?? []).map((s) => {
              const st = STATUS[s.status] ?? STATUS.disconnected
              const err = rowErrors[s.name] || s.status_error
              const working = busy === s.name
              const needsAuth = s.auth === 'required' && s.status !== 'connected'
              const label = needsAuth
                ? t('mcp.auth.authorize')
                : t(s.status === 'connected' ? 'mcp.disconnect' : s.status === 'error' ? 'mcp.retryConnect' : 'mcp.connect')
              return (
                <div
                  key={s.name}
                  className="rounded-xl border border-zinc-800 bg-zinc-900/40 p-4 transition hover:border-zinc-700"
                  data-testid="mcp-row"
                  data-name={s.name}
                  data-status={s.status}
                >
                  <div className="flex items-start gap-3">
                    <div className="min-w-0 flex-1">
                      <div className="flex flex-wrap items-center gap-2">
                        <span className="font-medium text-zinc-100">{s.display_name || s.name}</span>
                        {s.builtin && (
                          <span className="rounded-full border border-zinc-700 px-2 py-0.5 text-[10px] text-zinc-400">{t('common.builtin')}</span>
                        )}
                        <span className={`flex items-center gap-1 text-xs ${st.cls}`} data-testid="mcp-status">
                          <StatusIcon status={s.status} /> {t(st.label)}
                        </span>
                        {s.auth && (
                          <span
                            className={`rounded-full border px-2 py-0.5 text-[10px] ${s.auth === 'authorized' ? 'border-emerald-800 text-emerald-400' : 'border-amber-800 text-amber-300'}`}
                            data-testid="mcp-auth"
                            data-auth={s.auth}
                          >
                            {s.auth === 'authorized' ? t('mcp.auth.authorized') : t('mcp.auth.required')}
                          </span>
                        )}
                        {(s.pending_changes ?? 0) > 0 && (
                          <button
                            type="button"
                            onClick={() => setReview(s)}
                            title={t('mcp.pins.changedTitle', { count: s.pending_changes ?? 0 })}
                            className="flex items-center gap-1 rounded-full border border-amber-500/40 bg-amber-500/10 px-2 py-0.5 text-[11px] text-amber-300 hover:bg-amber-500/20"
                            data-testid="mcp-review"
                          >
                            <ShieldAlert size={12} /> {t('mcp.pins.changed')}
                          </button>
                        )}
                      </div>
                      <p className="mt-1 text-sm text-zinc-400">{s.description || t('common.noDescription')}</p>
                      <p className="mt-1 font-mono text-xs text-zinc-500">
                        {s.name} · {s.type.toUpperCase()} · {t('mcp.tools', { count: s.tool_count })}
                      </p>
                      {err && <p className="mt-1.5 text-xs break-words text-red-400">{err}</p>}
                    </div>
                    <div className="flex shrink-0 items-center gap-1">
                      <Button
                        variant={s.status === 'connected' ? 'secondary' : 'primary'}
                        disabled={busy !== null || s.status === 'connecting'}
                        onClick={() => void toggle(s)}
                        data-testid="mcp-toggle"
                      >
                        {working ? (
                          <>
                            <Spinner /> {authWaiting === s.name ? t('mcp.auth.waiting') : t('mcp.working')}
                          </>
                        ) : (
                          label
                        )}
                      </Button>
                      {s.auth === 'authorized' && (
                        <Button
                          variant="ghost"
                          disabled={busy !== null}
                          onClick={() => void logout(s)}
                          data-testid="mcp-sign-out"
                        >
                          {t('mcp.auth.signOut')}
                        </Button>
                      )}
                      {s.mutable && (
                        <RowMenu
                          onEdit={() => setForm({ server: s })}
                          onDelete={() => {
                            setDeleteError(null)
                            setConfirm(s)
                          }}
                        />
                      )}
                    </div>
                  </div>
                </div>
              )
            })}
          </div>
        )}
      </div>
      {review && (
        <McpChangesModal
          server={review.name}
          displayName={review.display_name || review.name}
          onClose={() => setReview(null)}
          onApproved={() => void load()}
        />
      )}
      {form && <McpFormModal initial={form.server} onClose={() => setForm(null)} onSaved={() => void load()} />}
      {confirm && (
        <ConfirmDialog
          message={t('mcp.confirmDelete', { name: confirm.display_name || confirm.name })}
          busy={deleting}
          error={deleteError}
          onCancel={() => setConfirm(null)}
          onConfirm={async () => {
            setDeleting(true)
            try {
              await api.del(`/mcp/servers/${enc(confirm.name)}`)
              setConfirm(null)
              await load()
            } catch (e) {
              setDeleteError(describeError(e))
            } finally {
              setDeleting(false)
            }
          }}
        />
      )}
    </div>
  )
}
