// A fake OpenAI-compatible LLM for the end-to-end tests. Replies are scripted by markers in the
// last user message:
//   [tool]  first call streams two save_memory tool calls; after the tool results, a short answer
//   [slow]  a long answer streamed slowly (cancel / reconnect tests)
//   [fail]  HTTP 500 (the turn fails; the client shows the error inline)
//   [escalate-lines N]  one escalated `exec` of an N-line script ending `echo end-of-command`;
//           after the result, "Result: <tool text>"
//   [exec] CMD  one sandboxed `exec` call of CMD (the rest of the line); after it, "Result: …"
//   [escalate] CMD  one `exec` call of CMD (the rest of the line) asking to leave the sandbox
//           (`sandbox_permissions: require_escalated`); after the result, "Result: <tool text>"
//   [wait]  15 s of empty heartbeat deltas before any content (cancel before any text)
//   [image] IMAGE_REPLY: a remote image, a data image and a formula (the CSP and image tests)
//   else    a Markdown answer with a heading, a table and a fenced code block
import http from 'node:http'

export const DEFAULT_REPLY = [
  '## Fake answer',
  '',
  'Here is a **table** and some `inline code`:',
  '',
  '| Tool | Status |',
  '|------|-------:|',
  '| save_memory | ok |',
  '| web_fetch | idle |',
  '',
  '```js',
  'const answer = 42 // the answer',
  'console.log("hi")',
  '```',
  '',
  '- first item',
  '- second item',
].join('\n')

export const SLOW_WORDS = Array.from({ length: 40 }, (_, i) => `w${i}`)
export const SLOW_REPLY = SLOW_WORDS.join(' ')
export const TOOL_REPLY = 'Saved **2** facts to memory.'
/** Where IMAGE_REPLY's remote image lives (the browser test routes it; nothing resolves it). */
export const REMOTE_IMAGE = 'https://images.example.test/cat.png?leak=secret-words'
export const IMAGE_REPLY = [
  `A remote picture: ![a cat](${REMOTE_IMAGE})`,
  '',
  'An inline dot: ![dot](data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==)',
  '',
  'And a formula: $E = mc^2$',
].join('\n')

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

function chunk(delta, finish = null) {
  return `data: ${JSON.stringify({ id: 'cmpl-1', object: 'chat.completion.chunk', model: 'fake-model', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`
}

function lastUserText(messages) {
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i]
    if (m.role === 'user') return typeof m.content === 'string' ? m.content : JSON.stringify(m.content)
  }
  return ''
}

