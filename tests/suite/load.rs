//! Load proof at test size (the full-size figures are `cargo bench --bench load`):
//! 200 concurrent WebSocket clients, each on its own chat, do 3 turns against the zero-delay
//! fake with zero errors, and the server's thread count and RSS return near their baseline
//! once they leave; a client that stops reading never holds up the others and is dropped.
//! Client threads are spawned here; the fake LLM has its own.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crate::common::ws::Handshake;
use crate::common::*;

const CLIENTS: usize = 200;
const TURNS: usize = 3;

/// Threads of a process (`/proc/<pid>/task` entries).
fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map(|d| d.count()).unwrap_or(0)
}

/// The server's WebSocket connection threads (`ws-client-<id>`) still alive. The last one to
/// leave hands the heap's free pages back before it exits, so none left means that is done.
fn client_threads(pid: u32) -> usize {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return 0 };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.starts_with("ws-client-"))
        .count()
}

/// VmRSS in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// One client: connects (counted in `connected`), waits for the others, runs its turns;
/// returns errors seen.
fn client(port: u16, connected: Arc<AtomicUsize>, barrier: Arc<Barrier>) -> Result<usize, String> {
    let handshake = WsClient::handshake(port, None);
    connected.fetch_add(1, Ordering::SeqCst);
    let mut c = match handshake {
        Handshake::Accepted(c) => c,
        Handshake::Refused(code) => {
            barrier.wait();
            return Err(format!("refused with {code}"));
        }
    };
    let chat = c.chat_id.clone();
    barrier.wait();
    let mut done = 0;
    for i in 0..TURNS {
        c.message(&chat, &format!("load turn {i}"), "openai_compatible");
        loop {
            match c.recv_or_closed(Duration::from_secs(120))? {
                Some(v) if v["event"] == "done" && v["chat_id"] == chat.as_str() => {
                    done += 1;
                    break;
                }
                Some(v) if v["event"] == "error" => return Err(format!("turn {i}: {v}")),
                Some(_) => {}
                None => return Err(format!("turn {i}: no done within 120 s")),
            }
        }
    }
    c.drop_socket();
    Ok(done)
}

#[derive(Debug)]
#[allow(dead_code)] // fields are printed
struct Round {
    wall: Duration,
    peak_threads: usize,
    threads_after: usize,
    rss_loaded: u64,
    rss_after: u64,
}

/// [`CLIENTS`] concurrent clients x [`TURNS`] turns; asserts zero errors and that the thread
/// count returns to `threads0`.
fn load_round(server: &TestServer, fake: &FakeLlm, threads0: usize) -> Round {
    let barrier = Arc::new(Barrier::new(CLIENTS + 1));
    let connected = Arc::new(AtomicUsize::new(0));
    let port = server.ws_port;
    let handles: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (b, n) = (barrier.clone(), connected.clone());
            std::thread::Builder::new().stack_size(256 * 1024).spawn(move || client(port, n, b)).expect("spawn client")
        })
        .collect();
    // Counted while every client is connected and none has sent anything: once the barrier
    // opens, fast turns can end connections before this thread runs again.
    wait_for("every client connected", Duration::from_secs(60), || {
        (connected.load(Ordering::SeqCst) == CLIENTS).then_some(())
    });
    let peak_threads = threads(server.pid);
    barrier.wait();
    let started = Instant::now();
    let mut errors = Vec::new();
    let mut turns = 0;
    for h in handles {
        match h.join() {
            Ok(Ok(n)) => turns += n,
            Ok(Err(e)) => errors.push(e),
            Err(_) => errors.push("client thread panicked".into()),
        }
    }
    let wall = started.elapsed();
    let rss_loaded = rss_kib(server.pid);
    assert_eq!(errors, Vec::<String>::new(), "clients saw errors");
    assert_eq!(turns, CLIENTS * TURNS);
    assert!(fake.failures().is_empty(), "{:?}", fake.failures());
    assert!(peak_threads > threads0 + CLIENTS / 2, "clients were not concurrent: {peak_threads} threads");
    let threads_after = wait_for("threads back to baseline", Duration::from_secs(30), || {
        let n = threads(server.pid);
        (n <= threads0 + 2).then_some(n)
    });
    wait_for("every connection thread gone", Duration::from_secs(30), || {
        (client_threads(server.pid) == 0).then_some(())
    });
    Round { wall, peak_threads, threads_after, rss_loaded, rss_after: rss_kib(server.pid) }
}

#[test]
fn two_hundred_clients_three_turns_each_then_back_to_baseline() {
    let fake = FakeLlm::start();
    fake.set_fallback(Reply::text(&["Hello", ", load", " world"]));
    let server = TestServer::with_llm(&fake);
    // Warm up (first turn loads prompts, pools a provider connection), then take the baseline.
    let mut warm = WsClient::connect(&server);
    let chat = warm.chat_id.clone();
    warm.message(&chat, "warm up", "openai_compatible");
    assert_eq!(warm.turn_events(&chat).last().expect("events")["event"], "done");
    warm.drop_socket();
    wait_for("the warm-up connection's thread gone", WAIT, || (client_threads(server.pid) == 0).then_some(()));
    let (threads0, rss0) = (threads(server.pid), rss_kib(server.pid));

    // Round 1 grows the allocator's pools to their working size; round 2 must not grow them
    // further, and after each round every connection and turn thread is gone.
    let first = load_round(&server, &fake, threads0);
    let second = load_round(&server, &fake, threads0);
    eprintln!(
        "load: {CLIENTS} clients x {TURNS} turns; baseline threads {threads0}, RSS {rss0} KiB; \
         round 1 {first:?}; round 2 {second:?}"
    );
    // The server trims its heap when the last client leaves; what stays is live state (chat
    // caches, replay rings) and glibc's small cache of thread stacks (measured: +15 MiB).
    assert!(
        first.rss_after <= rss0 + 24 * 1024,
        "RSS stayed at {} KiB after the clients left (baseline {rss0} KiB)",
        first.rss_after
    );
    assert!(
        second.rss_after <= first.rss_after + 8 * 1024,
        "RSS kept growing: {} KiB after round 1, {} KiB after round 2",
        first.rss_after,
        second.rss_after
    );
    // Every chat was stored whole.
    let sessions = server.get("/api/sessions").json();
    assert_eq!(sessions["sessions"].as_array().map(Vec::len), Some(2 * CLIENTS + 1));
}

