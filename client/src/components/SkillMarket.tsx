// Skill Market: search/paginate, enable/disable, delete, view/edit SKILL.md (hash + 409 handling),
// ZIP upload, and the invalid-package section.

import { useCallback, useEffect, useRef, useState } from 'react'
import { AlertTriangle, Eye, FileArchive, History, Pencil, RefreshCw, Search, Trash2, Upload } from 'lucide-react'
import { formatNumber, useI18n, useT } from '../i18n'
import { api, describeError } from '../lib/api'
import {
  availabilityOf,
  invalidDeletePath,
  isManageable,
  isZipName,
  normaliseInvalid,
  pageCount,
  saveErrorMessage,
  skillPath,
  skillsQueryString,
  sourceLabel,
  type InvalidPackage,
} from '../lib/skills'
import type { Skill, SkillContent, SkillPage } from '../lib/types'
import { Button, ConfirmDialog, ErrorBox, Modal, SkeletonRows, Spinner } from './ui'
import { EvolutionProposals } from './EvolutionProposals'
import { SkillVersions } from './SkillVersions'

const PAGE_SIZE = 20

const TONE: Record<string, string> = {
  green: 'border-emerald-800/60 bg-emerald-500/10 text-emerald-300',
  amber: 'border-amber-800/60 bg-amber-500/10 text-amber-300',
  grey: 'border-zinc-700 bg-zinc-800/60 text-zinc-400',
  red: 'border-red-800/60 bg-red-500/10 text-red-300',
}

function Badge({ children, cls }: { children: React.ReactNode; cls: string }) {
  return <span className={`rounded-full border px-2 py-0.5 text-[10px] font-medium ${cls}`}>{children}</span>
}

function SourceBadge({ source }: { source: string }) {
  const t = useT()
  return <Badge cls="border-zinc-700 text-zinc-400">{sourceLabel(source, t)}</Badge>
}

function Switch({ checked, disabled, onChange, label }: { checked: boolean; disabled?: boolean; onChange: () => void; label: string }) {
  return (
    <button
      type="button"
      role="switch"
      aria-checked={checked}
      aria-label={label}
      disabled={disabled}
      onClick={onChange}
      className={`relative h-5 w-9 shrink-0 rounded-full transition-colors disabled:opacity-50 ${checked ? 'bg-emerald-600' : 'bg-zinc-700'}`}
    >
      <span
        className={`absolute top-0.5 left-0.5 h-4 w-4 rounded-full bg-white shadow transition-transform ${checked ? 'translate-x-4' : ''}`}
      />
    </button>
  )
}

