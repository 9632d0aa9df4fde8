// English strings: the source of truth for keys. Keys are grouped by screen ("settings.", "mcp.", ...).
// Every key must also be in zh-CN.ts (the type there makes a missing one a build error).
export const en = {
  'settings.language': 'Language',
  'lang.en': 'English',
  'lang.zh-CN': '简体中文',
  // MCP OAuth (McpMarket)
  'mcp.auth.required': 'Authorization needed',
  'mcp.auth.authorized': 'Authorized',
  'mcp.auth.authorize': 'Authorize',
  'mcp.auth.waiting': 'Waiting for authorization…',
  'mcp.auth.signOut': 'Sign out',
  'mcp.auth.timedOut': 'Authorization was not completed. Try again.',
} as const

export type MessageKey = keyof typeof en
