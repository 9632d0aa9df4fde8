// Settings → Safety: what confines the agent's `exec` here (`GET /api/settings/sandbox`, shown
// as unknown when the server does not report it) and the owner's approval policy per tool and
// per MCP server (`GET`/`PUT /api/settings/approvals`): run on its own, ask first, or refuse.

import { useCallback, useEffect, useState } from 'react'
import { useT, type MessageKey } from '../i18n'
import { api, describeError } from '../lib/api'
import {
  grantOf,
  MODES,
  parsePolicy,
  parseSandbox,
  shellJoin,
  type ApprovalGrant,
  type ApprovalPolicy,
  type Mode,
  type SandboxStatus,
} from '../lib/approvals'
import type { SessionInfo } from '../lib/types'
import { Button, ErrorBox, SkeletonRows } from './ui'
import { ProjectRoots } from './ProjectRoots'

const MODE_KEYS: Record<Mode, MessageKey> = { auto: 'safety.mode.auto', ask: 'safety.mode.ask', deny: 'safety.mode.deny' }

function Layer({ label, on, detail }: { label: string; on: boolean; detail?: string }) {
  const t = useT()
  return (
    <li className="flex items-center justify-between gap-3 py-1.5">
      <span className="text-zinc-300">{label}</span>
      <span className={on ? 'text-emerald-400' : 'text-amber-400'}>
        {t(on ? 'safety.on' : 'safety.off')}
        {detail ? ` (${detail})` : ''}
      </span>
    </li>
  )
}

function SandboxCard({ status }: { status: SandboxStatus | null | 'unknown' }) {
  const t = useT()
  if (status === null) return <SkeletonRows count={2} />
  if (status === 'unknown') {
    return (
      <p className="text-sm text-amber-300" data-testid="sandbox-unknown">
        {t('safety.sandboxUnknown')}
      </p>
    )
  }
  return (
    <div data-testid="sandbox-status">
      <p className={`mb-2 text-sm font-medium ${status.active ? 'text-emerald-400' : 'text-amber-400'}`}>
        {t(status.active ? 'safety.sandboxActive' : 'safety.sandboxInactive')}
      </p>
      {status.reason && <p className="mb-2 text-xs text-zinc-400">{status.reason}</p>}
      <ul className="divide-y divide-zinc-800 text-sm">
        <Layer label={t('safety.landlock')} on={status.landlock.active} detail={status.landlock.abi !== null ? `ABI ${status.landlock.abi}` : undefined} />
        <Layer label={t('safety.seccomp')} on={status.seccomp.active} />
        <Layer label={t('safety.noNewPrivs')} on={status.noNewPrivs} />
        <Layer label={t('safety.nonDumpable')} on={status.nonDumpable} />
        <li className="flex items-center justify-between gap-3 py-1.5">
          <span className="text-zinc-300">{t('safety.network')}</span>
          <span className={status.network === 'off' ? 'text-emerald-400' : 'text-amber-400'}>
            {t(status.network === 'off' ? 'safety.networkOff' : 'safety.networkOn')}
          </span>
        </li>
      </ul>
      {(status.writeRoots.length > 0 || status.readRoots.length > 0) && (
        <details className="mt-2 text-xs text-zinc-400">
          <summary className="cursor-pointer select-none">{t('safety.roots')}</summary>
          <p className="mt-1 font-medium text-zinc-300">{t('safety.writeRoots')}</p>
          <ul className="font-mono">{status.writeRoots.map((r) => <li key={r}>{r}</li>)}</ul>
          <p className="mt-1 font-medium text-zinc-300">{t('safety.readRoots')}</p>
          <ul className="font-mono">{status.readRoots.map((r) => <li key={r}>{r}</li>)}</ul>
        </details>
      )}
    </div>
  )
}

function ModeSelect({ label, value, onChange, testId }: { label: string; value: Mode; onChange: (m: Mode) => void; testId: string }) {
  const t = useT()
  return (
    <select
      aria-label={label}
      value={value}
      onChange={(e) => onChange(e.target.value as Mode)}
      data-testid={testId}
      className="rounded-md border border-zinc-700 bg-zinc-950 px-2 py-1 text-sm text-zinc-100"
    >
      {MODES.map((m) => (
        <option key={m} value={m}>
          {t(MODE_KEYS[m])}
        </option>
      ))}
    </select>
  )
}

/** Tools with a one-line description (`safety.desc.<tool>`). */
const DESCRIBED = new Set([
  'save_memory',
  'web_fetch',
  'web_search',
  'read_file',
  'write_file',
  'edit_file',
  'list_dir',
  'glob',
  'grep',
  'exec',
  'exec_escalated',
  'search_history',
])

function toolLabel(t: ReturnType<typeof useT>, name: string): string {
  if (name === 'exec') return t('safety.row.exec')
  if (name === 'exec_escalated') return t('safety.row.execEscalated')
  return name
}

