import { describe, expect, it } from 'vitest'
import { buildMcpBody, formFromServer, MASK, renameHeader, validateMcpForm, type McpForm } from './mcpForm'

const base: McpForm = { type: 'sse', name: 'weather', display_name: 'Weather', url: 'http://127.0.0.1:9/sse', description: '', headers: [] }

describe('MCP form', () => {
  it('validates name, title, url, description', () => {
    expect(validateMcpForm(base, false)).toEqual({})
    expect(validateMcpForm({ ...base, name: 'Bad.Name' }, false).name).toBeDefined()
    // the name is read-only when editing
    expect(validateMcpForm({ ...base, name: 'Bad.Name' }, true).name).toBeUndefined()
    expect(validateMcpForm({ ...base, display_name: ' ' }, false).display_name).toBeDefined()
    expect(validateMcpForm({ ...base, url: 'file:///x' }, false).url).toBeDefined()
    expect(validateMcpForm({ ...base, description: 'x'.repeat(1001) }, false).description).toBeDefined()
  })

  it('header rules: token names, unique ignoring case, non-empty values without newlines', () => {
    const h = (name: string, value: string) => ({ key: name, name, value, storedName: null })
    expect(validateMcpForm({ ...base, headers: [h('X-Key', 'v')] }, false)).toEqual({})
    expect(validateMcpForm({ ...base, headers: [h('bad name', 'v')] }, false).headers).toMatch(/Invalid header/)
    expect(validateMcpForm({ ...base, headers: [h('A', '1'), h('a', '2')] }, false).headers).toMatch(/Duplicate/)
    expect(validateMcpForm({ ...base, headers: [h('A', '')] }, false).headers).toBeDefined()
    expect(validateMcpForm({ ...base, headers: [h('A', 'x\ny')] }, false).headers).toMatch(/newlines/)
    const many = Array.from({ length: 33 }, (_, i) => h(`h${i}`, 'v'))
    expect(validateMcpForm({ ...base, headers: many }, false).headers).toMatch(/32/)
  })

  it('masked values: kept when unchanged, cleared when the header is renamed', () => {
    const form = formFromServer({ ...base, headers: { Authorization: MASK } })
    expect(form.headers[0]).toMatchObject({ name: 'Authorization', value: MASK, storedName: 'Authorization' })
    expect(validateMcpForm(form, true)).toEqual({})
    expect(buildMcpBody(form, true)).toEqual({
      type: 'sse',
      display_name: 'Weather',
      description: '',
      url: 'http://127.0.0.1:9/sse',
      headers: { Authorization: MASK },
    })
    const renamed = renameHeader(form.headers[0], 'X-Auth')
    expect(renamed.value).toBe('')
    // a new row typed as the mask has no stored secret
    expect(validateMcpForm({ ...base, headers: [{ key: 'n', name: 'A', value: MASK, storedName: null }] }, false).headers).toBeDefined()
    expect(buildMcpBody(base, false).name).toBe('weather')
  })

  it('keeps the transport: SSE by default, Streamable HTTP when chosen or stored', () => {
    expect(formFromServer({ ...base, type: 'streamable_http', headers: {} }).type).toBe('streamable_http')
    expect(formFromServer({ ...base, type: 'sse', headers: {} }).type).toBe('sse')
    expect(formFromServer({ ...base, headers: {} }).type).toBe('sse')
    expect(buildMcpBody({ ...base, type: 'streamable_http' }, false).type).toBe('streamable_http')
  })
})
