// Settings → Usage: what the model requests of the last 30 days took, by day as a chart and by
// model, chat and job as tables (`GET /api/usage`), the owner's price table that turns tokens
// into cost (`GET`/`PUT /api/settings/prices`), and the budgets that pause spending at a cap
// (`GET`/`PUT /api/settings/budgets`). docs/usage.md says what each figure means.

import { useCallback, useEffect, useState } from 'react'
import { useT, type MessageKey } from '../i18n'
import { api, describeError } from '../lib/api'
import { PROVIDER_LABELS } from '../lib/models'
import type { Provider, SessionInfo } from '../lib/types'
import {
  BUDGET_NAMES,
  dayBars,
  formatCost,
  formatTokens,
  parseCap,
  type Budgets,
  type PriceRow,
  type Prices,
  type UsageGroup,
  type UsageReport,
} from '../lib/usage'
import { Button, ErrorBox, SkeletonRows } from './ui'

const DAY_MS = 24 * 3600 * 1000
const PROVIDERS: Provider[] = ['openai_compatible', 'ollama']
const GROUPS = ['day', 'model', 'chat', 'job'] as const
type GroupBy = (typeof GROUPS)[number]

const JOB_KEYS: Record<string, MessageKey> = {
  turn: 'usage.job.turn',
  consolidate: 'usage.job.consolidate',
  dream: 'usage.job.dream',
  skill_evolution: 'usage.job.skillEvolution',
}
const BUDGET_KEYS: Record<(typeof BUDGET_NAMES)[number], MessageKey> = {
  chat: 'usage.budgetChat',
  day: 'usage.budgetDay',
  background_day: 'usage.budgetBackground',
}

const card = 'mb-6 rounded-xl border border-zinc-800 bg-zinc-900/40 p-4'
const input =
  'w-full min-w-0 rounded-md border border-zinc-700 bg-zinc-950 px-2 py-1 text-sm text-zinc-100 focus:border-zinc-500 focus:outline-none'

function DayChart({ groups }: { groups: UsageGroup[] }) {
  const t = useT()
  const bars = dayBars(groups)
  return (
    <figure data-testid="usage-chart">
      <div className="flex h-32 items-stretch gap-1 overflow-x-auto" role="list" aria-label={t('usage.byDay')}>
        {bars.map((b) => (
          <div
            key={b.key}
            role="listitem"
            className="flex h-full max-w-12 min-w-3 flex-1 flex-col items-center justify-end"
            aria-label={t('usage.dayBar', { day: b.key, tokens: formatTokens(b.tokens) })}
            title={t('usage.dayBar', { day: b.key, tokens: formatTokens(b.tokens) })}
            data-testid="usage-bar"
            data-tokens={b.tokens}
          >
            <div className="w-full rounded-t bg-sky-500/80" style={{ height: `${Math.max(2, b.share * 100)}%` }} />
          </div>
        ))}
      </div>
      <figcaption className="mt-1 flex justify-between text-[11px] text-zinc-500">
        <span>{bars[0]?.key}</span>
        {bars.length > 1 && <span>{bars[bars.length - 1].key}</span>}
      </figcaption>
    </figure>
  )
}

