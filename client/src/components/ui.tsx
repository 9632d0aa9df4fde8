// Small shared UI pieces: buttons, modal, confirm dialog, skeleton rows, spinner.

import { useEffect, useId, useRef, useState, type ButtonHTMLAttributes, type ReactNode, type RefObject } from 'react'
import { Loader2, X } from 'lucide-react'
import { useT } from '../i18n'
import { focusables, trapTab } from '../lib/focus'

type Variant = 'primary' | 'secondary' | 'danger' | 'ghost'

const VARIANTS: Record<Variant, string> = {
  primary: 'bg-emerald-600 text-white hover:bg-emerald-500 disabled:bg-emerald-900 disabled:text-emerald-300/50',
  secondary: 'border border-zinc-700 bg-zinc-900 text-zinc-200 hover:bg-zinc-800 disabled:text-zinc-600',
  danger: 'bg-red-600 text-white hover:bg-red-500 disabled:bg-red-950 disabled:text-red-300/50',
  ghost: 'text-zinc-400 hover:bg-zinc-800 hover:text-zinc-100 disabled:text-zinc-700',
}

export function Button({
  variant = 'secondary',
  className = '',
  ...props
}: ButtonHTMLAttributes<HTMLButtonElement> & { variant?: Variant }) {
  return (
    <button
      type="button"
      {...props}
      className={`inline-flex items-center justify-center gap-1.5 rounded-md px-3 py-1.5 text-sm font-medium transition-colors disabled:cursor-not-allowed ${VARIANTS[variant]} ${className}`}
    />
  )
}

export function Spinner({ size = 14, className = '' }: { size?: number; className?: string }) {
  return <Loader2 size={size} className={`animate-spin ${className}`} />
}

/**
 * The one modal shell every dialog uses: the dimmed overlay, `role` (`alertdialog` for a
 * decision the server waits for), Escape (`onEscape`), Tab kept inside, focus moved in on open
 * (to `initialFocus`, else the first control) and back where it was on close, again whenever
 * `focusKey` changes (a new request in the same dialog).
 */
export function DialogShell({
  children,
  onEscape,
  role = 'dialog',
  labelledBy,
  describedBy,
  initialFocus,
  focusKey,
  width = 'max-w-lg',
  tone = 'default',
  padding = 'p-4',
  ...rest
}: {
  children: ReactNode
  onEscape: (() => void) | null
  role?: 'dialog' | 'alertdialog'
  labelledBy: string
  describedBy?: string
  /** a selector inside the dialog for the control focused first */
  initialFocus?: string
  focusKey?: string
  width?: string
  tone?: 'default' | 'warning'
  padding?: string
  [data: `data-${string}`]: string | undefined
}) {
  const box = useRef<HTMLDivElement>(null)
  const escapeRef = useRef(onEscape)
  useEffect(() => {
    escapeRef.current = onEscape
  })
  useEffect(() => {
    const previous = document.activeElement instanceof HTMLElement ? document.activeElement : null
    const el = box.current
    if (el && !el.contains(document.activeElement)) {
      const chosen = initialFocus ? el.querySelector<HTMLElement>(initialFocus) : null
      const first = chosen ?? focusables(el).find((f) => !f.hasAttribute('data-modal-close'))
      ;(first ?? el).focus()
    }
    return () => {
      if (previous?.isConnected) previous.focus()
    }
  }, [focusKey, initialFocus])
  const onKeyDown = (e: KeyboardEvent) => {
    if (e.key === 'Escape') {
      if (!escapeRef.current) return
      e.preventDefault()
      e.stopPropagation()
      escapeRef.current()
      return
    }
    if (box.current) trapTab(e, box.current)
  }
  return (
    <div className={`fixed inset-0 z-50 flex items-center justify-center bg-black/60 backdrop-blur-[2px] ${padding}`}>
      <div
        ref={box}
        role={role}
        aria-modal="true"
        aria-labelledby={labelledBy}
        aria-describedby={describedBy}
        tabIndex={-1}
        onKeyDown={(e) => onKeyDown(e.nativeEvent)}
        {...rest}
        className={`flex max-h-[92vh] w-full flex-col rounded-xl border bg-panel shadow-2xl outline-none ${width} ${tone === 'warning' ? 'border-amber-800/70' : 'border-zinc-800'}`}
      >
        {children}
      </div>
    </div>
  )
}

