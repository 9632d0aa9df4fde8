import { describe, expect, it } from 'vitest'
import { waitForAuthorized } from './mcpAuth'
import type { McpServer } from './types'

const server = (auth: McpServer['auth']): McpServer => ({
  name: 'oa',
  display_name: 'OA',
  description: '',
  type: 'streamable_http',
  url: 'http://127.0.0.1:1/mcp',
  headers: {},
  builtin: false,
  mutable: true,
  status: 'error',
  connected: false,
  status_error: null,
  tool_count: 0,
  auth,
})

describe('waitForAuthorized', () => {
  it('resolves once the server shows authorized, surviving failed polls', async () => {
    const answers: Array<McpServer[] | Error> = [[server('required')], new Error('offline'), [server('authorized')]]
    let calls = 0
    const list = async () => {
      const a = answers[Math.min(calls++, answers.length - 1)]
      if (a instanceof Error) throw a
      return a
    }
    expect(await waitForAuthorized(list, 'oa', { sleep: async () => {} })).toBe(true)
    expect(calls).toBe(3)
  })

  it('gives up at the deadline or on abort', async () => {
    const list = async () => [server('required')]
    expect(await waitForAuthorized(list, 'oa', { timeoutMs: 20, intervalMs: 5 })).toBe(false)
    const ac = new AbortController()
    ac.abort()
    expect(await waitForAuthorized(list, 'oa', { signal: ac.signal })).toBe(false)
  })
})
