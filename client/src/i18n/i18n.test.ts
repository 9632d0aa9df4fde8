import { afterEach, describe, expect, it } from 'vitest'
import { en, type MessageKey } from './en'
import { zhCN } from './zh-CN'
import { currentLang, formatNumber, pickLang, setCurrentLang, tr, translate } from './index'
import { relativeTime } from '../lib/time'
import { availabilityOf, saveErrorMessage } from '../lib/skills'
import { providerErrors } from '../lib/models'
import { ApiError, errorMessage } from '../lib/api'
import { addSelection, checkSend } from '../lib/selections'
import { serverKeyError } from '../lib/llmSettings'
import { initialState, reduce } from '../lib/chatStore'

/** Keys whose Chinese text is rightly the same as the English (names, numbers only). */
const SAME_IN_BOTH = new Set<MessageKey>(['lang.en', 'lang.zh-CN', 'composer.catMcp', 'models.ollama', 'skills.page', 'transfer.format.md', 'transfer.source.chatgpt', 'transfer.source.open_webui', 'usage.meter'])

/**
 * Latin words allowed in Chinese text: product, feature, protocol and format names, file names
 * (MEMORY.md), settings (SKILL_EVOLUTION_ENABLED), tool ids (save_memory), key names (Esc) and placeholders.
 */
const LATIN_OK =
  /CashCode|LLM|MiB|token|OpenAI|OAuth|Landlock|seccomp|\bexec\b|Streamable|Ollama|English|Markdown|JSONL|ATIF|ChatGPT|Open WebUI|conversations\.json|\.jsonl|Esc|Dream|JSON|HTTPS?|MCP|SSE|API|URL|ID|KB|http\(s\)|\.zip|[\w-]+\.md\b|\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b|\b[a-z]+(?:_[a-z]+)+\b|\{\w+\}/g

