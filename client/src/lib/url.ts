// The one check that a typed address is an http(s) URL with a host (LLM and MCP settings).

export function isHttpUrl(value: string): boolean {
  try {
    const u = new URL(value.trim())
    return (u.protocol === 'http:' || u.protocol === 'https:') && Boolean(u.hostname)
  } catch {
    return false
  }
}
