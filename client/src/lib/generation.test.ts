import { describe, expect, it } from 'vitest'
import { isGenerating, startGenerating, stopGenerating } from './generation'

describe('generation state', () => {
  it('tracks flags per chat', () => {
    const a = startGenerating({}, 'a')
    const ab = startGenerating(a, 'b')
    expect(isGenerating(ab, 'a') && isGenerating(ab, 'b')).toBe(true)
    expect(startGenerating(ab, 'a')).toBe(ab)
  })

  it('a terminal event clears only its own chat', () => {
    const ab = startGenerating(startGenerating({}, 'a'), 'b')
    const b = stopGenerating(ab, 'a')
    expect(isGenerating(b, 'a')).toBe(false)
    expect(isGenerating(b, 'b')).toBe(true)
  })

  it('clearing an idle chat returns the same object', () => {
    const a = startGenerating({}, 'a')
    expect(stopGenerating(a, 'zzz')).toBe(a)
    expect(stopGenerating(a, null)).toBe(a)
  })
})
