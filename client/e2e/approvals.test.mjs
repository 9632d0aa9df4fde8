// Browser test of approvals: the fake model asks `exec` to leave the sandbox ([escalate] CMD);
// the dialog names the tool, the command, the working directory, the justification and what
// approving allows, keeps focus inside, and the chat is badged while it waits. Approve once runs
// the command, Deny (Escape) gives the model the declined result, Approve for this chat covers
// the next same simple command (and nothing else). Settings → Safety shows the sandbox status
// (or "unknown" when the server does not report one) and saves the policy. Both screens pass axe.
// Needs `npm run build` and the debug binary.
import assert from 'node:assert/strict'
import { existsSync, mkdirSync, rmSync } from 'node:fs'
import path from 'node:path'
import { after, before, describe } from 'node:test'
import { startFakeLlm } from './fakeLlm.mjs'
import { assertAccessible, launchBrowser, openApp, screenshot, startServer, until, itWithEvidence } from './harness.mjs'

describe('approvals in the web client', { concurrency: 1 }, () => {
  let fake, server, browser, page, workspace
  let failed = false

  before(async () => {
    fake = await startFakeLlm()
    server = await startServer()
    workspace = path.join(server.home, 'workspace')
    mkdirSync(workspace, { recursive: true })
    const put = await server.api('PUT', '/settings/llm', {
      openai_compatible: { base_url: fake.url, api_key: 'sk-e2e-approvals-1234' },
      ollama: { base_url: '' },
    })
    assert.equal(put.status, 200, put.text)
    browser = await launchBrowser()
    page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage()
    page.on('pageerror', (e) => console.error('page error:', e.message))
    await openApp(page, server)
  })

  after(async () => {
    if (failed && server) console.error(`--- server log ---\n${server.log().slice(-8000)}`)
    await browser?.close().catch(() => {})
    await server?.stop().catch(() => {})
    await fake?.close()
  })

  const test = itWithEvidence({
    prefix: 'approvals-',
    page: () => page,
    server: () => server,
    onFail: () => {
      failed = true
    },
  })

  const dialog = () => page.getByRole('alertdialog', { name: 'Run a command outside the sandbox?' })

  async function ask(text) {
    const input = page.getByTestId('composer-input')
    await input.fill(text)
    await until(() => page.getByTestId('send-button').isEnabled(), 'Send to be enabled')
    await input.press('Enter')
  }

  async function lastAnswer(re, what) {
    const answer = page.getByTestId('msg-assistant').last()
    await until(async () => re.test(await answer.innerText()), what)
    return answer.innerText()
  }

  test('the dialog names the call; approve once runs the command', async () => {
    await ask('[escalate] touch once.txt')
    const d = dialog()
    await d.waitFor({ timeout: 30_000 })
    assert.equal(await d.getByTestId('approval-tool').innerText(), 'exec')
    assert.equal(await d.getByTestId('approval-command').innerText(), 'touch once.txt')
    assert.equal(await d.getByTestId('approval-justification').innerText(), 'The task needs files outside the workspace.')
    assert.ok((await d.getByTestId('approval-cwd').innerText()).endsWith('workspace'))
    assert.match(await d.getByTestId('approval-grants').innerText(), /outside the sandbox/)
    // The chat waits: badged in the sidebar.
    await page.getByTestId('approval-badge').first().waitFor()
    // Focus starts on Deny and Tab stays inside.
    assert.ok(await d.getByTestId('approval-deny').evaluate((b) => b === document.activeElement), 'focus on Deny')
    for (let i = 0; i < 7; i++) {
      await page.keyboard.press('Tab')
      assert.ok(await d.evaluate((x) => x.contains(document.activeElement)), `focus left the dialog after ${i + 1} tabs`)
    }
    assert.ok(!existsSync(path.join(workspace, 'once.txt')), 'nothing runs before the answer')
    await assertAccessible(page, 'the approval dialog')
    await screenshot(page, 'approval-dialog')
    await d.getByTestId('approval-once').click()
    await d.waitFor({ state: 'detached' })
    await lastAnswer(/Result: \$ touch once\.txt\s+exit code: 0/, 'the command result')
    assert.ok(existsSync(path.join(workspace, 'once.txt')))
    assert.equal(await page.getByTestId('approval-badge').count(), 0)
  })

  test('deny (Escape) gives the model the declined result', async () => {
    await ask('[escalate] touch denied.txt')
    const d = dialog()
    await d.waitFor({ timeout: 30_000 })
    await page.keyboard.press('Escape')
    await d.waitFor({ state: 'detached' })
    await lastAnswer(/the owner declined/, 'the declined result')
    assert.ok(!existsSync(path.join(workspace, 'denied.txt')))
  })

  test('approve for this chat covers the next same simple command only', async () => {
    await ask('[escalate] touch chat.txt')
    const d = dialog()
    await d.waitFor({ timeout: 30_000 })
    await d.getByTestId('approval-chat').click()
    await d.waitFor({ state: 'detached' })
    await lastAnswer(/Result: \$ touch chat\.txt\s+exit code: 0/, 'the first result')
    rmSync(path.join(workspace, 'chat.txt'))

    // Asked again, it would wait for an answer that never comes: the result proves it was not.
    await ask('[escalate] touch chat.txt')
    await until(async () => /exit code: 0/.test(await page.getByTestId('msg-assistant').last().innerText()) && existsSync(path.join(workspace, 'chat.txt')), 'the unasked run')
    assert.equal(await dialog().count(), 0)

    await ask('[escalate] touch chat.txt; touch sneaky.txt')
    await dialog().waitFor({ timeout: 30_000 })
    assert.equal(await dialog().getByTestId('approval-command').innerText(), 'touch chat.txt; touch sneaky.txt')
    await dialog().getByTestId('approval-deny').click()
    await dialog().waitFor({ state: 'detached' })
    await lastAnswer(/the owner declined/, 'the declined result')
    assert.ok(!existsSync(path.join(workspace, 'sneaky.txt')))
  })

  test('Settings → Safety shows the sandbox and saves the policy', async () => {
    await page.getByTestId('settings-button').click()
    await page.getByTestId('nav-safety').click()
    await page.getByTestId('safety-page').waitFor()
    const sandbox = await server.api('GET', '/settings/sandbox')
    if (sandbox.status === 200) await page.getByTestId('sandbox-status').waitFor()
    else await page.getByTestId('sandbox-unknown').waitFor()
    await assertAccessible(page, 'the Safety page')
    const row = page.getByTestId('policy-exec_escalated')
    assert.equal(await row.inputValue(), 'ask')
    await row.selectOption('deny')
    await page.getByTestId('safety-save').click()
    await page.getByRole('status').filter({ hasText: 'Saved' }).waitFor()
    const got = await server.api('GET', '/settings/approvals')
    assert.equal(got.json.tools.exec_escalated, 'deny')
    await screenshot(page, 'safety-page')
    // Chinese labels come from the dictionary.
    await page.evaluate(() => localStorage.setItem('cashcode.lang', 'zh-CN'))
    await page.reload()
    await page.getByTestId('settings-button').click()
    await page.getByTestId('nav-safety').click()
    await page.getByRole('heading', { name: '审批策略' }).waitFor()
  })
})
