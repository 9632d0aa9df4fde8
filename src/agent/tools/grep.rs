//! `grep` (docs/tools-and-mcp.md §3): searches workspace files line by line with a Python-`re`
//! pattern (fancy-regex behind the pre-pass in `regex.rs`), files chosen by a glob
//! `file_pattern`, results in path order, at most 50. Runs on the turn's worker thread and is
//! bounded: pattern length and compiled size are capped, a backtracking pattern has a step
//! limit per line and skips lines longer than [`MAX_BACKTRACK_LINE_BYTES`], the whole call has
//! a deadline (then the matches so far are returned with a note) and stops when the turn is
//! cancelled. Binary files (NUL in the first 512 bytes) are skipped, bytes read are capped per
//! file and per call, the walk never follows symlinks out of the workspace, and `..` or
//! absolute file patterns are refused.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::pattern::Glob;
use super::regex::{Exhausted, Regex, MAX_BACKTRACK_LINE_BYTES};
use crate::tool::args::parse_args;
use crate::tool::{Tool, ToolOutput, TurnCtx};
use crate::util::text::take_chars;
use crate::workspace::{
    hard_linked, looks_binary, split_lines, Budget, Flow, Halt, Kind, Workspace, MAX_WALK_ENTRIES, SEARCH_TIME_LIMIT,
};

/// Matching lines reported.
pub(crate) const MAX_RESULTS: usize = 50;
/// Bytes searched per file (the rest of a larger file is not searched).
pub(crate) const MAX_FILE_BYTES: u64 = 4 << 20;
/// Bytes read per call over all files.
pub(crate) const MAX_TOTAL_BYTES: u64 = 256 << 20;
/// Characters of a matching line shown (minified files have megabyte lines).
pub(crate) const MAX_LINE_CHARS: usize = 400;
/// Lines that may exhaust the backtracking limit before the search gives up: a pattern that
/// does so this often is hopeless, and each such line costs milliseconds.
const MAX_EXHAUSTED_LINES: usize = 10;
/// Lines a linear-time pattern searches between two checks of the budget (a backtracking
/// pattern checks before every line: one line may cost it milliseconds).
const LINES_PER_CHECK: usize = 2_048;

pub struct Grep;

#[derive(Deserialize)]
struct Args {
    pattern: String,
    /// Absent, null or "": the workspace itself.
    path: Option<String>,
    /// Absent, null or "": every file.
    file_pattern: Option<String>,
}

impl Tool for Grep {
    fn name(&self) -> &str {
        "grep"
    }

    fn description(&self) -> &str {
        "Search file contents in the working directory with a regular expression (Python `re` \
         syntax; use (?i) for case-insensitive). Optionally restrict files with a glob \
         file_pattern such as `*.py`. Returns at most 50 matching lines as path:line: text."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Regular expression (Python re syntax)."},
                "path": {"type": "string", "description": "Directory (or file) to search, relative to the working directory; empty for the working directory.", "default": ""},
                "file_pattern": {"type": "string", "description": "Glob for the files to search, e.g. `*.rs`; empty for all files.", "default": ""}
            },
            "required": ["pattern"]
        })
    }

    fn run(&self, args: &Map<String, Value>, ctx: &TurnCtx) -> ToolOutput {
        let Args { pattern, path, file_pattern } = match parse_args(args) {
            Ok(a) => a,
            Err(e) => return e,
        };
        let (path, file_pattern) = (path.as_deref().unwrap_or(""), file_pattern.as_deref().unwrap_or(""));
        let regex = match Regex::new(&pattern) {
            Ok(r) => r,
            Err(e) => return ToolOutput::error(format!("Invalid regex: {e}")),
        };
        let files = if file_pattern.is_empty() { "*" } else { file_pattern };
        let glob = match Glob::recursive(files) {
            Ok(g) => g,
            Err(e) => return ToolOutput::error(format!("Invalid file_pattern: {e}")),
        };
        let (ws, base) = match ctx.resolve_path(path) {
            Ok(v) => v,
            Err(e) => return ToolOutput::error(e),
        };
        if !base.exists() {
            let shown = if path.is_empty() { "(workspace)" } else { path };
            return ToolOutput::error(format!("Directory not found: {shown}"));
        }
        search(&ws, &base, &regex, &glob, &pattern, &Budget::new(&ctx.cancel, SEARCH_TIME_LIMIT))
    }
}

