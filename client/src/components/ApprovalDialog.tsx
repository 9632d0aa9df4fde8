// A tool call waiting for the owner (an `approval_request` event): a modal dialog naming the
// tool, the whole command (line count, hidden characters spelled out, approve reachable only
// once its end was shown), the working directory, the model's justification and what each
// approval covers, with Approve once / Approve for this chat (only where it grants more than
// once) / Deny. Focus stays inside; Escape denies. A countdown with a bar shows when the server
// will deny on its own, counted from the server's deadline. The answer goes to the server,
// which alone decides; the dialog closes on its `approval_end`.

import { useCallback, useEffect, useId, useLayoutEffect, useRef, useState } from 'react'
import { ShieldAlert } from 'lucide-react'
import { useT } from '../i18n'
import {
  commandOf,
  lineCount,
  secondsLeft,
  shellJoin,
  showHidden,
  titleKind,
  type Approval,
  type ApprovalDecision,
} from '../lib/approvals'
import { Button, DialogShell } from './ui'

/** At or below this many seconds (or a fifth of the wait) the countdown turns urgent. */
const URGENT_SEC = 10

function Escaped({ text }: { text: string }) {
  return (
    <>
      {showHidden(text).map((p, i) =>
        p.escaped ? (
          <mark key={i} className="rounded-sm bg-red-900/70 px-0.5 text-red-100" data-escaped>
            {p.text}
          </mark>
        ) : (
          <span key={i}>{p.text}</span>
        ),
      )}
    </>
  )
}

