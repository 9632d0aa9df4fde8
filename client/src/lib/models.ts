// Model picker logic (docs/web-client.md §6): optgroups by provider, the remembered global choice.

import { tr, type MessageKey, type Translate } from '../i18n'
import type { LlmChoice } from './selections'
import type { ModelCatalog, ModelEntry, Provider } from './types'

export const SELECTION_KEY = 'cashcode.llm.selection'

export const PROVIDER_LABELS: Record<Provider, MessageKey> = {
  openai_compatible: 'models.openai_compatible',
  ollama: 'models.ollama',
}

export function groupModels(
  models: readonly ModelEntry[],
  t: Translate = tr,
): { provider: Provider; label: string; ids: string[] }[] {
  const order: Provider[] = ['openai_compatible', 'ollama']
  return order
    .map((provider) => ({
      provider,
      label: t(PROVIDER_LABELS[provider]),
      ids: models.filter((m) => m.provider === provider).map((m) => m.id),
    }))
    .filter((g) => g.ids.length > 0)
}

export function parseStoredChoice(raw: string | null): LlmChoice | null {
  if (!raw) return null
  try {
    const v = JSON.parse(raw) as Partial<LlmChoice>
    if ((v.provider === 'openai_compatible' || v.provider === 'ollama') && typeof v.model === 'string' && v.model) {
      return { provider: v.provider, model: v.model }
    }
  } catch {
    // corrupted entry: treated as no choice
  }
  return null
}

/**
 * The effective choice for a catalog: the stored one if still offered; a stored one that is gone
 * is dropped (`forget`); with no stored choice, the first model.
 */
export function resolveChoice(
  stored: LlmChoice | null,
  models: readonly ModelEntry[],
): { choice: LlmChoice | null; forget: boolean } {
  if (stored) {
    const offered = models.some((m) => m.provider === stored.provider && m.id === stored.model)
    if (offered) return { choice: stored, forget: false }
    return { choice: null, forget: true }
  }
  const first = groupModels(models)[0]
  if (!first) return { choice: null, forget: false }
  return { choice: { provider: first.provider, model: first.ids[0] }, forget: false }
}

export function providerErrors(catalog: ModelCatalog | null, t: Translate = tr): string | null {
  if (!catalog) return null
  const parts: string[] = []
  for (const p of ['openai_compatible', 'ollama'] as Provider[]) {
    const err = catalog.providers?.[p]?.error
    if (err) parts.push(t('models.providerError', { provider: t(PROVIDER_LABELS[p]), error: err }))
  }
  return parts.length ? parts.join(t('models.errorSeparator')) : null
}

export function choiceValue(c: LlmChoice | null): string {
  return c ? `${c.provider}\u0000${c.model}` : ''
}

export function parseChoiceValue(v: string): LlmChoice | null {
  const i = v.indexOf('\u0000')
  if (i < 0) return null
  const provider = v.slice(0, i)
  if (provider !== 'openai_compatible' && provider !== 'ollama') return null
  return { provider, model: v.slice(i + 1) }
}