describe('i18n', () => {
  afterEach(() => setCurrentLang('en'))

  it('picks zh-CN for any Chinese browser language, else English', () => {
    expect(pickLang(['zh-TW', 'en'])).toBe('zh-CN')
    expect(pickLang(['zh'])).toBe('zh-CN')
    expect(pickLang(['fr-FR', 'en-GB'])).toBe('en')
    expect(pickLang(['de'])).toBe('en')
    expect(pickLang([])).toBe('en')
  })

  it('has a Chinese string for every English key, and no other', () => {
    expect(Object.keys(zhCN).sort()).toEqual(Object.keys(en).sort())
    for (const [k, v] of Object.entries(zhCN)) expect(v.trim(), k).not.toBe('')
  })

  it('translates every key that is not a name, with no English words left in the Chinese', () => {
    for (const key of Object.keys(en) as MessageKey[]) {
      const zh = zhCN[key]
      if (SAME_IN_BOTH.has(key)) {
        expect(zh, key).toBe(en[key])
        continue
      }
      expect(zh, key).not.toBe(en[key])
      expect(zh.replace(LATIN_OK, ''), key).not.toMatch(/[A-Za-z]{2,}/)
      // Chinese text, unless the English is only punctuation around placeholders
      if (/[A-Za-z]{2,}/.test(en[key].replace(LATIN_OK, ''))) expect(zh, key).toMatch(/[\u4e00-\u9fff]/)
    }
  })

  it('keeps the same placeholders in both languages', () => {
    const names = (s: string) => [...s.matchAll(/\{(\w+)\}/g)].map((m) => m[1]).sort()
    for (const key of Object.keys(en) as MessageKey[]) expect(names(zhCN[key]), key).toEqual(names(en[key]))
  })

  it('fills placeholders, formatting numbers for the language', () => {
    expect(translate('en', 'settings.language')).toBe('Language')
    expect(translate('zh-CN', 'settings.language')).toBe('语言')
    expect(translate('en', 'skills.total', { count: 12345 })).toBe('12,345 total')
    expect(translate('zh-CN', 'skills.total', { count: 12345 })).toBe('共 12,345 个')
    expect(translate('zh-CN', 'mcp.confirmDelete', { name: 'files' })).toContain('files')
    expect(translate('en', 'chat.removeChip', {})).toBe('Remove {name}')
    expect(formatNumber('zh-CN', 1.5, { minimumFractionDigits: 1 })).toBe('1.5')
    // plural forms where the language has them
    expect(translate('en', 'mcp.tools', { count: 1 })).toBe('1 tool')
    expect(translate('en', 'mcp.tools', { count: 3 })).toBe('3 tools')
    expect(translate('zh-CN', 'mcp.tools', { count: 1 })).toBe('1 个工具')
  })

  it('words lib messages in the language on screen', () => {
    expect(currentLang()).toBe('en')
    const now = Date.parse('2026-11-30T12:00:00Z')
    setCurrentLang('zh-CN')
    expect(tr('sidebar.newChat')).toBe('新建对话')
    expect(relativeTime('2026-11-30T11:59:40Z', now)).toBe('刚刚')
    expect(relativeTime('2026-11-30T11:55:00Z', now)).toBe('5 分钟前')
    expect(relativeTime('2026-11-30T09:00:00Z', now)).toBe('3 小时前')
    expect(relativeTime('2026-11-28T12:00:00Z', now)).toBe('2 天前')
    expect(relativeTime('2026-01-05T12:00:00Z', now)).toBe('2026/1/5')
    expect(relativeTime('2026-01-05T12:00:00Z', now, 'en')).toBe('1/5/2026')
    expect(availabilityOf({ enabled: false, availability: 'available' }).label).toBe('已停用')
    expect(checkSend('  ', { provider: 'ollama', model: 'm' })).toEqual({ ok: false, reason: '请输入消息' })
    expect(() => addSelection([], { kind: 'skill', id: 'Bad Id' })).toThrow('技能 ID 无效')
    expect(errorMessage(502, '', '')).toBe('请求失败（502）')
    expect(saveErrorMessage(new ApiError('x', 409, 'PUT', '/skills/a')).message).toBe('技能已在别处被修改，请重新加载后再保存。')
    expect(
      providerErrors({ models: [], providers: { openai_compatible: { ready: false, error: 'connection refused' }, ollama: { ready: false, error: 'off' } } }),
    ).toBe('通用 API：connection refused；Ollama：off')
  })

  it('words chat notices and banners in Chinese, keeping the server detail', () => {
    setCurrentLang('zh-CN')
    let s = reduce(initialState, { type: 'ws', ev: { event: 'ready', chat_id: 'c1' } })
    s = reduce(s, { type: 'sent', chatId: 'c1', content: 'hi', selections: [] })
    s = reduce(s, { type: 'ws', ev: { event: 'error', chat_id: 'c1', detail: 'cancelled' } })
    // the stop notice keeps its key, so a later language switch re-words it
    expect(s.chats.c1.messages.at(-1)).toMatchObject({ content: '已停止生成', textKey: 'chat.stopped' })
    s = reduce(s, { type: 'sent', chatId: 'c2', content: 'x', selections: [] })
    s = reduce(s, { type: 'ws', ev: { event: 'error', chat_id: 'c2', detail: 'LLM down' } })
    expect(s.banner).toBe('另一个对话：LLM down')
  })

  it('shows server details verbatim and translates only the words around them', () => {
    setCurrentLang('zh-CN')
    // a server detail passes through untouched
    expect(errorMessage(400, 'Bad Request', '{"detail":"skill name already exists"}')).toBe('skill name already exists')
    // a server message the client recognises is said in Chinese; in English it stays verbatim
    const detail = 'the endpoint changed to http://x:1; enter its API key again'
    const e = new ApiError(detail, 422, 'PUT', '/settings/llm', detail)
    expect(serverKeyError(e)).toBe('接口地址已改为 http://x:1，请重新输入它的 API 密钥')
    setCurrentLang('en')
    expect(serverKeyError(e)).toBe(detail)
  })
})
