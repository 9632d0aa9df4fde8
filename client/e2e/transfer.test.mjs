// Browser tests of export and import (docs/http-api.md §4.2): a chat's menu downloads it as
// Markdown, Settings → Export / Import downloads every chat as a zip and imports a ChatGPT
// conversations.json (the new chat is listed at once), and a bad file shows the server's reason
// and changes nothing.
import assert from 'node:assert/strict'
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { after, before, describe } from 'node:test'
import { launchBrowser, openApp, startServer, until, itWithEvidence } from './harness.mjs'

let server, browser, context, page
let failed = false

const HISTORY =
  '{"cursor": 1, "timestamp": "2026-03-01 09:15", "role": "user", "content": "Plan the release"}\n' +
  '{"cursor": 2, "timestamp": "2026-03-01 09:16", "role": "assistant", "content": "Ship on **Friday**."}\n'

const CHATGPT = JSON.stringify([
  {
    title: 'Imported from ChatGPT',
    create_time: 1700000000,
    mapping: {
      r: { id: 'r', message: null, parent: null, children: ['u'] },
      u: { id: 'u', message: { id: 'u', author: { role: 'user' }, create_time: 1700000100, content: { content_type: 'text', parts: ['hello there'] } }, parent: 'r', children: ['a'] },
      a: { id: 'a', message: { id: 'a', author: { role: 'assistant' }, create_time: 1700000200, content: { content_type: 'text', parts: ['hi!'] }, recipient: 'all' }, parent: 'u', children: [] },
    },
    current_node: 'a',
    id: 'e2e-chatgpt-1',
  },
])

const titles = async () => page.getByTestId('session-title').allTextContents()

describe('export and import', { concurrency: 1 }, () => {
  before(async () => {
    server = await startServer()
    const dir = path.join(server.home, 'memory', 'e2e-chat')
    mkdirSync(dir, { recursive: true })
    writeFileSync(path.join(dir, 'history.jsonl'), HISTORY)
    writeFileSync(path.join(dir, 'metadata.json'), '{\n  "title": "Release plan"\n}')
    browser = await launchBrowser()
    context = await browser.newContext({ viewport: { width: 1280, height: 800 }, locale: 'en-US', acceptDownloads: true })
    page = await context.newPage()
    page.on('pageerror', (e) => console.error('page error:', e.message))
  })

  after(async () => {
    if (failed && server) console.error(`--- server log ---\n${server.log().slice(-8000)}`)
    await context?.close().catch(() => {})
    await browser?.close().catch(() => {})
    await server?.stop().catch(() => {})
  })

  const test = itWithEvidence({
    page: () => page,
    server: () => server,
    onFail: () => {
      failed = true
    },
  })

  test("a chat's menu downloads it as Markdown", async () => {
    await openApp(page, server)
    await until(async () => (await titles()).includes('Release plan'), 'the seeded chat')
    const row = page.getByTestId('session-row').filter({ hasText: 'Release plan' })
    await row.hover()
    await row.getByRole('button', { name: 'Conversation actions' }).click()
    const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId('export-chat-md').click()])
    assert.equal(download.suggestedFilename(), 'e2e-chat.md')
    const text = readFileSync(await download.path(), 'utf8')
    assert.match(text, /^# Release plan\n/)
    assert.match(text, /Ship on \*\*Friday\*\*\./)
  })

  test('Settings exports every chat as a zip and imports a ChatGPT file', async () => {
    await page.getByTestId('settings-button').click()
    await page.getByTestId('nav-transfer').click()
    const dialog = page.getByRole('dialog')
    await dialog.getByTestId('export-format-jsonl').check()
    const [download] = await Promise.all([page.waitForEvent('download'), dialog.getByTestId('export-all').click()])
    assert.match(download.suggestedFilename(), /^cashcode-chats-\d{12}-jsonl\.zip$/)
    const zip = readFileSync(await download.path())
    assert.equal(zip.subarray(0, 2).toString(), 'PK')
    await until(async () => (await dialog.getByTestId('transfer-status').textContent())?.startsWith('Saved '), 'the saved message')

    await dialog.getByTestId('import-file').setInputFiles({ name: 'conversations.json', mimeType: 'application/json', buffer: Buffer.from(CHATGPT) })
    await until(
      async () => (await dialog.getByTestId('transfer-status').textContent()) === 'Imported 1 conversation(s) from ChatGPT',
      'the import message',
    )
    await until(async () => (await titles()).includes('Imported from ChatGPT'), 'the imported chat in the list')
    const stored = readFileSync(path.join(server.home, 'memory', 'e2e-chatgpt-1', 'history.jsonl'), 'utf8')
    assert.match(stored, /"content":"hello there"/)
  })

  test("a bad file shows the server's reason and adds nothing", async () => {
    const dialog = page.getByRole('dialog')
    const before = (await titles()).length
    await dialog.getByTestId('import-file').setInputFiles({ name: 'notes.json', mimeType: 'application/json', buffer: Buffer.from('{"hello": 1}') })
    const status = dialog.getByRole('alert')
    await until(async () => (await status.textContent())?.startsWith('Import failed: Cannot import this file: '), 'the refusal')
    assert.equal((await titles()).length, before)
  })
})