#[test]
fn a_client_that_stops_reading_blocks_nobody_and_is_dropped() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    // Huge streamed answers for the client that never reads: far more events than its
    // outbound queue holds plus what the socket buffers take. Six turns of 5,000 deltas
    // (an answer is capped at 1 MiB), queued back to back; the others start once the last
    // of them is under way, so every flood reply goes to the stuck chat.
    const FLOODS: usize = 6;
    let piece = "y".repeat(200);
    let pieces: Vec<&str> = (0..5_000).map(|_| piece.as_str()).collect();
    let mut stuck = WsClient::connect(&server);
    let stuck_chat = stuck.chat_id.clone();
    for _ in 0..FLOODS {
        fake.push(Reply::text(&pieces));
        stuck.message(&stuck_chat, "flood me", "openai_compatible");
    }
    fake.wait_chat_requests(FLOODS, Duration::from_secs(60));
    fake.set_fallback(Reply::text(&["quick"]));

    // Meanwhile others chat normally, each turn finishing promptly.
    let mut others: Vec<WsClient> = (0..10).map(|_| WsClient::connect(&server)).collect();
    for round in 0..3 {
        for c in others.iter_mut() {
            let chat = c.chat_id.clone();
            let t = Instant::now();
            c.message(&chat, &format!("round {round}"), "openai_compatible");
            let ev = c.turn_events(&chat);
            assert_eq!(ev.last().expect("events")["event"], "done", "{ev:?}");
            assert!(t.elapsed() < Duration::from_secs(5), "a turn took {:?} beside a stuck client", t.elapsed());
        }
    }
    // The stuck client is dropped by the server (never read from on our side).
    wait_for("the slow client to be dropped", Duration::from_secs(60), || {
        server.log_text().contains("event=ws.client.dropped reason=slow").then_some(())
    });
    // The flood turns themselves completed and were stored whole despite their reader vanishing.
    let history = server.chat_dir(&stuck_chat).join("history.jsonl");
    wait_for("the flooded turns to be stored", Duration::from_secs(60), || {
        let text = std::fs::read_to_string(&history).ok()?;
        (text.ends_with('\n') && text.lines().count() == 2 * FLOODS).then_some(())
    });
    let stored = history_records(&server.home, &stuck_chat);
    for answer in stored.iter().skip(1).step_by(2) {
        assert_eq!(answer["content"].as_str().map(str::len), Some(200 * 5_000));
    }
    others[0].ping_sync();
    drop(stuck);
}

/// A client that falls behind and then catches up: the answers fill its socket, the rest is
/// queued for the connection's writer thread (started then), and the client still receives
/// every event exactly once, in `seq` order, each turn's deltas adding up to its answer. Six
/// turns of 960 KiB (an answer is capped at 1 MiB): more than loopback socket buffers take at
/// once, less than they and the 4 MiB queue bound do together.
#[test]
fn a_client_that_falls_behind_gets_every_event_in_order() {
    let fake = FakeLlm::start();
    let server = TestServer::with_llm(&fake);
    const TURNS: usize = 6;
    let answers: Vec<Vec<String>> =
        (0..TURNS).map(|t| (0..30).map(|i| format!("{t}{i:03}{}", "z".repeat(32 * 1024 - 4))).collect()).collect();
    let mut slow = WsClient::connect(&server);
    let chat = slow.chat_id.clone();
    for pieces in &answers {
        let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
        fake.push(Reply::text(&refs));
        slow.message(&chat, "a long answer", "openai_compatible");
    }
    // Not reading while the turns stream.
    let history = server.chat_dir(&chat).join("history.jsonl");
    wait_for("the turns to be stored", Duration::from_secs(60), || {
        let text = std::fs::read_to_string(&history).ok()?;
        (text.lines().count() == 2 * TURNS).then_some(())
    });
    let mut events = Vec::new();
    for pieces in &answers {
        let turn = slow.turn_events(&chat);
        let text: String = turn.iter().filter(|v| v["event"] == "delta").filter_map(|v| v["text"].as_str()).collect();
        assert!(
            text == pieces.concat(),
            "the deltas do not add up to the answer ({} of {} bytes)",
            text.len(),
            pieces.concat().len()
        );
        let tail: Vec<&str> = turn.iter().rev().take(2).filter_map(|v| v["event"].as_str()).collect();
        assert_eq!(tail, ["done", "stream_end"]);
        events.extend(turn);
    }
    let seqs: Vec<u64> = events.iter().filter_map(|v| v["seq"].as_u64()).collect();
    assert_eq!(seqs.len(), events.len(), "every chat event has a seq");
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "seqs not consecutive: {:?}", &seqs[..seqs.len().min(20)]);
    assert!(server.log_text().contains("event=ws.writer.started"), "the socket never filled: no writer started");
    slow.ping_sync();
}
