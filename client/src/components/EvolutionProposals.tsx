// Skill-evolution proposals (GET /api/skill-evolution/proposals): the candidate SKILL.md as a
// diff against the current one (or against nothing for a new skill), and approve / reject for
// pending ones. Approving an update is checked by the server against the hash it was based on.

import { useCallback, useEffect, useState } from 'react'
import { Check, GitPullRequest, X } from 'lucide-react'
import { api, ApiError, describeError } from '../lib/api'
import { formatEpoch, type Proposal, type ProposalList } from '../lib/memory'
import { skillPath } from '../lib/skills'
import type { SkillContent } from '../lib/types'
import { useI18n, type MessageKey } from '../i18n'
import { DiffView } from './DiffView'
import { Button, ErrorBox, Spinner } from './ui'

const STATUS_KEYS: Record<string, MessageKey> = {
  pending: 'skills.proposals.pending',
  applied: 'skills.proposals.applied',
  rejected: 'skills.proposals.rejected',
}

function ProposalRow({ p, onChanged }: { p: Proposal; onChanged: () => void }) {
  const { t, lang } = useI18n()
  const [open, setOpen] = useState(false)
  const [current, setCurrent] = useState<string | null>(null)
  const [busy, setBusy] = useState<'approve' | 'reject' | null>(null)
  const [error, setError] = useState<string | null>(null)

  const toggle = async () => {
    if (open) return setOpen(false)
    setOpen(true)
    if (current !== null) return
    if (p.action !== 'update') return setCurrent('')
    try {
      setCurrent((await api.get<SkillContent>(skillPath(p.name, '/content'))).content)
    } catch (e) {
      // The skill is gone: the whole candidate is new.
      if (e instanceof ApiError && e.status === 404) setCurrent('')
      else setError(describeError(e))
    }
  }

  const act = async (what: 'approve' | 'reject') => {
    setBusy(what)
    setError(null)
    try {
      await api.post(`/skill-evolution/proposals/${encodeURIComponent(p.id)}/${what}`)
      onChanged()
    } catch (e) {
      setError(describeError(e))
    } finally {
      setBusy(null)
    }
  }

  const pending = p.status === 'pending'
  return (
    <li className="rounded-xl border border-zinc-800 bg-zinc-900/40 p-4" data-testid="proposal" data-id={p.id} data-status={p.status}>
      <div className="flex flex-wrap items-center gap-2">
        <span className="font-medium text-zinc-100">{p.name}</span>
        <span className="rounded border border-zinc-700 px-1.5 text-xs text-zinc-400">
          {p.action === 'create' ? t('skills.proposals.create') : t('skills.proposals.update')}
        </span>
        <span className={`text-xs ${pending ? 'text-amber-300' : p.status === 'applied' ? 'text-emerald-400' : 'text-zinc-500'}`}>
          {t(STATUS_KEYS[p.status] ?? 'skills.proposals.pending')}
        </span>
        <span className="text-xs text-zinc-600">{formatEpoch(p.created_at, lang)}</span>
        <div className="ml-auto flex gap-1">
          <Button variant="ghost" onClick={() => void toggle()} data-testid="proposal-diff">
            {open ? t('memory.hideDiff') : t('memory.showDiff')}
          </Button>
          {pending && (
            <>
              <Button
                variant="ghost"
                disabled={busy !== null || !p.validation?.valid}
                title={p.validation?.valid ? undefined : t('skills.proposals.invalid')}
                onClick={() => void act('approve')}
                data-testid="proposal-approve"
              >
                {busy === 'approve' ? <Spinner /> : <Check size={14} />} {t('skills.proposals.approve')}
              </Button>
              <Button variant="ghost" disabled={busy !== null} onClick={() => void act('reject')} data-testid="proposal-reject">
                {busy === 'reject' ? <Spinner /> : <X size={14} />} {t('skills.proposals.reject')}
              </Button>
            </>
          )}
        </div>
      </div>
      {p.reason && <p className="mt-1 text-sm text-zinc-400">{p.reason}</p>}
      {p.validation && !p.validation.valid && (
        <p className="mt-1 text-xs text-red-400">{(p.validation.errors ?? []).join(' · ') || t('skills.proposals.invalid')}</p>
      )}
      {error && <p className="mt-1 text-xs text-red-400" role="alert">{error}</p>}
      {open && (
        <div className="mt-3">
          {current === null ? <Spinner /> : <DiffView oldText={current} newText={p.candidate_content} testId="proposal-diff-view" />}
        </div>
      )}
    </li>
  )
}

export function EvolutionProposals({ version, onApplied }: { version: number; onApplied: () => void }) {
  const { t } = useI18n()
  const [data, setData] = useState<ProposalList | null>(null)
  const [error, setError] = useState<string | null>(null)
  const [tick, setTick] = useState(0)

  const load = useCallback(async () => {
    try {
      setData(await api.get<ProposalList>('/skill-evolution/proposals'))
      setError(null)
    } catch (e) {
      setError(describeError(e))
    }
  }, [])

  useEffect(() => {
    void load()
  }, [load, version, tick])

  const items = data?.items ?? []
  if (!error && data && items.length === 0 && !data.enabled) return null
  return (
    <section className="mt-8" data-testid="proposals">
      <h2 className="mb-1 flex items-center gap-2 text-sm font-semibold text-zinc-200">
        <GitPullRequest size={15} /> {t('skills.proposals.title')}
      </h2>
      <p className="mb-3 text-xs text-zinc-500">{data?.enabled ? t('skills.proposals.hint') : t('skills.proposals.disabled')}</p>
      {error && <ErrorBox message={error} onRetry={() => void load()} />}
      {data && items.length === 0 ? (
        <p className="text-sm text-zinc-500">{t('skills.proposals.none')}</p>
      ) : (
        <ul className="space-y-3">
          {items.map((p) => (
            <ProposalRow
              key={`${p.id}:${p.status}`}
              p={p}
              onChanged={() => {
                setTick((x) => x + 1)
                onApplied()
              }}
            />
          ))}
        </ul>
      )}
    </section>
  )
}
