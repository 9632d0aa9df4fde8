// Line diff for the Memory page (snapshots vs the current MEMORY.md) and skill-evolution
// proposals (candidate vs current SKILL.md): the common prefix and suffix are trimmed, the middle
// gets a longest-common-subsequence table. The table is bounded (MAX_CELLS); past it the middle is
// shown as removed then added, which is still a correct (if not minimal) diff.

export type DiffOp = 'same' | 'add' | 'del'

export interface DiffLine {
  op: DiffOp
  text: string
  /** 1-based line in the old text ('same', 'del') */
  oldNo?: number
  /** 1-based line in the new text ('same', 'add') */
  newNo?: number
}

/** LCS table cells allowed (rows × columns of the trimmed middle). */
export const MAX_CELLS = 4_000_000

export function splitLines(text: string): string[] {
  if (text === '') return []
  const lines = text.replace(/\r\n/g, '\n').split('\n')
  if (lines[lines.length - 1] === '') lines.pop()
  return lines
}

export function lineDiff(oldText: string, newText: string): DiffLine[] {
  const a = splitLines(oldText)
  const b = splitLines(newText)
  let start = 0
  while (start < a.length && start < b.length && a[start] === b[start]) start++
  let endA = a.length
  let endB = b.length
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) {
    endA--
    endB--
  }
  const out: DiffLine[] = []
  for (let i = 0; i < start; i++) out.push({ op: 'same', text: a[i], oldNo: i + 1, newNo: i + 1 })
  const n = endA - start
  const m = endB - start
  if (n > 0 && m > 0 && n * m <= MAX_CELLS) {
    // lcs[i][j] = LCS length of a[start+i..endA) and b[start+j..endB), row-major in one array.
    const w = m + 1
    const lcs = new Uint32Array((n + 1) * w)
    for (let i = n - 1; i >= 0; i--) {
      for (let j = m - 1; j >= 0; j--) {
        lcs[i * w + j] =
          a[start + i] === b[start + j] ? lcs[(i + 1) * w + j + 1] + 1 : Math.max(lcs[(i + 1) * w + j], lcs[i * w + j + 1])
      }
    }
    let i = 0
    let j = 0
    while (i < n || j < m) {
      if (i < n && j < m && a[start + i] === b[start + j]) {
        out.push({ op: 'same', text: a[start + i], oldNo: start + i + 1, newNo: start + j + 1 })
        i++
        j++
      } else if (i < n && (j === m || lcs[(i + 1) * w + j] >= lcs[i * w + j + 1])) {
        // On a tie the removal comes first, as `diff -u` shows a changed line.
        out.push({ op: 'del', text: a[start + i], oldNo: start + i + 1 })
        i++
      } else {
        out.push({ op: 'add', text: b[start + j], newNo: start + j + 1 })
        j++
      }
    }
  } else {
    for (let i = start; i < endA; i++) out.push({ op: 'del', text: a[i], oldNo: i + 1 })
    for (let j = start; j < endB; j++) out.push({ op: 'add', text: b[j], newNo: j + 1 })
  }
  for (let k = 0; k < a.length - endA; k++) {
    out.push({ op: 'same', text: a[endA + k], oldNo: endA + k + 1, newNo: endB + k + 1 })
  }
  return out
}

/** Lines added and removed. */
export function diffStats(lines: DiffLine[]): { added: number; removed: number } {
  let added = 0
  let removed = 0
  for (const l of lines) {
    if (l.op === 'add') added++
    else if (l.op === 'del') removed++
  }
  return { added, removed }
}
