import { describe, expect, it } from 'vitest'
import { attachFrame, initialState, reattachPlan, reduce, type Action, type ServerEvent, type State } from './chatStore'

const ws = (ev: ServerEvent): Action => ({ type: 'ws', ev })
const run = (s: State, ...actions: Action[]) => actions.reduce(reduce, s)
const msgs = (s: State, id = 'c1') => s.chats[id]?.messages ?? []

function started(): State {
  return run(
    initialState,
    ws({ event: 'ready', chat_id: 'c1', client_id: 'client-1' }),
    { type: 'sent', chatId: 'c1', content: 'hi', selections: [] },
  )
}

describe('WS event reducer', () => {
  it("words a stored budget stop from its code, and keeps an unknown one's text", () => {
    const history = (note: unknown) =>
      run(initialState, ws({ event: 'ready', chat_id: 'c1', client_id: 'x' }), {
        type: 'history',
        chatId: 'c1',
        messages: [
          { role: 'user', content: 'hi' },
          { role: 'assistant', content: '[Budget reached: English text]', note },
        ],
      })
    const coded = history({ code: 'budget_reached', params: { budget: 'chat', tokens: 1200, cap_tokens: 1000 } })
    expect(msgs(coded)[1].content).toMatch(/^\[Budget reached: this chat's budget \(1,200 of 1,000 tokens\)\./)
    expect(msgs(history({ code: 'from_a_newer_server' }))[1].content).toBe('[Budget reached: English text]')
  })

  it("ties this tab's message to its turn, and shows a message sent elsewhere once", () => {
    let s = started()
    s = run(s, ws({ event: 'turn_started', chat_id: 'c1', stream_id: 7, message: 'hi' }))
    expect(msgs(s).map((m) => [m.role, m.content, m.streamId, m.awaitsTurn])).toEqual([['user', 'hi', 7, undefined]])
    s = run(s, ws({ event: 'delta', chat_id: 'c1', text: 'A', seq: 1 }), ws({ event: 'done', chat_id: 'c1', duration_sec: 1, seq: 2 }))
    expect(s.generating.c1).toBeFalsy()
    // Another tab (or this one before a reload) sent the next message: it appears, the chat runs.
    const other = ws({ event: 'turn_started', chat_id: 'c1', stream_id: 8, message: 'from elsewhere' })
    s = run(s, other)
    expect(msgs(s).map((m) => [m.role, m.content])).toEqual([['user', 'hi'], ['assistant', 'A'], ['user', 'from elsewhere']])
    expect(s.generating.c1).toBe(true)
    // A replay of the same turn adds nothing.
    expect(run(s, other)).toBe(s)
  })

  it('attaches a chat whose turn runs (after a reload) from the turn start the list names', () => {
    let s = run(initialState, { type: 'sessions', sessions: [{ chat_id: 'r1', title: 't', updated_at: '', turn_seq: 41 }] })
    expect(attachFrame(s, 'r1')).toEqual({ chat_id: 'r1', after_seq: 41 })
    s = run(initialState, { type: 'sessions', sessions: [{ chat_id: 'r1', title: 't', updated_at: '' }] })
    expect(attachFrame(s, 'r1')).toEqual({ chat_id: 'r1' })
  })

  it('adopts the ready draft only when nothing is active', () => {
    let s = run(initialState, ws({ event: 'ready', chat_id: 'd1' }))
    expect(s.activeChatId).toBe('d1')
    expect(s.chats.d1.loaded).toBe(true)
    s = run(s, ws({ event: 'ready', chat_id: 'd2' }))
    expect(s.activeChatId).toBe('d1')
    // a reconnect forgets a new_chat that the old connection never answered
    s = run(s, { type: 'newChatRequested' }, ws({ event: 'ready', chat_id: 'd3' }))
    expect(s.awaitingNewChat).toBe(false)
  })

  it('puts done.duration_sec on the turn\'s answer and stamps live messages', () => {
    let s = started()
    s = run(s, ws({ event: 'delta', chat_id: 'c1', text: 'A', seq: 1 }), ws({ event: 'done', chat_id: 'c1', duration_sec: 2.5, seq: 2 }))
    expect(msgs(s).map((m) => m.durationSec)).toEqual([undefined, 2.5])
    expect(msgs(s).every((m) => typeof m.at === 'number')).toBe(true)
    // a turn that produced no answer leaves the previous answer's duration alone
    s = run(s, { type: 'sent', chatId: 'c1', content: 'again', selections: [] }, ws({ event: 'done', chat_id: 'c1', duration_sec: 9, seq: 3 }))
    expect(msgs(s).map((m) => m.durationSec)).toEqual([undefined, 2.5, undefined])
  })

  it("adds each model call's usage to the turn's answer and keeps the chat's context fill", () => {
    const usage = (input: number, output: number) =>
      ws({ event: 'usage', chat_id: 'c1', input_tokens: input, cached_input_tokens: 0, output_tokens: output, reasoning_tokens: 0, context_tokens: input + output, context_window: 1000 })
    let s = started()
    s = run(s, ws({ event: 'delta', chat_id: 'c1', text: 'A', seq: 1 }), usage(10, 5), usage(30, 7))
    expect(msgs(s)[1].usage).toEqual({ input: 40, cached: 0, output: 12, reasoning: 0 })
    expect(s.chats.c1.context).toEqual({ tokens: 37, window: 1000 })
    // a malformed one changes nothing; a budget warning is a notice in the client's words
    expect(run(s, ws({ event: 'usage', chat_id: 'c1', input_tokens: 'x' }))).toBe(s)
    s = run(s, ws({ event: 'budget_warning', chat_id: 'c1', budget: 'chat', tokens: 850, cap_tokens: 1000, seq: 2 }))
    const notice = msgs(s)[msgs(s).length - 1]
    expect([notice.role, notice.textKey, notice.textParams]).toEqual(['notice', 'usage.warnChat', { used: '850', cap: '1K' }])
  })

  it('streams deltas into one assistant message and finalises on stream_end/done', () => {
    let s = started()
    expect(s.generating.c1).toBe(true)
    s = run(
      s,
      ws({ event: 'delta', chat_id: 'c1', text: 'Hel', seq: 1 }),
      ws({ event: 'delta', chat_id: 'c1', text: 'lo', seq: 2 }),
    )
    expect(msgs(s).map((m) => [m.role, m.content, m.streaming])).toEqual([
      ['user', 'hi', undefined],
      ['assistant', 'Hello', true],
    ])
    s = run(s, ws({ event: 'stream_end', chat_id: 'c1', seq: 3 }))
    expect(msgs(s)[1].streaming).toBe(false)
    expect(s.generating.c1).toBe(true)
    s = run(s, ws({ event: 'done', chat_id: 'c1', duration_sec: 0.1, seq: 4 }))
    expect(s.generating.c1).toBeUndefined()
  })

  it('ignores replayed events at or below the last seq (no duplicates after re-attach)', () => {
    let s = run(started(), ws({ event: 'delta', chat_id: 'c1', text: 'A', seq: 1 }), ws({ event: 'delta', chat_id: 'c1', text: 'B', seq: 2 }))
    s = run(
      s,
      { type: 'attaching', chatId: 'c1', replay: true },
      ws({ event: 'attached', chat_id: 'c1', last_seq: 3 }),
      ws({ event: 'delta', chat_id: 'c1', text: 'A', seq: 1 }),
      ws({ event: 'delta', chat_id: 'c1', text: 'B', seq: 2 }),
      ws({ event: 'delta', chat_id: 'c1', text: 'C', seq: 3 }),
    )
    expect(msgs(s)[1].content).toBe('ABC')
    expect(s.chats.c1.lastSeq).toBe(3)
  })

  it('a skipped seq (replay buffer overflow) reloads the persisted transcript when the turn ends', () => {
    let s = run(initialState, { type: 'sessions', sessions: [{ chat_id: 'a', title: 'A', updated_at: '' }] })
    s = run(
      s,
      ws({ event: 'attached', chat_id: 'a', last_seq: 0 }),
      { type: 'history', chatId: 'a', messages: [] },
      { type: 'sent', chatId: 'a', content: 'q', selections: [] },
      ws({ event: 'delta', chat_id: 'a', text: 'A', seq: 1 }),
      ws({ event: 'delta', chat_id: 'a', text: 'C', seq: 3 }),
    )
    expect(msgs(s, 'a')[1].content).toBe('AC')
    expect(s.chats.a.gap).toBe(true)
    s = run(s, ws({ event: 'stream_end', chat_id: 'a', seq: 4 }), ws({ event: 'done', chat_id: 'a', seq: 5 }))
    expect(s.chats.a).toMatchObject({ loaded: false, lastSeq: 5, messages: [] })
    expect(s.chats.a.gap).toBeUndefined()
    expect(s.generating.a).toBeUndefined()
  })

  it('a first attach takes last_seq as the baseline; a smaller one after a restart reloads', () => {
    let s = run(initialState, { type: 'sessions', sessions: [{ chat_id: 'old', title: 't', updated_at: '' }] })
    s = run(s, ws({ event: 'attached', chat_id: 'old', last_seq: 40 }))
    expect(s.chats.old.lastSeq).toBe(40)
    s = run(s, ws({ event: 'delta', chat_id: 'old', text: 'stale', seq: 39 }))
    expect(msgs(s, 'old')).toHaveLength(0)
    s = run(
      s,
      { type: 'sent', chatId: 'old', content: 'q', selections: [] },
      { type: 'attaching', chatId: 'old', replay: true },
      ws({ event: 'attached', chat_id: 'old', last_seq: 0 }),
    )
    expect(s.chats.old).toMatchObject({ loaded: false, lastSeq: 0, messages: [] })
    expect(s.generating.old).toBeUndefined()
  })

  it('an idle chat that missed events while unsubscribed reloads its history; an unchanged one keeps it', () => {
    let s = run(initialState, { type: 'sessions', sessions: [{ chat_id: 'a', title: 'A', updated_at: '' }] })
    s = run(
      s,
      ws({ event: 'attached', chat_id: 'a', last_seq: 4 }),
      { type: 'history', chatId: 'a', messages: [{ role: 'user', content: 'q' }] },
    )
    const same = run(s, { type: 'attaching', chatId: 'a', replay: false }, ws({ event: 'attached', chat_id: 'a', last_seq: 4 }))
    expect(msgs(same, 'a')).toHaveLength(1)
    const missed = run(s, { type: 'attaching', chatId: 'a', replay: false }, ws({ event: 'attached', chat_id: 'a', last_seq: 9 }))
    expect(missed.chats.a).toMatchObject({ loaded: false, lastSeq: 9, messages: [] })
  })

  it('matches tool results by call_id and keeps blocks before the text', () => {
    let s = run(
      started(),
      ws({ event: 'tool_call', chat_id: 'c1', tool_name: 'save_memory', stream_id: 7, call_id: 'a' }),
      ws({ event: 'tool_call', chat_id: 'c1', tool_name: 'save_memory', stream_id: 7, call_id: 'b' }),
      ws({ event: 'tool_result', chat_id: 'c1', tool_name: 'save_memory', stream_id: 7, call_id: 'b', result: 'second' }),
    )
    let tools = msgs(s)[1].tools!
    expect(tools.map((t) => [t.callId, t.done, t.result])).toEqual([
      ['a', false, undefined],
      ['b', true, 'second'],
    ])
    s = run(s, ws({ event: 'delta', chat_id: 'c1', text: 'ok' }))
    expect(msgs(s)).toHaveLength(2)
    expect(msgs(s)[1].content).toBe('ok')
    tools = msgs(s)[1].tools!
    expect(tools).toHaveLength(2)
  })

  it('without call_id resolves the oldest pending block of the same stream and tool', () => {
    const s = run(
      started(),
      ws({ event: 'tool_call', chat_id: 'c1', tool_name: 'x', stream_id: 1 }),
      ws({ event: 'tool_call', chat_id: 'c1', tool_name: 'x', stream_id: 1 }),
      ws({ event: 'tool_result', chat_id: 'c1', tool_name: 'x', stream_id: 1, result: 'r1' }),
    )
    expect(msgs(s)[1].tools!.map((t) => t.done)).toEqual([true, false])
  })

  it('a turn error shows inline, finalises streaming and clears only that chat', () => {
    let s = run(started(), { type: 'sent', chatId: 'c2', content: 'other', selections: [] })
    s = run(s, ws({ event: 'delta', chat_id: 'c1', text: 'part' }), ws({ event: 'error', chat_id: 'c1', detail: 'boom' }))
    expect(msgs(s).map((m) => m.role)).toEqual(['user', 'assistant', 'notice'])
    expect(msgs(s)[1].streaming).toBe(false)
    expect(msgs(s)[2]).toMatchObject({ tone: 'error', content: 'boom' })
    expect(s.generating).toEqual({ c2: true })
    expect(s.banner).toBeNull()
    // an error in a chat that is not open also reaches the banner
    s = run(s, ws({ event: 'error', chat_id: 'c2', detail: 'LLM down' }))
    expect(s.banner).toBe('Another chat: LLM down')
    expect(s.generating).toEqual({})
  })

  it('cancel ending with error "cancelled" shows a muted stop notice', () => {
    const s = run(started(), ws({ event: 'error', chat_id: 'c1', detail: 'cancelled' }))
    expect(msgs(s)[1]).toMatchObject({ role: 'notice', tone: 'muted', content: 'Generation stopped' })
    expect(s.generating.c1).toBeUndefined()
  })

  it('a connection-level error goes to the banner', () => {
    const s = run(initialState, ws({ event: 'error', detail: 'typed JSON envelope required' }))
    expect(s.banner).toBe('typed JSON envelope required')
  })

  it('session_updated upserts at the top and marks a new chat loaded', () => {
    let s = run(initialState, { type: 'sessions', sessions: [{ chat_id: 'a', title: 'A', updated_at: '1' }] })
    s = run(s, ws({ event: 'session_updated', chat_id: 'b', title: 'B', updated_at: '2' }))
    expect(s.sessions.map((x) => x.chat_id)).toEqual(['b', 'a'])
    expect(s.chats.b.loaded).toBe(true)
    s = run(s, ws({ event: 'session_updated', chat_id: 'a', title: 'A2', updated_at: '3' }))
    expect(s.sessions.map((x) => x.title)).toEqual(['A2', 'B'])
  })

  it('a project new_chat the server refuses lets the app open a chat again; a bound chat keeps its project', () => {
    let s = run(initialState, ws({ event: 'ready', chat_id: 'd1' }), { type: 'newChatRequested', project: '/p' })
    expect(s.awaitingNewChat).toBe(true)
    s = run(s, ws({ event: 'error', detail: '/p is not under an allowed project root' }))
    expect([s.awaitingNewChat, s.banner]).toEqual([false, '/p is not under an allowed project root'])
    // A plain new_chat is not given up on a chat-less error (it cannot be refused).
    s = run(s, { type: 'newChatRequested' }, ws({ event: 'error', detail: 'unknown approval id' }))
    expect(s.awaitingNewChat).toBe(true)
    s = run(
      s,
      { type: 'sessions', sessions: [{ chat_id: 'b', title: '新对话', updated_at: '2026-12-03T10:00:00', project: '/p/app' }] },
      ws({ event: 'session_updated', chat_id: 'b', title: 'Fix it', updated_at: '2026-12-03T10:01:00+00:00', seq: 1 }),
    )
    expect(s.sessions[0]).toEqual({ chat_id: 'b', title: 'Fix it', updated_at: '2026-12-03T10:01:00+00:00', project: '/p/app' })
  })

  it('new_chat: the next attached becomes active; a plain attached does not steal focus', () => {
    let s = run(initialState, ws({ event: 'ready', chat_id: 'd' }))
    s = run(s, ws({ event: 'attached', chat_id: 'bg', last_seq: 0 }))
    expect(s.activeChatId).toBe('d')
    s = run(s, { type: 'newChatRequested' }, ws({ event: 'attached', chat_id: 'n', last_seq: 0 }))
    expect(s.activeChatId).toBe('n')
    expect(s.awaitingNewChat).toBe(false)
    expect(s.chats.n.loaded).toBe(true)
  })

  it('new_chat: the answer to an attach still in flight does not take the new chat\'s place', () => {
    let s = run(initialState, ws({ event: 'ready', chat_id: 'd' }), { type: 'select', chatId: 'old' })
    s = run(s, { type: 'attaching', chatId: 'old', replay: false }, { type: 'newChatRequested' })
    s = run(s, ws({ event: 'attached', chat_id: 'old', last_seq: 7 }))
    expect(s.activeChatId).toBe('old')
    expect(s.awaitingNewChat).toBe(true)
    s = run(s, ws({ event: 'attached', chat_id: 'n', last_seq: 0 }))
    expect(s.activeChatId).toBe('n')
    expect(s.awaitingNewChat).toBe(false)
    // answered, `old` is an ordinary chat again: a later attached of it is no new chat either
    expect(s.chats.old.attaching).toBe(false)
  })

  it('history loads receipts and keeps live messages after it; delete falls back to the first session', () => {
    let s = run(initialState, {
      type: 'sessions',
      sessions: [
        { chat_id: 'a', title: 'A', updated_at: '' },
        { chat_id: 'b', title: 'B', updated_at: '' },
      ],
    })
    expect(s.activeChatId).toBe('a')
    s = run(s, ws({ event: 'delta', chat_id: 'a', text: 'live' }))
    s = run(s, {
      type: 'history',
      chatId: 'a',
      messages: [
        { role: 'user', content: 'q', mentioned_skills: [{ name: 'web', label: 'Web' }] },
        { role: 'assistant', content: 'ans' },
      ],
    })
    expect(msgs(s, 'a').map((m) => m.content)).toEqual(['q', 'ans', 'live'])
    expect(msgs(s, 'a')[0].selections).toEqual([{ kind: 'skill', id: 'web', label: 'Web' }])
    s = run(s, { type: 'deleted', chatId: 'a' })
    expect(s.activeChatId).toBe('b')
    expect(s.chats.a).toBeUndefined()
  })

  it('renders a non-streamed message event as assistant text', () => {
    const s = run(started(), ws({ event: 'message', chat_id: 'c1', text: 'whole' }))
    expect(msgs(s)[1]).toMatchObject({ role: 'assistant', content: 'whole' })
  })

  it('ignores unknown events and events without chat ids', () => {
    const s = started()
    expect(run(s, ws({ event: 'bogus', chat_id: 'c1' }))).toBe(s)
    expect(run(s, ws({ event: 'delta', text: 'x' }))).toBe(s)
    expect(run(s, ws({ event: 'pong' }))).toBe(s)
  })

  it('reattach plan covers the open chat and running turns with their last seq', () => {
    let s = run(started(), ws({ event: 'delta', chat_id: 'c1', text: 'x', seq: 5 }))
    s = run(s, { type: 'sent', chatId: 'bg', content: 'y', selections: [] })
    expect(reattachPlan(s)).toEqual([
      { chat_id: 'c1', after_seq: 5 },
      { chat_id: 'bg', after_seq: 0 },
    ])
    const idle = run(initialState, { type: 'sessions', sessions: [{ chat_id: 'z', title: '', updated_at: '' }] })
    expect(reattachPlan(idle)).toEqual([{ chat_id: 'z' }])
  })
})

describe('elicitation forms', () => {
  const form = (id: string, seq: number): Action => ws({
    event: 'elicitation',
    chat_id: 'c1',
    id,
    server: 'forms',
    message: 'Who?',
    requested_schema: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] },
    timeout_sec: 120,
    seq,
  })

  it('opens on the event, ignores a replayed duplicate, closes on elicitation_end', () => {
    let s = run(started(), form('el-1', 1), form('el-1', 1), form('el-2', 2))
    expect(s.elicitations.c1.map((f) => f.id)).toEqual(['el-1', 'el-2'])
    expect(s.elicitations.c1[0].fields[0]).toMatchObject({ name: 'name', required: true })
    expect(s.generating.c1).toBe(true)
    s = run(s, ws({ event: 'elicitation_end', chat_id: 'c1', id: 'el-1', action: 'accept', seq: 3 }))
    expect(s.elicitations.c1.map((f) => f.id)).toEqual(['el-2'])
    // The turn's end closes whatever is left; the transcript is untouched by forms.
    s = run(s, ws({ event: 'done', chat_id: 'c1', duration_sec: 1, seq: 4 }))
    expect(s.elicitations.c1).toBeUndefined()
    expect(msgs(s).map((m) => m.role)).toEqual(['user'])
  })

  it('a turn error closes the forms; a malformed event opens nothing', () => {
    let s = run(started(), form('el-1', 1), ws({ event: 'error', chat_id: 'c1', detail: 'cancelled', seq: 2 }))
    expect(s.elicitations.c1).toBeUndefined()
    s = run(started(), ws({ event: 'elicitation', chat_id: 'c1', id: 'el-3', requested_schema: { properties: { a: { type: 'object' } } } }))
    expect(s.elicitations).toEqual({})
  })
})