/** A grant as the grants route lists it. */
interface GrantRow {
  chatId: string
  raw: unknown
  grant: ApprovalGrant
}

/** What "approve for this chat" granted, per chat, each with Revoke (docs/http-api.md §10). */
function GrantsCard({ titles }: { titles: Record<string, string> }) {
  const t = useT()
  const [rows, setRows] = useState<GrantRow[] | null>(null)
  const [error, setError] = useState<string | null>(null)
  const read = (v: unknown): GrantRow[] => {
    const list = (v as { grants?: { chat_id?: unknown; grant?: unknown }[] })?.grants
    return (Array.isArray(list) ? list : []).flatMap((g) => {
      const grant = grantOf(g.grant)
      return typeof g.chat_id === 'string' && grant ? [{ chatId: g.chat_id, raw: g.grant, grant }] : []
    })
  }
  useEffect(() => {
    api
      .get('/settings/approvals/grants')
      .then((v) => setRows(read(v)))
      .catch((e) => setError(describeError(e)))
  }, [])
  const revoke = async (r: GrantRow) => {
    setError(null)
    try {
      setRows(read(await api.del('/settings/approvals/grants', {}, { chat_id: r.chatId, grant: r.raw })))
    } catch (e) {
      setError(describeError(e))
    }
  }
  const covers = (g: ApprovalGrant) =>
    g.scope === 'exact'
      ? t('safety.grantExact', { cmd: shellJoin(g.argv) })
      : g.scope === 'tool'
        ? t('safety.grantTool', { tool: g.tool })
        : t('safety.grantFamily', { cmd: [g.program, ...g.prefix].join(' ') })
  if (error) return <ErrorBox message={error} />
  if (!rows) return <SkeletonRows count={1} />
  if (rows.length === 0) return <p className="text-sm text-zinc-500" data-testid="grants-none">{t('safety.grantsNone')}</p>
  return (
    <ul className="divide-y divide-zinc-800 text-sm" data-testid="grants-list">
      {rows.map((r, i) => (
        <li key={`${r.chatId}-${i}`} className="flex items-start justify-between gap-3 py-2" data-testid="grant-row">
          <span className="min-w-0">
            <span className="block truncate text-zinc-300">{titles[r.chatId] ?? r.chatId.slice(0, 8)}</span>
            <span className="block font-mono text-xs break-words text-zinc-400">{covers(r.grant)}</span>
          </span>
          <Button onClick={() => void revoke(r)} data-testid="grant-revoke">
            {t('safety.revoke')}
          </Button>
        </li>
      ))}
    </ul>
  )
}

