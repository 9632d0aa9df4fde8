//! The crate's layers (ARCHITECTURE.md "Layers"): every top-level module of `src/` sits in one
//! layer and imports only modules of lower layers, so the module graph has no cycle. Read from
//! the source the way `modgraph.py` reads it: every `crate::x` path (imports, full paths, doc
//! links such as [`crate::x::Y`]) and every name in a grouped `use crate::{a, b::c}`, in each
//! file up to its first `#[cfg(test)]` (tests may reach anywhere). No server is started.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The layers, top first; a module imports only modules in the rows below its own. A new
/// top-level module gets a row here and in ARCHITECTURE.md's drawing.
const LAYERS: &[&[&str]] = &[
    &["app", "acp", "startup"],
    &["http", "housekeep"],
    &["ws"],
    &["agent"],
    &["mcp"],
    &["skills", "memory_jobs"],
    &["tool"],
    &["bus", "checkpoints", "projects", "search"],
    &["sandbox", "workspace"],
    &["config", "logging", "net", "security", "store", "llm"],
    &["secrets", "wire", "ledger"],
    &["util"],
];

/// One `crate::` reference: the module it names, where, and how it is spelt.
#[derive(Debug, PartialEq)]
struct Reference {
    module: String,
    line: usize,
    text: String,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The top-level modules of `src/`: its `.rs` files but `lib.rs` and `main.rs`, and its
/// directories but `bin/`.
fn top_level_modules(src: &Path) -> BTreeSet<String> {
    let mut mods = BTreeSet::new();
    for entry in fs::read_dir(src).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        let name = path.file_stem().and_then(|s| s.to_str()).expect("a UTF-8 name").to_string();
        let module = if path.is_dir() {
            name != "bin"
        } else {
            path.extension().is_some_and(|e| e == "rs") && name != "lib" && name != "main"
        };
        if module {
            mods.insert(name);
        }
    }
    mods
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("a readable directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The `crate::` references of one file's production code (everything before its first
/// `#[cfg(test)]`): the first segment after each `crate::`, and each comma-separated item's
/// first segment inside a grouped `use crate::{…}` (up to the last `}` before the `;`).
fn references(text: &str) -> Vec<Reference> {
    let code = &text[..text.find("#[cfg(test)]").unwrap_or(text.len())];
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let mut refs = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        if code[..at].chars().next_back().is_some_and(is_ident) {
            continue;
        }
        let rest = &code[at + "crate::".len()..];
        let module: String = rest.chars().take_while(|&c| is_ident(c)).collect();
        if module.starts_with(|c: char| c.is_ascii_lowercase() || c == '_') {
            let end = rest.find(|c: char| !is_ident(c) && c != ':').unwrap_or(rest.len());
            refs.push(Reference { module, line: line_of(at), text: format!("crate::{}", &rest[..end]) });
        }
        let is_use = code[..at].trim_end().ends_with("use") && code[..at].ends_with(char::is_whitespace);
        if let (true, Some(group)) = (is_use, rest.strip_prefix('{')) {
            let statement = &group[..group.find(';').unwrap_or(group.len())];
            let Some(close) = statement.rfind('}') else { continue };
            for item in statement[..close].split(',').map(str::trim).filter(|i| !i.is_empty()) {
                let module = item.split("::").next().unwrap_or(item).to_string();
                refs.push(Reference { module, line: line_of(at), text: format!("use crate::{{{item}, …}}") });
            }
        }
    }
    refs
}

/// Every edge that does not point to a lower layer, as `from -> to` lines naming the file.
fn violations() -> Vec<String> {
    let src = root().join("src");
    let mods = top_level_modules(&src);
    let layer_of = |m: &str| LAYERS.iter().position(|row| row.contains(&m)).map(|i| LAYERS.len() - 1 - i);
    let mut found = Vec::new();
    for m in &mods {
        if layer_of(m).is_none() {
            found.push(format!("src/{m}: a top-level module in no layer (add it to LAYERS and ARCHITECTURE.md)"));
        }
    }
    for name in LAYERS.iter().flat_map(|row| row.iter()) {
        if !mods.contains(*name) {
            found.push(format!("{name}: in LAYERS but not a module of src/"));
        }
    }
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    for file in files {
        let rel = file.strip_prefix(&src).expect("below src/");
        let first = rel.components().next().expect("a path").as_os_str().to_str().expect("UTF-8");
        let from = first.strip_suffix(".rs").unwrap_or(first);
        let Some(from_layer) = layer_of(from) else { continue };
        let text = fs::read_to_string(&file).expect("a UTF-8 source file");
        for r in references(&text) {
            if r.module == from || !mods.contains(&r.module) {
                continue;
            }
            let to_layer = layer_of(&r.module).expect("every module has a layer (checked above)");
            if to_layer >= from_layer {
                found.push(format!(
                    "{from} (layer {from_layer}) -> {} (layer {to_layer}): src/{}:{} `{}`",
                    r.module,
                    rel.display(),
                    r.line,
                    r.text
                ));
            }
        }
    }
    found
}

#[test]
fn every_module_imports_only_lower_layers() {
    let found = violations();
    assert!(
        found.is_empty(),
        "edges that do not point to a lower layer (move the item down, or hand it in from above):\n{}",
        found.join("\n")
    );
}

/// ARCHITECTURE.md draws the same rows, top first: the first fenced block after "## Layers",
/// one row a line, the layer's number and then its modules.
#[test]
fn architecture_md_draws_these_layers() {
    let doc = fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let section = &doc[doc.find("\n## Layers\n").expect("a \"## Layers\" section")..];
    let block = section.split("```").nth(1).expect("a fenced drawing in the Layers section");
    let drawn: Vec<Vec<&str>> = block
        .lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().skip(1).collect())
        .collect();
    let declared: Vec<Vec<&str>> = LAYERS.iter().map(|row| row.to_vec()).collect();
    assert_eq!(drawn, declared);
    let numbers: Vec<&str> = block.lines().skip(1).filter_map(|l| l.split_whitespace().next()).collect();
    let expected: Vec<String> = (0..LAYERS.len()).rev().map(|n| n.to_string()).collect();
    assert_eq!(numbers, expected);
}

#[test]
fn references_are_read_from_paths_groups_and_doc_links_before_the_tests() {
    let text = "use crate::store::chats::Record;\n\
                use crate::{wire::Event, util};\n\
                /// See [`crate::agent::turn::run`].\n\
                let x = crate::bus::Bus::new(); let y = mycrate::ws::X; let z = $crate::tool::T;\n\
                #[cfg(test)]\n\
                use crate::app::start;\n";
    let got: Vec<(String, usize)> = references(text).into_iter().map(|r| (r.module, r.line)).collect();
    let want = [("store", 1), ("wire", 2), ("util", 2), ("agent", 3), ("bus", 4), ("tool", 4)];
    assert_eq!(got, want.map(|(m, l)| (m.to_string(), l)));
}
