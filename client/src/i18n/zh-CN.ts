// Simplified Chinese strings, one for every key of en.ts.
import type { MessageKey } from './en'

export const zhCN: Record<MessageKey, string> = {
  'settings.language': '语言',
  'lang.en': 'English',
  'lang.zh-CN': '简体中文',
  // MCP 工具固定（McpMarket、McpChanges）
  'mcp.pins.changed': '已变更 — 请审核',
  'mcp.pins.changedTitle': '{count} 个工具的描述或参数结构已变更，批准前保持停用',
  'mcp.pins.title': '审核已变更的工具：{name}',
  'mcp.pins.intro': '这些工具在你批准之后修改了描述或输入参数结构。在你批准这些变更之前，它们保持停用，模型也看不到它们。',
  'mcp.pins.description': '描述',
  'mcp.pins.schema': '输入参数结构',
  'mcp.pins.approve': '批准',
  'mcp.pins.approveAll': '全部批准',
  'mcp.pins.close': '关闭',
  'mcp.pins.none': '没有待批准的变更。',
  'mcp.pins.noOld': '没有该工具已批准的版本记录。',
  'mcp.pins.loading': '正在加载变更…',
}
