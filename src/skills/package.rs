//! One package on disk: the loader every path goes through (catalog, store, import, validate;
//! docs/skills.md §3), support-path rules for API-supplied files, `_meta.json`, byte-exact tree
//! copies for snapshots, and the sanitising of diagnostics. Pure file work; any thread.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

use serde_json::{json, Map, Value};

use super::frontmatter::{self, Parsed};
use super::{Result, SkillError, Source, MAX_SKILL_MD_BYTES, MAX_SUPPORT_FILE_BYTES, SUPPORT_DIRS};
use crate::util::{fsx, rand, text, time};

/// A package that passed every loader check.
#[derive(Debug, Clone)]
pub(crate) struct Package {
    pub(crate) parsed: Parsed,
    /// `_meta.json` as an object (`{}` when absent or not an object).
    pub(crate) meta: Map<String, Value>,
    pub(crate) enabled: bool,
}

/// The directory name of `dir` as text (lossy for non-UTF-8 names, which then fail the name rule).
pub(crate) fn dir_name(dir: &Path) -> String {
    dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// Python truthiness of a JSON value (`_meta.json` `enabled`).
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// Reads and validates the package in `dir`; the frontmatter name must equal `expected`
/// (the directory name when `None`).
pub(crate) fn read_package(dir: &Path, expected: Option<&str>) -> Result<Package> {
    let meta = fs::metadata(dir).map_err(|_| SkillError::not_found("Skill package not found"))?;
    if !meta.is_dir() {
        return Err(SkillError::invalid("Skill package must be a directory"));
    }
    let root = fs::canonicalize(dir)?;
    let mut entries: Vec<(String, fs::DirEntry)> = fs::read_dir(dir)?
        .map(|e| e.map(|e| (e.file_name().to_string_lossy().into_owned(), e)))
        .collect::<Result<_, _>>()?;
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, entry) in &entries {
        let allowed = name == "SKILL.md" || name == "_meta.json" || SUPPORT_DIRS.contains(&name.as_str());
        if !allowed {
            return Err(SkillError::invalid(format!("unsupported package entry: {}", bounded(name, 80))));
        }
        if entry.file_type()?.is_symlink() {
            check_link_inside(&root, &entry.path(), name)?;
        }
    }

    let skill_md = dir.join("SKILL.md");
    let md_meta = match fs::metadata(&skill_md) {
        Ok(m) => m,
        Err(_) => return Err(SkillError::not_found("SKILL.md not found")),
    };
    if !md_meta.is_file() {
        return Err(SkillError::not_found("SKILL.md not found"));
    }
    if md_meta.len() > MAX_SKILL_MD_BYTES as u64 {
        return Err(SkillError::invalid("SKILL.md is too large"));
    }
    let bytes = read_capped(&skill_md, MAX_SKILL_MD_BYTES as u64)
        .ok_or_else(|| SkillError::invalid("SKILL.md is too large"))??;
    let raw = String::from_utf8(bytes).map_err(|_| SkillError::invalid("SKILL.md must be UTF-8"))?;
    let dname = dir_name(dir);
    let parsed = frontmatter::parse(&raw, Some(expected.unwrap_or(&dname)))?;

    let meta_path = dir.join("_meta.json");
    let meta = if entries.iter().any(|(n, _)| n == "_meta.json") {
        let bytes = read_capped(&meta_path, 1 << 20)
            .ok_or_else(|| SkillError::invalid("invalid _meta.json"))?
            .map_err(|_| SkillError::invalid("invalid _meta.json"))?;
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(Value::Object(m)) => m,
            Ok(_) => Map::new(),
            Err(_) => return Err(SkillError::invalid("invalid _meta.json")),
        }
    } else {
        Map::new()
    };
    let enabled = meta.get("enabled").map(truthy).unwrap_or(true);

    for support in SUPPORT_DIRS {
        let p = dir.join(support);
        match fs::symlink_metadata(&p) {
            Err(_) => continue,
            Ok(_) if !fs::metadata(&p).map(|m| m.is_dir()).unwrap_or(false) => {
                return Err(SkillError::invalid(format!("{support} must be a directory")));
            }
            Ok(_) => walk_support(&root, &p, support, 0)?,
        }
    }
    Ok(Package { parsed, meta, enabled })
}

