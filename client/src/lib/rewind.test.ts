import { describe, expect, it } from 'vitest'
import { diffRows, userIndexFromEnd } from './rewind'

describe('rewind helpers', () => {
  it('finds the user message counted from the end', () => {
    const list = [{ role: 'user' }, { role: 'assistant' }, { role: 'user' }, { role: 'assistant' }]
    expect(userIndexFromEnd(list, 0)).toBe(2)
    expect(userIndexFromEnd(list, 1)).toBe(0)
    expect(userIndexFromEnd(list, 2)).toBe(-1)
    expect(userIndexFromEnd([], 0)).toBe(-1)
  })

  it('reads a unified diff into rows', () => {
    const rows = diffRows('--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n alpha\n-gamma\n+beta\n')
    expect(rows).toEqual([
      { op: 'hunk', text: '@@ -1,2 +1,2 @@' },
      { op: 'same', text: 'alpha' },
      { op: 'del', text: 'gamma' },
      { op: 'add', text: 'beta' },
    ])
  })
})