function SkillEditor({
  name,
  startEditing,
  onClose,
  onSaved,
}: {
  name: string
  startEditing: boolean
  onClose: () => void
  onSaved: () => void
}) {
  const t = useT()
  const [content, setContent] = useState<SkillContent | null>(null)
  const [loadError, setLoadError] = useState<string | null>(null)
  const [draft, setDraft] = useState('')
  const [editing, setEditing] = useState(false)
  const [saving, setSaving] = useState(false)
  const [saveError, setSaveError] = useState<{ message: string; conflict: boolean } | null>(null)

  const load = useCallback(
    async (edit: boolean) => {
      setLoadError(null)
      setSaveError(null)
      try {
        const c = await api.get<SkillContent>(skillPath(name, '/content'))
        setContent(c)
        setDraft(c.content)
        setEditing(edit && c.mutable)
      } catch (e) {
        setLoadError(t('skills.editor.readFailed', { error: describeError(e) }))
      }
    },
    [name, t],
  )

  useEffect(() => {
    void load(startEditing)
  }, [load, startEditing])

  const save = async () => {
    if (!content) return
    setSaving(true)
    setSaveError(null)
    try {
      await api.put(skillPath(name), { content: draft, expected_hash: content.hash })
      onSaved()
      onClose()
    } catch (e) {
      setSaveError(saveErrorMessage(e, t))
    } finally {
      setSaving(false)
    }
  }

  const mutable = Boolean(content?.mutable)
  const changed = content !== null && draft !== content.content

  return (
    <Modal
      wide
      onClose={onClose}
      closeDisabled={saving}
      title={
        <div className="flex min-w-0 items-center gap-2">
          <span className="truncate">{content?.display_name || name}</span>
          {content && <SourceBadge source={content.source} />}
          <span className="truncate font-mono text-xs font-normal text-zinc-500">{name} / SKILL.md</span>
        </div>
      }
      footer={
        editing ? (
          <>
            <Button
              disabled={saving}
              onClick={() => {
                setDraft(content?.content ?? '')
                setSaveError(null)
                setEditing(false)
              }}
            >
              {t('common.cancel')}
            </Button>
            <Button variant="primary" disabled={!changed || saving} onClick={save} data-testid="skill-save">
              {saving && <Spinner />} {t('common.save')}
            </Button>
          </>
        ) : (
          <>
            <Button onClick={onClose} disabled={saving}>
              {t('common.close')}
            </Button>
            {mutable && (
              <Button variant="primary" onClick={() => setEditing(true)} data-testid="skill-edit-mode">
                <Pencil size={14} /> {t('common.edit')}
              </Button>
            )}
          </>
        )
      }
    >
      {loadError ? (
        <ErrorBox message={loadError} onRetry={() => void load(editing)} />
      ) : !content ? (
        <div className="h-[55vh] animate-pulse rounded-lg bg-zinc-900" />
      ) : (
        <>
          <textarea
            aria-label="SKILL.md"
            data-testid="skill-content"
            value={draft}
            readOnly={!editing}
            spellCheck={false}
            onChange={(e) => setDraft(e.target.value)}
            className={`h-[55vh] w-full resize-none rounded-lg border bg-zinc-950 p-3 font-mono text-[13px] leading-relaxed text-zinc-200 outline-none ${
              editing ? 'border-emerald-800/70 focus:border-emerald-600' : 'border-zinc-800 text-zinc-400'
            }`}
          />
          {saveError && (
            <div
              role="alert"
              data-testid="skill-save-error"
              className="mt-3 flex items-center gap-3 rounded-lg border border-red-900/60 bg-red-950/40 px-3 py-2 text-sm text-red-300"
            >
              <span className="min-w-0 flex-1">{saveError.message}</span>
              {saveError.conflict && (
                <Button onClick={() => void load(true)} data-testid="skill-reload">
                  <RefreshCw size={13} /> {t('skills.editor.reload')}
                </Button>
              )}
            </div>
          )}
        </>
      )}
    </Modal>
  )
}

function UploadModal({ onClose, onUploaded }: { onClose: () => void; onUploaded: () => void }) {
  const { t, lang } = useI18n()
  const [file, setFile] = useState<File | null>(null)
  const [error, setError] = useState<string | null>(null)
  const [busy, setBusy] = useState(false)
  const input = useRef<HTMLInputElement>(null)

  const upload = async () => {
    if (!file) return
    if (!isZipName(file.name)) {
      setError(t('skills.upload.notZip'))
      return
    }
    setBusy(true)
    setError(null)
    try {
      const fd = new FormData()
      fd.append('file', file, file.name)
      await api.post('/skills/import', fd, { timeoutMs: 120_000 })
      onUploaded()
      onClose()
    } catch (e) {
      setError(describeError(e))
    } finally {
      setBusy(false)
    }
  }

  return (
    <Modal
      title={t('skills.upload.title')}
      onClose={onClose}
      closeDisabled={busy}
      footer={
        <>
          <Button onClick={onClose} disabled={busy}>
            {t('common.cancel')}
          </Button>
          <Button variant="primary" onClick={upload} disabled={!file || busy} data-testid="upload-submit">
            {busy && <Spinner />} {t('skills.upload')}
          </Button>
        </>
      }
    >
      <button
        type="button"
        onClick={() => input.current?.click()}
        className="flex w-full flex-col items-center gap-2 rounded-xl border-2 border-dashed border-zinc-700 px-4 py-8 text-sm text-zinc-400 transition hover:border-emerald-700 hover:text-zinc-200"
      >
        <FileArchive size={28} className="text-zinc-500" />
        {file ? (
          <span className="text-zinc-200">
            {file.name}{' '}
            <span className="text-zinc-500">
              {t('skills.upload.size', {
                size: formatNumber(lang, file.size / 1024, { minimumFractionDigits: 1, maximumFractionDigits: 1 }),
              })}
            </span>
          </span>
        ) : (
          <span>{t('skills.upload.choose')}</span>
        )}
      </button>
      <input
        ref={input}
        type="file"
        accept=".zip"
        hidden
        data-testid="upload-input"
        onChange={(e) => {
          const f = e.target.files?.[0] ?? null
          setFile(f)
          setError(f && !isZipName(f.name) ? t('skills.upload.notZip') : null)
        }}
      />
      {error && <p className="mt-3 text-sm text-red-400">{error}</p>}
    </Modal>
  )
}