/// Reads at most `cap` bytes; `None` when the file is longer (it grew after the size check).
fn read_capped(path: &Path, cap: u64) -> Option<std::io::Result<Vec<u8>>> {
    let f = match fs::File::open(path) {
        Ok(f) => f,
        Err(e) => return Some(Err(e)),
    };
    let mut buf = Vec::new();
    match f.take(cap + 1).read_to_end(&mut buf) {
        Ok(_) if buf.len() as u64 > cap => None,
        Ok(_) => Some(Ok(buf)),
        Err(e) => Some(Err(e)),
    }
}

/// Support trees nest at most this deep (directories below the support directory); deeper
/// trees are refused rather than walked forever.
pub(crate) const MAX_SUPPORT_DEPTH: usize = 32;
/// Longest package path accepted from an archive or the API (bytes): with the depth limit it
/// keeps every path the loader walks far below the file system's 4,096-byte `PATH_MAX`.
pub(crate) const MAX_PATH_BYTES: usize = 1024;
/// Longest path component (bytes): the file system's own `NAME_MAX`.
pub(crate) const MAX_COMPONENT_BYTES: usize = 255;

/// Refuses, before anything is written, a package-relative path (`/`-separated) that the
/// loader would refuse once written for nesting deeper than [`MAX_SUPPORT_DEPTH`], with the
/// loader's own message. `is_dir`: the path names a directory rather than a file.
pub(crate) fn check_depth(path: &str, is_dir: bool) -> Result<()> {
    let parts: Vec<&str> = path.split('/').collect();
    let dirs_below_support = parts.len().saturating_sub(if is_dir { 1 } else { 2 });
    if dirs_below_support > MAX_SUPPORT_DEPTH {
        let walked = parts[..MAX_SUPPORT_DEPTH + 2].join("/");
        return Err(SkillError::invalid(format!("unsupported package entry: {}", bounded(&walked, 120))));
    }
    Ok(())
}

fn walk_support(root: &Path, dir: &Path, rel: &str, depth: usize) -> Result<()> {
    if depth > MAX_SUPPORT_DEPTH {
        return Err(SkillError::invalid(format!("unsupported package entry: {}", bounded(rel, 120))));
    }
    let mut entries: Vec<fs::DirEntry> = fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = format!("{rel}/{}", entry.file_name().to_string_lossy());
        let ft = entry.file_type()?;
        let path = entry.path();
        if ft.is_symlink() {
            let target = check_link_inside(root, &path, &name)?;
            let m = fs::metadata(&target)?;
            if m.is_file() && m.len() > MAX_SUPPORT_FILE_BYTES {
                return Err(SkillError::invalid(format!("supporting file is too large: {}", bounded(&name, 120))));
            }
            // A link to a directory inside the package is not followed: its target is
            // walked where it really lives, and following could loop.
        } else if ft.is_dir() {
            walk_support(root, &path, &name, depth + 1)?;
        } else if ft.is_file() {
            if entry.metadata()?.len() > MAX_SUPPORT_FILE_BYTES {
                return Err(SkillError::invalid(format!("supporting file is too large: {}", bounded(&name, 120))));
            }
        } else {
            // FIFOs, sockets and devices could block or leak a reader.
            return Err(SkillError::invalid(format!("unsupported package entry: {}", bounded(&name, 120))));
        }
    }
    Ok(())
}

/// Resolves the symlink at `path` and requires the target inside `root` (canonical).
fn check_link_inside(root: &Path, path: &Path, label: &str) -> Result<PathBuf> {
    let escapes = || SkillError::invalid(format!("symlink escapes package: {}", bounded(label, 120)));
    let target = fs::canonicalize(path).map_err(|_| escapes())?;
    if target.starts_with(root) && target != root {
        Ok(target)
    } else {
        Err(escapes())
    }
}

