//! `glob` (docs/tools-and-mcp.md §3): finds files and directories below a workspace directory whose
//! path matches a pattern at any depth (rglob semantics, `globset` automaton in `pattern.rs`),
//! sorted by path, at most 100; runs on the turn's worker thread. The walk has a deadline (then
//! the paths found so far are listed with a note) and stops when the turn is cancelled.
//! Patterns with `..` or a leading `/` are refused, and the walk never enters symlinked
//! directories nor lists symlinks leading out, so nothing outside leaks.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::pattern::Glob as Pattern;
use crate::tool::args::parse_args;
use crate::tool::{Tool, ToolOutput, TurnCtx};
use crate::workspace::{Budget, Flow, Halt, Kind, MAX_WALK_ENTRIES, SEARCH_TIME_LIMIT};

/// Matches listed.
pub(crate) const MAX_RESULTS: usize = 100;

pub(crate) struct Glob;

#[derive(Deserialize)]
struct Args {
    pattern: String,
    /// Absent, null or "": the workspace itself.
    path: Option<String>,
}

impl Tool for Glob {
    fn name(&self) -> &str {
        "glob"
    }

    fn description(&self) -> &str {
        "Find files and directories in the working directory whose path matches a glob pattern \
         at any depth (`*`, `?`, `[abc]`, `**` for any number of directories; e.g. `*.py`, \
         `src/**/test_*.rs`). Returns at most 100 paths, sorted."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Glob pattern, relative (e.g. `*.md`, `docs/**/*.txt`)."},
                "path": {"type": "string", "description": "Directory to search in, relative to the working directory; empty for the working directory.", "default": ""}
            },
            "required": ["pattern"]
        })
    }

    fn run(&self, args: &Map<String, Value>, ctx: &TurnCtx) -> ToolOutput {
        let Args { pattern, path } = match parse_args(args) {
            Ok(a) => a,
            Err(e) => return e,
        };
        let (pattern, path) = (pattern.as_str(), path.as_deref().unwrap_or(""));
        let (ws, base) = match ctx.resolve_path(path) {
            Ok(v) => v,
            Err(e) => return ToolOutput::error(e),
        };
        if !base.is_dir() {
            let shown = if path.is_empty() { "(workspace)" } else { path };
            return ToolOutput::error(format!("Directory not found: {shown}"));
        }
        let glob = match Pattern::recursive(pattern) {
            Ok(g) => g,
            Err(e) => return ToolOutput::error(format!("Match failed: {e}")),
        };
        let budget = Budget::new(&ctx.cancel, SEARCH_TIME_LIMIT);
        let mut hits = Vec::new();
        let stats = ws.walk(&base, &budget, &mut |e| {
            let wanted = match e.kind {
                Kind::Dir => true,
                Kind::File | Kind::Other => !glob.dir_only,
            };
            if wanted && glob.matches(&e.rel) {
                let mut shown = ws.rel(&e.path);
                if e.kind == Kind::Dir {
                    shown.push('/');
                }
                hits.push(shown);
                if hits.len() >= MAX_RESULTS {
                    return Flow::Stop;
                }
            }
            Flow::Continue
        });
        let note = match stats.halted {
            Some(Halt::Cancelled) => return ToolOutput::error("glob cancelled"),
            Some(Halt::TimedOut) => Some(budget.timeout_note()),
            None if stats.truncated => Some(format!("search stopped after {MAX_WALK_ENTRIES} entries")),
            None => None,
        };
        if hits.is_empty() {
            let mut out = format!("No files match `{pattern}`");
            if let Some(note) = note {
                out.push_str(&format!(" ({note})"));
            }
            return ToolOutput::ok(out);
        }
        let mut out = format!("Matched `{pattern}` ({}):\n", hits.len());
        for h in &hits {
            out.push_str(&format!("\n  {h}"));
        }
        if let Some(note) = note {
            out.push_str(&format!("\n\n({note})"));
        }
        ToolOutput::ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::tests::Sandbox;

    fn run(sb: &Sandbox, pattern: &str, path: &str) -> ToolOutput {
        let mut a = Map::new();
        a.insert("pattern".into(), json!(pattern));
        a.insert("path".into(), json!(path));
        Glob.run(&a, &sb.ctx)
    }

    #[test]
    fn matches_at_any_depth_sorted() {
        let sb = Sandbox::new();
        sb.write("b.md", "");
        sb.write("src/a.md", "");
        sb.write("src/deep/c.md", "");
        sb.write("src/deep/c.txt", "");
        sb.write("docs/md/x", "");
        assert_eq!(run(&sb, "*.md", "").for_model, "Matched `*.md` (3):\n\n  b.md\n  src/a.md\n  src/deep/c.md");
        assert_eq!(run(&sb, "deep/*", "src").for_model, "Matched `deep/*` (2):\n\n  src/deep/c.md\n  src/deep/c.txt");
        assert_eq!(run(&sb, "m?", "").for_model, "Matched `m?` (1):\n\n  docs/md/");
        assert_eq!(run(&sb, "*.rs", "").for_model, "No files match `*.rs`");
        for i in 0..120 {
            sb.write(&format!("many/{i:03}.log"), "");
        }
        let out = run(&sb, "*.log", "many").for_model;
        assert!(out.starts_with("Matched `*.log` (100):\n\n  many/000.log\n"));
        assert!(out.ends_with("  many/099.log"));
    }

    #[test]
    fn never_leaks_outside() {
        let sb = Sandbox::new();
        sb.write("in.txt", "");
        sb.link("outdir", &sb.outside);
        sb.link("outfile.txt", &sb.outside.join("secret.txt"));
        for (pattern, path) in [("*", ""), ("**/*.txt", ""), ("*secret*", ""), ("outdir/*", "")] {
            let out = run(&sb, pattern, path).for_model;
            assert!(
                !out.contains("secret.txt") && !out.contains("outfile") && !out.contains("  outdir"),
                "{pattern}: {out}"
            );
        }
        assert_eq!(run(&sb, "*.txt", "").for_model, "Matched `*.txt` (1):\n\n  in.txt");
        let out = run(&sb, "../outside/*", "");
        assert!(out.failed);
        assert_eq!(out.for_model, "Error: Match failed: '..' is not allowed in a pattern");
        let out = run(&sb, "/etc/*", "");
        assert_eq!(out.for_model, "Error: Match failed: non-relative patterns are unsupported");
        assert_eq!(
            run(&sb, "*", "outdir").for_model,
            "Error: Path 'outdir' is outside the working directory; access denied"
        );
        assert_eq!(
            run(&sb, "*", "../outside").for_model,
            "Error: Path '../outside' is outside the working directory; access denied"
        );
        assert_eq!(run(&sb, "*", "in.txt").for_model, "Error: Directory not found: in.txt");
    }

    /// `**/*` repeated 10 and 50 times over a 33-level tree: exponential for a backtracking
    /// matcher (64 s for 10 repeats before), one automaton pass per path now.
    #[test]
    fn repeated_globstars_over_a_deep_tree_end_quickly() {
        let sb = Sandbox::new();
        let deep: Vec<String> = (0..33).map(|i| format!("d{i}")).collect();
        sb.write(&format!("{}/leaf.txt", deep.join("/")), "");
        let started = std::time::Instant::now();
        let out = run(&sb, &["**/*"; 10].join("/"), "").for_model;
        // Paths with at least 10 components: d0/…/d9 and deeper, 25 of them in all.
        assert!(out.starts_with("Matched `**/*/**/*/**/*/**/*/**/*/**/*/**/*/**/*/**/*/**/*` (25):\n\n  d0/d1/d2/d3/d4/d5/d6/d7/d8/d9/\n"), "{out}");
        assert!(out.ends_with("/d32/leaf.txt"), "{out}");
        let out = run(&sb, &["**/*"; 50].join("/"), "").for_model;
        assert!(out.starts_with("No files match `**/*/**/*"), "{out}");
        let elapsed = started.elapsed();
        assert!(elapsed < std::time::Duration::from_secs(2), "{elapsed:?}");
    }

    #[test]
    fn cancelled_glob_stops() {
        let sb = Sandbox::new();
        sb.write("a.txt", "");
        sb.ctx.cancel.cancel();
        let out = run(&sb, "*", "");
        assert!(out.failed);
        assert_eq!(out.for_model, "Error: glob cancelled");
    }

    /// `pattern` is required, `path` optional (absent or null = the workspace); the first
    /// argument at fault (pattern, then path) is reported; unknown keys are ignored.
    #[test]
    fn argument_spellings() {
        let sb = Sandbox::new();
        sb.write("d/a.txt", "");
        for (args, text) in [
            (json!({}), "Error: missing required argument 'pattern'"),
            (json!({"pattern": null}), "Error: missing required argument 'pattern'"),
            (json!({"path": 5}), "Error: missing required argument 'pattern'"),
            (json!({"pattern": 5, "path": 5}), "Error: argument 'pattern' must be a string"),
            (json!({"pattern": "*.txt", "path": 5}), "Error: argument 'path' must be a string"),
            (json!({"pattern": "*.txt", "path": ["d"]}), "Error: argument 'path' must be a string"),
            (json!({"pattern": "*.txt", "path": null}), "Matched `*.txt` (1):\n\n  d/a.txt"),
            (json!({"pattern": "*.txt", "limit": 1}), "Matched `*.txt` (1):\n\n  d/a.txt"),
        ] {
            assert_eq!(sb.call(&Glob, args.clone()).for_model, text, "{args}");
        }
    }
}
