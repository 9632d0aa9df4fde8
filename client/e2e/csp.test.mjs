// Browser tests of the headers the server puts on the client (src/http/headers.rs): the built
// client works under its Content-Security-Policy (no violation while chatting, rendering code,
// tables, a formula and an image, and opening every screen), a foreign page cannot frame it, and
// an answer's remote image is a button that contacts its host only when clicked.
import assert from 'node:assert/strict'
import { after, before, describe } from 'node:test'
import { IMAGE_REPLY, REMOTE_IMAGE, startFakeLlm } from './fakeLlm.mjs'
import { launchBrowser, screenshot, startServer, until, itWithEvidence } from './harness.mjs'

// A 1×1 PNG served for the remote image once it is asked for.
const PNG = Buffer.from(
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==',
  'base64',
)
const REMOTE_HOST = new URL(REMOTE_IMAGE).host

let llm, server, browser, context, page
let failed = false
/** Every request the page made to the remote image's host. */
const remoteRequests = []
/** Console errors the page reported (Chrome logs each CSP refusal there too). */
const consoleErrors = []

const connState = (p) => p.getByTestId('conn-state').getAttribute('data-state')

async function newChat(p) {
  await p.getByTestId('new-chat').click()
  await until(async () => (await p.getByTestId('model-select').inputValue()).endsWith('fake-model'), 'the fake model')
}

async function ask(p, text) {
  const input = p.getByTestId('composer-input')
  await input.fill(text)
  await until(() => p.getByTestId('send-button').isEnabled(), 'Send to be enabled')
  await input.press('Enter')
  await until(async () => (await p.getByTestId('send-button').count()) === 1, 'the turn to end')
  const answers = p.getByTestId('msg-assistant')
  const last = answers.nth((await answers.count()) - 1)
  await until(async () => (await last.getAttribute('data-streaming')) === 'false', 'streaming to end')
  return last
}

