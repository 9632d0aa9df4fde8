// Browser tests for the two languages: a Chinese browser gets the Chinese client (the original's
// language), an English one gets English, and the choice made in Settings survives a reload.
// The real server + the built client in headless chromium, with the fake LLM on loopback.
import assert from 'node:assert/strict'
import { after, before, describe } from 'node:test'
import { startFakeLlm } from './fakeLlm.mjs'
import { launchBrowser, openApp, screenshot, startServer, until, itWithEvidence } from './harness.mjs'

let llm, server, browser
let failed = false

const htmlLang = (p) => p.evaluate(() => document.documentElement.lang)

/** English words left in the visible text, apart from names that are the same in both languages. */
async function englishWords(p, selector = 'body') {
  const text = await p.locator(selector).innerText()
  const names = /CashCode|OpenAI|Ollama|MCP|SSE|Streamable|HTTP|API|URL|ID|English|fake-model|http\(s\)/g
  return text.replace(names, '').match(/[A-Za-z]{2,}/g) ?? []
}

async function newPage(locale) {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 }, locale })
  const p = await ctx.newPage()
  p.on('pageerror', (e) => console.error('page error:', e.message))
  return { ctx, p }
}

describe('CashCode web client in two languages', { concurrency: 1 }, () => {
  before(async () => {
    llm = await startFakeLlm()
    server = await startServer()
    browser = await launchBrowser()
  })

  after(async () => {
    if (failed && server) console.error(`--- server log ---\n${server.log().slice(-8000)}`)
    await browser?.close().catch(() => {})
    await server?.stop().catch(() => {})
    await llm?.close()
  })

  const test = itWithEvidence({
    server: () => server,
    onFail: () => {
      failed = true
    },
  })

  test('a Chinese browser gets the Chinese client on every key screen', async () => {
    const { ctx, p } = await newPage('zh-CN')
    try {
      await openApp(p, server)
      assert.equal(await htmlLang(p), 'zh-CN')
      // shell, first-run card and composer
      await p.getByTestId('first-run').waitFor()
      assert.equal(await p.getByTestId('new-chat').innerText(), '新建对话')
      assert.equal(await p.getByTestId('nav-mcp').innerText(), 'MCP 市场')
      assert.equal(await p.getByTestId('nav-skills').innerText(), '技能市场')
      assert.equal(await p.getByTestId('conn-state').innerText(), '已连接')
      assert.match(await p.getByTestId('first-run').innerText(), /连接一个大模型即可开始对话/)
      assert.equal(await p.getByTestId('composer-input').getAttribute('placeholder'), '输入消息')
      assert.equal(await p.getByTestId('send-button').innerText(), '发送')
      assert.deepEqual(await englishWords(p), [])
      await screenshot(p, 'i18n-01-zh-first-run')

      // LLM settings: labels, validation, save confirmation and status all in Chinese
      await p.getByRole('button', { name: '打开模型设置' }).click()
      await p.getByTestId('llm-settings').waitFor()
      assert.equal(await p.getByRole('heading', { level: 1 }).innerText(), '模型设置')
      assert.equal(await p.getByTestId('llm-status').innerText(), '尚未配置连接')
      await p.getByTestId('llm-save').click()
      await p.getByText('请填写地址').waitFor()
      assert.deepEqual(await englishWords(p, '[data-testid="llm-settings"]'), [])
      // The connection test's answers come as codes: worded in Chinese, failure and success.
      await p.getByLabel('API 地址').fill('http://127.0.0.1:9/v1')
      await p.getByLabel('API 密钥', { exact: true }).fill('sk-i18n-e2e')
      await p.getByTestId('llm-test').click()
      await until(async () => /无法连接模型服务|连接失败|连接超时/.test(await p.getByTestId('llm-settings').innerText()), 'the failed test in Chinese')
      assert.deepEqual(await englishWords(p, '[data-testid="llm-settings"]'), [])
      await p.getByLabel('API 地址').fill(llm.url)
      await p.getByTestId('llm-test').click()
      await until(async () => /^连接成功，找到 \d+ 个模型$/.test(await p.getByTestId('llm-result').innerText()), 'the test result in Chinese')
      await p.getByTestId('llm-save').click()
      await until(async () => (await p.getByTestId('llm-result').innerText()) === '连接设置已保存', 'the save confirmation')
      assert.equal(await p.getByTestId('llm-status').innerText(), '已有可用连接')
      await screenshot(p, 'i18n-02-zh-llm-settings')

      // a chat turn: the model group, and the history row's relative time
      await p.getByTestId('new-chat').click()
      await until(async () => (await p.getByTestId('model-select').inputValue()).endsWith('fake-model'), 'the fake model')
      assert.equal(await p.getByTestId('model-select').locator('optgroup').getAttribute('label'), '通用 API')
      await p.getByTestId('composer-input').fill('你好，帮我看看')
      await until(() => p.getByTestId('send-button').isEnabled(), 'Send to be enabled')
      await p.getByTestId('composer-input').press('Enter')
      await until(async () => (await p.getByTestId('send-button').count()) === 1 && (await p.getByTestId('msg-assistant').count()) === 1, 'the reply')
      const row = p.getByTestId('session-row').first()
      await until(async () => /刚刚/.test(await row.innerText()), 'the relative time in Chinese')
      // the client's own notice for a stopped turn
      await p.getByTestId('composer-input').fill('[wait] 慢慢想')
      await p.getByTestId('composer-input').press('Enter')
      await p.getByTestId('stop-button').waitFor()
      assert.equal(await p.getByTestId('stop-button').innerText(), '停止')
      await p.getByTestId('stop-button').click()
      await p.getByTestId('msg-notice').filter({ hasText: '已停止生成' }).waitFor({ timeout: 8000 })

      // MCP and Skill markets
      await p.getByTestId('nav-mcp').click()
      await p.getByTestId('mcp-market').waitFor()
      assert.equal(await p.getByRole('heading', { level: 1 }).innerText(), 'MCP 市场')
      assert.ok(await p.getByText('管理本地配置并连接工具服务').isVisible())
      assert.ok(await p.getByRole('button', { name: '新建 MCP' }).isVisible())
      await p.getByTestId('mcp-new').click()
      assert.ok(await p.getByLabel('传输方式').isVisible())
      assert.deepEqual(await englishWords(p, '[role="dialog"]'), [])
      await p.getByRole('button', { name: '取消' }).click()
      await p.getByTestId('nav-skills').click()
      await p.getByTestId('skill-market').waitFor()
      assert.equal(await p.getByRole('heading', { level: 1 }).innerText(), '技能市场')
      assert.equal(await p.getByLabel('搜索技能').getAttribute('placeholder'), '搜索技能')
      await until(async () => /共 [\d,]+ 个/.test(await p.getByTestId('skill-market').innerText()), 'the total in Chinese')
      await screenshot(p, 'i18n-03-zh-skills')
    } finally {
      await ctx.close()
    }
  })

  test('an English browser gets the English client', async () => {
    const { ctx, p } = await newPage('en-US')
    try {
      await openApp(p, server)
      assert.equal(await htmlLang(p), 'en')
      assert.equal(await p.getByTestId('new-chat').innerText(), 'New chat')
      assert.equal(await p.getByTestId('nav-skills').innerText(), 'Skill Market')
      assert.equal(await p.getByTestId('conn-state').innerText(), 'connected')
      assert.equal(await p.getByTestId('composer-input').getAttribute('placeholder'), 'Type a message')
      // The chat list arrives after the shell: the earlier test's chat, with its relative time.
      await p.getByTestId('session-title').first().waitFor()
      // no Chinese in the English client's own words (chat titles and messages are the person's text)
      let body = await p.locator('body').innerText()
      const theirs = [...(await p.getByTestId('session-title').allInnerTexts()), ...(await p.getByTestId('msg-user').allInnerTexts())]
      for (const text of theirs) body = body.replace(text, '')
      assert.doesNotMatch(body, /[\u4e00-\u9fff]/)
      assert.match(body, /just now/)
    } finally {
      await ctx.close()
    }
  })

  test('the language switch in Settings changes everything and is remembered after reload', async () => {
    const { ctx, p } = await newPage('zh-CN')
    try {
      await openApp(p, server)
      assert.equal(await p.getByTestId('new-chat').innerText(), '新建对话')
      await p.getByTestId('settings-button').click()
      const zh = p.getByTestId('lang-zh-CN')
      assert.equal(await zh.getAttribute('aria-checked'), 'true')
      await p.getByTestId('lang-en').click()
      await until(async () => (await p.getByTestId('new-chat').innerText()) === 'New chat', 'the switch to English')
      assert.equal(await htmlLang(p), 'en')
      assert.equal(await p.getByTestId('composer-input').getAttribute('placeholder'), 'Type a message')
      assert.match(await p.getByTestId('session-row').first().innerText(), /just now|min ago/)
      assert.equal(await p.evaluate(() => localStorage.getItem('cashcode.lang')), 'en')
      await screenshot(p, 'i18n-04-switched-en')

      // reload: the stored choice beats the Chinese browser language
      await openApp(p, server)
      assert.equal(await htmlLang(p), 'en')
      assert.equal(await p.getByTestId('new-chat').innerText(), 'New chat')
      assert.equal(await p.getByTestId('settings-button').innerText(), 'Settings')

      // and back to Chinese, also remembered
      await p.getByTestId('settings-button').click()
      await p.getByTestId('lang-zh-CN').click()
      await until(async () => (await p.getByTestId('new-chat').innerText()) === '新建对话', 'the switch to Chinese')
      await openApp(p, server)
      assert.equal(await htmlLang(p), 'zh-CN')
      assert.equal(await p.getByTestId('settings-button').innerText(), '设置')
    } finally {
      await ctx.close()
    }
  })

  test('an English browser keeps a Chinese choice made earlier', async () => {
    const { ctx, p } = await newPage('en-US')
    try {
      await p.goto(server.httpUrl + '/')
      await p.evaluate(() => localStorage.setItem('cashcode.lang', 'zh-CN'))
      await openApp(p, server)
      assert.equal(await htmlLang(p), 'zh-CN')
      assert.equal(await p.getByTestId('nav-mcp').innerText(), 'MCP 市场')
      await p.getByTestId('settings-button').click()
      assert.equal(await p.getByTestId('nav-llm').innerText(), '模型设置')
      assert.equal(await p.getByTestId('lang-menu').getByText('语言').count(), 1)
    } finally {
      await ctx.close()
    }
  })
})
