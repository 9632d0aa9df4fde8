//! `write_file` (docs/tools-and-mcp.md §3): creates or overwrites a UTF-8 file inside the workspace,
//! refusing the Skill roots; runs on the turn's worker thread. The open goes through
//! [`Workspace::open_write`], so a symlink raced into the path cannot redirect the write.

use std::io::Write;

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::tool::args::parse_args;
use crate::tool::{Tool, ToolOutput, TurnCtx};

pub(crate) struct WriteFile;

#[derive(Deserialize)]
struct Args {
    path: String,
    content: String,
}

impl Tool for WriteFile {
    fn name(&self) -> &str {
        "write_file"
    }

    fn description(&self) -> &str {
        "Create or overwrite a text file in the working directory (parent directories are created). \
         Skill directories are protected: use agent_skill_manage for Skills."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path relative to the working directory."},
                "content": {"type": "string", "description": "The complete new file content."}
            },
            "required": ["path", "content"]
        })
    }

    fn run(&self, args: &Map<String, Value>, ctx: &TurnCtx) -> ToolOutput {
        let Args { path, content } = match parse_args(args) {
            Ok(a) => a,
            Err(e) => return e,
        };
        let path = path.as_str();
        let (ws, resolved) = match ctx.resolve_path(path) {
            Ok(v) => v,
            Err(e) => return ToolOutput::error(e),
        };
        // Rewind: the prior state (and the parents the open may create) is kept now, the
        // result recorded when this guard drops.
        let _checkpoint = ctx.checkpoint.as_ref().and_then(|c| c.before_write(&resolved));
        let mut file = match ws.open_write(&resolved, path, true) {
            Ok(f) => f,
            Err(e) => return ToolOutput::error(e),
        };
        // Truncate only now that the descriptor is known to be the right file.
        let written = file.set_len(0).and_then(|_| file.write_all(content.as_bytes())).and_then(|_| file.sync_data());
        match written {
            Ok(()) => ToolOutput::ok(format!("Wrote {path} ({} chars)", content.chars().count())),
            Err(e) => ToolOutput::error(format!("Write failed: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::tests::Sandbox;
    use std::fs;

    fn run(sb: &Sandbox, path: &str, content: &str) -> ToolOutput {
        let mut a = Map::new();
        a.insert("path".into(), json!(path));
        a.insert("content".into(), json!(content));
        WriteFile.run(&a, &sb.ctx)
    }

    #[test]
    fn writes_and_overwrites() {
        let sb = Sandbox::new();
        assert_eq!(run(&sb, "d/e/f.txt", "héllo"), ToolOutput::ok("Wrote d/e/f.txt (5 chars)"));
        assert_eq!(fs::read_to_string(sb.ws.join("d/e/f.txt")).unwrap(), "héllo");
        assert_eq!(run(&sb, "d/e/f.txt", "x"), ToolOutput::ok("Wrote d/e/f.txt (1 chars)"));
        assert_eq!(fs::read_to_string(sb.ws.join("d/e/f.txt")).unwrap(), "x");
        // A symlink to a file inside the workspace writes the real file.
        sb.link("alias", &sb.ws.join("d/e/f.txt"));
        assert!(!run(&sb, "alias", "y").failed);
        assert_eq!(fs::read_to_string(sb.ws.join("d/e/f.txt")).unwrap(), "y");
    }

    #[test]
    fn refuses_escapes_and_skill_roots() {
        let sb = Sandbox::new();
        sb.link("out", &sb.outside);
        sb.link("outfile", &sb.outside.join("secret.txt"));
        sb.link("dangling", &sb.outside.join("new.txt"));
        let abs = sb.outside.join("abs.txt").display().to_string();
        for p in ["../outside/x.txt", "out/x.txt", "outfile", "dangling", abs.as_str()] {
            let out = run(&sb, p, "pwned");
            assert!(out.failed, "{p}");
            assert_eq!(out.for_model, format!("Error: Path '{p}' is outside the working directory; access denied"));
        }
        assert_eq!(fs::read_to_string(sb.outside.join("secret.txt")).unwrap(), "TOPSECRET\n");
        assert_eq!(fs::read_dir(&sb.outside).unwrap().count(), 1);

        let out = run(&sb, "skills/user/demo/SKILL.md", "x");
        assert!(out.failed && out.for_model.contains("agent_skill_manage"));
        assert!(!sb.ws.join("skills/user/demo").exists());
        // Through a symlink into the protected root as well.
        sb.link("sneaky", &sb.ws.join("skills/user"));
        let out = run(&sb, "sneaky/SKILL.md", "x");
        assert!(out.failed && out.for_model.contains("agent_skill_manage"));
        assert!(!sb.ws.join("skills/user/SKILL.md").exists());
        assert!(run(&sb, "", "x").failed);
    }

    /// Every spelling of a bad or odd argument keeps the wording the model always got; the
    /// first argument at fault (in the order path, content) is reported.
    #[test]
    fn argument_spellings() {
        let sb = Sandbox::new();
        for (args, text) in [
            (json!({}), "Error: missing required argument 'path'"),
            (json!({"content": "x"}), "Error: missing required argument 'path'"),
            (json!({"content": 5}), "Error: missing required argument 'path'"),
            (json!({"content": 5, "path": null}), "Error: missing required argument 'path'"),
            (json!({"content": 5, "path": 1}), "Error: argument 'path' must be a string"),
            (json!({"path": "a.txt"}), "Error: missing required argument 'content'"),
            (json!({"path": "a.txt", "content": null}), "Error: missing required argument 'content'"),
            (json!({"path": "a.txt", "content": 5}), "Error: argument 'content' must be a string"),
            (json!({"path": "a.txt", "content": ["x"]}), "Error: argument 'content' must be a string"),
            (json!({"path": "a.txt", "content": "x", "mode": "append"}), "Wrote a.txt (1 chars)"),
        ] {
            assert_eq!(sb.call(&WriteFile, args.clone()).for_model, text, "{args}");
        }
        assert_eq!(fs::read_to_string(sb.ws.join("a.txt")).unwrap(), "x");
    }
}
