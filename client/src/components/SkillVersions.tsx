// A skill's snapshots (GET /api/skills/{name}/versions, newest first) with rollback after a
// confirmation; the server snapshots the current package first, so a rollback is undoable.

import { useCallback, useEffect, useState } from 'react'
import { RotateCcw } from 'lucide-react'
import { api, describeError } from '../lib/api'
import { formatEpoch, versionTime, type SkillVersions as Versions } from '../lib/memory'
import { skillPath } from '../lib/skills'
import { useI18n } from '../i18n'
import { Button, ConfirmDialog, ErrorBox, Modal, SkeletonRows } from './ui'

export function SkillVersions({ name, onClose, onRolledBack }: { name: string; onClose: () => void; onRolledBack: () => void }) {
  const { t, lang } = useI18n()
  const [versions, setVersions] = useState<string[] | null>(null)
  const [error, setError] = useState<string | null>(null)
  const [confirm, setConfirm] = useState<string | null>(null)
  const [busy, setBusy] = useState(false)
  const [rollbackError, setRollbackError] = useState<string | null>(null)
  const [done, setDone] = useState<string | null>(null)

  const load = useCallback(async () => {
    setError(null)
    try {
      const res = await api.get<Versions>(skillPath(name, '/versions'))
      setVersions(Array.isArray(res?.versions) ? res.versions : [])
    } catch (e) {
      setError(describeError(e))
    }
  }, [name])

  useEffect(() => {
    void load()
  }, [load])

  return (
    <Modal
      title={t('skills.versions.title', { name })}
      onClose={onClose}
      closeDisabled={busy}
      footer={<Button onClick={onClose}>{t('skills.versions.close')}</Button>}
    >
      <div data-testid="skill-versions">
        <p className="mb-3 text-sm text-zinc-500">{t('skills.versions.hint')}</p>
        {done && (
          <p className="mb-3 text-sm text-emerald-400" data-testid="skill-rolled-back">
            {t('skills.versions.done', { version: done })}
          </p>
        )}
        {error && <ErrorBox message={error} onRetry={() => void load()} />}
        {versions === null && !error ? (
          <SkeletonRows count={2} />
        ) : versions && versions.length === 0 ? (
          <p className="text-sm text-zinc-500">{t('skills.versions.none')}</p>
        ) : (
          <ul className="divide-y divide-zinc-800">
            {(versions ?? []).map((v) => (
              <li key={v} className="flex items-center gap-3 py-2 text-sm" data-testid="skill-version" data-version={v}>
                <span className="text-zinc-300">{formatEpoch(versionTime(v), lang) || v}</span>
                <span className="font-mono text-xs text-zinc-600">{v}</span>
                <Button
                  variant="ghost"
                  className="ml-auto"
                  onClick={() => {
                    setRollbackError(null)
                    setConfirm(v)
                  }}
                  data-testid="skill-rollback"
                >
                  <RotateCcw size={14} /> {t('skills.versions.rollback')}
                </Button>
              </li>
            ))}
          </ul>
        )}
      </div>
      {confirm && (
        <ConfirmDialog
          message={t('skills.versions.confirm', { name, version: confirm })}
          confirmLabel={t('skills.versions.rollback')}
          busy={busy}
          error={rollbackError}
          onCancel={() => setConfirm(null)}
          onConfirm={async () => {
            setBusy(true)
            try {
              await api.post(skillPath(name, `/rollback/${encodeURIComponent(confirm)}`))
              setDone(confirm)
              setConfirm(null)
              onRolledBack()
              await load()
            } catch (e) {
              setRollbackError(describeError(e))
            } finally {
              setBusy(false)
            }
          }}
        />
      )}
    </Modal>
  )
}
