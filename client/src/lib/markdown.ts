// A small, safe Markdown parser for assistant messages: CommonMark-ish blocks plus the GFM parts
// chat answers use (fenced code, tables, strikethrough, task lists, autolinks). It produces a tree
// that the React renderer turns into elements, so raw HTML is never interpreted.

export type Inline =
  | { t: 'text'; v: string }
  | { t: 'code'; v: string }
  | { t: 'strong'; c: Inline[] }
  | { t: 'em'; c: Inline[] }
  | { t: 'del'; c: Inline[] }
  | { t: 'link'; href: string | null; c: Inline[] }
  | { t: 'br' }

export type Align = 'left' | 'center' | 'right' | null

export interface ListItem {
  task: boolean | null
  children: Block[]
}

export type Block =
  | { t: 'p'; c: Inline[] }
  | { t: 'h'; level: number; c: Inline[] }
  | { t: 'code'; lang: string; text: string }
  | { t: 'hr' }
  | { t: 'quote'; children: Block[] }
  | { t: 'list'; ordered: boolean; start: number; items: ListItem[] }
  | { t: 'table'; align: Align[]; head: Inline[][]; rows: Inline[][][] }

const FENCE_RE = /^( {0,3})(`{3,}|~{3,})[ \t]*([^\s`]*)[^`]*$/
const HEADING_RE = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/
const HR_RE = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/
const QUOTE_RE = /^ {0,3}> ?/
const LIST_RE = /^( {0,3})([-*+]|\d{1,9}[.)])([ \t]+|$)(.*)$/
const TABLE_DELIM_RE = /^ *\|? *:?-+:? *(\| *:?-+:? *)*\|? *$/
const SETEXT_RE = /^ {0,3}(=+|-+)[ \t]*$/

const isBlank = (s: string) => /^\s*$/.test(s)

function splitRow(line: string): string[] {
  let s = line.trim()
  if (s.startsWith('|')) s = s.slice(1)
  if (s.endsWith('|') && !s.endsWith('\\|')) s = s.slice(0, -1)
  const cells: string[] = []
  let cur = ''
  let inCode = false
  for (let i = 0; i < s.length; i++) {
    const ch = s[i]
    if (ch === '\\' && s[i + 1] === '|') {
      cur += '|'
      i++
      continue
    }
    if (ch === '`') inCode = !inCode
    if (ch === '|' && !inCode) {
      cells.push(cur.trim())
      cur = ''
      continue
    }
    cur += ch
  }
  cells.push(cur.trim())
  return cells
}

function isTableStart(lines: string[], i: number): boolean {
  const head = lines[i]
  const delim = lines[i + 1]
  if (delim === undefined || !head.includes('|') || !TABLE_DELIM_RE.test(delim) || !delim.includes('-')) return false
  return splitRow(head).length === splitRow(delim).length
}

function startsBlock(lines: string[], i: number): boolean {
  const line = lines[i]
  if (FENCE_RE.test(line) || HEADING_RE.test(line) || HR_RE.test(line) || QUOTE_RE.test(line)) return true
  const m = LIST_RE.exec(line)
  // An ordered list interrupts a paragraph only when it starts at 1 (CommonMark), and never empty.
  if (m && m[4].trim() && (!/^\d/.test(m[2]) || parseInt(m[2], 10) === 1)) return true
  return isTableStart(lines, i)
}

function leadingSpaces(s: string): number {
  let n = 0
  for (const ch of s) {
    if (ch === ' ') n += 1
    else if (ch === '\t') n += 4 - (n % 4)
    else break
  }
  return n
}

/** Removes up to `n` columns of leading indentation. */
function dedent(s: string, n: number): string {
  let col = 0
  let i = 0
  while (i < s.length && col < n) {
    if (s[i] === ' ') col += 1
    else if (s[i] === '\t') col += 4 - (col % 4)
    else break
    i++
  }
  return s.slice(i)
}

export function parseBlocks(src: string): Block[] {
  return blocks(src.replace(/\r\n?/g, '\n').split('\n'))
}

