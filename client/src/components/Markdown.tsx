// Renders the Markdown tree from lib/markdown as React elements (never as HTML strings).

import { memo, useMemo, useState, type ReactNode } from 'react'
import { Check, Copy } from 'lucide-react'
import { useT } from '../i18n'
import { parseBlocks, type Block, type Inline } from '../lib/markdown'
import { languageOf, tokenize } from '../lib/highlight'

function inlines(nodes: Inline[], key = ''): ReactNode[] {
  return nodes.map((n, i) => {
    const k = `${key}${i}`
    switch (n.t) {
      case 'text':
        return n.v
      case 'code':
        return <code key={k}>{n.v}</code>
      case 'strong':
        return <strong key={k}>{inlines(n.c, `${k}.`)}</strong>
      case 'em':
        return <em key={k}>{inlines(n.c, `${k}.`)}</em>
      case 'del':
        return (
          <del key={k} className="text-zinc-500">
            {inlines(n.c, `${k}.`)}
          </del>
        )
      case 'link':
        return n.href ? (
          <a key={k} href={n.href} target="_blank" rel="noreferrer">
            {inlines(n.c, `${k}.`)}
          </a>
        ) : (
          <span key={k}>{inlines(n.c, `${k}.`)}</span>
        )
      case 'br':
        return <br key={k} />
    }
  })
}

function CodeBlock({ lang, text }: { lang: string; text: string }) {
  const t = useT()
  const [copied, setCopied] = useState(false)
  const tokens = useMemo(() => tokenize(text, lang), [text, lang])
  const known = languageOf(lang) !== null
  const copy = () => {
    const value = text.replace(/\n$/, '')
    const done = () => {
      setCopied(true)
      setTimeout(() => setCopied(false), 2000)
    }
    navigator.clipboard?.writeText(value).then(done, () => undefined)
  }
  return (
    <div className="group relative rounded-lg border border-zinc-800 bg-[#0d0d0f]">
      <div className="flex items-center justify-between border-b border-zinc-800/80 px-3 py-1 text-[11px] text-zinc-500">
        <span className="font-mono">{lang || t('md.plainText')}</span>
        <button
          type="button"
          onClick={copy}
          aria-label={t('md.copyCode')}
          className="flex items-center gap-1 rounded px-1.5 py-0.5 text-zinc-500 opacity-70 transition group-hover:opacity-100 hover:bg-zinc-800 hover:text-zinc-200"
        >
          {copied ? <Check size={12} className="text-emerald-400" /> : <Copy size={12} />}
          {t(copied ? 'md.copied' : 'md.copy')}
        </button>
      </div>
      <pre className="overflow-x-auto px-3.5 py-3 font-mono text-[13px] leading-relaxed text-zinc-200">
        <code data-lang={lang || undefined}>
          {known ? tokens.map((t, i) => (t.k === 'plain' ? t.v : <span key={i} className={`tk-${t.k}`}>{t.v}</span>)) : text}
        </code>
      </pre>
    </div>
  )
}

function blockNodes(blocks: Block[], cursor: ReactNode, key = ''): ReactNode[] {
  return blocks.map((b, i) => {
    const k = `${key}${i}`
    const last = i === blocks.length - 1
    const tail = last ? cursor : null
    switch (b.t) {
      case 'p':
        return (
          <p key={k}>
            {inlines(b.c)}
            {tail}
          </p>
        )
      case 'h': {
        const H = `h${Math.min(6, Math.max(1, b.level))}` as 'h1'
        return (
          <H key={k}>
            {inlines(b.c)}
            {tail}
          </H>
        )
      }
      case 'code':
        return (
          <div key={k}>
            <CodeBlock lang={b.lang} text={b.text} />
            {tail}
          </div>
        )
      case 'hr':
        return <hr key={k} />
      case 'quote':
        return <blockquote key={k}>{blockNodes(b.children, tail, `${k}.`)}</blockquote>
      case 'list': {
        const items = b.items.map((it, j) => {
          const itemTail = j === b.items.length - 1 ? tail : null
          return (
            <li key={j} className={it.task !== null ? 'task' : undefined}>
              {it.task !== null && (
                <input type="checkbox" checked={it.task} readOnly disabled className="mr-2 translate-y-[1px] accent-emerald-500" />
              )}
              {blockNodes(it.children, itemTail, `${k}.${j}.`)}
            </li>
          )
        })
        return b.ordered ? (
          <ol key={k} start={b.start}>
            {items}
          </ol>
        ) : (
          <ul key={k}>{items}</ul>
        )
      }
      case 'table':
        return (
          <div key={k} className="overflow-x-auto">
            <table>
              <thead>
                <tr>
                  {b.head.map((c, j) => (
                    <th key={j} style={b.align[j] ? { textAlign: b.align[j] ?? undefined } : undefined}>
                      {inlines(c)}
                    </th>
                  ))}
                </tr>
              </thead>
              <tbody>
                {b.rows.map((r, ri) => (
                  <tr key={ri}>
                    {r.map((c, j) => (
                      <td key={j} style={b.align[j] ? { textAlign: b.align[j] ?? undefined } : undefined}>
                        {inlines(c)}
                      </td>
                    ))}
                  </tr>
                ))}
              </tbody>
            </table>
            {tail}
          </div>
        )
    }
  })
}

export const Cursor = () => (
  <span aria-hidden className="ml-0.5 inline-block h-[1.05em] w-[0.5em] translate-y-[0.2em] animate-blink rounded-[1px] bg-zinc-300" />
)

export const Markdown = memo(function Markdown({ text, streaming }: { text: string; streaming?: boolean }) {
  const blocks = useMemo(() => parseBlocks(text), [text])
  const cursor = streaming ? <Cursor key="cursor" /> : null
  return (
    <div className="md text-[15px] text-zinc-200" data-testid="markdown">
      {blockNodes(blocks, cursor)}
      {streaming && blocks.length === 0 && <Cursor />}
    </div>
  )
})
