import { describe, expect, it } from 'vitest'
import { ApiError } from './api'
import {
  buildTest,
  buildUpdate,
  draftFromSettings,
  endpointOrigin,
  keepsStoredKey,
  movedEndpoint,
  serverKeyError,
  validateDraft,
} from './llmSettings'
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

  it('compares endpoints by origin: scheme, host and port, with defaults, case and trailing dots folded', () => {
    expect(endpointOrigin('HTTPS://API.Example.com.:443/v1/')).toBe('https://api.example.com')
    expect(endpointOrigin('http://x:1/v1')).toBe('http://x:1')
    expect(endpointOrigin('http://[::1]:8080')).toBe('http://[::1]:8080')
    expect(endpointOrigin('ftp://x')).toBeNull()
    expect(endpointOrigin('not a url')).toBeNull()
  })

  it('asks for the key again when the address moves to another origin', () => {
    const d = draftFromSettings(stored)
    // Another path on the same origin keeps the saved key.
    for (const same of ['https://api.example.com/v2', 'HTTPS://api.example.com:443', 'https://API.example.com./v1']) {
      d.openai_compatible.base_url = same
      expect(movedEndpoint(d, stored)).toBeNull()
      expect(keepsStoredKey(d, stored)).toBe(true)
      expect(validateDraft(d, 'openai_compatible', stored)).toEqual({})
    }
    // Another host, scheme or port: the key field becomes required, with the reason.
    for (const [moved, origin] of [
      ['https://evil.example/v1', 'https://evil.example'],
      ['http://api.example.com/v1', 'http://api.example.com'],
      ['https://api.example.com:8443/v1', 'https://api.example.com:8443'],
      ['http://x:1', 'http://x:1'],
    ]) {
      d.openai_compatible.base_url = moved
      expect(movedEndpoint(d, stored)).toBe(origin)
      expect(keepsStoredKey(d, stored)).toBe(false)
      expect(validateDraft(d, 'openai_compatible', stored)).toEqual({
        api_key: `The endpoint changed to ${origin}; enter its API key again`,
      })
      // A typed key satisfies it, and is the one sent.
      d.openai_compatible.api_key = 'sk-for-the-new-endpoint'
      expect(validateDraft(d, 'openai_compatible', stored)).toEqual({})
      expect(buildUpdate(d).openai_compatible.api_key).toBe('sk-for-the-new-endpoint')
      d.openai_compatible.api_key = ''
    }
    // Nothing saved, nothing to move; the Ollama tab does not care.
    const e = draftFromSettings(empty)
    e.openai_compatible.base_url = 'https://evil.example'
    expect(movedEndpoint(e, empty)).toBeNull()
    d.ollama.base_url = 'http://127.0.0.1:11434'
    expect(validateDraft(d, 'ollama', stored)).toEqual({})
  })

  it("shows the server's 422 for a moved endpoint at the key field", () => {
    const detail = 'the endpoint changed to http://x:1; enter its API key again'
    expect(serverKeyError(new ApiError(detail, 422, 'PUT', '/settings/llm', detail))).toBe(detail)
    expect(serverKeyError(new ApiError('x', 422, 'PUT', '/settings/llm', 'at least one provider connection is required'))).toBeNull()
    expect(serverKeyError(new ApiError(detail, 400, 'POST', '/settings/llm/test', detail))).toBeNull()
    expect(serverKeyError(new Error(detail))).toBeNull()
  })
})
