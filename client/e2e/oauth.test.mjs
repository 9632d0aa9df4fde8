// Browser test of MCP OAuth: a loopback fake that is both a Streamable HTTP MCP server
// (401 without a token) and its OAuth provider (metadata, registration, an authorization page
// that redirects at once, a token endpoint checking PKCE S256). In the MCP market: Connect shows
// "Authorization needed", Authorize opens the provider in a new window, its redirect lands on
// CashCode's callback, the row turns "Authorized" and connects; Sign out forgets the token.
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import http from 'node:http'
import { after, before, describe, it } from 'node:test'
import { launchBrowser, screenshot, startServer, until } from './harness.mjs'

const TOKEN = 'e2e-oauth-access-token-5521'

function startProvider() {
  const codes = new Map()
  const seen = { authorize: 0, token: 0 }
  const srv = http.createServer((req, res) => {
    let body = ''
    req.on('data', (d) => (body += d))
    req.on('end', () => {
      const base = `http://127.0.0.1:${srv.address().port}`
      const url = new URL(req.url, base)
      const json = (status, v, headers = {}) => {
        res.writeHead(status, { 'Content-Type': 'application/json', ...headers })
        res.end(JSON.stringify(v))
      }
      if (req.method === 'GET' && url.pathname === '/.well-known/oauth-protected-resource/mcp') {
        return json(200, { resource: `${base}/mcp`, authorization_servers: [base] })
      }
      if (req.method === 'GET' && url.pathname === '/.well-known/oauth-authorization-server') {
        return json(200, {
          issuer: base,
          authorization_endpoint: `${base}/authorize`,
          token_endpoint: `${base}/token`,
          registration_endpoint: `${base}/register`,
          response_types_supported: ['code'],
          code_challenge_methods_supported: ['S256'],
          token_endpoint_auth_methods_supported: ['none'],
        })
      }
      if (req.method === 'POST' && url.pathname === '/register') return json(201, { client_id: 'e2e-client' })
      if (req.method === 'GET' && url.pathname === '/authorize') {
        seen.authorize++
        const code = `code-${seen.authorize}`
        codes.set(code, url.searchParams.get('code_challenge'))
        const back = new URL(url.searchParams.get('redirect_uri'))
        back.searchParams.set('code', code)
        back.searchParams.set('state', url.searchParams.get('state'))
        res.writeHead(302, { Location: back.toString() })
        return res.end()
      }
      if (req.method === 'POST' && url.pathname === '/token') {
        seen.token++
        const f = new URLSearchParams(body)
        const challenge = codes.get(f.get('code'))
        codes.delete(f.get('code'))
        const verifier = f.get('code_verifier') ?? ''
        const computed = createHash('sha256').update(verifier).digest('base64url')
        if (!challenge || computed !== challenge) return json(400, { error: 'invalid_grant' })
        return json(200, { access_token: TOKEN, token_type: 'Bearer', expires_in: 3600 })
      }
      if (req.method === 'POST' && url.pathname === '/mcp') {
        if (req.headers.authorization !== `Bearer ${TOKEN}`) {
          return json(401, { error: 'invalid_token' }, {
            'WWW-Authenticate': `Bearer error="invalid_token", resource_metadata="${base}/.well-known/oauth-protected-resource/mcp"`,
          })
        }
        const msg = JSON.parse(body || '{}')
        if (msg.id === undefined) {
          res.writeHead(202)
          return res.end()
        }
        if (msg.method === 'initialize') {
          return json(200, {
            jsonrpc: '2.0',
            id: msg.id,
            result: { protocolVersion: '2025-11-25', capabilities: { tools: {} }, serverInfo: { name: 'e2e', version: '1' } },
          })
        }
        if (msg.method === 'tools/list') {
          return json(200, { jsonrpc: '2.0', id: msg.id, result: { tools: [{ name: 'whoami', inputSchema: { type: 'object' } }] } })
        }
        return json(200, { jsonrpc: '2.0', id: msg.id, result: {} })
      }
      res.writeHead(404)
      res.end()
    })
  })
  return new Promise((resolve) =>
    srv.listen(0, '127.0.0.1', () =>
      resolve({ url: `http://127.0.0.1:${srv.address().port}`, seen, close: () => srv.close() }),
    ),
  )
}

describe('MCP OAuth in the browser', () => {
  let provider, server, browser, context, page
  before(async () => {
    provider = await startProvider()
    server = await startServer()
    browser = await launchBrowser()
    context = await browser.newContext()
    page = await context.newPage()
    const r = await server.api('POST', '/mcp/servers', {
      name: 'oa',
      type: 'streamable_http',
      display_name: 'OAuth e2e',
      url: `${provider.url}/mcp`,
    })
    assert.equal(r.status, 201, r.text)
  })
  after(async () => {
    await browser?.close()
    await server?.stop()
    provider?.close()
  })

  it('Connect asks for authorization, the provider page signs in, Sign out forgets it', async () => {
    await page.goto(server.httpUrl + '/')
    await page.getByTestId('nav-mcp').click()
    await page.getByTestId('mcp-market').waitFor()
    const row = page.locator('[data-testid="mcp-row"][data-name="oa"]')
    await row.getByTestId('mcp-toggle').click()
    await until(async () => (await row.getByTestId('mcp-auth').getAttribute('data-auth')) === 'required', 'auth required')
    assert.equal(await row.getByTestId('mcp-auth').textContent(), 'Authorization needed')
    assert.equal((await row.getByTestId('mcp-toggle').textContent())?.trim(), 'Authorize')

    const popup = context.waitForEvent('page')
    await row.getByTestId('mcp-toggle').click()
    const provPage = await popup
    await provPage.waitForLoadState()
    await until(async () => provPage.url().includes('/api/mcp/oauth/callback'), 'the callback page')
    await until(async () => (await provPage.textContent('h1')) === 'Authorized', 'the callback to finish')
    assert.equal(await provPage.evaluate(() => window.opener), null, 'the provider window has no handle on CashCode')
    await provPage.close()

    await until(async () => (await row.getAttribute('data-status')) === 'connected', 'the server to connect')
    assert.equal(await row.getByTestId('mcp-auth').getAttribute('data-auth'), 'authorized')
    assert.equal(provider.seen.token, 1)
    await screenshot(page, 'mcp-oauth-authorized')

    const list = await server.api('GET', '/mcp/servers')
    assert.ok(!list.text.includes(TOKEN), 'the token never reaches the client')

    await row.getByTestId('mcp-sign-out').click()
    await until(async () => (await row.getByTestId('mcp-auth').count()) === 0, 'the auth badge to go')
    assert.equal(await row.getAttribute('data-status'), 'disconnected')
    assert.ok(!server.log().includes(TOKEN), 'the token is never logged')
  })
})
