//! `cashcode eval locomo FILE` (docs/search.md §7): the recall benchmark. Loads each conversation
//! of a LoCoMo-format file into a scratch data dir as chats through the real store (one chat per
//! session, one record per turn, "speaker: text", the session's date as timestamp), asks every
//! question through [`Search::search`], and prints any@1/5/10 and LoCoMo's recall_acc@5 by
//! category and overall, within each conversation (a data dir each) and pooled (all in one).
//! Runs on the main thread; no server, no model.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use super::{Params, Request, Search};
use crate::store::chats::{ChatStore, Record};

pub const USAGE: &str = "usage: cashcode eval locomo FILE [--conversations 0,2,4] [--k1 N] [--b N] [--neighbour N]\n";

/// One question: its text, category and evidence turns.
struct Question {
    text: String,
    category: u64,
    evidence: Vec<String>,
}

/// One conversation: its sessions (date, turns as (dia_id, "speaker: text")) and questions.
struct Conversation {
    name: String,
    sessions: Vec<(String, Vec<(String, String)>)>,
    questions: Vec<Question>,
}

/// Counts for one group of questions.
#[derive(Default, Clone, Copy)]
struct Tally {
    n: u32,
    any1: u32,
    any5: u32,
    any10: u32,
    recall5: f64,
}

impl Tally {
    fn add(&mut self, o: Tally) {
        self.n += o.n;
        self.any1 += o.any1;
        self.any5 += o.any5;
        self.any10 += o.any10;
        self.recall5 += o.recall5;
    }

    fn row(&self, label: &str) -> String {
        let pct = |x: f64| if self.n == 0 { 0.0 } else { 100.0 * x / f64::from(self.n) };
        format!(
            "{label:<22} {:>5} {:>7.1} {:>7.1} {:>7.1} {:>10.1}\n",
            self.n,
            pct(f64::from(self.any1)),
            pct(f64::from(self.any5)),
            pct(f64::from(self.any10)),
            pct(self.recall5)
        )
    }
}

/// Runs the command; `Ok` is the report to print.
pub fn run(args: &[String]) -> Result<String, String> {
    let mut it = args.iter();
    if it.next().map(String::as_str) != Some("locomo") {
        return Err(USAGE.into());
    }
    let mut file = None;
    let mut only: Option<Vec<usize>> = None;
    let mut params = Params::default();
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().cloned().ok_or_else(|| format!("{name} needs a value\n{USAGE}"));
        let num = |v: String| v.parse::<f32>().map_err(|_| format!("not a number: {v}\n{USAGE}"));
        match a.as_str() {
            "--conversations" => {
                let v = value(a)?;
                only = Some(
                    v.split(',')
                        .map(|s| s.trim().parse().map_err(|_| format!("bad index: {s}")))
                        .collect::<Result<_, _>>()?,
                );
            }
            "--k1" => params.k1 = num(value(a)?)?,
            "--b" => params.b = num(value(a)?)?,
            "--neighbour" => params.neighbour = num(value(a)?)?,
            f if f.starts_with("--") => return Err(format!("unknown option {f}\n{USAGE}")),
            f if file.is_none() => file = Some(PathBuf::from(f)),
            f => return Err(format!("unexpected argument {f}\n{USAGE}")),
        }
    }
    let file = file.ok_or_else(|| USAGE.to_string())?;
    let bytes = std::fs::read(&file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| format!("{} is not JSON: {e}", file.display()))?;
    let mut convs = parse(&value)?;
    if let Some(only) = &only {
        let all = std::mem::take(&mut convs);
        let n = all.len();
        if let Some(bad) = only.iter().find(|&&i| i >= n) {
            return Err(format!("no conversation {bad} (the file has {n})"));
        }
        convs = all.into_iter().enumerate().filter(|(i, _)| only.contains(i)).map(|(_, c)| c).collect();
    }
    let scratch = std::env::temp_dir().join(format!("cashcode-eval-{}", crate::util::rand::hex(8)));
    let result = evaluate(&convs, &scratch, params);
    let _ = crate::util::fsx::remove_tree(&scratch);
    result
}

