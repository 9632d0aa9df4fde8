// Application shell: resolves endpoints, owns the WebSocket and the chat state machine, and
// switches between the in-memory views (chat, MCP Market, Skill Market, Memory, LLM Settings,
// Safety). Approval requests of the open chat are shown as a dialog, other chats get a badge.

import { lazy, Suspense, useCallback, useEffect, useReducer, useRef, useState } from 'react'
import { rememberChat, rememberedChat } from './lib/lastChat'
import { saveContext, usageFromEvent } from './lib/usage'
import { tr, useT } from './i18n'
import { api, describeError, setApiBase } from './lib/api'
import { attachFrame, initialState, reattachPlan, reduce, type ConnState, type State } from './lib/chatStore'
import { resolveEndpoints } from './lib/config'
import { ChatSocket } from './lib/socket'
import type { AppView } from './lib/skills'
import type { LlmSettings, MessagesPage, SessionInfo } from './lib/types'
import { ChatView } from './components/ChatView'
import { Sidebar } from './components/Sidebar'
import { TitleBar } from './components/TitleBar'
import { Spinner } from './components/ui'
import { ElicitationDialog, type ElicitAction } from './components/ElicitationDialog'
import { responseFrame, type Elicitation } from './lib/elicitation'
import { ApprovalDialog } from './components/ApprovalDialog'
import { approvalFrame, type Approval, type ApprovalDecision } from './lib/approvals'
import type { MessageFrame, Selection } from './lib/selections'
import type { SearchHit } from './lib/search'

interface QueuedMessage {
  frame: MessageFrame
  selections: Selection[]
}

// The markets, settings and the Memory page load on first visit, so the chat's bundle stays small.
const McpMarket = lazy(() => import('./components/McpMarket').then((m) => ({ default: m.McpMarket })))
const SkillMarket = lazy(() => import('./components/SkillMarket').then((m) => ({ default: m.SkillMarket })))
const LlmSettingsView = lazy(() => import('./components/LlmSettings').then((m) => ({ default: m.LlmSettingsView })))
const MemoryPage = lazy(() => import('./components/MemoryPage').then((m) => ({ default: m.MemoryPage })))
const SearchDialog = lazy(() => import('./components/SearchDialog').then((m) => ({ default: m.SearchDialog })))
const SafetyPage = lazy(() => import('./components/SafetyPage').then((m) => ({ default: m.SafetyPage })))
const UsagePage = lazy(() => import('./components/UsagePage').then((m) => ({ default: m.UsagePage })))

/** Items per history request: the newest page first, older ones on scroll-back. */
const HISTORY_PAGE = 50

