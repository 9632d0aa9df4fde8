import { describe, expect, it } from 'vitest'
import { fromEvent, initialValues, parseForm, responseFrame, validate } from './elicitation'

// The schema as the server sends it (mcp::elicit::Form::to_schema).
const schema = {
  type: 'object',
  properties: {
    name: { type: 'string', title: 'Name', minLength: 2, maxLength: 5, default: 'Ann' },
    email: { type: 'string', format: 'email', maxLength: 10000 },
    when: { type: 'string', format: 'date' },
    age: { type: 'integer', minimum: 0, maximum: 150, default: 30 },
    score: { type: 'number', default: 95.5 },
    ok: { type: 'boolean', default: true },
    size: { type: 'string', oneOf: [{ const: 's', title: 'Small' }, { const: 'l', title: 'Large' }] },
    tags: { type: 'array', items: { anyOf: [{ const: 'x', title: 'X' }, { const: 'y', title: 'y' }] }, maxItems: 1 },
  },
  required: ['age', 'name'],
}

describe('schema -> form', () => {
  it('reads every field kind with labels and defaults', () => {
    const fields = parseForm(schema)!
    expect(fields.map((f) => [f.name, f.kind.type, f.required])).toEqual([
      ['name', 'text', true],
      ['email', 'text', false],
      ['when', 'text', false],
      ['age', 'number', true],
      ['score', 'number', false],
      ['ok', 'boolean', false],
      ['size', 'select', false],
      ['tags', 'multiselect', false],
    ])
    expect(fields[0].label).toBe('Name')
    expect(fields[1].label).toBe('email')
    expect(fields[6].kind).toEqual({ type: 'select', choices: [{ value: 's', title: 'Small' }, { value: 'l', title: 'Large' }] })
    expect(initialValues(fields)).toEqual({ name: 'Ann', email: '', when: '', age: '30', score: '95.5', ok: true, size: '', tags: [] })
  })

  it('refuses what it cannot show', () => {
    expect(parseForm(null)).toBeNull()
    expect(parseForm({ properties: { a: { type: 'object' } } })).toBeNull()
    expect(parseForm({ properties: { a: { type: 'string', oneOf: [] } } })).toBeNull()
    expect(fromEvent({ event: 'elicitation', chat_id: 'c', requested_schema: schema }, 0)).toBeNull()
    const ev = fromEvent({ event: 'elicitation', chat_id: 'c', id: 'el-1', server: 's', message: 'm', requested_schema: schema, timeout_sec: 5 }, 7)
    expect(ev && [ev.id, ev.chatId, ev.server, ev.timeoutSec, ev.receivedAt, ev.fields.length]).toEqual(['el-1', 'c', 's', 5, 7, 8])
  })
})

describe('validation', () => {
  const fields = parseForm(schema)!

  it('accepting the defaults sends them, typed; empty optional fields are left out', () => {
    const r = validate(fields, initialValues(fields))
    expect(r.errors).toEqual({})
    expect(r.content).toEqual({ name: 'Ann', age: 30, score: 95.5, ok: true })
  })

  it('reports each rule the server checks', () => {
    const base = initialValues(fields)
    const cases: [Record<string, unknown>, string, string][] = [
      [{ name: '' }, 'name', 'elicit.err.required'],
      [{ name: 'A' }, 'name', 'elicit.err.minLength'],
      [{ name: '😀😀😀😀😀😀' }, 'name', 'elicit.err.maxLength'],
      [{ age: '' }, 'age', 'elicit.err.required'],
      [{ age: 'x' }, 'age', 'elicit.err.number'],
      [{ age: '2.5' }, 'age', 'elicit.err.integer'],
      [{ age: '151' }, 'age', 'elicit.err.max'],
      [{ age: '-1' }, 'age', 'elicit.err.min'],
      [{ email: 'a@b' }, 'email', 'elicit.err.format'],
      [{ when: '2023-02-29' }, 'when', 'elicit.err.format'],
      [{ size: 'm' }, 'size', 'elicit.err.choice'],
      [{ tags: ['x', 'y'] }, 'tags', 'elicit.err.maxItems'],
    ]
    for (const [patch, name, key] of cases) {
      const r = validate(fields, { ...base, ...patch } as never)
      expect([name, r.errors[name]?.key], JSON.stringify(patch)).toEqual([name, key])
    }
    const ok = validate(fields, { ...base, name: '😀😀😀😀😀', email: 'a@b.io', when: '2024-02-29', size: 'l', tags: ['y'] })
    expect(ok.errors).toEqual({})
    expect(ok.content).toMatchObject({ name: '😀😀😀😀😀', email: 'a@b.io', when: '2024-02-29', size: 'l', tags: ['y'] })
  })

  it('builds the answer frame', () => {
    const f = { id: 'el-1', chatId: 'c' }
    expect(responseFrame(f, 'accept', { a: 1 })).toEqual({ type: 'elicitation_response', chat_id: 'c', id: 'el-1', action: 'accept', content: { a: 1 } })
    expect(responseFrame(f, 'decline')).toEqual({ type: 'elicitation_response', chat_id: 'c', id: 'el-1', action: 'decline' })
  })
})
