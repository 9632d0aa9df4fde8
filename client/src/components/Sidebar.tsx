// Sidebar: new chat, search, markets, collapsible history (rename / export / delete), and the settings
// menu (LLM Settings, Safety, export and import, and the interface language, remembered in localStorage by the i18n
// provider). A chat waiting for the owner's approval carries a badge.

import { useRef, useState, type ReactNode } from 'react'
import {
  Brain,
  Check,
  ChevronDown,
  FolderOpen,
  Blocks,
  Languages,
  MessageSquarePlus,
  MoreHorizontal,
  Pencil,
  Search,
  Settings,
  ShieldAlert,
  ShieldCheck,
  SlidersHorizontal,
  Sparkles,
  Trash2,
  Download,
  ArrowDownUp,
  ChartColumn,
} from 'lucide-react'
import { LANGS, useI18n, useT } from '../i18n'
import type { GeneratingMap } from '../lib/generation'
import type { AppView } from '../lib/skills'
import { relativeTime } from '../lib/time'
import type { SessionInfo } from '../lib/types'
import { ProjectPicker, folderName } from './ProjectPicker'
import { describeError } from '../lib/api'
import { EXPORT_FORMATS, exportChat } from '../lib/transfer'
import { TransferDialog } from './TransferDialog'
import { ConfirmDialog, PopupMenu, Spinner } from './ui'

interface Props {
  view: AppView
  open: boolean
  onClose: () => void
  sessions: SessionInfo[]
  activeChatId: string | null
  generating: GeneratingMap
  /** chats with a tool call waiting for approval */
  waiting: Record<string, unknown>
  /** a new chat, bound to `project` when one is given */
  onNewChat: (project?: string) => void
  onSelect: (chatId: string) => void
  onRename: (chatId: string, title: string) => void
  onDelete: (chatId: string) => Promise<void>
  onView: (v: AppView) => void
  /** opens search over every chat */
  onSearch: () => void
  /** chats were imported: reload the list */
  onImported: () => void
  /** a message for the banner (a failed export) */
  onNotice: (text: string) => void
}

function NavButton({
  active,
  icon,
  label,
  onClick,
  testId,
  expanded,
}: {
  /** set for a button that opens a menu */
  expanded?: boolean
  active?: boolean
  icon: React.ReactNode
  label: string
  onClick: () => void
  testId?: string
}) {
  return (
    <button
      type="button"
      onClick={onClick}
      aria-current={active ? 'page' : undefined}
      aria-haspopup={expanded === undefined ? undefined : 'menu'}
      aria-expanded={expanded}
      data-testid={testId}
      className={`flex w-full items-center gap-2.5 rounded-lg px-2.5 py-2 text-sm transition-colors ${
        active ? 'bg-zinc-800 text-zinc-50' : 'text-zinc-300 hover:bg-zinc-800/60 hover:text-zinc-100'
      }`}
    >
      {icon}
      {label}
    </button>
  )
}

