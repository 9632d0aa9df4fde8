// The composer: auto-growing textarea, chips, the two-level @ picker, the model picker and
// Send/Stop. Selection rules live in lib/selections; this file wires them to the DOM.

import { useCallback, useEffect, useId, useLayoutEffect, useRef, useState, type KeyboardEvent } from 'react'
import { fillTone, formatTokens, type ContextFill } from '../lib/usage'
import { ArrowLeft, ArrowUp, ChevronRight, Clock, Network, RefreshCw, Sparkles, Square, X } from 'lucide-react'
import { useT, type MessageKey } from '../i18n'
import { api, describeError } from '../lib/api'
import {
  choiceValue,
  groupModels,
  parseChoiceValue,
  parseStoredChoice,
  providerErrors,
  resolveChoice,
  SELECTION_KEY,
} from '../lib/models'
import {
  addSelection,
  buildMessageFrame,
  checkSend,
  closedPicker,
  dismissPicker,
  filterItems,
  findMentionTrigger,
  mcpLabel,
  MCP_ID_RE,
  orderSelections,
  pickerBack,
  removeSelection,
  SelectionError,
  skillLabel,
  SKILL_ID_RE,
  stripMention,
  syncPicker,
  wrapIndex,
  type LlmChoice,
  type MentionTrigger,
  type MessageFrame,
  type PickerItem,
  type PickerState,
  type Selection,
} from '../lib/selections'
import type { McpServer, McpToolsResponse, ModelCatalog, SkillPage } from '../lib/types'
import { Chips } from './ChatView'

const CATEGORIES: { level: 'mcp' | 'skill'; title: MessageKey; sub: MessageKey }[] = [
  { level: 'mcp', title: 'composer.catMcp', sub: 'composer.catMcpSub' },
  { level: 'skill', title: 'composer.catSkill', sub: 'composer.catSkillSub' },
]

async function loadSkillItems(): Promise<PickerItem[]> {
  const page = await api.get<SkillPage>('/skills?enabled=true&availability=available&page_size=200')
  return (page?.items ?? [])
    .filter((s) => s.enabled && s.availability === 'available' && SKILL_ID_RE.test(s.name))
    .map((s) => ({ kind: 'skill', id: s.name, label: skillLabel(s), description: s.description ?? '' }))
}

async function loadMcpItems(): Promise<PickerItem[]> {
  const res = await api.get<{ servers: McpServer[] }>('/mcp/servers')
  const live = (res?.servers ?? []).filter(
    (s) => s.connected && s.status === 'connected' && s.tool_count > 0 && MCP_ID_RE.test(s.name),
  )
  const withTools = await Promise.all(
    live.map(async (s) => {
      const tools = await api.get<McpToolsResponse>(`/mcp/servers/${encodeURIComponent(s.name)}/tools`)
      const callable = (tools?.tools ?? []).filter((t) => t.callable).length
      return callable > 0
        ? ({ kind: 'mcp', id: s.name, label: mcpLabel(s), description: s.description ?? '', toolCount: callable } as PickerItem)
        : null
    }),
  )
  return withTools.filter((x): x is PickerItem => x !== null)
}

function readStoredChoice(): LlmChoice | null {
  try {
    return parseStoredChoice(localStorage.getItem(SELECTION_KEY))
  } catch {
    return null
  }
}

function storeChoice(c: LlmChoice | null) {
  try {
    if (c) localStorage.setItem(SELECTION_KEY, JSON.stringify(c))
    else localStorage.removeItem(SELECTION_KEY)
  } catch {
    // storage disabled: the choice lasts for this page only
  }
}

/** "31.4K / 128K": the context after the chat's last model call, amber past 80% of the window
 * (compression comes near), red past 95%. */
