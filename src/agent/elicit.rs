//! Elicitations waiting for a user: the [`Elicitor`] the MCP extension hands server
//! `elicitation/create` requests to. It emits an `elicitation` event to the chat the call runs
//! in, blocks the calling worker until an `elicitation_response` frame answers it (checked
//! against the form), the timeout declines it, or the turn's cancel cancels it, then emits
//! `elicitation_end`. With nobody attached to the chat it declines at once.
//!
//! Threads: `elicit` runs on the turn's worker; `answer` on a `ws-client-N` reader.
//! The content is user data: logs carry sizes and actions only.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Sender};
use serde_json::{Map, Value};

use crate::bus::EventSink;
use crate::mcp::elicit::{Answer, Elicitor, Form, Request};
use crate::util::cancel::CancelToken;
use crate::util::sync;
use crate::wire::Event;

/// At most this many elicitations wait at once (across chats); more are declined.
pub(crate) const MAX_PENDING: usize = 256;

struct Waiting {
    chat_id: String,
    form: Form,
    tx: Sender<Answer>,
}

pub(crate) struct Elicitations {
    sink: Arc<dyn EventSink>,
    timeout: Duration,
    pending: Mutex<HashMap<String, Waiting>>,
}

impl Elicitations {
    /// `timeout`: how long a user has to answer (`CASHCODE_MCP_ELICITATION_TIMEOUT`).
    pub(crate) fn new(sink: Arc<dyn EventSink>, timeout: Duration) -> Elicitations {
        Elicitations { sink, timeout, pending: Mutex::new(HashMap::new()) }
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<String, Waiting>> {
        sync::lock(&self.pending)
    }

    /// Elicitations waiting now (tests, diagnostics).
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.pending().len()
    }

    /// An `elicitation_response` frame: `Err(detail)` for an id this chat is not waiting on
    /// (unknown, answered, timed out) or content the form refuses (the form stays open).
    pub(crate) fn answer(
        &self,
        chat_id: &str,
        id: &str,
        action: &str,
        content: Option<&Value>,
    ) -> Result<(), crate::agent::answers::AnswerError> {
        use crate::agent::answers::AnswerError;
        let mut pending = self.pending();
        let waiting = match pending.get(id) {
            Some(w) if w.chat_id == chat_id => w,
            _ => return Err(AnswerError::UnknownElicitation),
        };
        let answer = match action {
            "accept" => {
                let empty = Value::Object(Map::new());
                let content = waiting
                    .form
                    .check(content.unwrap_or(&empty))
                    .map_err(|why| AnswerError::InvalidContent(why.to_string()))?;
                Answer::Accept(content)
            }
            "decline" => Answer::Decline,
            _ => Answer::Cancel,
        };
        if let Some(w) = pending.remove(id) {
            // bounded(1), one send per id: it cannot be full; a gone waiter already ended it.
            let _ = w.tx.try_send(answer);
        }
        Ok(())
    }
}

