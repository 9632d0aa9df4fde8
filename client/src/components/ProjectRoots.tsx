// The Safety page's "Project folders": the roots under which chats may be bound to a project
// (docs/http-api.md §11). The owner edits the saved list; `CASHCODE_PROJECT_ROOTS` is shown
// read-only; the server checks every root and refuses the whole list if one is not allowed.
import { Plus, X } from 'lucide-react'
import { useCallback, useEffect, useState } from 'react'
import { useI18n } from '../i18n'
import { api, describeError } from '../lib/api'
import type { ProjectSettings } from '../lib/types'

export function ProjectRoots() {
  const { t } = useI18n()
  const [settings, setSettings] = useState<ProjectSettings | null>(null)
  const [draft, setDraft] = useState<string[]>([])
  const [adding, setAdding] = useState('')
  const [error, setError] = useState<string | null>(null)
  const [saved, setSaved] = useState(false)
  const [busy, setBusy] = useState(false)

  const load = useCallback(async () => {
    try {
      const s = await api.get<ProjectSettings>('/settings/projects')
      setSettings(s)
      setDraft(s.roots)
      setError(null)
    } catch (e) {
      setError(describeError(e))
    }
  }, [])
  useEffect(() => {
    void load()
  }, [load])

  const save = async (roots: string[]) => {
    setBusy(true)
    setSaved(false)
    try {
      const s = await api.put<ProjectSettings>('/settings/projects', { roots })
      setSettings(s)
      setDraft(s.roots)
      setError(null)
      setSaved(true)
    } catch (e) {
      setError(describeError(e))
    } finally {
      setBusy(false)
    }
  }
  const changed = settings !== null && JSON.stringify(draft) !== JSON.stringify(settings.roots)

  return (
    <div data-testid="project-roots">
      <p className="mb-2 text-xs text-zinc-500">{t('projects.intro')}</p>
      {settings && (
        <p className="mb-2 text-xs text-zinc-400">
          {t('projects.allowedNow')}{' '}
          <span className="font-mono text-zinc-300">{settings.allowed.join(', ')}</span>
        </p>
      )}
      {settings?.env_roots.map((r) => (
        <div key={`env-${r}`} className="flex items-center gap-2 py-1 text-sm">
          <span className="min-w-0 flex-1 truncate font-mono text-zinc-300">{r}</span>
          <span className="text-[11px] text-zinc-500">{t('projects.fromEnv')}</span>
        </div>
      ))}
      {draft.map((r) => (
        <div key={r} className="flex items-center gap-2 py-1 text-sm" data-testid="project-root">
          <span className="min-w-0 flex-1 truncate font-mono text-zinc-300">{r}</span>
          <button
            type="button"
            aria-label={t('projects.remove', { path: r })}
            onClick={() => setDraft(draft.filter((d) => d !== r))}
            className="rounded p-1 text-zinc-500 hover:bg-zinc-800 hover:text-zinc-100"
          >
            <X size={14} />
          </button>
        </div>
      ))}
      <form
        className="mt-2 flex gap-2"
        onSubmit={(e) => {
          e.preventDefault()
          const p = adding.trim()
          if (p && !draft.includes(p)) setDraft([...draft, p])
          setAdding('')
        }}
      >
        <input
          aria-label={t('projects.addLabel')}
          placeholder={t('projects.pathPlaceholder')}
          value={adding}
          onChange={(e) => setAdding(e.target.value)}
          data-testid="project-root-input"
          className="min-w-0 flex-1 rounded border border-zinc-700 bg-zinc-950 px-2 py-1 font-mono text-xs text-zinc-100 outline-none focus:border-emerald-700"
        />
        <button type="submit" className="flex items-center gap-1 rounded bg-zinc-800 px-2 text-xs text-zinc-200 hover:bg-zinc-700">
          <Plus size={13} /> {t('projects.add')}
        </button>
      </form>
      {error && (
        <p role="alert" className="mt-2 text-xs text-red-400" data-testid="project-roots-error">
          {error}
        </p>
      )}
      <div className="mt-3 flex items-center gap-3">
        <button
          type="button"
          disabled={!changed || busy}
          onClick={() => void save(draft)}
          data-testid="project-roots-save"
          className="rounded-md bg-emerald-600 px-3 py-1.5 text-sm font-medium text-white hover:bg-emerald-500 disabled:opacity-40"
        >
          {t('projects.save')}
        </button>
        {saved && !changed && <span className="text-xs text-emerald-400">{t('projects.saved')}</span>}
      </div>
    </div>
  )
}
