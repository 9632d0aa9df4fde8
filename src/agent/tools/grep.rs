//! `grep` (tools-and-mcp.md §3): searches workspace files line by line with a Python-`re`
//! pattern (our own engine in `regex.rs`), files chosen by a glob `file_pattern`, results in
//! path order, at most 50. Runs on a short-lived thread with a large stack (the regex engine
//! recurses) that the turn's worker thread joins. Binary files (NUL in the first 512 bytes)
//! are skipped, bytes read are capped per file and per call, the walk never follows symlinks
//! out of the workspace, and `..` or absolute file patterns are refused.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use super::pattern::Glob;
use super::regex::{Regex, STACK_SIZE};
use super::workspace::{looks_binary, split_lines, Flow, Kind, Workspace, MAX_WALK_ENTRIES};
use super::{arg_opt_str, arg_str, Tool, ToolOutput, TurnCtx};
use crate::util::cancel::CancelToken;
use crate::util::text::take_chars;

/// Matching lines reported.
pub const MAX_RESULTS: usize = 50;
/// Bytes searched per file (the rest of a larger file is not searched).
pub const MAX_FILE_BYTES: u64 = 4 << 20;
/// Bytes read per call over all files.
pub const MAX_TOTAL_BYTES: u64 = 256 << 20;
/// Characters of a matching line shown (minified files have megabyte lines).
pub const MAX_LINE_CHARS: usize = 400;

pub struct Grep;

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
        let (pattern, path, file_pattern) =
            match (arg_str(args, "pattern"), arg_opt_str(args, "path"), arg_opt_str(args, "file_pattern")) {
                (Ok(p), Ok(d), Ok(f)) => (p.to_string(), d, f),
                (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return e,
            };
        let regex = match Regex::new(&pattern) {
            Ok(r) => r,
            Err(e) => return ToolOutput::error(format!("Invalid regex: {e}")),
        };
        let files = if file_pattern.is_empty() { "*" } else { file_pattern };
        let glob = match Glob::recursive(files) {
            Ok(g) => g,
            Err(e) => return ToolOutput::error(format!("Invalid file_pattern: {e}")),
        };
        let (ws, base) = match Workspace::resolve_in(ctx, path) {
            Ok(v) => v,
            Err(e) => return ToolOutput::error(e),
        };
        if !base.exists() {
            let shown = if path.is_empty() { "(workspace)" } else { path };
            return ToolOutput::error(format!("Directory not found: {shown}"));
        }
        let cancel = ctx.cancel.clone();
        let job = std::thread::Builder::new()
            .name("grep".into())
            .stack_size(STACK_SIZE)
            .spawn(move || search(&ws, &base, &regex, &glob, &pattern, &cancel));
        match job.map(|h| h.join()) {
            Ok(Ok(out)) => out,
            Ok(Err(_)) => ToolOutput::error("grep failed unexpectedly"),
            Err(e) => ToolOutput::error(format!("grep could not start: {e}")),
        }
    }
}

/// What stopped a search early, reported after the results.
#[derive(Default)]
struct Limits {
    walk_truncated: bool,
    bytes_capped: bool,
    partial_files: usize,
}

fn search(ws: &Workspace, base: &Path, regex: &Regex, glob: &Glob, pattern: &str, cancel: &CancelToken) -> ToolOutput {
    // Candidate files in path order: the walk is sorted and stops when the cap is reached.
    let mut files: Vec<(PathBuf, PathBuf)> = Vec::new();
    let mut limits = Limits::default();
    if base.is_file() {
        files.push((base.to_path_buf(), base.to_path_buf()));
    } else {
        let stats = ws.walk(base, &mut |e| {
            if e.kind == Kind::File && !glob.dir_only && glob.matches(&e.rel) {
                files.push((e.path, e.real));
            }
            Flow::Continue
        });
        limits.walk_truncated = stats.truncated;
    }

    let mut results: Vec<String> = Vec::new();
    let mut total_read = 0u64;
    let mut buf = Vec::new();
    'files: for (shown_path, real) in &files {
        if cancel.is_cancelled() {
            return ToolOutput::error("grep cancelled");
        }
        if total_read >= MAX_TOTAL_BYTES {
            limits.bytes_capped = true;
            break;
        }
        let rel = ws.rel(shown_path);
        let Ok(file) = ws.open_read(real, &rel) else {
            continue;
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
            match regex.is_match_with(line, &mut buf) {
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
                Err(_) => {
                    return ToolOutput::error(format!(
                        "the pattern is too expensive to evaluate (backtracking limit reached at \
                         {rel}:{}); simplify it",
                        i + 1
                    ))
                }
            }
        }
    }

    let mut notes = Vec::new();
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
    use crate::agent::tools::workspace::tests::Sandbox;

    fn run(sb: &Sandbox, pattern: &str, path: &str, fp: &str) -> ToolOutput {
        let mut a = Map::new();
        a.insert("pattern".into(), json!(pattern));
        a.insert("path".into(), json!(path));
        a.insert("file_pattern".into(), json!(fp));
        Grep.run(&a, &sb.ctx)
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
        assert!(bad.failed && bad.for_model.starts_with("Error: Invalid regex: missing ),"));
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
        sb.write("a.txt", &format!("{}b\n", "a".repeat(40)));
        let out = run(&sb, "^(a+)+$", "", "");
        assert!(out.failed && out.for_model.contains("too expensive"), "{}", out.for_model);
    }
}
