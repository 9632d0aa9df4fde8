// A fake MCP server over the legacy HTTP+SSE transport (GET /sse + POST /message) with one tool,
// `echo`. It records the request headers so the tests can check the stored secret is sent.
import http from 'node:http'
import { randomUUID } from 'node:crypto'

export async function startFakeMcp() {
  const sessions = new Map()
  // `echoDescription` may be changed by a test: the next connect lists the changed tool.
  const state = { headers: [], calls: [], echoDescription: 'Echoes the given text back' }
  const send = (sid, msg) => {
    const res = sessions.get(sid)
    if (res) res.write(`event: message\ndata: ${JSON.stringify(msg)}\n\n`)
  }
  const server = http.createServer(async (req, res) => {
    const url = new URL(req.url, 'http://x')
    state.headers.push(req.headers)
    if (req.method === 'GET' && url.pathname === '/sse') {
      const sid = randomUUID()
      res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache', Connection: 'keep-alive' })
      res.write(`event: endpoint\ndata: /message?sessionId=${sid}\n\n`)
      sessions.set(sid, res)
      const ka = setInterval(() => res.write(': ping\n\n'), 5000)
      res.on('close', () => {
        clearInterval(ka)
        sessions.delete(sid)
      })
      return
    }
    if (req.method === 'POST' && url.pathname === '/message') {
      const sid = url.searchParams.get('sessionId')
      let body = ''
      for await (const c of req) body += c
      if (!sessions.has(sid)) {
        res.writeHead(404)
        res.end('unknown session')
        return
      }
      res.writeHead(202)
      res.end('Accepted')
      let msg
      try {
        msg = JSON.parse(body)
      } catch {
        return
      }
      if (msg.id === undefined) return
      switch (msg.method) {
        case 'initialize':
          send(sid, {
            jsonrpc: '2.0',
            id: msg.id,
            result: {
              protocolVersion: msg.params?.protocolVersion ?? '2025-11-25',
              capabilities: { tools: {} },
              serverInfo: { name: 'fake-mcp', version: '1.0.0' },
            },
          })
          break
        case 'tools/list':
          send(sid, {
            jsonrpc: '2.0',
            id: msg.id,
            result: {
              tools: [
                {
                  name: 'echo',
                  description: state.echoDescription,
                  inputSchema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] },
                },
              ],
            },
          })
          break
        case 'tools/call':
          state.calls.push(msg.params)
          send(sid, {
            jsonrpc: '2.0',
            id: msg.id,
            result: { content: [{ type: 'text', text: `echo: ${msg.params?.arguments?.text ?? ''}` }] },
          })
          break
        case 'ping':
          send(sid, { jsonrpc: '2.0', id: msg.id, result: {} })
          break
        default:
          send(sid, { jsonrpc: '2.0', id: msg.id, error: { code: -32601, message: 'Method not found' } })
      }
      return
    }
    res.writeHead(404)
    res.end()
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address()
  return {
    state,
    url: `http://127.0.0.1:${port}/sse`,
    close: () =>
      new Promise((resolve) => {
        for (const r of sessions.values()) r.end()
        server.closeAllConnections?.()
        server.close(() => resolve())
      }),
  }
}
