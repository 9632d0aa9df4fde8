//! `list_dir` (docs/tools-and-mcp.md §3): lists one workspace directory, directories first, then
//! files, each sorted by name, at most 200 entries; runs on the turn's worker thread. A symlink
//! is classified by its target only when that target is inside the workspace; one leading out
//! (or broken) is shown as `[link]` without revealing anything about its target.

use std::fs;

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::tool::args::parse_args;
use crate::tool::{Tool, ToolOutput, TurnCtx};
use crate::workspace::{read_names, resolve_from};

/// Entries shown before the "(showing first …)" note.
pub(crate) const MAX_ENTRIES: usize = 200;

pub(crate) struct ListDir;

#[derive(Deserialize)]
struct Args {
    /// Absent, null or "": the workspace itself.
    path: Option<String>,
}

impl Tool for ListDir {
    fn name(&self) -> &str {
        "list_dir"
    }

    fn description(&self) -> &str {
        "List the entries of a directory in the working directory (empty path = the working \
         directory itself). Directories are listed first."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"path": {"type": "string", "description": "Directory relative to the working directory; empty for the working directory.", "default": ""}},
            "required": []
        })
    }

    fn run(&self, args: &Map<String, Value>, ctx: &TurnCtx) -> ToolOutput {
        let Args { path } = match parse_args(args) {
            Ok(a) => a,
            Err(e) => return e,
        };
        let path = path.as_deref().unwrap_or("");
        let shown = if path.is_empty() { "(workspace)" } else { path };
        let (ws, dir) = match ctx.resolve_path(path) {
            Ok(v) => v,
            Err(e) => return ToolOutput::error(e),
        };
        match fs::metadata(&dir) {
            Err(_) => return ToolOutput::error(format!("Directory not found: {shown}")),
            Ok(m) if !m.is_dir() => return ToolOutput::error(format!("{shown} is not a directory")),
            Ok(_) => {}
        }
        // Listed through a descriptor opened without following symlinks: `dir` swapped for a
        // link after the checks above still lists the workspace directory or nothing.
        let listed =
            ws.open_dir(&dir, shown).and_then(|fd| read_names(&fd).map_err(|e| format!("Listing {shown} failed: {e}")));
        let names = match listed {
            Ok(names) => names,
            Err(e) => return ToolOutput::error(e),
        };
        // (is_file, name, label): sorting the tuple gives non-files first, then by name.
        let mut entries: Vec<(bool, String, &str)> = Vec::new();
        for (os_name, ft) in names {
            let name = os_name.to_string_lossy().into_owned();
            let (is_file, label) = if ft.is_symlink() {
                match resolve_from(&dir, os_name.as_ref()) {
                    Ok(real) if ws.contains(&real) => match fs::metadata(&real) {
                        Ok(m) if m.is_file() => (true, "[file]"),
                        Ok(m) if m.is_dir() => (false, "[dir]"),
                        _ => (false, "[link]"),
                    },
                    _ => (false, "[link]"),
                }
            } else if ft.is_file() {
                (true, "[file]")
            } else if ft.is_dir() {
                (false, "[dir]")
            } else {
                (false, "[other]")
            };
            entries.push((is_file, name, label));
        }
        entries.sort();
        let total = entries.len();
        let mut out = format!("Directory: {shown}\n");
        for (_, name, label) in entries.iter().take(MAX_ENTRIES) {
            out.push_str(&format!("\n{label} {name}"));
        }
        if total == 0 {
            out.push_str("\n(empty)");
        }
        if total > MAX_ENTRIES {
            out.push_str(&format!("\n\n(showing first {MAX_ENTRIES} of {total})"));
        }
        ToolOutput::ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::tests::Sandbox;

    fn run(sb: &Sandbox, path: Option<&str>) -> ToolOutput {
        let mut a = Map::new();
        if let Some(p) = path {
            a.insert("path".into(), json!(p));
        }
        ListDir.run(&a, &sb.ctx)
    }

    #[test]
    fn lists_dirs_first_sorted() {
        let sb = Sandbox::new();
        sb.write("b.txt", "");
        sb.write("a.txt", "");
        sb.write("zdir/x", "");
        sb.link("out", &sb.outside);
        sb.link("in", &sb.ws.join("zdir"));
        assert_eq!(
            run(&sb, None).for_model,
            "Directory: (workspace)\n\n[dir] in\n[link] out\n[dir] skills\n[dir] zdir\n[file] a.txt\n[file] b.txt"
        );
        assert_eq!(run(&sb, Some("zdir")).for_model, "Directory: zdir\n\n[file] x");
        // The symlinked directory lists its (inside) target.
        assert_eq!(run(&sb, Some("in")).for_model, "Directory: in\n\n[file] x");
    }

    #[test]
    fn caps_and_refusals() {
        let sb = Sandbox::new();
        for i in 0..205 {
            sb.write(&format!("many/f{i:03}"), "");
        }
        let out = run(&sb, Some("many")).for_model;
        assert!(out.ends_with("[file] f199\n\n(showing first 200 of 205)"), "{out}");
        sb.link("out", &sb.outside);
        assert_eq!(
            run(&sb, Some("out")).for_model,
            "Error: Path 'out' is outside the working directory; access denied"
        );
        assert_eq!(run(&sb, Some("..")).for_model, "Error: Path '..' is outside the working directory; access denied");
        assert_eq!(run(&sb, Some("nope")).for_model, "Error: Directory not found: nope");
        assert_eq!(run(&sb, Some("many/f001")).for_model, "Error: many/f001 is not a directory");
    }

    /// `path` is optional: absent, null and "" all list the workspace; any other non-string
    /// is refused with the model's usual wording; unknown keys are ignored.
    #[test]
    fn argument_spellings() {
        let sb = Sandbox::new();
        sb.write("d/x", "");
        let top = "Directory: (workspace)\n\n[dir] d\n[dir] skills";
        for (args, text) in [
            (json!({}), top),
            (json!({"path": null}), top),
            (json!({"path": ""}), top),
            (json!({"path": "d", "recursive": true}), "Directory: d\n\n[file] x"),
            (json!({"path": 5}), "Error: argument 'path' must be a string"),
            (json!({"path": ["d"]}), "Error: argument 'path' must be a string"),
            (json!({"path": false}), "Error: argument 'path' must be a string"),
        ] {
            assert_eq!(sb.call(&ListDir, args.clone()).for_model, text, "{args}");
        }
    }
}
