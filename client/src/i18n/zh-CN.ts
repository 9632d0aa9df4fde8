// Simplified Chinese strings, one for every key of en.ts.
import type { MessageKey } from './en'

export const zhCN: Record<MessageKey, string> = {
  'settings.language': '语言',
  'lang.en': 'English',
  'lang.zh-CN': '简体中文',

  // 聊天记录分页（长对话）
  'chat.history.older': '加载更早的消息',
  'chat.history.loading': '正在加载更早的消息…',
}
