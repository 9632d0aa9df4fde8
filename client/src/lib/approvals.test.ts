import { describe, expect, it } from 'vitest'
import { approvalFrame, approvalFromEvent, commandOf, isEscalation, lineCount, parsePolicy, parseSandbox, secondsLeft, shellJoin, showHidden, titleKind } from './approvals'

describe('approvals', () => {
  const ev = {
    event: 'approval_request',
    chat_id: 'c1',
    id: 'ap-1',
    tool_name: 'exec',
    arguments: { command: 'git push', sandbox_permissions: 'require_escalated', approved: true },
    justification: 'push the branch',
    grants: 'Approve once: …',
    working_dir: '/w',
    timeout_sec: 120,
  }

  it('reads the request and builds the answer for its chat and id only', () => {
    const a = approvalFromEvent(ev, 1000)!
    expect(a).toMatchObject({ id: 'ap-1', chatId: 'c1', toolName: 'exec', justification: 'push the branch', workingDir: '/w' })
    expect(commandOf(a)).toBe('git push')
    expect(isEscalation(a)).toBe(true)
    expect(approvalFrame(a, 'approve_for_chat')).toEqual({ type: 'approval_response', chat_id: 'c1', id: 'ap-1', decision: 'approve_for_chat' })
    expect(secondsLeft(a, 31_000)).toBe(90)
    expect(secondsLeft(a, 500_000)).toBe(0)
    expect(approvalFromEvent({ ...ev, id: 5 }, 0)).toBeNull()
    expect(approvalFromEvent({ ...ev, arguments: 'x', justification: null }, 0)).toMatchObject({ arguments: {}, justification: null })
  })

  it('counts down from the server deadline, also when re-sent with less time left', () => {
    const now = 1_700_000_000_000
    // The clocks agree: the deadline itself.
    const a = approvalFromEvent({ ...ev, deadline_ms: now + 12_400, remaining_sec: 12 }, now)!
    expect(a.endsAt).toBe(now + 12_400)
    expect(secondsLeft(a, now + 400)).toBe(12)
    // A client clock 1 h off: counted from arrival with the seconds left.
    const b = approvalFromEvent({ ...ev, deadline_ms: now + 3_600_000 + 13_000, remaining_sec: 13 }, now)!
    expect(b.endsAt).toBe(now + 13_000)
    // An older server: the whole timeout from arrival.
    expect(approvalFromEvent(ev, now)!.endsAt).toBe(now + 120_000)
    expect(approvalFromEvent({ ...ev, timeout_sec: 0 }, now)!.endsAt).toBeNull()
  })

  it('titles say where the call runs and what approve-for-chat covers', () => {
    const plain = { ...ev, arguments: { command: 'ls' } }
    expect(titleKind(approvalFromEvent({ ...plain, confined: true }, 0)!)).toBe('sandboxed')
    expect(titleKind(approvalFromEvent({ ...ev, confined: false }, 0)!)).toBe('outside')
    expect(titleKind(approvalFromEvent(plain, 0)!)).toBe('command')
    expect(titleKind(approvalFromEvent(ev, 0)!)).toBe('outside')
    expect(titleKind(approvalFromEvent({ ...ev, tool_name: 'write_file', arguments: {}, confined: true }, 0)!)).toBe('tool')
    expect(approvalFromEvent(ev, 0)!.grant).toBeUndefined()
    expect(approvalFromEvent({ ...ev, grant: null }, 0)!.grant).toBeNull()
    expect(approvalFromEvent({ ...ev, grant: { scope: 'exact', argv: ['git', 'push', 3] } }, 0)!.grant).toEqual({ scope: 'exact', argv: ['git', 'push'] })
    expect(approvalFromEvent({ ...ev, grant: { scope: 'family', program: 'git', prefix: ['push'], rule: 'git-push' } }, 0)!.grant).toMatchObject({ scope: 'family', program: 'git' })
    expect(approvalFromEvent({ ...ev, grant: { scope: 'tool', tool: 'write_file' } }, 0)!.grant).toEqual({ scope: 'tool', tool: 'write_file' })
    expect(approvalFromEvent({ ...ev, grant: { scope: 'tool' } }, 0)!.grant).toBeNull()
    expect(shellJoin(['git', 'commit', '-m', "it's done", ''])).toBe(`git commit -m 'it'\\''s done' ''`)
    expect(approvalFromEvent({ ...ev, grant: { scope: 'everything' } }, 0)!.grant).toBeNull()
    expect(approvalFromEvent({ ...ev, control_files: ['.git/hooks/pre-commit', 1] }, 0)!.controlFiles).toEqual(['.git/hooks/pre-commit'])
  })

  it('spells out control and bidi characters and counts lines', () => {
    const parts = showHidden('rm -rf \u202E/tmp\u0007\r\nok\tdone')
    expect(parts.map((p) => p.text).join('')).toBe('rm -rf \\u{202E}/tmp\\u{0007}\\r\nok\tdone')
    expect(parts.filter((p) => p.escaped).length).toBe(3)
    expect(showHidden('plain')).toEqual([{ text: 'plain', escaped: false }])
    expect(lineCount('a\nb\nc\n')).toBe(3)
    expect(lineCount(Array.from({ length: 29 }, (_, i) => `echo ${i}`).join('\n'))).toBe(29)
  })

  it('parses the policy and the sandbox status defensively', () => {
    expect(parsePolicy({ tools: { exec: 'ask', x: 'maybe' }, mcp_servers: { s: 'deny' } })).toEqual({ tools: { exec: 'ask' }, mcp_servers: { s: 'deny' } })
    expect(parsePolicy(null)).toEqual({ tools: {}, mcp_servers: {} })
    expect(parseSandbox({ detail: 'Not Found' })).toBeNull()
    const s = parseSandbox({ available: true, active: true, landlock: { active: true, abi: 7 }, seccomp: { active: true }, no_new_privs: true, non_dumpable: true, network: 'off', read_roots: ['/usr', 3], write_roots: ['/w'], reason: null })!
    expect(s.landlock.abi).toBe(7)
    expect(s.readRoots).toEqual(['/usr'])
    expect(s.reason).toBeNull()
  })
})
