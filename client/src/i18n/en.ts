// English strings: the source of truth for keys. Keys are grouped by screen ("settings.", "mcp.", ...).
// Every key must also be in zh-CN.ts (the type there makes a missing one a build error).
export const en = {
  'settings.language': 'Language',
  'lang.en': 'English',
  'lang.zh-CN': '简体中文',

  // Chat history paging (long chats)
  'chat.history.older': 'Load earlier messages',
  'chat.history.loading': 'Loading earlier messages…',
} as const

export type MessageKey = keyof typeof en
