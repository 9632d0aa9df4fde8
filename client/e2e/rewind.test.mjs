// Browser test of Rewind (docs/http-api.md §4.1): the model writes a file in the workspace; "Rewind
// to here" on the user message shows the preview (the file, its diff) and Cancel changes
// nothing; "Rewind files and chat" puts the file back, takes the turn out of the transcript and
// returns the message to the composer; the transcript's marker offers Undo, which brings back
// the file and the turn. A file the owner changed is a conflict with its reason and diff, left
// alone unless its "Overwrite anyway" is ticked; in zh-CN at phone width the dialog and the
// marker hold no English but paths and file content. Needs `npm run build` and the debug binary.
import assert from 'node:assert/strict'
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { launchBrowser, openApp, screenshot, startServer, until, withServerLog } from './harness.mjs'
import { startScriptedModel } from './fakeLlm.mjs'

/** A model that answers a user message with one write_file call, then with "Done." */
const startModel = () =>
  startScriptedModel((msgs) =>
    msgs[msgs.length - 1].role === 'user'
      ? { tool_calls: [{ index: 0, id: 'call_w', type: 'function', function: { name: 'write_file', arguments: JSON.stringify({ path: 'plan.md', content: 'step one\nstep two changed\n' }) } }] }
      : { content: 'Done.' },
  )

