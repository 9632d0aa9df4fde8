// End-to-end harness: starts the real CashCode binary on free ports with a throwaway home, and a
// headless Debian chromium through playwright-core (never a downloaded browser).
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { createRequire } from 'node:module'
import { existsSync, mkdtempSync, mkdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { it } from 'node:test'
import { fileURLToPath } from 'node:url'
import { chromium } from 'playwright-core'

const here = path.dirname(fileURLToPath(import.meta.url))
export const clientDir = path.resolve(here, '..')
export const repoRoot = path.resolve(clientDir, '..')
export const screenshotDir = path.join(clientDir, 'screenshots')

export async function startServer(extraEnv = {}) {
  const bin = path.resolve(clientDir, process.env.CASHCODE_BIN ?? '../target/debug/cashcode')
  if (!existsSync(bin)) throw new Error(`server binary not found: ${bin} (run cargo build, or set CASHCODE_BIN)`)
  const dist = path.join(clientDir, 'dist')
  if (!existsSync(path.join(dist, 'index.html'))) throw new Error('client/dist is missing: run npm run build first')
  const home = mkdtempSync(path.join(tmpdir(), 'cashcode-e2e-'))
  mkdirSync(path.join(home, 'config'), { recursive: true })
  const child = spawn(bin, [], {
    cwd: home,
    env: {
      PATH: process.env.PATH,
      HOME: home,
      // Turn, tool and request events are DEBUG lines: a failing test's log shows what the
      // server did (withServerLog).
      CASHCODE_CONSOLE_LOG_LEVEL: process.env.CASHCODE_CONSOLE_LOG_LEVEL ?? 'debug',
      CASHCODE_HOME: home,
      CASHCODE_CONFIG_DIR: path.join(home, 'config'),
      CASHCODE_PORT: '0',
      WS_PORT: '0',
      DREAM_INTERVAL: '0',
      CASHCODE_CLIENT_DIR: dist,
      CASHCODE_PROJECT_DIR: repoRoot,
      ...extraEnv,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let log = ''
  const append = (d) => {
    log += d.toString()
    if (log.length > 2_000_000) log = log.slice(-1_000_000)
  }
  child.stderr.on('data', append)
  const ports = await new Promise((resolve, reject) => {
    let out = ''
    const found = {}
    const timer = setTimeout(() => reject(new Error(`server did not report its ports in 30 s:\n${log}`)), 30_000)
    child.stdout.on('data', (d) => {
      append(d)
      out += d.toString()
      const h = /http listening on (http:\/\/[^\s]+)/.exec(out)
      const w = /ws listening on (ws:\/\/[^\s]+)/.exec(out)
      if (h) found.http = h[1].replace(/\/$/, '')
      if (w) found.ws = w[1]
      if (found.http && found.ws) {
        clearTimeout(timer)
        resolve(found)
      }
    })
    child.on('exit', (code) => {
      clearTimeout(timer)
      reject(new Error(`server exited early (${code}):\n${log}`))
    })
  })
  return {
    home,
    httpUrl: ports.http,
    wsUrl: ports.ws,
    log: () => log,
    async api(method, p, body) {
      const res = await fetch(`${ports.http}/api${p}`, {
        method,
        headers: body === undefined ? {} : { 'Content-Type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(20_000),
      })
      const text = await res.text()
      let json = null
      try {
        json = text ? JSON.parse(text) : null
      } catch {
        json = null
      }
      return { status: res.status, text, json }
    },
    async stop() {
      if (child.exitCode === null) {
        child.kill('SIGTERM')
        // The grace timer is cleared once the server has gone: a pending timer would keep
        // this test file's process alive for the rest of its 5 s.
        let grace
        await Promise.race([
          new Promise((r) => child.once('exit', r)),
          new Promise((r) => {
            grace = setTimeout(r, 5000)
          }),
        ])
        clearTimeout(grace)
        if (child.exitCode === null) child.kill('SIGKILL')
      }
      rmSync(home, { recursive: true, force: true })
    },
  }
}

export async function launchBrowser() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--no-first-run',
    ],
  })
}

export async function screenshot(page, name) {
  mkdirSync(screenshotDir, { recursive: true })
  await page.screenshot({ path: path.join(screenshotDir, `${name}.png`) })
}

const require = createRequire(import.meta.url)

/** Serious and critical axe-core violations on the page as it is now (axe injected once per page). */
export async function axeViolations(page) {
  if (!(await page.evaluate(() => 'axe' in window))) {
    // Evaluated through the debugger: the page's Content-Security-Policy allows no inline script,
    // so a <script> tag would be refused.
    await page.evaluate(readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8'))
  }
  const violations = await page.evaluate(async () => {
    const r = await window.axe.run(document, { resultTypes: ['violations'] })
    return r.violations.map((v) => ({
      id: v.id,
      impact: v.impact,
      help: v.help,
      nodes: v.nodes.slice(0, 3).map((n) => `${n.target.join(' ')} :: ${n.failureSummary?.split('\n')[1] ?? ''}`),
    }))
  })
  return violations.filter((v) => v.impact === 'serious' || v.impact === 'critical')
}

export async function assertAccessible(page, screen) {
  const v = await axeViolations(page)
  assert.deepEqual(v, [], `${screen}: serious accessibility violations:\n${JSON.stringify(v, null, 2)}`)
}

/** Adds the last lines of the server's log to a failed test's error, so a CI log that keeps only
 * the failing test's report still shows what the server did. */
/** `it` for a suite around one server (and page): a failing test calls `onFail`, saves a
 * screenshot of the page as `failure-<prefix><test name>.png` and carries the server log's tail.
 * `page` and `server` are getters: the suite's `before` sets them after this is called. */
export function itWithEvidence({ prefix = '', page = () => undefined, server, onFail = () => {} }) {
  return (name, fn) =>
    it(name, async (t) => {
      try {
        await fn(t)
      } catch (e) {
        onFail()
        const p = page()
        if (p) await screenshot(p, `failure-${prefix}${name.replace(/\W+/g, '-').slice(0, 50)}`).catch(() => {})
        throw withServerLog(e, server())
      }
    })
}

export function withServerLog(e, server, lines = 25) {
  if (!(e instanceof Error) || !server) return e
  const tail = server.log().trimEnd().split('\n').slice(-lines).join('\n')
  e.message = `${e.message}\n--- server log, last ${lines} lines ---\n${tail}`
  return e
}

/** Polls `fn` every 100 ms until it returns something truthy (returned); throws with the last
 * value or error after `timeout`. */
export async function until(fn, what, timeout = 20_000) {
  const end = Date.now() + timeout
  let last
  while (Date.now() < end) {
    try {
      last = await fn()
      if (last) return last
    } catch (e) {
      last = e
    }
    await new Promise((r) => setTimeout(r, 100))
  }
  throw new Error(`timed out waiting for ${what} (last: ${last instanceof Error ? last.message : JSON.stringify(last)})`)
}

/** Opens the client served by `server` and waits for its WebSocket. */
export async function openApp(p, server) {
  await p.goto(server.httpUrl + '/')
  await until(async () => (await p.getByTestId('conn-state').getAttribute('data-state')) === 'connected', 'the WebSocket')
}

/** A server whose LLM settings point at the (fake) model at `modelUrl`, its workspace made, and
 * a browser: the set-up most browser tests share. */
export async function startWithModel(modelUrl, env = {}) {
  const server = await startServer(env)
  mkdirSync(path.join(server.home, 'workspace'), { recursive: true })
  const put = await server.api('PUT', '/settings/llm', {
    openai_compatible: { base_url: modelUrl, api_key: 'sk-e2e-model-1234' },
    ollama: { base_url: '' },
  })
  assert.equal(put.status, 200, put.text)
  return { server, browser: await launchBrowser() }
}

/** Types `text` into the composer and sends it once Send is enabled. */
export async function ask(page, text) {
  const input = page.getByTestId('composer-input')
  await input.fill(text)
  await until(() => page.getByTestId('send-button').isEnabled(), 'Send to be enabled')
  await input.press('Enter')
}
