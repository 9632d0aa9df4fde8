// A line diff (lib/diff.ts) as a scrollable monospace block: removed lines red, added green.

import { useMemo } from 'react'
import { diffStats, lineDiff } from '../lib/diff'
import { useT } from '../i18n'

export function DiffView({ oldText, newText, testId }: { oldText: string; newText: string; testId?: string }) {
  const t = useT()
  const lines = useMemo(() => lineDiff(oldText, newText), [oldText, newText])
  const { added, removed } = diffStats(lines)
  return (
    <div data-testid={testId}>
      <p className="mb-1.5 text-xs text-zinc-500">
        <span className="text-emerald-400">+{added}</span> <span className="text-red-400">−{removed}</span>{' '}
        {added + removed === 0 && t('diff.identical')}
      </p>
      <pre className="max-h-[50vh] overflow-auto rounded-lg border border-zinc-800 bg-zinc-950 py-2 font-mono text-[12.5px] leading-relaxed">
        {lines.map((l, i) => (
          <div
            key={i}
            data-op={l.op}
            className={`flex px-2 ${l.op === 'add' ? 'bg-emerald-500/10 text-emerald-300' : l.op === 'del' ? 'bg-red-500/10 text-red-300' : 'text-zinc-400'}`}
          >
            <span className="w-5 shrink-0 select-none text-zinc-600">{l.op === 'add' ? '+' : l.op === 'del' ? '−' : ' '}</span>
            <span className="whitespace-pre-wrap break-words">{l.text || ' '}</span>
          </div>
        ))}
      </pre>
    </div>
  )
}
