//! Property tests (the fuzz targets where cargo-fuzz cannot run) for MCP's inbound wire:
//! JSON-RPC decoding, reply routing in [`Inbox`], and the SSE event reader. Random token soups,
//! mutated valid messages and byte noise must never panic, every reply reaches exactly the
//! request it names, and the reader never returns more than it was given.
//! `CASHCODE_FUZZ_CASES` scales the runs and `CASHCODE_FUZZ_SEED` varies the inputs.
//! Test thread only.

use serde_json::{json, Value};

use super::jsonrpc::{self, Id, Message};
use super::transport::Inbox;
use crate::util::prng::{cases, seed, Prng};

const PIECES: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"jsonrpc\"",
    "\"2.0\"",
    "\"id\"",
    "\"method\"",
    "\"params\"",
    "\"result\"",
    "\"error\"",
    "\"code\"",
    "\"message\"",
    "\"data\"",
    "\"ping\"",
    "\"tools/list\"",
    "\"notifications/progress\"",
    "\"progressToken\"",
    "\"notifications/tools/list_changed\"",
    "1",
    "-1",
    "7",
    "1.5",
    "1e400",
    "9223372036854775808",
    "-32601",
    "null",
    "true",
    "\"x\"",
    "\"\\u0000\"",
    "\"\u{5b57}\"",
    " ",
];

/// A random id value, some of them the ids the test registers.
fn id_value(rng: &mut Prng) -> Value {
    rng.pick(&[json!(1), json!(2), json!("a"), json!("b"), json!(null), json!(1.0), json!([1]), json!({}), json!(-7)])
        .clone()
}

fn random_message(rng: &mut Prng) -> Value {
    let mut obj = serde_json::Map::new();
    if rng.chance(80) {
        obj.insert("jsonrpc".into(), json!("2.0"));
    }
    if rng.chance(60) {
        obj.insert("id".into(), id_value(rng));
    }
    if rng.chance(50) {
        let m = rng.pick(&[
            "ping",
            "tools/list",
            "notifications/progress",
            "notifications/tools/list_changed",
            "notifications/message",
            "sampling/createMessage",
            "",
        ]);
        obj.insert("method".into(), json!(m));
    }
    if rng.chance(40) {
        obj.insert(
            "params".into(),
            rng.pick(&[json!({"progressToken": "a"}), json!({"progressToken": 1}), json!([]), json!(null), json!("s")])
                .clone(),
        );
    }
    if rng.chance(40) {
        obj.insert("result".into(), rng.pick(&[json!({}), json!(null), json!([1, 2]), json!("r")]).clone());
    }
    if rng.chance(30) {
        obj.insert(
            "error".into(),
            rng.pick(&[
                json!({"code": -32000, "message": "m"}),
                json!({"code": "x"}),
                json!(null),
                json!(5),
                json!({"message": 3}),
            ])
            .clone(),
        );
    }
    Value::Object(obj)
}

fn random_text(rng: &mut Prng, i: usize) -> String {
    match i % 4 {
        0 => random_message(rng).to_string(),
        1 => {
            let n = rng.below(4);
            Value::Array((0..n).map(|_| random_message(rng)).collect()).to_string()
        }
        2 => (0..rng.below(40)).map(|_| *rng.pick(PIECES)).collect(),
        _ => {
            // A valid message with random bytes flipped or cut.
            let mut b = random_message(rng).to_string().into_bytes();
            for _ in 0..rng.below(4) {
                if !b.is_empty() {
                    let at = rng.below(b.len());
                    b[at] = rng.next_u64() as u8;
                }
            }
            let keep = rng.below(b.len() + 1);
            b.truncate(keep);
            String::from_utf8_lossy(&b).into_owned()
        }
    }
}

/// Decoding never panics; what decodes re-encodes to a message that decodes the same.
#[test]
fn jsonrpc_decoding_never_panics_and_round_trips() {
    let mut rng = Prng::new(seed(0x6a73_6f6e));
    // 25,000 messages in the test command; scripts/fuzz.sh runs 1,000,000 and more in release.
    let n = cases(25_000);
    let (mut ok, mut bad) = (0usize, 0usize);
    for i in 0..n {
        let text = random_text(&mut rng, i);
        let Ok(msgs) = jsonrpc::parse(&text) else {
            bad += 1;
            continue;
        };
        for m in msgs {
            match m {
                Ok(Message::Request { id, method, params }) => {
                    ok += 1;
                    let again = jsonrpc::parse(&jsonrpc::request(&id, &method, params.as_ref())).expect("re-parse");
                    assert_eq!(again.len(), 1);
                    let back = again.into_iter().next().expect("one").expect("valid");
                    let want = Message::Request { id, method, params: params.filter(|p| !p.is_null()) };
                    let back = match back {
                        Message::Request { id, method, params } => {
                            Message::Request { id, method, params: params.filter(|p| !p.is_null()) }
                        }
                        other => other,
                    };
                    assert_eq!(back, want, "request round trip of {text:?}");
                }
                Ok(Message::Response { id, outcome: Ok(result) }) => {
                    ok += 1;
                    let again = jsonrpc::parse(&jsonrpc::response_ok(&id, result.clone())).expect("re-parse");
                    let back = again.into_iter().next().expect("one").expect("valid");
                    assert_eq!(back, Message::Response { id, outcome: Ok(result) }, "response round trip of {text:?}");
                }
                Ok(_) => ok += 1,
                Err(why) => {
                    assert!(!why.is_empty());
                    bad += 1;
                }
            }
        }
    }
    eprintln!("jsonrpc property test: {n} frames, {ok} messages decoded, {bad} refused");
    assert!(ok > 0 && bad > 0, "the generator must produce both valid and invalid messages");
}

/// Random frames through the inbox: no panic; a reply reaches only the id it names, once.
#[test]
fn inbox_routes_random_frames_safely() {
    let mut rng = Prng::new(seed(0x1b0c));
    let n = cases(50_000);
    let inbox = Inbox::new("fuzz", vec!["hunter22".into()]);
    inbox.set_replier(Box::new(|_| {}));
    let mut delivered = 0usize;
    for i in 0..n {
        let (rx1, _) = inbox.register(Id::Num(1), Some("a".into())).expect("open inbox");
        let (rx_a, _) = inbox.register(Id::Str("a".into()), None).expect("open inbox");
        let text = random_text(&mut rng, i);
        inbox.handle_text(&text);
        for (id, rx) in [(Id::Num(1), &rx1), (Id::Str("a".into()), &rx_a)] {
            match rx.try_recv() {
                Ok(reply) => {
                    delivered += 1;
                    assert!(!inbox.is_pending(&id), "a delivered id stays pending");
                    assert!(rx.try_recv().is_err(), "two replies for {id}");
                    if let Err(e) = reply {
                        assert!(!e.to_string().contains("hunter22"), "secret in {e}");
                    }
                }
                Err(_) => inbox.forget(&id),
            }
        }
    }
    eprintln!("inbox property test: {n} frames, {delivered} replies delivered, {} garbage", inbox.garbage_lines());
    assert!(delivered > 0);
}