/// Normalises an API-supplied support path (`\` -> `/`, trimmed) and checks it.
pub(crate) fn check_support_path(raw: &str) -> Result<String> {
    let p = raw.replace('\\', "/");
    let p = p.trim();
    let relative = SkillError::invalid("support path must be package-relative");
    if p.is_empty() || p.starts_with('/') || p.contains('\0') || has_drive(p) {
        return Err(relative);
    }
    let parts: Vec<&str> = p.split('/').collect();
    if parts.iter().any(|c| c.is_empty() || *c == "." || *c == "..") {
        return Err(relative);
    }
    if parts.len() < 2 || !SUPPORT_DIRS.contains(&parts[0]) {
        return Err(SkillError::invalid("support path must be under references, templates, scripts, or assets"));
    }
    if p.len() > MAX_PATH_BYTES || parts.iter().any(|c| c.len() > MAX_COMPONENT_BYTES) {
        return Err(SkillError::invalid("support path is too long"));
    }
    check_depth(p, false)?;
    Ok(parts.join("/"))
}

/// `C:` style prefixes (rejected on every platform so packages stay portable).
pub(crate) fn has_drive(p: &str) -> bool {
    let b = p.as_bytes();
    b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':'
}

/// Writes a fresh package (SKILL.md, support files as UTF-8 text, `_meta.json`) into `dir`,
/// which must not exist yet.
pub(crate) fn write_package(
    dir: &Path,
    content: &str,
    support: &BTreeMap<String, String>,
    meta: &Map<String, Value>,
) -> Result<()> {
    fsx::create_private_dir(dir)?;
    fsx::write_private(&dir.join("SKILL.md"), content.as_bytes())?;
    for (rel, body) in support {
        let rel = check_support_path(rel)?;
        let target = dir.join(&rel);
        if let Some(parent) = target.parent() {
            fsx::create_private_dirs(parent)?;
        }
        if target.exists() {
            return Err(SkillError::invalid(format!("duplicate support path: {}", bounded(&rel, 120))));
        }
        fsx::write_private(&target, body.as_bytes())?;
    }
    write_meta(dir, meta)
}

/// `_meta.json`, 2-space indent, no trailing newline, atomic.
pub(crate) fn write_meta(dir: &Path, meta: &Map<String, Value>) -> Result<()> {
    let text = serde_json::to_string_pretty(meta).map_err(|e| SkillError::Internal(e.to_string()))?;
    fsx::write_atomic(&dir.join("_meta.json"), text.as_bytes(), false)?;
    Ok(())
}

/// The server-owned `_meta.json` written on create and import.
pub(crate) fn fresh_meta(source: Source, enabled: bool, reason: Option<&str>) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("source".into(), json!(source.as_str()));
    m.insert("enabled".into(), json!(enabled));
    m.insert("storage_version".into(), json!(1));
    m.insert("updated_at".into(), json!(time::now_epoch()));
    m.insert("agentCreated".into(), json!(source == Source::Agent));
    if let Some(r) = reason.filter(|r| !r.trim().is_empty()) {
        m.insert("creation_reason".into(), json!(r.trim()));
    }
    m
}

/// Copies a tree byte for byte; symlinks are recreated as links (they were validated to stay
/// inside the package, and a relative link stays valid in the copy).
pub(crate) fn copy_tree(src: &Path, dst: &Path) -> std::io::Result<()> {
    copy_level(src, dst, 0)
}

/// One directory of [`copy_tree`], `depth` levels below the package root. The loader never
/// accepts a tree deeper than its support walk, so a deeper one (changed on disk since) is
/// refused instead of recursed into.
fn copy_level(src: &Path, dst: &Path, depth: usize) -> std::io::Result<()> {
    if depth > MAX_SUPPORT_DEPTH + 1 {
        return Err(std::io::Error::other("package tree is nested too deeply"));
    }
    fsx::create_private_dir(dst)?;
    for entry in fs::read_dir(src)? {
        let entry = entry?;
        let ft = entry.file_type()?;
        let to = dst.join(entry.file_name());
        if ft.is_symlink() {
            let link = fs::read_link(entry.path())?;
            #[cfg(unix)]
            std::os::unix::fs::symlink(link, &to)?;
            #[cfg(not(unix))]
            {
                let _ = link;
                fsx::copy_private(&entry.path(), &to)?;
            }
        } else if ft.is_dir() {
            copy_level(&entry.path(), &to, depth + 1)?;
        } else if ft.is_file() {
            fsx::copy_private(&entry.path(), &to)?;
        }
    }
    Ok(())
}