describe('the client under its security headers', { concurrency: 1 }, () => {
  before(async () => {
    llm = await startFakeLlm()
    server = await startServer()
    const r = await server.api('PUT', '/settings/llm', {
      openai_compatible: { base_url: llm.url, api_key: 'sk-e2e-csp-0001' },
      ollama: { base_url: llm.url },
    })
    assert.equal(r.status, 200, r.text)
    browser = await launchBrowser()
    context = await browser.newContext({ viewport: { width: 1280, height: 800 }, locale: 'en-US' })
    // Reported by the page itself; init scripts are not subject to the page's policy.
    await context.addInitScript(() => {
      document.addEventListener('securitypolicyviolation', (e) => {
        const w = /** @type {any} */ (window)
        ;(w.__csp ??= []).push(`${e.violatedDirective} ${e.blockedURI} at ${e.sourceFile}:${e.lineNumber}:${e.columnNumber}`)
      })
    })
    await context.route(`https://${REMOTE_HOST}/**`, (route) => {
      remoteRequests.push(route.request().url())
      return route.fulfill({ status: 200, contentType: 'image/png', body: PNG })
    })
    page = await context.newPage()
    page.on('console', (m) => {
      if (m.type() === 'error') consoleErrors.push(m.text())
    })
    page.on('pageerror', (e) => consoleErrors.push(`page error: ${e.message}`))
  })

  after(async () => {
    if (failed && server) console.error(`--- server log ---\n${server.log().slice(-8000)}`)
    await context?.close().catch(() => {})
    await browser?.close().catch(() => {})
    await server?.stop().catch(() => {})
    await llm?.close()
  })

  const test = itWithEvidence({
    page: () => page,
    server: () => server,
    onFail: () => {
      failed = true
    },
  })

  /** The `securitypolicyviolation` events the page saw. */
  const pageViolations = async () => (await page.evaluate(() => window.__csp)) ?? []
  const openChat = async (p, title) => {
    await p.getByTestId('session-row').filter({ hasText: title }).first().locator('button').first().click()
  }

  test('the app loads, chats and renders every screen with no CSP violation', async () => {
    const res = await page.goto(server.httpUrl + '/')
    const h = res.headers()
    assert.equal(h['x-frame-options'], 'DENY')
    assert.equal(h['x-content-type-options'], 'nosniff')
    const wsOrigin = new URL(server.wsUrl).host
    assert.match(h['content-security-policy'], new RegExp(`connect-src 'self' ws://${wsOrigin} wss://${wsOrigin};`))
    assert.match(h['content-security-policy'], /frame-ancestors 'none'/)
    await until(async () => (await connState(page)) === 'connected', 'the WebSocket to connect')
    await newChat(page)
    // The default answer: a table and highlighted code (the lazily loaded highlighter chunk).
    const plain = await ask(page, 'show me a table')
    await plain.locator('.hljs-keyword').first().waitFor()
    // A formula (KaTeX's lazily loaded CSS and fonts) and both kinds of image.
    const rich = await ask(page, '[image] and a formula')
    await rich.locator('.katex').first().waitFor()
    await until(
      () => page.evaluate(() => document.fonts.check('16px KaTeX_Main') || document.fonts.status === 'loaded'),
      'KaTeX fonts',
    )
    for (const nav of ['nav-mcp', 'nav-skills', 'nav-memory']) {
      const item = page.getByTestId(nav)
      if (await item.count()) {
        await item.click()
        await page.waitForLoadState('networkidle')
      }
    }
    await screenshot(page, 'csp-01-screens')
    assert.deepEqual(await pageViolations(), [])
    assert.deepEqual(
      consoleErrors.filter((e) => /Content Security Policy|Refused to/i.test(e)),
      [],
      'the console reports no refusal',
    )
    assert.equal(await connState(page), 'connected')
  })

  test('a foreign page cannot frame the client', async () => {
    const framer = await context.newPage()
    try {
      await framer.setContent(`<iframe id="f" src="${server.httpUrl}/" width="800" height="600"></iframe>`)
      // The frame's navigation is answered, and the browser puts its error page in its place:
      // nothing of the app runs inside.
      await until(async () => framer.frames().length === 2, 'the iframe')
      const frame = framer.frames()[1]
      await until(async () => frame.url().startsWith('chrome-error://'), `the frame to be refused (at ${frame.url()})`)
      assert.equal(await frame.locator('[data-testid=conn-state]').count(), 0, 'the client rendered inside a foreign frame')
    } finally {
      await framer.close()
    }
  })

  test('a remote image in an answer is a button until clicked, then only that image loads', async () => {
    await openChat(page, 'show me a table')
    const answer = page.getByTestId('msg-assistant').filter({ hasText: 'A remote picture' }).last()
    await answer.waitFor()
    const button = answer.getByTestId('remote-image')
    assert.equal(await button.count(), 1)
    assert.equal(await button.innerText(), `Load image from ${REMOTE_HOST} · a cat`)
    // The data image renders in place; the remote one is not even in the DOM as an <img>.
    const imgs = await answer.locator('img').evaluateAll((els) => els.map((e) => e.getAttribute('src')))
    assert.deepEqual(imgs.map((s) => s.slice(0, 15)), ['data:image/png;'])
    assert.deepEqual(remoteRequests, [], 'the remote host was contacted before any click')
    assert.ok(IMAGE_REPLY.includes(REMOTE_IMAGE))
    await button.click()
    const img = answer.locator(`img[src="${REMOTE_IMAGE}"]`)
    await img.waitFor()
    await until(() => img.evaluate((e) => e.complete && e.naturalWidth === 1), 'the clicked image to load')
    assert.deepEqual(remoteRequests, [REMOTE_IMAGE], 'exactly the clicked image was fetched')
    assert.deepEqual(await pageViolations(), [])
    await screenshot(page, 'csp-02-remote-image')
  })

  test('the button reads in Chinese too', async () => {
    const zh = await browser.newContext({ viewport: { width: 1280, height: 800 }, locale: 'zh-CN' })
    try {
      const p = await zh.newPage()
      await p.goto(server.httpUrl + '/')
      await until(async () => (await connState(p)) === 'connected', 'the WebSocket to connect')
      await openChat(p, 'show me a table')
      const button = p.getByTestId('remote-image').first()
      await button.waitFor()
      assert.equal(await button.innerText(), `加载来自 ${REMOTE_HOST} 的图片 · a cat`)
    } finally {
      await zh.close()
    }
  })
})
