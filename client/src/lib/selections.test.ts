import { describe, expect, it } from 'vitest'
import {
  addSelection,
  buildMessageFrame,
  checkSend,
  closedPicker,
  dismissPicker,
  filterItems,
  findMentionTrigger,
  normaliseLabel,
  normaliseReceipts,
  pickerBack,
  removeSelection,
  SelectionError,
  skillLabel,
  mcpLabel,
  stripMention,
  syncPicker,
  toReceipts,
  wrapIndex,
  type Selection,
} from './selections'

const llm = { provider: 'openai_compatible' as const, model: 'fake-model' }

describe('selection rules', () => {
  it('dedupes by kind and id, keeping the first label', () => {
    let list = addSelection([], { kind: 'skill', id: 'weather', label: 'First' })
    list = addSelection(list, { kind: 'skill', id: 'weather', label: 'Second' })
    expect(list).toEqual([{ kind: 'skill', id: 'weather', label: 'First' }])
    // same id of the other kind is a different selection
    list = addSelection(list, { kind: 'mcp', id: 'weather' })
    expect(list).toHaveLength(2)
  })

  it('rejects bad ids with the kind in the message', () => {
    expect(() => addSelection([], { kind: 'skill', id: 'Bad Id' })).toThrow('Invalid Skill id')
    expect(() => addSelection([], { kind: 'mcp', id: 'has.dot' })).toThrow('Invalid MCP id')
    // dots are fine for skills, not for MCP servers
    expect(addSelection([], { kind: 'skill', id: 'a.b' })).toHaveLength(1)
    expect(() => addSelection([], { kind: 'skill', id: 'x'.repeat(65) })).toThrow(SelectionError)
  })

  it('caps the combined count at 8', () => {
    let list: Selection[] = []
    for (let i = 0; i < 4; i++) list = addSelection(list, { kind: 'skill', id: `s${i}` })
    for (let i = 0; i < 4; i++) list = addSelection(list, { kind: 'mcp', id: `m${i}` })
    expect(list).toHaveLength(8)
    expect(() => addSelection(list, { kind: 'skill', id: 'ninth' })).toThrow('At most 8 Skills or MCPs')
    // a duplicate at the limit is not an error
    expect(addSelection(list, { kind: 'skill', id: 's0' })).toHaveLength(8)
    expect(removeSelection(list, 'mcp', 'm0')).toHaveLength(7)
  })

  it('normalises labels: NUL removed, trimmed, empty omitted, >100 rejected', () => {
    expect(normaliseLabel(' a\u0000b ')).toBe('ab')
    expect(normaliseLabel('   ')).toBeUndefined()
    expect(normaliseLabel('x'.repeat(100))).toHaveLength(100)
    expect(() => normaliseLabel('x'.repeat(101))).toThrow()
    expect(addSelection([], { kind: 'skill', id: 'a', label: '  ' })).toEqual([{ kind: 'skill', id: 'a' }])
  })

  it('derives labels from display names', () => {
    expect(skillLabel({ name: 'web', display_name: '  ' })).toBe('web')
    expect(skillLabel({ name: 'web', display_name: ' Web Search ' })).toBe('Web Search')
    expect(mcpLabel({ name: 'files', display_name: '' })).toBe('files')
  })
})