/** A dialog with a title bar and its close button, a scrolling body and a footer of actions. */
export function Modal({
  title,
  children,
  footer,
  onClose,
  wide,
  closeDisabled,
  labelledBy,
}: {
  title: ReactNode
  children: ReactNode
  footer?: ReactNode
  onClose: () => void
  wide?: boolean
  closeDisabled?: boolean
  labelledBy?: string
}) {
  const t = useT()
  const titleId = useId()
  return (
    <DialogShell onEscape={closeDisabled ? null : onClose} labelledBy={labelledBy ?? titleId} width={wide ? 'max-w-4xl' : 'max-w-lg'}>
      <div className="flex items-center gap-3 border-b border-zinc-800 px-5 py-3.5">
        <div id={titleId} className="min-w-0 flex-1 text-[15px] font-semibold text-zinc-100">
          {title}
        </div>
        <button
          type="button"
          aria-label={t('common.close')}
          data-modal-close
          disabled={closeDisabled}
          onClick={onClose}
          className="rounded-md p-1 text-zinc-500 hover:bg-zinc-800 hover:text-zinc-200 disabled:opacity-40"
        >
          <X size={16} />
        </button>
      </div>
      <div className="min-h-0 flex-1 overflow-y-auto px-5 py-4">{children}</div>
      {footer && <div className="flex justify-end gap-2 border-t border-zinc-800 px-5 py-3">{footer}</div>}
    </DialogShell>
  )
}

export function ConfirmDialog({
  message,
  confirmLabel,
  onConfirm,
  onCancel,
  busy,
  error,
}: {
  message: string
  confirmLabel?: string
  onConfirm: () => void
  onCancel: () => void
  busy?: boolean
  error?: string | null
}) {
  const t = useT()
  return (
    <Modal
      title={t('common.confirmTitle')}
      onClose={onCancel}
      closeDisabled={busy}
      footer={
        <>
          <Button onClick={onCancel} disabled={busy}>
            {t('common.cancel')}
          </Button>
          <Button variant="danger" onClick={onConfirm} disabled={busy} data-testid="confirm-button">
            {busy && <Spinner />}
            {confirmLabel ?? t('common.delete')}
          </Button>
        </>
      }
    >
      <p className="text-sm text-zinc-300">{message}</p>
      {error && <p className="mt-3 rounded-md border border-red-900/60 bg-red-950/40 px-3 py-2 text-sm text-red-300">{error}</p>}
    </Modal>
  )
}

export function SkeletonRows({ count = 3 }: { count?: number }) {
  return (
    <div className="space-y-3" aria-busy="true">
      {Array.from({ length: count }, (_, i) => (
        <div key={i} className="animate-pulse rounded-xl border border-zinc-800 bg-zinc-900/40 p-4">
          <div className="h-3.5 w-1/3 rounded bg-zinc-800" />
          <div className="mt-3 h-3 w-2/3 rounded bg-zinc-800/70" />
        </div>
      ))}
    </div>
  )
}

export function ErrorBox({ message, onRetry }: { message: string; onRetry?: () => void }) {
  const t = useT()
  return (
    <div role="alert" className="flex items-center gap-3 rounded-lg border border-red-900/60 bg-red-950/40 px-4 py-3 text-sm text-red-300">
      <span className="min-w-0 flex-1 break-words">{message}</span>
      {onRetry && (
        <Button onClick={onRetry} className="shrink-0">
          {t('common.retry')}
        </Button>
      )}
    </div>
  )
}