describe('approval requests', () => {
  const req = (id: string, seq?: number): ServerEvent => ({
    event: 'approval_request',
    chat_id: 'c1',
    id,
    tool_name: 'exec',
    arguments: { command: 'git push' },
    justification: null,
    grants: 'Approve once: …',
    working_dir: '/w',
    timeout_sec: 120,
    ...(seq === undefined ? {} : { seq }),
  })

  it('opens on the event, is replaced when sent again on attach, closes on approval_end or the turn end', () => {
    let s = run(started(), ws(req('ap-1', 2)), ws(req('ap-2', 3)))
    expect(s.approvals.c1.map((a) => a.id)).toEqual(['ap-1', 'ap-2'])
    // The re-send after `attach` carries no seq: the same id, not a second request.
    s = run(s, ws(req('ap-1')))
    expect(s.approvals.c1.map((a) => a.id)).toEqual(['ap-2', 'ap-1'])
    s = run(s, ws({ event: 'approval_end', chat_id: 'c1', id: 'ap-1', decision: 'deny', seq: 4 }))
    expect(s.approvals.c1.map((a) => a.id)).toEqual(['ap-2'])
    s = run(s, ws({ event: 'done', chat_id: 'c1', duration_sec: 1, seq: 5 }))
    expect(s.approvals.c1).toBeUndefined()
    // A malformed request (an id that is not a string) is not shown.
    s = run(started(), ws({ ...req('ap-3', 2), id: 7 }))
    expect(s.approvals.c1).toBeUndefined()
  })
})

