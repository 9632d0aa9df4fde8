//! The usage ledger: one record per model request, whatever job made it (docs/usage.md).
//! Records are appended as JSON lines to `<data>/usage/YYYY-MM.jsonl` (0600, one file per
//! UTC month), kept in memory for the reports, and read back at start. A torn last line
//! (a crash mid-write) is skipped and fenced off by a newline before the next append, so it
//! never corrupts a row before or after it. The budgets are checked here too, before each
//! request starts ([`Ledger::admit`]). Shared by the workers (turns, background jobs) that
//! append and the HTTP thread that reads; one mutex, held for an append or a scan.

pub mod limits;
pub(crate) mod report;

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::util::{fsx, sync, time};
pub(crate) use limits::{Budgets, Cap, Price, Prices};

/// Largest month file: past it rows of that month are no longer written (a runaway is
/// stopped by the budgets long before; this only bounds the disk).
pub(crate) const MAX_FILE_BYTES: u64 = 256 * 1024 * 1024;
/// Month files kept: older ones are deleted at start.
pub(crate) const MAX_MONTHS: usize = 25;
/// Records kept in memory for the reports (the newest).
pub(crate) const MAX_RECORDS: usize = 2_000_000;
/// Longest model name or chat id written (longer ones are cut).
const MAX_NAME: usize = 256;
/// The share of a cap at which `budget_warning` is sent.
pub(crate) const WARN_AT: f64 = 0.8;

/// What a request was made for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Job {
    /// `turn`, `consolidate`, `dream`, `title`, `skill_evolution`.
    pub(crate) kind: &'static str,
    pub(crate) chat_id: Option<String>,
}

impl Job {
    pub(crate) fn new(kind: &'static str, chat_id: Option<&str>) -> Job {
        Job { kind, chat_id: chat_id.map(str::to_string) }
    }

    /// Work the owner did not start by sending a message.
    pub(crate) fn background(&self) -> bool {
        self.kind != "turn"
    }
}

/// One model request (the names follow the OpenTelemetry GenAI conventions:
/// `input_tokens` includes the cached ones, `output_tokens` the reasoning ones).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub(crate) struct Record {
    /// Milliseconds since the Unix epoch, when the request started.
    pub(crate) ts: u64,
    pub(crate) chat_id: Option<String>,
    pub(crate) job: String,
    pub(crate) provider: String,
    pub(crate) model: String,
    pub(crate) input_tokens: u64,
    pub(crate) cached_input_tokens: u64,
    pub(crate) cache_write_tokens: u64,
    pub(crate) output_tokens: u64,
    pub(crate) reasoning_tokens: u64,
    pub(crate) duration_ms: u64,
    /// `ok`, `error`, `cancelled` or `budget`.
    pub(crate) outcome: String,
    /// `reported` by the provider or `estimated` by us.
    pub(crate) source: String,
}

