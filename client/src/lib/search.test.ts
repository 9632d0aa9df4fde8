import { describe, expect, it } from 'vitest'
import { appendPage, groupByChat, searchPath, snippetParts, type SearchHit } from './search'

const hit = (chat_id: string, cursor: number, snippet = 'x'): SearchHit => ({
  chat_id,
  cursor,
  role: 'user',
  timestamp: '2026-12-03 10:00',
  title: `title ${chat_id}`,
  snippet,
})

describe('search', () => {
  it('groups hits by chat in the order of each chat’s best hit', () => {
    const groups = groupByChat([hit('b', 4), hit('a', 2), hit('b', 1), hit('c', 9), hit('a', 7)])
    expect(groups.map((g) => g.chatId)).toEqual(['b', 'a', 'c'])
    expect(groups[0].hits.map((h) => h.cursor)).toEqual([4, 1])
    expect(groups[1].title).toBe('title a')
    expect(groupByChat([])).toEqual([])
  })

  it('splits snippets at the marks, never reading them as markup', () => {
    expect(snippetParts('I like «green» «tea» <b>')).toEqual([
      { text: 'I like ', mark: false },
      { text: 'green', mark: true },
      { text: ' ', mark: false },
      { text: 'tea', mark: true },
      { text: ' <b>', mark: false },
    ])
    expect(snippetParts('我爱«北京')).toEqual([
      { text: '我爱', mark: false },
      { text: '北京', mark: true },
    ])
    expect(snippetParts('a » b')).toEqual([{ text: 'a » b', mark: false }])
    expect(snippetParts('')).toEqual([])
  })

  it('pages on without repeating hits, and encodes the query', () => {
    expect(appendPage([hit('a', 1)], [hit('a', 1), hit('a', 2)]).map((h) => h.cursor)).toEqual([1, 2])
    expect(searchPath('green tea & "cake"')).toBe('/search?q=green+tea+%26+%22cake%22&limit=30')
    expect(searchPath('北京', 30)).toBe('/search?q=%E5%8C%97%E4%BA%AC&limit=30&after=30')
  })
})

describe('history cursors', () => {
  it('a message carries the cursors of the records it shows', async () => {
    const { historyMessages } = await import('./chatStore')
    const msgs = historyMessages([
      { role: 'user', content: 'q', cursor: 1 },
      { role: 'tool_calls', content: '', cursor: 2, tool_calls: [{ call_id: 'c', tool_name: 'grep', arguments: '{}' }] },
      { role: 'tool', content: 'r', cursor: 3, call_id: 'c', tool_name: 'grep' },
      { role: 'assistant', content: 'a', cursor: 4 },
      { role: 'user', content: 'q2', cursor: 5 },
      { role: 'tool_calls', content: '', cursor: 6, tool_calls: [{ call_id: 'd', tool_name: 'grep', arguments: '{}' }] },
    ])
    expect(msgs.map((m) => m.cursors)).toEqual([[1], [2, 3, 4], [5], [6]])
    expect(historyMessages([{ role: 'user', content: 'old server' }])[0].cursors).toBeUndefined()
  })
})
