import { describe, expect, it } from 'vitest'
import { parseBlocks, parseInline, safeHref } from './markdown'
import { tokenize } from './highlight'

describe('markdown', () => {
  it('parses headings, paragraphs, fences and rules', () => {
    const b = parseBlocks('# Title\n\nSome *text*\nnext line\n\n```rust\nfn main() {}\n```\n\n---')
    expect(b.map((x) => x.t)).toEqual(['h', 'p', 'code', 'hr'])
    expect(b[2]).toEqual({ t: 'code', lang: 'rust', text: 'fn main() {}' })
  })

  it('keeps an unterminated fence open while streaming', () => {
    const b = parseBlocks('Intro\n```py\nprint(1)')
    expect(b[1]).toEqual({ t: 'code', lang: 'py', text: 'print(1)' })
  })

  it('parses GFM tables with alignment and escaped pipes', () => {
    const b = parseBlocks('| a | b |\n|:--|--:|\n| 1 | x \\| y |\n| 2 |')
    expect(b).toHaveLength(1)
    const t = b[0]
    if (t.t !== 'table') throw new Error('not a table')
    expect(t.align).toEqual(['left', 'right'])
    expect(t.rows).toHaveLength(2)
    expect(t.rows[0][1]).toEqual([{ t: 'text', v: 'x | y' }])
    expect(t.rows[1][1]).toEqual([])
  })

  it('parses nested and task lists', () => {
    const b = parseBlocks('- [x] done\n- [ ] todo\n  - child\n\n1. one\n2. two')
    expect(b.map((x) => x.t)).toEqual(['list', 'list'])
    const ul = b[0]
    if (ul.t !== 'list') throw new Error()
    expect(ul.items.map((i) => i.task)).toEqual([true, false])
    expect(ul.items[1].children.map((c) => c.t)).toEqual(['p', 'list'])
    const ol = b[1]
    if (ol.t !== 'list') throw new Error()
    expect(ol.ordered).toBe(true)
    expect(ol.items).toHaveLength(2)
  })

  it('parses inline emphasis, code, strikethrough and links', () => {
    expect(parseInline('**b** _i_ ~~d~~ `c*d`')).toEqual([
      { t: 'strong', c: [{ t: 'text', v: 'b' }] },
      { t: 'text', v: ' ' },
      { t: 'em', c: [{ t: 'text', v: 'i' }] },
      { t: 'text', v: ' ' },
      { t: 'del', c: [{ t: 'text', v: 'd' }] },
      { t: 'text', v: ' ' },
      { t: 'code', v: 'c*d' },
    ])
    expect(parseInline('snake_case_name')).toEqual([{ t: 'text', v: 'snake_case_name' }])
    expect(parseInline('2 * 3 * 4')).toEqual([{ t: 'text', v: '2 * 3 * 4' }])
    expect(parseInline('[site](https://x.org/a_(b))')).toEqual([
      { t: 'link', href: 'https://x.org/a_(b)', c: [{ t: 'text', v: 'site' }] },
    ])
    expect(parseInline('see https://example.com/x.')).toEqual([
      { t: 'text', v: 'see ' },
      { t: 'link', href: 'https://example.com/x', c: [{ t: 'text', v: 'https://example.com/x' }] },
      { t: 'text', v: '.' },
    ])
  })

  it('never produces dangerous links and treats raw HTML as text', () => {
    expect(safeHref('javascript:alert(1)')).toBeNull()
    expect(safeHref(' JaVa\tScript:alert(1)')).toBeNull()
    expect(safeHref('data:text/html,x')).toBeNull()
    expect(safeHref('mailto:a@b.c')).toBe('mailto:a@b.c')
    expect(parseInline('[x](javascript:alert(1))')).toEqual([{ t: 'link', href: null, c: [{ t: 'text', v: 'x' }] }])
    expect(parseBlocks('<script>alert(1)</script>')).toEqual([
      { t: 'p', c: [{ t: 'text', v: '<script>alert(1)</script>' }] },
    ])
  })

  it('highlights keywords, strings, comments and numbers', () => {
    const toks = tokenize('const x = "hi" // note\nlet n = 42', 'ts')
    const kinds = toks.filter((t) => t.k !== 'plain').map((t) => [t.k, t.v])
    expect(kinds).toEqual([
      ['kw', 'const'],
      ['str', '"hi"'],
      ['com', '// note'],
      ['kw', 'let'],
      ['num', '42'],
    ])
    expect(tokenize('x', 'unknown-lang')).toEqual([{ k: 'plain', v: 'x' }])
    expect(tokenize('def f():\n  return None # c', 'python').map((t) => t.k)).toContain('fn')
  })
})