describe('Rewind in the web client', { concurrency: 1 }, () => {
  let model, server, browser, page, plan
  let failed = false

  before(async () => {
    model = await startModel()
    server = await startServer()
    const ws = path.join(server.home, 'workspace')
    mkdirSync(ws, { recursive: true })
    plan = path.join(ws, 'plan.md')
    writeFileSync(plan, 'step one\nstep two\n')
    const put = await server.api('PUT', '/settings/llm', {
      openai_compatible: { base_url: model.url, api_key: 'sk-e2e-rewind-1234' },
      ollama: { base_url: '' },
    })
    assert.equal(put.status, 200, put.text)
    browser = await launchBrowser()
    page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage()
    page.on('pageerror', (e) => console.error('page error:', e.message))
  })

  after(async () => {
    if (failed && server) console.error(`--- server log ---\n${server.log().slice(-8000)}`)
    await browser?.close().catch(() => {})
    await server?.stop().catch(() => {})
    await model?.close()
  })

  it('previews, cancels, then rewinds the files and the chat', async () => {
    try {
      await openApp(page, server)
      const input = page.getByTestId('composer-input')
      await input.fill('Please update the plan')
      await until(() => page.getByTestId('send-button').isEnabled(), 'Send to be enabled')
      await input.press('Enter')
      await page.getByText('Done.').waitFor()
      await until(() => readFileSync(plan, 'utf8') === 'step one\nstep two changed\n', 'the model to write plan.md')

      // The preview: the file, its action and the diff back to the old content.
      const user = page.getByTestId('msg-user').filter({ hasText: 'Please update the plan' })
      await user.hover()
      await user.getByTestId('rewind-here').click()
      const dialog = page.getByRole('dialog', { name: 'Rewind to this message' })
      await dialog.getByTestId('rewind-preview').waitFor()
      const file = dialog.getByTestId('rewind-file')
      assert.equal(await file.count(), 1)
      assert.equal(await file.getAttribute('data-path'), 'plan.md')
      assert.equal(await file.getAttribute('data-action'), 'restore')
      assert.deepEqual(await dialog.locator('[data-op="del"] > span:last-child').allInnerTexts(), ['step two changed'])
      assert.deepEqual(await dialog.locator('[data-op="add"] > span:last-child').allInnerTexts(), ['step two'])
      // How many entries a chat rewind would take out is said before; "Rewind files" is the
      // primary (last) action, the chat rewind the secondary one.
      const count = Number(await dialog.getByTestId('rewind-messages').getAttribute('data-count'))
      assert.ok(count >= 2, `the user message and the answer at least: ${count}`)
      assert.match(await dialog.getByTestId('rewind-messages').innerText(), new RegExp(`removes ${count} entries`))
      assert.ok(await dialog.getByTestId('rewind-files').evaluate((b) => b.nextElementSibling === null), 'Rewind files last')
      await screenshot(page, 'rewind-01-preview')

      // Cancel: nothing changes.
      await dialog.getByTestId('rewind-cancel').click()
      await dialog.waitFor({ state: 'detached' })
      assert.equal(readFileSync(plan, 'utf8'), 'step one\nstep two changed\n')
      assert.equal(await page.getByTestId('msg-user').count(), 1, 'the preview removes no message')

      // Rewind files and chat.
      await user.hover()
      await user.getByTestId('rewind-here').click()
      await dialog.getByTestId('rewind-preview').waitFor()
      await dialog.getByTestId('rewind-files-chat').click()
      await dialog.waitFor({ state: 'detached' })
      await until(() => readFileSync(plan, 'utf8') === 'step one\nstep two\n', 'plan.md to be put back')
      await until(async () => (await page.getByTestId('msg-user').count()) === 0, 'the turn to leave the transcript')
      assert.equal(await page.getByText('Done.').count(), 0)
      assert.equal(await input.inputValue(), 'Please update the plan')
      await screenshot(page, 'rewind-02-after')

      // The marker says what happened and offers Undo: the file and the turn come back.
      const marker = page.getByTestId('rewind-marker')
      await marker.waitFor()
      assert.match(await marker.innerText(), /Rewound to “Please update the plan”.*1 file put back/s)
      await screenshot(page, 'rewind-03-marker')
      await marker.getByTestId('rewind-undo').click()
      await page.getByTestId('rewind-undone').waitFor()
      await until(() => readFileSync(plan, 'utf8') === 'step one\nstep two changed\n', 'plan.md to come back')
      await until(async () => (await page.getByTestId('msg-user').count()) === 1, 'the turn to come back')
      await page.getByText('Done.', { exact: true }).waitFor()
      assert.equal(await marker.count(), 0, 'the marker goes with the undo')
      assert.equal(await input.inputValue(), '', 'the message left the composer with the undo')
      await screenshot(page, 'rewind-04-undone')
    } catch (e) {
      failed = true
      await screenshot(page, 'failure-rewind').catch(() => {})
      throw withServerLog(e, server)
    }
  })

  it('lists a file changed outside the chat with its diff, and overwrites it only when ticked', async () => {
    try {
      // The owner edits the file the chat wrote.
      writeFileSync(plan, 'step one\nmy own edit\n')
      const user = page.getByTestId('msg-user').filter({ hasText: 'Please update the plan' })
      await user.hover()
      await user.getByTestId('rewind-here').click()
      const dialog = page.getByRole('dialog', { name: 'Rewind to this message' })
      await dialog.getByTestId('rewind-preview').waitFor()
      const conflict = dialog.getByTestId('rewind-conflict')
      assert.equal(await conflict.getAttribute('data-code'), 'changed_outside')
      assert.match(await conflict.innerText(), /changed outside this chat/)
      assert.ok(await dialog.getByTestId('rewind-files').isDisabled(), 'nothing to write unless the conflict is ticked')
      await conflict.getByText('Show what would change').click()
      assert.deepEqual(await conflict.locator('[data-op="del"] > span:last-child').allInnerTexts(), ['my own edit'])
      await conflict.getByTestId('rewind-overwrite').check()
      await screenshot(page, 'rewind-05-conflict')
      await dialog.getByTestId('rewind-files').click()
      await dialog.waitFor({ state: 'detached' })
      await until(() => readFileSync(plan, 'utf8') === 'step one\nstep two\n', 'the ticked file to be overwritten')
      await page.getByTestId('rewind-marker').waitFor()
    } catch (e) {
      failed = true
      await screenshot(page, 'failure-rewind-conflict').catch(() => {})
      throw withServerLog(e, server)
    }
  })

  it('speaks Chinese throughout at phone width', async () => {
    const sessions = await server.api('GET', '/sessions')
    const chatId = JSON.parse(sessions.text).sessions?.[0]?.chat_id
    assert.ok(chatId, sessions.text)
    const ctx = await browser.newContext({ viewport: { width: 390, height: 844 } })
    await ctx.addInitScript((id) => {
      localStorage.setItem('cashcode.lang', 'zh-CN')
      localStorage.setItem('cashcode.lastChat', id)
    }, chatId)
    const phone = await ctx.newPage()
    try {
      // Undo the last rewind from the API, then change the file outside the chat again.
      assert.equal((await server.api('POST', `/sessions/${chatId}/rewind/undo`)).status, 200)
      writeFileSync(plan, 'step one\nanother edit\n')
      await openApp(phone, server)
      await phone.getByTestId('msg-user').first().waitFor()
      const user = phone.getByTestId('msg-user').first()
      await user.click()
      await user.getByTestId('rewind-here').click()
      const dialog = phone.getByRole('dialog')
      await dialog.getByTestId('rewind-conflict').waitFor()
      // Everything but the path and the diff is Chinese.
      const text = await dialog.evaluate((d) => {
        const c = d.cloneNode(true)
        c.querySelectorAll('.font-mono, [data-testid="rewind-diff"]').forEach((n) => n.remove())
        return c.innerText
      })
      assert.doesNotMatch(text, /[A-Za-z]{3,}/, text)
      assert.match(text, /在此对话之外/)
      const width = await dialog.evaluate((d) => d.getBoundingClientRect().width)
      assert.ok(width <= 390, `the dialog fits the phone: ${width}`)
      assert.ok(await phone.evaluate(() => document.documentElement.scrollWidth <= 390), 'no sideways scroll')
      await screenshot(phone, 'rewind-06-zh-phone')
      await dialog.getByTestId('rewind-cancel').click()
    } catch (e) {
      failed = true
      await screenshot(phone, 'failure-rewind-zh').catch(() => {})
      throw withServerLog(e, server)
    } finally {
      await ctx.close()
    }
  })
})