function GroupTable({ by, groups, titles }: { by: GroupBy; groups: UsageGroup[]; titles: Record<string, string> }) {
  const t = useT()
  const label = (key: string) => {
    if (by === 'job') return JOB_KEYS[key] ? t(JOB_KEYS[key]) : key
    if (by === 'chat') return key === '' ? t('usage.noChat') : (titles[key] ?? key.slice(0, 8))
    return key
  }
  return (
    <div className="overflow-x-auto">
      <table className="w-full text-sm whitespace-nowrap" data-testid={`usage-table-${by}`}>
        <thead>
          <tr className="text-left text-xs text-zinc-500">
            <th className="py-1 pr-2 font-medium">{t(`usage.col.${by}` as MessageKey)}</th>
            <th className="py-1 pr-2 text-right font-medium">{t('usage.requests')}</th>
            <th className="py-1 pr-2 text-right font-medium">{t('usage.input')}</th>
            <th className="py-1 pr-2 text-right font-medium">{t('usage.output')}</th>
            <th className="py-1 text-right font-medium">{t('usage.cost')}</th>
          </tr>
        </thead>
        <tbody className="divide-y divide-zinc-800">
          {groups.map((g) => (
            <tr key={g.key} data-testid="usage-row" data-key={g.key}>
              <td className="max-w-[7.5rem] truncate py-1.5 pr-2 text-zinc-300 sm:max-w-[16rem]" title={label(g.key)}>
                {label(g.key)}
              </td>
              <td className="py-1.5 pr-2 text-right tabular-nums">{g.requests}</td>
              <td className="py-1.5 pr-2 text-right tabular-nums" data-testid="usage-input" data-value={g.input_tokens}>
                {formatTokens(g.input_tokens)}
              </td>
              <td className="py-1.5 pr-2 text-right tabular-nums" data-testid="usage-output" data-value={g.output_tokens}>
                {formatTokens(g.output_tokens)}
              </td>
              <td className="py-1.5 text-right tabular-nums" data-testid="usage-cost">
                {formatCost(g.cost) || '–'}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  )
}

/** Save, what is wrong with the form while it cannot be saved, and how the last save went. */
function SaveButton(p: {
  valid: boolean
  busy: boolean
  onSave: () => Promise<void>
  testId: string
  invalid: string
  result: { ok: boolean; text: string } | null
}) {
  const t = useT()
  return (
    <>
      <Button variant="primary" disabled={!p.valid || p.busy} onClick={() => void p.onSave()} data-testid={p.testId}>
        {t('common.save')}
      </Button>
      {!p.valid && <span className="text-xs text-amber-400">{p.invalid}</span>}
      {p.result && (
        <span role="status" className={`text-sm ${p.result.ok ? 'text-emerald-400' : 'text-red-400'}`}>
          {p.result.text}
        </span>
      )}
    </>
  )
}

/** The price table as typed: numbers as text until saved. */
type PriceDraft = { provider: string; model: string; input: string; cached: string; output: string; currency: string }

const toDraft = (p: PriceRow): PriceDraft => ({
  provider: p.provider,
  model: p.model,
  input: String(p.input),
  cached: p.cached_input === null || p.cached_input === undefined ? '' : String(p.cached_input),
  output: String(p.output),
  currency: p.currency,
})

function fromDraft(d: PriceDraft): PriceRow | null {
  const n = (s: string) => (s.trim() === '' ? NaN : Number(s))
  const [inp, out] = [n(d.input), n(d.output)]
  const cached = d.cached.trim() === '' ? null : n(d.cached)
  if (!d.model.trim() || !d.currency.trim() || !(inp >= 0) || !(out >= 0) || (cached !== null && !(cached >= 0))) return null
  const row: PriceRow = { provider: d.provider, model: d.model.trim(), input: inp, output: out, currency: d.currency.trim() }
  // Absent, not null: the server then prices cached input as input.
  return cached === null ? row : { ...row, cached_input: cached }
}

function PriceEditor({ onSaved }: { onSaved: () => void }) {
  const t = useT()
  const [prices, setPrices] = useState<Prices | null>(null)
  const [rows, setRows] = useState<PriceDraft[]>([])
  const [result, setResult] = useState<{ ok: boolean; text: string } | null>(null)
  const [busy, setBusy] = useState(false)

  useEffect(() => {
    api
      .get<Prices>('/settings/prices')
      .then((p) => {
        setPrices(p)
        setRows(p.models.map(toDraft))
      })
      .catch((e) => setResult({ ok: false, text: describeError(e) }))
  }, [])

  const set = (i: number, k: keyof PriceDraft, v: string) => setRows((r) => r.map((x, j) => (j === i ? { ...x, [k]: v } : x)))
  const parsed = rows.map(fromDraft)
  const valid = parsed.every((p) => p !== null)

  const save = async () => {
    setBusy(true)
    setResult(null)
    try {
      const p = await api.put<Prices>('/settings/prices', { models: parsed })
      setPrices(p)
      setRows(p.models.map(toDraft))
      setResult({ ok: true, text: t('usage.saved') })
      onSaved()
    } catch (e) {
      setResult({ ok: false, text: describeError(e) })
    } finally {
      setBusy(false)
    }
  }

  if (!prices && !result) return <SkeletonRows count={2} />
  const fields: [keyof PriceDraft, MessageKey][] = [
    ['input', 'usage.priceInput'],
    ['cached', 'usage.priceCached'],
    ['output', 'usage.priceOutput'],
    ['currency', 'usage.currency'],
  ]
  return (
    <div data-testid="usage-prices">
      <p className="mb-3 text-xs text-zinc-500">
        {prices?.updated ? t('usage.pricesUpdated', { date: prices.updated }) : t('usage.noPrices')}
      </p>
      <ul className="space-y-3">
        {rows.map((r, i) => (
          <li key={i} className="grid grid-cols-2 gap-2 sm:grid-cols-6" data-testid="price-row">
            <select
              aria-label={t('usage.provider')}
              className={input}
              value={r.provider}
              onChange={(e) => set(i, 'provider', e.target.value)}
            >
              {PROVIDERS.map((p) => (
                <option key={p} value={p}>
                  {t(PROVIDER_LABELS[p])}
                </option>
              ))}
            </select>
            <input aria-label={t('usage.model')} placeholder={t('usage.model')} className={input} value={r.model} onChange={(e) => set(i, 'model', e.target.value)} data-testid="price-model" />
            {fields.map(([k, label]) => (
              <input
                key={k}
                aria-label={t(label)}
                placeholder={t(label)}
                inputMode={k === 'currency' ? 'text' : 'decimal'}
                className={input}
                value={r[k]}
                onChange={(e) => set(i, k, e.target.value)}
                data-testid={`price-${k}`}
              />
            ))}
            <button
              type="button"
              className="col-span-2 justify-self-start text-xs text-zinc-400 underline hover:text-zinc-200 sm:col-span-6"
              onClick={() => setRows((x) => x.filter((_, j) => j !== i))}
            >
              {t('usage.remove')}
            </button>
          </li>
        ))}
      </ul>
      <div className="mt-3 flex flex-wrap items-center gap-3">
        <Button
          onClick={() => setRows((x) => [...x, { provider: 'openai_compatible', model: '', input: '', cached: '', output: '', currency: 'USD' }])}
          data-testid="price-add"
        >
          {t('usage.addPrice')}
        </Button>
        <SaveButton valid={valid} busy={busy} onSave={save} testId="prices-save" invalid={t('usage.priceInvalid')} result={result} />
      </div>
    </div>
  )
}

type CapDraft = Record<(typeof BUDGET_NAMES)[number], { tokens: string; cost: string }>

function BudgetEditor() {
  const t = useT()
  const [draft, setDraft] = useState<CapDraft | null>(null)
  const [result, setResult] = useState<{ ok: boolean; text: string } | null>(null)
  const [busy, setBusy] = useState(false)
  const show = (b: Budgets) =>
    Object.fromEntries(
      BUDGET_NAMES.map((n) => [n, { tokens: b[n]?.tokens == null ? '' : String(b[n].tokens), cost: b[n]?.cost == null ? '' : String(b[n].cost) }]),
    ) as CapDraft

  useEffect(() => {
    api
      .get<Budgets>('/settings/budgets')
      .then((b) => setDraft(show(b)))
      .catch((e) => setResult({ ok: false, text: describeError(e) }))
  }, [])

  if (!draft) return result ? <ErrorBox message={result.text} /> : <SkeletonRows count={3} />
  const parsed = BUDGET_NAMES.map((n) => [n, parseCap(draft[n].tokens, true), parseCap(draft[n].cost, false)] as const)
  const valid = parsed.every(([, a, b]) => a !== 'invalid' && b !== 'invalid')

  const save = async () => {
    setBusy(true)
    setResult(null)
    try {
      const body = Object.fromEntries(parsed.map(([n, tokens, cost]) => [n, { tokens, cost }]))
      const b = await api.put<Budgets>('/settings/budgets', body)
      setDraft(show(b))
      setResult({ ok: true, text: t('usage.saved') })
    } catch (e) {
      setResult({ ok: false, text: describeError(e) })
    } finally {
      setBusy(false)
    }
  }

  return (
    <div data-testid="usage-budgets">
      <p className="mb-3 text-xs text-zinc-500">{t('usage.budgetsIntro')}</p>
      <table className="w-full text-sm">
        <thead>
          <tr className="text-left text-xs text-zinc-500">
            <th className="py-1 pr-2 font-medium" />
            <th className="py-1 pr-2 font-medium">{t('usage.capTokens')}</th>
            <th className="py-1 font-medium">{t('usage.capCost')}</th>
          </tr>
        </thead>
        <tbody>
          {BUDGET_NAMES.map((n) => (
            <tr key={n}>
              <td className="py-1 pr-2 text-zinc-300">{t(BUDGET_KEYS[n])}</td>
              {(['tokens', 'cost'] as const).map((k) => (
                <td key={k} className={k === 'tokens' ? 'py-1 pr-2' : 'py-1'}>
                  <input
                    aria-label={`${t(BUDGET_KEYS[n])}: ${t(k === 'tokens' ? 'usage.capTokens' : 'usage.capCost')}`}
                    placeholder={t('usage.noCap')}
                    inputMode="decimal"
                    className={input}
                    value={draft[n][k]}
                    onChange={(e) => setDraft({ ...draft, [n]: { ...draft[n], [k]: e.target.value } })}
                    data-testid={`budget-${n}-${k}`}
                  />
                </td>
              ))}
            </tr>
          ))}
        </tbody>
      </table>
      <div className="mt-3 flex flex-wrap items-center gap-3">
        <SaveButton valid={valid} busy={busy} onSave={save} testId="budgets-save" invalid={t('usage.capInvalid')} result={result} />
      </div>
    </div>
  )
}

export function UsagePage({ sessions }: { sessions: SessionInfo[] }) {
  const t = useT()
  const [reports, setReports] = useState<Partial<Record<GroupBy, UsageReport>>>({})
  const [error, setError] = useState<string | null>(null)

  const load = useCallback(async () => {
    setError(null)
    const from = Date.now() - 30 * DAY_MS
    try {
      const all = await Promise.all(GROUPS.map((g) => api.get<UsageReport>(`/usage?group_by=${g}&from=${from}`)))
      setReports(Object.fromEntries(GROUPS.map((g, i) => [g, all[i]])))
    } catch (e) {
      setError(describeError(e))
    }
  }, [])

  useEffect(() => {
    void load()
  }, [load])

  const titles = Object.fromEntries(sessions.map((s) => [s.chat_id, s.title || s.chat_id.slice(0, 8)]))
  const day = reports.day
  return (
    <div className="h-full overflow-y-auto" data-testid="usage-page">
      <div className="mx-auto max-w-3xl px-4 py-6 sm:px-6">
        <header className="mb-5">
          <h1 className="text-xl font-semibold text-zinc-50">{t('usage.title')}</h1>
          <p className="mt-0.5 text-sm text-zinc-400">{t('usage.intro')}</p>
        </header>
        {error ? (
          <ErrorBox message={error} onRetry={() => void load()} />
        ) : !day ? (
          <SkeletonRows count={4} />
        ) : (
          <>
            <section className={card} aria-labelledby="usage-total">
              <h2 id="usage-total" className="mb-2 text-sm font-semibold text-zinc-200">
                {t('usage.last30')}
              </h2>
              <p className="mb-3 text-sm text-zinc-300" data-testid="usage-total" data-input={day.total.input_tokens} data-output={day.total.output_tokens}>
                {t('usage.totalLine', {
                  requests: String(day.total.requests),
                  input: formatTokens(day.total.input_tokens),
                  output: formatTokens(day.total.output_tokens),
                })}
                {formatCost(day.total.cost) && ` · ${formatCost(day.total.cost)}`}
              </p>
              {day.groups.length === 0 ? <p className="text-sm text-zinc-500">{t('usage.noData')}</p> : <DayChart groups={day.groups} />}
              {day.total.estimated_requests > 0 && <p className="mt-2 text-xs text-zinc-500">{t('usage.estimated', { count: day.total.estimated_requests })}</p>}
              {day.total.unpriced_requests > 0 && <p className="mt-1 text-xs text-zinc-500">{t('usage.unpriced', { count: day.total.unpriced_requests })}</p>}
            </section>
            {(['model', 'chat', 'job'] as const).map((g) =>
              reports[g] && reports[g].groups.length > 0 ? (
                <section key={g} className={card} aria-labelledby={`usage-by-${g}`}>
                  <h2 id={`usage-by-${g}`} className="mb-2 text-sm font-semibold text-zinc-200">
                    {t(`usage.by.${g}` as MessageKey)}
                  </h2>
                  <GroupTable by={g} groups={reports[g].groups} titles={titles} />
                </section>
              ) : null,
            )}
          </>
        )}
        <section className={card} aria-labelledby="usage-prices">
          <h2 id="usage-prices" className="mb-1 text-sm font-semibold text-zinc-200">
            {t('usage.pricesTitle')}
          </h2>
          <PriceEditor onSaved={() => void load()} />
        </section>
        <section className={card} aria-labelledby="usage-budgets">
          <h2 id="usage-budgets" className="mb-1 text-sm font-semibold text-zinc-200">
            {t('usage.budgetsTitle')}
          </h2>
          <BudgetEditor />
        </section>
      </div>
    </div>
  )
}
