// Browser test of what the approval dialog shows before the owner answers: a
// 29-line command says its line count and keeps Approve unreachable until its end was shown;
// tokens are not split; the title says where the call runs; the countdown in a tab that
// attaches later counts from the server's deadline (within 1 s); near the end the bar turns
// urgent with one polite announcement; in zh-CN at phone width the dialog holds no English
// server text and the countdown stays on one line. Screenshots: approval-screens-*.png.
// Needs `npm run build` and the debug binary.
import assert from 'node:assert/strict'
import { mkdirSync } from 'node:fs'
import path from 'node:path'
import { after, before, describe } from 'node:test'
import { startFakeLlm } from './fakeLlm.mjs'
import { launchBrowser, openApp, screenshot, startServer, until, itWithEvidence } from './harness.mjs'

const PHONE = { width: 390, height: 844 }
const DESKTOP = { width: 1280, height: 800 }

async function startWith(fake, env) {
  const server = await startServer(env)
  mkdirSync(path.join(server.home, 'workspace'), { recursive: true })
  const put = await server.api('PUT', '/settings/llm', {
    openai_compatible: { base_url: fake.url, api_key: 'sk-e2e-approval-screens-1234' },
    ollama: { base_url: '' },
  })
  assert.equal(put.status, 200, put.text)
  return server
}

