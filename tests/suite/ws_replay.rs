//! Streams that survive a disconnect (the extension): per-chat `seq`, `attached.last_seq`,
//! `attach {after_seq}` replaying buffered events with identical JSON before live ones (no gaps,
//! no duplicates), and turns that keep running with no client attached.

use serde_json::{json, Value};

use crate::common::*;

fn seqs(events: &[Value]) -> Vec<u64> {
    events.iter().map(|e| e["seq"].as_u64().expect("seq")).collect()
}

fn deltas(events: &[Value]) -> String {
    events.iter().filter(|e| e["event"] == "delta").map(|e| e["text"].as_str().expect("delta text")).collect()
}

#[test]
fn reattach_with_after_seq_replays_exactly_what_was_missed() {
    let OneChat { fake, server, ws: mut a, chat } = one_chat();
    // A witness that stays subscribed the whole time.
    let mut witness = WsClient::connect(&server);
    assert_eq!(witness.attach(&chat, None), 0);

    let pieces = [
        "Zürich ",
        "is ",
        "großartig",
        " — ",
        "日本語のテキスト",
        " and ",
        "emoji 🎉🎉",
        " end\n",
        "line two ",
        "\"quoted\" \\ back",
    ];
    let g1 = Gate::new();
    let g2 = Gate::new();
    fake.push(Reply::text(&pieces).gate_before_chunk(2, &g1).gate_before_chunk(6, &g2));
    a.message(&chat, "tell me", "openai_compatible");
    // A reads the title and the first two deltas, then its socket dies.
    let mut got_a = Vec::new();
    while got_a.iter().filter(|e: &&Value| e["event"] == "delta").count() < 2 {
        got_a.push(a.recv());
    }
    g1.wait_reached(WAIT);
    let last_a = got_a.last().expect("events")["seq"].as_u64().expect("seq");
    a.drop_socket();

    // The turn goes on with A gone; chunks 2..5 are streamed while nobody reconnected.
    g1.open();
    g2.wait_reached(WAIT);

    let mut b = WsClient::connect(&server);
    let last_seq = b.attach(&chat, Some(last_a));
    assert!(last_seq >= last_a, "last_seq {last_seq} < {last_a}");
    // Let the rest stream live.
    g2.open();
    let got_b = b.turn_events(&chat);
    let seen_by_witness = witness.turn_events(&chat);

    // No gaps, no duplicates across the two connections; B saw exactly the witness's events
    // after A's last one, with identical JSON.
    let mut all = got_a.clone();
    all.extend(got_b.clone());
    let (masked, _) = mask_turn(&all, 1);
    assert_eq!(masked, plain_answer(&chat, Some("tell me"), &pieces));
    assert_eq!(seqs(&seen_by_witness), seqs(&all));
    assert_eq!(got_b, seen_by_witness[got_a.len()..].to_vec());
    assert_eq!(got_a, seen_by_witness[..got_a.len()].to_vec());

    // Concatenated deltas equal the stored answer byte for byte.
    let streamed = deltas(&all);
    assert_eq!(streamed, pieces.concat());
    let recs = history_records(&server.home, &chat);
    assert_eq!(recs.len(), 2);
    assert_eq!(recs[1]["content"].as_str().expect("content").as_bytes(), streamed.as_bytes());
}

#[test]
fn turn_finishes_with_no_client_and_replays_from_zero() {
    let OneChat { fake, server, ws: mut a, chat } = one_chat();
    let gate = Gate::new();
    fake.push(Reply::text(&["alone ", "in ", "the dark"]).gate_before_head(&gate));
    a.message(&chat, "run without me", "openai_compatible");
    gate.wait_reached(WAIT);
    a.drop_socket();
    gate.open();
    // The turn completes and is persisted with nobody attached.
    wait_for("the unattended turn to be persisted", WAIT, || {
        (history_records(&server.home, &chat).len() == 2).then_some(())
    });
    let mut b = WsClient::connect(&server);
    let last = b.attach(&chat, Some(0));
    let replay = b.recv_until(|v| v["event"] == "done");
    assert_eq!(replay.last().expect("done")["seq"], json!(last));
    let (masked, _) = mask_turn(&replay, 1);
    assert_eq!(masked, plain_answer(&chat, Some("run without me"), &["alone ", "in ", "the dark"]));
    assert_eq!(deltas(&replay), "alone in the dark");
    // Nothing else is pending.
    b.ping_sync();
}

#[test]
fn attach_without_after_seq_mid_turn_gets_the_rest_without_gaps() {
    let OneChat { fake, server, ws: mut a, chat } = one_chat();
    let gate = Gate::new();
    fake.push(Reply::text(&["one ", "two ", "three"]).gate_before_chunk(2, &gate));
    a.message(&chat, "count", "openai_compatible");
    gate.wait_reached(WAIT);
    // Everything before the gate: title + 2 deltas.
    let early: Vec<Value> = (0..3).map(|_| a.recv()).collect();
    let mut b = WsClient::connect(&server);
    let last = b.attach(&chat, None);
    assert_eq!(last, 3, "title and two deltas were emitted before the attach");
    gate.open();
    let rest_b = b.turn_events(&chat);
    let rest_a = a.turn_events(&chat);
    assert_eq!(rest_a, rest_b);
    let (masked, _) = mask_turn(&rest_b, last + 1);
    assert_eq!(masked, vec![ev_delta(&chat, "three"), ev_end(&chat), ev_done(&chat)]);
    let mut all = early;
    all.extend(rest_a);
    let (masked, _) = mask_turn(&all, 1);
    assert_eq!(masked, plain_answer(&chat, Some("count"), &["one ", "two ", "three"]));
}

