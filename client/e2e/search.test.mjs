// Browser test for search over every chat (docs/search.md): Ctrl+K and the sidebar entry open
// the dialog, hits come grouped by chat with the matched words in <mark>, a hit far back in a
// long chat opens that chat scrolled to the message (paging back) and highlighted, Chinese
// finds Chinese, and the dialog speaks Chinese when the page does. With UPDATE_SCREENS=1 it also
// saves the README's picture (client/screenshots/screen-search.png). The histories are written
// straight into the data dir while the server runs (the index notices them); no model is needed.
import assert from 'node:assert/strict'
import { mkdirSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { assertAccessible, launchBrowser, openApp, screenshot, startServer, until } from './harness.mjs'

const LONG = 'search-long-chat'
const ZH = 'search-zh-chat'
const TURNS = 130

let server, browser

function writeChat(home, id, title, records) {
  const dir = path.join(home, 'memory', id)
  mkdirSync(dir, { recursive: true })
  const lines = records.map((r, i) => JSON.stringify({ cursor: i + 1, timestamp: '2026-11-20 09:30', ...r }))
  writeFileSync(path.join(dir, 'history.jsonl'), lines.join('\n') + '\n')
  writeFileSync(path.join(dir, 'metadata.json'), JSON.stringify({ title }))
}

function writeHistories(home) {
  const long = []
  for (let i = 0; i < TURNS; i++) {
    long.push({ role: 'user', content: i === 2 ? 'the zebrafish tank needs a new heater' : `question ${i}` })
    long.push({ role: 'assistant', content: `answer ${i}` })
  }
  writeChat(home, LONG, 'Aquarium notes', long)
  writeChat(home, ZH, '旅行计划', [
    { role: 'user', content: '我们明天去北京看长城' },
    { role: 'assistant', content: '好的，记得带水。' },
  ])
}

async function newPage(locale = 'en-US') {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 }, locale })
  const p = await ctx.newPage()
  p.on('pageerror', (e) => console.error('page error:', e.message))
  return { ctx, p }
}

describe('search in the web client', { concurrency: 1 }, () => {
  before(async () => {
    server = await startServer()
    writeHistories(server.home)
    browser = await launchBrowser()
  })

  after(async () => {
    await browser?.close().catch(() => {})
    await server?.stop().catch(() => {})
  })

  it('Ctrl+K finds a message far back in a long chat and opens it there, highlighted', async () => {
    const { ctx, p } = await newPage()
    try {
      await openApp(p, server)
      await p.getByTestId('session-row').filter({ hasText: 'Aquarium notes' }).waitFor()
      await p.keyboard.press('Control+k')
      const input = p.getByTestId('search-input')
      await input.waitFor()
      assert.equal(await p.evaluate(() => document.activeElement?.getAttribute('data-testid')), 'search-input')
      await input.fill('zebrafish heater')
      const hit = p.getByTestId('search-hit').first()
      await hit.waitFor()
      const group = p.getByTestId('search-group').first()
      assert.equal(await group.getAttribute('data-chat-id'), LONG)
      assert.match(await group.innerText(), /Aquarium notes/)
      const marks = await hit.locator('mark').allInnerTexts()
      assert.deepEqual(marks, ['zebrafish', 'heater'])
      await assertAccessible(p, 'search dialog')
      await screenshot(p, 'search-01-hits')
      // The README's picture, only when asked for (as e2e/memory.test.mjs).
      if (process.env.UPDATE_SCREENS === '1') await screenshot(p, 'screen-search')

      // Enter opens the first hit: the chat pages back to turn 2 and marks that message.
      await p.keyboard.press('Enter')
      await until(async () => (await p.getByTestId('search-input').count()) === 0, 'the dialog to close')
      const marked = p.locator('[data-highlighted="true"]')
      await marked.waitFor({ timeout: 20_000 })
      assert.match(await marked.innerText(), /zebrafish tank/)
      // It is on screen, not just loaded.
      const box = await marked.boundingBox()
      const view = await p.getByTestId('transcript').boundingBox()
      assert.ok(box && view && box.y >= view.y - 1 && box.y + box.height <= view.y + view.height + 1, JSON.stringify({ box, view }))
      await screenshot(p, 'search-02-opened')

      // The sidebar entry opens it too; Chinese finds Chinese; nothing found says so; Escape closes.
      await p.getByTestId('nav-search').click()
      await p.getByTestId('search-input').fill('北京')
      await until(async () => (await p.getByTestId('search-group').count()) > 0, 'a Chinese hit')
      assert.equal(await p.getByTestId('search-group').first().getAttribute('data-chat-id'), ZH)
      assert.deepEqual(await p.getByTestId('search-hit').first().locator('mark').allInnerTexts(), ['北京'])
      await p.getByTestId('search-input').fill('qwertyuiopasdf')
      await until(async () => /Nothing matches/.test(await p.getByTestId('search-status').innerText()), 'the empty state')
      await p.keyboard.press('Escape')
      await until(async () => (await p.getByTestId('search-input').count()) === 0, 'Escape to close')

      // A click on a hit in another chat switches chats.
      await p.keyboard.press('Control+k')
      await p.getByTestId('search-input').fill('长城')
      await p.getByTestId('search-hit').first().click()
      await p.locator('[data-highlighted="true"]').filter({ hasText: '长城' }).waitFor()
    } finally {
      await ctx.close()
    }
  })

  it('speaks Chinese when the page does', async () => {
    const { ctx, p } = await newPage('zh-CN')
    try {
      await openApp(p, server)
      await p.getByTestId('nav-search').click()
      await p.getByTestId('search-input').waitFor()
      assert.match(await p.getByRole('dialog').innerText(), /搜索全部对话/)
      assert.match(await p.getByTestId('search-status').innerText(), /输入即可搜索所有对话/)
      await p.getByTestId('search-input').fill('zebrafish')
      await until(async () => /\d+ 条结果/.test(await p.getByTestId("search-status").innerText()), "the count in Chinese")
      assert.match(await p.getByTestId('search-hit').first().innerText(), /你/)
      await screenshot(p, 'search-03-zh')
    } finally {
      await ctx.close()
    }
  })
})
