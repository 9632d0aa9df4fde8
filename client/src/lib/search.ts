// Search over every chat (docs/search.md §6): the `GET /api/search` answer's types, its hits
// grouped by chat in rank order, and a snippet split at the server's «» marks so the view can
// wrap matched terms in <mark> without ever rendering the text as HTML.

export interface SearchHit {
  chat_id: string
  /** the record's cursor in history.jsonl (0: the chat's title matched) */
  cursor: number
  role: string
  timestamp: string
  title: string
  snippet: string
}

export interface SearchResults {
  hits: SearchHit[]
  next: number | null
}

export interface HitGroup {
  chatId: string
  title: string
  hits: SearchHit[]
}

/** Hits grouped by chat: groups in the order of their best hit, hits in rank order inside. */
export function groupByChat(hits: SearchHit[]): HitGroup[] {
  const groups: HitGroup[] = []
  const at = new Map<string, HitGroup>()
  for (const h of hits) {
    let g = at.get(h.chat_id)
    if (!g) {
      g = { chatId: h.chat_id, title: h.title, hits: [] }
      at.set(h.chat_id, g)
      groups.push(g)
    }
    g.hits.push(h)
  }
  return groups
}

/** A snippet as plain-text pieces, `mark` for the ones between « and ». An unclosed mark runs
 * to the end. */
export function snippetParts(snippet: string): { text: string; mark: boolean }[] {
  const out: { text: string; mark: boolean }[] = []
  let mark = false
  let buf = ''
  const push = () => {
    if (buf) out.push({ text: buf, mark })
    buf = ''
  }
  for (const c of snippet) {
    if (c === '«' && !mark) {
      push()
      mark = true
    } else if (c === '»' && mark) {
      push()
      mark = false
    } else {
      buf += c
    }
  }
  push()
  return out
}

/** Merges a further page into what is shown, dropping hits already there. */
export function appendPage(shown: SearchHit[], page: SearchHit[]): SearchHit[] {
  const seen = new Set(shown.map((h) => `${h.chat_id}:${h.cursor}`))
  return [...shown, ...page.filter((h) => !seen.has(`${h.chat_id}:${h.cursor}`))]
}

/** The `/search` path for a query and a page (`after`). */
export function searchPath(q: string, after = 0, limit = 30): string {
  const p = new URLSearchParams({ q, limit: String(limit) })
  if (after > 0) p.set('after', String(after))
  return `/search?${p.toString()}`
}
