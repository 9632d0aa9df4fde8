// The model's reasoning above its answer: a collapsed "Thinking" block, expandable, with how
// long the model thought. Never part of the answer (copy and regenerate act on the answer).
import { useT } from '../i18n'
import type { ChatMessage } from '../lib/chatStore'

export function Thinking({ m }: { m: ChatMessage }) {
  const t = useT()
  if (!m.reasoning) return null
  const live = m.reasoningSince !== undefined
  const seconds = m.reasoningMs !== undefined ? (m.reasoningMs / 1000).toFixed(1) : null
  const label = seconds !== null && !live ? t('chat.thinkingFor', { seconds }) : t('chat.thinking')
  return (
    <details className="group rounded-md border border-zinc-700/60 bg-zinc-900/40 text-sm" data-testid="thinking">
      <summary
        className="cursor-pointer select-none px-2 py-1 text-zinc-400 hover:text-zinc-200"
        title={t('chat.thinkingToggle')}
        data-testid="thinking-toggle"
      >
        <span className={live ? 'animate-pulse' : undefined}>{label}</span>
      </summary>
      <div className="whitespace-pre-wrap border-t border-zinc-700/60 px-2 py-1.5 text-zinc-400" data-testid="thinking-text">
        {m.reasoning}
      </div>
    </details>
  )
}
