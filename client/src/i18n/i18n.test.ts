import { describe, expect, it } from 'vitest'
import { en } from './en'
import { zhCN } from './zh-CN'
import { pickLang, translate } from './index'

describe('i18n', () => {
  it('picks zh-CN for any Chinese browser language, else English', () => {
    expect(pickLang(['zh-TW', 'en'])).toBe('zh-CN')
    expect(pickLang(['zh'])).toBe('zh-CN')
    expect(pickLang(['fr-FR', 'en-GB'])).toBe('en')
    expect(pickLang(['de'])).toBe('en')
    expect(pickLang([])).toBe('en')
  })
  it('has a Chinese string for every English key', () => {
    expect(Object.keys(zhCN).sort()).toEqual(Object.keys(en).sort())
    for (const [k, v] of Object.entries(zhCN)) expect(v, k).not.toBe('')
  })
  it('fills placeholders', () => {
    expect(translate('en', 'settings.language')).toBe('Language')
    expect(translate('zh-CN', 'settings.language')).toBe('语言')
  })
})