impl Elicitor for Elicitations {
    fn elicit(&self, chat_id: &str, request: &Request, cancel: Option<&CancelToken>) -> Answer {
        let server = &request.server;
        if self.sink.subscribers(chat_id) == 0 {
            log::info!("event=elicitation.declined chat_id={chat_id} server={server} reason=nobody_attached");
            return Answer::Decline;
        }
        let id = format!("el-{}", crate::util::rand::hex(8));
        let (tx, rx) = crossbeam_channel::bounded(1);
        {
            let mut pending = self.pending();
            if pending.len() >= MAX_PENDING {
                log::warn!("event=elicitation.declined chat_id={chat_id} server={server} reason=too_many_pending");
                return Answer::Decline;
            }
            pending.insert(id.clone(), Waiting { chat_id: chat_id.to_string(), form: request.form.clone(), tx });
        }
        let schema = request.form.to_schema();
        self.sink.emit(
            chat_id,
            &Event::Elicitation {
                chat_id,
                id: &id,
                server,
                message: &request.message,
                requested_schema: &schema,
                timeout_sec: self.timeout.as_secs().max(1),
            },
        );
        let started = Instant::now();
        let never = crossbeam_channel::never();
        let cancelled = cancel.map(CancelToken::wait_chan).unwrap_or(&never);
        let (answer, reason) = select! {
            recv(rx) -> a => match a {
                Ok(a) => (a, "answered"),
                Err(_) => (Answer::Decline, "dropped"),
            },
            recv(cancelled) -> _ => (Answer::Cancel, "turn_cancelled"),
            default(self.timeout) => (Answer::Decline, "timeout"),
        };
        // Unless `answer` already took it (then the answer is in `rx`, read above or lost
        // only when the cancel or timeout won the race, which the end event reports).
        self.pending().remove(&id);
        let bytes = match &answer {
            Answer::Accept(c) => Value::Object(c.clone()).to_string().len(),
            _ => 0,
        };
        log::info!(
            "event=elicitation.ended chat_id={chat_id} server={server} action={} reason={reason} content_bytes={bytes} duration_ms={}",
            answer.action(),
            started.elapsed().as_millis()
        );
        self.sink.emit(chat_id, &Event::ElicitationEnd { chat_id, id: &id, action: answer.action() });
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::bus::RecordingSink as Sink;

    fn request() -> Request {
        crate::mcp::elicit::parse_request(
            "forms",
            Some(&json!({"message": "Name?", "requestedSchema": {"properties": {"name": {"type": "string"}}, "required": ["name"]}})),
        )
        .unwrap()
    }

    fn setup(subs: usize, timeout: Duration) -> (Arc<Sink>, Arc<Elicitations>) {
        let sink = Arc::new(Sink::new(subs));
        (sink.clone(), Arc::new(Elicitations::new(sink, timeout)))
    }

    /// Runs `elicit` on a thread and returns the emitted elicitation id once it is waiting.
    fn ask(
        sink: &Arc<Sink>,
        el: &Arc<Elicitations>,
        cancel: Option<CancelToken>,
    ) -> (String, std::thread::JoinHandle<Answer>) {
        let el2 = el.clone();
        let h = std::thread::spawn(move || el2.elicit("c-1", &request(), cancel.as_ref()));
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(e) = sink.events.lock().unwrap().iter().find(|e| e["event"] == "elicitation") {
                return (e["id"].as_str().unwrap().to_string(), h);
            }
            assert!(Instant::now() < deadline, "no elicitation event");
            std::thread::yield_now();
        }
    }

    #[test]
    fn accept_checks_content_and_ends_the_form() {
        let (sink, el) = setup(1, Duration::from_secs(30));
        let (id, h) = ask(&sink, &el, None);
        assert_eq!(
            el.answer("c-2", &id, "accept", Some(&json!({"name": "x"}))).unwrap_err().detail(),
            "unknown elicitation id (answered, timed out or never asked)"
        );
        assert!(el.answer("c-1", &id, "accept", Some(&json!({}))).unwrap_err().detail().contains("'name' is required"));
        assert!(el.answer("c-1", &id, "accept", None).unwrap_err().detail().contains("'name' is required"));
        el.answer("c-1", &id, "accept", Some(&json!({"name": "Ann"}))).unwrap();
        assert_eq!(h.join().unwrap(), Answer::Accept(json!({"name": "Ann"}).as_object().cloned().unwrap()));
        assert!(el.answer("c-1", &id, "decline", None).is_err(), "answered twice");
        let events = sink.events.lock().unwrap().clone();
        assert_eq!(events[0]["requested_schema"]["required"], json!(["name"]));
        assert_eq!(events[0]["timeout_sec"], json!(30));
        assert_eq!(events[1], json!({"event": "elicitation_end", "chat_id": "c-1", "id": id, "action": "accept"}));
        assert_eq!(el.waiting(), 0);
    }

    #[test]
    fn nobody_timeout_and_cancel() {
        let (sink, el) = setup(0, Duration::from_secs(30));
        assert_eq!(el.elicit("c-1", &request(), None), Answer::Decline);
        assert!(sink.events.lock().unwrap().is_empty(), "nothing is shown to nobody");

        let (sink, el) = setup(1, Duration::from_millis(50));
        let (_, h) = ask(&sink, &el, None);
        assert_eq!(h.join().unwrap(), Answer::Decline);
        assert_eq!(sink.events.lock().unwrap()[1]["action"], "decline");

        let (sink, el) = setup(1, Duration::from_secs(30));
        let token = CancelToken::new();
        let (_, h) = ask(&sink, &el, Some(token.clone()));
        token.cancel();
        assert_eq!(h.join().unwrap(), Answer::Cancel);
        assert_eq!(sink.events.lock().unwrap()[1]["action"], "cancel");
        assert_eq!(el.waiting(), 0);
    }
}
