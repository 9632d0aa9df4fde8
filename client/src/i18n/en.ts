// English strings: the source of truth for keys. Keys are grouped by screen ("settings.", "mcp.", ...).
// Every key must also be in zh-CN.ts (the type there makes a missing one a build error).
export const en = {
  'settings.language': 'Language',
  'lang.en': 'English',
  'lang.zh-CN': '简体中文',
  // MCP tool pinning (McpMarket, McpChanges)
  'mcp.pins.changed': 'changed — review',
  'mcp.pins.changedTitle': '{count} tools changed their description or schema and are disabled until you approve them',
  'mcp.pins.title': 'Review changed tools: {name}',
  'mcp.pins.intro':
    'These tools changed their description or input schema since you approved them. They stay disabled and hidden from the model until you approve the change.',
  'mcp.pins.description': 'Description',
  'mcp.pins.schema': 'Input schema',
  'mcp.pins.approve': 'Approve',
  'mcp.pins.approveAll': 'Approve all',
  'mcp.pins.close': 'Close',
  'mcp.pins.none': 'No changes wait for approval.',
  'mcp.pins.noOld': 'No approved version of this tool is known.',
  'mcp.pins.loading': 'Loading changes…',
} as const

export type MessageKey = keyof typeof en
