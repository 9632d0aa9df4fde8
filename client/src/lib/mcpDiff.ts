// The review diff of an MCP tool held by pinning: the approved and the changed version of its
// description and input schema, as line diffs (the one LCS diff in ./diff), so the user sees
// exactly what changed.

import { lineDiff, type DiffLine } from './diff'

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

export { lineDiff, MAX_CELLS as MAX_DIFF_CELLS, type DiffLine } from './diff'

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

/** The description and schema diffs of one held tool (an unknown old version diffs against nothing). */
export function changeDiff(c: ToolChange): { description: DiffLine[]; schema: DiffLine[] } {
  return {
    description: lineDiff(c.old?.description ?? '', c.new.description),
    schema: lineDiff(c.old ? schemaText(c.old.input_schema) : '', schemaText(c.new.input_schema)),
  }
}
