import { describe, expect, it } from 'vitest'
import { approvalFrame, approvalFromEvent, commandOf, isEscalation, parsePolicy, parseSandbox, secondsLeft } from './approvals'

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
