// Simplified Chinese strings, one for every key of en.ts.
import type { MessageKey } from './en'

export const zhCN: Record<MessageKey, string> = {
  'settings.language': '语言',
  'lang.en': 'English',
  'lang.zh-CN': '简体中文',
  // MCP OAuth (McpMarket)
  'mcp.auth.required': '需要授权',
  'mcp.auth.authorized': '已授权',
  'mcp.auth.authorize': '授权',
  'mcp.auth.waiting': '正在等待授权…',
  'mcp.auth.signOut': '退出登录',
  'mcp.auth.timedOut': '授权未完成，请重试。',
}
