import { describe, expect, it } from 'vitest'
import { addCounts, dayBars, fillTone, formatCost, formatTokens, loadContext, parseCap, saveContext, usageFromEvent } from './usage'

describe('usage', () => {
  it('formats token counts with at most three figures', () => {
    expect(formatTokens(0)).toBe('0')
    expect(formatTokens(950)).toBe('950')
    expect(formatTokens(1000)).toBe('1K')
    expect(formatTokens(31_400)).toBe('31.4K')
    expect(formatTokens(128_000)).toBe('128K')
    expect(formatTokens(1_234_567)).toBe('1.2M')
  })

  it('reads a usage event and refuses a malformed one', () => {
    const ev = {
      event: 'usage',
      input_tokens: 100,
      cached_input_tokens: 40,
      output_tokens: 5,
      reasoning_tokens: 2,
      context_tokens: 105,
      context_window: 1000,
    }
    expect(usageFromEvent(ev)).toEqual({
      counts: { input: 100, cached: 40, output: 5, reasoning: 2 },
      context: { tokens: 105, window: 1000 },
    })
    expect(usageFromEvent({ ...ev, context_window: null })?.context.window).toBeNull()
    expect(usageFromEvent({ ...ev, input_tokens: 'x' })).toBeNull()
    expect(usageFromEvent({ ...ev, output_tokens: -1 })).toBeNull()
    expect(addCounts(undefined, { input: 1, cached: 0, output: 2, reasoning: 0 })).toEqual({ input: 1, cached: 0, output: 2, reasoning: 0 })
    expect(addCounts({ input: 1, cached: 1, output: 2, reasoning: 1 }, { input: 3, cached: 0, output: 4, reasoning: 1 })).toEqual({
      input: 4,
      cached: 1,
      output: 6,
      reasoning: 2,
    })
  })

  it('warns near the window', () => {
    expect(fillTone({ tokens: 10, window: null })).toBe('ok')
    expect(fillTone({ tokens: 79, window: 100 })).toBe('ok')
    expect(fillTone({ tokens: 80, window: 100 })).toBe('warn')
    expect(fillTone({ tokens: 95, window: 100 })).toBe('full')
  })

  it('keeps the last context reading per chat', () => {
    const items = new Map<string, string>()
    const stub = { getItem: (k: string) => items.get(k) ?? null, setItem: (k: string, v: string) => void items.set(k, v) }
    Object.defineProperty(globalThis, 'localStorage', { value: stub, configurable: true })
    saveContext('c1', { tokens: 31_400, window: 128_000 })
    expect(loadContext('c1')).toEqual({ tokens: 31_400, window: 128_000 })
    expect(loadContext('c2')).toBeNull()
    localStorage.setItem('cashcode.context.c3', '{not json')
    expect(loadContext('c3')).toBeNull()
  })

  it('formats costs, parses caps and scales the day bars', () => {
    expect(formatCost({ USD: 0.125, CNY: 0 })).toBe('0.13 USD')
    expect(formatCost({ USD: 0.004 })).toBe('0.0040 USD')
    expect(formatCost({})).toBe('')
    expect(parseCap('', true)).toBeNull()
    expect(parseCap(' 2000 ', true)).toBe(2000)
    expect(parseCap('1.5', true)).toBe('invalid')
    expect(parseCap('1.5', false)).toBe(1.5)
    expect(parseCap('-1', false)).toBe('invalid')
    const g = (key: string, input: number, output: number) => ({
      key,
      requests: 1,
      input_tokens: input,
      cached_input_tokens: 0,
      output_tokens: output,
      reasoning_tokens: 0,
      estimated_requests: 0,
      unpriced_requests: 0,
      cost: {},
    })
    expect(dayBars([g('2026-12-01', 10, 0), g('2026-12-02', 15, 5)])).toEqual([
      { key: '2026-12-01', tokens: 10, share: 0.5 },
      { key: '2026-12-02', tokens: 20, share: 1 },
    ])
  })
})
