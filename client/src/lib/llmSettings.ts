// LLM Settings form logic (docs/web-client.md §9): the draft never holds the stored key; validation
// covers only the visible tab; a saved key is only reused while the endpoint's origin is the
// same; requests follow PUT /settings/llm and POST /settings/llm/test.

import { currentLang, tr } from '../i18n'
import { ApiError } from './api'
import type { LlmSettings, Provider } from './types'
import { isHttpUrl } from './url'

export interface LlmDraft {
  openai_compatible: { base_url: string; api_key: string; clear_api_key: boolean }
  ollama: { base_url: string }
}

export function draftFromSettings(s: LlmSettings | null): LlmDraft {
  return {
    openai_compatible: { base_url: s?.openai_compatible.base_url ?? '', api_key: '', clear_api_key: false },
    ollama: { base_url: s?.ollama.base_url ?? '' },
  }
}

export { isHttpUrl }

/**
 * Where a URL connects, normalised like the server does: scheme, host and port, with default
 * ports, letter case and trailing dots of the host not counting. `null` when it is no http(s) URL.
 */
export function endpointOrigin(value: string): string | null {
  try {
    const u = new URL(value.trim())
    if (u.protocol !== 'http:' && u.protocol !== 'https:') return null
    const host = u.hostname.replace(/\.+$/, '')
    if (!host) return null
    return `${u.protocol}//${host}${u.port ? `:${u.port}` : ''}`
  } catch {
    return null
  }
}

/**
 * The new origin when the typed Generic API address points somewhere other than the one the
 * saved key was entered for. The server never sends a saved key to a new origin (it answers
 * 422), so the form asks for the key again. `null` when nothing moved or the URL is invalid.
 */
export function movedEndpoint(draft: LlmDraft, settings: LlmSettings | null): string | null {
  if (!settings?.openai_compatible.api_key_configured) return null
  const url = draft.openai_compatible.base_url.trim()
  const now = url ? endpointOrigin(url) : null
  if (!now) return null
  return now === endpointOrigin(settings.openai_compatible.base_url) ? null : now
}

/** A stored key is kept when one exists, no clear was asked for, and the endpoint's origin is unchanged. */
export function keepsStoredKey(draft: LlmDraft, settings: LlmSettings | null): boolean {
  return (
    Boolean(settings?.openai_compatible.api_key_configured) &&
    !draft.openai_compatible.clear_api_key &&
    movedEndpoint(draft, settings) === null
  )
}

/** The key-field message for a moved endpoint (the server's 422 uses the same English words). */
export function movedKeyMessage(origin: string): string {
  return tr('llm.keyMoved', { origin })
}

/**
 * The server's 422 for a moved endpoint without a key (e.g. the saved settings changed in
 * another tab), to show at the key field; `null` for any other error.
 */
export function serverKeyError(e: unknown): string | null {
  if (!(e instanceof ApiError) || e.status !== 422 || typeof e.detail !== 'string') return null
  // The server words it in English (shown verbatim there); the client recognises it, so another
  // language gets its own words for it.
  const m = /^the endpoint changed to (.+); enter its API key again$/.exec(e.detail)
  if (!m) return null
  return currentLang() === 'en' ? e.detail : movedKeyMessage(m[1])
}

export type LlmErrors = Partial<Record<'base_url' | 'api_key', string>>

export function validateDraft(draft: LlmDraft, tab: Provider, settings: LlmSettings | null): LlmErrors {
  const errors: LlmErrors = {}
  const url = tab === 'openai_compatible' ? draft.openai_compatible.base_url : draft.ollama.base_url
  if (!url.trim()) errors.base_url = tr('llm.urlRequired')
  else if (!isHttpUrl(url)) errors.base_url = tr('llm.urlInvalid')
  if (tab === 'openai_compatible') {
    const typed = draft.openai_compatible.api_key.trim()
    if (!typed && !keepsStoredKey(draft, settings)) {
      const moved = draft.openai_compatible.clear_api_key ? null : movedEndpoint(draft, settings)
      errors.api_key = moved ? movedKeyMessage(moved) : tr('llm.keyRequired')
    }
  }
  return errors
}

export interface LlmUpdateBody {
  openai_compatible: { base_url: string; api_key?: string; clear_api_key: boolean }
  ollama: { base_url: string }
}

export function buildUpdate(draft: LlmDraft): LlmUpdateBody {
  const key = draft.openai_compatible.api_key.trim()
  const oc: LlmUpdateBody['openai_compatible'] = {
    base_url: draft.openai_compatible.base_url.trim(),
    clear_api_key: draft.openai_compatible.clear_api_key,
  }
  // A typed key replaces the stored one, so a clear request would contradict it.
  if (key) {
    oc.api_key = key
    oc.clear_api_key = false
  }
  return { openai_compatible: oc, ollama: { base_url: draft.ollama.base_url.trim() } }
}

export function buildTest(draft: LlmDraft, tab: Provider): LlmUpdateBody & { provider: Provider } {
  return { provider: tab, ...buildUpdate(draft) }
}

export interface TestResult {
  success: boolean
  provider?: string
  model_count?: number
  message?: string
}