fn evaluate(convs: &[Conversation], scratch: &Path, params: Params) -> Result<String, String> {
    let mut out = String::new();
    let _ = writeln!(out, "LoCoMo recall (k1 {} b {} neighbour {})", params.k1, params.b, params.neighbour);
    let header = format!("{:<22} {:>5} {:>7} {:>7} {:>7} {:>10}\n", "", "n", "any@1", "any@5", "any@10", "recall@5");
    // Within each conversation.
    let mut within: BTreeMap<u64, Tally> = BTreeMap::new();
    out.push_str("\nwithin each conversation\n");
    out.push_str(&header);
    for (i, c) in convs.iter().enumerate() {
        let dir = scratch.join(format!("conv{i}"));
        let (search, ids) = load(&dir, std::slice::from_ref(c), params)?;
        let t = ask(&search, c, &ids[0]);
        let mut total = Tally::default();
        for (cat, v) in t {
            within.entry(cat).or_default().add(v);
            total.add(v);
        }
        out.push_str(&total.row(&c.name));
    }
    push_table(&mut out, &within);
    // Pooled.
    let dir = scratch.join("pooled");
    let (search, ids) = load(&dir, convs, params)?;
    let mut pooled: BTreeMap<u64, Tally> = BTreeMap::new();
    for (c, ids) in convs.iter().zip(&ids) {
        for (cat, v) in ask(&search, c, ids) {
            pooled.entry(cat).or_default().add(v);
        }
    }
    out.push_str("\npooled (all conversations in one data dir)\n");
    out.push_str(&header);
    push_table(&mut out, &pooled);
    Ok(out)
}

fn push_table(out: &mut String, by_cat: &BTreeMap<u64, Tally>) {
    let mut all = Tally::default();
    for (cat, t) in by_cat {
        out.push_str(&t.row(&format!("  category {cat}")));
        all.add(*t);
    }
    out.push_str(&all.row("  overall"));
}

/// (chat id, cursor) -> dia_id of one conversation's turns.
type Ids = HashMap<(String, u64), String>;