describe('reasoning (thinking models)', () => {
  it('streams reasoning beside the answer, never into it, and stops its clock at the answer', () => {
    let s = started()
    s = run(
      s,
      ws({ event: 'reasoning', chat_id: 'c1', text: 'Let me ', stream_id: 1, seq: 1 }),
      ws({ event: 'reasoning', chat_id: 'c1', text: 'think.', stream_id: 1, seq: 2 }),
      ws({ event: 'delta', chat_id: 'c1', text: 'Answer', stream_id: 1, seq: 3 }),
      ws({ event: 'stream_end', chat_id: 'c1', stream_id: 1, seq: 4 }),
      ws({ event: 'done', chat_id: 'c1', duration_sec: 1, seq: 5 }),
    )
    const answer = msgs(s)[1]
    expect(answer.content).toBe('Answer')
    expect(answer.reasoning).toBe('Let me think.')
    expect(answer.reasoningSince).toBeUndefined()
    expect(typeof answer.reasoningMs).toBe('number')
  })

  it('keeps the reasoning and its duration from history after a reload', () => {
    const s = reduce(initialState, {
      type: 'history',
      chatId: 'c1',
      messages: [
        { role: 'user', content: 'q' },
        { role: 'assistant', content: 'a', reasoning_content: 'because', reasoning_ms: 2300 },
      ],
    } as unknown as Action)
    const answer = msgs(s)[1]
    expect(answer).toMatchObject({ content: 'a', reasoning: 'because', reasoningMs: 2300 })
  })
})
