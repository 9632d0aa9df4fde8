// Browser test of what a chat costs (docs/usage.md, docs/web-client.md "Usage"): the context
// meter beside the composer after a turn (and after a reload), an answer's tokens on hover, the
// Usage page's day chart and model/chat/job tables holding exactly the tokens the fake model
// reported, a price turning tokens into cost, and a chat budget warning at 80% and stopping the
// next turn at its cap; in English on a desktop and in Chinese on a phone. Needs
// `npm run build` and the debug binary.
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { ask, openApp, screenshot, startWithModel, until } from './harness.mjs'
import { startScriptedModel } from './fakeLlm.mjs'

const IN = 1200
const OUT = 34

describe('usage in the web client', { concurrency: 1 }, () => {
  let model, server, browser

  before(async () => {
    let n = 0
    model = await startScriptedModel(() => ({
      content: `Answer ${++n}`,
      usage: { prompt_tokens: IN, completion_tokens: OUT, total_tokens: IN + OUT },
    }))
    ;({ server, browser } = await startWithModel(model.url))
  })

  after(async () => {
    await browser?.close().catch(() => {})
    await server?.stop().catch(() => {})
    await model?.close()
  })


  async function openUsage(page) {
    await page.getByTestId('settings-button').click()
    await page.getByTestId('nav-usage').click()
    await page.getByTestId('usage-page').waitFor()
  }

  it('meter, tokens on hover, the Usage page, a price and a chat budget (en, desktop)', async () => {
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, locale: 'en-US' })
    const page = await context.newPage()
    page.on('pageerror', (e) => console.error('page error:', e.message))
    await openApp(page, server)

    await ask(page, 'first question')
    const answer = page.getByTestId('msg-assistant').filter({ hasText: 'Answer 1' })
    await answer.waitFor()
    await until(async () => (await answer.getAttribute('data-streaming')) === 'false', 'the turn to end')
    // The turn's budget is 200,000 characters at 2 a token: a 100K window.
    const meter = page.getByTestId('context-meter')
    await until(async () => (await meter.innerText()) === '1.2K / 100K', 'the context meter')
    assert.equal(await meter.getAttribute('data-tone'), 'ok')
    await answer.hover()
    const tokens = answer.getByTestId('msg-tokens')
    await until(() => tokens.isVisible(), 'the tokens on hover')
    assert.equal(await tokens.innerText(), '1.2K in · 34 out')
    assert.equal(await tokens.getAttribute('data-input'), String(IN))
    await screenshot(page, 'usage-01-meter-and-hover')

    // After a reload the chat shows its last reading again.
    await page.reload()
    await until(async () => (await page.getByTestId('conn-state').getAttribute('data-state')) === 'connected', 'the WebSocket')
    await page.getByTestId('session-row').filter({ hasText: 'first question' }).locator('button').first().click()
    await until(async () => (await page.getByTestId('context-meter').innerText()) === '1.2K / 100K', 'the meter after a reload')

    await ask(page, 'second question')
    await page.getByTestId('msg-assistant').filter({ hasText: 'Answer 2' }).waitFor()

    // The Usage page adds up exactly what the model reported, request for request.
    await openUsage(page)
    const total = page.getByTestId('usage-total')
    await total.waitFor()
    const requests = model.requests.length
    assert.ok(requests >= 2, `${requests} requests`)
    assert.equal(await total.getAttribute('data-input'), String(requests * IN))
    assert.equal(await total.getAttribute('data-output'), String(requests * OUT))
    const bars = page.getByTestId('usage-bar')
    assert.equal(await bars.count(), 1, 'one day of requests')
    assert.equal(await bars.first().getAttribute('data-tokens'), String(requests * (IN + OUT)))
    const modelRow = page.getByTestId('usage-table-model').getByTestId('usage-row')
    assert.equal(await modelRow.first().getAttribute('data-key'), 'openai_compatible/fake-model')
    assert.equal(await modelRow.first().getByTestId('usage-input').getAttribute('data-value'), String(requests * IN))
    const jobRow = page.getByTestId('usage-table-job').getByTestId('usage-row').filter({ hasText: 'Chat turns' })
    assert.equal(await jobRow.getByTestId('usage-output').getAttribute('data-value'), String(2 * OUT))
    assert.ok((await page.getByTestId('usage-table-chat').getByTestId('usage-row').count()) >= 1)
    assert.equal(await modelRow.first().getByTestId('usage-cost').innerText(), '–', 'no price yet')

    // A price turns the tokens into a cost, labelled with the table's date.
    await page.getByTestId('price-add').click()
    const row = page.getByTestId('price-row').last()
    await row.getByTestId('price-model').fill('fake-model')
    await row.getByTestId('price-input').fill('2')
    await row.getByTestId('price-output').fill('10')
    await page.getByTestId('prices-save').click()
    const cost = ((requests * (IN * 2 + OUT * 10)) / 1e6).toFixed(4)
    await until(async () => (await modelRow.first().getByTestId('usage-cost').innerText()) === `${cost} USD`, 'the cost')
    assert.match(await page.getByTestId('usage-prices').innerText(), /Costs use the prices saved on \d{4}-\d{2}-\d{2}/)
    await screenshot(page, 'usage-02-page-en')

    // A chat budget: the next turn passes 80% (a warning), the one after stops at the cap.
    // Every request so far was this chat's: the third turn's takes it past the cap.
    const cap = (model.requests.length + 1) * (IN + OUT) - 100
    await page.getByTestId('budget-chat-tokens').fill(String(cap))
    await page.getByTestId('budgets-save').click()
    await until(async () => (await page.getByTestId('usage-budgets').innerText()).includes('Saved'), 'the budgets saved')
    await page.getByTestId('session-row').filter({ hasText: 'first question' }).locator('button').first().click()
    await ask(page, 'third question')
    await page.getByTestId('msg-assistant').filter({ hasText: 'Answer 3' }).waitFor()
    await until(async () => (await page.locator('body').innerText()).includes('This chat has used'), 'the budget warning')
    const before = model.requests.length
    await ask(page, 'fourth question')
    await until(async () => /^Budget reached: /.test(await page.getByTestId('msg-error').last().innerText()), 'the stop at the cap')
    assert.equal(model.requests.length, before, 'no request past the cap')
    await screenshot(page, 'usage-03-budget-en')
    await context.close()
  })

  it('the Usage page in Chinese on a phone', async () => {
    const context = await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, locale: 'zh-CN' })
    const page = await context.newPage()
    await openApp(page, server)
    await page.getByRole('button', { name: '打开菜单' }).click()
    await openUsage(page)
    await page.getByTestId('usage-total').waitFor()
    assert.equal(await page.getByRole('heading', { level: 1 }).innerText(), '用量')
    assert.match(await page.getByTestId('usage-total').innerText(), /次请求/)
    assert.match(await page.getByTestId('usage-budgets').innerText(), /每个对话/)
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth)
    assert.ok(overflow <= 0, `the page is ${overflow}px wider than the phone`)
    await screenshot(page, 'usage-04-page-zh-phone')

    // The stop at the cap comes as a code with its fields: worded in Chinese.
    await page.getByRole('button', { name: '打开菜单' }).click()
    await page.getByTestId('session-row').filter({ hasText: 'first question' }).locator('button').first().click()
    await ask(page, '第五个问题')
    const stop = page.getByTestId('msg-error').last()
    await until(async () => /^已达预算上限：此对话的预算（/.test(await stop.innerText()), 'the stop at the cap in Chinese')
    assert.doesNotMatch(await stop.innerText(), /Budget|reached|Raise|chat/)
    await screenshot(page, 'usage-05-budget-zh-phone')
    // After a reload the stored stop (the turn's answer) is worded in Chinese too.
    await page.reload()
    await until(async () => (await page.getByTestId('conn-state').getAttribute('data-state')) === 'connected', 'the WebSocket')
    const stored = page.getByTestId('msg-assistant').filter({ hasText: '已达预算上限' })
    await until(async () => (await stored.count()) >= 1, 'the stored stop in Chinese after a reload')
    assert.equal(await page.getByTestId('msg-assistant').filter({ hasText: 'Budget reached' }).count(), 0)
    await context.close()
  })
})