/// A hidden sibling name such as `.<stem>.<16 hex>.<ext>` inside `parent`.
pub(crate) fn hidden_temp(parent: &Path, stem: &str, ext: &str) -> PathBuf {
    parent.join(format!(".{stem}.{}.{ext}", rand::hex(8)))
}

/// Removes a directory tree, ignoring "already gone"; its depth costs no stack
/// ([`fsx::remove_tree`]).
pub(crate) fn remove_tree(p: &Path) -> std::io::Result<()> {
    fsx::remove_tree(p)
}

/// `<epoch ms>-<8 hex>`: snapshot versions and evidence ids (string order = time order).
pub(crate) fn version_id() -> String {
    format!("{}-{}", time::now_millis(), rand::hex(4))
}

/// Control characters become spaces, trimmed, at most `max` chars (`...` when cut).
pub(crate) fn bounded(s: &str, max: usize) -> String {
    let clean: String = s.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    let clean = clean.trim();
    if text::char_len(clean) > max {
        format!("{}...", text::take_chars(clean, max - 3))
    } else {
        clean.to_string()
    }
}

/// A diagnostic safe to show: the given paths and any absolute path become `<path>`,
/// secrets are redacted, control chars become spaces, at most 240 chars.
pub(crate) fn sanitize(msg: &str, paths: &[&Path]) -> String {
    let mut s = msg.to_string();
    let mut known: Vec<String> = paths
        .iter()
        .flat_map(|p| {
            let mut v = vec![p.display().to_string()];
            if let Ok(c) = fs::canonicalize(p) {
                v.push(c.display().to_string());
            }
            v
        })
        .filter(|p| p.len() > 1 && !"<path>".contains(p.as_str()))
        .collect();
    known.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in known {
        // The rest of the path token (file names below the root) goes too.
        while let Some(at) = s.find(&p) {
            let end = s[at..]
                .find(|c: char| c.is_whitespace() || matches!(c, '\'' | '"' | ')' | ','))
                .map_or(s.len(), |e| at + e);
            s.replace_range(at..end, "<path>");
        }
    }
    let s = strip_absolute_paths(&s);
    bounded(&crate::util::redact::redact(&s), 240)
}

/// Replaces POSIX (`/a/b`), Windows (`C:\a`, `C:/a`) and UNC (`\\srv\x`) absolute paths.
fn strip_absolute_paths(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    let boundary =
        |i: usize| i == 0 || matches!(chars[i - 1], ' ' | '\'' | '"' | '(' | '=' | ':' | '[' | ',' | '\t' | '\n');
    let stop = |c: char| c.is_whitespace() || matches!(c, '\'' | '"' | ')' | ',' | ']');
    while i < chars.len() {
        let c = chars[i];
        let posix = c == '/' && boundary(i) && chars.get(i + 1).is_some_and(|n| !n.is_whitespace() && *n != '/');
        let drive = c.is_ascii_alphabetic()
            && boundary(i)
            && chars.get(i + 1) == Some(&':')
            && matches!(chars.get(i + 2), Some('\\') | Some('/'));
        let unc = c == '\\' && chars.get(i + 1) == Some(&'\\') && boundary(i);
        if posix || drive || unc {
            out.push_str("<path>");
            while i < chars.len() && !stop(chars[i]) {
                i += 1;
            }
            continue;
        }
        out.push(c);
        i += 1;
    }
    out
}

