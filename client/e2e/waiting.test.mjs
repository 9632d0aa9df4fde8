// Browser test of requests that must not be missed (docs/web-client.md §13): a reload while a
// request waits reopens its chat and dialog, in time to answer, with the running turn's message
// in the transcript (`turn_seq` in the sessions list, `turn_started` in the replay); a request in a chat this page
// never opened reaches a phone on the settings page as a banner that opens it, with a mark in the
// page title. Needs `npm run build` and the debug binary.
import assert from 'node:assert/strict'
import { existsSync } from 'node:fs'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { startFakeLlm } from './fakeLlm.mjs'
import { ask, openApp, screenshot, startWithModel, until } from './harness.mjs'

describe('waiting requests are never missed', { concurrency: 1 }, () => {
  let fake, server, browser, workspace

  before(async () => {
    fake = await startFakeLlm()
    ;({ server, browser } = await startWithModel(fake.url, { CASHCODE_APPROVAL_TIMEOUT: '60' }))
    workspace = path.join(server.home, 'workspace')
  })

  after(async () => {
    await browser?.close().catch(() => {})
    await server?.stop().catch(() => {})
    await fake?.close()
  })


  async function approve(d) {
    await d.getByTestId('approval-command').evaluate((el) => el.scrollTo(0, el.scrollHeight))
    await d.getByTestId('approval-once').click()
    await d.waitFor({ state: 'detached' })
  }

  it('a reload while a request waits reopens the chat and its dialog, answered in time (en)', async () => {
    const page = await (await browser.newContext({ viewport: { width: 1280, height: 800 }, locale: 'en-US' })).newPage()
    await openApp(page, server)
    await ask(page, '[escalate] touch after-reload.txt')
    await page.getByTestId('approval-dialog').waitFor()
    await page.reload()
    const d = page.getByTestId('approval-dialog')
    await d.waitFor({ timeout: 15_000 })
    assert.match(await page.title(), /^\(1\) ⚠ /)
    assert.match(await d.getByTestId('approval-command').innerText(), /touch after-reload\.txt/)
    // The transcript is whole: the running turn's message, and its tool block waiting.
    const user = page.getByTestId('msg-user')
    await until(async () => (await user.count()) === 1, 'the running turn\'s message after the reload')
    assert.match(await user.first().innerText(), /\[escalate\] touch after-reload\.txt/)
    await screenshot(page, 'waiting-reload-en')
    await approve(d)
    await until(() => existsSync(path.join(workspace, 'after-reload.txt')), 'the command to run')
    assert.doesNotMatch(await page.title(), /⚠/)
    // Once the turn has ended nothing appears twice.
    await until(async () => (await page.getByTestId('stop-button').count()) === 0, 'the turn to end')
    assert.equal(await user.count(), 1)
    await page.context().close()
  })

  it('a request in another chat reaches a phone on the settings page (zh-CN)', async () => {
    const phone = await (
      await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, locale: 'zh-CN' })
    ).newPage()
    await openApp(phone, server)
    await phone.getByRole('button', { name: '打开菜单' }).click()
    await phone.getByTestId('settings-button').click()
    await phone.getByTestId('nav-safety').click()
    await phone.getByTestId('safety-page').waitFor()

    // Another tab (say, on a desktop) starts a chat that asks.
    const desk = await (await browser.newContext({ viewport: { width: 1280, height: 800 }, locale: 'en-US' })).newPage()
    await openApp(desk, server)
    await desk.getByTestId('new-chat').click()
    await ask(desk, '[escalate] touch from-phone.txt')
    await desk.getByTestId('approval-dialog').waitFor()

    const open = phone.getByTestId('approval-open')
    await open.waitFor({ timeout: 15_000 })
    assert.match(await phone.title(), /^\(1\) ⚠ /)
    await screenshot(phone, 'waiting-banner-zh-phone')
    await open.click()
    const d = phone.getByTestId('approval-dialog')
    await d.waitFor({ timeout: 15_000 })
    await approve(d)
    await until(() => existsSync(path.join(workspace, 'from-phone.txt')), 'the command to run')
    await desk.getByTestId('approval-dialog').waitFor({ state: 'detached' })
    await desk.context().close()
    await phone.context().close()
  })
})