export function Field({ label, hint, error, children }: { label: string; hint?: ReactNode; error?: string; children: ReactNode }) {
  return (
    <label className="block">
      <span className="mb-1.5 flex items-center gap-2 text-[13px] font-medium text-zinc-300">{label}{hint}</span>
      {children}
      {error && <span className="mt-1 block text-xs text-red-400">{error}</span>}
    </label>
  )
}

export const inputBase =
  'rounded-md border border-zinc-700 bg-zinc-950 px-3 py-2 text-sm text-zinc-100 placeholder:text-zinc-600 outline-none transition focus:border-emerald-600 focus:ring-2 focus:ring-emerald-600/20 disabled:opacity-60 read-only:text-zinc-400'

export const inputClass = `${inputBase} w-full`

/**
 * Keyboard for an open `role=menu`: focus goes to its first item, ↑/↓/Home/End move between
 * items, Escape closes and returns focus to where it was (the trigger), Tab closes.
 */
export function useMenuKeyboard(open: boolean, menuRef: RefObject<HTMLElement | null>, onClose: () => void) {
  const closeRef = useRef(onClose)
  useEffect(() => {
    closeRef.current = onClose
  })
  useEffect(() => {
    const menu = menuRef.current
    if (!open || !menu) return
    const trigger = document.activeElement instanceof HTMLElement ? document.activeElement : null
    const items = () => [...menu.querySelectorAll<HTMLElement>('[role="menuitem"]:not([disabled])')]
    items()[0]?.focus()
    const onKey = (e: KeyboardEvent) => {
      const list = items()
      const i = list.indexOf(document.activeElement as HTMLElement)
      const go = (j: number) => {
        e.preventDefault()
        list[(j + list.length) % list.length]?.focus()
      }
      if (e.key === 'ArrowDown') go(i + 1)
      else if (e.key === 'ArrowUp') go(i - 1)
      else if (e.key === 'Home') go(0)
      else if (e.key === 'End') go(list.length - 1)
      else if (e.key === 'Escape') {
        e.preventDefault()
        e.stopPropagation()
        closeRef.current()
        trigger?.focus()
      } else if (e.key === 'Tab') closeRef.current()
    }
    menu.addEventListener('keydown', onKey)
    return () => menu.removeEventListener('keydown', onKey)
  }, [open, menuRef])
}

/**
 * The one popup menu: its panel (`className` places, sizes and layers it), the keyboard of
 * [`useMenuKeyboard`], and a press outside `within` (the trigger and the panel's container)
 * closing it.
 */
export function PopupMenu({
  open,
  onClose,
  within,
  className,
  label,
  children,
}: {
  open: boolean
  onClose: () => void
  within: RefObject<HTMLElement | null>
  className: string
  label?: string
  children: ReactNode
}) {
  const menuRef = useRef<HTMLDivElement>(null)
  useMenuKeyboard(open, menuRef, onClose)
  const closeRef = useRef(onClose)
  useEffect(() => {
    closeRef.current = onClose
  })
  useEffect(() => {
    if (!open) return
    const onDown = (e: MouseEvent) => {
      if (within.current && !within.current.contains(e.target as Node)) closeRef.current()
    }
    window.addEventListener('mousedown', onDown)
    return () => window.removeEventListener('mousedown', onDown)
  }, [open, within])
  if (!open) return null
  return (
    <div
      ref={menuRef}
      role="menu"
      aria-label={label}
      className={`absolute rounded-lg border border-zinc-700 bg-zinc-900 py-1 shadow-xl ${className}`}
    >
      {children}
    </div>
  )
}

/** Copies text to the clipboard; `copied` is true for two seconds after a copy succeeded. */
export function useCopy(): { copied: boolean; copy: (text: string) => void } {
  const [copied, setCopied] = useState(false)
  useEffect(() => {
    if (!copied) return
    const id = setTimeout(() => setCopied(false), 2000)
    return () => clearTimeout(id)
  }, [copied])
  const copy = (text: string) => {
    navigator.clipboard?.writeText(text).then(
      () => setCopied(true),
      () => undefined,
    )
  }
  return { copied, copy }
}
