// The form an MCP server asks for during a tool call (an `elicitation` event): a modal dialog
// named after the server, focus kept inside it, Escape = Cancel, fields rendered from the
// schema and checked before Send; Decline and Cancel send no content. A countdown shows when
// the server will be told "decline".

import { useEffect, useId, useState } from 'react'
import { useT } from '../i18n'
import { initialValues, validate, type Elicitation, type Field, type FieldError, type FormValues } from '../lib/elicitation'
import { Button, DialogShell, inputClass } from './ui'

export type ElicitAction = 'accept' | 'decline' | 'cancel'

function secondsLeft(e: Elicitation, now: number): number | null {
  if (!e.timeoutSec) return null
  return Math.max(0, Math.ceil(e.timeoutSec - (now - e.receivedAt) / 1000))
}

function FieldInput({
  field,
  id,
  value,
  error,
  onChange,
}: {
  field: Field
  id: string
  value: FormValues[string]
  error?: string
  onChange: (v: FormValues[string]) => void
}) {
  const t = useT()
  const k = field.kind
  const describedBy = [field.description ? `${id}-desc` : '', error ? `${id}-err` : ''].filter(Boolean).join(' ') || undefined
  const common = { id, 'aria-invalid': Boolean(error), 'aria-describedby': describedBy, 'aria-required': field.required }
  let input
  if (k.type === 'boolean') {
    input = (
      <input
        {...common}
        type="checkbox"
        checked={value === true}
        onChange={(e) => onChange(e.target.checked)}
        className="h-4 w-4 accent-emerald-600"
      />
    )
  } else if (k.type === 'select') {
    input = (
      <select {...common} value={typeof value === 'string' ? value : ''} onChange={(e) => onChange(e.target.value)} className={inputClass}>
        <option value="">{t('elicit.choose')}</option>
        {k.choices.map((c) => (
          <option key={c.value} value={c.value}>
            {c.title}
          </option>
        ))}
      </select>
    )
  } else if (k.type === 'multiselect') {
    const list = Array.isArray(value) ? value : []
    input = (
      <div role="group" aria-labelledby={`${id}-label`} aria-describedby={describedBy} className="flex flex-wrap gap-3">
        {k.choices.map((c) => (
          <label key={c.value} className="flex items-center gap-1.5 text-sm text-zinc-200">
            <input
              type="checkbox"
              checked={list.includes(c.value)}
              onChange={(e) => onChange(e.target.checked ? [...list, c.value] : list.filter((x) => x !== c.value))}
              className="h-4 w-4 accent-emerald-600"
            />
            {c.title}
          </label>
        ))}
      </div>
    )
  } else {
    const type =
      k.type === 'number'
        ? 'number'
        : k.format === 'email'
          ? 'email'
          : k.format === 'uri'
            ? 'url'
            : k.format === 'date'
              ? 'date'
              : 'text'
    input = (
      <input
        {...common}
        type={type}
        step={k.type === 'number' ? (k.integer ? 1 : 'any') : undefined}
        min={k.type === 'number' ? k.minimum : undefined}
        max={k.type === 'number' ? k.maximum : undefined}
        maxLength={k.type === 'text' ? k.maxLength : undefined}
        placeholder={k.type === 'text' && k.format === 'date-time' ? '2026-01-31T09:00:00Z' : undefined}
        value={typeof value === 'string' ? value : ''}
        onChange={(e) => onChange(e.target.value)}
        className={inputClass}
      />
    )
  }
  return (
    <div className="mb-4">
      <label id={`${id}-label`} htmlFor={k.type === 'multiselect' ? undefined : id} className="mb-1.5 flex items-center gap-2 text-[13px] font-medium text-zinc-300">
        {field.label}
        {field.required && <span className="text-xs font-normal text-zinc-500">({t('elicit.required')})</span>}
      </label>
      {field.description && (
        <p id={`${id}-desc`} className="mb-1.5 text-xs text-zinc-500">
          {field.description}
        </p>
      )}
      {input}
      {error && (
        <p id={`${id}-err`} className="mt-1 text-xs text-red-400" data-testid="elicit-error">
          {error}
        </p>
      )}
    </div>
  )
}

