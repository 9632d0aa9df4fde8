// Simplified Chinese strings, one for every key of en.ts.
import type { MessageKey } from './en'

export const zhCN: Record<MessageKey, string> = {
  'settings.language': '语言',
  'lang.en': 'English',
  'lang.zh-CN': '简体中文',
  // MCP elicitation form (ElicitationDialog)
  'elicit.title': '{server} 请求输入',
  'elicit.intro': 'MCP 服务器 {server} 在工具运行期间请求以下信息。仅在信任它时填写。',
  'elicit.accept': '发送',
  'elicit.decline': '拒绝',
  'elicit.cancel': '取消',
  'elicit.required': '必填',
  'elicit.timeLeft': '剩余 {s} 秒，超时将自动拒绝',
  'elicit.choose': '请选择…',
  'elicit.otherChat': '{server} 正在另一个对话中请求输入',
  'elicit.open': '打开',
  'elicit.err.required': '此项为必填',
  'elicit.err.number': '请输入数字',
  'elicit.err.integer': '请输入整数',
  'elicit.err.min': '不能小于 {n}',
  'elicit.err.max': '不能大于 {n}',
  'elicit.err.minLength': '至少 {n} 个字符',
  'elicit.err.maxLength': '最多 {n} 个字符',
  'elicit.err.format': '请输入有效的 {format}',
  'elicit.err.choice': '请从选项中选择',
  'elicit.err.minItems': '至少选择 {n} 项',
  'elicit.err.maxItems': '最多选择 {n} 项',
}
