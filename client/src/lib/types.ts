// Wire types shared by the screens (docs/http-api.md, docs/ws-protocol.md).

export type Provider = 'openai_compatible' | 'ollama'

export interface SessionInfo {
  chat_id: string
  title: string
  updated_at: string
  /** the directory the chat works in, when it was bound to a project (docs/http-api.md §11) */
  project?: string
  /** an approval request of this chat waits for the owner */
  waiting?: boolean
  /** a turn of this chat runs: `attach` with this `after_seq` replays it from its start */
  turn_seq?: number
}

/** `GET /api/settings/projects`. */
export interface ProjectSettings {
  roots: string[]
  env_roots: string[]
  allowed: string[]
  workspace: string
}

export interface SkillReceipt {
  name: string
  label?: string
}
export interface McpReceipt {
  server: string
  label?: string
}

export interface HistoryMessage {
  role: string
  content: string
  mentioned_skills?: unknown
  selected_mcp_connectors?: unknown
  /** `tools=1`: a tool step's calls (role `tool_calls`) */
  tool_calls?: { call_id?: unknown; tool_name?: unknown; arguments?: unknown }[]
  /** `tools=1`: a result (role `tool`), with how it ended and ran when not plainly */
  call_id?: unknown
  tool_name?: unknown
  outcome?: unknown
  ran?: unknown
  /** `tools=1`: when a turn was stored (`YYYY-MM-DD HH:MM`, the server's local time) */
  timestamp?: unknown
  /** an assistant turn of a thinking model: its reasoning, and how long it took */
  reasoning_content?: unknown
  reasoning_ms?: unknown
  /** an answer the server wrote in the model's place: its code and fields */
  note?: unknown
  /** `tools=1`: the record's cursor in history.jsonl (what search hits name) */
  cursor?: unknown
}

/** `GET /api/sessions/{id}/messages?limit=`: one page of items and where it sits. */
export interface MessagesPage {
  chat_id: string
  messages: HistoryMessage[]
  start?: number
  total?: number
}

export interface LlmSettings {
  configured: boolean
  openai_compatible: { base_url: string; ready: boolean; api_key_configured: boolean }
  ollama: { base_url: string; ready: boolean }
}

export interface ModelEntry {
  provider: Provider
  id: string
}

export interface ModelCatalog {
  models: ModelEntry[]
  providers: Partial<Record<Provider, { ready: boolean; error: string | null }>>
}

export type McpStatus = 'disconnected' | 'connecting' | 'connected' | 'error'

export interface McpServer {
  name: string
  display_name: string
  description: string
  type: string
  url: string
  headers: Record<string, string>
  builtin: boolean
  mutable: boolean
  status: McpStatus
  connected: boolean
  status_error: string | null
  tool_count: number
  /** OAuth: absent when the server does not use it. Never a token. */
  auth?: 'required' | 'authorized' | null
  /** Tools held by pinning (changed since approved); absent when none. */
  pending_changes?: number
}

export interface McpTool {
  name: string
  original_name?: string
  description?: string
  callable: boolean
  /** `pending_approval` for a tool held by pinning. */
  status?: string
}

export interface McpToolsResponse {
  server: string
  tools: McpTool[]
  status: McpStatus
  tool_count: number
}

export type SkillSource = 'builtin' | 'user' | 'agent'

export interface Skill {
  name: string
  display_name: string
  description: string
  version: number | string
  tags: string[]
  always: boolean
  source: SkillSource
  enabled: boolean
  availability: 'available' | 'missing_dependency' | 'disabled' | 'invalid'
  missing: string[]
  mutable: boolean
}

export interface SkillPage {
  items: Skill[]
  total: number
  page: number
  page_size: number
  invalid?: Record<string, string[]>
}

export interface SkillContent {
  name: string
  display_name: string
  content: string
  hash: string
  source: SkillSource
  mutable: boolean
}
