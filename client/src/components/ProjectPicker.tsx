// "New chat in a project": a menu beside New chat listing the workspace, the recent projects and
// the allowed roots, plus a field for any folder under them (docs/web-client.md, docs/http-api.md
// §11). The server decides whether a folder may be a project; its refusal shows as the banner.
import { FolderOpen } from 'lucide-react'
import { useEffect, useRef, useState } from 'react'
import { useI18n } from '../i18n'
import { api, describeError } from '../lib/api'
import type { ProjectSettings, SessionInfo } from '../lib/types'
import { PopupMenu } from './ui'

/** The last path segment, for a compact label. */
export function folderName(path: string): string {
  const parts = path.split('/').filter(Boolean)
  return parts[parts.length - 1] ?? path
}

/** Projects of the listed chats, most recently used first, without repeats. */
export function recentProjects(sessions: SessionInfo[], max = 5): string[] {
  const out: string[] = []
  for (const s of sessions) {
    if (s.project && !out.includes(s.project)) out.push(s.project)
    if (out.length >= max) break
  }
  return out
}

export function ProjectPicker({ sessions, onPick }: { sessions: SessionInfo[]; onPick: (project?: string) => void }) {
  const { t } = useI18n()
  const [open, setOpen] = useState(false)
  const [settings, setSettings] = useState<ProjectSettings | null>(null)
  const [error, setError] = useState<string | null>(null)
  const [path, setPath] = useState('')
  const boxRef = useRef<HTMLDivElement>(null)

  useEffect(() => {
    if (!open) return
    let live = true
    api
      .get<ProjectSettings>('/settings/projects')
      .then((s) => live && setSettings(s))
      .catch((e) => live && setError(describeError(e)))
    return () => {
      live = false
    }
  }, [open])

  const pick = (project?: string) => {
    setOpen(false)
    setPath('')
    onPick(project)
  }
  const recents = recentProjects(sessions)
  const roots = (settings?.allowed ?? []).filter((r) => !recents.includes(r))

  return (
    <div ref={boxRef} className="relative">
      <button
        type="button"
        aria-label={t('projects.newIn')}
        title={t('projects.newIn')}
        aria-haspopup="menu"
        aria-expanded={open}
        data-testid="new-chat-project"
        onClick={() => setOpen((o) => !o)}
        className="rounded-md p-2 text-zinc-400 hover:bg-zinc-800 hover:text-zinc-100"
      >
        <FolderOpen size={16} />
      </button>
      <PopupMenu open={open} onClose={() => setOpen(false)} within={boxRef} label={t('projects.newIn')} className="top-9 left-0 z-50 w-72">
        <p className="px-3 py-1 text-[11px] tracking-wide text-zinc-500 uppercase">{t('projects.newIn')}</p>
        <button role="menuitem" type="button" className="block w-full px-3 py-1.5 text-left text-sm text-zinc-200 hover:bg-zinc-800" onClick={() => pick()}>
          {t('projects.workspace')}
        </button>
        {[...recents, ...roots].map((p) => (
          <button
            key={p}
            role="menuitem"
            type="button"
            title={p}
            data-testid="project-option"
            className="block w-full truncate px-3 py-1.5 text-left text-sm text-zinc-200 hover:bg-zinc-800"
            onClick={() => pick(p)}
          >
            <span className="font-medium">{folderName(p)}</span> <span className="text-xs text-zinc-500">{p}</span>
          </button>
        ))}
        {error && <p className="px-3 py-1 text-xs text-red-400">{error}</p>}
        <form
          className="flex gap-1 border-t border-zinc-800 px-2 pt-2 pb-1"
          onSubmit={(e) => {
            e.preventDefault()
            if (path.trim()) pick(path.trim())
          }}
        >
          <input
            aria-label={t('projects.path')}
            placeholder={t('projects.pathPlaceholder')}
            value={path}
            onChange={(e) => setPath(e.target.value)}
            data-testid="project-path"
            className="min-w-0 flex-1 rounded border border-zinc-700 bg-zinc-950 px-2 py-1 font-mono text-xs text-zinc-100 outline-none focus:border-emerald-700"
          />
          <button type="submit" className="rounded bg-zinc-800 px-2 text-xs text-zinc-200 hover:bg-zinc-700">
            {t('projects.open')}
          </button>
        </form>
      </PopupMenu>
    </div>
  )
}
