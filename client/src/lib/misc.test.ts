import { describe, expect, it } from 'vitest'
import { acceptWsUrl, defaultEndpoints, resolveEndpoints } from './config'
import { groupModels, parseStoredChoice, providerErrors, resolveChoice } from './models'
import { backoffDelay, parseEvent } from './socket'
import { relativeTime } from './time'

const served = { origin: 'http://127.0.0.1:8000', hostname: '127.0.0.1', port: '8000', protocol: 'http:' }
const dev = { origin: 'http://127.0.0.1:5173', hostname: '127.0.0.1', port: '5173', protocol: 'http:' }

describe('endpoints', () => {
  it('defaults to the serving origin, or to the standard ports under the dev server', () => {
    expect(defaultEndpoints(served, {})).toEqual({ apiBase: 'http://127.0.0.1:8000/api', wsUrl: 'ws://127.0.0.1:8765/' })
    expect(defaultEndpoints({ ...served, origin: 'http://localhost:9000', hostname: 'localhost', port: '9000' }, {})).toEqual({
      apiBase: 'http://localhost:9000/api',
      wsUrl: 'ws://localhost:8765/',
    })
    expect(defaultEndpoints(dev, {})).toEqual({ apiBase: 'http://127.0.0.1:8000/api', wsUrl: 'ws://127.0.0.1:8765/' })
    expect(defaultEndpoints(served, { VITE_API_BASE: 'http://h:1/api/', VITE_WS_URL: 'ws://h:2/' })).toEqual({
      apiBase: 'http://h:1/api',
      wsUrl: 'ws://h:2/',
    })
  })

  it('uses the server-advertised ws_url when valid', async () => {
    const ok = async () => new Response(JSON.stringify({ ws_url: 'ws://127.0.0.1:41000/' }))
    expect((await resolveEndpoints(served, {}, ok)).wsUrl).toBe('ws://127.0.0.1:41000/')
    const bad = async () => new Response(JSON.stringify({ ws_url: 'javascript:x' }))
    expect((await resolveEndpoints(served, {}, bad)).wsUrl).toBe('ws://127.0.0.1:8765/')
    const missing = async () => new Response('nf', { status: 404 })
    expect((await resolveEndpoints(served, {}, missing)).wsUrl).toBe('ws://127.0.0.1:8765/')
    const down = async (): Promise<Response> => {
      throw new TypeError('fetch failed')
    }
    expect((await resolveEndpoints(served, {}, down)).wsUrl).toBe('ws://127.0.0.1:8765/')
    expect(acceptWsUrl('http://x/')).toBeNull()
  })
})

describe('models', () => {
  const models = [
    { provider: 'ollama' as const, id: 'qwen' },
    { provider: 'openai_compatible' as const, id: 'fake-model' },
  ]
  it('groups Generic API first and hides empty groups', () => {
    expect(groupModels(models).map((g) => g.label)).toEqual(['Generic API', 'Ollama'])
    expect(groupModels([models[0]]).map((g) => g.label)).toEqual(['Ollama'])
  })
  it('keeps an offered stored choice, drops a stale one, else takes the first', () => {
    expect(resolveChoice({ provider: 'ollama', model: 'qwen' }, models)).toEqual({
      choice: { provider: 'ollama', model: 'qwen' },
      forget: false,
    })
    expect(resolveChoice({ provider: 'ollama', model: 'gone' }, models)).toEqual({ choice: null, forget: true })
    expect(resolveChoice(null, models).choice).toEqual({ provider: 'openai_compatible', model: 'fake-model' })
    expect(resolveChoice(null, []).choice).toBeNull()
    expect(parseStoredChoice('{bad')).toBeNull()
    expect(parseStoredChoice('{"provider":"x","model":"m"}')).toBeNull()
  })
  it('joins provider errors', () => {
    expect(
      providerErrors({ models: [], providers: { openai_compatible: { ready: true, error: 'down' }, ollama: { ready: true, error: 'off' } } }),
    ).toBe('Generic API: down; Ollama: off')
    expect(providerErrors({ models: [], providers: {} })).toBeNull()
  })
})

describe('socket helpers', () => {
  it('backs off 1, 2, 4 … capped at 30 s', () => {
    expect([0, 1, 2, 3, 4, 5, 6, 10].map(backoffDelay)).toEqual([1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000])
  })
  it('ignores bad frames', () => {
    expect(parseEvent('{"event":"pong"}')).toEqual({ event: 'pong' })
    expect(parseEvent('not json')).toBeNull()
    expect(parseEvent('[1]')).toBeNull()
    expect(parseEvent('{"type":"x"}')).toBeNull()
  })
  it('formats relative times', () => {
    const now = Date.parse('2026-11-30T12:00:00Z')
    expect(relativeTime('2026-11-30T11:59:40Z', now)).toBe('just now')
    expect(relativeTime('2026-11-30T11:55:00Z', now)).toBe('5 min ago')
    expect(relativeTime('2026-11-30T09:00:00Z', now)).toBe('3 h ago')
    expect(relativeTime('2026-11-28T12:00:00Z', now)).toBe('2 d ago')
    expect(relativeTime('garbage', now)).toBe('')
  })
})
