import { describe, expect, it } from 'vitest'
import { buildTest, buildUpdate, draftFromSettings, validateDraft } from './llmSettings'
import type { LlmSettings } from './types'

const stored: LlmSettings = {
  configured: true,
  openai_compatible: { base_url: 'https://api.example.com/v1', ready: true, api_key_configured: true },
  ollama: { base_url: '', ready: false },
}
const empty: LlmSettings = {
  configured: false,
  openai_compatible: { base_url: '', ready: false, api_key_configured: false },
  ollama: { base_url: '', ready: false },
}

describe('LLM settings form', () => {
  it('the draft never holds the stored key and has no model fields', () => {
    const d = draftFromSettings(stored)
    expect(d).toEqual({
      openai_compatible: { base_url: 'https://api.example.com/v1', api_key: '', clear_api_key: false },
      ollama: { base_url: '' },
    })
    expect(JSON.stringify(d)).not.toContain('model')
  })

  it('the update omits a blank key, always sends clear_api_key, and has no provider/model', () => {
    const d = draftFromSettings(stored)
    d.openai_compatible.api_key = '   '
    const u = buildUpdate(d)
    expect(u).toEqual({
      openai_compatible: { base_url: 'https://api.example.com/v1', clear_api_key: false },
      ollama: { base_url: '' },
    })
    expect('provider' in u).toBe(false)
    d.openai_compatible.api_key = ' sk-new '
    expect(buildUpdate(d).openai_compatible).toEqual({
      base_url: 'https://api.example.com/v1',
      api_key: 'sk-new',
      clear_api_key: false,
    })
    d.openai_compatible.api_key = ''
    d.openai_compatible.clear_api_key = true
    expect(buildUpdate(d).openai_compatible.clear_api_key).toBe(true)
  })

  it('a typed key never goes together with clear_api_key', () => {
    const d = draftFromSettings(stored)
    d.openai_compatible.clear_api_key = true
    d.openai_compatible.api_key = 'sk'
    expect(buildUpdate(d).openai_compatible).toMatchObject({ api_key: 'sk', clear_api_key: false })
  })

  it('the test request has provider = tab plus both drafts', () => {
    const d = draftFromSettings(stored)
    d.ollama.base_url = 'http://127.0.0.1:11434'
    const t = buildTest(d, 'ollama')
    expect(t.provider).toBe('ollama')
    expect(t.ollama.base_url).toBe('http://127.0.0.1:11434')
    expect(t.openai_compatible.base_url).toBe('https://api.example.com/v1')
  })

  it('validates only the visible tab, needs an effective key, requires http(s)', () => {
    const d = draftFromSettings(empty)
    expect(validateDraft(d, 'openai_compatible', empty)).toEqual({
      base_url: 'URL is required',
      api_key: 'API Key is required',
    })
    // the Ollama tab ignores the Generic API key
    d.ollama.base_url = 'http://127.0.0.1:11434'
    expect(validateDraft(d, 'ollama', empty)).toEqual({})
    d.ollama.base_url = 'ftp://x'
    expect(validateDraft(d, 'ollama', empty).base_url).toMatch(/http/)
    // a stored key counts, unless it is being cleared
    const s = draftFromSettings(stored)
    expect(validateDraft(s, 'openai_compatible', stored)).toEqual({})
    s.openai_compatible.clear_api_key = true
    expect(validateDraft(s, 'openai_compatible', stored).api_key).toBeDefined()
    s.openai_compatible.api_key = 'sk-x'
    expect(validateDraft(s, 'openai_compatible', stored)).toEqual({})
    s.openai_compatible.base_url = 'not a url'
    expect(validateDraft(s, 'openai_compatible', stored).base_url).toBeDefined()
  })
})
