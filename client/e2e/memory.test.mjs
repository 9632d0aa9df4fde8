// Browser tests of the Memory page (MEMORY.md edit, 409 conflict and reload, snapshot diff and
// restore, Dream "Run now") and of the Skill Market's versions (rollback) and evolution
// proposals (diff, approve, reject), on their own server and fake LLM. At the end it walks the
// main screens; with UPDATE_SCREENS=1 it saves them as the README's pictures
// (client/screenshots/screen-*.png, committed), so ordinary runs leave the tree clean.
import assert from 'node:assert/strict'
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { after, before, describe } from 'node:test'
import { startFakeLlm } from './fakeLlm.mjs'
import { assertAccessible, launchBrowser, openApp, screenshot, startServer, until, itWithEvidence } from './harness.mjs'

let llm, server, browser, context, page
let failed = false

/** A README picture, only when asked for (UPDATE_SCREENS=1). */
async function readmeShot(p, name) {
  if (process.env.UPDATE_SCREENS === '1') await screenshot(p, name)
}

const memoryFile = () => readFileSync(path.join(server.home, 'memory', 'MEMORY.md'), 'utf8')
const skillMd = (body) => `---\nname: e2e-notes\ndescription: Notes skill for browser tests\n---\n\n${body}\n`

describe('Memory page and skill history', { concurrency: 1 }, () => {
  before(async () => {
    llm = await startFakeLlm()
    server = await startServer()
    const r = await server.api('PUT', '/settings/llm', {
      openai_compatible: { base_url: llm.url, api_key: 'sk-e2e-memory-0001' },
      ollama: { base_url: llm.url },
    })
    assert.equal(r.status, 200, r.text)
    browser = await launchBrowser()
    context = await browser.newContext({ viewport: { width: 1280, height: 800 }, locale: 'en-US' })
    page = await context.newPage()
    page.on('pageerror', (e) => console.error('page error:', e.message))
  })

  after(async () => {
    if (failed && server) console.error(`--- server log ---\n${server.log().slice(-8000)}`)
    await context?.close().catch(() => {})
    await browser?.close().catch(() => {})
    await server?.stop().catch(() => {})
    await llm?.close()
  })

  const test = itWithEvidence({
    page: () => page,
    server: () => server,
    onFail: () => {
      failed = true
    },
  })

  test('a chat turn answers (and names the model Dream will use)', async () => {
    await openApp(page, server)
    await page.getByTestId('new-chat').click()
    await until(async () => (await page.getByTestId('model-select').inputValue()).endsWith('fake-model'), 'the fake model')
    const input = page.getByTestId('composer-input')
    await input.fill('Remember that I drink green tea and work on CashCode')
    await until(() => page.getByTestId('send-button').isEnabled(), 'Send to be enabled')
    await input.press('Enter')
    await until(async () => (await page.getByTestId('send-button').count()) === 1, 'the turn to end', 20_000)
    await page.getByTestId('msg-assistant').locator('table').waitFor()
  })

  test('Memory: edit and save MEMORY.md; a 409 offers a reload', async () => {
    await page.getByTestId('nav-memory').click()
    await page.getByTestId('memory-page').waitFor()
    const editor = page.getByTestId('memory-content-memory')
    await editor.fill('- likes tea\n')
    await page.getByTestId('memory-save-memory').click()
    await page.getByTestId('memory-saved-memory').waitFor()
    assert.equal(memoryFile(), '- likes tea\n')
    // a second save keeps the first text as snapshot #1
    await editor.fill('- likes green tea\n')
    await page.getByTestId('memory-save-memory').click()
    await until(() => memoryFile() === '- likes green tea\n', 'the second save')
    await page.locator('[data-testid=memory-snapshot][data-id="1"]').waitFor()
    // someone else writes the file (Dream, save_memory, another tab): the next save is refused
    const cur = await server.api('GET', '/memory/memory')
    const other = await server.api('PUT', '/memory/memory', { content: '- likes green tea\n- changed elsewhere\n', expected_hash: cur.json.hash })
    assert.equal(other.status, 200, other.text)
    await editor.fill('- my edit\n')
    await page.getByTestId('memory-save-memory').click()
    await page.getByTestId('memory-error-memory').filter({ hasText: 'changed since it was read' }).waitFor()
    assert.equal(memoryFile(), '- likes green tea\n- changed elsewhere\n', 'the conflicting save wrote nothing')
    await page.getByTestId('memory-reload-memory').click()
    await until(async () => (await editor.inputValue()).includes('changed elsewhere'), 'the reloaded file')
    // SOUL.md has its own editor
    await page.getByTestId('memory-content-soul').fill('You are a concise assistant.')
    await page.getByTestId('memory-save-soul').click()
    await page.getByTestId('memory-saved-soul').waitFor()
    assert.equal(readFileSync(path.join(server.home, 'memory', 'SOUL.md'), 'utf8'), 'You are a concise assistant.')
  })

  test('Memory: a snapshot shows a line diff and restores after a confirmation', async () => {
    await page.getByTestId('nav-memory').click()
    const snap = page.locator('[data-testid=memory-snapshot][data-id="1"]')
    await snap.waitFor()
    await snap.getByTestId('memory-snapshot-diff').click()
    const diff = snap.getByTestId('memory-diff')
    await diff.waitFor()
    // current "- likes green tea / - changed elsewhere" -> snapshot 1 "- likes tea"
    const dels = (await diff.locator('[data-op=del]').allInnerTexts()).map((s) => s.replace(/^−\s*/, ''))
    const adds = (await diff.locator('[data-op=add]').allInnerTexts()).map((s) => s.replace(/^\+\s*/, ''))
    assert.deepEqual(dels, ['- likes green tea', '- changed elsewhere'])
    assert.deepEqual(adds, ['- likes tea'])
    await snap.getByTestId('memory-snapshot-restore').click()
    await page.getByText('can be undone').waitFor()
    await page.getByTestId('confirm-button').click()
    await until(() => memoryFile() === '- likes tea\n', 'the restore')
    await until(async () => (await page.getByTestId('memory-content-memory').inputValue()) === '- likes tea\n', 'the editor to show the restored file')
    // the replaced file is now the newest snapshot, so the restore can be undone
    const list = await server.api('GET', '/memory/snapshots')
    const newest = await server.api('GET', `/memory/snapshots/${list.json.snapshots[0].id}`)
    assert.equal(newest.json.content, '- likes green tea\n- changed elsewhere\n')
  })

  test('Dream: Run now distils the chat into MEMORY.md and reports the outcome', async () => {
    await page.getByTestId('nav-memory').click()
    const card = page.getByTestId('dream-card')
    await card.waitFor()
    assert.match(await card.getByTestId('dream-last').innerText(), /Never/)
    assert.match(await card.getByTestId('dream-undistilled').innerText(), /2 records in 1 chats/)
    await card.getByTestId('dream-run').click()
    await until(async () => /updated from 2 records in 1 chats/.test(await card.getByTestId('dream-last').innerText()), 'the Dream outcome', 20_000)
    assert.match(await card.getByTestId('dream-undistilled').innerText(), /Everything is distilled/)
    // the fake model's answer is the new MEMORY.md, and the editor shows it
    assert.match(memoryFile(), /## Fake answer/)
    await until(async () => (await page.getByTestId('memory-content-memory').inputValue()).includes('## Fake answer'), 'the editor to reload')
    assert.ok(llm.state.requests.some((r) => r.body.stream === false && /memory analyst/.test(JSON.stringify(r.body.messages))))
  })

  test('Skill Market: versions roll back after a confirmation', async () => {
    let r = await server.api('POST', '/skills', { name: 'e2e-notes', content: skillMd('Version one.') })
    assert.equal(r.status, 201, r.text)
    r = await server.api('PUT', '/skills/e2e-notes', { content: skillMd('Version two.') })
    assert.equal(r.status, 200, r.text)
    const snapshot = r.json.snapshot
    await page.getByTestId('nav-skills').click()
    const row = page.locator('[data-testid=skill-row][data-name=e2e-notes]')
    await row.waitFor()
    await row.getByTestId('skill-versions-open').click()
    const v = page.locator(`[data-testid=skill-version][data-version="${snapshot}"]`)
    await v.waitFor()
    await v.getByTestId('skill-rollback').click()
    await page.getByText('kept as a snapshot first').waitFor()
    await page.getByTestId('confirm-button').click()
    await page.getByTestId('skill-rolled-back').waitFor()
    const c = await server.api('GET', '/skills/e2e-notes/content')
    assert.match(c.json.content, /Version one\./)
    // the rollback snapshotted version two, which is now listed too
    await until(async () => (await page.getByTestId('skill-version').count()) === 2, 'the new snapshot in the list')
    await page.getByRole('button', { name: 'Close' }).first().click()
  })

  test('Skill Market: evolution proposals show a diff; approve and reject', async () => {
    const dir = path.join(server.home, 'data', 'skill-evolution', 'proposals')
    mkdirSync(dir, { recursive: true })
    const now = Date.now() / 1000
    const proposal = (id, action, name, content, created) => ({
      id, action, name, candidate_content: content, reason: `Because of ${id}`, evidence_ids: [], base_hash: null,
      status: 'pending', validation: { valid: true, errors: [] }, created_at: created, updated_at: created,
      applied_version: null, fingerprint: `fp-${id}`,
    })
    const created = '---\nname: e2e-brew\ndescription: Brewing tea the user likes\n---\n\nSteep green tea at 80 °C.\n'
    writeFileSync(path.join(dir, 'p-create.json'), JSON.stringify(proposal('p-create', 'create', 'e2e-brew', created, now)))
    writeFileSync(
      path.join(dir, 'p-update.json'),
      JSON.stringify(proposal('p-update', 'update', 'e2e-notes', skillMd('Version three, proposed.'), now - 10)),
    )
    await page.getByTestId('nav-mcp').click()
    await page.getByTestId('nav-skills').click()
    const create = page.locator('[data-testid=proposal][data-id=p-create]')
    const update = page.locator('[data-testid=proposal][data-id=p-update]')
    await create.waitFor()
    // the update's diff is against the current SKILL.md
    await update.getByTestId('proposal-diff').click()
    const diff = update.getByTestId('proposal-diff-view')
    await diff.waitFor()
    assert.deepEqual((await diff.locator('[data-op=del]').allInnerTexts()).map((s) => s.replace(/^−\s*/, '')), ['Version one.'])
    assert.deepEqual((await diff.locator('[data-op=add]').allInnerTexts()).map((s) => s.replace(/^\+\s*/, '')), ['Version three, proposed.'])
    await create.getByTestId('proposal-diff').click()
    await create.getByTestId('proposal-diff-view').waitFor()
    await page.getByTestId('proposals').scrollIntoViewIfNeeded()
    await readmeShot(page, 'screen-skill-proposals')
    await update.getByTestId('proposal-reject').click()
    await page.locator('[data-testid=proposal][data-id=p-update][data-status=rejected]').waitFor()
    await create.getByTestId('proposal-approve').click()
    await page.locator('[data-testid=proposal][data-id=p-create][data-status=applied]').waitFor()
    assert.equal((await server.api('GET', '/skill-evolution/proposals/p-update')).json.status, 'rejected')
    const brew = await server.api('GET', '/skills/e2e-brew/content')
    assert.equal(brew.status, 200, brew.text)
    assert.equal(brew.json.source, 'agent')
    await page.locator('[data-testid=skill-row][data-name=e2e-brew]').waitFor()
    assert.match((await server.api('GET', '/skills/e2e-notes/content')).json.content, /Version one\./, 'the rejected update changed nothing')
  })

  test('README screenshots of the main screens', async () => {
    const top = (id) => page.evaluate((id) => document.querySelector(`[data-testid=${id}]`)?.scrollTo(0, 0), id)
    await page.getByTestId('session-row').first().locator('button').first().click()
    await page.getByTestId('msg-assistant').locator('table').waitFor()
    await readmeShot(page, 'screen-chat')
    await page.getByTestId('nav-mcp').click()
    await page.getByTestId('mcp-market').waitFor()
    await until(async () => (await page.getByTestId('mcp-market').innerText()).length > 40, 'the MCP list')
    await readmeShot(page, 'screen-mcp-market')
    await page.getByTestId('nav-skills').click()
    await page.locator('[data-testid=skill-row][data-name=e2e-brew]').waitFor()
    await top('skill-market')
    await readmeShot(page, 'screen-skill-market')
    // a tidy MEMORY.md for the picture; the fake Dream answer becomes the newest snapshot
    const cur = await server.api('GET', '/memory/memory')
    const tidy = '# User\n- Name: Ana\n- Drinks green tea, no sugar\n\n# Projects\n- CashCode: a local AI agent server in Rust\n\n# Preferences\n- Short answers with code examples\n'
    assert.equal((await server.api('PUT', '/memory/memory', { content: tidy, expected_hash: cur.json.hash })).status, 200)
    await page.getByTestId('nav-mcp').click()
    await page.getByTestId('nav-memory').click()
    await page.getByTestId('memory-page').waitFor()
    await until(async () => (await page.getByTestId('memory-content-memory').inputValue()) === tidy, 'the tidy file')
    const snap = page.getByTestId('memory-snapshot').first()
    await snap.getByTestId('memory-snapshot-diff').click()
    await snap.getByTestId('memory-diff').waitFor()
    await top('memory-page')
    await readmeShot(page, 'screen-memory')
    await assertAccessible(page, 'memory page')
    await page.getByTestId('dream-card').scrollIntoViewIfNeeded()
    await readmeShot(page, 'screen-memory-dream')
    await page.getByRole('button', { name: 'Settings', exact: true }).click()
    await page.getByTestId('nav-llm').click()
    await page.getByTestId('llm-settings').waitFor()
    await readmeShot(page, 'screen-settings')
  })
})