describe('@ trigger', () => {
  it('triggers only at the start or after whitespace', () => {
    expect(findMentionTrigger('@', 1)).toEqual({ start: 0, query: '' })
    expect(findMentionTrigger('hi @we', 6)).toEqual({ start: 3, query: 'we' })
    expect(findMentionTrigger('line\n@x', 7)).toEqual({ start: 5, query: 'x' })
    expect(findMentionTrigger('a@b.com', 7)).toBeNull()
    expect(findMentionTrigger('@a b', 4)).toBeNull()
    expect(findMentionTrigger('@a@b', 4)).toBeNull()
    // caret inside the query
    expect(findMentionTrigger('x @abc', 4)).toEqual({ start: 2, query: 'a' })
  })

  it('strips @query and puts the caret where the @ was', () => {
    const text = 'ask @wea now'
    const t = findMentionTrigger(text, 8)!
    expect(stripMention(text, t)).toEqual({ text: 'ask  now', caret: 4 })
  })

  it('picker: Escape suppresses the same @, a new @ reopens, Back returns to category', () => {
    const t = { start: 3, query: '' }
    let p = syncPicker(closedPicker, t)
    expect(p.open).toBe(true)
    p = { ...p, level: 'skill', highlight: 2 }
    expect(pickerBack(p)).toMatchObject({ level: 'category', highlight: 0 })
    p = dismissPicker(p, t)
    expect(p.open).toBe(false)
    expect(syncPicker(p, { start: 3, query: 'ab' }).open).toBe(false)
    // the trigger disappears → suppression is cleared
    p = syncPicker(p, null)
    expect(p.suppressedAt).toBeNull()
    expect(syncPicker(p, { start: 3, query: '' }).open).toBe(true)
    // a different @ is not suppressed
    expect(syncPicker(dismissPicker(p, t), { start: 9, query: '' }).open).toBe(true)
  })

  it('filters case-insensitively over label, id and description; highlight wraps', () => {
    const items = [
      { id: 'weather', label: 'Weather', description: 'Forecasts' },
      { id: 'files', label: 'File tools', description: 'Read and WRITE files' },
    ]
    expect(filterItems(items, 'WEA').map((i) => i.id)).toEqual(['weather'])
    expect(filterItems(items, 'write').map((i) => i.id)).toEqual(['files'])
    expect(filterItems(items, 'tools').map((i) => i.id)).toEqual(['files'])
    expect(filterItems(items, '')).toHaveLength(2)
    expect(wrapIndex(0, -1, 3)).toBe(2)
    expect(wrapIndex(2, 1, 3)).toBe(0)
    expect(wrapIndex(0, 1, 0)).toBe(0)
  })
})

describe('message frame', () => {
  it('trims content, always has llm, omits empty lists', () => {
    const f = buildMessageFrame('c1', '  hello \n', llm, [])
    expect(f).toEqual({ type: 'message', chat_id: 'c1', content: 'hello', metadata: { llm } })
    expect('mentioned_skills' in f.metadata).toBe(false)
  })

  it('puts skills before MCPs and carries labels only when present', () => {
    const sel: Selection[] = [
      { kind: 'mcp', id: 'files', label: 'Files' },
      { kind: 'skill', id: 'web' },
    ]
    const f = buildMessageFrame('c1', 'x', llm, sel)
    expect(f.metadata.mentioned_skills).toEqual([{ name: 'web' }])
    expect(f.metadata.selected_mcp_connectors).toEqual([{ server: 'files', label: 'Files' }])
  })

  it('send needs a model and non-blank text; chips alone never send', () => {
    expect(checkSend('hi', null)).toEqual({ ok: false, reason: 'Choose an available model' })
    expect(checkSend('   ', llm)).toEqual({ ok: false, reason: 'Enter a message' })
    expect(checkSend(' hi ', llm)).toEqual({ ok: true, content: 'hi' })
  })

  it('the optimistic message receipts equal the frame receipts, and persisted ones normalise', () => {
    const sel: Selection[] = [{ kind: 'skill', id: 'web', label: 'Web' }]
    const f = buildMessageFrame('c', 'x', llm, sel)
    expect(toReceipts(sel)).toEqual({ mentioned_skills: f.metadata.mentioned_skills })
    expect(normaliseReceipts(f.metadata)).toEqual(sel)
  })

  it('normalises persisted receipts: drops bad ids and labels, dedupes, caps 8, skills first', () => {
    const many = Array.from({ length: 10 }, (_, i) => ({ server: `m${i}` }))
    const got = normaliseReceipts({
      mentioned_skills: [{ name: 'ok', label: 'x'.repeat(101) }, { name: 'BAD' }, { name: 'ok' }, 'nope', null],
      selected_mcp_connectors: many,
    })
    expect(got[0]).toEqual({ kind: 'skill', id: 'ok' })
    expect(got).toHaveLength(8)
    expect(got.filter((s) => s.kind === 'mcp')).toHaveLength(7)
    expect(normaliseReceipts({ mentioned_skills: 'junk' })).toEqual([])
  })
})
