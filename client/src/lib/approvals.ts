// Approvals (server `approval_request` / `approval_end` events, docs/ws-protocol.md §4.1) and the
// Safety settings (`/api/settings/approvals`, `/api/settings/sandbox`): what the dialog shows
// and the frames it sends. The server alone decides; the client only relays the owner's answer
// for one request id of one chat. Pure functions.

export type ApprovalDecision = 'approve' | 'approve_for_chat' | 'deny'

/** One tool call waiting for the owner, as the `approval_request` event announced it. */
export interface Approval {
  id: string
  chatId: string
  toolName: string
  arguments: Record<string, unknown>
  justification: string | null
  grants: string
  workingDir: string
  timeoutSec: number
  /** when the event arrived (ms since epoch), for the countdown */
  receivedAt: number
}

function isObj(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

/** The request in an `approval_request` event, or null when it is malformed. */
export function approvalFromEvent(ev: Record<string, unknown>, now: number): Approval | null {
  const { id, chat_id, tool_name, grants } = ev
  if (typeof id !== 'string' || typeof chat_id !== 'string' || typeof tool_name !== 'string') return null
  return {
    id,
    chatId: chat_id,
    toolName: tool_name,
    arguments: isObj(ev.arguments) ? ev.arguments : {},
    justification: typeof ev.justification === 'string' && ev.justification ? ev.justification : null,
    grants: typeof grants === 'string' ? grants : '',
    workingDir: typeof ev.working_dir === 'string' ? ev.working_dir : '',
    timeoutSec: typeof ev.timeout_sec === 'number' && ev.timeout_sec > 0 ? ev.timeout_sec : 0,
    receivedAt: now,
  }
}

/** The shell command of an `exec` request, if it has one. */
export function commandOf(a: Approval): string | null {
  return typeof a.arguments.command === 'string' ? a.arguments.command : null
}

/** Whether the model asked to leave the sandbox. */
export function isEscalation(a: Approval): boolean {
  return a.arguments.sandbox_permissions === 'require_escalated'
}

/** The answer frame. */
export function approvalFrame(a: Pick<Approval, 'id' | 'chatId'>, decision: ApprovalDecision): Record<string, unknown> {
  return { type: 'approval_response', chat_id: a.chatId, id: a.id, decision }
}

export function secondsLeft(a: Approval, now: number): number | null {
  if (!a.timeoutSec) return null
  return Math.max(0, Math.ceil(a.timeoutSec - (now - a.receivedAt) / 1000))
}

// ---- Safety settings ----

export type Mode = 'auto' | 'ask' | 'deny'
export const MODES: readonly Mode[] = ['auto', 'ask', 'deny']

export interface ApprovalPolicy {
  tools: Record<string, Mode>
  mcp_servers: Record<string, Mode>
}

function modes(v: unknown): Record<string, Mode> {
  const out: Record<string, Mode> = {}
  if (!isObj(v)) return out
  for (const [k, m] of Object.entries(v)) if (MODES.includes(m as Mode)) out[k] = m as Mode
  return out
}

export function parsePolicy(v: unknown): ApprovalPolicy {
  return isObj(v) ? { tools: modes(v.tools), mcp_servers: modes(v.mcp_servers) } : { tools: {}, mcp_servers: {} }
}

/** The kernel sandbox as the server reports it; `null`: the server does not say (unknown). */
export interface SandboxStatus {
  available: boolean
  active: boolean
  landlock: { active: boolean; abi: number | null }
  seccomp: { active: boolean }
  noNewPrivs: boolean
  nonDumpable: boolean
  network: 'off' | 'on'
  readRoots: string[]
  writeRoots: string[]
  reason: string | null
}

function strings(v: unknown): string[] {
  return Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : []
}

export function parseSandbox(v: unknown): SandboxStatus | null {
  if (!isObj(v) || typeof v.active !== 'boolean') return null
  const ll = isObj(v.landlock) ? v.landlock : {}
  const sc = isObj(v.seccomp) ? v.seccomp : {}
  return {
    available: v.available === true,
    active: v.active,
    landlock: { active: ll.active === true, abi: typeof ll.abi === 'number' ? ll.abi : null },
    seccomp: { active: sc.active === true },
    noNewPrivs: v.no_new_privs === true,
    nonDumpable: v.non_dumpable === true,
    network: v.network === 'on' ? 'on' : 'off',
    readRoots: strings(v.read_roots),
    writeRoots: strings(v.write_roots),
    reason: typeof v.reason === 'string' && v.reason ? v.reason : null,
  }
}