export function ElicitationDialog({
  form,
  onAnswer,
}: {
  form: Elicitation
  onAnswer: (action: ElicitAction, content?: Record<string, unknown>) => void
}) {
  const t = useT()
  const uid = useId()
  const [values, setValues] = useState<FormValues>(() => initialValues(form.fields))
  const [errors, setErrors] = useState<Record<string, FieldError>>({})
  const [now, setNow] = useState(() => Date.now())

  useEffect(() => {
    if (!form.timeoutSec) return
    const timer = setInterval(() => setNow(Date.now()), 1000)
    return () => clearInterval(timer)
  }, [form.timeoutSec])

  const left = secondsLeft(form, now)
  const submit = () => {
    const r = validate(form.fields, values)
    setErrors(r.errors)
    const names = Object.keys(r.errors)
    if (names.length) {
      const bad = form.fields.findIndex((f) => names.includes(f.name))
      document.getElementById(`${uid}-f${bad}`)?.focus()
      return
    }
    onAnswer('accept', r.content)
  }

  return (
    // Escape cancels; focus starts on the first field and comes back where it was.
    <DialogShell
      onEscape={() => onAnswer('cancel')}
      labelledBy={`${uid}-title`}
      describedBy={`${uid}-msg`}
      initialFocus="input, select, button"
      focusKey={form.id}
      data-testid="elicitation-dialog"
    >
        <div className="border-b border-zinc-800 px-5 py-3.5">
          <h2 id={`${uid}-title`} className="text-[15px] font-semibold text-zinc-100">
            {t('elicit.title', { server: form.server })}
          </h2>
          <p className="mt-1 text-xs text-zinc-500">{t('elicit.intro', { server: form.server })}</p>
        </div>
        {/* eslint-disable-next-line jsx-a11y/no-noninteractive-element-interactions -- Enter from a field bubbles here */}
        <form
          className="min-h-0 flex-1 overflow-y-auto px-5 py-4"
          noValidate
          onSubmit={(e) => {
            e.preventDefault()
            submit()
          }}
          onKeyDown={(e) => {
            // Enter in a text or number field sends, as in any form.
            const el = e.target
            if (e.key === 'Enter' && el instanceof HTMLInputElement && el.type !== 'checkbox') {
              e.preventDefault()
              submit()
            }
          }}
        >
          <p id={`${uid}-msg`} className="mb-4 whitespace-pre-wrap break-words text-sm text-zinc-200">
            {form.message}
          </p>
          {form.fields.map((f, i) => {
            const err = errors[f.name]
            return (
              <FieldInput
                key={f.name}
                field={f}
                id={`${uid}-f${i}`}
                value={values[f.name]}
                error={err ? t(err.key, err.vars) : undefined}
                onChange={(v) => {
                  setValues((old) => ({ ...old, [f.name]: v }))
                  // An error goes once its field is edited; Send checks again.
                  if (err) setErrors(({ [f.name]: _gone, ...rest }) => rest)
                }}
              />
            )
          })}
        </form>
        <div className="flex items-center gap-2 border-t border-zinc-800 px-5 py-3">
          <span className="min-w-0 flex-1 text-xs text-zinc-500" aria-live="off">
            {left !== null && t('elicit.timeLeft', { s: left })}
          </span>
          <Button onClick={() => onAnswer('cancel')}>{t('elicit.cancel')}</Button>
          <Button onClick={() => onAnswer('decline')}>{t('elicit.decline')}</Button>
          <Button variant="primary" onClick={submit} data-testid="elicit-accept">
            {t('elicit.accept')}
          </Button>
        </div>
    </DialogShell>
  )
}