function blocks(lines: string[]): Block[] {
  const out: Block[] = []
  let i = 0
  while (i < lines.length) {
    const line = lines[i]
    if (isBlank(line)) {
      i++
      continue
    }
    const fence = FENCE_RE.exec(line)
    if (fence) {
      const indent = fence[1].length
      const marker = fence[2]
      const body: string[] = []
      i++
      while (i < lines.length) {
        const l = lines[i]
        const close = /^ {0,3}(`{3,}|~{3,})[ \t]*$/.exec(l)
        if (close && close[1][0] === marker[0] && close[1].length >= marker.length) {
          i++
          break
        }
        body.push(dedent(l, indent))
        i++
      }
      out.push({ t: 'code', lang: fence[3].toLowerCase(), text: body.join('\n') })
      continue
    }
    const heading = HEADING_RE.exec(line)
    if (heading) {
      out.push({ t: 'h', level: heading[1].length, c: parseInline(heading[2] ?? '') })
      i++
      continue
    }
    if (HR_RE.test(line)) {
      out.push({ t: 'hr' })
      i++
      continue
    }
    if (QUOTE_RE.test(line)) {
      const inner: string[] = []
      while (i < lines.length && !isBlank(lines[i])) {
        if (QUOTE_RE.test(lines[i])) inner.push(lines[i].replace(QUOTE_RE, ''))
        else if (startsBlock(lines, i)) break
        else inner.push(lines[i])
        i++
      }
      out.push({ t: 'quote', children: blocks(inner) })
      continue
    }
    const list = LIST_RE.exec(line)
    if (list) {
      i = parseList(lines, i, out)
      continue
    }
    if (isTableStart(lines, i)) {
      const head = splitRow(line)
      const align: Align[] = splitRow(lines[i + 1]).map((c) => {
        const l = c.startsWith(':')
        const r = c.endsWith(':')
        return l && r ? 'center' : r ? 'right' : l ? 'left' : null
      })
      i += 2
      const rows: Inline[][][] = []
      while (i < lines.length && !isBlank(lines[i]) && lines[i].includes('|')) {
        const cells = splitRow(lines[i])
        const row: Inline[][] = []
        for (let k = 0; k < head.length; k++) row.push(parseInline(cells[k] ?? ''))
        rows.push(row)
        i++
      }
      out.push({ t: 'table', align, head: head.map(parseInline), rows })
      continue
    }
    // Paragraph, possibly a setext heading.
    const para: string[] = [line]
    i++
    let setext = 0
    while (i < lines.length && !isBlank(lines[i])) {
      const sx = SETEXT_RE.exec(lines[i])
      if (sx) {
        setext = sx[1][0] === '=' ? 1 : 2
        i++
        break
      }
      if (startsBlock(lines, i)) break
      para.push(lines[i])
      i++
    }
    const text = para.map((l) => l.replace(/^[ \t]+/, '')).join('\n')
    out.push(setext ? { t: 'h', level: setext, c: parseInline(text) } : { t: 'p', c: parseInline(text) })
  }
  return out
}

function parseList(lines: string[], start: number, out: Block[]): number {
  const first = LIST_RE.exec(lines[start])
  if (!first) return start + 1
  const ordered = /^\d/.test(first[2])
  const delimiter = ordered ? first[2].slice(-1) : first[2]
  const items: ListItem[] = []
  let i = start
  while (i < lines.length) {
    const m = LIST_RE.exec(lines[i])
    if (!m) break
    const isOrdered = /^\d/.test(m[2])
    const delim = isOrdered ? m[2].slice(-1) : m[2]
    if (isOrdered !== ordered || delim !== delimiter) break
    const markerIndent = m[1].length
    const spaces = m[3].length
    const contentIndent = markerIndent + m[2].length + (spaces >= 1 && spaces <= 4 ? spaces : 1)
    const itemLines: string[] = [m[4]]
    i++
    let lastBlank = false
    while (i < lines.length) {
      const l = lines[i]
      if (isBlank(l)) {
        itemLines.push('')
        lastBlank = true
        i++
        continue
      }
      if (leadingSpaces(l) >= contentIndent) {
        itemLines.push(dedent(l, contentIndent))
        lastBlank = false
        i++
        continue
      }
      // A lazy continuation line of the item's paragraph.
      if (!lastBlank && !startsBlock(lines, i) && !LIST_RE.test(l)) {
        itemLines.push(l.trim())
        i++
        continue
      }
      break
    }
    while (itemLines.length > 1 && itemLines[itemLines.length - 1] === '') itemLines.pop()
    let task: boolean | null = null
    const tm = /^\[([ xX])\](?:[ \t]+|$)/.exec(itemLines[0])
    if (tm) {
      task = tm[1] !== ' '
      itemLines[0] = itemLines[0].slice(tm[0].length)
    }
    items.push({ task, children: blocks(itemLines) })
    // A blank line followed by something other than a sibling item ends the list.
    if (i < lines.length && isBlank(lines[i - 1] ?? '') && !LIST_RE.test(lines[i])) break
  }
  out.push({ t: 'list', ordered, start: ordered ? parseInt(first[2], 10) : 1, items })
  return i
}

// ---- inline ----

const PUNCT = '!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~'

/** Only web and mail links survive; `javascript:` and friends become plain text. */
export function safeHref(raw: string): string | null {
  const href = raw.trim().replace(/^<|>$/g, '')
  const probe = href.replace(/[\u0000-\u0020]/g, '').toLowerCase()
  const scheme = /^([a-z][a-z0-9+.-]*):/.exec(probe)
  if (!scheme) return href.startsWith('//') ? null : href
  return ['http', 'https', 'mailto'].includes(scheme[1]) ? href : null
}

function findClosingBracket(s: string, from: number): number {
  let depth = 0
  for (let i = from; i < s.length; i++) {
    const ch = s[i]
    if (ch === '\\') {
      i++
      continue
    }
    if (ch === '`') {
      const end = s.indexOf('`', i + 1)
      if (end > 0) i = end
      continue
    }
    if (ch === '[') depth++
    else if (ch === ']') {
      depth--
      if (depth === 0) return i
    }
  }
  return -1
}

function findClosingParen(s: string, from: number): number {
  let depth = 0
  for (let i = from; i < s.length; i++) {
    const ch = s[i]
    if (ch === '\\') {
      i++
      continue
    }
    if (ch === '(') depth++
    else if (ch === ')') {
      depth--
      if (depth === 0) return i
    }
    else if (ch === '\n') return -1
  }
  return -1
}

function trimAutolink(url: string): string {
  let u = url
  for (;;) {
    const last = u[u.length - 1]
    if (last && '.,:;!?\'"*_~'.includes(last)) u = u.slice(0, -1)
    else if (last === ')' && (u.match(/\(/g)?.length ?? 0) < (u.match(/\)/g)?.length ?? 0)) u = u.slice(0, -1)
    else return u
  }
}

const DELIMS: { open: string; t: 'strong' | 'em' | 'del' }[] = [
  { open: '**', t: 'strong' },
  { open: '__', t: 'strong' },
  { open: '~~', t: 'del' },
  { open: '*', t: 'em' },
  { open: '_', t: 'em' },
]

function findCloser(s: string, from: number, marker: string): number {
  let i = from
  while (i < s.length) {
    const ch = s[i]
    if (ch === '\\') {
      i += 2
      continue
    }
    if (ch === '`') {
      const run = /^`+/.exec(s.slice(i))?.[0] ?? '`'
      const end = s.indexOf(run, i + run.length)
      if (end > 0) {
        i = end + run.length
        continue
      }
    }
    if (s.startsWith(marker, i) && i > from && !/\s/.test(s[i - 1])) {
      // `*` must not close inside a `**` run, and `_` must sit at a word edge.
      const after = s[i + marker.length]
      if (marker.length === 1 && after === marker[0]) {
        i += 2
        continue
      }
      if (marker[0] === '_' && after && /[\p{L}\p{N}]/u.test(after)) {
        i++
        continue
      }
      return i
    }
    i++
  }
  return -1
}

export function parseInline(s: string): Inline[] {
  const out: Inline[] = []
  let buf = ''
  const flush = () => {
    if (buf) out.push({ t: 'text', v: buf })
    buf = ''
  }
  let i = 0
  while (i < s.length) {
    const ch = s[i]
    if (ch === '\\') {
      const next = s[i + 1]
      if (next === '\n') {
        flush()
        out.push({ t: 'br' })
        i += 2
        continue
      }
      if (next !== undefined && PUNCT.includes(next)) {
        buf += next
        i += 2
        continue
      }
    }
    if (ch === '\n') {
      if (/ {2,}$/.test(buf)) {
        buf = buf.replace(/ +$/, '')
        flush()
        out.push({ t: 'br' })
      } else {
        buf = buf.replace(/ +$/, '') + '\n'
      }
      i++
      continue
    }
    if (ch === '`') {
      const run = /^`+/.exec(s.slice(i))![0]
      const end = s.indexOf(run, i + run.length)
      if (end >= 0 && s[end + run.length] !== '`') {
        let code = s.slice(i + run.length, end).replace(/\n/g, ' ')
        if (code.length > 2 && code.startsWith(' ') && code.endsWith(' ') && code.trim()) code = code.slice(1, -1)
        flush()
        out.push({ t: 'code', v: code })
        i = end + run.length
        continue
      }
      buf += run
      i += run.length
      continue
    }
    if (ch === '[' || (ch === '!' && s[i + 1] === '[')) {
      const open = ch === '!' ? i + 1 : i
      const close = findClosingBracket(s, open)
      if (close > 0 && s[close + 1] === '(') {
        const pend = findClosingParen(s, close + 1)
        if (pend > 0) {
          const inner = s.slice(close + 2, pend).trim()
          const dest = /^(<[^>]*>|\S*)/.exec(inner)?.[0] ?? ''
          const label = s.slice(open + 1, close)
          flush()
          out.push({ t: 'link', href: safeHref(dest), c: parseInline(label || dest) })
          i = pend + 1
          continue
        }
      }
    }
    if (ch === '<') {
      const m = /^<((?:https?:\/\/|mailto:)[^\s<>]+)>/i.exec(s.slice(i))
      if (m) {
        flush()
        out.push({ t: 'link', href: safeHref(m[1]), c: [{ t: 'text', v: m[1] }] })
        i += m[0].length
        continue
      }
    }
    if ((ch === 'h' || ch === 'w') && (i === 0 || /[\s(*_~]/.test(s[i - 1]))) {
      const m = /^(?:https?:\/\/|www\.)[^\s<]+/i.exec(s.slice(i))
      if (m) {
        const url = trimAutolink(m[0])
        if (url.length > 4) {
          flush()
          const href = url.toLowerCase().startsWith('www.') ? `https://${url}` : url
          out.push({ t: 'link', href: safeHref(href), c: [{ t: 'text', v: url }] })
          i += url.length
          continue
        }
      }
    }
    if (ch === '*' || ch === '_' || ch === '~') {
      let matched = false
      for (const d of DELIMS) {
        if (!s.startsWith(d.open, i)) continue
        const after = s[i + d.open.length]
        if (after === undefined || /\s/.test(after)) continue
        if (d.open[0] === '_' && i > 0 && /[\p{L}\p{N}]/u.test(s[i - 1])) continue
        const close = findCloser(s, i + d.open.length, d.open)
        if (close < 0) continue
        flush()
        out.push({ t: d.t, c: parseInline(s.slice(i + d.open.length, close)) })
        i = close + d.open.length
        matched = true
        break
      }
      if (matched) continue
      // An unmatched run is literal text.
      const run = /^([*_~])\1*/.exec(s.slice(i))![0]
      buf += run
      i += run.length
      continue
    }
    buf += ch
    i++
  }
  flush()
  return out
}
