// Simplified Chinese strings, one for every key of en.ts.
import type { MessageKey } from './en'

export const zhCN: Record<MessageKey, string> = {
  'settings.language': '语言',
  'lang.en': 'English',
  'lang.zh-CN': '简体中文',
}
