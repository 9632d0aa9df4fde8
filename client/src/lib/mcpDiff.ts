// The review diff of an MCP tool held by pinning: the approved and the changed version of its
// description and input schema, as line diffs (LCS), so the user sees exactly what changed.

export interface ToolVersion {
  description: string
  input_schema: unknown
  seen_at: string
}

export interface ToolChange {
  name: string
  original_name: string
  old: ToolVersion | null
  new: ToolVersion
}

export interface ToolChanges {
  server: string
  changes: ToolChange[]
}

export type DiffOp = 'same' | 'add' | 'del'

export interface DiffLine {
  op: DiffOp
  text: string
}

/** Lines compared with the LCS table beyond which the diff falls back to "all removed, all added". */
export const MAX_DIFF_CELLS = 4_000_000

/** JSON with object keys sorted at every depth and two-space indentation, for a stable diff. */
export function schemaText(v: unknown): string {
  const sort = (x: unknown): unknown => {
    if (Array.isArray(x)) return x.map(sort)
    if (x && typeof x === 'object') {
      const o = x as Record<string, unknown>
      return Object.fromEntries(
        Object.keys(o)
          .sort()
          .map((k) => [k, sort(o[k])]),
      )
    }
    return x
  }
  return JSON.stringify(sort(v ?? {}), null, 2) ?? ''
}

/** Line diff of `a` (old) against `b` (new): common lines `same`, removed `del`, added `add`. */
export function lineDiff(a: string, b: string): DiffLine[] {
  const x = a === '' ? [] : a.split('\n')
  const y = b === '' ? [] : b.split('\n')
  const n = x.length
  const m = y.length
  if (n * m > MAX_DIFF_CELLS) {
    return [...x.map((text) => ({ op: 'del' as const, text })), ...y.map((text) => ({ op: 'add' as const, text }))]
  }
  // lcs[i][j]: length of the longest common subsequence of x[i..] and y[j..].
  const lcs: Uint32Array[] = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1))
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      lcs[i][j] = x[i] === y[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1])
    }
  }
  const out: DiffLine[] = []
  let i = 0
  let j = 0
  while (i < n && j < m) {
    if (x[i] === y[j]) {
      out.push({ op: 'same', text: x[i] })
      i++
      j++
    } else if (lcs[i + 1][j] >= lcs[i][j + 1]) {
      out.push({ op: 'del', text: x[i++] })
    } else {
      out.push({ op: 'add', text: y[j++] })
    }
  }
  while (i < n) out.push({ op: 'del', text: x[i++] })
  while (j < m) out.push({ op: 'add', text: y[j++] })
  return out
}

/** The description and schema diffs of one held tool (an unknown old version diffs against nothing). */
export function changeDiff(c: ToolChange): { description: DiffLine[]; schema: DiffLine[] } {
  return {
    description: lineDiff(c.old?.description ?? '', c.new.description),
    schema: lineDiff(c.old ? schemaText(c.old.input_schema) : '', schemaText(c.new.input_schema)),
  }
}