function SessionRow({
  s,
  active,
  busy,
  waiting,
  onSelect,
  onRename,
  onAskDelete,
  onNotice,
}: {
  s: SessionInfo
  active: boolean
  busy: boolean
  /** a tool call in this chat waits for the owner's approval */
  waiting: boolean
  onSelect: () => void
  onRename: (title: string) => void
  onAskDelete: () => void
  onNotice: (text: string) => void
}) {
  const { t, lang } = useI18n()
  const [menu, setMenu] = useState(false)
  const rowRef = useRef<HTMLDivElement>(null)
  const [editing, setEditing] = useState(false)
  const [draft, setDraft] = useState(s.title)
  const done = useRef(false)

  const commit = () => {
    if (done.current) return
    done.current = true
    setEditing(false)
    const title = draft.trim()
    if (title && title !== s.title) onRename(title)
  }

  if (editing) {
    return (
      <div className="px-1 py-0.5">
        <input
          // eslint-disable-next-line jsx-a11y/no-autofocus -- the field appears on the person's own Rename
          autoFocus
          aria-label={t('sidebar.titleInput')}
          value={draft}
          onChange={(e) => setDraft(e.target.value)}
          onBlur={commit}
          onKeyDown={(e) => {
            if (e.key === 'Enter') commit()
            if (e.key === 'Escape') {
              done.current = true
              setEditing(false)
            }
          }}
          className="w-full rounded-md border border-emerald-700 bg-zinc-950 px-2 py-1.5 text-sm text-zinc-100 outline-none"
        />
      </div>
    )
  }

  return (
    <div
      ref={rowRef}
      className={`group relative flex items-center rounded-lg transition-colors ${
        active ? 'bg-zinc-800/90' : 'hover:bg-zinc-800/50'
      }`}
      data-testid="session-row"
      data-chat-id={s.chat_id}
    >
      <button
        type="button"
        onClick={onSelect}
        aria-current={active ? 'true' : undefined}
        className="min-w-0 flex-1 px-2.5 py-2 text-left"
      >
        <span className={`flex items-center gap-1.5 truncate text-sm ${active ? 'text-zinc-50' : 'text-zinc-300'}`}>
          {busy && <Spinner size={12} className="shrink-0 text-sky-400" />}
          <span className="truncate" data-testid="session-title">{s.title}</span>
          {waiting && (
            <span
              role="status"
              title={t('approval.waiting')}
              data-testid="approval-badge"
              className="ml-auto flex shrink-0 items-center gap-0.5 rounded-full bg-amber-500/20 px-1.5 py-0.5 text-[10px] font-medium text-amber-300"
            >
              <ShieldAlert size={11} aria-hidden />
              <span className="sr-only">{t('approval.waiting')}</span>
            </span>
          )}
        </span>
        <span className="flex gap-1.5 text-[11px] text-zinc-500">
          {relativeTime(s.updated_at, Date.now(), lang)}
          {s.project && (
            <span className="flex min-w-0 items-center gap-0.5 truncate text-zinc-400" title={s.project} data-testid="session-project">
              <FolderOpen size={10} aria-hidden className="shrink-0" />
              <span className="truncate">{folderName(s.project)}</span>
            </span>
          )}
        </span>
      </button>
      <button
        type="button"
        aria-label={t('sidebar.actions')}
        aria-haspopup="menu"
        aria-expanded={menu}
        onClick={(e) => {
          e.stopPropagation()
          setMenu((m) => !m)
        }}
        className={`mr-1 rounded-md p-1 text-zinc-500 hover:bg-zinc-700 hover:text-zinc-100 ${
          menu ? 'opacity-100' : 'opacity-0 group-hover:opacity-100 focus:opacity-100'
        }`}
      >
        <MoreHorizontal size={16} />
      </button>
      <PopupMenu open={menu} onClose={() => setMenu(false)} within={rowRef} className="top-9 right-1 z-20 w-48 overflow-hidden">
        <button
          role="menuitem"
          type="button"
          onClick={() => {
            setMenu(false)
            setDraft(s.title)
            done.current = false
            setEditing(true)
          }}
          className="flex w-full items-center gap-2 px-3 py-1.5 text-sm text-zinc-200 hover:bg-zinc-800"
        >
          <Pencil size={14} /> {t('sidebar.rename')}
        </button>
        {EXPORT_FORMATS.map((f) => (
          <button
            key={f}
            role="menuitem"
            type="button"
            data-testid={`export-chat-${f}`}
            onClick={() => {
              setMenu(false)
              exportChat(s.chat_id, f).catch((e: unknown) => onNotice(t('transfer.exportFailed', { error: describeError(e) })))
            }}
            className="flex w-full items-center gap-2 px-3 py-1.5 text-sm text-zinc-200 hover:bg-zinc-800"
          >
            <Download size={14} /> {t('transfer.exportChat', { format: t(`transfer.format.${f}`) })}
          </button>
        ))}
        <button
          role="menuitem"
          type="button"
          onClick={() => {
            setMenu(false)
            onAskDelete()
          }}
          className="flex w-full items-center gap-2 px-3 py-1.5 text-sm text-red-400 hover:bg-zinc-800"
        >
          <Trash2 size={14} /> {t('common.delete')}
        </button>
      </PopupMenu>
    </div>
  )
}

/** One page link in the settings menu. */
function SettingsItem({ testId, onClick, children }: { testId: string; onClick: () => void; children: ReactNode }) {
  return (
    <button
      role="menuitem"
      type="button"
      data-testid={testId}
      onClick={onClick}
      className="flex w-full items-center gap-2 px-3 py-2 text-sm text-zinc-200 hover:bg-zinc-800"
    >
      {children}
    </button>
  )
}

/** The language choice inside the settings menu: one radio item per language, each in its own words. */
function LanguageItems() {
  const { t, lang, setLang } = useI18n()
  return (
    <div role="group" aria-label={t('settings.language')} className="border-t border-zinc-800 pt-1" data-testid="lang-menu">
      <p className="flex items-center gap-2 px-3 pt-1 pb-0.5 text-[11px] text-zinc-500">
        <Languages size={13} /> {t('settings.language')}
      </p>
      {LANGS.map((l) => (
        <button
          key={l}
          role="menuitemradio"
          aria-checked={lang === l}
          type="button"
          lang={l}
          data-testid={`lang-${l}`}
          onClick={() => setLang(l)}
          className="flex w-full items-center gap-2 px-3 py-1.5 text-sm text-zinc-200 hover:bg-zinc-800"
        >
          <span className="w-[15px]">{lang === l && <Check size={14} className="text-emerald-400" />}</span>
          {t(`lang.${l}`)}
        </button>
      ))}
    </div>
  )
}

