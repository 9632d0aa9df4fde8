//! `read_file` (docs/tools-and-mcp.md §3): reads a text file inside the workspace, runs on the
//! turn's worker thread. Output is capped at 500 lines (contract) and, beyond the contract, at
//! [`MAX_READ_BYTES`] read from disk so a huge file cannot flood memory or the prompt.

use std::io::Read;

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::tool::args::parse_args;
use crate::tool::{Tool, ToolOutput, TurnCtx};
use crate::workspace::split_lines;

/// Lines returned before the truncation note.
pub(crate) const MAX_LINES: usize = 500;
/// Bytes read from one file; the rest is reported, not loaded.
pub(crate) const MAX_READ_BYTES: u64 = 1 << 20;

pub(crate) struct ReadFile;

#[derive(Deserialize)]
struct Args {
    path: String,
}

impl Tool for ReadFile {
    fn name(&self) -> &str {
        "read_file"
    }

    fn description(&self) -> &str {
        "Read a text file in the working directory. The path is relative to the working directory. \
         Long files are cut after 500 lines."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"path": {"type": "string", "description": "File path relative to the working directory."}},
            "required": ["path"]
        })
    }

    fn run(&self, args: &Map<String, Value>, ctx: &TurnCtx) -> ToolOutput {
        let Args { path } = match parse_args(args) {
            Ok(a) => a,
            Err(e) => return e,
        };
        let path = path.as_str();
        let (ws, resolved) = match ctx.resolve_path(path) {
            Ok(v) => v,
            Err(e) => return ToolOutput::error(e),
        };
        match std::fs::metadata(&resolved) {
            Err(_) => return ToolOutput::error(format!("File not found: {path}")),
            Ok(m) if !m.is_file() => return ToolOutput::error(format!("{path} is not a file")),
            Ok(_) => {}
        }
        let file = match ws.open_read(&resolved, path) {
            Ok(f) => f,
            Err(e) => return ToolOutput::error(e),
        };
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        let mut bytes = Vec::new();
        if let Err(e) = file.take(MAX_READ_BYTES).read_to_end(&mut bytes) {
            return ToolOutput::error(format!("Reading {path} failed: {e}"));
        }
        let text = String::from_utf8_lossy(&bytes);
        let lines = split_lines(&text);
        let total_lines = lines.len();
        let mut out = if total_lines > MAX_LINES {
            format!(
                "{}\n\n[content truncated, total {} lines]",
                lines[..MAX_LINES].join("\n"),
                if size > MAX_READ_BYTES { format!("{}+", lines.len()) } else { lines.len().to_string() }
            )
        } else {
            text.to_string()
        };
        if size > MAX_READ_BYTES && total_lines <= MAX_LINES {
            out.push_str(&format!(
                "\n\n[content truncated: file is {size} bytes, only the first {MAX_READ_BYTES} were read]"
            ));
        }
        ToolOutput::ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::tests::Sandbox;

    fn run(sb: &Sandbox, path: &str) -> ToolOutput {
        let mut a = Map::new();
        a.insert("path".into(), json!(path));
        ReadFile.run(&a, &sb.ctx)
    }

    #[test]
    fn reads_and_truncates() {
        let sb = Sandbox::new();
        sb.write("a.txt", "hello\nworld\n");
        assert_eq!(run(&sb, "a.txt"), ToolOutput::ok("hello\nworld\n"));
        let long: String = (1..=600).map(|i| format!("l{i}\n")).collect();
        sb.write("long.txt", &long);
        let out = run(&sb, "long.txt");
        let expect: Vec<String> = (1..=500).map(|i| format!("l{i}")).collect();
        assert_eq!(out.for_model, format!("{}\n\n[content truncated, total 600 lines]", expect.join("\n")));
    }

    #[test]
    fn refusals_and_missing() {
        let sb = Sandbox::new();
        sb.link("out", &sb.outside);
        sb.link("secret", &sb.outside.join("secret.txt"));
        std::fs::create_dir(sb.ws.join("d")).unwrap();
        for (p, msg) in [
            (
                "../outside/secret.txt",
                "Error: Path '../outside/secret.txt' is outside the working directory; access denied",
            ),
            ("out/secret.txt", "Error: Path 'out/secret.txt' is outside the working directory; access denied"),
            ("secret", "Error: Path 'secret' is outside the working directory; access denied"),
            ("nope.txt", "Error: File not found: nope.txt"),
            ("d", "Error: d is not a file"),
        ] {
            let out = run(&sb, p);
            assert!(out.failed, "{p}");
            assert_eq!(out.for_model, msg);
        }
        let abs = sb.outside.join("secret.txt").display().to_string();
        let out = run(&sb, &abs);
        assert!(out.failed && !out.for_model.contains("TOPSECRET"));
        let missing = ReadFile.run(&Map::new(), &sb.ctx);
        assert_eq!(missing.for_model, "Error: missing required argument 'path'");
    }

    #[test]
    fn fifo_is_refused_without_blocking() {
        let sb = Sandbox::new();
        nix::unistd::mkfifo(&sb.ws.join("pipe"), nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        let out = run(&sb, "pipe");
        assert_eq!(out.for_model, "Error: pipe is not a file");
    }

    /// Every spelling of a bad or odd argument keeps the wording the model always got.
    #[test]
    fn argument_spellings() {
        let sb = Sandbox::new();
        sb.write("a.txt", "hi\n");
        for (args, text) in [
            (json!({}), "Error: missing required argument 'path'"),
            (json!({"path": null}), "Error: missing required argument 'path'"),
            (json!({"path": 5}), "Error: argument 'path' must be a string"),
            (json!({"path": ["a.txt"]}), "Error: argument 'path' must be a string"),
            (json!({"path": {"p": "a.txt"}}), "Error: argument 'path' must be a string"),
            (json!({"path": "a.txt", "offset": 3, "content": 5}), "hi\n"),
        ] {
            assert_eq!(sb.call(&ReadFile, args.clone()).for_model, text, "{args}");
        }
    }
}
