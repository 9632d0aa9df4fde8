// Browser test for long chats: a restored chat shows its newest page first, scrolling back
// loads the older pages in order (the reader keeps their place), and persisted tool steps come
// back as the same tool blocks a live turn shows. The history is written straight into the
// data dir, as the server would have written it; no model is needed.
import assert from 'node:assert/strict'
import { mkdirSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { launchBrowser, screenshot, startServer, until } from './harness.mjs'

const CHAT = 'long-e2e-chat'
const TURNS = 130

let server, browser, page

function writeHistory(home) {
  const dir = path.join(home, 'memory', CHAT)
  mkdirSync(dir, { recursive: true })
  const lines = []
  let cursor = 0
  const rec = (r) => lines.push(JSON.stringify({ cursor: ++cursor, timestamp: '2026-12-01T10:00', ...r }))
  for (let i = 0; i < TURNS; i++) {
    rec({ role: 'user', content: `question ${i}` })
    if (i % 10 === 0) {
      const id = `call_${i}`
      rec({
        role: 'tool_calls',
        content: '[TOOL_CALLS: read_file]',
        tool_calls: [{ id, type: 'function', function: { name: 'read_file', arguments: '{"path":"a.txt"}' } }],
      })
      rec({ role: 'tool', content: `file body ${i}`, tool_call_id: id, name: 'read_file' })
    }
    rec({ role: 'assistant', content: `answer ${i}` })
  }
  writeFileSync(path.join(dir, 'history.jsonl'), lines.join('\n') + '\n')
  writeFileSync(path.join(dir, 'metadata.json'), JSON.stringify({ title: 'Long restored chat' }))
}

const users = async () => page.getByTestId('msg-user').getByTestId('msg-text').allInnerTexts()

describe('long chat history in the web client', { concurrency: 1 }, () => {
  before(async () => {
    server = await startServer()
    writeHistory(server.home)
    browser = await launchBrowser()
    page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage()
    page.on('pageerror', (e) => console.error('page error:', e.message))
  })

  after(async () => {
    await browser?.close().catch(() => {})
    await server?.stop().catch(() => {})
  })

  it('loads the newest page, scrolls back through the rest in order, and restores tool blocks', async () => {
    const requests = []
    page.on('request', (r) => {
      if (r.url().includes('/messages')) requests.push(new URL(r.url()).search)
    })
    await page.goto(server.httpUrl + '/')
    const row = page.getByTestId('session-row').filter({ hasText: 'Long restored chat' })
    await row.waitFor()
    await row.locator('button').first().click()
    await page.getByTestId('msg-user').filter({ hasText: `question ${TURNS - 1}` }).waitFor()
    const first = await users()
    assert.ok(first.length < 40, `only the newest page: ${first.length} user messages`)
    assert.equal(first.at(-1), `question ${TURNS - 1}`)
    // restored turns show when they were stored
    assert.equal(await page.getByTestId('msg-user').last().getByTestId('msg-time').count(), 1)
    assert.ok(requests[0].includes('limit=') && requests[0].includes('tools=1'), requests[0])
    // The newest page holds the tool step of turn 120: a done block with its result.
    const block = page.getByTestId('tool-block').filter({ hasText: 'read_file' }).last()
    await block.waitFor()
    assert.equal(await block.getAttribute('data-done'), 'true')
    assert.equal(await block.getAttribute('data-call-id'), 'call_120')
    assert.match(await block.getByTestId('tool-result').innerText(), /file body 120/)
    await screenshot(page, 'history-01-newest-page')

    // Scroll back to the top until the first question is there.
    const transcript = page.getByTestId('transcript')
    await until(async () => {
      await transcript.evaluate((el) => el.scrollTo({ top: 0 }))
      return (await users()).includes('question 0')
    }, 'the oldest page', 30_000)
    const all = await users()
    assert.deepEqual(all, Array.from({ length: TURNS }, (_, i) => `question ${i}`), 'every turn once, in order')
    assert.ok(requests.some((q) => q.includes('before=')), `older pages asked with before: ${requests}`)
    const blocks = page.getByTestId('tool-block')
    assert.equal(await blocks.count(), TURNS / 10)
    for (let i = 0; i < TURNS / 10; i++) {
      assert.equal(await blocks.nth(i).getAttribute('data-call-id'), `call_${i * 10}`)
      assert.equal(await blocks.nth(i).getAttribute('data-done'), 'true')
    }
    assert.equal(await page.getByTestId('older-history').count(), 0, 'nothing older left')
    await screenshot(page, 'history-02-scrolled-back')
  })
})