impl Record {
    pub(crate) fn tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

struct State {
    /// Records in append order; `base` is the sequence number of the first.
    records: Vec<Record>,
    base: u64,
    /// The open month file and its month (`YYYY-MM`) and size.
    file: Option<(String, File, u64)>,
    /// Token and per-model sums by chat, for the per-chat budgets.
    by_chat: ByChat,
}

pub struct Ledger {
    dir: PathBuf,
    state: Mutex<State>,
    pub(crate) limits: limits::Limits,
}

fn month_of(ts_ms: u64) -> String {
    let t = time::utc((ts_ms / 1000) as i64);
    format!("{:04}-{:02}", t.year, t.month)
}

fn cut(s: &mut String) {
    if s.len() > MAX_NAME {
        s.truncate(crate::util::text::take_bytes(s, MAX_NAME).len());
    }
}

impl Ledger {
    /// Opens `<data_dir>/usage`, reading every kept month file back (torn lines skipped).
    pub fn open(data_dir: &Path) -> Ledger {
        let dir = data_dir.join("usage");
        if let Err(e) = fsx::create_private_dirs(&dir) {
            log::warn!("event=usage.dir_failed error_kind={:?}", e.kind());
        }
        let mut months: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map(|d| {
                d.filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| {
                        p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.len() == 13 && n.ends_with(".jsonl"))
                    })
                    .collect()
            })
            .unwrap_or_default();
        months.sort();
        while months.len() > MAX_MONTHS {
            let old = months.remove(0);
            let _ = std::fs::remove_file(&old);
        }
        let mut records = Vec::new();
        let mut skipped = 0usize;
        for path in &months {
            let Ok(f) = File::open(path) else { continue };
            for line in BufReader::new(f.take(MAX_FILE_BYTES + 4096)).split(b'\n') {
                let Ok(line) = line else { break };
                if line.is_empty() {
                    continue;
                }
                match serde_json::from_slice::<Record>(&line) {
                    Ok(r) => records.push(r),
                    Err(_) => skipped += 1,
                }
            }
        }
        if skipped > 0 {
            log::warn!("event=usage.lines_skipped count={skipped}");
        }
        let base = records.len().saturating_sub(MAX_RECORDS);
        records.drain(..base);
        let mut by_chat = HashMap::new();
        for r in &records {
            add_chat(&mut by_chat, r);
        }
        Ledger {
            limits: limits::Limits::load(data_dir),
            dir,
            state: Mutex::new(State { records, base: base as u64, file: None, by_chat }),
        }
    }

    /// Appends one record (one `write` of one line; a failure is logged, the request's
    /// result stands).
    pub(crate) fn append(&self, mut r: Record) {
        cut(&mut r.model);
        if let Some(c) = &mut r.chat_id {
            cut(c);
        }
        let mut line = serde_json::to_vec(&r).expect("strings and numbers always serialise");
        line.push(b'\n');
        let month = month_of(r.ts);
        let mut st = sync::lock(&self.state);
        if st.file.as_ref().is_none_or(|(m, _, _)| *m != month) {
            st.file = self.open_month(&month);
        }
        match &mut st.file {
            Some((_, f, size)) if *size + line.len() as u64 <= MAX_FILE_BYTES => match f.write_all(&line) {
                Ok(()) => *size += line.len() as u64,
                Err(e) => log::warn!("event=usage.write_failed error_kind={:?}", e.kind()),
            },
            Some(_) => log::warn!("event=usage.month_full month={month}"),
            None => {}
        }
        add_chat(&mut st.by_chat, &r);
        st.records.push(r);
        if st.records.len() > MAX_RECORDS {
            let n = st.records.len() - MAX_RECORDS;
            st.records.drain(..n);
            st.base += n as u64;
        }
    }

    /// The month file opened for appending; a torn last line gets its newline first.
    fn open_month(&self, month: &str) -> Option<(String, File, u64)> {
        let path = self.dir.join(format!("{month}.jsonl"));
        let opened = fsx::private_options().create(true).read(true).append(true).open(&path).and_then(|mut f| {
            let size = f.metadata()?.len();
            if size > 0 {
                let mut last = [0u8];
                f.seek(SeekFrom::Start(size - 1))?;
                f.read_exact(&mut last)?;
                if last[0] != b'\n' {
                    f.write_all(b"\n")?;
                    return Ok((f, size + 1));
                }
            }
            Ok((f, size))
        });
        match opened {
            Ok((f, size)) => Some((month.to_string(), f, size)),
            Err(e) => {
                log::warn!("event=usage.open_failed error_kind={:?}", e.kind());
                None
            }
        }
    }

    /// Runs `f` over the records in memory (oldest first) with the sequence number of the
    /// first.
    pub(crate) fn with_records<T>(&self, f: impl FnOnce(&[Record], u64) -> T) -> T {
        let st = sync::lock(&self.state);
        f(&st.records, st.base)
    }

    /// The spend the caps that apply to `job` count so far: `(budget name, tokens, cost,
    /// cap)` for each cap set.
    pub(crate) fn spend(&self, job: &Job) -> Vec<limits::Spend> {
        let budgets = self.limits.budgets();
        if !budgets.chat.is_set() && !budgets.day.is_set() && !budgets.background_day.is_set() {
            return Vec::new();
        }
        let prices = self.limits.prices();
        let now = time::now_millis() as u64;
        let day_start = limits::day_start(now);
        let st = sync::lock(&self.state);
        let mut out = Vec::new();
        if let (Some(chat), true) = (&job.chat_id, budgets.chat.is_set()) {
            let (mut tokens, mut cost) = (0u64, 0f64);
            for ((provider, model), (input, cached, output)) in st.by_chat.get(chat).into_iter().flatten() {
                tokens += input + output;
                cost += prices.cost(provider, model, *input, *cached, *output).unwrap_or(0.0);
            }
            out.push(limits::Spend { budget: "chat", tokens, cost, cap: budgets.chat });
        }
        let day = budgets.day.is_set();
        let background = job.background() && budgets.background_day.is_set();
        if day || background {
            let (mut all, mut bg) = ((0u64, 0f64), (0u64, 0f64));
            for r in st.records.iter().rev().take_while(|r| r.ts >= day_start) {
                let cost = prices.cost(&r.provider, &r.model, r.input_tokens, r.cached_input_tokens, r.output_tokens);
                let cost = cost.unwrap_or(0.0);
                all = (all.0 + r.tokens(), all.1 + cost);
                if r.job != "turn" {
                    bg = (bg.0 + r.tokens(), bg.1 + cost);
                }
            }
            if day {
                out.push(limits::Spend { budget: "day", tokens: all.0, cost: all.1, cap: budgets.day });
            }
            if background {
                out.push(limits::Spend {
                    budget: "background_day",
                    tokens: bg.0,
                    cost: bg.1,
                    cap: budgets.background_day,
                });
            }
        }
        out
    }

    /// `Err(spend)` of the budget reached when a cap that applies to `job` is: no request
    /// may start.
    pub(crate) fn admit(&self, job: &Job) -> Result<(), limits::Spend> {
        match self.spend(job).into_iter().find(|s| s.share() >= 1.0) {
            Some(s) => Err(s),
            None => Ok(()),
        }
    }
}

/// Input, cached input and output tokens by chat, then by (provider, model).
type ByChat = HashMap<String, HashMap<(String, String), (u64, u64, u64)>>;

fn add_chat(by_chat: &mut ByChat, r: &Record) {
    if let Some(chat) = &r.chat_id {
        let e = by_chat.entry(chat.clone()).or_default().entry((r.provider.clone(), r.model.clone())).or_default();
        e.0 += r.input_tokens;
        e.1 += r.cached_input_tokens;
        e.2 += r.output_tokens;
    }
}

/// The ledger a client writes to, if any (unit setups have none).
pub(crate) type Shared = Option<Arc<Ledger>>;
