// Browser test of tool blocks (docs/web-client.md §5): each block shows how its call ended
// (✓ done, ✗ exited with an error, ⊘ declined, timed out), the command it ran, its output to
// expand, and a chip when the call ran outside the sandbox and how it got there (approved once,
// approved for this chat, under that approval); the same after a reload, from history. In
// English on a desktop and in Chinese on a phone. Needs `npm run build` and the debug binary.
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { startFakeLlm } from './fakeLlm.mjs'
import { ask, openApp, screenshot, startWithModel, until } from './harness.mjs'

describe('tool blocks in the web client', { concurrency: 1 }, () => {
  let fake, server, browser

  before(async () => {
    fake = await startFakeLlm()
    ;({ server, browser } = await startWithModel(fake.url, { CASHCODE_EXEC_TIMEOUT_SECS: '1' }))
  })

  after(async () => {
    await browser?.close().catch(() => {})
    await server?.stop().catch(() => {})
    await fake?.close()
  })


  /** The newest tool block once its call ended. */
  async function lastBlock(page, count) {
    const blocks = page.getByTestId('tool-block')
    await until(async () => (await blocks.count()) >= count, `tool block ${count}`)
    const b = blocks.nth(count - 1)
    await until(async () => (await b.getAttribute('data-done')) === 'true', `tool block ${count} to end`)
    return b
  }

  async function answer(page, decision) {
    const d = page.getByTestId('approval-dialog')
    await d.waitFor()
    if (decision === 'deny') {
      await d.getByTestId('approval-deny').click()
    } else {
      const cmd = d.getByTestId('approval-command')
      await cmd.evaluate((el) => el.scrollTo(0, el.scrollHeight))
      await d.getByTestId(decision === 'chat' ? 'approval-chat' : 'approval-once').click()
    }
    await d.waitFor({ state: 'detached' })
  }

  it('outcomes, commands, output and how a call ran (en, desktop; again after a reload)', async () => {
    const page = await (await browser.newContext({ viewport: { width: 1280, height: 800 }, locale: 'en-US' })).newPage()
    await openApp(page, server)
    const want = []
    await ask(page, '[exec] echo hello')
    let b = await lastBlock(page, 1)
    want.push(['ok', null])
    assert.equal(await b.getByTestId('tool-args').innerText(), 'echo hello')
    assert.equal(await b.getByTestId('tool-outcome').getAttribute('aria-label'), 'done')
    await b.getByTestId('tool-result').click()
    assert.match(await b.getByTestId('tool-output').innerText(), /exit code: 0\s+hello/)

    await ask(page, '[exec] exit 3')
    b = await lastBlock(page, 2)
    want.push(['failed', null])
    assert.equal(await b.getAttribute('data-outcome'), 'failed')
    assert.match(await b.innerText(), /exited with an error/)

    await ask(page, '[exec] sleep 5')
    b = await lastBlock(page, 3)
    want.push(['timeout', null])
    assert.equal(await b.getAttribute('data-outcome'), 'timeout')
    assert.match(await b.innerText(), /timed out/)

    await ask(page, '[escalate] touch declined.txt')
    await answer(page, 'deny')
    b = await lastBlock(page, 4)
    want.push(['denied', null])
    assert.equal(await b.getAttribute('data-outcome'), 'denied')
    assert.match(await b.innerText(), /not run: declined/)

    await ask(page, '[escalate] touch once.txt')
    await answer(page, 'approve')
    b = await lastBlock(page, 5)
    want.push(['ok', 'approved_once'])
    assert.equal(await b.getByTestId('tool-ran').innerText(), 'outside the sandbox · approved once')

    await ask(page, '[escalate] touch granted.txt')
    await answer(page, 'chat')
    b = await lastBlock(page, 6)
    want.push(['ok', 'approved_for_chat'])
    await ask(page, '[escalate] touch granted.txt')
    b = await lastBlock(page, 7)
    want.push(['ok', 'chat_grant'])
    assert.match(await b.getByTestId('tool-ran').innerText(), /under this chat/)
    await screenshot(page, 'tool-blocks-en-desktop')

    const seen = async () =>
      page.getByTestId('tool-block').evaluateAll((els) => els.map((e) => [e.dataset.outcome, e.dataset.ran ?? null]))
    assert.deepEqual(await seen(), want)
    // From history after a reload: the same blocks, commands and chips.
    await page.reload()
    await until(async () => (await page.getByTestId('conn-state').getAttribute('data-state')) === 'connected', 'the WebSocket')
    await page.getByTestId('session-row').first().locator('button').first().click()
    await until(async () => JSON.stringify(await seen()) === JSON.stringify(want), 'the blocks from history')
    assert.equal(await page.getByTestId('tool-args').first().innerText(), 'echo hello')
    await page.context().close()
  })

  it('speaks Chinese on a phone', async () => {
    const context = await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, locale: 'zh-CN' })
    const page = await context.newPage()
    await openApp(page, server)
    await page.getByRole('button', { name: '打开菜单' }).click()
    await page.getByTestId('session-row').first().locator('button').first().click()
    await until(async () => (await page.getByTestId('tool-block').count()) >= 7, 'the blocks')
    const text = await page.getByTestId('tool-block').evaluateAll((els) => els.map((e) => e.innerText).join('\n'))
    for (const s of ['以错误退出', '已超时', '未运行：已拒绝', '沙箱外 · 已批准一次', '沙箱外 · 按本对话的批准']) {
      assert.ok(text.includes(s), `${s} in\n${text}`)
    }
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth)
    assert.ok(overflow <= 0, `the page is ${overflow}px wider than the phone`)
    await screenshot(page, 'tool-blocks-zh-phone')
    await context.close()
  })
})
