// Browser test of projects (docs/http-api.md §11): Settings → Safety lists the project roots
// and saves them (a refused root shows the server's reason and changes nothing); "New chat in a
// project" opens a chat bound to a folder, whose commands run there, and the chat list names
// the project; a folder outside the roots is refused with a banner. Needs `npm run build` and
// the debug binary.
import assert from 'node:assert/strict'
import { existsSync, mkdirSync, readFileSync, realpathSync } from 'node:fs'
import path from 'node:path'
import { after, before, describe } from 'node:test'
import { startFakeLlm } from './fakeLlm.mjs'
import { launchBrowser, openApp, startServer, until, itWithEvidence } from './harness.mjs'

describe('projects in the web client', { concurrency: 1 }, () => {
  let fake, server, browser, page, workspace, project
  let failed = false

  before(async () => {
    fake = await startFakeLlm()
    server = await startServer()
    workspace = path.join(server.home, 'workspace')
    project = path.join(workspace, 'app')
    mkdirSync(project, { recursive: true })
    workspace = realpathSync(workspace)
    project = realpathSync(project)
    const put = await server.api('PUT', '/settings/llm', {
      openai_compatible: { base_url: fake.url, api_key: 'sk-e2e-projects-1234' },
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
    prefix: 'projects-',
    page: () => page,
    server: () => server,
    onFail: () => {
      failed = true
    },
  })

  async function newChatIn(folder) {
    await page.getByTestId('new-chat-project').click()
    await page.getByTestId('project-path').fill(folder)
    await page.getByTestId('project-path').press('Enter')
  }

  test('a chat opened in a project runs its commands there and is listed with it', async () => {
    await newChatIn(project)
    const input = page.getByTestId('composer-input')
    await input.fill('[exec] pwd > where.txt')
    await until(() => page.getByTestId('send-button').isEnabled(), 'Send to be enabled')
    await input.press('Enter')
    await until(() => existsSync(path.join(project, 'where.txt')), 'the command to run in the project')
    assert.equal(readFileSync(path.join(project, 'where.txt'), 'utf8').trim(), project)
    assert.ok(!existsSync(path.join(workspace, 'where.txt')))
    const row = page.getByTestId('session-project').first()
    await until(async () => (await row.innerText()) === 'app', 'the chat list to name the project')
    // The picker offers it again as a recent project.
    await page.getByTestId('new-chat-project').click()
    await until(async () => (await page.getByTestId('project-option').allInnerTexts()).some((t) => t.includes(project)), 'the recent project')
    await page.keyboard.press('Escape')
  })

  test('a folder outside the project roots is refused with the reason', async () => {
    await newChatIn(path.dirname(workspace))
    const banner = page.getByRole('alert').filter({ hasText: 'overlaps CashCode' })
    await banner.first().waitFor({ timeout: 10_000 })
  })

  test('Settings → Safety saves the roots and refuses a server directory', async () => {
    await page.getByTestId('settings-button').click()
    await page.getByTestId('nav-safety').click()
    const roots = page.getByTestId('project-roots')
    await roots.waitFor()
    assert.match(await roots.innerText(), new RegExp(workspace.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')))
    await page.getByTestId('project-root-input').fill(path.join(server.home, 'data'))
    await page.getByTestId('project-root-input').press('Enter')
    await page.getByTestId('project-roots-save').click()
    await page.getByTestId('project-roots-error').waitFor()
    assert.match(await page.getByTestId('project-roots-error').innerText(), /overlaps CashCode/)
    const view = await server.api('GET', '/settings/projects')
    assert.deepEqual(JSON.parse(view.text).roots, [], 'nothing saved')
    // Replace it with the project folder: saved.
    await page.getByRole('button', { name: /Remove/ }).click()
    await page.getByTestId('project-root-input').fill(project)
    await page.getByTestId('project-root-input').press('Enter')
    await page.getByTestId('project-roots-save').click()
    await until(async () => JSON.parse((await server.api('GET', '/settings/projects')).text).roots[0] === project, 'the saved root')
  })
})
