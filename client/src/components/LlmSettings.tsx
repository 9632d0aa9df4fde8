// LLM Settings: Generic API (OpenAI-compatible) and Ollama connections. The stored API key is
// never returned by the server and never shown; the form can keep, replace or clear it. When the
// address moves to another origin the saved key is not reused, so the key becomes required.

import { useCallback, useEffect, useState } from 'react'
import { Eye, EyeOff, Trash2, Undo2 } from 'lucide-react'
import { useT } from '../i18n'
import { api, describeError } from '../lib/api'
import {
  buildTest,
  buildUpdate,
  draftFromSettings,
  endpointOrigin,
  keepsStoredKey,
  movedEndpoint,
  serverKeyError,
  validateDraft,
  type LlmDraft,
  type LlmErrors,
  type TestResult,
} from '../lib/llmSettings'
import type { LlmSettings, Provider } from '../lib/types'
import { Button, ConfirmDialog, ErrorBox, Field, inputClass, SkeletonRows, Spinner } from './ui'

export function LlmSettingsView({ onSaved }: { onSaved: () => void }) {
  const t = useT()
  const [settings, setSettings] = useState<LlmSettings | null>(null)
  const [loadError, setLoadError] = useState<string | null>(null)
  const [draft, setDraft] = useState<LlmDraft>(draftFromSettings(null))
  const [tab, setTab] = useState<Provider>('openai_compatible')
  const [errors, setErrors] = useState<LlmErrors>({})
  const [showKey, setShowKey] = useState(false)
  const [busy, setBusy] = useState<'test' | 'save' | null>(null)
  const [result, setResult] = useState<{ ok: boolean; text: string } | null>(null)
  const [confirmClear, setConfirmClear] = useState(false)

  const load = useCallback(async () => {
    setLoadError(null)
    try {
      const s = await api.get<LlmSettings>('/settings/llm')
      setSettings(s)
      setDraft(draftFromSettings(s))
    } catch (e) {
      setLoadError(describeError(e))
    }
  }, [])

  useEffect(() => {
    void load()
  }, [load])

  const check = (): boolean => {
    const errs = validateDraft(draft, tab, settings)
    setErrors(errs)
    return Object.keys(errs).length === 0
  }

  const showError = (e: unknown) => {
    setResult({ ok: false, text: describeError(e) })
    const keyError = serverKeyError(e)
    if (keyError) setErrors((errs) => ({ ...errs, api_key: keyError }))
  }

  const test = async () => {
    if (!check()) return
    setBusy('test')
    setResult(null)
    try {
      const r = await api.post<TestResult>('/settings/llm/test', buildTest(draft, tab), { timeoutMs: 40_000 })
      // The server's message is English; the model count says the same in the language on screen.
      const text =
        r?.success && typeof r.model_count === 'number'
          ? t('llm.testFound', { count: r.model_count })
          : t(r?.success ? 'llm.testOk' : 'llm.testFailed')
      setResult({ ok: Boolean(r?.success), text })
    } catch (e) {
      showError(e)
    } finally {
      setBusy(null)
    }
  }

  const save = async () => {
    if (!check()) return
    setBusy('save')
    setResult(null)
    try {
      const s = await api.put<LlmSettings>('/settings/llm', buildUpdate(draft))
      setSettings(s)
      setDraft(draftFromSettings(s))
      setShowKey(false)
      setResult({ ok: true, text: t('llm.saved') })
      onSaved()
    } catch (e) {
      showError(e)
    } finally {
      setBusy(null)
    }
  }

  const oc = draft.openai_compatible
  const stored = Boolean(settings?.openai_compatible.api_key_configured)
  const keeping = keepsStoredKey(draft, settings) && !oc.api_key.trim()
  const moved = oc.clear_api_key ? null : movedEndpoint(draft, settings)
  const keyRequired = !keepsStoredKey(draft, settings)
  const tabReady = tab === 'openai_compatible' ? settings?.openai_compatible.ready : settings?.ollama.ready

  return (
    <div className="h-full overflow-y-auto" data-testid="llm-settings">
      <div className="mx-auto max-w-2xl px-4 py-6 sm:px-6">
        <header className="mb-5">
          <h1 className="text-xl font-semibold text-zinc-50">{t('llm.title')}</h1>
          {settings && (
            <p className={`mt-0.5 text-sm ${settings.configured ? 'text-emerald-400' : 'text-amber-400'}`} data-testid="llm-status">
              {t(settings.configured ? 'llm.statusOk' : 'llm.statusNone')}
            </p>
          )}
        </header>
        {loadError ? (
          <ErrorBox message={loadError} onRetry={() => void load()} />
        ) : !settings ? (
          <SkeletonRows count={2} />
        ) : (
          <div className="rounded-xl border border-zinc-800 bg-zinc-900/40">
            <div role="tablist" className="flex border-b border-zinc-800 px-2">
              {(['openai_compatible', 'ollama'] as Provider[]).map((p) => (
                <button
                  key={p}
                  type="button"
                  role="tab"
                  aria-selected={tab === p}
                  onClick={() => {
                    setTab(p)
                    setErrors({})
                    setResult(null)
                  }}
                  className={`-mb-px border-b-2 px-4 py-2.5 text-sm font-medium transition ${
                    tab === p ? 'border-emerald-500 text-zinc-100' : 'border-transparent text-zinc-500 hover:text-zinc-300'
                  }`}
                >
                  {t(p === 'openai_compatible' ? 'models.openai_compatible' : 'models.ollama')}
                </button>
              ))}
            </div>
            <form
              className="space-y-4 p-5"
              autoComplete="off"
              onSubmit={(e) => {
                e.preventDefault()
                void save()
              }}
            >
              <p className={`text-xs ${tabReady ? 'text-emerald-400' : 'text-zinc-500'}`}>
                {t(tabReady ? 'llm.configured' : 'llm.notConfigured')}
              </p>
              {tab === 'openai_compatible' ? (
                <>
                  <Field label={t('llm.baseUrl')} error={errors.base_url}>
                    <input
                      className={`${inputClass} font-mono`}
                      aria-label={t('llm.baseUrl')}
                      placeholder="https://api.example.com/v1"
                      value={oc.base_url}
                      onChange={(e) => setDraft({ ...draft, openai_compatible: { ...oc, base_url: e.target.value } })}
                    />
                  </Field>
                  <Field
                    label={t('llm.apiKey')}
                    error={errors.api_key}
                    hint={
                      moved ? (
                        <span className="rounded bg-amber-500/15 px-1.5 text-[10px] text-amber-300">{t('llm.tagRequired')}</span>
                      ) : stored ? (
                        oc.clear_api_key ? (
                          <span className="rounded bg-red-500/15 px-1.5 text-[10px] text-red-300">{t('llm.tagWillClear')}</span>
                        ) : (
                          <span className="rounded bg-emerald-500/15 px-1.5 text-[10px] text-emerald-300">{t('llm.tagSaved')}</span>
                        )
                      ) : undefined
                    }
                  >
                    <div className="flex gap-2">
                      <div className="relative flex-1">
                        <input
                          className={`${inputClass} pr-9 font-mono`}
                          aria-label={t('llm.apiKey')}
                          type={showKey ? 'text' : 'password'}
                          autoComplete="new-password"
                          aria-required={keyRequired}
                          placeholder={t(keyRequired ? 'llm.enterKey' : 'llm.keepKeyPlaceholder')}
                          value={oc.api_key}
                          onChange={(e) => setDraft({ ...draft, openai_compatible: { ...oc, api_key: e.target.value } })}
                        />
                        <button
                          type="button"
                          aria-label={t(showKey ? 'llm.hideKey' : 'llm.showKey')}
                          onClick={() => setShowKey((v) => !v)}
                          className="absolute top-1/2 right-2 -translate-y-1/2 text-zinc-500 hover:text-zinc-200"
                        >
                          {showKey ? <EyeOff size={15} /> : <Eye size={15} />}
                        </button>
                      </div>
                      {stored &&
                        (oc.clear_api_key ? (
                          <Button
                            aria-label={t('llm.keepSaved')}
                            onClick={() => setDraft({ ...draft, openai_compatible: { ...oc, clear_api_key: false } })}
                          >
                            <Undo2 size={14} />
                          </Button>
                        ) : (
                          <Button aria-label={t('llm.clearSaved')} onClick={() => setConfirmClear(true)}>
                            <Trash2 size={14} />
                          </Button>
                        ))}
                    </div>
                    {keeping && <span className="mt-1 block text-xs text-zinc-500">{t('llm.keptNote')}</span>}
                    {moved && !oc.api_key.trim() && (
                      <span className="mt-1 block text-xs text-amber-300" data-testid="llm-key-moved">
                        {t('llm.movedNote', {
                          origin: endpointOrigin(settings.openai_compatible.base_url) ?? t('llm.ownAddress'),
                          moved,
                        })}
                      </span>
                    )}
                  </Field>
                </>
              ) : (
                <Field label={t('llm.serverUrl')} error={errors.base_url}>
                  <input
                    className={`${inputClass} font-mono`}
                    aria-label={t('llm.serverUrl')}
                    placeholder="http://127.0.0.1:11434"
                    value={draft.ollama.base_url}
                    onChange={(e) => setDraft({ ...draft, ollama: { base_url: e.target.value } })}
                  />
                </Field>
              )}
              {result && (
                <p
                  role="status"
                  data-testid="llm-result"
                  className={`rounded-md border px-3 py-2 text-sm ${
                    result.ok
                      ? 'border-emerald-900/60 bg-emerald-950/30 text-emerald-300'
                      : 'border-red-900/60 bg-red-950/30 text-red-300'
                  }`}
                >
                  {result.text}
                </p>
              )}
              <div className="flex justify-end gap-2 pt-1">
                <Button onClick={test} disabled={busy !== null} data-testid="llm-test">
                  {busy === 'test' && <Spinner />} {t('llm.test')}
                </Button>
                <Button variant="primary" type="submit" disabled={busy !== null} data-testid="llm-save">
                  {busy === 'save' && <Spinner />} {t('common.save')}
                </Button>
              </div>
            </form>
          </div>
        )}
      </div>
      {confirmClear && (
        <ConfirmDialog
          message={t('llm.confirmClear')}
          confirmLabel={t('llm.clear')}
          onCancel={() => setConfirmClear(false)}
          onConfirm={() => {
            setDraft({ ...draft, openai_compatible: { ...oc, api_key: '', clear_api_key: true } })
            setConfirmClear(false)
          }}
        />
      )}
    </div>
  )
}
