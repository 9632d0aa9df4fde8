// A lightweight syntax highlighter: one tokenizer per language family (comments, strings,
// numbers, keywords, literals, function calls). Good enough for chat answers, a few KB in size.

export type TokenKind = 'plain' | 'com' | 'str' | 'num' | 'kw' | 'lit' | 'fn' | 'type' | 'tag' | 'attr'

export interface Token {
  k: TokenKind
  v: string
}

interface Lang {
  comment: RegExp[]
  string: RegExp[]
  keywords: Set<string>
  literals: Set<string>
  types?: boolean
  markup?: boolean
}

const words = (s: string) => new Set(s.split(/\s+/).filter(Boolean))

const C_COMMENTS = [/\/\/[^\n]*/y, /\/\*[\s\S]*?(?:\*\/|$)/y]
const HASH_COMMENT = [/#[^\n]*/y]
const DQ = /"(?:\\[\s\S]|[^"\\\n])*"?/y
const SQ = /'(?:\\[\s\S]|[^'\\\n])*'?/y
const BT = /`(?:\\[\s\S]|[^`\\])*`?/y

const JS_KW =
  'break case catch class const continue debugger default delete do else export extends finally for from function if import in instanceof let new of return static super switch this throw try typeof var void while with yield async await as interface type enum implements private protected public readonly declare namespace abstract keyof satisfies'
const LIT = 'true false null undefined NaN Infinity None True False nil'

const LANGS: Record<string, Lang> = {
  js: { comment: C_COMMENTS, string: [BT, DQ, SQ], keywords: words(JS_KW), literals: words(LIT), types: true },
  python: {
    comment: HASH_COMMENT,
    string: [/[rbfRBF]{0,2}"""[\s\S]*?(?:"""|$)/y, /[rbfRBF]{0,2}'''[\s\S]*?(?:'''|$)/y, DQ, SQ],
    keywords: words(
      'and as assert async await break class continue def del elif else except finally for from global if import in is lambda nonlocal not or pass raise return try while with yield match case self',
    ),
    literals: words(LIT),
    types: true,
  },
  rust: {
    comment: C_COMMENTS,
    string: [/b?r#*"[\s\S]*?"#*/y, DQ, /'(?:\\.|[^'\\\n])'/y],
    keywords: words(
      'as async await break const continue crate dyn else enum extern fn for if impl in let loop match mod move mut pub ref return self Self static struct super trait type unsafe use where while',
    ),
    literals: words('true false None Some Ok Err'),
    types: true,
  },
  go: {
    comment: C_COMMENTS,
    string: [BT, DQ, SQ],
    keywords: words(
      'break case chan const continue default defer else fallthrough for func go goto if import interface map package range return select struct switch type var',
    ),
    literals: words('true false nil iota'),
    types: true,
  },
  c: {
    comment: [...C_COMMENTS, /#[a-z]+/y],
    string: [DQ, SQ],
    keywords: words(
      'auto break case catch class const constexpr continue default delete do else enum explicit extern final for friend goto if inline namespace new noexcept operator override private protected public return sizeof static struct switch template this throw try typedef typename union using virtual void volatile while import package extends implements interface instanceof super synchronized throws var val fun when object is in out let func guard',
    ),
    literals: words('true false null nullptr NULL nil'),
    types: true,
  },
  shell: {
    comment: HASH_COMMENT,
    string: [DQ, SQ],
    keywords: words(
      'if then else elif fi for while until do done case esac in function return export local readonly set unset echo cd exit source sudo',
    ),
    literals: words('true false'),
  },
  sql: {
    comment: [/--[^\n]*/y, /\/\*[\s\S]*?(?:\*\/|$)/y],
    string: [SQ, DQ],
    keywords: words(
      'select from where and or not insert into values update set delete create table drop alter add index primary key foreign references join left right inner outer on group by order having limit offset as distinct union all case when then else end null is in like between exists returning with',
    ),
    literals: words('true false null'),
  },
  json: { comment: [], string: [DQ], keywords: new Set(), literals: words('true false null') },
  yaml: { comment: HASH_COMMENT, string: [DQ, SQ], keywords: new Set(), literals: words('true false null yes no on off ~') },
  css: {
    comment: [/\/\*[\s\S]*?(?:\*\/|$)/y],
    string: [DQ, SQ],
    keywords: words('important media import supports keyframes from to'),
    literals: new Set(),
  },
  markup: { comment: [/<!--[\s\S]*?(?:-->|$)/y], string: [DQ, SQ], keywords: new Set(), literals: new Set(), markup: true },
}

const ALIASES: Record<string, string> = {
  javascript: 'js', jsx: 'js', ts: 'js', tsx: 'js', typescript: 'js', mjs: 'js', cjs: 'js',
  py: 'python', python3: 'python',
  rs: 'rust',
  golang: 'go',
  cpp: 'c', 'c++': 'c', h: 'c', hpp: 'c', cc: 'c', java: 'c', cs: 'c', csharp: 'c', kotlin: 'c', kt: 'c', swift: 'c', scala: 'c', dart: 'c', php: 'c',
  sh: 'shell', bash: 'shell', zsh: 'shell', console: 'shell', shell: 'shell', ps1: 'shell', powershell: 'shell', dockerfile: 'shell', makefile: 'shell', ruby: 'shell', rb: 'shell', perl: 'shell', r: 'shell',
  postgres: 'sql', mysql: 'sql', sqlite: 'sql',
  jsonc: 'json', json5: 'json',
  yml: 'yaml', toml: 'yaml', ini: 'yaml', conf: 'yaml',
  scss: 'css', less: 'css',
  html: 'markup', xml: 'markup', svg: 'markup', vue: 'markup',
}

export function languageOf(name: string): string | null {
  const n = name.trim().toLowerCase()
  if (LANGS[n]) return n
  return ALIASES[n] ?? null
}

const NUM = /0[xX][0-9a-fA-F_]+|0[bB][01_]+|(?:\d[\d_]*\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[a-zA-Z%]*/y
const WORD = /[A-Za-z_$][\w$]*/y

function matchAt(re: RegExp, s: string, i: number): string | null {
  re.lastIndex = i
  const m = re.exec(s)
  return m && m.index === i && m[0].length > 0 ? m[0] : null
}

export function tokenize(code: string, lang: string): Token[] {
  const key = languageOf(lang)
  if (!key) return [{ k: 'plain', v: code }]
  const L = LANGS[key]
  const out: Token[] = []
  const push = (k: TokenKind, v: string) => {
    const last = out[out.length - 1]
    if (last && last.k === k) last.v += v
    else out.push({ k, v })
  }
  let i = 0
  let inTag = false
  while (i < code.length) {
    let m: string | null = null
    for (const re of L.comment) if ((m = matchAt(re, code, i))) break
    if (m) {
      push('com', m)
      i += m.length
      continue
    }
    if (L.markup) {
      const tag = matchAt(/<\/?[A-Za-z][\w:-]*/y, code, i)
      if (tag) {
        push('tag', tag)
        i += tag.length
        inTag = true
        continue
      }
      if (inTag && (code[i] === '>' || code.startsWith('/>', i))) {
        const v = code[i] === '>' ? '>' : '/>'
        push('tag', v)
        i += v.length
        inTag = false
        continue
      }
      if (!inTag) {
        push('plain', code[i])
        i++
        continue
      }
    }
    for (const re of L.string) if ((m = matchAt(re, code, i))) break
    if (m) {
      push('str', m)
      i += m.length
      continue
    }
    const prev = code[i - 1]
    if (/[0-9.]/.test(code[i]) && !(prev && /[\w$]/.test(prev)) && (m = matchAt(NUM, code, i)) && /\d/.test(m)) {
      push('num', m)
      i += m.length
      continue
    }
    if ((m = matchAt(WORD, code, i))) {
      const lower = key === 'sql' ? m.toLowerCase() : m
      let k: TokenKind = 'plain'
      if (L.markup) k = 'attr'
      else if (L.keywords.has(lower)) k = 'kw'
      else if (L.literals.has(m)) k = 'lit'
      else if (/^\s*\(/.test(code.slice(i + m.length, i + m.length + 8))) k = 'fn'
      else if (L.types && /^[A-Z][a-z0-9]/.test(m)) k = 'type'
      push(k, m)
      i += m.length
      continue
    }
    if (key === 'json' || key === 'yaml') {
      // a key before a colon reads as a property
      const last = out[out.length - 1]
      if (code[i] === ':' && last && last.k === 'str') last.k = 'attr'
    }
    push('plain', code[i])
    i++
  }
  return out
}
