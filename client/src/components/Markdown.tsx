// Renders an assistant answer as Markdown with react-markdown + GFM + math, never as an HTML string
// (raw HTML shows as text). The answer is cut into top-level blocks (lib/mdBlocks) and each block
// is a memoised component, so while streaming only the growing last block re-parses. KaTeX and the
// highlighter load lazily on the first block that needs them. Every block sits in an error
// boundary that falls back to its plain text. Remote images stay buttons until clicked
// (AnswerImage), so an answer cannot make the browser send anything to a host of its choosing.

import { Component, memo, useEffect, useState, useSyncExternalStore, type ReactNode } from 'react'
import ReactMarkdown, { type Components } from 'react-markdown'
import remarkGfm from 'remark-gfm'
import remarkMath from 'remark-math'
import type { PluggableList } from 'unified'
import type { Element, ElementContent } from 'hast'
import { Check, Copy, ImageIcon } from 'lucide-react'
import { useT } from '../i18n'
import { imageHost, imageMode, isHostile, safeUrl, splitBlocks } from '../lib/mdBlocks'
import { useCopy } from './ui'

/** Work counters, read by tests: block renders (= parses) and the characters they parsed. */
export const renderStats = { parses: 0, bytes: 0 }

/** Highlighting is skipped for a block still growing past this size; it runs once it completes. */
const LIVE_HIGHLIGHT_LIMIT = 4096

// ---- lazily loaded rehype plugins (KaTeX + its CSS, highlight.js languages) ----

const lazy: { math: PluggableList | null; code: PluggableList | null } = { math: null, code: null }
const pending: { math?: Promise<void>; code?: Promise<void> } = {}
let lazyVersion = 0
const listeners = new Set<() => void>()
const subscribe = (fn: () => void) => {
  listeners.add(fn)
  return () => listeners.delete(fn)
}
const getVersion = () => lazyVersion

function loaded() {
  lazyVersion += 1
  for (const fn of listeners) fn()
}

export function loadMath(): Promise<void> {
  pending.math ??= Promise.all([import('rehype-katex'), import('katex/dist/katex.min.css')]).then(([m]) => {
    lazy.math = [[m.default, { throwOnError: false, strict: false, maxSize: 50, maxExpand: 200 }]]
    loaded()
  })
  return pending.math
}

export function loadHighlight(): Promise<void> {
  pending.code ??= import('rehype-highlight').then((m) => {
    lazy.code = [[m.default, { detect: false }]]
    loaded()
  })
  return pending.code
}