describe('approval screens that cannot mislead', { concurrency: 1 }, () => {
  let fake, server, browser
  let page
  let failed = false
  const extra = []

  before(async () => {
    fake = await startFakeLlm()
    server = await startWith(fake, { CASHCODE_APPROVAL_TIMEOUT: '60' })
    browser = await launchBrowser()
  })

  after(async () => {
    if (failed && server) console.error(`--- server log ---\n${server.log().slice(-8000)}`)
    await browser?.close().catch(() => {})
    await server?.stop().catch(() => {})
    for (const s of extra) await s.stop().catch(() => {})
    await fake?.close()
  })

  const test = itWithEvidence({
    prefix: 'approval-screens-',
    page: () => page,
    server: () => server,
    onFail: () => {
      failed = true
    },
  })

  async function open(viewport, lang, srv = server) {
    const ctx = await browser.newContext({ viewport })
    await ctx.addInitScript((l) => localStorage.setItem('cashcode.lang', l), lang)
    const p = await ctx.newPage()
    p.on('pageerror', (e) => console.error('page error:', e.message))
    // The request frames as the server sent them, to compare with what the dialog shows.
    p.requests = []
    p.on('websocket', (ws) =>
      ws.on('framereceived', (f) => {
        try {
          const v = JSON.parse(f.payload)
          if (v.event === 'approval_request') p.requests.push({ ...v, at: Date.now() })
        } catch {
          /* not JSON */
        }
      }),
    )
    await openApp(p, srv)
    return p
  }

  async function ask(p, text) {
    const input = p.getByTestId('composer-input')
    await input.fill(text)
    await until(() => p.getByTestId('send-button').isEnabled(), 'Send to be enabled')
    await input.press('Enter')
  }

  for (const [lang, viewport, label] of [
    ['en', DESKTOP, 'en-desktop'],
    ['zh-CN', PHONE, 'zh-phone'],
  ]) {
    test(`a 29-line command: line count, approve only after its end was shown (${label})`, async () => {
      page = await open(viewport, lang)
      await ask(page, '[escalate-lines 29]')
      const d = page.getByTestId('approval-dialog')
      await d.waitFor({ timeout: 30_000 })
      await until(() => page.requests.length > 0, 'the request frame')
      assert.equal(await d.getAttribute('data-kind'), 'outside')
      assert.match(await page.title(), /^\(1\) ⚠ /, 'the page title marks the waiting request')
      assert.equal(await d.getByTestId('approval-title').innerText(), lang === 'en' ? 'Run a command outside the sandbox?' : '在沙箱外运行命令？')
      assert.equal(await d.getByTestId('approval-lines').innerText(), lang === 'en' ? '29 lines' : '共 29 行')
      const box = d.getByTestId('approval-command')
      assert.equal(await box.evaluate((el) => getComputedStyle(el).wordBreak), 'normal', 'tokens are never split')
      assert.ok(await box.evaluate((el) => el.scrollHeight > el.clientHeight), 'the box overflows at first')
      assert.ok(await d.getByTestId('approval-once').isDisabled(), 'approve waits for the end')
      // A multi-line script is never granted for the chat (`grant: null`): approve once only.
      assert.equal(page.requests[0].grant, null)
      assert.equal(await d.getByTestId('approval-chat').count(), 0)
      await d.getByTestId('approval-read-end').waitFor()
      await screenshot(page, `approval-screens-29-lines-${label}`)
      if (lang === 'en') {
        // Scrolling to the end is enough.
        await box.evaluate((el) => {
          el.scrollTop = el.scrollHeight
        })
      } else {
        await d.getByTestId('approval-show-all').click()
      }
      await until(() => d.getByTestId('approval-once').isEnabled(), 'approve after the end was shown')
      assert.match(await box.innerText(), /echo end-of-command$/)
      if (lang === 'zh-CN') {
        // No English server text in the zh dialog; the countdown on one line at 390 px.
        // (A server without the `grant` field only says it in English.)
        const grants = await d.getByTestId('approval-grants').innerText()
        if ('grant' in page.requests[0]) assert.doesNotMatch(grants, /[A-Za-z]{4,}/, grants)
        else assert.match(await d.getByTestId('approval-grants-once').innerText(), /^仅批准这一次/)
        const left = d.getByTestId('approval-left')
        const h = await left.evaluate((el) => el.getBoundingClientRect().height)
        const lh = await left.evaluate((el) => parseFloat(getComputedStyle(el).lineHeight))
        assert.ok(h <= lh * 1.5, `countdown wraps: ${h}px for a ${lh}px line`)
        const width = await page.evaluate(() => document.documentElement.scrollWidth)
        assert.ok(width <= PHONE.width, `page wider than the phone: ${width}`)
      }
      await screenshot(page, `approval-screens-29-lines-end-${label}`)
      await d.getByTestId('approval-deny').click()
      await d.waitFor({ state: 'detached' })
      assert.doesNotMatch(await page.title(), /⚠/)
      await page.context().close()
    })
  }

  test('a tab attaching later counts from the server deadline (within 1 s)', async () => {
    // Its own server: the one chat in the list is the waiting one.
    const own = await startWith(fake, { CASHCODE_APPROVAL_TIMEOUT: '60' })
    extra.push(own)
    page = await open(DESKTOP, 'en', own)
    await ask(page, '[escalate] touch later.txt')
    const d = page.getByTestId('approval-dialog')
    await d.waitFor({ timeout: 30_000 })
    await until(() => page.requests.length > 0, 'the request frame')
    const deadline = page.requests[0].deadline_ms
    assert.equal(typeof deadline, 'number')
    await new Promise((r) => setTimeout(r, 4000))

    for (const [viewport, lang, label] of [
      [DESKTOP, 'en', 'en-desktop'],
      [PHONE, 'zh-CN', 'zh-phone'],
    ]) {
      // A tab opened while a chat waits opens that chat, and its dialog, by itself.
      const tab = await open(viewport, lang, own)
      const d2 = tab.getByTestId('approval-dialog')
      await d2.waitFor({ timeout: 30_000 })
      // The tab replays the running turn (its request among its events), then gets the request
      // re-sent with the time left now: the dialog counts from the deadline either way.
      await until(() => tab.requests.some((r) => r.remaining_sec <= 57), 'the re-sent request')
      assert.ok(tab.requests.every((r) => r.deadline_ms === deadline), 'one deadline in every copy')
      const resent = tab.requests.find((r) => r.remaining_sec <= 57)
      assert.equal(resent.deadline_ms, deadline)
      assert.ok(resent.remaining_sec <= 57, `re-sent with less time left: ${resent.remaining_sec}`)
      const shown = Number(await d2.getByTestId('approval-left').getAttribute('data-left'))
      const server = Math.ceil((deadline - Date.now()) / 1000)
      assert.ok(Math.abs(shown - server) <= 1, `dialog ${shown} s, server ${server} s`)
      assert.ok(shown <= 56, `the dialog does not restart the full timeout: ${shown}`)
      await screenshot(tab, `approval-screens-reattach-${label}`)
      await tab.context().close()
    }
    await d.getByTestId('approval-deny').click()
    await d.waitFor({ state: 'detached' })
    await page.context().close()
  })

  test('near the end the bar turns urgent with one polite announcement', async () => {
    const short = await startWith(fake, { CASHCODE_APPROVAL_TIMEOUT: '14' })
    extra.push(short)
    page = await open(PHONE, 'zh-CN', short)
    await ask(page, '[escalate] touch urgent.txt')
    const d = page.getByTestId('approval-dialog')
    await d.waitFor({ timeout: 30_000 })
    const bar = d.getByTestId('approval-bar')
    await until(async () => (await bar.getAttribute('data-urgent')) === 'true', 'the urgent bar')
    const said = await page.getByTestId('approval-announce').innerText()
    assert.match(said, /审批请求还剩 \d+ 秒/)
    await new Promise((r) => setTimeout(r, 1500))
    assert.equal(await page.getByTestId('approval-announce').innerText(), said, 'announced once')
    await screenshot(page, 'approval-screens-urgent-zh-phone')
    await d.getByTestId('approval-deny').click()
    await d.waitFor({ state: 'detached' })
    await page.context().close()
  })
})