export async function startFakeLlm() {
  const state = { requests: [], aborted: 0, completed: 0 }
  const server = http.createServer(async (req, res) => {
    const url = new URL(req.url, 'http://x')
    if (req.method === 'GET' && url.pathname.endsWith('/models')) {
      res.writeHead(200, { 'Content-Type': 'application/json' })
      res.end(JSON.stringify({ object: 'list', data: [{ id: 'fake-model', object: 'model' }] }))
      return
    }
    if (req.method !== 'POST' || !url.pathname.endsWith('/chat/completions')) {
      res.writeHead(404, { 'Content-Type': 'application/json' })
      res.end('{"error":{"message":"not found"}}')
      return
    }
    let body = ''
    for await (const c of req) body += c
    let parsed
    try {
      parsed = JSON.parse(body)
    } catch {
      res.writeHead(400)
      res.end('bad json')
      return
    }
    state.requests.push({ headers: req.headers, body: parsed })
    const messages = Array.isArray(parsed.messages) ? parsed.messages : []
    const text = lastUserText(messages)
    const afterTools = messages.length > 0 && messages[messages.length - 1].role === 'tool'
    let closed = false
    res.on('close', () => {
      if (!res.writableFinished) {
        closed = true
        state.aborted += 1
      }
    })

    if (text.includes('[fail]')) {
      res.writeHead(500, { 'Content-Type': 'application/json' })
      res.end(JSON.stringify({ error: { message: 'the fake model exploded', type: 'server_error' } }))
      return
    }

    const plan = []
    const escalate = /\[escalate\] ?(.*)/.exec(text)
    const lines = /\[escalate-lines (\d+)\]/.exec(text)
    const confined = /\[exec\] ?(.*)/.exec(text)
    if (lines && !afterTools) {
      const n = Math.max(1, Math.min(200, Number(lines[1])))
      const body = Array.from({ length: n - 1 }, (_, i) => `echo step-${i + 1}`)
      const args = { command: [...body, 'echo end-of-command'].join('\n'), sandbox_permissions: 'require_escalated', justification: 'A long script.' }
      plan.push({ tools: true, calls: [[`call_lines_${state.requests.length}`, 'exec', JSON.stringify(args)]] })
    } else if (lines) {
      plan.push({ text: `Result: ${messages[messages.length - 1].content}`, size: 16, delay: 5 })
    } else if (confined && !afterTools) {
      plan.push({ tools: true, calls: [[`call_exec_${state.requests.length}`, 'exec', JSON.stringify({ command: confined[1].trim() })]] })
    } else if (confined) {
      plan.push({ text: `Result: ${messages[messages.length - 1].content}`, size: 16, delay: 5 })
    } else if (escalate && !afterTools) {
      const args = { command: escalate[1].trim(), sandbox_permissions: 'require_escalated', justification: 'The task needs files outside the workspace.' }
      plan.push({ tools: true, calls: [[`call_esc_${state.requests.length}`, 'exec', JSON.stringify(args)]] })
    } else if (escalate) {
      plan.push({ text: `Result: ${messages[messages.length - 1].content}`, size: 16, delay: 5 })
    } else if (text.includes('[tool]') && !afterTools) {
      plan.push({ tools: true })
    } else if (text.includes('[tool]')) {
      plan.push({ text: TOOL_REPLY, size: 8, delay: 15 })
    } else if (text.includes('[wait]')) {
      plan.push({ wait: 15_000 })
      plan.push({ text: 'late answer', size: 4, delay: 10 })
    } else if (text.includes('[image]')) {
      plan.push({ text: IMAGE_REPLY, size: 16, delay: 10 })
    } else if (text.includes('[slow]')) {
      plan.push({ words: SLOW_WORDS, delay: 120 })
    } else {
      plan.push({ text: DEFAULT_REPLY, size: 12, delay: 25 })
    }

    if (parsed.stream === false) {
      // Non-streaming fallback, in case the server asks for it.
      const step = plan[0]
      const message = step.tools
        ? {
            role: 'assistant',
            content: null,
            tool_calls: step.calls
              ? step.calls.map(([id, name, args]) => ({ id, type: 'function', function: { name, arguments: args } }))
              : [
                  { id: 'call_1', type: 'function', function: { name: 'save_memory', arguments: '{"content":"The user likes green tea."}' } },
                  { id: 'call_2', type: 'function', function: { name: 'save_memory', arguments: '{"content":"The user works on CashCode."}' } },
                ],
          }
        : { role: 'assistant', content: step.text ?? (step.words ?? []).join(' ') }
      if (step.wait) await sleep(step.wait)
      res.writeHead(200, { 'Content-Type': 'application/json' })
      res.end(JSON.stringify({ id: 'c', object: 'chat.completion', model: 'fake-model', choices: [{ index: 0, message, finish_reason: step.tools ? 'tool_calls' : 'stop' }] }))
      state.completed += 1
      return
    }

    res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache', Connection: 'keep-alive' })
    const write = (s) => {
      if (!closed) res.write(s)
    }
    write(chunk({ role: 'assistant', content: '' }))
    for (const step of plan) {
      if (closed) break
      if (step.wait) {
        const until = Date.now() + step.wait
        // Empty deltas, as providers send while a model thinks. (SSE comment keep-alives would
        // not wake the server's reader, so it could not notice a cancel until real data came.)
        while (!closed && Date.now() < until) {
          write(chunk({}))
          await sleep(100)
        }
      } else if (step.tools) {
        const calls = step.calls ?? [
          ['call_1', 'save_memory', '{"content": "The user likes green tea."}'],
          ['call_2', 'save_memory', '{"content": "The user works on CashCode."}'],
        ]
        for (let i = 0; i < calls.length; i++) {
          const [id, name, args] = calls[i]
          write(chunk({ tool_calls: [{ index: i, id, type: 'function', function: { name, arguments: '' } }] }))
          for (let p = 0; p < args.length; p += 7) {
            write(chunk({ tool_calls: [{ index: i, function: { arguments: args.slice(p, p + 7) } }] }))
            await sleep(5)
          }
          await sleep(150)
        }
        write(chunk({}, 'tool_calls'))
      } else if (step.words) {
        for (let i = 0; i < step.words.length && !closed; i++) {
          write(chunk({ content: (i ? ' ' : '') + step.words[i] }))
          await sleep(step.delay)
        }
        write(chunk({}, 'stop'))
      } else {
        for (let p = 0; p < step.text.length && !closed; p += step.size) {
          write(chunk({ content: step.text.slice(p, p + step.size) }))
          await sleep(step.delay)
        }
        write(chunk({}, 'stop'))
      }
    }
    if (!closed) {
      write('data: [DONE]\n\n')
      res.end()
      state.completed += 1
    }
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address()
  return {
    state,
    url: `http://127.0.0.1:${port}/v1`,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections?.()
        server.close(() => resolve())
      }),
  }
}

/** A model scripted by one function: each chat completion streams the single delta that
 * `deltaFor(messages)` returns (`{content}` or `{tool_calls}`) and finishes; `requests` holds
 * every request body. For tests whose turns follow one fixed plan. */
export async function startScriptedModel(deltaFor) {
  const requests = []
  const server = http.createServer(async (req, res) => {
    const url = new URL(req.url, 'http://x')
    if (req.method === 'GET' && url.pathname.endsWith('/models')) {
      res.writeHead(200, { 'Content-Type': 'application/json' })
      res.end(JSON.stringify({ object: 'list', data: [{ id: 'fake-model', object: 'model' }] }))
      return
    }
    let body = ''
    for await (const c of req) body += c
    const parsed = JSON.parse(body)
    requests.push(parsed)
    // `usage` (OpenAI's shape) goes out as its own chunk with empty `choices`, as real
    // providers send it when asked with `stream_options.include_usage`.
    const { usage, ...delta } = deltaFor(parsed.messages)
    res.writeHead(200, { 'Content-Type': 'text/event-stream' })
    res.write(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { role: 'assistant', ...delta } }] })}\n\n`)
    const finish = delta.tool_calls ? 'tool_calls' : 'stop'
    res.write(`data: ${JSON.stringify({ choices: [{ index: 0, delta: {}, finish_reason: finish }] })}\n\n`)
    if (usage && parsed.stream_options?.include_usage) res.write(`data: ${JSON.stringify({ choices: [], usage })}\n\n`)
    res.end('data: [DONE]\n\n')
  })
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => {
      const url = `http://127.0.0.1:${server.address().port}/v1`
      resolve({ url, requests, close: () => new Promise((r) => server.close(r)) })
    }),
  )
}