export function Sidebar(p: Props) {
  const t = useT()
  const [historyOpen, setHistoryOpen] = useState(true)
  const [settingsMenu, setSettingsMenu] = useState(false)
  const [confirm, setConfirm] = useState<string | null>(null)
  const [deleting, setDeleting] = useState(false)
  const [transfer, setTransfer] = useState(false)
  const settingsRef = useRef<HTMLDivElement>(null)
  const openView = (v: AppView) => {
    setSettingsMenu(false)
    p.onView(v)
  }

  return (
    <>
      {p.open && <div className="fixed inset-0 top-11 z-30 bg-black/60 sm:hidden" onClick={p.onClose} aria-hidden />}
      <nav
        aria-label={t('sidebar.label')}
        className={`fixed top-11 bottom-0 left-0 z-40 flex w-64 shrink-0 flex-col border-r border-zinc-800/80 bg-panel transition-transform sm:static sm:translate-x-0 ${
          p.open ? 'translate-x-0' : '-translate-x-full'
        }`}
      >
        <div className="space-y-0.5 p-2">
          <div className="flex items-center gap-0.5">
            <NavButton
              icon={<MessageSquarePlus size={17} />}
              label={t('sidebar.newChat')}
              onClick={() => p.onNewChat()}
              testId="new-chat"
            />
            <ProjectPicker sessions={p.sessions} onPick={p.onNewChat} />
          </div>
          <NavButton icon={<Search size={17} />} label={t('search.open')} onClick={p.onSearch} testId="nav-search" />
          <NavButton
            active={p.view === 'mcp-market'}
            icon={<Blocks size={17} />}
            label={t('sidebar.mcpMarket')}
            onClick={() => p.onView('mcp-market')}
            testId="nav-mcp"
          />
          <NavButton
            active={p.view === 'skill-market'}
            icon={<Sparkles size={17} />}
            label={t('sidebar.skillMarket')}
            onClick={() => p.onView('skill-market')}
            testId="nav-skills"
          />
          <NavButton
            active={p.view === 'memory'}
            icon={<Brain size={17} />}
            label={t('nav.memory')}
            onClick={() => p.onView('memory')}
            testId="nav-memory"
          />
        </div>
        <div className="flex min-h-0 flex-1 flex-col border-t border-zinc-800/80 px-2 pt-2">
          <button
            type="button"
            aria-expanded={historyOpen}
            onClick={() => setHistoryOpen((o) => !o)}
            className="flex items-center gap-1 rounded px-2.5 py-1.5 text-xs font-medium tracking-wide text-zinc-500 uppercase hover:text-zinc-300"
          >
            <ChevronDown size={14} className={`transition-transform ${historyOpen ? '' : '-rotate-90'}`} />
            {t('sidebar.history')}
          </button>
          {historyOpen && (
            <div className="min-h-0 flex-1 space-y-0.5 overflow-y-auto pb-2" data-testid="history">
              {p.sessions.length === 0 ? (
                <p className="px-2.5 py-2 text-sm text-zinc-600">{t('sidebar.empty')}</p>
              ) : (
                p.sessions.map((s) => (
                  <SessionRow
                    key={s.chat_id}
                    s={s}
                    active={p.view === 'chat' && s.chat_id === p.activeChatId}
                    busy={Boolean(p.generating[s.chat_id])}
                    waiting={Boolean(p.waiting[s.chat_id])}
                    onSelect={() => p.onSelect(s.chat_id)}
                    onRename={(title) => p.onRename(s.chat_id, title)}
                    onAskDelete={() => setConfirm(s.chat_id)}
                    onNotice={p.onNotice}
                  />
                ))
              )}
            </div>
          )}
        </div>
        <div ref={settingsRef} className="relative border-t border-zinc-800/80 p-2">
          <PopupMenu
            open={settingsMenu}
            onClose={() => setSettingsMenu(false)}
            within={settingsRef}
            className="right-2 bottom-full left-2 z-20 mb-1 overflow-hidden"
          >
            <SettingsItem testId="nav-llm" onClick={() => openView('llm-settings')}>
              <SlidersHorizontal size={15} /> {t('sidebar.llmSettings')}
            </SettingsItem>
            <SettingsItem testId="nav-safety" onClick={() => openView('safety')}>
              <ShieldCheck size={15} /> {t('sidebar.safety')}
            </SettingsItem>
            <SettingsItem testId="nav-usage" onClick={() => openView('usage')}>
              <ChartColumn size={15} /> {t('sidebar.usage')}
            </SettingsItem>
            <SettingsItem
              testId="nav-transfer"
              onClick={() => {
                setSettingsMenu(false)
                setTransfer(true)
              }}
            >
              <ArrowDownUp size={15} /> {t('transfer.menu')}
            </SettingsItem>
            <LanguageItems />
          </PopupMenu>
          <NavButton
            active={p.view === 'llm-settings' || p.view === 'safety' || p.view === 'usage'}
            icon={<Settings size={17} />}
            label={t('sidebar.settings')}
            onClick={() => setSettingsMenu((m) => !m)}
            expanded={settingsMenu}
            testId="settings-button"
          />
        </div>
      </nav>
      {transfer && <TransferDialog onClose={() => setTransfer(false)} onImported={p.onImported} />}
      {confirm && (
        <ConfirmDialog
          message={t('sidebar.confirmDelete')}
          busy={deleting}
          onCancel={() => setConfirm(null)}
          onConfirm={async () => {
            setDeleting(true)
            await p.onDelete(confirm)
            setDeleting(false)
            setConfirm(null)
          }}
        />
      )}
    </>
  )
}
