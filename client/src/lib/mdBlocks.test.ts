import { describe, expect, it } from 'vitest'
import { DENSE_BLOCK, imageHost, imageMode, isHostile, safeUrl, SOFT_BLOCK, splitBlocks } from './mdBlocks'

describe('splitBlocks', () => {
  it('splits at blank lines but keeps fences, list items and indented continuations whole', () => {
    const text = 'Intro\n\n```js\na\n\nb\n```\n\n1. one\n\n   more of one\n\n2. two\n\n$$\nx\n\ny\n$$\n\nEnd'
    expect(splitBlocks(text)).toEqual([
      'Intro\n',
      '```js\na\n\nb\n```\n',
      '1. one\n\n   more of one\n\n2. two\n',
      '$$\nx\n\ny\n$$\n',
      'End',
    ])
  })

  it('keeps an unclosed fence (still streaming) as one block', () => {
    expect(splitBlocks('a\n\n```\ncode\n\nmore')).toEqual(['a\n', '```\ncode\n\nmore'])
  })

  it('cuts long prose into bounded pieces, even a single long line', () => {
    const blocks = splitBlocks('*x '.repeat(20_000))
    expect(blocks.length).toBeGreaterThan(10)
    for (const b of blocks) expect(b.length).toBeLessThanOrEqual(DENSE_BLOCK)
    expect(blocks.join('').replace(/\s/g, '')).toBe('*x'.repeat(20_000))
    const plain = splitBlocks('word '.repeat(5000))
    expect(plain.length).toBeGreaterThan(2)
    for (const b of plain) expect(b.length).toBeLessThanOrEqual(SOFT_BLOCK)
    expect(plain[0].length).toBeGreaterThan(DENSE_BLOCK)
  })
})

describe('isHostile', () => {
  it('flags deep nesting and long delimiter runs, not ordinary text', () => {
    expect(isHostile('- '.repeat(17) + 'x')).toBe(true)
    expect(isHostile('> '.repeat(17) + 'x')).toBe(true)
    expect(isHostile('['.repeat(65) + 'x')).toBe(true)
    expect(isHostile('*'.repeat(65))).toBe(true)
    expect(isHostile('- a\n  - b\n    - c\n\n> q **bold** _em_ [link](u)')).toBe(false)
    expect(isHostile('```\n' + '['.repeat(100) + '\n```')).toBe(false)
  })
})

describe('safeUrl', () => {
  it('allows http(s), mailto and relative URLs only', () => {
    expect(safeUrl('https://a.b/c', 'href')).toBe('https://a.b/c')
    expect(safeUrl('mailto:x@y.z', 'href')).toBe('mailto:x@y.z')
    expect(safeUrl('/path?a=b:c', 'href')).toBe('/path?a=b:c')
    expect(safeUrl('#top', 'href')).toBe('#top')
    expect(safeUrl(' javascript:alert(1)', 'href')).toBe('')
    expect(safeUrl('vbscript:x', 'href')).toBe('')
    expect(safeUrl('data:image/png;base64,AAAA', 'href')).toBe('')
    expect(safeUrl('data:image/png;base64,AAAA', 'src')).toBe('data:image/png;base64,AAAA')
    expect(safeUrl('data:image/svg+xml;base64,AAAA', 'src')).toBe('')
    expect(safeUrl('mailto:x@y.z', 'src')).toBe('')
  })
})

describe('imageMode', () => {
  const page = 'http://127.0.0.1:8000'
  it('renders data and same-origin images, gates remote https ones behind a click, links the rest', () => {
    expect(imageMode('data:image/png;base64,AAAA', page)).toBe('inline')
    expect(imageMode('/files/a.png', page)).toBe('inline')
    expect(imageMode('http://127.0.0.1:8000/a.png', page)).toBe('inline')
    expect(imageMode('https://example.com/a.png', page)).toBe('click')
    expect(imageMode('HTTPS://EXAMPLE.com/a.png', page)).toBe('click')
    expect(imageMode('//example.com/a.png', page)).toBe('link')
    expect(imageMode('http://127.0.0.1:8001/a.png', page)).toBe('link')
    expect(imageMode('http://localhost:8000/a.png', page)).toBe('link')
    expect(imageMode('https://example.com/a.png', null)).toBe('click')
    expect(imageMode('/a.png', null)).toBe('link')
    expect(imageHost('https://user@example.com:8443/x')).toBe('example.com:8443')
    expect(imageHost('not a url')).toBe('not a url')
  })
})
