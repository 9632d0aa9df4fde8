// Browser test of a thinking model's reasoning (docs/ws-protocol.md §4 `reasoning`): it shows as
// a collapsed "Thinking" block above the answer, opens to the reasoning, stays after a reload
// (from history), and copy takes the answer only. Needs `npm run build` and the debug binary.
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { launchBrowser, openApp, screenshot, startServer, until } from './harness.mjs'
import { startScriptedModel } from './fakeLlm.mjs'

const REASONING = 'The user greets me; a short greeting back will do.'
const ANSWER = 'Hello there!'

describe('a thinking model in the web client', { concurrency: 1 }, () => {
  let model, server, browser, context, page

  before(async () => {
    model = await startScriptedModel(() => ({ reasoning_content: REASONING, content: ANSWER }))
    server = await startServer()
    const put = await server.api('PUT', '/settings/llm', {
      openai_compatible: { base_url: model.url, api_key: 'sk-e2e-thinking-1234' },
      ollama: { base_url: '' },
    })
    assert.equal(put.status, 200, put.text)
    browser = await launchBrowser()
    context = await browser.newContext({ viewport: { width: 1280, height: 800 } })
    await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: server.httpUrl })
    page = await context.newPage()
    page.on('pageerror', (e) => console.error('page error:', e.message))
  })

  after(async () => {
    await browser?.close().catch(() => {})
    await server?.stop().catch(() => {})
    await model?.close()
  })

  it('shows the reasoning collapsed above the answer, keeps it after a reload, copies the answer only', async () => {
    await openApp(page, server)
    const input = page.getByTestId('composer-input')
    await input.fill('hi')
    await until(() => page.getByTestId('send-button').isEnabled(), 'Send to be enabled')
    await input.press('Enter')
    const answer = page.getByTestId('msg-assistant').filter({ hasText: ANSWER })
    await answer.waitFor()
    await until(async () => (await answer.getAttribute('data-streaming')) === 'false', 'the turn to end')
    const thinking = answer.getByTestId('thinking')
    assert.equal(await thinking.count(), 1)
    assert.equal(await thinking.evaluate((d) => d.open), false, 'collapsed at first')
    assert.match(await answer.getByTestId('thinking-toggle').innerText(), /^Thinking · \d+(\.\d)? s$/)
    assert.equal(await answer.getByTestId('thinking-text').isVisible(), false)
    await answer.getByTestId('thinking-toggle').click()
    assert.equal(await answer.getByTestId('thinking-text').innerText(), REASONING)
    await screenshot(page, 'thinking-01-open')

    await answer.hover()
    await answer.getByTestId('copy-message').click()
    await until(async () => (await page.evaluate(() => navigator.clipboard.readText())) === ANSWER, 'the answer alone on the clipboard')

    // After a reload the block comes back from history, with its duration.
    await page.reload()
    await until(async () => (await page.getByTestId('conn-state').getAttribute('data-state')) === 'connected', 'the WebSocket')
    const row = page.getByTestId('session-row').filter({ hasText: 'hi' })
    await row.waitFor()
    await row.locator('button').first().click()
    const again = page.getByTestId('msg-assistant').filter({ hasText: ANSWER })
    await again.waitFor()
    await again.getByTestId('thinking-toggle').click()
    assert.equal(await again.getByTestId('thinking-text').innerText(), REASONING)
    assert.match(await again.getByTestId('thinking-toggle').innerText(), /^Thinking · \d+(\.\d)? s$/)
    // The model never got the reasoning back as part of an answer.
    assert.ok(model.requests.every((r) => r.messages.every((m) => !String(m.content ?? '').includes(REASONING))))
  })
})
