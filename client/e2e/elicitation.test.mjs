// Browser test of MCP elicitation: a stdio server on the official Python MCP SDK
// (tests/fixtures/mcp/elicit_server.py, the checkout's .venv) asks a form during a tool call;
// the dialog is named after the server, keeps focus inside, checks the fields, and the answer
// reaches the server. A second turn is declined with the keyboard (Escape = Cancel).
// Needs `bash scripts/setup.sh`, `npm run build` and the debug binary.
import assert from 'node:assert/strict'
import { existsSync, mkdirSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { after, before, describe } from 'node:test'
import { launchBrowser, repoRoot, screenshot, startServer, until, itWithEvidence } from './harness.mjs'
import { startScriptedModel } from './fakeLlm.mjs'

const PY = path.join(repoRoot, '.venv/bin/python')
const FIXTURE = path.join(repoRoot, 'tests/fixtures/mcp/elicit_server.py')

/** A model that prepares the `forms` server, calls its tool, then repeats the tool's answer. */
const startModel = () =>
  startScriptedModel((msgs) => {
    const last = msgs[msgs.length - 1]
    if (last.role === 'user') {
      return { tool_calls: [{ index: 0, id: 'call_p', type: 'function', function: { name: 'mcp_prepare', arguments: '{"server_name":"forms"}' } }] }
    }
    if (msgs.some((m) => m.role === 'tool') && last.tool_call_id === 'call_p') {
      const args = JSON.stringify({ restaurant: 'Chez Cash' })
      return { tool_calls: [{ index: 0, id: 'call_b', type: 'function', function: { name: 'mcp_forms_book_table', arguments: args } }] }
    }
    return { content: `Result: ${last.content}` }
  })

describe('MCP elicitation in the web client', { concurrency: 1 }, () => {
  let model, server, browser, page
  let failed = false

  before(async () => {
    assert.ok(existsSync(PY), `needs ${PY}: run bash scripts/setup.sh`)
    model = await startModel()
    const { mkdtempSync } = await import('node:fs')
    const { tmpdir } = await import('node:os')
    const project = mkdtempSync(path.join(tmpdir(), 'cashcode-e2e-elicit-'))
    mkdirSync(path.join(project, 'mcp_servers'))
    writeFileSync(path.join(project, 'Cargo.toml'), '')
    writeFileSync(
      path.join(project, 'mcp_servers/mcp_config.json'),
      JSON.stringify({ forms: { type: 'stdio', command: PY, args: [FIXTURE], display_name: 'Forms' } }),
    )
    server = await startServer({ CASHCODE_PROJECT_DIR: project })
    const put = await server.api('PUT', '/settings/llm', {
      openai_compatible: { base_url: model.url, api_key: 'sk-e2e-elicit-1234' },
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

  const test = itWithEvidence({
    prefix: 'elicit-',
    page: () => page,
    server: () => server,
    onFail: () => {
      failed = true
    },
  })

  async function ask(text) {
    const input = page.getByTestId('composer-input')
    await input.fill(text)
    await until(() => page.getByTestId('send-button').isEnabled(), 'Send to be enabled')
    await input.press('Enter')
    return page.getByRole('dialog', { name: 'Input requested by forms' })
  }

  test('fill the form: checks first, then the server gets the answer', async () => {
    await page.goto(server.httpUrl + '/')
    await until(async () => (await page.getByTestId('conn-state').getAttribute('data-state')) === 'connected', 'connected')
    const dialog = await ask('book a table')
    await dialog.waitFor({ timeout: 30_000 })
    assert.match(await dialog.innerText(), /Booking at Chez Cash: who is coming\?/)
    // Focus starts inside and Tab cycles inside.
    for (let i = 0; i < 8; i++) {
      await page.keyboard.press('Tab')
      assert.ok(await dialog.evaluate((d) => d.contains(document.activeElement)), `focus left the dialog after ${i + 1} tabs`)
    }
    // Required and bounded fields are checked before anything is sent.
    await dialog.getByTestId('elicit-accept').click()
    await until(async () => (await dialog.getByTestId('elicit-error').count()) >= 2, 'the required errors')
    await dialog.getByLabel('name').fill('Ann Lee')
    await dialog.getByLabel('guests').fill('40')
    await dialog.getByTestId('elicit-accept').click()
    await dialog.getByText('Must be at most 12').waitFor()
    await dialog.getByLabel('guests').fill('3')
    await dialog.getByLabel('vip').check()
    await screenshot(page, 'elicitation-form')
    await dialog.getByLabel('guests').press('Enter')
    await dialog.waitFor({ state: 'detached' })
    const answer = page.getByTestId('msg-assistant').last()
    await until(async () => /booked Chez Cash: name=Ann Lee guests=3 vip=True/.test(await answer.innerText()), 'the result')
  })

  test('Escape cancels; the server hears cancel', async () => {
    const dialog = await ask('book another')
    await dialog.waitFor({ timeout: 30_000 })
    await page.keyboard.press('Escape')
    await dialog.waitFor({ state: 'detached' })
    const answer = page.getByTestId('msg-assistant').last()
    await until(async () => /booking cancelled/.test(await answer.innerText()), 'the cancelled result')
  })

  test('Chinese labels come from the dictionary', async () => {
    await page.evaluate(() => localStorage.setItem('cashcode.lang', 'zh-CN'))
    await page.reload()
    await until(async () => (await page.getByTestId('conn-state').getAttribute('data-state')) === 'connected', 'connected')
    const input = page.getByTestId('composer-input')
    await input.fill('book in Chinese')
    await until(() => page.getByTestId('send-button').isEnabled(), 'Send to be enabled')
    await input.press('Enter')
    const dialog = page.getByRole('dialog', { name: 'forms 请求输入' })
    await dialog.waitFor({ timeout: 30_000 })
    await dialog.getByRole('button', { name: '拒绝' }).click()
    await dialog.waitFor({ state: 'detached' })
    await until(async () => /booking declined/.test(await page.getByTestId('msg-assistant').last().innerText()), 'declined')
  })
})