function InvalidSection({ items, onDeleted }: { items: InvalidPackage[]; onDeleted: () => void }) {
  const { t, lang } = useI18n()
  const [confirm, setConfirm] = useState<InvalidPackage | null>(null)
  const [busy, setBusy] = useState(false)
  const [error, setError] = useState<string | null>(null)
  if (items.length === 0) return null
  return (
    <section className="mt-8" data-testid="invalid-skills">
      <h2 className="mb-3 flex items-center gap-2 text-sm font-semibold text-zinc-300">
        <AlertTriangle size={15} className="text-red-400" /> {t('skills.invalid.title')}
        <span className="rounded-full bg-zinc-800 px-2 text-xs text-zinc-400">{formatNumber(lang, items.length)}</span>
      </h2>
      <div className="space-y-2">
        {items.map((p) => (
          <div key={p.key} className="flex items-start gap-3 rounded-xl border border-red-950 bg-red-950/10 p-3.5">
            <div className="min-w-0 flex-1">
              <div className="flex flex-wrap items-center gap-2">
                <span className="font-mono text-sm text-zinc-200">{p.displayDir}</span>
                <Badge cls={TONE.red}>{t('skills.invalid.badge')}</Badge>
                <SourceBadge source={p.source} />
              </div>
              {p.errors.map((e, i) => (
                <p key={i} className="mt-1 text-xs break-words text-red-300/80">
                  {e}
                </p>
              ))}
            </div>
            {p.deletable && (
              <Button
                variant="ghost"
                aria-label={t('skills.invalid.delete', { dir: p.displayDir })}
                onClick={() => {
                  setError(null)
                  setConfirm(p)
                }}
              >
                <Trash2 size={14} />
              </Button>
            )}
          </div>
        ))}
      </div>
      {confirm && (
        <ConfirmDialog
          message={t('skills.invalid.confirm', { dir: confirm.displayDir })}
          busy={busy}
          error={error}
          onCancel={() => setConfirm(null)}
          onConfirm={async () => {
            setBusy(true)
            try {
              await api.del(invalidDeletePath(confirm))
              setConfirm(null)
              onDeleted()
            } catch (e) {
              setError(describeError(e))
            } finally {
              setBusy(false)
            }
          }}
        />
      )}
    </section>
  )
}

