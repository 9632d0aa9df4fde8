// @vitest-environment happy-dom
import { act } from 'react'
import { createRoot } from 'react-dom/client'
import { renderToStaticMarkup } from 'react-dom/server'
import { beforeAll, describe, expect, it } from 'vitest'
import { loadHighlight, loadMath, Markdown, PlainText, RenderBoundary, renderStats } from './Markdown'

const html = (text: string, streaming = false) => renderToStaticMarkup(<Markdown text={text} streaming={streaming} />)

// React's act() needs this flag outside a test framework integration.
;(globalThis as { IS_REACT_ACT_ENVIRONMENT?: boolean }).IS_REACT_ACT_ENVIRONMENT = true

beforeAll(async () => {
  await Promise.all([loadMath(), loadHighlight()])
})

describe('Markdown renderer', () => {
  it('shows raw HTML as text', () => {
    const out = html('<img src=x onerror=alert(1)> and <script>bad()</script>\n\n<div onclick="x()">hi</div>')
    expect(out).not.toContain('<img')
    expect(out).not.toContain('<script')
    expect(out).not.toContain('<div onclick')
    expect(out).toContain('&lt;img')
    expect(out).toContain('&lt;script&gt;')
  })

  it('neutralises javascript: and data: URLs but keeps http(s) links and raster data images', () => {
    const out = html(
      '[a](javascript:alert(1)) [b](JaVaScRiPt:alert(1)) [c](data:text/html,<script>x</script>) ' +
        '![d](data:image/svg+xml;base64,PHN2Zz4=) ![e](data:image/png;base64,iVBORw0KGgo=) [f](https://example.com/x?y=1)',
    )
    expect(out.toLowerCase()).not.toContain('javascript:')
    expect(out).not.toContain('data:text')
    expect(out).not.toContain('data:image/svg')
    expect(out).toContain('src="data:image/png;base64,iVBORw0KGgo="')
    expect(out).toContain('<a href="https://example.com/x?y=1" target="_blank" rel="noreferrer noopener">f</a>')
  })

  it('shows a remote image as a button until it is clicked, then loads it lazily and without a referrer', async () => {
    const out = html('![a cat](https://example.com/cat.png "Cat") ![old](http://example.com/old.png)')
    expect(out).not.toContain('<img')
    expect(out).toMatch(/<button type="button" data-testid="remote-image" title="https:\/\/example.com\/cat.png"[^>]*>.*Load image from example.com · a cat<\/span><\/button>/)
    expect(out).toMatch(/<a href="http:\/\/example.com\/old.png" target="_blank" rel="noreferrer noopener" data-testid="remote-image"/)
    const el = document.createElement('div')
    const root = createRoot(el)
    await act(async () => root.render(<Markdown text={'![a cat](https://example.com/cat.png "Cat")'} />))
    expect(el.querySelector('img')).toBeNull()
    await act(async () => (el.querySelector('button') as HTMLButtonElement).click())
    const img = el.querySelector('img')
    expect([img?.getAttribute('src'), img?.alt, img?.title]).toEqual(['https://example.com/cat.png', 'a cat', 'Cat'])
    expect([img?.getAttribute('loading'), img?.getAttribute('referrerpolicy')]).toEqual(['lazy', 'no-referrer'])
    root.unmount()
  })

  it('puts the task-list checkbox on the same line as its label', () => {
    const out = html('- [x] done item\n- [ ] open item')
    expect(out).toMatch(/<li class="task-list-item"><input type="checkbox"[^>]*checked=""[^>]*\/> done item<\/li>/)
    expect(out).toMatch(/<li class="task-list-item"><input type="checkbox"[^>]*\/> open item<\/li>/)
  })

  it('keeps the indentation of indented and fenced code', () => {
    const out = html('Text:\n\n    def f():\n        return 1\n\n```js\nif (a) {\n  b()\n}\n```')
    expect(out).toContain('def f():\n    return 1')
    expect(out).toMatch(/\n {2}<span class="hljs-title function_">b<\/span>\(\)/)
  })

  it('decodes entities', () => {
    const out = html('AT&amp;T &copy; 2024 &#x4E2D; &lt;b&gt;')
    expect(out).toContain('AT&amp;T © 2024 中 &lt;b&gt;')
  })

  it('renders inline and display math with KaTeX', () => {
    const out = html('Euler: $e^{i\\pi}+1=0$\n\n$$\n\\int_0^1 x\\,dx\n$$')
    expect(out).toContain('class="katex"')
    expect(out).toContain('class="katex-display"')
    expect(out).toContain('<annotation encoding="application/x-tex">e^{i\\pi}+1=0</annotation>')
  })

  it('highlights fenced code, keeps a copy button, and wraps tables for scrolling', () => {
    const out = html('| a | b |\n|---|---|\n| 1 | 2 |\n\n```python\ndef f(): return 1\n```')
    expect(out).toMatch(/<div class="overflow-x-auto"><table>/)
    expect(out).toContain('<th>a</th>')
    expect(out).toContain('aria-label="Copy code"')
    expect(out).toContain('<span class="hljs-keyword">def</span>')
  })

  it('renders 5,000 nested list markers, quotes and brackets without throwing', () => {
    for (const text of ['- '.repeat(5000) + 'x', '> '.repeat(5000) + 'x', '['.repeat(5000) + 'x' + ']'.repeat(5000),
      '*'.repeat(5000) + 'x' + '*'.repeat(5000), '1. '.repeat(5000) + 'x']) {
      const out = html(text)
      expect(out).toContain('data-testid="markdown"')
      expect(out).toContain('x')
    }
  })

  it('a 60 KB paragraph of unmatched *x streams with bounded parsing work', async () => {
    const full = '*x '.repeat(20_000)
    const el = document.createElement('div')
    const root = createRoot(el)
    const before = { ...renderStats }
    const chunk = 2000
    let chunks = 0
    for (let i = chunk; i <= full.length; i += chunk) {
      chunks++
      await act(async () => root.render(<Markdown text={full.slice(0, i)} streaming />))
    }
    await act(async () => root.render(<Markdown text={full} />))
    const parses = renderStats.parses - before.parses
    const bytes = renderStats.bytes - before.bytes
    expect(el.textContent).toContain('*x *x')
    // Each chunk re-parses only the growing block (≤ 2 KB here), plus one parse per completed block.
    expect(parses).toBeLessThan(chunks + 40)
    expect(bytes).toBeLessThan(chunks * 2 * 2048 + full.length)
    // Re-parsing everything on every chunk would be ~chunks * full.length / 2.
    expect(bytes).toBeLessThan((chunks * full.length) / 10)
    act(() => root.unmount())
  }, 60_000)

  it('re-renders only the growing block while streaming', async () => {
    const el = document.createElement('div')
    const root = createRoot(el)
    const paras = Array.from({ length: 20 }, (_, i) => `Paragraph ${i} with **bold** text.`).join('\n\n')
    await act(async () => root.render(<Markdown text={paras} streaming />))
    const start = renderStats.parses
    for (let i = 0; i < 10; i++) {
      await act(async () => root.render(<Markdown text={`${paras} more${i}`} streaming />))
    }
    expect(renderStats.parses - start).toBe(10)
    expect(el.querySelectorAll('strong').length).toBe(20)
    act(() => root.unmount())
  })

  it('an error boundary shows plain text when rendering throws, and retries on new text', async () => {
    const el = document.createElement('div')
    const root = createRoot(el)
    const Boom = ({ text }: { text: string }) => {
      if (text.includes('boom')) throw new Error('render failed')
      return <b>{text}</b>
    }
    const tree = (text: string) => (
      <div>
        <span>app stays</span>
        <RenderBoundary resetKey={text} fallback={<PlainText text={text} />}>
          <Boom text={text} />
        </RenderBoundary>
      </div>
    )
    const quiet = console.error
    console.error = () => {}
    try {
      await act(async () => root.render(tree('a boom answer')))
    } finally {
      console.error = quiet
    }
    expect(el.textContent).toBe('app staysa boom answer')
    expect(el.querySelector('p.whitespace-pre-wrap')?.textContent).toBe('a boom answer')
    await act(async () => root.render(tree('fine now')))
    expect(el.querySelector('b')?.textContent).toBe('fine now')
    act(() => root.unmount())
  })

  it('shows the cursor only while streaming', () => {
    expect(html('partial', true)).toContain('animate-blink')
    expect(html('', true)).toContain('animate-blink')
    expect(html('done')).not.toContain('animate-blink')
  })
})