/// A fresh data dir holding `convs` as chats, indexed.
fn load(dir: &Path, convs: &[Conversation], params: Params) -> Result<(Arc<Search>, Vec<Ids>), String> {
    crate::util::fsx::create_private_dirs(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let store = Arc::new(ChatStore::new(dir));
    let search = Search::new(Arc::clone(&store), params);
    search.open_now();
    let mut all = Vec::new();
    for (ci, c) in convs.iter().enumerate() {
        let mut ids = Ids::new();
        for (si, (date, turns)) in c.sessions.iter().enumerate() {
            let chat = format!("c{ci}-s{}", si + 1);
            let mut records: Vec<Record> = turns
                .iter()
                .enumerate()
                .map(|(ti, (_, text))| Record::new(if ti % 2 == 0 { "user" } else { "assistant" }, text.clone()))
                .collect();
            store.append_stamped(&chat, &mut records, date).map_err(|e| format!("cannot write {chat}: {e}"))?;
            for (r, (dia, _)) in records.iter().zip(turns) {
                ids.insert((chat.clone(), r.cursor), dia.clone());
            }
            search.drain();
        }
        all.push(ids);
    }
    search.drain();
    Ok((search, all))
}

/// Asks every question of `c` with evidence; tallies by category.
fn ask(search: &Search, c: &Conversation, ids: &Ids) -> BTreeMap<u64, Tally> {
    let mut out: BTreeMap<u64, Tally> = BTreeMap::new();
    for q in &c.questions {
        let res = search.search(&Request { q: q.text.clone(), limit: 10, ..Request::default() });
        let found: Vec<Option<&String>> = res.hits.iter().map(|h| ids.get(&(h.chat_id.clone(), h.cursor))).collect();
        let hit_at = |k: usize| found.iter().take(k).flatten().any(|d| q.evidence.contains(d));
        let in5 = q.evidence.iter().filter(|e| found.iter().take(5).flatten().any(|d| d == e)).count();
        let t = out.entry(q.category).or_default();
        t.n += 1;
        t.any1 += u32::from(hit_at(1));
        t.any5 += u32::from(hit_at(5));
        t.any10 += u32::from(hit_at(10));
        t.recall5 += in5 as f64 / q.evidence.len() as f64;
    }
    out
}

/// The conversations of a LoCoMo file: a list of samples with `conversation` (`speaker_a`,
/// `session_N`, `session_N_date_time`) and `qa`.
fn parse(v: &Value) -> Result<Vec<Conversation>, String> {
    let samples = v.as_array().ok_or("the file must hold a JSON list of conversations")?;
    let mut out = Vec::new();
    for (i, s) in samples.iter().enumerate() {
        let conv = s["conversation"].as_object().ok_or(format!("conversation {i} has no `conversation` object"))?;
        let mut numbers: Vec<u32> = conv
            .iter()
            .filter(|(_, v)| v.is_array())
            .filter_map(|(k, _)| k.strip_prefix("session_")?.parse().ok())
            .collect();
        numbers.sort_unstable();
        let mut sessions = Vec::new();
        for n in numbers {
            let raw_date = conv.get(&format!("session_{n}_date_time")).and_then(Value::as_str).unwrap_or("");
            let date = parse_date(raw_date)
                .ok_or(format!("conversation {i}: session {n} has no readable date ({raw_date:?})"))?;
            let mut turns = Vec::new();
            for t in conv[&format!("session_{n}")].as_array().into_iter().flatten() {
                let (Some(speaker), Some(dia), Some(text)) =
                    (t["speaker"].as_str(), t["dia_id"].as_str(), t["text"].as_str())
                else {
                    return Err(format!("conversation {i}: a turn of session {n} lacks speaker, dia_id or text"));
                };
                turns.push((dia.trim().to_string(), format!("{speaker}: {text}")));
            }
            sessions.push((date, turns));
        }
        let mut questions = Vec::new();
        for q in s["qa"].as_array().into_iter().flatten() {
            let evidence: Vec<String> = q["evidence"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(|e| e.trim().to_string())
                .collect();
            let (Some(text), false) = (q["question"].as_str(), evidence.is_empty()) else { continue };
            questions.push(Question {
                text: text.to_string(),
                category: q["category"].as_u64().unwrap_or(0),
                evidence,
            });
        }
        let name = s["sample_id"].as_str().map_or_else(|| format!("conversation {i}"), str::to_string);
        out.push(Conversation { name, sessions, questions });
    }
    Ok(out)
}

/// LoCoMo's "1:56 pm on 8 May, 2023" as history's "2023-05-08 13:56".
fn parse_date(s: &str) -> Option<String> {
    let (time, date) = s.split_once(" on ")?;
    let (hm, ampm) = time.trim().split_once(' ')?;
    let (h, m) = hm.split_once(':')?;
    let (mut h, m): (u32, u32) = (h.parse().ok()?, m.parse().ok()?);
    match ampm.to_ascii_lowercase().as_str() {
        "pm" if h < 12 => h += 12,
        "am" if h == 12 => h = 0,
        "am" | "pm" => {}
        _ => return None,
    }
    let mut parts = date.split([' ', ',']).filter(|p| !p.is_empty());
    let day: u32 = parts.next()?.parse().ok()?;
    let month = parts.next()?.to_ascii_lowercase();
    let year: u32 = parts.next()?.parse().ok()?;
    const MONTHS: [&str; 12] = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];
    let mi = MONTHS.iter().position(|p| month.starts_with(p))? as u32 + 1;
    (h < 24 && m < 60 && (1..=31).contains(&day)).then(|| format!("{year:04}-{mi:02}-{day:02} {h:02}:{m:02}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locomo_dates() {
        assert_eq!(parse_date("1:56 pm on 8 May, 2023").as_deref(), Some("2023-05-08 13:56"));
        assert_eq!(parse_date("12:09 am on 13 September, 2023").as_deref(), Some("2023-09-13 00:09"));
        assert_eq!(parse_date("12:30 pm on 1 January, 2024").as_deref(), Some("2024-01-01 12:30"));
        assert_eq!(parse_date("yesterday"), None);
    }

    /// A tiny synthetic file in LoCoMo's format (never the real data set): the report counts
    /// every question, and the evidence found.
    #[test]
    fn a_synthetic_file_is_scored() {
        let file = serde_json::json!([{
            "sample_id": "synthetic-1",
            "conversation": {
                "speaker_a": "Ann", "speaker_b": "Bo",
                "session_1_date_time": "10:00 am on 2 March, 2024",
                "session_1": [
                    {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a grey kitten named Pixel."},
                    {"speaker": "Bo", "dia_id": "D1:2", "text": "Lovely! I started learning the cello."}
                ],
                "session_2_date_time": "6:15 pm on 9 March, 2024",
                "session_2": [
                    {"speaker": "Ann", "dia_id": "D2:1", "text": "We hiked up Ben Nevis on Saturday."},
                    {"speaker": "Bo", "dia_id": "D2:2", "text": "我们去了北京看长城。"}
                ]
            },
            "qa": [
                {"question": "What is the name of Ann's kitten?", "evidence": ["D1:1"], "category": 4},
                {"question": "Which instrument is Bo learning?", "evidence": ["D1:2"], "category": 4},
                {"question": "Which mountain did Ann hike?", "evidence": ["D2:1"], "category": 2},
                {"question": "长城在哪里?", "evidence": ["D2:2"], "category": 1},
                {"question": "An adversarial one with no evidence", "evidence": [], "category": 5}
            ]
        }]);
        let path = std::env::temp_dir().join(format!("cc-locomo-{}.json", crate::util::rand::hex(6)));
        std::fs::write(&path, file.to_string()).unwrap();
        let out = run(&["locomo".into(), path.display().to_string()]).unwrap();
        std::fs::remove_file(&path).unwrap();
        let overall: Vec<&str> = out.lines().filter(|l| l.trim_start().starts_with("overall")).collect();
        assert_eq!(overall.len(), 2, "{out}");
        for l in overall {
            let cols: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(cols[1], "4", "{out}");
            assert_eq!(cols[4], "100.0", "any@10: {out}");
        }
        assert!(out.contains("synthetic-1"), "{out}");
        assert!(run(&["locomo".into()]).is_err());
        assert!(run(&["other".into()]).is_err());
    }
}