const FENCE = /^ {0,3}(```|~~~)/m

// ---- element overrides ----

function textOf(node: Element | undefined): string {
  if (!node) return ''
  let out = ''
  const stack: ElementContent[] = [...node.children].reverse()
  while (stack.length) {
    const n = stack.pop()!
    if (n.type === 'text') out += n.value
    else if (n.type === 'element') for (let i = n.children.length - 1; i >= 0; i--) stack.push(n.children[i])
  }
  return out
}

function CodeBlock({ node, children }: { node: Element | undefined; children: ReactNode }) {
  const t = useT()
  const { copied, copy: copyText } = useCopy()
  const code = node?.children.find((c): c is Element => c.type === 'element' && c.tagName === 'code')
  const classes = code?.properties?.className
  const lang = (Array.isArray(classes) ? classes : [])
    .map(String)
    .find((c) => c.startsWith('language-'))
    ?.slice('language-'.length)
  const copy = () => copyText(textOf(code).replace(/\n$/, ''))
  return (
    <div className="group relative rounded-lg border border-zinc-800 bg-[#0d0d0f]">
      <div className="flex items-center justify-between border-b border-zinc-800/80 px-3 py-1 text-[11px] text-zinc-500">
        <span className="font-mono">{lang || t('md.plainText')}</span>
        <button
          type="button"
          onClick={copy}
          aria-label={t('md.copyCode')}
          className="flex items-center gap-1 rounded px-1.5 py-0.5 text-zinc-400 transition hover:bg-zinc-800 hover:text-zinc-200"
        >
          {copied ? <Check size={12} className="text-emerald-400" /> : <Copy size={12} />}
          {copied ? t('md.copied') : t('md.copy')}
        </button>
      </div>
      <pre tabIndex={0} className="overflow-x-auto px-3.5 py-3 font-mono text-[13px] leading-relaxed text-zinc-200">{children}</pre>
    </div>
  )
}

function pageOrigin(): string | null {
  return typeof window === 'undefined' ? null : window.location.origin
}

/** An answer's image: data and same-origin images render; a remote one is a button that loads
 * that one image when clicked (imageMode in lib/mdBlocks). */
function AnswerImage({ src, alt, title }: { src: string; alt: string; title?: string }) {
  const t = useT()
  const [shown, setShown] = useState(false)
  const mode = imageMode(src, pageOrigin())
  if (mode === 'inline' || shown) {
    return (
      <img
        src={src}
        alt={alt}
        title={title}
        loading="lazy"
        referrerPolicy="no-referrer"
        className="inline-block max-h-[28rem] max-w-full rounded"
      />
    )
  }
  const host = imageHost(src)
  const label = (
    <>
      <ImageIcon size={14} aria-hidden className="shrink-0" />
      <span className="break-all">
        {t(mode === 'click' ? 'md.remoteImage' : 'md.remoteImageLink', { host })}
        {alt ? ` · ${alt}` : ''}
      </span>
    </>
  )
  const look =
    'inline-flex max-w-full items-center gap-1.5 rounded border border-zinc-700 px-2 py-0.5 align-middle text-xs text-zinc-300 hover:border-zinc-500 hover:text-zinc-100'
  return mode === 'click' ? (
    <button type="button" data-testid="remote-image" title={src} onClick={() => setShown(true)} className={look}>
      {label}
    </button>
  ) : (
    <a href={src} target="_blank" rel="noreferrer noopener" data-testid="remote-image" title={src} className={look}>
      {label}
    </a>
  )
}

const components: Components = {
  a: ({ href, children }) =>
    href ? (
      <a href={href} target="_blank" rel="noreferrer noopener">
        {children}
      </a>
    ) : (
      <span>{children}</span>
    ),
  img: ({ src, alt, title }) =>
    typeof src === 'string' && src ? <AnswerImage src={src} alt={alt ?? ''} title={title} /> : <span>{alt}</span>,
  pre: ({ node, children }) => <CodeBlock node={node}>{children}</CodeBlock>,
  table: ({ children }) => (
    <div className="overflow-x-auto">
      <table>{children}</table>
    </div>
  ),
  input: ({ type, checked }) =>
    type === 'checkbox' ? (
      <input
        type="checkbox"
        checked={Boolean(checked)}
        readOnly
        disabled
        aria-hidden
        className="mr-2 translate-y-[1px] accent-emerald-500"
      />
    ) : null,
}

const remarkPlugins: PluggableList = [remarkGfm, remarkMath]

// ---- error boundary: a block (or message) that throws while rendering shows its plain text ----

export class RenderBoundary extends Component<
  { fallback: ReactNode; resetKey: string; children: ReactNode },
  { failed: boolean; key: string }
> {
  state = { failed: false, key: this.props.resetKey }

  static getDerivedStateFromError() {
    return { failed: true }
  }

  static getDerivedStateFromProps(
    props: { resetKey: string },
    state: { failed: boolean; key: string },
  ): Partial<{ failed: boolean; key: string }> | null {
    // New text (the next streamed chunk) gets a fresh attempt.
    return props.resetKey !== state.key ? { failed: false, key: props.resetKey } : null
  }

  componentDidCatch(error: unknown) {
    console.error('markdown render failed; showing plain text', error)
  }

  render() {
    return this.state.failed ? this.props.fallback : this.props.children
  }
}

export const PlainText = ({ text }: { text: string }) => <p className="break-words whitespace-pre-wrap">{text}</p>

// ---- blocks ----

const MdBlock = memo(function MdBlock({ source, live }: { source: string; live: boolean }) {
  useSyncExternalStore(subscribe, getVersion, getVersion)
  const needsMath = source.includes('$')
  const needsCode = FENCE.test(source)
  useEffect(() => {
    if (needsMath) void loadMath()
    if (needsCode) void loadHighlight()
  }, [needsMath, needsCode])
  renderStats.parses += 1
  renderStats.bytes += source.length
  if (isHostile(source)) return <PlainText text={source} />
  const rehypePlugins: PluggableList = []
  if (needsMath && lazy.math) rehypePlugins.push(...lazy.math)
  if (needsCode && lazy.code && !(live && source.length > LIVE_HIGHLIGHT_LIMIT)) rehypePlugins.push(...lazy.code)
  return (
    <ReactMarkdown remarkPlugins={remarkPlugins} rehypePlugins={rehypePlugins} urlTransform={safeUrl} components={components}>
      {source}
    </ReactMarkdown>
  )
})

export const Cursor = () => (
  <span
    aria-hidden
    data-testid="cursor"
    className="ml-0.5 inline-block h-[1.05em] w-[0.5em] translate-y-[0.2em] animate-blink rounded-[1px] bg-zinc-300"
  />
)

export const Markdown = memo(function Markdown({ text, streaming }: { text: string; streaming?: boolean }) {
  const blocks = splitBlocks(text)
  return (
    <div className="md text-[15px] text-zinc-200" data-testid="markdown">
      {blocks.map((b, i) => (
        <RenderBoundary key={i} resetKey={b} fallback={<PlainText text={b} />}>
          <MdBlock source={b} live={Boolean(streaming) && i === blocks.length - 1} />
        </RenderBoundary>
      ))}
      {streaming && <Cursor />}
    </div>
  )
})
