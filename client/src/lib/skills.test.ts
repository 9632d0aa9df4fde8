import { describe, expect, it } from 'vitest'
import { ApiError, errorMessage, headersFor } from './api'
import {
  APP_VIEWS,
  availabilityOf,
  CONFLICT_MESSAGE,
  invalidDeletePath,
  isManageable,
  isZipName,
  normaliseInvalid,
  pageCount,
  saveErrorMessage,
  skillsQueryString,
  sourceLabel,
} from './skills'

describe('skill market logic', () => {
  it('view order, query order and encoding', () => {
    expect(APP_VIEWS).toEqual(['chat', 'mcp-market', 'skill-market', 'memory', 'llm-settings', 'safety', 'usage'])
    expect(skillsQueryString({ page_size: 20, page: 2, query: 'code review', enabled: true, source: 'user' })).toBe(
      '?source=user&enabled=true&query=code+review&page=2&page_size=20',
    )
    expect(skillsQueryString({ query: '  ', page: 1 })).toBe('?page=1')
    expect(skillsQueryString({})).toBe('')
  })

  it('FormData gets no Content-Type, everything else JSON', () => {
    expect(headersFor(new FormData())).toEqual({})
    expect(headersFor({ a: 1 })).toEqual({ 'Content-Type': 'application/json' })
  })

  it('source labels, manageability, availability', () => {
    expect(sourceLabel('builtin')).toBe('Built-in')
    expect(sourceLabel('agent')).toBe('Created in chat')
    expect(sourceLabel('weird')).toBe('Uploaded')
    expect(isManageable({ mutable: false, source: 'builtin' })).toBe(false)
    expect(isManageable({ mutable: true, source: 'builtin' })).toBe(false)
    expect(isManageable({ mutable: true, source: 'agent' })).toBe(true)
    expect(availabilityOf({ enabled: false, availability: 'available' }).label).toBe('Disabled')
    expect(availabilityOf({ enabled: true, availability: 'missing_dependency' }).tone).toBe('amber')
  })

  it('invalid-package limits, builtin not deletable, delete path encoding', () => {
    const longDir = 'd'.repeat(90)
    const list = normaliseInvalid({
      [`agent:${longDir}`]: ['e1', 'e2', 'e3', 'e4'],
      'builtin:core': ['x'.repeat(300)],
      'mystery:a\u0001b': [],
      'user:sp ace/slash?': ['bad'],
    })
    expect(list[0].displayDir).toBe(`${'d'.repeat(80)}...`)
    expect(list[0].errors).toEqual(['e1', 'e2', 'e3'])
    expect(list[1].deletable).toBe(false)
    expect(list[1].errors[0]).toHaveLength(243)
    expect(list[2]).toMatchObject({ source: 'user', displayDir: 'a b', errors: ['Invalid Skill package'] })
    expect(invalidDeletePath(list[3])).toBe('/skills/invalid/user/sp%20ace%2Fslash%3F')
    const many = Object.fromEntries(Array.from({ length: 120 }, (_, i) => [`user:d${i}`, ['e']]))
    expect(normaliseInvalid(many)).toHaveLength(100)
  })

  it('zip check, page count ≥ 1, 409 gives the conflict message, other errors pass detail', () => {
    expect(isZipName('Pkg.ZIP ')).toBe(true)
    expect(isZipName('pkg.tar.gz')).toBe(false)
    expect(pageCount(0, 20)).toBe(1)
    expect(pageCount(41, 20)).toBe(3)
    expect(saveErrorMessage(new ApiError('x', 409, 'PUT', '/skills/a', 'Skill content changed since it was read'))).toEqual({
      message: CONFLICT_MESSAGE,
      conflict: true,
    })
    expect(saveErrorMessage(new ApiError('m', 422, 'PUT', '/skills/a', 'frontmatter name must match'))).toEqual({
      message: 'frontmatter name must match',
      conflict: false,
    })
  })
})

describe('HTTP error text', () => {
  it('prefers a string detail, then a 422 list, then text, then status', () => {
    expect(errorMessage(400, 'Bad Request', '{"detail":"nope"}')).toBe('nope')
    expect(
      errorMessage(422, '', '{"detail":[{"loc":["body","ollama"],"msg":"Field required"},{"loc":["q"],"msg":"bad"}]}'),
    ).toBe('body.ollama: Field required; q: bad')
    expect(errorMessage(500, 'Internal', 'plain text')).toBe('plain text')
    expect(errorMessage(502, 'Bad Gateway', '')).toBe('Bad Gateway')
    expect(errorMessage(503, '', '')).toBe('Request failed (503)')
  })
})
