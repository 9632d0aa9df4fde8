// Browser test of Rewind (docs/http-api.md §4.1): the model writes a file in the workspace; "Rewind
// to here" on the user message shows the preview (the file, its diff) and Cancel changes
// nothing; "Rewind files and chat" puts the file back, takes the turn out of the transcript and
// returns the message to the composer. Needs `npm run build` and the debug binary.
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
    } catch (e) {
      failed = true
      await screenshot(page, 'failure-rewind').catch(() => {})
      throw withServerLog(e, server)
    }
  })
})
