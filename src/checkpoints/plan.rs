//! The plan of a rewind (or of its undo), a pure function: from the chosen turn records and a
//! lookup of what is on disk now ([`Disk`]), which paths go back to which state, which are left
//! alone and why. No file is read or written here; the caller ([`super::rewind`]) answers the
//! lookups, adds the preview's diffs and applies the steps. Runs on the caller's thread.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::state::{Stat, State, FILE_CAP};
use super::{Entry, TurnRecord, CONCURRENT_EXEC, INTERLEAVED};

/// Why a path is left as it is: a stable code the client translates, and the English text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// What is there now is not what this chat left.
    ChangedOutside,
    /// Someone else changed it between two of this chat's changes.
    Interleaved,
    /// It changed while a command of another chat was running.
    ConcurrentExec,
    /// It changed after a rewind the server's stop interrupted.
    ChangedDuringRecovery,
    /// Its directory is reached through a symbolic link now.
    ThroughLink,
    /// Older turns of this chat were evicted and forgotten.
    Forgotten,
    /// Its copy was evicted to keep the store under its byte budget.
    Evicted,
    /// Larger than the copy cap.
    TooLarge,
    /// No copy was kept (a hard-linked file, or the store was full).
    NoCopy,
    /// Not a file, directory or symbolic link.
    NotAFile,
}

impl Why {
    pub fn code(self) -> &'static str {
        match self {
            Why::ChangedOutside => "changed_outside",
            Why::Interleaved => "interleaved",
            Why::ConcurrentExec => "concurrent_exec",
            Why::ChangedDuringRecovery => "changed_during_recovery",
            Why::ThroughLink => "through_link",
            Why::Forgotten => "forgotten",
            Why::Evicted => "evicted",
            Why::TooLarge => "too_large",
            Why::NoCopy => "no_copy",
            Why::NotAFile => "not_a_file",
        }
    }

    pub fn text(self) -> &'static str {
        match self {
            Why::ChangedOutside => "changed outside this chat since this chat changed it",
            Why::Interleaved => INTERLEAVED,
            Why::ConcurrentExec => CONCURRENT_EXEC,
            Why::ChangedDuringRecovery => CHANGED_DURING_RECOVERY,
            Why::ThroughLink => "its directory is now reached through a symbolic link; left alone",
            Why::Forgotten => {
                "older changes of this chat were evicted and forgotten to keep the checkpoint store \
                 under CASHCODE_CHECKPOINT_MAX_BYTES"
            }
            Why::Evicted => "its copy was evicted to keep the checkpoint store under CASHCODE_CHECKPOINT_MAX_BYTES",
            Why::TooLarge => "larger than the 8 MiB copy cap: no copy was kept",
            Why::NoCopy => "no copy was kept (a hard-linked file, or the checkpoint store was full)",
            Why::NotAFile => "not a file, directory or symbolic link",
        }
    }

    /// The reason an entry's stored conflict text stands for (texts of older versions read as
    /// changed outside).
    pub(crate) fn of_conflict(text: &str) -> Why {
        [Why::Interleaved, Why::ConcurrentExec, Why::ChangedDuringRecovery]
            .into_iter()
            .find(|w| w.text() == text)
            .unwrap_or(Why::ChangedOutside)
    }
}

/// The reason the preview gives for a path recovery left alone.
pub(crate) const CHANGED_DURING_RECOVERY: &str =
    "changed after a rewind was interrupted (the server stopped mid-way); left as it is";

/// Which conflicting paths are put back anyway.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Force {
    #[default]
    None,
    All,
    Paths(BTreeSet<String>),
}

impl Force {
    fn covers(&self, path: &str) -> bool {
        match self {
            Force::None => false,
            Force::All => true,
            Force::Paths(p) => p.contains(path),
        }
    }
}

/// One path put back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Step {
    pub(crate) path: String,
    pub(crate) action: &'static str,
    /// The state it ends in.
    pub(crate) target: State,
    /// The state it is in now (a file's with its content hash when it could be read).
    pub(crate) from: State,
    /// It was a conflict, put back because forced.
    pub(crate) forced: Option<Why>,
}

/// One journalled step as the journal stores it (see `rewind::recover`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Op {
    pub(crate) path: String,
    pub(crate) target: State,
    /// `None` in a journal of an older version: recovery then leaves the path alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) from: Option<State>,
}

