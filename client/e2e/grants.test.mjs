// Browser test of Settings → Safety's grants and policy controls (docs/web-client.md §13): what
// "Approve for this chat" granted is listed per chat and revoked there (the same command asks
// again), unsaved policy edits are marked, and "Reset to defaults" puts every tool back; in
// English on a desktop and in Chinese on a phone. Needs `npm run build` and the debug binary.
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { startFakeLlm } from './fakeLlm.mjs'
import { ask, openApp, screenshot, startWithModel, until } from './harness.mjs'

describe('grants on the Safety page', { concurrency: 1 }, () => {
  let fake, server, browser

  before(async () => {
    fake = await startFakeLlm()
    ;({ server, browser } = await startWithModel(fake.url))
  })

  after(async () => {
    await browser?.close().catch(() => {})
    await server?.stop().catch(() => {})
    await fake?.close()
  })


  it('lists a chat grant, revokes it, marks unsaved edits and resets to defaults (en)', async () => {
    const page = await (await browser.newContext({ viewport: { width: 1280, height: 800 }, locale: 'en-US' })).newPage()
    await openApp(page, server)
    await ask(page, '[escalate] touch granted.txt')
    const d = page.getByTestId('approval-dialog')
    await d.waitFor()
    await d.getByTestId('approval-command').evaluate((el) => el.scrollTo(0, el.scrollHeight))
    await d.getByTestId('approval-chat').click()
    await d.waitFor({ state: 'detached' })

    await page.getByTestId('settings-button').click()
    await page.getByTestId('nav-safety').click()
    const row = page.getByTestId('grant-row')
    await row.waitFor()
    assert.match(await row.innerText(), /runs “touch granted\.txt” outside the sandbox without asking/)
    await screenshot(page, 'safety-grants-en')
    await row.getByTestId('grant-revoke').click()
    await page.getByTestId('grants-none').waitFor()
    const listed = await server.api('GET', '/settings/approvals/grants')
    assert.deepEqual(JSON.parse(listed.text), { grants: [] })

    // Revoked: the same command asks again.
    await page.getByTestId('session-row').first().locator('button').first().click()
    await ask(page, '[escalate] touch granted.txt')
    await d.waitFor()
    await d.getByTestId('approval-deny').click()
    await d.waitFor({ state: 'detached' })

    // An unsaved edit is marked; Reset to defaults puts the policy back.
    await page.getByTestId('settings-button').click()
    await page.getByTestId('nav-safety').click()
    const web = page.getByTestId('policy-web_fetch')
    await web.waitFor()
    // Each tool is described in a line.
    assert.ok((await page.getByTestId('tool-desc').allInnerTexts()).includes('Reads a public web page'))
    const was = await web.inputValue()
    await web.selectOption(was === 'deny' ? 'ask' : 'deny')
    await page.getByTestId('safety-unsaved').waitFor()
    // Leaving for another view asks first; staying keeps the edit.
    let asked = ''
    page.once('dialog', (d) => {
      asked = d.message()
      void d.dismiss()
    })
    await page.getByTestId('nav-memory').click()
    await until(() => asked !== '', 'the question')
    assert.match(asked, /unsaved changes will be lost/)
    assert.equal(await page.getByTestId('safety-page').count(), 1, 'still on the Safety page')
    await page.getByTestId('safety-save').click()
    await until(async () => (await page.getByTestId('safety-unsaved').count()) === 0, 'saved')
    await page.getByTestId('safety-reset').click()
    await until(async () => (await web.inputValue()) === was, 'the default back')
    await page.context().close()
  })

  it('speaks Chinese on a phone', async () => {
    const page = await (
      await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, locale: 'zh-CN' })
    ).newPage()
    await openApp(page, server)
    await page.getByRole('button', { name: '打开菜单' }).click()
    await page.getByTestId('settings-button').click()
    await page.getByTestId('nav-safety').click()
    await page.getByTestId('grants-none').waitFor()
    assert.match(await page.getByTestId('safety-page').innerText(), /已为对话授予的批准[\s\S]*没有为任何对话授予批准。[\s\S]*恢复默认/)
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth)
    assert.ok(overflow <= 0, `the page is ${overflow}px wider than the phone`)
    await screenshot(page, 'safety-grants-zh-phone')
    await page.context().close()
  })
})
