// Guards against English slipping past the dictionaries: scans every component (src/**/*.tsx) and
// the lib code that words messages for JSX text, text-bearing props (aria-label, title,
// placeholder, label, message…) and string literals that read like English prose. Keys passed to
// t()/tr()/translate(), class names, test ids, comparisons and type literals are not text.
import ts from 'typescript'
import { describe, expect, it } from 'vitest'

/** Props whose value a person reads or hears; every other prop is code (className, data-*, role…). */
const TEXT_PROPS = new Set([
  'aria-label',
  'aria-description',
  'aria-placeholder',
  'aria-roledescription',
  'aria-valuetext',
  'title',
  'placeholder',
  'alt',
  'label',
  'message',
  'confirmLabel',
  'hint',
])

/** Calls whose string arguments are keys or developer messages, never shown as UI text. */
const CODE_CALLS = new Set(['t', 'tr', 'translate', 'useT', 'Error', 'TypeError', 'getItem', 'setItem', 'removeItem'])

/** Whole strings that are names or sample values, the same in every language. */
const ALLOWED = new Set(['CashCode', 'SKILL.md', 'Authorization', 'Ollama', 'MCP', 'OpenAI', 'English', '简体中文'])

function stripPlaceholders(s: string): string {
  return s.replace(/\{[^}]*\}/g, ' ').replace(/\$\{[^}]*\}/g, ' ')
}