export function SkillMarket() {
  const t = useT()
  const [query, setQuery] = useState('')
  const [debounced, setDebounced] = useState('')
  const [page, setPage] = useState(1)
  const [data, setData] = useState<SkillPage | null>(null)
  const [loading, setLoading] = useState(false)
  const [loadError, setLoadError] = useState<string | null>(null)
  const [busy, setBusy] = useState<string | null>(null)
  const [rowErrors, setRowErrors] = useState<Record<string, string>>({})
  const [editor, setEditor] = useState<{ name: string; edit: boolean } | null>(null)
  const [upload, setUpload] = useState(false)
  const [confirm, setConfirm] = useState<Skill | null>(null)
  const [deleteError, setDeleteError] = useState<string | null>(null)
  const [tick, setTick] = useState(0)
  const [versionsOf, setVersionsOf] = useState<string | null>(null)
  const reqId = useRef(0)

  useEffect(() => {
    const t = setTimeout(() => {
      setDebounced(query)
      setPage(1)
    }, 250)
    return () => clearTimeout(t)
  }, [query])

  const refresh = useCallback(() => setTick((t) => t + 1), [])

  useEffect(() => {
    const id = ++reqId.current
    setLoading(true)
    setLoadError(null)
    api
      .get<SkillPage>(`/skills${skillsQueryString({ query: debounced, page, page_size: PAGE_SIZE })}`)
      .then((res) => {
        if (id !== reqId.current) return
        const pages = pageCount(res.total, PAGE_SIZE)
        if (page > pages) {
          setPage(pages)
          return
        }
        setData(res)
      })
      .catch((e) => {
        if (id === reqId.current) setLoadError(describeError(e))
      })
      .finally(() => {
        if (id === reqId.current) setLoading(false)
      })
  }, [debounced, page, tick])

  const setEnabled = async (s: Skill) => {
    setBusy(s.name)
    setRowErrors((r) => ({ ...r, [s.name]: '' }))
    try {
      await api.patch(skillPath(s.name, '/enabled'), { enabled: !s.enabled })
    } catch (e) {
      setRowErrors((r) => ({ ...r, [s.name]: describeError(e) }))
    } finally {
      setBusy(null)
      refresh()
    }
  }

  const pages = pageCount(data?.total ?? 0, PAGE_SIZE)
  const invalid = normaliseInvalid(data?.invalid, t)

  return (
    <div className="h-full overflow-y-auto" data-testid="skill-market">
      <div className="mx-auto max-w-4xl px-4 py-6 sm:px-6">
        <header className="mb-5 flex flex-wrap items-center gap-3">
          <div className="min-w-0 flex-1">
            <h1 className="text-xl font-semibold text-zinc-50">{t('skills.title')}</h1>
            <p className="text-sm text-zinc-500">{t('skills.subtitle')}</p>
          </div>
          <div className="relative">
            <Search size={14} className="pointer-events-none absolute top-1/2 left-2.5 -translate-y-1/2 text-zinc-500" />
            <input
              value={query}
              onChange={(e) => setQuery(e.target.value)}
              placeholder={t('skills.search')}
              aria-label={t('skills.search')}
              className="w-52 rounded-md border border-zinc-700 bg-zinc-950 py-1.5 pr-3 pl-8 text-sm text-zinc-100 outline-none placeholder:text-zinc-600 focus:border-emerald-600"
            />
          </div>
          <Button variant="ghost" aria-label={t('common.refresh')} onClick={refresh} disabled={loading}>
            <RefreshCw size={15} className={loading ? 'animate-spin' : ''} />
          </Button>
          <Button variant="primary" onClick={() => setUpload(true)} data-testid="skill-upload">
            <Upload size={15} /> {t('skills.upload')}
          </Button>
        </header>

        {loadError && <ErrorBox message={loadError} onRetry={refresh} />}
        {data === null && !loadError ? (
          <SkeletonRows />
        ) : data && data.items.length === 0 ? (
          <p className="rounded-xl border border-dashed border-zinc-800 px-4 py-10 text-center text-sm text-zinc-500">{t('skills.empty')}</p>
        ) : (
          <div className="mt-3 space-y-3">
            {(data?.items ?? []).map((s) => {
              const av = availabilityOf(s, t)
              const manageable = isManageable(s)
              const err = rowErrors[s.name]
              return (
                <div
                  key={`${s.source}:${s.name}`}
                  className="rounded-xl border border-zinc-800 bg-zinc-900/40 p-4 transition hover:border-zinc-700"
                  data-testid="skill-row"
                  data-name={s.name}
                >
                  <div className="flex items-start gap-3">
                    <div className="min-w-0 flex-1">
                      <div className="flex flex-wrap items-center gap-2">
                        <span className="font-medium text-zinc-100">{s.display_name || s.name}</span>
                        <SourceBadge source={s.source} />
                        <Badge cls={TONE[av.tone]}>{av.label}</Badge>
                      </div>
                      <p className="mt-1 text-sm text-zinc-400">{s.description || t('common.noDescription')}</p>
                      <p className="mt-1 flex flex-wrap gap-x-2 font-mono text-xs text-zinc-500">
                        {s.display_name && s.display_name !== s.name && <span>{s.name}</span>}
                        <span>v{s.version}</span>
                        {(s.tags ?? []).slice(0, 4).map((tag) => (
                          <span key={tag}>#{tag}</span>
                        ))}
                        {s.always && <span className="text-sky-400">{t('skills.always')}</span>}
                      </p>
                      {s.missing?.length > 0 && (
                        <p className="mt-1 text-xs text-amber-400">{s.missing.slice(0, 6).join(' · ')}</p>
                      )}
                      {err && <p className="mt-1 text-xs text-red-400">{err}</p>}
                    </div>
                    <div className="flex shrink-0 items-center gap-1">
                      <Button variant="ghost" aria-label={t('skills.view', { name: s.name })} onClick={() => setEditor({ name: s.name, edit: false })}>
                        <Eye size={15} />
                      </Button>
                      {manageable && (
                        <>
                          <Button
                            variant="ghost"
                            aria-label={t('skills.edit', { name: s.name })}
                            data-testid="skill-edit"
                            onClick={() => setEditor({ name: s.name, edit: true })}
                          >
                            <Pencil size={15} />
                          </Button>
                          <Button
                            variant="ghost"
                            aria-label={t('skills.versions.open', { name: s.name })}
                            data-testid="skill-versions-open"
                            onClick={() => setVersionsOf(s.name)}
                          >
                            <History size={15} />
                          </Button>
                          <Switch
                            checked={s.enabled}
                            disabled={busy !== null}
                            label={t('skills.enable', { name: s.name })}
                            onChange={() => void setEnabled(s)}
                          />
                          <Button
                            variant="ghost"
                            aria-label={t('skills.delete', { name: s.name })}
                            disabled={busy !== null}
                            onClick={() => {
                              setDeleteError(null)
                              setConfirm(s)
                            }}
                          >
                            <Trash2 size={15} />
                          </Button>
                        </>
                      )}
                    </div>
                  </div>
                </div>
              )
            })}
          </div>
        )}

        {data && (
          <footer className="mt-4 flex items-center gap-3 text-sm text-zinc-500">
            <span>{t('skills.total', { count: data.total })}</span>
            <div className="ml-auto flex items-center gap-2">
              <Button disabled={page <= 1 || loading} onClick={() => setPage((p) => Math.max(1, p - 1))}>
                {t('skills.prev')}
              </Button>
              <span>{t('skills.page', { page, pages })}</span>
              <Button disabled={page >= pages || loading} onClick={() => setPage((p) => p + 1)}>
                {t('skills.next')}
              </Button>
            </div>
          </footer>
        )}

        <InvalidSection items={invalid} onDeleted={refresh} />
        <EvolutionProposals version={tick} onApplied={refresh} />
      </div>

      {versionsOf && <SkillVersions name={versionsOf} onClose={() => setVersionsOf(null)} onRolledBack={refresh} />}

      {editor && (
        <SkillEditor name={editor.name} startEditing={editor.edit} onClose={() => setEditor(null)} onSaved={refresh} />
      )}
      {upload && <UploadModal onClose={() => setUpload(false)} onUploaded={refresh} />}
      {confirm && (
        <ConfirmDialog
          message={t('skills.confirmDelete', { name: confirm.display_name || confirm.name })}
          busy={busy === confirm.name}
          error={deleteError}
          onCancel={() => setConfirm(null)}
          onConfirm={async () => {
            setBusy(confirm.name)
            try {
              await api.del(skillPath(confirm.name))
              setConfirm(null)
            } catch (e) {
              setDeleteError(describeError(e))
            } finally {
              setBusy(null)
              refresh()
            }
          }}
        />
      )}
    </div>
  )
}