/// What stopped a search early, reported after the results.
#[derive(Default)]
struct Limits {
    walk_truncated: bool,
    bytes_capped: bool,
    partial_files: usize,
    /// Lines a backtracking pattern skipped for their length.
    long_lines: usize,
    /// The first line that ran out of backtracking steps (path, line number) and how many did.
    exhausted: Option<(String, usize, usize)>,
    timed_out: bool,
    /// Files not searched because they have more than one hard link (the first one's path).
    hard_linked: Option<(String, usize)>,
}

fn search(ws: &Workspace, base: &Path, regex: &Regex, glob: &Glob, pattern: &str, budget: &Budget) -> ToolOutput {
    // Candidate files in path order: the walk is sorted and stops when the cap is reached.
    let mut files: Vec<(PathBuf, PathBuf)> = Vec::new();
    let mut limits = Limits::default();
    if base.is_file() {
        files.push((base.to_path_buf(), base.to_path_buf()));
    } else {
        let stats = ws.walk(base, budget, &mut |e| {
            if e.kind == Kind::File && !glob.dir_only && glob.matches(&e.rel) {
                files.push((e.path, e.real));
            }
            Flow::Continue
        });
        limits.walk_truncated = stats.truncated;
    }

    let mut results: Vec<String> = Vec::new();
    let mut total_read = 0u64;
    let every = if regex.backtracks() { 1 } else { LINES_PER_CHECK };
    let mut lines = 0usize;
    'files: for (shown_path, real) in &files {
        match budget.check() {
            Ok(()) => {}
            Err(Halt::Cancelled) => return ToolOutput::error("grep cancelled"),
            Err(Halt::TimedOut) => {
                limits.timed_out = true;
                break;
            }
        }
        if total_read >= MAX_TOTAL_BYTES {
            limits.bytes_capped = true;
            break;
        }
        let rel = ws.rel(shown_path);
        let file = match ws.open_read(real, &rel) {
            Ok(f) => f,
            Err(e) => {
                // A hard-linked file's content may be outside the workspace: not searched, said.
                if e == hard_linked(&rel) {
                    limits.hard_linked.get_or_insert_with(|| (rel.clone(), 0)).1 += 1;
                }
                continue;
            }
        };
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        let mut bytes = Vec::new();
        if file.take(MAX_FILE_BYTES).read_to_end(&mut bytes).is_err() {
            continue;
        }
        total_read += bytes.len() as u64;
        if looks_binary(&bytes) {
            continue;
        }
        if size > MAX_FILE_BYTES {
            limits.partial_files += 1;
        }
        let text = String::from_utf8_lossy(&bytes);
        if !regex.could_match(&text) {
            continue;
        }
        for (i, line) in split_lines(&text).into_iter().enumerate() {
            lines += 1;
            if lines.is_multiple_of(every) {
                match budget.check() {
                    Ok(()) => {}
                    Err(Halt::Cancelled) => return ToolOutput::error("grep cancelled"),
                    Err(Halt::TimedOut) => {
                        limits.timed_out = true;
                        break 'files;
                    }
                }
            }
            if regex.backtracks() && line.len() > MAX_BACKTRACK_LINE_BYTES {
                limits.long_lines += 1;
                continue;
            }
            match regex.is_match(line) {
                Ok(false) => {}
                Ok(true) => {
                    let line = line.trim_end();
                    let cut = take_chars(line, MAX_LINE_CHARS);
                    let ell = if cut.len() < line.len() { " …" } else { "" };
                    results.push(format!("{rel}:{}: {cut}{ell}", i + 1));
                    if results.len() >= MAX_RESULTS {
                        break 'files;
                    }
                }
                Err(Exhausted) => {
                    let (_, _, n) = limits.exhausted.get_or_insert_with(|| (rel.clone(), i + 1, 0));
                    *n += 1;
                    if *n >= MAX_EXHAUSTED_LINES {
                        break 'files;
                    }
                }
            }
        }
    }
    if let (true, Some((rel, line, _))) = (results.is_empty(), &limits.exhausted) {
        return ToolOutput::error(format!(
            "the pattern is too expensive to evaluate (backtracking limit reached at {rel}:{line}); simplify it"
        ));
    }

    let mut notes = Vec::new();
    if limits.timed_out {
        notes.push(budget.timeout_note());
    }
    match &limits.exhausted {
        Some((rel, line, n)) if *n >= MAX_EXHAUSTED_LINES => notes.push(format!(
            "search stopped after {n} lines too expensive for this pattern, the first at {rel}:{line}; simplify it"
        )),
        Some((rel, line, n)) => notes.push(format!(
            "{n} line(s) were too expensive for this pattern and were skipped, the first at {rel}:{line}"
        )),
        None => {}
    }
    if limits.long_lines > 0 {
        notes.push(format!(
            "{} line(s) longer than {MAX_BACKTRACK_LINE_BYTES} bytes were not searched: look-around and \
             backreferences are evaluated on shorter lines only",
            limits.long_lines
        ));
    }
    if let Some((rel, n)) = &limits.hard_linked {
        notes.push(format!(
            "{n} file(s) with other hard links were not searched (their content may be outside the \
             working directory), the first: {rel}"
        ));
    }
    if limits.walk_truncated {
        notes.push(format!("search stopped after {MAX_WALK_ENTRIES} directory entries"));
    }
    if limits.bytes_capped {
        notes.push(format!("search stopped after reading {} MiB", MAX_TOTAL_BYTES >> 20));
    }
    if limits.partial_files > 0 {
        notes.push(format!(
            "{} file(s) larger than {} MiB were searched only in their first {} MiB",
            limits.partial_files,
            MAX_FILE_BYTES >> 20,
            MAX_FILE_BYTES >> 20
        ));
    }
    let mut out = if results.is_empty() {
        format!("No content matches `{pattern}`")
    } else {
        format!("Matched `{pattern}` ({}):\n\n{}", results.len(), results.join("\n"))
    };
    if !notes.is_empty() {
        out.push_str(&format!("\n\n({})", notes.join("; ")));
    }
    ToolOutput::ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::tests::Sandbox;

    fn run(sb: &Sandbox, pattern: &str, path: &str, fp: &str) -> ToolOutput {
        let mut a = Map::new();
        a.insert("pattern".into(), json!(pattern));
        a.insert("path".into(), json!(path));
        a.insert("file_pattern".into(), json!(fp));
        Grep.run(&a, &sb.ctx)
    }

    /// A hard-linked file (its content may be outside) is not searched, and the output says so.
    #[test]
    fn skips_hard_linked_files_and_says_so() {
        let sb = Sandbox::new();
        sb.hard_link_secret("planted.txt");
        sb.write("own.txt", "TOPSECRET here too\n");
        let out = run(&sb, "TOPSECRET", "", "").for_model;
        assert_eq!(
            out,
            "Matched `TOPSECRET` (1):\n\nown.txt:1: TOPSECRET here too\n\n(1 file(s) with other hard links were \
             not searched (their content may be outside the working directory), the first: planted.txt)"
        );
    }

    #[test]
    fn finds_lines_in_path_order() {
        let sb = Sandbox::new();
        sb.write("b.py", "def main():\n    return 1   \n");
        sb.write("a/x.py", "import os\ndef helper(): pass\n");
        sb.write("a/y.txt", "def not_python\n");
        std::fs::write(sb.ws.join("bin.py"), b"def \0binary").unwrap();
        assert_eq!(
            run(&sb, r"^def \w+", "", "*.py").for_model,
            "Matched `^def \\w+` (2):\n\na/x.py:2: def helper(): pass\nb.py:1: def main():"
        );
        assert_eq!(run(&sb, "(?i)RETURN", "", "").for_model, "Matched `(?i)RETURN` (1):\n\nb.py:2:     return 1");
        assert_eq!(
            run(&sb, "def", "a", "").for_model,
            "Matched `def` (2):\n\na/x.py:2: def helper(): pass\na/y.txt:1: def not_python"
        );
        assert_eq!(run(&sb, "import", "a/x.py", "").for_model, "Matched `import` (1):\n\na/x.py:1: import os");
        assert_eq!(run(&sb, "zzz", "", "").for_model, "No content matches `zzz`");
        let bad = run(&sb, "(unclosed", "", "");
        assert!(bad.failed);
        assert_eq!(
            bad.for_model,
            "Error: Invalid regex: opening parenthesis without closing parenthesis at position 9"
        );
        let p = r"\A(?P<kw>def|import) (?P<n>\w)\w*\Z";
        assert_eq!(
            run(&sb, p, "a", "").for_model,
            format!("Matched `{p}` (2):\n\na/x.py:1: import os\na/y.txt:1: def not_python")
        );
    }

    #[test]
    fn caps_results_and_long_lines() {
        let sb = Sandbox::new();
        let many: String = (0..80).map(|i| format!("hit {i}\n")).collect();
        sb.write("m.txt", &many);
        sb.write("long.txt", &format!("hit {}\n", "x".repeat(5000)));
        let out = run(&sb, "hit", "", "").for_model;
        assert!(out.starts_with("Matched `hit` (50):\n\nlong.txt:1: hit xxx"));
        assert!(out.lines().nth(2).unwrap().ends_with("x …"));
        assert!(out.ends_with("m.txt:49: hit 48"));
    }

    #[test]
    fn never_reads_outside() {
        let sb = Sandbox::new();
        sb.write("ok.txt", "TOPSECRET lookalike\n");
        sb.link("outdir", &sb.outside);
        sb.link("outfile.txt", &sb.outside.join("secret.txt"));
        let out = run(&sb, "TOPSECRET", "", "");
        assert_eq!(out.for_model, "Matched `TOPSECRET` (1):\n\nok.txt:1: TOPSECRET lookalike");
        for fp in ["../outside/*", "../*", "/tmp/*"] {
            let out = run(&sb, "TOPSECRET", "", fp);
            assert!(out.failed && out.for_model.starts_with("Error: Invalid file_pattern"), "{fp}");
        }
        for fp in ["outdir/*", "**/secret.txt", "outfile.txt"] {
            assert_eq!(run(&sb, "TOPSECRET", "", fp).for_model, "No content matches `TOPSECRET`");
        }
        for p in ["outdir", "outfile.txt", "../outside", "/etc"] {
            let out = run(&sb, "TOPSECRET", p, "");
            assert_eq!(out.for_model, format!("Error: Path '{p}' is outside the working directory; access denied"));
        }
    }

    #[test]
    fn expensive_pattern_fails_cleanly() {
        let sb = Sandbox::new();
        sb.write("a.txt", &format!("{}!\n", "a".repeat(2_000)));
        // Without a backreference the linear engine answers at once.
        assert_eq!(run(&sb, "^(a+)+$", "", "").for_model, "No content matches `^(a+)+$`");
        let out = run(&sb, r"(a|a)*\1b", "", "");
        assert!(out.failed);
        assert_eq!(
            out.for_model,
            "Error: the pattern is too expensive to evaluate (backtracking limit reached at a.txt:1); simplify it"
        );
        // Other lines still give their matches; the skipped ones are reported.
        sb.write("b.txt", "aab\n");
        sb.write("c.txt", &format!("{}!\n", "a".repeat(2_000)).repeat(MAX_EXHAUSTED_LINES * 100));
        // A thousand such lines would take seconds; the search gives up after ten, which the
        // report says (asserted on the text, not on a clock that a loaded machine stretches).
        assert_eq!(
            run(&sb, r"(a|a)*\1b", "", "").for_model,
            format!(
                "Matched `(a|a)*\\1b` (1):\n\nb.txt:1: aab\n\n(search stopped after {MAX_EXHAUSTED_LINES} lines too \
                 expensive for this pattern, the first at a.txt:1; simplify it)"
            )
        );
        std::fs::remove_file(sb.ws.join("c.txt")).unwrap();
        assert_eq!(
            run(&sb, r"(a|a)*\1b", "", "").for_model,
            "Matched `(a|a)*\\1b` (1):\n\nb.txt:1: aab\n\n(1 line(s) were too expensive for this pattern and were \
             skipped, the first at a.txt:1)"
        );
    }

    #[test]
    fn backtracking_patterns_skip_long_lines() {
        let sb = Sandbox::new();
        let long = format!("foo{}", "x".repeat(MAX_BACKTRACK_LINE_BYTES));
        sb.write("a.txt", &format!("{long}\nfoo short\n"));
        assert_eq!(
            run(&sb, "foo(?= )", "", "").for_model,
            format!(
                "Matched `foo(?= )` (1):\n\na.txt:2: foo short\n\n(1 line(s) longer than {MAX_BACKTRACK_LINE_BYTES} \
                 bytes were not searched: look-around and backreferences are evaluated on shorter lines only)"
            )
        );
        // A linear-time pattern searches every line, however long.
        assert_eq!(run(&sb, "foox+$", "", "").for_model.lines().next(), Some("Matched `foox+$` (1):"));
    }

    /// A pattern that costs milliseconds per line over many lines stops at the call's deadline
    /// with the matches found so far and a note. Asserted by what was found, not by wall time
    /// (a loaded machine may pause the search anywhere): b.txt ends with a matching line that
    /// a search reaching the end of the file would report, so its absence shows the deadline
    /// stopped the search inside the file.
    #[test]
    fn deadline_returns_partial_results() {
        let sb = Sandbox::new();
        let slow_line = format!("{}\n", "a".repeat(300));
        sb.write("a.txt", "hit y\n");
        sb.write("b.txt", &format!("{}last y\n", slow_line.repeat(10_000)));
        let regex = Regex::new(r"(?:.(?=.*a))*y").unwrap();
        let glob = Glob::recursive("*").unwrap();
        let ws = sb.ctx.open_workspace().unwrap();
        let limit = std::time::Duration::from_millis(300);
        let out = search(&ws, &sb.ws, &regex, &glob, "p", &Budget::new(&sb.ctx.cancel, limit));
        assert_eq!(
            out.for_model,
            "Matched `p` (1):\n\na.txt:1: hit y\n\n(search stopped after 0.3s; results are partial)"
        );
    }

    /// A cancel flipped from another thread mid-grep over a big workspace ends the call promptly.
    /// The pattern needs the backtracker, so the uncancelled search takes seconds even in a
    /// release build and the cancel surely lands in the middle of it.
    #[test]
    fn cancel_stops_a_running_grep() {
        let sb = Sandbox::new();
        let text: String = (0..4_000).map(|i| format!("line {i} with some words words and filler text\n")).collect();
        for f in 0..40 {
            sb.write(&format!("d{}/f{f}.txt", f % 4), &text);
        }
        {
            let pattern = r"(\w+) \1 z";
            let ctx = TurnCtx { cancel: crate::util::cancel::CancelToken::new(), ..sb.ctx.clone() };
            let canceller = {
                let cancel = ctx.cancel.clone();
                std::thread::spawn(move || {
                    // Let the search get going, then cancel it: the moment is arbitrary.
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    cancel.cancel();
                    std::time::Instant::now()
                })
            };
            let mut a = Map::new();
            a.insert("pattern".into(), json!(pattern));
            let out = Grep.run(&a, &ctx);
            let returned = std::time::Instant::now();
            let cancelled = canceller.join().unwrap();
            assert_eq!(out.for_model, "Error: grep cancelled", "{pattern}");
            let latency = returned.duration_since(cancelled);
            assert!(latency < std::time::Duration::from_millis(100), "{pattern}: {latency:?}");
        }
    }

    /// `pattern` is required, `path` and `file_pattern` optional (absent or null = all); the
    /// first argument at fault (pattern, path, file_pattern) is reported; unknown keys are ignored.
    #[test]
    fn argument_spellings() {
        let sb = Sandbox::new();
        sb.write("d/a.txt", "needle\n");
        let found = "Matched `needle` (1):\n\nd/a.txt:1: needle";
        for (args, text) in [
            (json!({}), "Error: missing required argument 'pattern'"),
            (json!({"pattern": null}), "Error: missing required argument 'pattern'"),
            (json!({"path": 5, "file_pattern": 5}), "Error: missing required argument 'pattern'"),
            (json!({"pattern": 5, "path": 5}), "Error: argument 'pattern' must be a string"),
            (json!({"pattern": "needle", "path": 5, "file_pattern": 5}), "Error: argument 'path' must be a string"),
            (json!({"pattern": "needle", "file_pattern": 5}), "Error: argument 'file_pattern' must be a string"),
            (
                json!({"pattern": "needle", "file_pattern": ["*.txt"]}),
                "Error: argument 'file_pattern' must be a string",
            ),
            (json!({"pattern": "needle", "path": null, "file_pattern": null}), found),
            (json!({"pattern": "needle", "path": "d", "file_pattern": "*.txt", "context": 2}), found),
        ] {
            assert_eq!(sb.call(&Grep, args.clone()).for_model, text, "{args}");
        }
    }
}
