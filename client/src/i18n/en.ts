// English strings: the source of truth for keys. Keys are grouped by screen ("settings.", "mcp.", ...).
// Every key must also be in zh-CN.ts (the type there makes a missing one a build error).
export const en = {
  'settings.language': 'Language',
  'lang.en': 'English',
  'lang.zh-CN': '简体中文',
  // MCP elicitation form (ElicitationDialog)
  'elicit.title': 'Input requested by {server}',
  'elicit.intro': 'The MCP server {server} asks for this while a tool runs. Only fill it in if you trust it.',
  'elicit.accept': 'Send',
  'elicit.decline': 'Decline',
  'elicit.cancel': 'Cancel',
  'elicit.required': 'required',
  'elicit.timeLeft': '{s} s left, then it is declined',
  'elicit.choose': 'Choose…',
  'elicit.otherChat': '{server} is asking for input in another chat',
  'elicit.open': 'Open',
  'elicit.err.required': 'This field is required',
  'elicit.err.number': 'Enter a number',
  'elicit.err.integer': 'Enter a whole number',
  'elicit.err.min': 'Must be at least {n}',
  'elicit.err.max': 'Must be at most {n}',
  'elicit.err.minLength': 'At least {n} characters',
  'elicit.err.maxLength': 'At most {n} characters',
  'elicit.err.format': 'Enter a valid {format}',
  'elicit.err.choice': 'Choose one of the options',
  'elicit.err.minItems': 'Choose at least {n}',
  'elicit.err.maxItems': 'Choose at most {n}',
} as const

export type MessageKey = keyof typeof en
