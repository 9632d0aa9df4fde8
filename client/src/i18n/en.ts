// English strings: the source of truth for keys. Keys are grouped by screen ("settings.", "mcp.", ...).
// Every key must also be in zh-CN.ts (the type there makes a missing one a build error).
export const en = {
  'settings.language': 'Language',
  'lang.en': 'English',
  'lang.zh-CN': '简体中文',
  // Markdown rendering and chat comforts (md branch)
  'md.copyCode': 'Copy code',
  'md.copy': 'Copy',
  'md.copied': 'Copied',
  'chat.copyMessage': 'Copy message',
  'chat.copied': 'Copied',
  'chat.regenerate': 'Regenerate',
  'chat.duration': '{seconds} s',
  'chat.queued': 'Queued — sends when the current reply ends',
  'chat.unqueue': 'Remove queued message',
  'chat.queueSend': 'Send',
  'chat.stopHint': 'Esc to stop',
  'chat.renderFailed': 'This message could not be formatted; showing plain text.',
} as const

export type MessageKey = keyof typeof en
