import { describe, expect, it } from 'vitest'
import { historyMessages, initialState, reduce, type Action, type State } from './chatStore'
import type { HistoryMessage } from './types'

const run = (s: State, ...actions: Action[]) => actions.reduce(reduce, s)
const sessions: Action = { type: 'sessions', sessions: [{ chat_id: 'c1', title: 't', updated_at: '' }] }

const turn = (i: number, tool = false): HistoryMessage[] => [
  { role: 'user', content: `q${i}` },
  ...(tool
    ? [
        {
          role: 'tool_calls',
          content: '[TOOL_CALLS: read_file]',
          tool_calls: [{ call_id: `call_${i}`, tool_name: 'read_file', arguments: '{}' }],
        },
        { role: 'tool', content: `result ${i}`, call_id: `call_${i}`, tool_name: 'read_file' },
      ]
    : []),
  { role: 'assistant', content: `a${i}` },
]

describe('restored history', () => {
  it('puts a tool step on the answer that follows it, done with its result, like a live turn', () => {
    const m = historyMessages([...turn(1, true), { role: 'user', content: 'q2' }, ...turn(3).slice(1)])
    expect(m.map((x) => [x.role, x.content])).toEqual([
      ['user', 'q1'],
      ['assistant', 'a1'],
      ['user', 'q2'],
      ['assistant', 'a3'],
    ])
    expect(m[1].tools).toHaveLength(1)
    expect(m[1].tools?.[0]).toMatchObject({ callId: 'call_1', toolName: 'read_file', done: true, result: 'result 1' })
    expect(m[3].tools).toBeUndefined()
  })

  it('dates restored turns from their stored timestamp, and leaves undated ones alone', () => {
    const m = historyMessages([
      { role: 'user', content: 'q', timestamp: '2026-12-01 09:30' },
      { role: 'assistant', content: 'a', timestamp: 'not a time' },
    ])
    expect(m[0].at).toBe(new Date(2026, 11, 1, 9, 30).getTime())
    expect(m[1].at).toBeUndefined()
  })

  it('keeps a tool step whose turn ended without text, and a call whose result is missing', () => {
    const m = historyMessages([
      { role: 'user', content: 'q' },
      { role: 'tool_calls', content: '', tool_calls: [{ call_id: 'x', tool_name: 'exec' }, { call_id: 'y', tool_name: 'grep' }] },
      { role: 'tool', content: 'ok', call_id: 'x', tool_name: 'exec' },
      { role: 'user', content: 'next' },
    ])
    expect(m.map((x) => x.role)).toEqual(['user', 'assistant', 'user'])
    expect(m[1].tools?.map((t) => [t.toolName, t.done])).toEqual([
      ['exec', true],
      ['grep', false],
    ])
  })

  it('prepends older pages in order, rebuilding steps that straddle the page boundary', () => {
    const all = [...turn(0), ...turn(1, true), ...turn(2), ...turn(3, true)]
    // The newest page starts in the middle of turn 1's tool step.
    const cut = 4
    let s = run(initialState, sessions, { type: 'history', chatId: 'c1', messages: all.slice(cut), start: cut })
    expect(s.chats.c1.historyStart).toBe(cut)
    s = run(s, { type: 'sent', chatId: 'c1', content: 'live', selections: [] })
    s = run(s, { type: 'olderHistory', chatId: 'c1', messages: all.slice(0, cut), start: 0 })
    const m = s.chats.c1.messages
    expect(m.map((x) => x.content)).toEqual(['q0', 'a0', 'q1', 'a1', 'q2', 'a2', 'q3', 'a3', 'live'])
    expect(m[3].tools?.[0]).toMatchObject({ callId: 'call_1', done: true, result: 'result 1' })
    expect(s.chats.c1.historyStart).toBe(0)
    // A page that does not end where the loaded history starts is ignored (a stale answer).
    const again = run(s, { type: 'olderHistory', chatId: 'c1', messages: all.slice(0, 2), start: 0 })
    expect(again).toBe(s)
  })

  it('reloads when the server says the client is behind what it can replay', () => {
    let s = run(initialState, sessions, { type: 'history', chatId: 'c1', messages: turn(0), start: 0 })
    s = run(s, { type: 'ws', ev: { event: 'attached', chat_id: 'c1', last_seq: 5 } })
    expect(s.chats.c1.loaded).toBe(true)
    s = run(s, { type: 'ws', ev: { event: 'attached', chat_id: 'c1', last_seq: 5, reload: true } })
    expect(s.chats.c1.loaded).toBe(false)
    expect(s.chats.c1.messages).toEqual([])
  })
})
