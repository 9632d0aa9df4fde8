// A tool call waiting for the owner (an `approval_request` event): a modal dialog naming the
// tool, the command, the working directory, the model's justification and what each approval
// allows (the server's words), with Approve once / Approve for this chat / Deny. Focus stays
// inside; Escape denies. A countdown shows when the server will deny on its own. The answer
// goes to the server, which alone decides; the dialog closes on its `approval_end`.

import { useEffect, useId, useRef, useState, type KeyboardEvent } from 'react'
import { ShieldAlert } from 'lucide-react'
import { useT } from '../i18n'
import { commandOf, isEscalation, secondsLeft, type Approval, type ApprovalDecision } from '../lib/approvals'
import { trapTab } from '../lib/focus'
import { Button } from './ui'

export function ApprovalDialog({ request, onAnswer }: { request: Approval; onAnswer: (d: ApprovalDecision) => void }) {
  const t = useT()
  const uid = useId()
  const [now, setNow] = useState(() => Date.now())
  const dialogRef = useRef<HTMLDivElement>(null)
  const restoreRef = useRef<Element | null>(null)

  // Focus starts on Deny (the safe answer) and goes back where it was when the dialog closes.
  useEffect(() => {
    restoreRef.current = document.activeElement
    dialogRef.current?.querySelector<HTMLElement>('[data-deny]')?.focus()
    return () => {
      const el = restoreRef.current
      if (el instanceof HTMLElement && el.isConnected) el.focus()
    }
  }, [request.id])

  useEffect(() => {
    if (!request.timeoutSec) return
    const timer = setInterval(() => setNow(Date.now()), 1000)
    return () => clearInterval(timer)
  }, [request.timeoutSec])

  const onKeyDown = (e: KeyboardEvent<HTMLDivElement>) => {
    if (e.key === 'Escape') {
      e.preventDefault()
      onAnswer('deny')
      return
    }
    trapTab(e, dialogRef.current)
  }

  const command = commandOf(request)
  const escalated = isEscalation(request)
  const left = secondsLeft(request, now)
  const others = Object.entries(request.arguments).filter(
    ([k]) => !(command !== null && ['command', 'sandbox_permissions', 'justification'].includes(k)),
  )

  return (
    <div className="fixed inset-0 z-50 flex items-center justify-center bg-black/60 p-4 backdrop-blur-[2px]">
      {/* eslint-disable-next-line jsx-a11y/no-noninteractive-element-interactions -- Tab/Escape from any button bubble here */}
      <div
        ref={dialogRef}
        role="alertdialog"
        aria-modal="true"
        aria-labelledby={`${uid}-title`}
        aria-describedby={`${uid}-grants`}
        onKeyDown={onKeyDown}
        data-testid="approval-dialog"
        className="flex max-h-[90vh] w-full max-w-lg flex-col rounded-xl border border-amber-800/70 bg-panel shadow-2xl"
      >
        <div className="flex items-start gap-3 border-b border-zinc-800 px-5 py-3.5">
          <ShieldAlert size={20} className="mt-0.5 shrink-0 text-amber-400" aria-hidden />
          <div className="min-w-0">
            <h2 id={`${uid}-title`} className="text-[15px] font-semibold text-zinc-100">
              {escalated || command !== null ? t('approval.titleExec') : t('approval.titleTool', { tool: request.toolName })}
            </h2>
            <p className="mt-1 text-xs text-zinc-500">{t('approval.intro')}</p>
          </div>
        </div>
        <dl className="min-h-0 flex-1 space-y-3 overflow-y-auto px-5 py-4 text-sm">
          <div>
            <dt className="text-xs font-medium text-zinc-400">{t('approval.tool')}</dt>
            <dd className="font-mono text-zinc-200" data-testid="approval-tool">{request.toolName}</dd>
          </div>
          {command !== null && (
            <div>
              <dt className="text-xs font-medium text-zinc-400">{t('approval.command')}</dt>
              <dd>
                <pre
                  tabIndex={0}
                  className="mt-1 max-h-48 overflow-auto whitespace-pre-wrap break-all rounded-md bg-zinc-950 px-3 py-2 font-mono text-[13px] text-zinc-100"
                  data-testid="approval-command"
                >
                  {command}
                </pre>
              </dd>
            </div>
          )}
          {others.length > 0 && (
            <div>
              <dt className="text-xs font-medium text-zinc-400">{t('approval.arguments')}</dt>
              <dd>
                <pre tabIndex={0} className="mt-1 max-h-40 overflow-auto whitespace-pre-wrap break-all rounded-md bg-zinc-950 px-3 py-2 font-mono text-xs text-zinc-300">
                  {JSON.stringify(Object.fromEntries(others), null, 2)}
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
              {request.justification ?? <span className="text-zinc-500">{t('approval.noJustification')}</span>}
            </dd>
          </div>
          <div>
            <dt className="text-xs font-medium text-zinc-400">{t('approval.grants')}</dt>
            <dd id={`${uid}-grants`} className="whitespace-pre-wrap break-words text-amber-200/90" data-testid="approval-grants">
              {request.grants}
            </dd>
          </div>
        </dl>
        <div className="flex flex-wrap items-center gap-2 border-t border-zinc-800 px-5 py-3">
          <span className="min-w-0 flex-1 text-xs text-zinc-500" aria-live="off">
            {left !== null && t('approval.timeLeft', { s: left })}
          </span>
          <Button onClick={() => onAnswer('deny')} data-testid="approval-deny" data-deny>
            {t('approval.deny')}
          </Button>
          <Button onClick={() => onAnswer('approve_for_chat')} data-testid="approval-chat">
            {t('approval.approveChat')}
          </Button>
          <Button variant="primary" onClick={() => onAnswer('approve')} data-testid="approval-once">
            {t('approval.approveOnce')}
          </Button>
        </div>
      </div>
    </div>
  )
}
