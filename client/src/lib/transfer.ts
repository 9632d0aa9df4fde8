// Chat export and import over HTTP (docs/http-api.md §4.2): a download is fetched, then saved
// under the server's Content-Disposition name; an import posts the chosen file as multipart.

import { ApiError, errorMessage, getApiBase, request } from './api'
import { tr } from '../i18n'

export type ExportFormat = 'jsonl' | 'md' | 'atif'
export const EXPORT_FORMATS: ExportFormat[] = ['jsonl', 'md', 'atif']

export interface ImportResult {
  source: 'native' | 'native_zip' | 'chatgpt' | 'open_webui'
  imported: { chat_id: string; title: string; records: number }[]
}

/** The `filename="…"` of a Content-Disposition header, else `fallback`. */
export function dispositionName(header: string | null, fallback: string): string {
  const m = header ? /filename="([^"]+)"/.exec(header) : null
  return m ? m[1] : fallback
}

/** Fetches `path` and hands it to the browser as a download; the saved file's name. */
export async function download(path: string, fallback: string): Promise<string> {
  let res: Response
  try {
    res = await fetch(`${getApiBase()}${path}`, { signal: AbortSignal.timeout(300_000) })
  } catch {
    throw new ApiError(tr('api.unreachable'), 0, 'GET', path)
  }
  if (!res.ok) {
    throw new ApiError(errorMessage(res.status, res.statusText, await res.text()), res.status, 'GET', path)
  }
  const name = dispositionName(res.headers.get('content-disposition'), fallback)
  const url = URL.createObjectURL(await res.blob())
  const a = document.createElement('a')
  a.href = url
  a.download = name
  document.body.appendChild(a)
  a.click()
  a.remove()
  setTimeout(() => URL.revokeObjectURL(url), 10_000)
  return name
}

export function exportChat(chatId: string, format: ExportFormat): Promise<string> {
  return download(`/sessions/${encodeURIComponent(chatId)}/export?format=${format}`, `${chatId}.${format}`)
}

export function exportAll(format: ExportFormat): Promise<string> {
  return download(`/export?format=${format}`, `cashcode-chats-${format}.zip`)
}

export function importFile(file: File): Promise<ImportResult> {
  const form = new FormData()
  form.append('file', file, file.name)
  return request<ImportResult>('POST', '/import', form, { timeoutMs: 300_000 })
}