/// Where a package lives relative to its root must be a plain single component.
pub(crate) fn is_plain_component(s: &str) -> bool {
    let mut comps = Path::new(s).components();
    matches!((comps.next(), comps.next()), (Some(Component::Normal(_)), None)) && !s.contains('/') && !s.contains('\\')
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("cc-skills-{tag}-{}", rand::hex(6)));
        fs::create_dir_all(&d).unwrap();
        d
    }

    pub(crate) fn skill_md(name: &str, extra: &str) -> String {
        format!("---\nname: {name}\ndescription: Does {name} things\n{extra}---\n\n# {name}\n\nSteps.\n")
    }

    pub(crate) fn make_pkg(root: &Path, name: &str, extra: &str) -> PathBuf {
        let d = root.join(name);
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("SKILL.md"), skill_md(name, extra)).unwrap();
        d
    }

    fn err(dir: &Path) -> String {
        read_package(dir, None).unwrap_err().message().to_string()
    }

    #[test]
    fn loads_a_valid_package_with_support_files() {
        let root = tmp("pkg-ok");
        let d = make_pkg(&root, "demo", "");
        fs::create_dir_all(d.join("references/deep")).unwrap();
        fs::write(d.join("references/deep/a.md"), "a").unwrap();
        fs::create_dir(d.join("assets")).unwrap();
        fs::write(d.join("assets/logo.bin"), [0u8, 255, 1, 2]).unwrap();
        fs::write(d.join("_meta.json"), r#"{"enabled": false}"#).unwrap();
        let p = read_package(&d, None).unwrap();
        assert_eq!(p.parsed.manifest.name, "demo");
        assert!(!p.enabled);
        fs::write(d.join("_meta.json"), "[1,2]").unwrap();
        assert!(read_package(&d, None).unwrap().enabled);
        fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn loader_rules_one_by_one() {
        let root = tmp("pkg-rules");
        let d = make_pkg(&root, "demo", "");
        fs::write(d.join("notes.txt"), "x").unwrap();
        assert_eq!(err(&d), "unsupported package entry: notes.txt");
        fs::remove_file(d.join("notes.txt")).unwrap();
        fs::write(d.join(".hidden"), "x").unwrap();
        assert_eq!(err(&d), "unsupported package entry: .hidden");
        fs::remove_file(d.join(".hidden")).unwrap();

        fs::write(d.join("_meta.json"), "{not json").unwrap();
        assert_eq!(err(&d), "invalid _meta.json");
        fs::write(d.join("_meta.json"), [0xffu8, 0xfe]).unwrap();
        assert_eq!(err(&d), "invalid _meta.json");
        fs::remove_file(d.join("_meta.json")).unwrap();

        fs::write(d.join("scripts"), "x").unwrap();
        assert_eq!(err(&d), "scripts must be a directory");
        fs::remove_file(d.join("scripts")).unwrap();

        fs::create_dir(d.join("assets")).unwrap();
        fs::write(d.join("assets/big.bin"), vec![7u8; 200_001]).unwrap();
        assert_eq!(err(&d), "supporting file is too large: assets/big.bin");
        fs::write(d.join("assets/big.bin"), vec![7u8; 200_000]).unwrap();
        assert!(read_package(&d, None).is_ok());

        #[cfg(unix)]
        {
            use std::os::unix::fs::symlink;
            symlink("/etc/hostname", d.join("assets/escape")).unwrap();
            assert_eq!(err(&d), "symlink escapes package: assets/escape");
            fs::remove_file(d.join("assets/escape")).unwrap();
            symlink("../SKILL.md", d.join("assets/inside")).unwrap();
            assert!(read_package(&d, None).is_ok());
            symlink("/tmp", d.join("templates")).unwrap();
            assert_eq!(err(&d), "symlink escapes package: templates");
            fs::remove_file(d.join("templates")).unwrap();
        }

        fs::write(d.join("SKILL.md"), skill_md("other", "")).unwrap();
        assert_eq!(err(&d), "frontmatter name must match the package directory");
        fs::write(d.join("SKILL.md"), [b'-', b'-', b'-', b'\n', 0xff]).unwrap();
        assert_eq!(err(&d), "SKILL.md must be UTF-8");
        fs::write(d.join("SKILL.md"), "x".repeat(80_001)).unwrap();
        assert_eq!(err(&d), "SKILL.md is too large");
        fs::remove_file(d.join("SKILL.md")).unwrap();
        assert_eq!(err(&d), "SKILL.md not found");
        fs::create_dir(d.join("SKILL.md")).unwrap();
        assert_eq!(err(&d), "SKILL.md not found");
        fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn support_path_rules() {
        assert_eq!(check_support_path(" references\\a.md ").unwrap(), "references/a.md");
        assert_eq!(check_support_path("assets/x/y.png").unwrap(), "assets/x/y.png");
        for bad in ["/etc/x", "../x", "references/../x", "C:/x", "references//x", "", "references/./x"] {
            assert_eq!(
                check_support_path(bad).unwrap_err().message(),
                "support path must be package-relative",
                "{bad}"
            );
        }
        for bad in ["references", "other/x", "SKILL.md", "_meta.json"] {
            assert_eq!(
                check_support_path(bad).unwrap_err().message(),
                "support path must be under references, templates, scripts, or assets"
            );
        }
        // As deep as the loader walks, and one level deeper (refused with the loader's message).
        let deepest = format!("references/{}f.md", "d/".repeat(MAX_SUPPORT_DEPTH));
        assert_eq!(check_support_path(&deepest).unwrap(), deepest);
        let deeper = format!("references/{}f.md", "d/".repeat(MAX_SUPPORT_DEPTH + 1));
        let walked = format!("references{}", "/d".repeat(MAX_SUPPORT_DEPTH + 1));
        assert_eq!(
            check_support_path(&deeper).unwrap_err().message(),
            format!("unsupported package entry: {}", bounded(&walked, 120))
        );
        let deep = format!("references/{}f.md", "d/".repeat(30_000));
        assert_eq!(check_support_path(&deep).unwrap_err().message(), "support path is too long");
        let long_name = format!("references/{}", "n".repeat(MAX_COMPONENT_BYTES + 1));
        assert_eq!(check_support_path(&long_name).unwrap_err().message(), "support path is too long");
        assert!(check_support_path(&format!("references/{}", "n".repeat(MAX_COMPONENT_BYTES))).is_ok());
    }

    /// `check_depth` refuses exactly what the loader's walk refuses.
    #[test]
    fn check_depth_matches_the_loader() {
        let root = tmp("depth");
        for extra in [0usize, 1] {
            let d = make_pkg(&root, &format!("deep{extra}"), "");
            let dirs = format!("scripts{}", "/d".repeat(MAX_SUPPORT_DEPTH + extra));
            fs::create_dir_all(d.join(&dirs)).unwrap();
            let file = format!("{dirs}/run.sh");
            fs::write(d.join(&file), "echo").unwrap();
            let loader = read_package(&d, None).err().map(|e| e.message().to_string());
            assert_eq!(check_depth(&file, false).err().map(|e| e.message().to_string()), loader, "{extra}");
            assert_eq!(check_depth(&dirs, true).err().map(|e| e.message().to_string()), loader, "{extra}");
            assert_eq!(loader.is_some(), extra == 1);
        }
        fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn sanitize_hides_paths_and_bounds_length() {
        let root = Path::new("/tmp/cc-secret-root");
        let s = sanitize("failed at /tmp/cc-secret-root/broken/private.md and C:\\Users\\me\\x.md\nnext", &[root]);
        assert!(!s.contains("cc-secret-root") && !s.contains("private") && !s.contains("Users"), "{s}");
        assert!(s.contains("<path>"));
        assert!(!s.contains('\n'));
        let long = sanitize(&"é".repeat(500), &[]);
        assert_eq!(text::char_len(&long), 240);
        assert!(long.ends_with("..."));
        assert_eq!(sanitize("api_key=abc123 fine", &[]), "api_key=[REDACTED] fine");
        assert_eq!(bounded("a\u{7}b", 80), "a b");
    }

    #[test]
    fn copy_tree_is_byte_exact() {
        let root = tmp("copy");
        let d = make_pkg(&root, "demo", "");
        fs::create_dir(d.join("assets")).unwrap();
        let bin: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
        fs::write(d.join("assets/b.bin"), &bin).unwrap();
        copy_tree(&d, &root.join("copy")).unwrap();
        assert_eq!(fs::read(root.join("copy/assets/b.bin")).unwrap(), bin);
        assert_eq!(fs::read(root.join("copy/SKILL.md")).unwrap(), fs::read(d.join("SKILL.md")).unwrap());
        // A tree deeper than the loader accepts (changed on disk after loading) is not recursed into.
        fs::create_dir_all(d.join(format!("assets{}", "/d".repeat(MAX_SUPPORT_DEPTH + 1)))).unwrap();
        assert_eq!(copy_tree(&d, &root.join("copy2")).unwrap_err().to_string(), "package tree is nested too deeply");
        fs::remove_dir_all(root).unwrap();
    }
}
