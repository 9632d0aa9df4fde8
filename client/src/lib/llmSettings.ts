// LLM Settings form logic (web-client spec §9): the draft never holds the stored key; validation
// covers only the visible tab; requests follow PUT /settings/llm and POST /settings/llm/test.

import type { LlmSettings, Provider } from './types'

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

export function isHttpUrl(value: string): boolean {
  try {
    const u = new URL(value.trim())
    return (u.protocol === 'http:' || u.protocol === 'https:') && Boolean(u.hostname)
  } catch {
    return false
  }
}

/** A stored key is kept when one exists, no clear was asked for, and no new key was typed. */
export function keepsStoredKey(draft: LlmDraft, settings: LlmSettings | null): boolean {
  return Boolean(settings?.openai_compatible.api_key_configured) && !draft.openai_compatible.clear_api_key
}

export type LlmErrors = Partial<Record<'base_url' | 'api_key', string>>

export function validateDraft(draft: LlmDraft, tab: Provider, settings: LlmSettings | null): LlmErrors {
  const errors: LlmErrors = {}
  const url = tab === 'openai_compatible' ? draft.openai_compatible.base_url : draft.ollama.base_url
  if (!url.trim()) errors.base_url = 'URL is required'
  else if (!isHttpUrl(url)) errors.base_url = 'Enter an http(s) URL with a host'
  if (tab === 'openai_compatible') {
    const typed = draft.openai_compatible.api_key.trim()
    if (!typed && !keepsStoredKey(draft, settings)) errors.api_key = 'API Key is required'
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
