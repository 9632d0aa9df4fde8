// Cuts Markdown into top-level blocks so a streamed answer re-parses only its growing tail, screens
// out blocks whose shape would make the parser slow or recurse deeply, and decides which URLs a
// rendered link or image may carry. Pure functions, run on the main thread during render.

/** Prose longer than this is cut at line (then word) boundaries: parse cost per chunk stays flat. */
export const SOFT_BLOCK = 8192
/** Prose dense with emphasis delimiters (slow for the parser) is cut at this size instead. */
export const DENSE_BLOCK = 2048
const DENSE_DELIMITERS = 128
/** Fences, tables and display math are kept whole up to this size, then cut like prose. */
export const HARD_BLOCK = 65536
/** Deeper container nesting (`>`, list markers) on one line is shown as plain text. */
export const MAX_NESTING = 16
/** Longer runs of one emphasis or bracket character, or deeper `[` nesting, are shown as plain text. */
export const MAX_RUN = 64

const FENCE_OPEN = /^ {0,3}(`{3,}|~{3,})/
const MATH_OPEN = /^ {0,3}\$\$/
const TABLE_DELIM = /^ {0,3}\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/
const LIST_ITEM = /^ {0,3}(?:[-*+]|\d{1,9}[.)])(?:[ \t]|$)/

type Kind = 'fence' | 'math' | 'table' | 'prose'

interface Raw {
  lines: string[]
  kind: Kind
}

/** Splits `text` into top-level blocks, in order; every line of `text` lands in exactly one. */
export function splitBlocks(text: string): string[] {
  const lines = text.split('\n')
  const raws: Raw[] = []
  let cur: Raw | null = null
  let fence: { ch: string; len: number } | null = null
  let math = false
  let blank = false
  const flush = () => {
    if (cur && cur.lines.length) raws.push(cur)
    cur = null
  }
  for (const line of lines) {
    if (fence) {
      cur!.lines.push(line)
      const close = new RegExp(`^ {0,3}${fence.ch === '`' ? '`' : '~'}{${fence.len},}\\s*$`)
      if (close.test(line)) fence = null
      continue
    }
    if (math) {
      cur!.lines.push(line)
      if (/\$\$\s*$/.test(line)) math = false
      continue
    }
    const isBlank = line.trim() === ''
    if (isBlank) {
      blank = true
      if (cur) cur.lines.push(line)
      continue
    }
    // A blank line ends a block unless the next line continues it (indented, or another item of
    // the same list): splitting inside a list item would turn its indented rest into code.
    const indented = /^[ \t]/.test(line)
    const continuesList = cur?.kind === 'prose' && LIST_ITEM.test(cur.lines[0]) && LIST_ITEM.test(line)
    const startsOwn = FENCE_OPEN.test(line) || MATH_OPEN.test(line)
    if (cur && ((blank && !indented && !continuesList) || (startsOwn && !indented))) flush()
    blank = false
    const f = FENCE_OPEN.exec(line)
    if (f && !indented) {
      flush()
      cur = { lines: [line], kind: 'fence' }
      fence = { ch: f[1][0], len: f[1].length }
      continue
    }
    if (MATH_OPEN.test(line) && !indented) {
      flush()
      cur = { lines: [line], kind: 'math' }
      // `$$ x $$` on one line opens and closes.
      const t = line.trim()
      math = !(t.length > 4 && t.endsWith('$$'))
      continue
    }
    if (!cur) cur = { lines: [], kind: 'prose' }
    if (cur.kind === 'fence' || cur.kind === 'math') {
      flush()
      cur = { lines: [], kind: 'prose' }
    }
    cur.lines.push(line)
  }
  flush()
  const out: string[] = []
  for (const r of raws) {
    const table = r.kind === 'prose' && r.lines[0].includes('|') && TABLE_DELIM.test(r.lines[1] ?? '')
    const limit = r.kind !== 'prose' || table ? HARD_BLOCK : dense(r.lines) ? DENSE_BLOCK : SOFT_BLOCK
    for (const piece of cutLines(r.lines, limit)) out.push(piece)
  }
  return out
}

function dense(lines: string[]): boolean {
  let n = 0
  for (const line of lines) for (let i = 0; i < line.length; i++) if (line[i] === '*' || line[i] === '_') n++
  return n > DENSE_DELIMITERS
}

/** Joins lines into pieces of at most `limit` chars, cutting an over-long line at a space. */
function cutLines(lines: string[], limit: number): string[] {
  const whole = lines.join('\n')
  if (whole.length <= limit) return [whole]
  const out: string[] = []
  let acc = ''
  const push = () => {
    if (acc) out.push(acc)
    acc = ''
  }
  for (let line of lines) {
    while (line.length > limit) {
      push()
      let cut = line.lastIndexOf(' ', limit)
      if (cut < limit / 2) cut = limit
      out.push(line.slice(0, cut))
      line = line.slice(cut)
    }
    if (acc && acc.length + 1 + line.length > limit) push()
    acc = acc ? `${acc}\n${line}` : line
  }
  push()
  return out
}

/**
 * True if the block would make the parser recurse deeply or run long: many nested containers on
 * one line, a long run of `*`, `_`, `~`, `[` or `]`, or `[` nested deeper than MAX_RUN. One linear
 * scan; code fences are exempt (their content is not parsed as Markdown).
 */
export function isHostile(block: string): boolean {
  if (FENCE_OPEN.test(block)) return false
  let nesting = 0
  let lineStart = true
  let run = 0
  let runCh = ''
  let depth = 0
  for (let i = 0; i < block.length; i++) {
    const c = block[i]
    if (c === '\n') {
      lineStart = true
      nesting = 0
      run = 0
      continue
    }
    if (lineStart) {
      if (c === ' ' || c === '\t') continue
      if (c === '>' || ((c === '-' || c === '*' || c === '+') && /[ \t]/.test(block[i + 1] ?? ''))) {
        if (++nesting > MAX_NESTING) return true
        i++
        continue
      }
      const num = /^\d{1,9}[.)][ \t]/.exec(block.slice(i, i + 12))
      if (num) {
        if (++nesting > MAX_NESTING) return true
        i += num[0].length - 1
        continue
      }
      lineStart = false
    }
    if (c === '\\') {
      i++
      run = 0
      continue
    }
    if (c === '*' || c === '_' || c === '~' || c === '[' || c === ']') {
      run = c === runCh ? run + 1 : 1
      runCh = c
      if (run > MAX_RUN) return true
    } else if (c !== ' ') {
      run = 0
      runCh = ''
    }
    if (c === '[' && ++depth > MAX_RUN) return true
    if (c === ']' && depth > 0) depth--
  }
  return false
}

const SAFE_IMAGE_DATA = /^data:image\/(?:png|gif|jpeg|webp);base64,[a-z0-9+/=\s]*$/i

/**
 * The URL a rendered link (`href`) or image (`src`) may carry, or "" to drop it: http(s), mailto
 * and relative URLs; for images also base64 PNG/GIF/JPEG/WebP data (never SVG, which can script).
 */
export function safeUrl(url: string, key: string): string {
  const u = url.trim()
  if (key === 'src' && SAFE_IMAGE_DATA.test(u)) return u
  const colon = u.indexOf(':')
  const cut = Math.min(...['/', '?', '#'].map((c) => (u.indexOf(c) === -1 ? Infinity : u.indexOf(c))))
  // No scheme (relative URL, anchor) or the colon comes after a path, query or fragment start.
  if (colon === -1 || colon > cut) return u
  const scheme = u.slice(0, colon).toLowerCase()
  if (scheme === 'http' || scheme === 'https') return u
  if (scheme === 'mailto' && key === 'href') return u
  return ''
}

/** How an answer's image is shown: `inline` (data URLs and this page's own origin render),
 * `click` (a remote https image: a button until the person clicks, so an answer cannot make the
 * browser contact a host by itself), `link` (anything else, e.g. plain http, which the page's
 * Content-Security-Policy would block anyway: a link that opens in a new tab). */
export type ImageMode = 'inline' | 'click' | 'link'

export function imageMode(src: string, pageOrigin: string | null): ImageMode {
  const s = src.trim()
  if (SAFE_IMAGE_DATA.test(s)) return 'inline'
  let u: URL
  try {
    u = new URL(s, pageOrigin ?? undefined)
  } catch {
    return 'link'
  }
  if (pageOrigin && u.origin === pageOrigin) return 'inline'
  return u.protocol === 'https:' ? 'click' : 'link'
}

/** The host shown for a remote image (`example.com`, `[::1]:8443`), or the URL when it has none. */
export function imageHost(src: string): string {
  try {
    return new URL(src.trim()).host || src
  } catch {
    return src
  }
}
