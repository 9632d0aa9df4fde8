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
  /**
   * When the server declines on its own, on this client's clock (ms since epoch): from the
   * event's `deadline_ms` / `remaining_sec` (a re-sent request has less than `timeout_sec`
   * left); null when the server gives no timeout.
   */
  endsAt: number | null
  /** whether an approved call runs inside the kernel sandbox; null: an older server does not say */
  confined: boolean | null
  /**
   * What "approve for this chat" would allow later: null when it grants nothing beyond this
   * once (the button is not offered); undefined when an older server does not say.
   */
  grant: ApprovalGrant | null | undefined
  /** control files (hooks, configs that run code) the call could change */
  controlFiles: string[]
}

export type ApprovalGrant =
  | { scope: 'exact'; argv: string[] }
  | { scope: 'family'; program: string; prefix: string[]; rule: string }
  | { scope: 'tool'; tool: string }

export function grantOf(v: unknown): ApprovalGrant | null | undefined {
  if (v === undefined) return undefined
  if (!isObj(v)) return null
  if (v.scope === 'exact' && Array.isArray(v.argv)) return { scope: 'exact', argv: strs(v.argv) }
  if (v.scope === 'family' && typeof v.program === 'string') {
    return { scope: 'family', program: v.program, prefix: strs(v.prefix), rule: typeof v.rule === 'string' ? v.rule : '' }
  }
  if (v.scope === 'tool' && typeof v.tool === 'string') return { scope: 'tool', tool: v.tool }
  // A scope this client does not know: it cannot name what the grant covers, so it does not offer it.
  return null
}

/** An argv as the owner would type it: words with shell-special characters single-quoted. */
export function shellJoin(argv: string[]): string {
  return argv.map((w) => (/^[A-Za-z0-9_@%+=:,./-]+$/.test(w) ? w : `'${w.replace(/'/g, `'\\''`)}'`)).join(' ')
}

function strs(v: unknown): string[] {
  return Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : []
}

/**
 * The deadline on this client's clock. The server's `deadline_ms` is used when the two clocks
 * agree (within 1.5 s of what `remaining_sec` implies); otherwise `remaining_sec` counted from
 * arrival, which only loses the fraction of a second the server cut off.
 */
function endsAtOf(ev: Record<string, unknown>, now: number, timeoutSec: number): number | null {
  const remaining = typeof ev.remaining_sec === 'number' && ev.remaining_sec >= 0 ? ev.remaining_sec : null
  const deadline = typeof ev.deadline_ms === 'number' && ev.deadline_ms > 0 ? ev.deadline_ms : null
  if (remaining !== null) {
    const byRemaining = now + remaining * 1000
    if (deadline !== null && Math.abs(deadline - byRemaining) <= 1500) return deadline
    return byRemaining
  }
  if (deadline !== null) return deadline
  return timeoutSec ? now + timeoutSec * 1000 : null
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
    endsAt: endsAtOf(ev, now, typeof ev.timeout_sec === 'number' && ev.timeout_sec > 0 ? ev.timeout_sec : 0),
    confined: typeof ev.confined === 'boolean' ? ev.confined : null,
    grant: grantOf(ev.grant),
    controlFiles: strs(ev.control_files),
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

export function secondsLeft(a: Pick<Approval, 'endsAt'>, now: number): number | null {
  if (a.endsAt === null) return null
  return Math.max(0, Math.ceil((a.endsAt - now) / 1000))
}

/** Which title the dialog gives the request: what approving it actually lets happen. */
export function titleKind(a: Approval): 'outside' | 'sandboxed' | 'command' | 'tool' {
  const command = commandOf(a) !== null
  if (a.confined === false) return command || a.toolName === 'exec' ? 'outside' : 'tool'
  if (a.confined === true) return command ? 'sandboxed' : 'tool'
  // An older server: an escalation is outside; a plain command may or may not be.
  if (isEscalation(a)) return 'outside'
  return command ? 'command' : 'tool'
}

/** A piece of text to show: plain, or an invisible/control character spelled out. */
export interface Shown {
  text: string
  escaped: boolean
}

// C0 controls but tab and newline, DEL, C1 controls, bidi embeddings/overrides/isolates and
// marks, zero-width characters and the BOM: each can hide or reorder what a command does.
// eslint-disable-next-line no-control-regex -- finding control characters is the point
const HIDDEN = /[\u0000-\u0008\u000B-\u001F\u007F-\u009F\u061C\u200B-\u200F\u202A-\u202E\u2060-\u2069\uFEFF]/g

/** `text` split so that every hidden character shows as `\u{XXXX}` (or `\r`), marked. */
export function showHidden(text: string): Shown[] {
  const out: Shown[] = []
  let last = 0
  for (const m of text.matchAll(HIDDEN)) {
    const i = m.index ?? 0
    if (i > last) out.push({ text: text.slice(last, i), escaped: false })
    const c = m[0]
    const code = c.codePointAt(0) ?? 0
    out.push({ text: c === '\r' ? '\\r' : `\\u{${code.toString(16).toUpperCase().padStart(4, '0')}}`, escaped: true })
    last = i + c.length
  }
  if (last < text.length) out.push({ text: text.slice(last), escaped: false })
  return out
}

/** Lines of a command as shown (a trailing newline adds none). */
export function lineCount(text: string): number {
  return text.replace(/\n$/, '').split('\n').length
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
