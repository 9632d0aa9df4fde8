// Simplified Chinese strings, one for every key of en.ts.
import type { MessageKey } from './en'

export const zhCN: Record<MessageKey, string> = {
  'settings.language': '语言',
  'lang.en': 'English',
  'lang.zh-CN': '简体中文',
  // Markdown rendering and chat comforts (md branch)
  'md.copyCode': '复制代码',
  'md.copy': '复制',
  'md.copied': '已复制',
  'chat.copyMessage': '复制消息',
  'chat.copied': '已复制',
  'chat.regenerate': '重新生成',
  'chat.duration': '{seconds} 秒',
  'chat.queued': '已排队——当前回复结束后发送',
  'chat.unqueue': '移除排队的消息',
  'chat.queueSend': '发送',
  'chat.stopHint': '按 Esc 停止',
  'chat.renderFailed': '此消息无法排版，以纯文本显示。',
}
