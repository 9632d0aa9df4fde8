// The chat open last in this browser (localStorage `cashcode.lastChat`), so a reload reopens it
// instead of an empty new chat (docs/web-client.md §3).

const KEY = 'cashcode.lastChat'

export function rememberChat(chatId: string): void {
  try {
    localStorage.setItem(KEY, chatId)
  } catch {
    // storage off: a reload opens a new chat, as before
  }
}

export function rememberedChat(): string | null {
  try {
    return localStorage.getItem(KEY)
  } catch {
    return null
  }
}
