import { describe, expect, it } from 'vitest'
import { diffStats, lineDiff, MAX_CELLS, splitLines, type DiffLine } from './diff'

/** Rebuilds both sides from a diff: every diff must reproduce its inputs exactly. */
function sides(d: DiffLine[]): [string[], string[]] {
  return [d.filter((l) => l.op !== 'add').map((l) => l.text), d.filter((l) => l.op !== 'del').map((l) => l.text)]
}

const compact = (d: DiffLine[]) => d.map((l) => `${l.op === 'same' ? ' ' : l.op === 'add' ? '+' : '-'}${l.text}`)

describe('lineDiff', () => {
  it('splits lines without a phantom last line and reads CRLF as LF', () => {
    expect(splitLines('')).toEqual([])
    expect(splitLines('a\n')).toEqual(['a'])
    expect(splitLines('a\r\nb')).toEqual(['a', 'b'])
    expect(splitLines('a\n\n')).toEqual(['a', ''])
  })

  it('finds the minimal edit between two memory files', () => {
    const d = lineDiff('# Memory\n- name: Ana\n- likes tea\n- city: Porto\n', '# Memory\n- name: Ana\n- likes green tea\n- city: Porto\n- plays chess\n')
    expect(compact(d)).toEqual([' # Memory', ' - name: Ana', '-- likes tea', '+- likes green tea', ' - city: Porto', '+- plays chess'])
    expect(diffStats(d)).toEqual({ added: 2, removed: 1 })
    expect(d.find((l) => l.text === '- plays chess')).toEqual({ op: 'add', text: '- plays chess', newNo: 5 })
    expect(d.find((l) => l.text === '- city: Porto')).toEqual({ op: 'same', text: '- city: Porto', oldNo: 4, newNo: 4 })
  })

  it('handles empty sides and identical texts', () => {
    expect(compact(lineDiff('', 'a\nb'))).toEqual(['+a', '+b'])
    expect(compact(lineDiff('a\nb', ''))).toEqual(['-a', '-b'])
    expect(diffStats(lineDiff('same\n', 'same\n'))).toEqual({ added: 0, removed: 0 })
  })

  it('keeps the longest common subsequence in the middle', () => {
    const d = lineDiff('a\nb\nc\nd\ne', 'a\nc\nx\nd\ny\ne')
    expect(d.filter((l) => l.op === 'same').map((l) => l.text)).toEqual(['a', 'c', 'd', 'e'])
    expect(diffStats(d)).toEqual({ added: 2, removed: 1 })
  })

  it('reproduces both inputs for random texts', () => {
    let seed = 7
    const rnd = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648
    for (let n = 0; n < 300; n++) {
      const a = Array.from({ length: Math.floor(rnd() * 12) }, () => 'abcd'[Math.floor(rnd() * 4)])
      const b = Array.from({ length: Math.floor(rnd() * 12) }, () => 'abcd'[Math.floor(rnd() * 4)])
      const d = lineDiff(a.join('\n'), b.join('\n'))
      expect(sides(d)).toEqual([a, b])
    }
  })

  it('stays bounded on huge inputs and is still a correct diff', () => {
    const side = Math.ceil(Math.sqrt(MAX_CELLS)) + 10
    const a = Array.from({ length: side }, (_, i) => `old ${i}`)
    const b = Array.from({ length: side }, (_, i) => `new ${i}`)
    const t0 = Date.now()
    const d = lineDiff(['head', ...a, 'tail'].join('\n'), ['head', ...b, 'tail'].join('\n'))
    expect(Date.now() - t0).toBeLessThan(2000)
    expect(sides(d)).toEqual([['head', ...a, 'tail'], ['head', ...b, 'tail']])
    expect(diffStats(d)).toEqual({ added: side, removed: side })
  })
})

import { byteLength, dreamBusy, versionTime } from './memory'

describe('memory helpers', () => {
  it('counts bytes like the server limit and reads skill version times', () => {
    expect(byteLength('字a')).toBe(4)
    expect(versionTime('1796002891806-1bd54721')).toBe(1796002891.806)
    expect(versionTime('../x')).toBeNull()
    expect(dreamBusy(null)).toBe(false)
  })
})