export function App() {
  const t = useT()
  const [ready, setReady] = useState(false)
  const [state, dispatch] = useReducer(reduce, initialState)
  const stateRef = useRef<State>(state)
  stateRef.current = state
  const [conn, setConn] = useState<ConnState>('connecting')
  const [retryIn, setRetryIn] = useState<number | null>(null)
  const [view, setView] = useState<AppView>('chat')
  const [drawer, setDrawer] = useState(false)
  const [llm, setLlm] = useState<LlmSettings | null>(null)
  const [llmVersion, setLlmVersion] = useState(0)
  const socketRef = useRef<ChatSocket | null>(null)
  /** messages typed while their chat's turn runs: each is sent when the chat is idle again */
  const [queue, setQueue] = useState<Record<string, QueuedMessage[]>>({})
  /** chats this connection is subscribed to (reset on every reconnect) */
  const subscribed = useRef<Set<string>>(new Set())
  const [searchOpen, setSearchOpen] = useState(false)
  /** a search hit the open chat is to scroll to */
  const [jump, setJump] = useState<{ chatId: string; cursor: number; nonce: number } | null>(null)

  // Ctrl+K / Cmd+K opens search from anywhere (a dialog already open keeps the key).
  useEffect(() => {
    const onKey = (e: KeyboardEvent) => {
      if (!(e.ctrlKey || e.metaKey) || e.altKey || e.shiftKey || e.key.toLowerCase() !== 'k') return
      if (document.querySelector('[role="dialog"]')) return
      e.preventDefault()
      setSearchOpen(true)
    }
    window.addEventListener('keydown', onKey)
    return () => window.removeEventListener('keydown', onKey)
  }, [])

  const loadSessions = useCallback(async () => {
    try {
      const res = await api.get<{ sessions: SessionInfo[] }>('/sessions')
      dispatch({ type: 'sessions', sessions: Array.isArray(res?.sessions) ? res.sessions : [] })
    } catch (e) {
      dispatch({ type: 'banner', text: tr('app.loadSessionsFailed', { error: describeError(e) }) })
    }
  }, [])

  const loadSessionsRef = useRef(loadSessions)
  loadSessionsRef.current = loadSessions

  const loadLlm = useCallback(async () => {
    try {
      setLlm(await api.get<LlmSettings>('/settings/llm'))
    } catch {
      setLlm(null)
    }
  }, [])

  // Endpoints first (the server may advertise a non-default WS port), then the socket.
  useEffect(() => {
    let cancelled = false
    let socket: ChatSocket | null = null
    let reconnected = false
    void resolveEndpoints(window.location, import.meta.env).then((ep) => {
      if (cancelled) return
      setApiBase(ep.apiBase)
      setReady(true)
      socket = new ChatSocket(ep.wsUrl, {
        onEvent: (ev) => {
          if (ev.event === 'ready' && typeof ev.chat_id === 'string') subscribed.current.add(ev.chat_id)
          if (ev.event === 'attached' && typeof ev.chat_id === 'string') subscribed.current.add(ev.chat_id)
          // `usage` is not replayed: the meter's last reading is kept for after a reload.
          if (ev.event === 'usage' && typeof ev.chat_id === 'string') {
            const u = usageFromEvent(ev)
            if (u) saveContext(ev.chat_id, u.context)
          }
          dispatch({ type: 'ws', ev })
        },
        onState: (s, retry) => {
          setConn(s)
          setRetryIn(retry)
        },
        onOpen: () => {
          // After an outage the list may have changed (another tab, a server restart).
          if (reconnected) void loadSessionsRef.current()
          reconnected = true
          // A new connection hears nothing until it re-subscribes: resume the open chat and every
          // running turn after the last event we applied.
          subscribed.current = new Set()
          for (const a of reattachPlan(stateRef.current)) {
            subscribed.current.add(a.chat_id)
            dispatch({ type: 'attaching', chatId: a.chat_id, replay: a.after_seq !== undefined })
            socket?.send({ type: 'attach', ...a })
          }
        },
      })
      socketRef.current = socket
      socket.connect()
    })
    return () => {
      cancelled = true
      socket?.close()
      socketRef.current = null
    }
  }, [])

  useEffect(() => {
    if (!ready) return
    void loadSessions()
    void loadLlm()
  }, [ready, loadSessions, loadLlm, llmVersion])

  // Subscribe to the active chat when it changes by any route (click, delete, first load).
  const active = state.activeChatId
  useEffect(() => {
    if (!active || conn !== 'connected') return
    if (subscribed.current.has(active)) return
    const a = attachFrame(stateRef.current, active)
    dispatch({ type: 'attaching', chatId: active, replay: a.after_seq !== undefined })
    if (socketRef.current?.send({ type: 'attach', ...a })) subscribed.current.add(active)
  }, [active, conn])

  // A chat bound to a project exists on the server from `new_chat` on: once it is open (or
  // refused), the list is read again so it shows there with its project.
  const projectChatSent = useRef(false)
  useEffect(() => {
    if (!projectChatSent.current || state.awaitingNewChat) return
    projectChatSent.current = false
    void loadSessionsRef.current()
  }, [state.awaitingNewChat, active])

  // Never leave the person without a chat to type into (e.g. after deleting the last one).
  useEffect(() => {
    if (active || conn !== 'connected' || !state.sessionsLoaded || state.awaitingNewChat) return
    if (socketRef.current?.send({ type: 'new_chat' })) dispatch({ type: 'newChatRequested' })
  }, [active, conn, state.sessionsLoaded, state.awaitingNewChat])

  // History for the active chat, once per page life; a late answer for another chat is still cached.
  const activeChat = active ? state.chats[active] : undefined
  const needsHistory = Boolean(active && !activeChat?.loaded && state.sessions.some((s) => s.chat_id === active))
  const loading = useRef<Set<string>>(new Set())
  useEffect(() => {
    if (!ready || !active || !needsHistory || loading.current.has(active)) return
    const chatId = active
    loading.current.add(chatId)
    api
      .get<MessagesPage>(`/sessions/${encodeURIComponent(chatId)}/messages?limit=${HISTORY_PAGE}&tools=1`)
      .then((res) =>
        dispatch({
          type: 'history',
          chatId,
          messages: Array.isArray(res?.messages) ? res.messages : [],
          start: typeof res?.start === 'number' ? res.start : 0,
        }),
      )
      .catch((e) => {
        // A draft that was never persisted 404s: it simply has no history.
        dispatch({ type: 'history', chatId, messages: [] })
        if (!(e instanceof Error && 'status' in e && (e as { status: number }).status === 404)) {
          dispatch({ type: 'banner', text: tr('app.loadMessagesFailed', { error: describeError(e) }) })
        }
      })
      .finally(() => loading.current.delete(chatId))
  }, [ready, active, needsHistory])

  // Older pages on scroll-back: one request per chat at a time.
  const loadingOlder = useRef<Set<string>>(new Set())
  const [olderBusy, setOlderBusy] = useState(false)
  const loadOlder = useCallback((chatId: string) => {
    const chat = stateRef.current.chats[chatId]
    const before = chat?.historyStart
    if (!chat?.loaded || !before || loadingOlder.current.has(chatId)) return
    loadingOlder.current.add(chatId)
    setOlderBusy(true)
    const limit = Math.min(HISTORY_PAGE, before)
    api
      .get<MessagesPage>(`/sessions/${encodeURIComponent(chatId)}/messages?limit=${limit}&before=${before}&tools=1`)
      .then((res) => {
        const messages = Array.isArray(res?.messages) ? res.messages : []
        const start = typeof res?.start === 'number' ? res.start : before - messages.length
        dispatch({ type: 'olderHistory', chatId, messages, start })
      })
      .catch((e) => dispatch({ type: 'banner', text: tr('app.loadMessagesFailed', { error: describeError(e) }) }))
      .finally(() => {
        loadingOlder.current.delete(chatId)
        setOlderBusy(loadingOlder.current.size > 0)
      })
  }, [])

  // A page with unsaved edits (the Safety page's policy) asks before it is left.
  const unsaved = useRef(false)
  const chooseView = (v: AppView) => {
    if (v !== view && unsaved.current && !window.confirm(t('common.leaveUnsaved'))) return
    unsaved.current = false
    setView(v)
    setDrawer(false)
  }

  const onSelectChat = (chatId: string) => {
    chooseView('chat')
    dispatch({ type: 'select', chatId })
  }

  // The open chat is remembered, so a reload reopens it (and its waiting dialog, which the
  // server sends again on attach); a chat waiting for the owner goes first.
  useEffect(() => {
    if (active && state.sessions.some((s) => s.chat_id === active)) rememberChat(active)
  }, [active, state.sessions])
  const reopened = useRef(false)
  useEffect(() => {
    if (reopened.current || !state.sessionsLoaded || conn !== 'connected') return
    reopened.current = true
    const known = (id: string | null) => Boolean(id && state.sessions.some((s) => s.chat_id === id))
    const waitingFirst = Object.keys(state.waitingChats).find((id) => known(id))
    const last = rememberedChat()
    const target = waitingFirst ?? (known(last) ? last : null)
    if (target && target !== state.activeChatId) dispatch({ type: 'select', chatId: target })
  }, [state.sessionsLoaded, state.sessions, state.waitingChats, state.activeChatId, conn])

  const openHit = (hit: SearchHit) => {
    setSearchOpen(false)
    onSelectChat(hit.chat_id)
    // A title hit (cursor 0) opens the chat where it is.
    setJump(hit.cursor > 0 ? { chatId: hit.chat_id, cursor: hit.cursor, nonce: Date.now() } : null)
  }

  const onJumpDone = useCallback((found: boolean) => {
    setJump(null)
    if (!found) dispatch({ type: 'banner', text: tr('search.notFound') })
  }, [])

  const onNewChat = (project?: string) => {
    chooseView('chat')
    const frame = project ? { type: 'new_chat', project } : { type: 'new_chat' }
    if (socketRef.current?.send(frame)) {
      projectChatSent.current = Boolean(project)
      dispatch({ type: 'newChatRequested', project })
    } else dispatch({ type: 'banner', text: tr('app.offlineNewChat') })
  }

  const onRename = async (chatId: string, title: string) => {
    try {
      const res = await api.patch<{ title: string }>(`/sessions/${encodeURIComponent(chatId)}`, { title })
      dispatch({ type: 'renamed', chatId, title: res?.title ?? title })
    } catch (e) {
      console.error('rename failed', e)
      dispatch({ type: 'banner', text: tr('app.renameFailed', { error: describeError(e) }) })
    }
  }

  const onDelete = async (chatId: string) => {
    try {
      await api.del(`/sessions/${encodeURIComponent(chatId)}`)
      dispatch({ type: 'deleted', chatId })
      subscribed.current.delete(chatId)
      await loadSessions()
    } catch (e) {
      dispatch({ type: 'banner', text: tr('app.deleteFailed', { error: describeError(e) }) })
    }
  }

  const send = (frame: MessageFrame, selections: Selection[]): boolean => {
    // The server would queue it too, but its events would then interleave with the running
    // answer in the transcript; holding it here keeps each turn's messages together.
    if (stateRef.current.generating[frame.chat_id]) {
      if (!socketRef.current?.isOpen()) return false
      setQueue((q) => ({ ...q, [frame.chat_id]: [...(q[frame.chat_id] ?? []), { frame, selections }] }))
      return true
    }
    if (!socketRef.current?.send(frame)) return false
    subscribed.current.add(frame.chat_id)
    dispatch({ type: 'sent', chatId: frame.chat_id, content: frame.content, selections })
    return true
  }

  // Send the next queued message of every chat whose turn has ended.
  useEffect(() => {
    if (conn !== 'connected') return
    for (const [chatId, list] of Object.entries(queue)) {
      if (!list.length || state.generating[chatId] || !state.chats[chatId]) continue
      const next = list[0]
      if (!socketRef.current?.send(next.frame)) continue
      subscribed.current.add(chatId)
      dispatch({ type: 'sent', chatId, content: next.frame.content, selections: next.selections })
      setQueue((q) => ({ ...q, [chatId]: (q[chatId] ?? []).filter((m) => m !== next) }))
    }
  }, [queue, state.generating, state.chats, conn])

  const unqueue = (chatId: string, index: number) =>
    setQueue((q) => ({ ...q, [chatId]: (q[chatId] ?? []).filter((_, i) => i !== index) }))

  // The open chat's first form is shown; a form in another chat gets a notice with a way there.
  const form: Elicitation | undefined = active ? state.elicitations[active]?.[0] : undefined
  const elsewhere = Object.entries(state.elicitations).find(([id, forms]) => id !== active && forms.length)?.[1][0]
  const answerForm = (f: Elicitation, action: ElicitAction, content?: Record<string, unknown>) => {
    // The form closes on the server's `elicitation_end`, so a refused answer leaves it open.
    if (!socketRef.current?.send(responseFrame(f, action, content))) {
      dispatch({ type: 'banner', text: t('elicit.notConnected') })
    }
  }

  // The open chat's first approval request is shown, on every page; others are badged in the
  // sidebar and named in a banner.
  const approval: Approval | undefined = active ? state.approvals[active]?.[0] : undefined
  // Waiting chats: those whose requests this page holds, and those the server named (chats this
  // page never opened, or before it attached them after a reload).
  const waitingIds = [
    ...new Set([...Object.keys(state.waitingChats), ...Object.entries(state.approvals).filter(([, l]) => l.length).map(([id]) => id)]),
  ]
  const waitingMap = Object.fromEntries(waitingIds.map((id) => [id, true]))
  const waitingCount = waitingIds.length
  // A mark in the page title while requests wait, for a tab in the background.
  const baseTitle = useRef(document.title)
  useEffect(() => {
    document.title = waitingCount ? `(${waitingCount}) ⚠ ${baseTitle.current}` : baseTitle.current
  }, [waitingCount])
  const approvalElsewhere = waitingIds.find((id) => id !== active)
  const answerApproval = (a: Approval, decision: ApprovalDecision) => {
    // The dialog closes on the server's `approval_end`; an answer that did not leave keeps it.
    if (!socketRef.current?.send(approvalFrame(a, decision))) {
      dispatch({ type: 'banner', text: t('approval.notConnected') })
    }
  }

  const cancel = (chatId: string) => {
    if (!socketRef.current?.send({ type: 'cancel', chat_id: chatId })) {
      dispatch({ type: 'banner', text: tr('app.offlineCancel') })
    }
  }

  return (
    <div className="flex h-full flex-col bg-page text-zinc-200">
      <TitleBar
        conn={conn}
        retryIn={retryIn}
        onMenu={() => setDrawer((d) => !d)}
        onRetry={() => socketRef.current?.retryNow()}
      />
      <div className="relative flex min-h-0 flex-1">
        <Sidebar
          view={view}
          open={drawer}
          onClose={() => setDrawer(false)}
          sessions={state.sessions}
          activeChatId={state.activeChatId}
          generating={state.generating}
          waiting={waitingMap}
          onNewChat={onNewChat}
          onSelect={onSelectChat}
          onRename={onRename}
          onDelete={onDelete}
          onView={chooseView}
          onImported={() => void loadSessions()}
          onNotice={(text) => dispatch({ type: 'banner', text })}
          onSearch={() => {
            setDrawer(false)
            setSearchOpen(true)
          }}
        />
        <main className="flex min-w-0 flex-1 flex-col">
          {state.banner && (
            <div
              role="alert"
              className="flex items-start gap-3 border-b border-red-900/60 bg-red-950/60 px-4 py-2 text-sm text-red-200"
            >
              <span className="min-w-0 flex-1 break-words">{state.banner}</span>
              <button
                type="button"
                aria-label={t('common.dismiss')}
                onClick={() => dispatch({ type: 'banner', text: null })}
                className="rounded px-1 text-red-300 hover:bg-red-900/50"
              >
                ×
              </button>
            </div>
          )}
          {elsewhere && (
            <div role="status" className="flex items-center gap-3 border-b border-amber-900/60 bg-amber-950/50 px-4 py-2 text-sm text-amber-200">
              <span className="min-w-0 flex-1 break-words">{t('elicit.otherChat', { server: elsewhere.server })}</span>
              <button
                type="button"
                onClick={() => onSelectChat(elsewhere.chatId)}
                className="rounded px-2 py-0.5 text-amber-100 hover:bg-amber-900/50"
              >
                {t('elicit.open')}
              </button>
            </div>
          )}
          {approvalElsewhere && (
            <div role="status" className="flex items-center gap-3 border-b border-amber-900/60 bg-amber-950/50 px-4 py-2 text-sm text-amber-200">
              <span className="min-w-0 flex-1 break-words">{t('approval.otherChat')}</span>
              <button
                type="button"
                onClick={() => onSelectChat(approvalElsewhere)}
                className="rounded px-2 py-0.5 text-amber-100 hover:bg-amber-900/50"
                data-testid="approval-open"
              >
                {t('elicit.open')}
              </button>
            </div>
          )}
          {searchOpen && (
            <Suspense fallback={null}>
              <SearchDialog onClose={() => setSearchOpen(false)} onOpen={openHit} />
            </Suspense>
          )}
          {approval && (
            <ApprovalDialog key={approval.id} request={approval} onAnswer={(d) => answerApproval(approval, d)} />
          )}
          {!approval && form && view === 'chat' && (
            <ElicitationDialog key={form.id} form={form} onAnswer={(action, content) => answerForm(form, action, content)} />
          )}
          <div className="min-h-0 flex-1">
            {view === 'chat' && ready && (
              <ChatView
                chatId={state.activeChatId}
                chat={activeChat}
                generating={Boolean(active && state.generating[active])}
                connected={conn === 'connected'}
                llm={llm}
                llmVersion={llmVersion}
                onOpenSettings={() => chooseView('llm-settings')}
                onSend={send}
                onCancel={cancel}
                queued={active ? (queue[active] ?? []).map((m) => m.frame.content) : []}
                onUnqueue={(i) => active && unqueue(active, i)}
                onLoadOlder={loadOlder}
                loadingOlder={olderBusy}
                awaitingChat={state.awaitingNewChat}
                jumpTo={jump && jump.chatId === active ? jump : null}
                onJumpDone={onJumpDone}
              />
            )}
            {/* Keyed by view: a view that suspends must not keep the previous one mounted (stale). */}
            <Suspense
              key={view}
              fallback={
                <div className="flex flex-1 items-center justify-center text-zinc-400" role="status">
                  <Spinner size={18} />
                </div>
              }
            >
              {view === 'mcp-market' && <McpMarket />}
              {view === 'skill-market' && <SkillMarket />}
              {view === 'memory' && <MemoryPage />}
              {view === 'safety' && <SafetyPage
                  sessions={state.sessions}
                  onUnsaved={(u) => {
                    unsaved.current = u
                  }}
                />}
              {view === 'usage' && <UsagePage sessions={state.sessions} />}
              {view === 'llm-settings' && <LlmSettingsView onSaved={() => setLlmVersion((v) => v + 1)} />}
            </Suspense>
          </div>
        </main>
      </div>
    </div>
  )
}