export function ApprovalDialog({ request, onAnswer }: { request: Approval; onAnswer: (d: ApprovalDecision) => void }) {
  const t = useT()
  const uid = useId()
  const [now, setNow] = useState(() => Date.now())
  const [whole, setWhole] = useState(false)
  const [seenEnd, setSeenEnd] = useState(false)
  const [announced, setAnnounced] = useState('')
  const commandRef = useRef<HTMLPreElement>(null)

  useEffect(() => {
    if (request.endsAt === null) return
    const timer = setInterval(() => setNow(Date.now()), 250)
    return () => clearInterval(timer)
  }, [request.endsAt])

  const command = commandOf(request)

  // The end of the command counts as shown when the box scrolled to its bottom, was opened
  // whole, or never overflowed.
  const checkEnd = useCallback(() => {
    const el = commandRef.current
    if (!el) return
    if (el.scrollTop + el.clientHeight >= el.scrollHeight - 4) setSeenEnd(true)
  }, [])
  useLayoutEffect(() => {
    setSeenEnd(command === null)
    setWhole(false)
  }, [request.id, command])
  useLayoutEffect(() => {
    if (whole) setSeenEnd(true)
    else checkEnd()
  }, [whole, checkEnd, request.id])

  const left = secondsLeft(request, now)
  const urgent = left !== null && (left <= URGENT_SEC || (request.timeoutSec > 0 && left <= request.timeoutSec / 5))
  // One polite announcement when it turns urgent.
  useEffect(() => {
    if (urgent && left !== null && !announced) setAnnounced(t('approval.timeUrgent', { s: left }))
  }, [urgent, left, announced, t])
  useEffect(() => setAnnounced(''), [request.id])

  const kind = titleKind(request)
  const title =
    kind === 'outside'
      ? t('approval.titleExec')
      : kind === 'sandboxed'
        ? t('approval.titleSandboxed')
        : kind === 'command'
          ? t('approval.titleCommand')
          : t('approval.titleTool', { tool: request.toolName })
  const others = Object.entries(request.arguments).filter(
    ([k]) => !(command !== null && ['command', 'sandbox_permissions', 'justification'].includes(k)),
  )
  const lines = command === null ? 0 : lineCount(command)
  const hidden = command !== null && showHidden(command).some((p) => p.escaped)
  const grant = request.grant
  // Approve for this chat: offered unless the server says it grants nothing beyond this once.
  const offerChat = grant !== null
  // The server's words (English) only where this client cannot say it from the fields.
  const onceText =
    request.confined === true
      ? t('approval.onceSandboxed')
      : request.confined === false
        ? kind === 'outside'
          ? t('approval.onceOutside')
          : t('approval.onceTool')
        : null
  const chatText =
    grant === null
      ? t('approval.chatNothing')
      : grant?.scope === 'exact'
        ? t('approval.chatExact', { cmd: shellJoin(grant.argv) })
        : grant?.scope === 'family'
          ? t('approval.chatFamily', {
              cmd: [grant.program, ...grant.prefix].join(' '),
              rule: grant.rule === 'host_names' ? t('approval.ruleHostNames') : grant.rule,
            })
          : grant?.scope === 'tool'
            ? t('approval.chatTool', { tool: grant.tool })
            : null
  const total = request.timeoutSec
  const fraction = left !== null && total > 0 ? Math.min(1, left / total) : null

  return (
    // Escape denies (the safe answer, focused first); focus comes back where it was.
    <DialogShell
      role="alertdialog"
      onEscape={() => onAnswer('deny')}
      labelledBy={`${uid}-title`}
      describedBy={`${uid}-grants`}
      initialFocus="[data-deny]"
      focusKey={request.id}
      width="max-w-2xl"
      tone="warning"
      padding="p-2 sm:p-4"
      data-testid="approval-dialog"
      data-kind={kind}
    >
        <div className="flex items-start gap-3 border-b border-zinc-800 px-4 py-3.5 sm:px-5">
          <ShieldAlert size={20} className="mt-0.5 shrink-0 text-amber-400" aria-hidden />
          <div className="min-w-0">
            <h2 id={`${uid}-title`} className="text-[15px] font-semibold text-zinc-100" data-testid="approval-title">
              {title}
            </h2>
            <p className="mt-1 text-xs text-zinc-500">{t('approval.intro')}</p>
          </div>
        </div>
        <dl className="min-h-0 flex-1 space-y-3 overflow-y-auto px-4 py-4 text-sm sm:px-5">
          <div>
            <dt className="text-xs font-medium text-zinc-400">{t('approval.tool')}</dt>
            <dd className="font-mono text-zinc-200" data-testid="approval-tool">{request.toolName}</dd>
          </div>
          {command !== null && (
            <div>
              <dt className="flex flex-wrap items-baseline gap-x-2 text-xs font-medium text-zinc-400">
                <span>{t('approval.command')}</span>
                <span className="text-zinc-500" data-testid="approval-lines">{t('approval.lines', { n: lines })}</span>
                {!whole && !seenEnd && (
                  <button
                    type="button"
                    className="text-sky-400 underline hover:text-sky-300"
                    onClick={() => setWhole(true)}
                    data-testid="approval-show-all"
                  >
                    {t('approval.showAll')}
                  </button>
                )}
              </dt>
              <dd>
                <pre
                  ref={commandRef}
                  tabIndex={0}
                  onScroll={checkEnd}
                  className={`mt-1 overflow-auto whitespace-pre-wrap break-normal rounded-md bg-zinc-950 px-3 py-2 font-mono text-[13px] text-zinc-100 ${whole ? '' : 'max-h-48'}`}
                  data-testid="approval-command"
                >
                  <Escaped text={command} />
                </pre>
                {hidden && <p className="mt-1 text-xs text-red-300" data-testid="approval-hidden">{t('approval.hiddenChars')}</p>}
                {!seenEnd && (
                  <p className="mt-1 text-xs text-amber-300" data-testid="approval-read-end">{t('approval.readToEnd')}</p>
                )}
              </dd>
            </div>
          )}
          {others.length > 0 && (
            <div>
              <dt className="text-xs font-medium text-zinc-400">{t('approval.arguments')}</dt>
              <dd>
                <pre tabIndex={0} className="mt-1 max-h-40 overflow-auto whitespace-pre-wrap break-normal rounded-md bg-zinc-950 px-3 py-2 font-mono text-xs text-zinc-300">
                  <Escaped text={JSON.stringify(Object.fromEntries(others), null, 2)} />
                </pre>
              </dd>
            </div>
          )}
          {request.workingDir && (
            <div>
              <dt className="text-xs font-medium text-zinc-400">{t('approval.workingDir')}</dt>
              <dd className="break-all font-mono text-xs text-zinc-300" data-testid="approval-cwd">{request.workingDir}</dd>
            </div>
          )}
          <div>
            <dt className="text-xs font-medium text-zinc-400">{t('approval.justification')}</dt>
            <dd className="whitespace-pre-wrap break-words text-zinc-200" data-testid="approval-justification">
              {request.justification ? <Escaped text={request.justification} /> : <span className="text-zinc-500">{t('approval.noJustification')}</span>}
            </dd>
          </div>
          {request.controlFiles.length > 0 && (
            <div>
              <dt className="text-xs font-medium text-zinc-400">{t('approval.controlFiles')}</dt>
              <dd>
                <ul className="mt-1 list-disc pl-5 font-mono text-xs text-red-200" data-testid="approval-control-files">
                  {request.controlFiles.map((f) => (
                    <li key={f} className="break-all">{f}</li>
                  ))}
                </ul>
              </dd>
            </div>
          )}
          <div>
            <dt className="text-xs font-medium text-zinc-400">{t('approval.grants')}</dt>
            <dd id={`${uid}-grants`} className="space-y-1 whitespace-pre-wrap break-words text-amber-200/90" data-testid="approval-grants">
              {onceText === null ? (
                request.grants
              ) : (
                <>
                  <p data-testid="approval-grants-once">{onceText}</p>
                  {chatText !== null ? <p data-testid="approval-grants-chat">{chatText}</p> : request.grants && <p>{request.grants}</p>}
                </>
              )}
            </dd>
          </div>
        </dl>
        {left !== null && (
          <div className="px-4 pt-2 sm:px-5">
            <div
              className="h-1.5 w-full overflow-hidden rounded-full bg-zinc-800"
              role="progressbar"
              aria-label={t('approval.timeBar')}
              aria-valuemin={0}
              aria-valuemax={total || undefined}
              aria-valuenow={left}
              data-testid="approval-bar"
              data-urgent={urgent ? 'true' : 'false'}
            >
              <div
                className={`h-full rounded-full transition-[width] duration-200 ${urgent ? 'bg-red-500' : 'bg-amber-500'}`}
                style={{ width: `${Math.round((fraction ?? 1) * 100)}%` }}
              />
            </div>
          </div>
        )}
        <span className="sr-only" aria-live="polite" data-testid="approval-announce">{announced}</span>
        <div className="flex flex-col gap-2 border-t border-zinc-800 px-4 py-3 sm:flex-row sm:flex-wrap sm:items-center sm:px-5">
          <span
            className={`min-w-0 whitespace-nowrap text-xs sm:flex-1 ${urgent ? 'font-semibold text-red-400' : 'text-zinc-500'}`}
            data-testid="approval-left"
            data-left={left ?? ''}
          >
            {left !== null && t('approval.timeLeft', { s: left })}
          </span>
          <div className="flex flex-wrap justify-end gap-2">
            <Button onClick={() => onAnswer('deny')} data-testid="approval-deny" data-deny>
              {t('approval.deny')}
            </Button>
            {offerChat && (
              <Button
                onClick={() => onAnswer('approve_for_chat')}
                disabled={!seenEnd}
                data-testid="approval-chat"
                title={chatText ?? undefined}
              >
                {t('approval.approveChat')}
              </Button>
            )}
            <Button variant="primary" onClick={() => onAnswer('approve')} disabled={!seenEnd} data-testid="approval-once">
              {t('approval.approveOnce')}
            </Button>
          </div>
        </div>
    </DialogShell>
  )
}
