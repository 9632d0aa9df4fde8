// Per-chat "generating" flags. Several chats can run at once; a terminal event clears only its own
// chat, and clearing an idle chat returns the same object so React can skip a render.

export type GeneratingMap = Readonly<Record<string, true>>

export function startGenerating(map: GeneratingMap, chatId: string): GeneratingMap {
  if (map[chatId]) return map
  return { ...map, [chatId]: true }
}

export function stopGenerating(map: GeneratingMap, chatId: string | null | undefined): GeneratingMap {
  if (!chatId || !map[chatId]) return map
  const next: Record<string, true> = { ...map }
  delete next[chatId]
  return next
}

export function isGenerating(map: GeneratingMap, chatId: string | null | undefined): boolean {
  return Boolean(chatId && map[chatId])
}
