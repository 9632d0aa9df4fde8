import { describe, expect, it } from 'vitest'
import { renderToStaticMarkup } from 'react-dom/server'
import { Markdown } from './Markdown'

const html = (text: string, streaming = false) => renderToStaticMarkup(<Markdown text={text} streaming={streaming} />)

describe('Markdown renderer', () => {
  it('escapes raw HTML and drops unsafe links', () => {
    const out = html('<img src=x onerror=alert(1)> [x](javascript:alert(1)) <script>bad()</script>')
    expect(out).not.toContain('<img')
    expect(out).not.toContain('<script')
    expect(out).toContain('&lt;img')
    expect(out).not.toContain('href="javascript')
  })

  it('opens links in a new tab without a referrer', () => {
    expect(html('[site](https://example.com)')).toContain(
      '<a href="https://example.com" target="_blank" rel="noreferrer">site</a>',
    )
  })

  it('renders tables in a scroll wrapper and code with a copy button and tokens', () => {
    const out = html('| a | b |\n|---|---|\n| 1 | 2 |\n\n```python\ndef f(): return 1\n```')
    expect(out).toMatch(/<div class="overflow-x-auto"><table>/)
    expect(out).toContain('<th>a</th>')
    expect(out).toContain('aria-label="Copy code"')
    expect(out).toContain('<span class="tk-kw">def</span>')
  })

  it('shows the cursor only while streaming', () => {
    expect(html('partial', true)).toContain('animate-blink')
    expect(html('', true)).toContain('animate-blink')
    expect(html('done')).not.toContain('animate-blink')
  })
})