function ContextMeter({ c }: { c: ContextFill }) {
  const t = useT()
  const tone = fillTone(c)
  const color = tone === 'full' ? 'text-red-400' : tone === 'warn' ? 'text-amber-400' : 'text-zinc-500'
  const label = c.window
    ? t('usage.meter', { used: formatTokens(c.tokens), window: formatTokens(c.window) })
    : t('usage.meterOpen', { used: formatTokens(c.tokens) })
  return (
    <span
      className={`mr-2 text-[11px] whitespace-nowrap tabular-nums ${color}`}
      title={t('usage.meterTitle', { used: String(c.tokens), window: c.window ? String(c.window) : '∞' })}
      data-testid="context-meter"
      data-tone={tone}
    >
      {label}
    </span>
  )
}

export function Composer(props: {
  chatId: string | null
  generating: boolean
  connected: boolean
  llmVersion: number
  onSend: (frame: MessageFrame, selections: Selection[]) => boolean
  onCancel: (chatId: string) => void
  /** the model choice, reported up (Regenerate needs it) */
  onChoice?: (choice: LlmChoice | null) => void
  /** messages typed while the turn runs, waiting for it to end */
  queued?: string[]
  onUnqueue?: (index: number) => void
  /** text put into the input (a rewound message, for editing); a new nonce puts it again */
  prefill?: { text: string; nonce: number } | null
  /** how full the chat's context was after its last model call */
  context?: ContextFill | null
}) {
  const { chatId, generating, onChoice } = props
  const t = useT()
  const listboxId = useId()
  const [text, setText] = useState('')
  const [caret, setCaret] = useState(0)
  const [selections, setSelections] = useState<Selection[]>([])
  const [error, setError] = useState<string | null>(null)
  const [picker, setPicker] = useState<PickerState>(closedPicker)
  const [items, setItems] = useState<PickerItem[]>([])
  const [itemsLoading, setItemsLoading] = useState(false)
  const [itemsError, setItemsError] = useState<string | null>(null)
  const [catalog, setCatalog] = useState<ModelCatalog | null>(null)
  const [modelsLoading, setModelsLoading] = useState(true)
  const [modelsError, setModelsError] = useState<string | null>(null)
  const [choice, setChoice] = useState<LlmChoice | null>(null)
  const ta = useRef<HTMLTextAreaElement>(null)
  const root = useRef<HTMLDivElement>(null)
  const composing = useRef(false)
  const pendingCaret = useRef<number | null>(null)
  const loadSeq = useRef(0)

  const trigger: MentionTrigger | null = findMentionTrigger(text, caret)

  useEffect(() => {
    onChoice?.(choice)
  }, [choice, onChoice])

  const prefill = props.prefill
  useEffect(() => {
    if (!prefill) return
    setText(prefill.text)
    setCaret(prefill.text.length)
    ta.current?.focus()
  }, [prefill])

  // ---- models ----
  const loadModels = useCallback(async () => {
    setModelsLoading(true)
    setModelsError(null)
    try {
      const cat = await api.get<ModelCatalog>('/settings/llm/models')
      const models = Array.isArray(cat?.models) ? cat.models : []
      setCatalog({ models, providers: cat?.providers ?? {} })
      const { choice: c, forget } = resolveChoice(readStoredChoice(), models)
      if (forget) storeChoice(null)
      setChoice(c)
    } catch (e) {
      setModelsError(describeError(e))
    } finally {
      setModelsLoading(false)
    }
  }, [])

  useEffect(() => {
    void loadModels()
  }, [loadModels, props.llmVersion])

  // ---- chat switch: clear chips, error and picker, refocus; typed text stays ----
  useEffect(() => {
    setSelections([])
    setError(null)
    setPicker(closedPicker)
    ta.current?.focus()
  }, [chatId])

  // ---- textarea auto-grow, and the caret after a pick (set in the same commit, so a fast
  // typist's next key cannot land before it) ----
  useLayoutEffect(() => {
    const el = ta.current
    if (!el) return
    el.style.height = 'auto'
    el.style.height = `${Math.min(el.scrollHeight, 200)}px`
    const caretAt = pendingCaret.current
    if (caretAt !== null) {
      pendingCaret.current = null
      el.focus()
      el.setSelectionRange(caretAt, caretAt)
    }
  }, [text])

  // ---- picker sync on every input / caret move ----
  const triggerStart = trigger?.start ?? null
  useEffect(() => {
    setPicker((p) => syncPicker(p, trigger))
    // Only the trigger's position matters to syncPicker; its query changes on every key.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [triggerStart])

  const level = picker.open ? picker.level : 'category'
  const query = trigger?.query ?? ''

  const enterLevel = useCallback(async (lvl: 'skill' | 'mcp') => {
    setPicker((p) => ({ ...p, level: lvl, highlight: 0 }))
    const seq = ++loadSeq.current
    setItems([])
    setItemsError(null)
    setItemsLoading(true)
    try {
      const list = lvl === 'skill' ? await loadSkillItems() : await loadMcpItems()
      if (seq === loadSeq.current) setItems(list)
    } catch (e) {
      if (seq === loadSeq.current) setItemsError(describeError(e))
    } finally {
      if (seq === loadSeq.current) setItemsLoading(false)
    }
  }, [])

  const visible = level === 'category' ? [] : filterItems(items, query)
  const rowCount = level === 'category' ? CATEGORIES.length : itemsLoading || itemsError ? 0 : visible.length

  // The highlight resets when level, query or loading changes.
  useEffect(() => {
    setPicker((p) => (p.highlight === 0 ? p : { ...p, highlight: 0 }))
  }, [level, query, itemsLoading])

  // Clicking outside the composer closes the picker (same suppression as Escape).
  useEffect(() => {
    if (!picker.open) return
    const onDown = (e: MouseEvent) => {
      if (root.current && !root.current.contains(e.target as Node)) {
        setPicker((p) => dismissPicker(p, findMentionTrigger(ta.current?.value ?? '', ta.current?.selectionStart ?? 0)))
      }
    }
    window.addEventListener('mousedown', onDown)
    return () => window.removeEventListener('mousedown', onDown)
  }, [picker.open])

  const pick = (item: PickerItem) => {
    try {
      setSelections((list) => addSelection(list, { kind: item.kind, id: item.id, label: item.label }))
      setError(null)
    } catch (e) {
      setError(e instanceof SelectionError ? e.message : describeError(e))
    }
    if (trigger) {
      const next = stripMention(text, trigger)
      setText(next.text)
      setCaret(next.caret)
      pendingCaret.current = next.caret
    }
    setPicker(closedPicker)
  }

  const activate = (index: number) => {
    if (level === 'category') {
      const cat = CATEGORIES[index]
      if (cat) void enterLevel(cat.level)
      return
    }
    const item = visible[index]
    if (item) pick(item)
  }

  const send = () => {
    // While a turn runs the message is queued by the caller and sent when the turn ends.
    if (!chatId) return
    const check = checkSend(text, choice)
    if (!check.ok) {
      setError(check.reason)
      return
    }
    const ordered = orderSelections(selections)
    const frame = buildMessageFrame(chatId, text, choice!, ordered)
    if (!props.onSend(frame, ordered)) {
      setError(t('composer.notSent'))
      return
    }
    setText('')
    setCaret(0)
    setSelections([])
    setError(null)
    setPicker(closedPicker)
  }

  const onKeyDown = (e: KeyboardEvent<HTMLTextAreaElement>) => {
    if (e.nativeEvent.isComposing || composing.current) return
    if (picker.open) {
      if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
        e.preventDefault()
        const d = e.key === 'ArrowDown' ? 1 : -1
        setPicker((p) => ({ ...p, highlight: wrapIndex(p.highlight, d, rowCount) }))
        return
      }
      if (e.key === 'Enter' && !e.shiftKey) {
        e.preventDefault()
        if (rowCount > 0) activate(picker.highlight)
        return
      }
      if (e.key === 'Escape') {
        e.preventDefault()
        setPicker((p) => dismissPicker(p, trigger))
        return
      }
      if (e.key === 'Backspace' && level !== 'category' && query === '') {
        e.preventDefault()
        setPicker((p) => pickerBack(p))
        return
      }
    }
    if (e.key === 'Enter' && !e.shiftKey) {
      e.preventDefault()
      send()
    }
  }

  const updateCaret = () => setCaret(ta.current?.selectionStart ?? 0)

  const groups = groupModels(catalog?.models ?? [], t)
  const provErr = providerErrors(catalog, t)
  const blank = text.trim() === ''
  const sendDisabled = blank || !choice || modelsLoading || !chatId
  const optionId = (i: number) => `${listboxId}-opt-${i}`

  return (
    <div ref={root} className="shrink-0 px-3 pb-3 sm:px-4 sm:pb-4">
      <div className="relative mx-auto w-full max-w-3xl">
        {picker.open && (
          // The popover only keeps focus in the textarea; the listbox inside it is what AT reads.
          // eslint-disable-next-line jsx-a11y/no-static-element-interactions
          <div
            data-testid="mention-picker"
            onMouseDown={(e) => e.preventDefault()}
            className="absolute right-0 bottom-full left-0 z-20 mb-2 overflow-hidden rounded-xl border border-zinc-700 bg-zinc-900 shadow-2xl"
          >
            {level === 'category' ? (
              <div role="listbox" id={listboxId} tabIndex={-1} aria-label={t('composer.pickerLabel')}>
              {CATEGORIES.map((c, i) => (
                <button
                  key={c.level}
                  id={optionId(i)}
                  type="button"
                  role="option"
                  aria-selected={picker.highlight === i}
                  onMouseEnter={() => setPicker((p) => ({ ...p, highlight: i }))}
                  onClick={() => activate(i)}
                  className={`flex w-full items-center gap-3 px-3.5 py-2.5 text-left text-sm ${
                    picker.highlight === i ? 'bg-zinc-800' : ''
                  }`}
                >
                  {c.level === 'mcp' ? (
                    <Network size={16} className="text-cyan-400" />
                  ) : (
                    <Sparkles size={16} className="text-amber-400" />
                  )}
                  <span className="font-medium text-zinc-100">{t(c.title)}</span>
                  <span className="text-zinc-500">— {t(c.sub)}</span>
                  <ChevronRight size={15} className="ml-auto text-zinc-600" />
                </button>
              ))}
              </div>
            ) : (
              <div>
                <div className="flex items-center gap-2 border-b border-zinc-800 px-2 py-1.5 text-xs text-zinc-400">
                  <button
                    type="button"
                    aria-label={t('common.back')}
                    onClick={() => setPicker((p) => pickerBack(p))}
                    className="rounded p-1 hover:bg-zinc-800 hover:text-zinc-100"
                  >
                    <ArrowLeft size={14} />
                  </button>
                  <span className="font-medium text-zinc-200">{t(level === 'skill' ? 'composer.catSkill' : 'composer.catMcp')}</span>
                  {query && <span className="ml-auto font-mono text-zinc-500">{t('composer.filter', { query })}</span>}
                </div>
                {/* A listbox only while it holds options (loading, error and empty states are not options). */}
                <div
                  role={rowCount > 0 ? 'listbox' : undefined}
                  id={listboxId}
                  tabIndex={rowCount > 0 ? -1 : undefined}
                  aria-label={rowCount > 0 ? t(level === 'skill' ? 'composer.catSkill' : 'composer.catMcp') : undefined}
                  aria-busy={itemsLoading}
                  className="max-h-64 overflow-y-auto py-1"
                >
                  {itemsLoading ? (
                    <div className="space-y-2 p-3" aria-busy="true">
                      {[0, 1, 2].map((i) => (
                        <div key={i} className="h-8 animate-pulse rounded bg-zinc-800/70" />
                      ))}
                    </div>
                  ) : itemsError ? (
                    <div className="flex items-center gap-2 px-3.5 py-3 text-sm text-red-400">
                      <span className="min-w-0 flex-1">{itemsError}</span>
                      <button
                        type="button"
                        onClick={() => void enterLevel(level)}
                        className="rounded border border-zinc-700 px-2 py-0.5 text-xs text-zinc-200 hover:bg-zinc-800"
                      >
                        {t('common.retry')}
                      </button>
                    </div>
                  ) : visible.length === 0 ? (
                    <p className="px-3.5 py-3 text-sm text-zinc-500">
                      {t(level === 'skill' ? 'composer.noSkill' : 'composer.noMcp')}
                    </p>
                  ) : (
                    visible.map((it, i) => (
                      <button
                        key={it.id}
                        id={optionId(i)}
                        type="button"
                        role="option"
                        aria-selected={picker.highlight === i}
                        data-testid="picker-item"
                        onMouseEnter={() => setPicker((p) => ({ ...p, highlight: i }))}
                        onClick={() => activate(i)}
                        className={`flex w-full items-start gap-3 px-3.5 py-2 text-left ${
                          picker.highlight === i ? 'bg-zinc-800' : ''
                        }`}
                      >
                        {it.kind === 'skill' ? (
                          <Sparkles size={15} className="mt-0.5 shrink-0 text-amber-400" />
                        ) : (
                          <Network size={15} className="mt-0.5 shrink-0 text-cyan-400" />
                        )}
                        <span className="min-w-0 flex-1">
                          <span className="flex items-baseline gap-2">
                            <span className="truncate text-sm font-medium text-zinc-100">{it.label}</span>
                            {it.kind === 'skill' && it.id !== it.label && (
                              <span className="truncate font-mono text-[11px] text-zinc-500">{it.id}</span>
                            )}
                          </span>
                          <span className="block truncate text-xs text-zinc-500">
                            {it.kind === 'skill' ? it.description || t('common.noDescription') : it.description || it.id}
                          </span>
                        </span>
                        {it.kind === 'mcp' && (
                          <span className="shrink-0 text-[11px] text-zinc-500">{t('composer.tools', { count: it.toolCount ?? 0 })}</span>
                        )}
                      </button>
                    ))
                  )}
                </div>
              </div>
            )}
          </div>
        )}

        <div className="rounded-2xl border border-zinc-800 bg-zinc-900/80 shadow-lg transition focus-within:border-zinc-600">
          {selections.length > 0 && (
            <div className="max-h-20 overflow-y-auto px-3 pt-2.5">
              <Chips
                selections={orderSelections(selections)}
                onRemove={(s) => setSelections((l) => removeSelection(l, s.kind, s.id))}
              />
            </div>
          )}
          {props.queued && props.queued.length > 0 && (
            <ul className="space-y-1 px-3 pt-2.5" aria-label={t('chat.queued')} data-testid="queued">
              {props.queued.map((q, i) => (
                <li key={i} className="flex items-center gap-2 rounded-md bg-zinc-800/60 px-2 py-1 text-xs text-zinc-400">
                  <Clock size={12} className="shrink-0" aria-hidden />
                  <span className="min-w-0 flex-1 truncate" title={t('chat.queued')}>
                    {q}
                  </span>
                  <button
                    type="button"
                    aria-label={t('chat.unqueue')}
                    onClick={() => props.onUnqueue?.(i)}
                    className="rounded p-0.5 hover:bg-zinc-700 hover:text-zinc-100"
                  >
                    <X size={12} />
                  </button>
                </li>
              ))}
            </ul>
          )}
          <textarea
            ref={ta}
            rows={1}
            value={text}
            placeholder={t('composer.placeholder')}
            aria-label={t('composer.inputLabel')}
            role="combobox"
            aria-autocomplete="list"
            aria-haspopup="listbox"
            aria-expanded={picker.open}
            aria-controls={picker.open ? listboxId : undefined}
            aria-activedescendant={picker.open && rowCount > 0 ? optionId(picker.highlight) : undefined}
            data-testid="composer-input"
            onChange={(e) => {
              setText(e.target.value)
              setCaret(e.target.selectionStart ?? e.target.value.length)
            }}
            onKeyDown={onKeyDown}
            onKeyUp={updateCaret}
            onClick={updateCaret}
            onSelect={updateCaret}
            onCompositionStart={() => (composing.current = true)}
            onCompositionEnd={() => (composing.current = false)}
            className="block max-h-[200px] w-full resize-none bg-transparent px-4 pt-3 pb-2 text-[15px] text-zinc-100 placeholder:text-zinc-600 outline-none disabled:opacity-60"
          />
          <div className="flex items-center gap-2 px-2.5 pb-2.5">
            <div className="flex min-w-0 items-center gap-1">
              <select
                aria-label={t('composer.model')}
                data-testid="model-select"
                value={choiceValue(choice)}
                disabled={generating || modelsLoading}
                onChange={(e) => {
                  const c = parseChoiceValue(e.target.value)
                  setChoice(c)
                  storeChoice(c)
                }}
                className="max-w-[14rem] min-w-0 truncate rounded-md border border-zinc-800 bg-zinc-950 px-2 py-1 text-xs text-zinc-300 outline-none hover:border-zinc-700 focus:border-zinc-600 disabled:opacity-60"
              >
                <option value="" disabled>
                  {t(modelsLoading ? 'composer.loadingModels' : 'composer.chooseModel')}
                </option>
                {groups.map((g) => (
                  <optgroup key={g.provider} label={g.label}>
                    {g.ids.map((id) => (
                      <option key={id} value={choiceValue({ provider: g.provider, model: id })}>
                        {id}
                      </option>
                    ))}
                  </optgroup>
                ))}
              </select>
              <button
                type="button"
                aria-label={t('composer.refreshModels')}
                disabled={generating || modelsLoading}
                onClick={() => void loadModels()}
                className="rounded-md p-1.5 text-zinc-500 hover:bg-zinc-800 hover:text-zinc-200 disabled:opacity-40"
              >
                <RefreshCw size={13} className={modelsLoading ? 'animate-spin' : ''} />
              </button>
            </div>
            <div className="ml-auto flex items-center">
              {props.context && <ContextMeter c={props.context} />}
              {generating && !blank ? (
                <button
                  type="button"
                  data-testid="queue-button"
                  disabled={sendDisabled}
                  onClick={send}
                  title={t('chat.queued')}
                  className="mr-1.5 inline-flex items-center gap-1.5 rounded-lg bg-zinc-700 px-3 py-1.5 text-sm font-medium text-white hover:bg-zinc-600 disabled:opacity-50"
                >
                  <Clock size={13} aria-hidden /> {t('chat.queueSend')}
                </button>
              ) : null}
              {generating ? (
                <button
                  type="button"
                  title={t('chat.stopHint')}
                  data-testid="stop-button"
                  onClick={() => chatId && props.onCancel(chatId)}
                  className="flex items-center gap-1.5 rounded-lg bg-red-600 px-3 py-1.5 text-sm font-medium text-white hover:bg-red-500"
                >
                  <Square size={12} fill="currentColor" /> {t('composer.stop')}
                </button>
              ) : (
                <button
                  type="button"
                  data-testid="send-button"
                  disabled={sendDisabled}
                  onClick={send}
                  className="flex items-center gap-1.5 rounded-lg bg-emerald-600 px-3 py-1.5 text-sm font-medium text-white hover:bg-emerald-500 disabled:bg-zinc-800 disabled:text-zinc-500"
                >
                  <ArrowUp size={15} /> {t('composer.send')}
                </button>
              )}
            </div>
          </div>
        </div>
        {(error || modelsError || provErr) && (
          <div className="mt-1.5 space-y-0.5 px-1 text-xs">
            {error && (
              <p role="alert" className="text-red-400" data-testid="composer-error">
                {error}
              </p>
            )}
            {modelsError && <p role="alert" className="text-red-400">{t('composer.modelsError', { error: modelsError })}</p>}
            {provErr && <p className="text-amber-400">{provErr}</p>}
          </div>
        )}
        {!props.connected && <p className="mt-1.5 px-1 text-xs text-zinc-500">{t('composer.offline')}</p>}
      </div>
    </div>
  )
}