/** True when `text` reads like English words rather than code (keys, class lists, URLs, ids). */
export function looksEnglish(text: string, jsxText = false): boolean {
  const s = stripPlaceholders(text).trim()
  if (!s || ALLOWED.has(s)) return false
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(s)) return false // URL sample
  if (jsxText) return s.split(/\s+/).some((w) => !ALLOWED.has(w) && /[A-Za-z]{2,}/.test(w))
  // A capitalised word ("Save", "No description") outside a dotted/dashed identifier.
  const words = s.split(/\s+/)
  if (words.some((w) => /^[("'“]?[A-Z][a-z]+(-[a-z]+)*[)"'”.,:;!?…]*$/.test(w) && !ALLOWED.has(w.replace(/[^\w.]/g, '')))) {
    return true
  }
  // Two or more plain lower-case words ("retry in", "min ago"); class lists have - : / [ in them.
  const plain = words.filter((w) => /^[a-z]+[.,:;!?…]*$/.test(w))
  return plain.length >= 2 && plain.some((w) => w.length >= 3) && words.every((w) => !/[-:/[\]_#=]/.test(w))
}

export interface Finding {
  file: string
  line: number
  text: string
}

function calleeName(call: ts.CallExpression | ts.NewExpression): string {
  const e = call.expression
  if (ts.isIdentifier(e)) return e.text
  if (ts.isPropertyAccessExpression(e)) {
    if (ts.isIdentifier(e.expression) && e.expression.text === 'console') return 'console'
    return e.name.text
  }
  return ''
}

/** Whether the literal at `node` is code by position (a key, a comparison, a class list…). */
function isCodePosition(node: ts.Node): boolean {
  let child: ts.Node = node
  for (let p = node.parent; p; child = p, p = p.parent) {
    if (ts.isImportDeclaration(p) || ts.isExportDeclaration(p) || ts.isTypeNode(p)) return true
    if (ts.isJsxAttribute(p)) return !TEXT_PROPS.has(p.name.getText())
    if ((ts.isCallExpression(p) || ts.isNewExpression(p)) && child !== p.expression) {
      const name = calleeName(p)
      if (CODE_CALLS.has(name) || name === 'console') return true
    }
    if (ts.isBinaryExpression(p)) {
      const op = p.operatorToken.kind
      if (
        op === ts.SyntaxKind.EqualsEqualsEqualsToken ||
        op === ts.SyntaxKind.ExclamationEqualsEqualsToken ||
        op === ts.SyntaxKind.EqualsEqualsToken ||
        op === ts.SyntaxKind.ExclamationEqualsToken
      ) {
        return true
      }
    }
    if (ts.isCaseClause(p) && child === p.expression) return true
    if (ts.isElementAccessExpression(p) && child === p.argumentExpression) return true
    if (ts.isPropertyAssignment(p) && child === p.name) return true
    if (ts.isJsxExpression(p) || ts.isBlock(p) || ts.isSourceFile(p)) return false
  }
  return false
}

export function scanSource(file: string, source: string): Finding[] {
  const kind = file.endsWith('.tsx') ? ts.ScriptKind.TSX : ts.ScriptKind.TS
  const sf = ts.createSourceFile(file, source, ts.ScriptTarget.Latest, true, kind)
  const out: Finding[] = []
  const report = (node: ts.Node, text: string) => {
    const { line } = sf.getLineAndCharacterOfPosition(node.getStart(sf))
    out.push({ file, line: line + 1, text: text.trim() })
  }
  const visit = (node: ts.Node) => {
    if (ts.isJsxText(node)) {
      if (looksEnglish(node.text, true)) report(node, node.text)
    } else if (ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node)) {
      if (looksEnglish(node.text) && !isCodePosition(node)) report(node, node.text)
    } else if (ts.isTemplateExpression(node)) {
      const text = [node.head.text, ...node.templateSpans.map((s) => s.literal.text)].join('{}')
      if (looksEnglish(text) && !isCodePosition(node)) report(node, text)
    }
    ts.forEachChild(node, visit)
  }
  visit(sf)
  return out
}

// Every component, plus the lib modules that word messages for people (not their tests). The
// Markdown grammar and the syntax highlighter hold programming-language keywords, not UI text.
const components = import.meta.glob('../**/*.tsx', { query: '?raw', import: 'default', eager: true }) as Record<string, string>
const libs = import.meta.glob(['../lib/*.ts', '!../lib/*.test.ts', '!../lib/highlight.ts', '!../lib/markdown.ts'], { query: '?raw', import: 'default', eager: true }) as Record<
  string,
  string
>

describe('untranslated strings', () => {
  it('finds English in JSX text, text props and message literals (the check can fail)', () => {
    const bad = `
      export function X({ ok }: { ok: boolean }) {
        const setError = (_: string) => {}
        setError('Something broke')
        return (
          <div className="flex items-center gap-2" title={ok ? 'Looks good' : t('x.y')}>
            <p>Hello world</p>
            <input aria-label="Search Skills" placeholder={\`\${1} min ago\`} />
          </div>
        )
      }`
    expect(scanSource('bad.tsx', bad).map((f) => f.text)).toEqual([
      'Something broke',
      'Looks good',
      'Hello world',
      'Search Skills',
      '{} min ago',
    ])
  })

  it('leaves keys, class lists, test ids, comparisons and names alone', () => {
    const good = `
      import { Check } from 'lucide-react'
      export function Y({ k }: { k: string }) {
        if (k === 'Enter' || k === 'ArrowDown') return null
        const m: Record<string, 'Idle' | 'Busy'> = {}
        return (
          <div className="rounded-md border border-zinc-700 bg-zinc-950" data-testid="some thing" role="menu">
            <span>CashCode</span>
            <input placeholder="https://api.example.com/v1" aria-label={t('composer.inputLabel')} />
            {t('sidebar.newChat')} · {m[k]} ×
          </div>
        )
      }`
    expect(scanSource('good.tsx', good)).toEqual([])
  })

  it('finds no untranslated English in the client', () => {
    const files = { ...components, ...libs }
    expect(Object.keys(components).length).toBeGreaterThan(8)
    const findings = Object.entries(files)
      .filter(([path]) => !/\.test\.tsx?$/.test(path))
      .flatMap(([path, src]) => scanSource(path, src))
      .map((f) => `${f.file}:${f.line}: ${JSON.stringify(f.text)}`)
    expect(findings).toEqual([])
  })
})