/// The plan: the steps, the paths left alone, and the chosen records with the entries of the
/// paths put back (or already back) removed.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    pub(crate) steps: Vec<Step>,
    pub(crate) conflicts: Vec<(String, Why)>,
    pub(crate) not_rewindable: Vec<(String, Why)>,
    pub(crate) evicted: bool,
    pub(crate) records: Vec<TurnRecord>,
}

/// What the plan asks of the disk.
pub(crate) trait Disk {
    /// The path's metadata now (`None`: nothing there).
    fn stat(&self, rel: &str) -> Option<Stat>;
    /// The SHA-256 of the file's content now (`None`: unreadable or over the copy cap).
    fn hash(&self, rel: &str) -> Option<String>;
    /// An existing ancestor directory of the path is reached through a symbolic link.
    fn through_link(&self, rel: &str) -> bool;
}

/// Whether `state` is what `current` shows, reading the content only when the metadata moved.
fn matches(state: &State, current: Option<&Stat>, rel: &str, disk: &dyn Disk) -> bool {
    state.matches_by(current, || disk.hash(rel))
}

/// Plans putting every path the `records` changed back to its state before the first of them.
/// `forgotten`: older turns were dropped, so no earlier state is known for certain.
pub(crate) fn plan(records: Vec<TurnRecord>, forgotten: bool, force: &Force, disk: &dyn Disk) -> Plan {
    let mut chains: BTreeMap<&str, Vec<&Entry>> = BTreeMap::new();
    for r in &records {
        for (p, e) in &r.entries {
            chains.entry(p.as_str()).or_default().push(e);
        }
    }
    let mut plan = Plan { evicted: forgotten || records.iter().any(|r| r.evicted), ..Plan::default() };
    let mut settled: BTreeSet<String> = BTreeSet::new();
    let evicted_paths: BTreeSet<&str> =
        records.iter().filter(|r| r.evicted).flat_map(|r| r.entries.keys().map(String::as_str)).collect();
    for (p, entries) in &chains {
        let (target, expected) = (&entries[0].before, &entries[entries.len() - 1].after);
        let skip = match target {
            _ if forgotten => Some(Why::Forgotten),
            _ if evicted_paths.contains(p) => Some(Why::Evicted),
            State::File { blob: None, size, .. } if *size > FILE_CAP => Some(Why::TooLarge),
            State::File { blob: None, .. } => Some(Why::NoCopy),
            State::Other => Some(Why::NotAFile),
            _ => None,
        };
        if let Some(why) = skip {
            plan.not_rewindable.push((p.to_string(), why));
            continue;
        }
        // A path whose directory is reached through a symlink now is never read (no diff of a
        // file outside) nor written, forced or not.
        if disk.through_link(p) {
            plan.conflicts.push((p.to_string(), Why::ThroughLink));
            continue;
        }
        let current = disk.stat(p);
        if matches(target, current.as_ref(), p, disk) {
            settled.insert(p.to_string());
            continue;
        }
        let mut conflict = entries.iter().find_map(|e| e.conflict.as_deref().map(Why::of_conflict));
        if conflict.is_none() && entries.windows(2).any(|w| !w[0].after.same(&w[1].before)) {
            conflict = Some(Why::Interleaved);
        }
        if conflict.is_none() && !matches(expected, current.as_ref(), p, disk) {
            conflict = Some(Why::ChangedOutside);
        }
        if let Some(why) = conflict {
            plan.conflicts.push((p.to_string(), why));
            if !force.covers(p) {
                continue;
            }
        }
        let action = match (target, &current) {
            (State::Absent, _) => "delete",
            (_, None) => "create",
            _ => "restore",
        };
        let hash = current.as_ref().filter(|s| s.is_file()).and_then(|_| disk.hash(p));
        let from = State::of(current.as_ref(), hash);
        plan.steps.push(Step { path: p.to_string(), action, target: target.clone(), from, forced: conflict });
        settled.insert(p.to_string());
    }
    plan.records = records
        .into_iter()
        .map(|mut r| {
            r.entries.retain(|p, _| !settled.contains(p));
            r
        })
        .collect();
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoints::state::{Kind, Meta};
    use std::collections::HashMap;

    /// The disk as a table: path -> (stat, content hash); `linked` paths sit under a symlink.
    #[derive(Default)]
    struct Table {
        files: HashMap<String, (Stat, Option<String>)>,
        linked: BTreeSet<String>,
    }

    impl Disk for Table {
        fn stat(&self, rel: &str) -> Option<Stat> {
            self.files.get(rel).map(|(s, _)| s.clone())
        }
        fn hash(&self, rel: &str) -> Option<String> {
            self.files.get(rel).and_then(|(_, h)| h.clone())
        }
        fn through_link(&self, rel: &str) -> bool {
            self.linked.contains(rel)
        }
    }

    fn meta(n: u64) -> Meta {
        Meta { ino: n, size: n, mtime_ns: n as i64, ctime_ns: n as i64 }
    }

    /// A file state of content `n` (size, metadata and hash all derived from it).
    fn file(n: u64, kept: bool) -> State {
        State::File { mode: 0o644, size: n, blob: kept.then(|| format!("h{n}")), meta: meta(n) }
    }

    /// A file on disk with content `n`; `touched` gives it new metadata (same content).
    fn on_disk(n: u64, touched: bool) -> (Stat, Option<String>) {
        let mut m = meta(n);
        if touched {
            m.mtime_ns += 1000;
        }
        (Stat { kind: Kind::File, mode: 0o644, meta: m }, Some(format!("h{n}")))
    }

    fn rec(seq: u64, entries: &[(&str, State, State, Option<&str>)]) -> TurnRecord {
        TurnRecord {
            seq,
            chat_id: "c".into(),
            start_cursor: seq,
            user_cursor: Some(seq),
            evicted: false,
            entries: entries
                .iter()
                .map(|(p, b, a, c)| {
                    (p.to_string(), Entry { before: b.clone(), after: a.clone(), conflict: c.map(str::to_string) })
                })
                .collect(),
            undo: None,
        }
    }

    /// Each row: the records, what is on disk, the force; the expected steps, conflicts and
    /// paths not rewindable, as `path:action` / `path:code`.
    #[test]
    fn the_plan_over_a_table_of_cases() {
        struct Case {
            name: &'static str,
            records: Vec<TurnRecord>,
            disk: Vec<(&'static str, (Stat, Option<String>))>,
            linked: &'static [&'static str],
            forgotten: bool,
            force: Force,
            steps: &'static [&'static str],
            conflicts: &'static [&'static str],
            not_rewindable: &'static [&'static str],
        }
        let paths = |s: &[&str]| Force::Paths(s.iter().map(|p| p.to_string()).collect());
        let cases = vec![
            Case {
                name: "a file the chat changed, untouched since",
                records: vec![rec(1, &[("a", file(1, true), file(2, true), None)])],
                disk: vec![("a", on_disk(2, false))],
                linked: &[],
                forgotten: false,
                force: Force::None,
                steps: &["a:restore"],
                conflicts: &[],
                not_rewindable: &[],
            },
            Case {
                name: "touched but the same content is still the chat's",
                records: vec![rec(1, &[("a", file(1, true), file(2, true), None)])],
                disk: vec![("a", on_disk(2, true))],
                linked: &[],
                forgotten: false,
                force: Force::None,
                steps: &["a:restore"],
                conflicts: &[],
                not_rewindable: &[],
            },
            Case {
                name: "a file the chat made goes; one it removed comes back",
                records: vec![rec(
                    1,
                    &[("new", State::Absent, file(3, true), None), ("old", file(4, true), State::Absent, None)],
                )],
                disk: vec![("new", on_disk(3, false))],
                linked: &[],
                forgotten: false,
                force: Force::None,
                steps: &["new:delete", "old:create"],
                conflicts: &[],
                not_rewindable: &[],
            },
            Case {
                name: "already back: nothing to do, the entry settles",
                records: vec![rec(1, &[("a", file(1, true), file(2, true), None)])],
                disk: vec![("a", on_disk(1, false))],
                linked: &[],
                forgotten: false,
                force: Force::None,
                steps: &[],
                conflicts: &[],
                not_rewindable: &[],
            },
            Case {
                name: "changed outside this chat: left unless forced",
                records: vec![rec(1, &[("a", file(1, true), file(2, true), None)])],
                disk: vec![("a", on_disk(9, false))],
                linked: &[],
                forgotten: false,
                force: Force::None,
                steps: &[],
                conflicts: &["a:changed_outside"],
                not_rewindable: &[],
            },
            Case {
                name: "forced per file: only the named conflict is overwritten",
                records: vec![rec(
                    1,
                    &[("a", file(1, true), file(2, true), None), ("b", file(5, true), file(6, true), None)],
                )],
                disk: vec![("a", on_disk(9, false)), ("b", on_disk(8, false))],
                linked: &[],
                forgotten: false,
                force: paths(&["b"]),
                steps: &["b:restore"],
                conflicts: &["a:changed_outside", "b:changed_outside"],
                not_rewindable: &[],
            },
            Case {
                name: "someone else between two turns of the chat",
                records: vec![
                    rec(1, &[("a", file(1, true), file(2, true), None)]),
                    rec(2, &[("a", file(7, true), file(8, true), None)]),
                ],
                disk: vec![("a", on_disk(8, false))],
                linked: &[],
                forgotten: false,
                force: Force::None,
                steps: &[],
                conflicts: &["a:interleaved"],
                not_rewindable: &[],
            },
            Case {
                name: "a stored conflict keeps its reason; force all puts it back",
                records: vec![rec(1, &[("a", file(1, true), file(2, true), Some(CONCURRENT_EXEC))])],
                disk: vec![("a", on_disk(2, false))],
                linked: &[],
                forgotten: false,
                force: Force::All,
                steps: &["a:restore"],
                conflicts: &["a:concurrent_exec"],
                not_rewindable: &[],
            },
            Case {
                name: "under a symlink: never touched, even forced",
                records: vec![rec(1, &[("d/a", file(1, true), file(2, true), None)])],
                disk: vec![("d/a", on_disk(2, false))],
                linked: &["d/a"],
                forgotten: false,
                force: Force::All,
                steps: &[],
                conflicts: &["d/a:through_link"],
                not_rewindable: &[],
            },
            Case {
                name: "no copy, too large, not a file",
                records: vec![rec(
                    1,
                    &[
                        (
                            "big",
                            State::File { mode: 0o644, size: FILE_CAP + 1, blob: None, meta: meta(1) },
                            file(2, true),
                            None,
                        ),
                        ("hard", file(3, false), file(4, true), None),
                        ("fifo", State::Other, State::Absent, None),
                    ],
                )],
                disk: vec![],
                linked: &[],
                forgotten: false,
                force: Force::All,
                steps: &[],
                conflicts: &[],
                not_rewindable: &["big:too_large", "fifo:not_a_file", "hard:no_copy"],
            },
            Case {
                name: "past the horizon nothing is certain",
                records: vec![rec(1, &[("a", file(1, true), file(2, true), None)])],
                disk: vec![("a", on_disk(2, false))],
                linked: &[],
                forgotten: true,
                force: Force::All,
                steps: &[],
                conflicts: &[],
                not_rewindable: &["a:forgotten"],
            },
        ];
        for c in cases {
            let records = c.records;
            let disk = Table {
                files: c.disk.into_iter().map(|(p, v)| (p.to_string(), v)).collect(),
                linked: c.linked.iter().map(|p| p.to_string()).collect(),
            };
            let p = plan(records, c.forgotten, &c.force, &disk);
            let steps: Vec<String> = p.steps.iter().map(|s| format!("{}:{}", s.path, s.action)).collect();
            let code = |v: &[(String, Why)]| v.iter().map(|(p, w)| format!("{p}:{}", w.code())).collect::<Vec<_>>();
            assert_eq!(steps, c.steps, "{}: steps", c.name);
            assert_eq!(code(&p.conflicts), c.conflicts, "{}: conflicts", c.name);
            assert_eq!(code(&p.not_rewindable), c.not_rewindable, "{}: not rewindable", c.name);
        }
    }

    #[test]
    fn an_evicted_turn_makes_its_paths_not_rewindable_and_settled_entries_leave_the_records() {
        let mut evicted = rec(1, &[("a", file(1, false), file(2, false), None)]);
        evicted.evicted = true;
        let kept = rec(2, &[("b", file(3, true), file(4, true), None), ("c", file(5, true), file(6, true), None)]);
        let disk = Table {
            files: [("b".to_string(), on_disk(4, false)), ("c".to_string(), on_disk(9, false))].into(),
            linked: BTreeSet::new(),
        };
        let p = plan(vec![evicted, kept], false, &Force::None, &disk);
        assert!(p.evicted);
        assert_eq!(p.not_rewindable, vec![("a".to_string(), Why::Evicted)]);
        assert_eq!(p.steps.len(), 1);
        assert_eq!(p.steps[0].from, file(4, true), "the state now, with its content hash");
        // b is put back (its entry leaves); c conflicts (its entry stays for the next preview).
        assert_eq!(p.records[1].entries.keys().collect::<Vec<_>>(), ["c"]);
    }
}
