//! `edit_file` (docs/tools-and-mcp.md §3): replaces one unique occurrence of a string in a workspace
//! file, refusing the Skill roots; runs on the turn's worker thread. Read and write go through
//! one descriptor opened by [`Workspace::open_write`]. Unlike the original, a file that is not
//! valid UTF-8 is refused instead of being silently corrupted by lossy decoding.

use std::io::{Read, Seek, SeekFrom, Write};

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::tool::args::parse_args;
use crate::tool::{Tool, ToolOutput, TurnCtx};

/// Largest file edit_file loads.
pub(crate) const MAX_EDIT_BYTES: u64 = 8 << 20;

pub(crate) struct EditFile;

#[derive(Deserialize)]
struct Args {
    path: String,
    old_string: String,
    new_string: String,
}

impl Tool for EditFile {
    fn name(&self) -> &str {
        "edit_file"
    }

    fn description(&self) -> &str {
        "Edit a text file in the working directory by replacing old_string with new_string. \
         old_string must occur exactly once; include surrounding context to make it unique. \
         Skill directories are protected: use agent_skill_manage for Skills."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path relative to the working directory."},
                "old_string": {"type": "string", "description": "Exact text to replace (must be unique in the file)."},
                "new_string": {"type": "string", "description": "Replacement text."}
            },
            "required": ["path", "old_string", "new_string"]
        })
    }

    fn run(&self, args: &Map<String, Value>, ctx: &TurnCtx) -> ToolOutput {
        let Args { path, old_string: old, new_string: new } = match parse_args(args) {
            Ok(a) => a,
            Err(e) => return e,
        };
        let (path, old, new) = (path.as_str(), old.as_str(), new.as_str());
        let (ws, resolved) = match ctx.resolve_path(path) {
            Ok(v) => v,
            Err(e) => return ToolOutput::error(e),
        };
        if let Err(e) = ws.check_writable(&resolved, path) {
            return ToolOutput::error(e);
        }
        match std::fs::metadata(&resolved) {
            Err(_) => return ToolOutput::error(format!("File not found: {path}")),
            Ok(m) if !m.is_file() => return ToolOutput::error(format!("{path} is not a file")),
            Ok(m) if m.len() > MAX_EDIT_BYTES => {
                return ToolOutput::error(format!(
                    "{path} is too large to edit ({} bytes, limit {MAX_EDIT_BYTES})",
                    m.len()
                ))
            }
            Ok(_) => {}
        }
        if old.is_empty() {
            return ToolOutput::error(format!(
                "old_string must not be empty; give the exact text to replace (file: {path})"
            ));
        }
        let mut file = match ws.open_write(&resolved, path, false) {
            Ok(f) => f,
            Err(e) => return ToolOutput::error(e),
        };
        let mut bytes = Vec::new();
        if let Err(e) = (&mut file).take(MAX_EDIT_BYTES + 1).read_to_end(&mut bytes) {
            return ToolOutput::error(format!("Reading {path} failed: {e}"));
        }
        let Ok(text) = String::from_utf8(bytes) else {
            return ToolOutput::error(format!("{path} is not valid UTF-8 text; edit_file only edits text files"));
        };
        let count = text.matches(old).count();
        if count == 0 {
            return ToolOutput::error(format!("old_string not found, check it (file: {path})"));
        }
        if count > 1 {
            return ToolOutput::error(format!("old_string occurs {count} times; add context to make it unique"));
        }
        let updated = text.replacen(old, new, 1);
        // Rewind: the prior content is kept now, the result recorded when this guard drops.
        let _checkpoint = ctx.checkpoint.as_ref().and_then(|c| c.before_write(&resolved));
        let written = file
            .seek(SeekFrom::Start(0))
            .and_then(|_| file.set_len(0))
            .and_then(|_| file.write_all(updated.as_bytes()))
            .and_then(|_| file.sync_data());
        match written {
            Ok(()) => ToolOutput::ok(format!("Replaced content in {path}")),
            Err(e) => ToolOutput::error(format!("Write failed: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::tests::Sandbox;
    use std::fs;

    fn run(sb: &Sandbox, path: &str, old: &str, new: &str) -> ToolOutput {
        let mut a = Map::new();
        a.insert("path".into(), json!(path));
        a.insert("old_string".into(), json!(old));
        a.insert("new_string".into(), json!(new));
        EditFile.run(&a, &sb.ctx)
    }

    #[test]
    fn replaces_unique_occurrence() {
        let sb = Sandbox::new();
        sb.write("a.txt", "one two three two");
        assert_eq!(run(&sb, "a.txt", "one", "1"), ToolOutput::ok("Replaced content in a.txt"));
        assert_eq!(fs::read_to_string(sb.ws.join("a.txt")).unwrap(), "1 two three two");
        let out = run(&sb, "a.txt", "two", "2");
        assert!(out.failed);
        assert_eq!(out.for_model, "Error: old_string occurs 2 times; add context to make it unique");
        let out = run(&sb, "a.txt", "four", "4");
        assert_eq!(out.for_model, "Error: old_string not found, check it (file: a.txt)");
        assert!(run(&sb, "a.txt", "", "x").failed);
        assert_eq!(run(&sb, "b.txt", "x", "y").for_model, "Error: File not found: b.txt");
        // A longer replacement and a shorter one both leave exactly the new text.
        assert!(!run(&sb, "a.txt", "three two", "3").failed);
        assert_eq!(fs::read_to_string(sb.ws.join("a.txt")).unwrap(), "1 two 3");
    }

    #[test]
    fn refuses_escapes_binary_and_skill_roots() {
        let sb = Sandbox::new();
        sb.link("outfile", &sb.outside.join("secret.txt"));
        for p in ["../outside/secret.txt", "outfile"] {
            let out = run(&sb, p, "TOPSECRET", "gone");
            assert_eq!(out.for_model, format!("Error: Path '{p}' is outside the working directory; access denied"));
        }
        assert_eq!(fs::read_to_string(sb.outside.join("secret.txt")).unwrap(), "TOPSECRET\n");
        sb.write("skills/user/s/SKILL.md", "name: s");
        let out = run(&sb, "skills/user/s/SKILL.md", "s", "t");
        assert!(out.failed && out.for_model.contains("agent_skill_manage"));
        assert_eq!(fs::read_to_string(sb.ws.join("skills/user/s/SKILL.md")).unwrap(), "name: s");
        fs::write(sb.ws.join("bin"), [0xff, 0xfe, b'a']).unwrap();
        assert!(run(&sb, "bin", "a", "b").for_model.contains("not valid UTF-8"));
    }

    /// Every spelling of a bad or odd argument keeps the wording the model always got; the
    /// first argument at fault (in the order path, old_string, new_string) is reported.
    #[test]
    fn argument_spellings() {
        let sb = Sandbox::new();
        sb.write("a.txt", "one");
        for (args, text) in [
            (json!({}), "Error: missing required argument 'path'"),
            (json!({"new_string": 1, "old_string": 2}), "Error: missing required argument 'path'"),
            (json!({"path": 1, "old_string": 2}), "Error: argument 'path' must be a string"),
            (json!({"path": "a.txt"}), "Error: missing required argument 'old_string'"),
            (json!({"path": "a.txt", "new_string": 5}), "Error: missing required argument 'old_string'"),
            (
                json!({"path": "a.txt", "old_string": 1, "new_string": null}),
                "Error: argument 'old_string' must be a string",
            ),
            (json!({"path": "a.txt", "old_string": "one"}), "Error: missing required argument 'new_string'"),
            (
                json!({"path": "a.txt", "old_string": "one", "new_string": null}),
                "Error: missing required argument 'new_string'",
            ),
            (
                json!({"path": "a.txt", "old_string": "one", "new_string": 1}),
                "Error: argument 'new_string' must be a string",
            ),
            (
                json!({"path": "a.txt", "old_string": "one", "new_string": "1", "all": true}),
                "Replaced content in a.txt",
            ),
        ] {
            assert_eq!(sb.call(&EditFile, args.clone()).for_model, text, "{args}");
        }
        assert_eq!(fs::read_to_string(sb.ws.join("a.txt")).unwrap(), "1");
    }
}