export function SafetyPage({ sessions = [], onUnsaved }: { sessions?: SessionInfo[]; onUnsaved?: (unsaved: boolean) => void }) {
  const t = useT()
  const [sandbox, setSandbox] = useState<SandboxStatus | null | 'unknown'>(null)
  const [policy, setPolicy] = useState<ApprovalPolicy | null>(null)
  const [draft, setDraft] = useState<ApprovalPolicy | null>(null)
  const [loadError, setLoadError] = useState<string | null>(null)
  const [busy, setBusy] = useState(false)
  const [result, setResult] = useState<{ ok: boolean; text: string } | null>(null)

  const load = useCallback(async () => {
    setLoadError(null)
    try {
      const p = parsePolicy(await api.get('/settings/approvals'))
      setPolicy(p)
      setDraft(p)
    } catch (e) {
      setLoadError(describeError(e))
    }
    try {
      setSandbox(parseSandbox(await api.get('/settings/sandbox')) ?? 'unknown')
    } catch {
      // A server without the route (404) or one that fails to say: shown as unknown.
      setSandbox('unknown')
    }
  }, [])

  useEffect(() => {
    void load()
  }, [load])

  const set = (group: keyof ApprovalPolicy, name: string, m: Mode) => {
    setResult(null)
    setDraft((d) => (d ? { ...d, [group]: { ...d[group], [name]: m } } : d))
  }

  const save = async () => {
    if (!draft) return
    setBusy(true)
    setResult(null)
    try {
      const p = parsePolicy(await api.put('/settings/approvals', draft))
      setPolicy(p)
      setDraft(p)
      setResult({ ok: true, text: t('safety.saved') })
    } catch (e) {
      setResult({ ok: false, text: describeError(e) })
    } finally {
      setBusy(false)
    }
  }

  const changed = JSON.stringify(draft) !== JSON.stringify(policy)
  // Unsaved edits are not lost to a closed or reloaded tab without a question.
  useEffect(() => {
    onUnsaved?.(changed)
  }, [changed, onUnsaved])
  useEffect(() => {
    if (!changed) return
    const ask = (e: BeforeUnloadEvent) => e.preventDefault()
    window.addEventListener('beforeunload', ask)
    return () => window.removeEventListener('beforeunload', ask)
  }, [changed])
  const resetToDefaults = async () => {
    setBusy(true)
    setResult(null)
    try {
      // An empty policy is every tool and server at its default mode.
      const p = parsePolicy(await api.put('/settings/approvals', { tools: {}, mcp_servers: {} }))
      setPolicy(p)
      setDraft(p)
      setResult({ ok: true, text: t('safety.resetDone') })
    } catch (e) {
      setResult({ ok: false, text: describeError(e) })
    } finally {
      setBusy(false)
    }
  }
  const titles = Object.fromEntries(sessions.map((s) => [s.chat_id, s.title || s.chat_id.slice(0, 8)]))
  const servers = draft ? Object.keys(draft.mcp_servers).sort() : []

  return (
    <div className="h-full overflow-y-auto" data-testid="safety-page">
      <div className="mx-auto max-w-2xl px-4 py-6 sm:px-6">
        <header className="mb-5">
          <h1 className="text-xl font-semibold text-zinc-50">{t('safety.title')}</h1>
          <p className="mt-0.5 text-sm text-zinc-400">{t('safety.intro')}</p>
        </header>
        <section className="mb-6 rounded-xl border border-zinc-800 bg-zinc-900/40 p-4" aria-labelledby="safety-sandbox">
          <h2 id="safety-sandbox" className="mb-3 text-sm font-semibold text-zinc-200">
            {t('safety.sandbox')}
          </h2>
          <SandboxCard status={sandbox} />
        </section>
        <section className="mb-6 rounded-xl border border-zinc-800 bg-zinc-900/40 p-4" aria-labelledby="safety-projects">
          <h2 id="safety-projects" className="mb-1 text-sm font-semibold text-zinc-200">
            {t('projects.title')}
          </h2>
          <ProjectRoots />
        </section>
        <section className="mb-6 rounded-xl border border-zinc-800 bg-zinc-900/40 p-4" aria-labelledby="safety-grants">
          <h2 id="safety-grants" className="mb-1 text-sm font-semibold text-zinc-200">
            {t('safety.grants')}
          </h2>
          <p className="mb-3 text-xs text-zinc-500">{t('safety.grantsIntro')}</p>
          <GrantsCard titles={titles} />
        </section>
        <section className="rounded-xl border border-zinc-800 bg-zinc-900/40 p-4" aria-labelledby="safety-policy">
          <h2 id="safety-policy" className="mb-1 text-sm font-semibold text-zinc-200">
            {t('safety.policy')}
          </h2>
          <p className="mb-3 text-xs text-zinc-500">{t('safety.policyIntro')}</p>
          {loadError ? (
            <ErrorBox message={loadError} onRetry={() => void load()} />
          ) : !draft ? (
            <SkeletonRows count={4} />
          ) : (
            <>
              <table className="w-full text-sm">
                <thead>
                  <tr className="text-left text-xs text-zinc-500">
                    <th className="py-1 font-medium">{t('safety.colTool')}</th>
                    <th className="py-1 font-medium">{t('safety.colMode')}</th>
                  </tr>
                </thead>
                <tbody className="divide-y divide-zinc-800">
                  {Object.entries(draft.tools).map(([name, mode]) => (
                    <tr key={name}>
                      <td className="py-1.5 pr-2">
                        <span className="block font-mono text-zinc-300">{toolLabel(t, name)}</span>
                        {DESCRIBED.has(name) && (
                          <span className="block text-xs text-zinc-500" data-testid="tool-desc">
                            {t(`safety.desc.${name}` as MessageKey)}
                          </span>
                        )}
                      </td>
                      <td className="py-1.5">
                        <ModeSelect label={toolLabel(t, name)} value={mode} onChange={(m) => set('tools', name, m)} testId={`policy-${name}`} />
                      </td>
                    </tr>
                  ))}
                  {servers.map((name) => (
                    <tr key={`mcp-${name}`}>
                      <td className="py-1.5 text-zinc-300">{t('safety.row.mcp', { server: name })}</td>
                      <td className="py-1.5">
                        <ModeSelect
                          label={t('safety.row.mcp', { server: name })}
                          value={draft.mcp_servers[name]}
                          onChange={(m) => set('mcp_servers', name, m)}
                          testId={`policy-mcp-${name}`}
                        />
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
              <div className="mt-4 flex items-center gap-3">
                <Button variant="primary" disabled={!changed || busy} onClick={() => void save()} data-testid="safety-save">
                  {t('common.save')}
                </Button>
                <Button disabled={busy} onClick={() => void resetToDefaults()} data-testid="safety-reset">
                  {t('safety.reset')}
                </Button>
                {changed && <span className="text-xs text-amber-400" data-testid="safety-unsaved">{t('safety.unsaved')}</span>}
                {result && (
                  <span role="status" className={`text-sm ${result.ok ? 'text-emerald-400' : 'text-red-400'}`}>
                    {result.text}
                  </span>
                )}
              </div>
            </>
          )}
        </section>
      </div>
    </div>
  )
}