#[test]
fn seq_keeps_increasing_across_turns_and_replays_span_turns() {
    let OneChat { fake, server, ws: mut a, chat } = one_chat();
    fake.push(Reply::text(&["first"]));
    fake.push(Reply::text(&["second"]));
    a.message(&chat, "t1", "openai_compatible");
    let t1 = a.turn_events(&chat);
    a.message(&chat, "t2", "openai_compatible");
    let t2 = a.turn_events(&chat);
    let mut both = t1.clone();
    both.extend(t2.clone());
    assert_eq!(seqs(&both), (1..=both.len() as u64).collect::<Vec<_>>());
    // Replay from the middle of turn 1 returns the identical frames.
    let mut b = WsClient::connect(&server);
    let last = b.attach(&chat, Some(2));
    assert_eq!(last, both.len() as u64);
    let replay: Vec<Value> = (0..both.len() - 2).map(|_| b.recv()).collect();
    assert_eq!(replay, both[2..].to_vec());
    b.ping_sync();
    // after_seq at or past the end replays nothing.
    let mut d = WsClient::connect(&server);
    assert_eq!(d.attach(&chat, Some(last)), last);
    assert_eq!(d.attach(&chat, Some(last + 100)), last);
    d.ping_sync();
    // A plain attach of an idle chat replays nothing.
    let mut c = WsClient::connect(&server);
    assert_eq!(c.attach(&chat, None), last);
    c.ping_sync();
}

/// A client that reloads mid-turn: `GET /api/sessions` names the running turn's `turn_seq`, and
/// `attach` from it gives the turn's `turn_started` (its user message, without a seq) and its
/// events so far, then the rest live. The tab that sent the message saw `turn_started` live,
/// before the turn's first event; once the turn ends the row has no `turn_seq`.
#[test]
fn a_reload_mid_turn_gets_the_user_message_and_the_turn_so_far() {
    let OneChat { fake, server, ws: mut a, chat } = one_chat();
    // A finished turn first: the replay starts at the running turn, not at the chat's start.
    fake.push(Reply::text(&["first"]));
    a.message(&chat, "earlier", "openai_compatible");
    a.turn_events(&chat);
    let gate = Gate::new();
    fake.push(Reply::text(&["one ", "two ", "three"]).gate_before_chunk(2, &gate));
    a.message(&chat, "count to three", "openai_compatible");
    gate.wait_reached(WAIT);
    let early: Vec<Value> = (0..2).map(|_| a.recv()).collect();
    let row = |server: &TestServer| {
        let rows = server.get("/api/sessions").json();
        rows["sessions"].as_array().unwrap().iter().find(|r| r["chat_id"] == chat).cloned().unwrap()
    };
    let from = row(&server)["turn_seq"].as_u64().expect("turn_seq while the turn runs");
    assert_eq!(early[0]["seq"], json!(from + 1), "the turn's first event follows turn_seq");
    let live: Vec<&Value> = a.log.iter().filter(|v| v["event"] == "turn_started").collect();
    assert_eq!(live.len(), 2, "one per turn");
    assert_eq!(live[1]["message"], "count to three");
    assert!(live[1].get("seq").is_none(), "turn_started has no seq: {:?}", live[1]);
    assert_eq!(live[1]["stream_id"], early[0]["stream_id"]);

    let mut b = WsClient::connect(&server);
    let before = b.log.len();
    b.attach(&chat, Some(from));
    let replay: Vec<Value> = (0..2).map(|_| b.recv()).collect();
    assert_eq!(replay, early, "the turn's events so far, nothing of the earlier turn");
    let chat_frames: Vec<&Value> = b.log[before..].iter().filter(|v| v["event"] != "attached").collect();
    assert_eq!(chat_frames[0]["event"], "turn_started", "its message first: {chat_frames:?}");
    assert_eq!(chat_frames[0]["message"], "count to three");
    gate.open();
    let rest_b = b.turn_events(&chat);
    let rest_a = a.turn_events(&chat);
    assert_eq!(rest_a, rest_b);
    assert!(row(&server).get("turn_seq").is_none(), "no turn runs any more");
    // A resume past the turn's start does not get its message again.
    let mut c = WsClient::connect(&server);
    let before = c.log.len();
    c.attach(&chat, Some(from + 1));
    let replayed = c.turn_events(&chat);
    assert_eq!(replayed[0]["seq"], json!(from + 2));
    assert!(!c.log[before..].iter().any(|v| v["event"] == "turn_started"), "{:?}", &c.log[before..]);
}
