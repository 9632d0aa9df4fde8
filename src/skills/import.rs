//! ZIP import (docs/skills.md §10, docs/storage.md §7): every archive check in the contract's order with
//! its exact message, all on the central directory before anything is written (member paths
//! are bounded in length and depth there too), then extraction into a hidden temp dir under
//! the user root with sizes enforced on the actual bytes. Publishing (conflict check,
//! `_meta.json`, rename) is done by [`super::service::SkillService::import_zip`]; any refusal
//! drops the temp dir, so nothing is left behind. Runs on an HTTP thread (`http-slow`).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{Cursor, Read, Write};
use std::path::Path;

use super::frontmatter::{self, Parsed};
use super::package::{self, bounded, MAX_COMPONENT_BYTES, MAX_PATH_BYTES};
use super::service::TempDir;
use super::{Result, SkillError, MAX_SKILL_MD_BYTES, MAX_SUPPORT_FILE_BYTES, SUPPORT_DIRS};
use crate::util::fsx;
use crate::workspace::Workspace;

/// Largest archive accepted (10 MiB).
pub const MAX_ARCHIVE_BYTES: usize = 10 * 1024 * 1024;
/// Most members (directory entries count).
pub(crate) const MAX_MEMBERS: usize = 256;
/// Largest total of declared (and actual) file sizes (20 MiB).
pub(crate) const MAX_EXTRACTED_BYTES: u64 = 20 * 1024 * 1024;

const S_IFMT: u32 = 0o170_000;
const S_IFDIR: u32 = 0o040_000;
const S_IFREG: u32 = 0o100_000;

fn fail(msg: &str) -> SkillError {
    SkillError::invalid(msg)
}

/// One archive member after the name and type checks.
struct Member {
    index: usize,
    /// `/`-separated, no trailing slash.
    path: String,
    is_dir: bool,
    size: u64,
}

/// Checks `bytes` and extracts the package into a hidden temp dir under `user_root`.
/// Returns the temp dir (removed on drop) and the parsed SKILL.md.
pub(crate) fn unpack(bytes: &[u8], user_root: &Path) -> Result<(TempDir, Parsed)> {
    if bytes.len() < 4 || bytes.len() > MAX_ARCHIVE_BYTES || !bytes.starts_with(b"PK") {
        return Err(fail("invalid or oversized ZIP archive"));
    }
    let mut zip = zip::ZipArchive::new(Cursor::new(bytes)).map_err(|_| fail("invalid ZIP archive"))?;
    if zip.is_empty() {
        return Err(fail("archive is empty"));
    }
    if zip.len() > MAX_MEMBERS {
        return Err(fail("archive contains too many entries"));
    }
    // The crate keys members by exact name, so exact duplicates only show up here.
    let exact_duplicates = zip.has_duplicate_names();

    let mut members = Vec::with_capacity(zip.len());
    for index in 0..zip.len() {
        let f = zip.by_index_raw(index).map_err(|_| fail("invalid ZIP archive"))?;
        let raw = f.name().map_err(|_| fail("archive contains an illegal path"))?;
        let name = raw.replace('\\', "/");
        if name.is_empty() || name.contains('\0') || name.starts_with('/') || package::has_drive(&name) {
            return Err(fail("archive contains an illegal path"));
        }
        let is_dir = name.ends_with('/');
        let path = name.trim_end_matches('/').to_string();
        // Lengths bound everything below (the duplicate and conflict checks, the depth check,
        // extraction): a 60 KB name of 30,000 levels is refused here, before any I/O.
        if name.len() > MAX_PATH_BYTES
            || path.split('/').any(|c| c.is_empty() || c == "." || c == ".." || c.len() > MAX_COMPONENT_BYTES)
        {
            return Err(fail("archive contains an illegal path"));
        }
        let kind = (f.external_attributes() >> 16) & S_IFMT;
        let ok_kind = if is_dir { S_IFDIR } else { S_IFREG };
        if kind != 0 && kind != ok_kind {
            return Err(if kind == S_IFDIR || kind == S_IFREG {
                fail("archive contains an unsupported member type")
            } else {
                fail("archive contains a symlink or special file")
            });
        }
        if f.encrypted() {
            return Err(fail("encrypted archive entries are not supported"));
        }
        members.push(Member { index, path, is_dir, size: if is_dir { 0 } else { f.size() } });
    }

    let mut seen = BTreeSet::new();
    let mut total: u64 = 0;
    for m in &members {
        if !seen.insert(m.path.to_lowercase()) || exact_duplicates {
            return Err(fail("archive contains duplicate paths"));
        }
        if m.is_dir {
            continue;
        }
        if m.size > MAX_SUPPORT_FILE_BYTES {
            return Err(fail("archive member is too large"));
        }
        total += m.size;
        if total > MAX_EXTRACTED_BYTES {
            return Err(fail("archive expands beyond the allowed size"));
        }
    }
    let files: BTreeSet<String> = members.iter().filter(|m| !m.is_dir).map(|m| m.path.to_lowercase()).collect();
    for m in &members {
        let lower = m.path.to_lowercase();
        let mut prefix = String::new();
        for comp in lower.split('/').take(lower.split('/').count() - 1) {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(comp);
            if files.contains(&prefix) {
                return Err(fail("archive contains a file and directory path conflict"));
            }
        }
    }

    let wrapper = layout(&members)?;
    let mut plan: Vec<(&Member, String)> = Vec::new();
    for m in &members {
        let rel = match &wrapper {
            None => m.path.clone(),
            Some(w) if m.path == *w => continue,
            Some(w) => m.path[w.len() + 1..].to_string(),
        };
        let first = rel.split('/').next().unwrap_or("");
        let nested = rel.contains('/');
        let invalid_path = || SkillError::invalid(format!("invalid package path: {}", bounded(&rel, 120)));
        match first {
            "SKILL.md" | "_meta.json" if nested || m.is_dir => return Err(invalid_path()),
            "SKILL.md" if m.size > MAX_SKILL_MD_BYTES as u64 => {
                return Err(SkillError::invalid("package file is too large: SKILL.md"));
            }
            "SKILL.md" | "_meta.json" => {}
            s if SUPPORT_DIRS.contains(&s) => {
                if !nested && !m.is_dir {
                    return Err(SkillError::invalid(format!("{s} must be a directory")));
                }
                // What the loader would refuse after extraction is refused before it.
                package::check_depth(&rel, m.is_dir)?;
            }
            _ => return Err(invalid_path()),
        }
        plan.push((m, rel));
    }

    let tmp = TempDir(Some(package::hidden_temp(user_root, "skill-import", "tmp")));
    fsx::create_private_dirs(user_root)?;
    fsx::create_private_dir(tmp.path())?;
    // Every entry is created below the fresh directory one `openat(…, O_NOFOLLOW)` step at a
    // time, so a symlink another process races into it cannot lead a write outside.
    let root = fs::canonicalize(tmp.path())?;
    let confined = Workspace::from_paths(&root, &[]).map_err(|e| SkillError::Internal(e.to_string()))?;
    let io_err = |e: String| SkillError::Internal(format!("skill storage error: {}", bounded(&e, 200)));
    let mut written: u64 = 0;
    for (m, rel) in &plan {
        if rel == "_meta.json" {
            // Never trusted: the server writes its own.
            continue;
        }
        let target = root.join(rel.trim_end_matches('/'));
        if m.is_dir {
            confined.create_dirs(&target, rel).map_err(io_err)?;
            continue;
        }
        let limit = if rel == "SKILL.md" { MAX_SKILL_MD_BYTES as u64 } else { MAX_SUPPORT_FILE_BYTES };
        let mut out = confined.create_new(&target, rel).map_err(io_err)?;
        let mut f = zip.by_index(m.index).map_err(|_| fail("invalid ZIP archive"))?;
        let mut buf = [0u8; 16 * 1024];
        let mut n_file: u64 = 0;
        loop {
            let n = f.read(&mut buf).map_err(|_| fail("invalid ZIP archive"))?;
            if n == 0 {
                break;
            }
            n_file += n as u64;
            written += n as u64;
            if n_file > limit {
                return Err(SkillError::invalid(format!("package file is too large: {}", bounded(rel, 120))));
            }
            if written > MAX_EXTRACTED_BYTES {
                return Err(fail("archive expands beyond the allowed size"));
            }
            out.write_all(&buf[..n])?;
        }
    }

    // The confined writes use the workspace's ordinary modes; the package is server data.
    fsx::make_tree_private(tmp.path())?;
    let raw = fs::read(tmp.path().join("SKILL.md")).map_err(|_| SkillError::not_found("SKILL.md not found"))?;
    let text = String::from_utf8(raw).map_err(|_| fail("SKILL.md must be UTF-8"))?;
    let parsed = frontmatter::parse(&text, None)?;
    package::read_package(tmp.path(), Some(&parsed.manifest.name))?;
    Ok((tmp, parsed))
}

/// `None` for a flat package (SKILL.md at the root), else the single wrapper directory.
fn layout(members: &[Member]) -> Result<Option<String>> {
    if members.iter().any(|m| !m.is_dir && m.path == "SKILL.md") {
        return Ok(None);
    }
    let mut tops: BTreeMap<&str, bool> = BTreeMap::new();
    for m in members {
        let top = m.path.split('/').next().unwrap_or("");
        let has_skill = !m.is_dir && m.path.strip_prefix(top).is_some_and(|r| r == "/SKILL.md");
        *tops.entry(top).or_insert(false) |= has_skill;
    }
    let with_skill: Vec<&str> = tops.iter().filter(|(_, has)| **has).map(|(t, _)| *t).collect();
    if with_skill.len() != 1 {
        return Err(fail("archive must contain SKILL.md at its root or in exactly one top-level directory"));
    }
    let w = with_skill[0];
    if members.iter().any(|m| m.path != w && !m.path.starts_with(&format!("{w}/"))) {
        return Err(fail("archive contains entries outside the Skill package"));
    }
    Ok(Some(w.to_string()))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::skills::package::tests::{skill_md, tmp};
    use zip::write::SimpleFileOptions;

    /// One archive member for [`build`]: (name, bytes, unix mode or 0 for default).
    pub(crate) type Entry<'a> = (&'a str, Vec<u8>, u32);

    pub(crate) fn build(entries: &[Entry<'_>]) -> Vec<u8> {
        let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
        for (name, data, mode) in entries {
            let mut opts = SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
            if *mode != 0 {
                opts = opts.unix_permissions(*mode);
            }
            if name.ends_with('/') {
                w.add_directory(name.to_string(), opts).unwrap();
            } else if *mode & S_IFMT == 0o120_000 {
                w.add_symlink(name.to_string(), String::from_utf8_lossy(data).into_owned(), opts).unwrap();
            } else {
                w.start_file(name.to_string(), opts).unwrap();
                w.write_all(data).unwrap();
            }
        }
        w.finish().unwrap().into_inner()
    }

    /// Sets the general-purpose "encrypted" bit on every local and central header.
    pub(crate) fn mark_encrypted(mut z: Vec<u8>) -> Vec<u8> {
        let mut i = 0;
        while i + 10 < z.len() {
            if z[i..i + 4] == [0x50, 0x4b, 0x03, 0x04] {
                z[i + 6] |= 1;
            } else if z[i..i + 4] == [0x50, 0x4b, 0x01, 0x02] {
                z[i + 8] |= 1;
            }
            i += 1;
        }
        z
    }

    /// Rewrites the external attributes of every central header (mode in the high 16 bits).
    pub(crate) fn set_mode(mut z: Vec<u8>, mode: u32) -> Vec<u8> {
        let mut i = 0;
        while i + 42 < z.len() {
            if z[i..i + 4] == [0x50, 0x4b, 0x01, 0x02] {
                z[i + 38..i + 42].copy_from_slice(&(mode << 16).to_le_bytes());
            }
            i += 1;
        }
        z
    }

    fn md(name: &str) -> Vec<u8> {
        skill_md(name, "").into_bytes()
    }

    fn tree(dir: &Path) -> Vec<String> {
        let mut out = Vec::new();
        fn walk(d: &Path, base: &Path, out: &mut Vec<String>) {
            for e in fs::read_dir(d).unwrap() {
                let p = e.unwrap().path();
                out.push(p.strip_prefix(base).unwrap().display().to_string());
                if p.is_dir() && !p.is_symlink() {
                    walk(&p, base, out);
                }
            }
        }
        walk(dir, dir, &mut out);
        out.sort();
        out
    }

    fn refuse(bytes: &[u8], msg: &str) {
        let root = tmp("imp-refuse");
        let before = tree(&root);
        let e = unpack(bytes, &root).err().expect("import must be refused");
        assert_eq!(e.message(), msg);
        assert_eq!(tree(&root), before, "refused import left files behind");
        fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn accepts_flat_and_wrapped_layouts() {
        let root = tmp("imp-ok");
        let flat = build(&[("SKILL.md", md("flat"), 0), ("assets/a.bin", vec![0, 1, 2, 255], 0)]);
        let (t, p) = unpack(&flat, &root).unwrap();
        assert_eq!(p.manifest.name, "flat");
        assert_eq!(fs::read(t.path().join("assets/a.bin")).unwrap(), vec![0, 1, 2, 255]);
        drop(t);
        let wrapped = build(&[
            ("pkg/", vec![], 0),
            ("pkg/SKILL.md", md("wrapped"), 0o100_644),
            ("pkg/references/", vec![], 0o040_755),
            ("pkg/references/r.md", b"ref".to_vec(), 0),
            ("pkg/_meta.json", br#"{"source":"builtin","enabled":false}"#.to_vec(), 0),
        ]);
        let (t, p) = unpack(&wrapped, &root).unwrap();
        assert_eq!(p.manifest.name, "wrapped");
        assert!(!t.path().join("_meta.json").exists(), "archive _meta.json must be skipped");
        let tp = t.path().to_path_buf();
        drop(t);
        assert!(!tp.exists());
        assert!(tree(&root).is_empty());
        fs::remove_dir_all(root).unwrap();
    }

    /// A real race: another process keeps planting a `scripts` symlink to a directory outside
    /// into every import's temp directory while archives are unpacked over and over. Nothing
    /// is ever written outside; each import either completes inside or fails.
    #[test]
    fn symlinks_raced_into_the_extraction_never_escape() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        use std::time::{Duration, Instant};

        let root = tmp("imp-race");
        let outside = tmp("imp-race-outside");
        let mut entries: Vec<(String, Vec<u8>, u32)> = vec![("SKILL.md".into(), md("racy"), 0)];
        for i in 0..40 {
            entries.push((format!("scripts/s{i}/f.txt"), b"payload".to_vec(), 0));
        }
        let refs: Vec<Entry<'_>> = entries.iter().map(|(n, d, m)| (n.as_str(), d.clone(), *m)).collect();
        let archive = build(&refs);
        let stop = Arc::new(AtomicBool::new(false));
        let planter = {
            let (root, outside, stop) = (root.clone(), outside.clone(), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut planted = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    for e in fs::read_dir(&root).into_iter().flatten().flatten() {
                        let dir = e.path();
                        // A deeper component too, while `scripts` is still a real directory
                        // (only this thread ever turns it into a link).
                        if fs::symlink_metadata(dir.join("scripts")).is_ok_and(|m| m.is_dir()) {
                            let _ = fs::rename(dir.join("scripts/s1"), dir.join("moved-s1"));
                            let _ = std::os::unix::fs::symlink(&outside, dir.join("scripts/s1"));
                        }
                        let _ = fs::rename(dir.join("scripts"), dir.join("moved"));
                        if std::os::unix::fs::symlink(&outside, dir.join("scripts")).is_ok() {
                            planted += 1;
                        }
                    }
                }
                planted
            })
        };
        // At least 1.5 s and 21 imports, so a loaded machine races as many imports as an idle
        // one (within a generous 60 s).
        let started = Instant::now();
        let (mut ok, mut failed) = (0, 0);
        while (started.elapsed() < Duration::from_millis(1500) || ok + failed <= 20)
            && started.elapsed() < Duration::from_secs(60)
        {
            match unpack(&archive, &root) {
                Ok(_) => ok += 1,
                Err(_) => failed += 1,
            }
        }
        stop.store(true, Ordering::SeqCst);
        let planted = planter.join().unwrap();
        assert!(ok + failed > 20 && planted > 0, "the race barely ran: {ok} ok, {failed} failed, {planted} planted");
        assert!(tree(&outside).is_empty(), "written outside: {:?}", tree(&outside));
        fs::remove_dir_all(root).unwrap();
        fs::remove_dir_all(outside).unwrap();
    }

    #[test]
    fn every_refusal_has_its_message_and_leaves_nothing() {
        refuse(b"PK", "invalid or oversized ZIP archive");
        refuse(b"hello world", "invalid or oversized ZIP archive");
        refuse(&vec![b'P'; MAX_ARCHIVE_BYTES + 1], "invalid or oversized ZIP archive");
        refuse(b"PK\x03\x04garbage-garbage", "invalid ZIP archive");
        refuse(&build(&[]), "archive is empty");
        let many: Vec<(String, Vec<u8>, u32)> = (0..257).map(|i| (format!("assets/{i}"), vec![], 0)).collect();
        let many_ref: Vec<Entry<'_>> = many.iter().map(|(n, d, m)| (n.as_str(), d.clone(), *m)).collect();
        refuse(&build(&many_ref), "archive contains too many entries");
        for bad in ["../escape/SKILL.md", "/abs/SKILL.md", "C:/x/SKILL.md", "a//b", "a/./SKILL.md", "x\\..\\SKILL.md"] {
            refuse(&build(&[("SKILL.md", md("a"), 0), (bad, vec![1], 0)]), "archive contains an illegal path");
        }
        refuse(
            &build(&[("SKILL.md", md("a"), 0), ("assets/link", b"/etc/passwd".to_vec(), 0o120_777)]),
            "archive contains a symlink or special file",
        );
        refuse(&set_mode(build(&[("SKILL.md", md("a"), 0)]), 0o010_644), "archive contains a symlink or special file");
        refuse(&set_mode(build(&[("SKILL.md", md("a"), 0)]), 0o040_755), "archive contains an unsupported member type");
        refuse(&mark_encrypted(build(&[("SKILL.md", md("a"), 0)])), "encrypted archive entries are not supported");
        refuse(
            &build(&[("SKILL.md", md("a"), 0), ("assets/X.txt", vec![1], 0), ("assets/x.txt", vec![2], 0)]),
            "archive contains duplicate paths",
        );
        refuse(&build(&[("SKILL.md", md("a"), 0), ("assets/big", vec![0; 200_001], 0)]), "archive member is too large");
        let fat: Vec<(String, Vec<u8>, u32)> = (0..105).map(|i| (format!("assets/{i}"), vec![0; 200_000], 0)).collect();
        let mut fat_ref: Vec<Entry<'_>> = fat.iter().map(|(n, d, m)| (n.as_str(), d.clone(), *m)).collect();
        fat_ref.insert(0, ("SKILL.md", md("a"), 0));
        refuse(&build(&fat_ref), "archive expands beyond the allowed size");
        refuse(
            &build(&[("SKILL.md", md("a"), 0), ("assets/f", vec![1], 0), ("assets/f/g", vec![1], 0)]),
            "archive contains a file and directory path conflict",
        );
        refuse(
            &build(&[("a/SKILL.md", md("a"), 0), ("b/SKILL.md", md("b"), 0)]),
            "archive must contain SKILL.md at its root or in exactly one top-level directory",
        );
        refuse(
            &build(&[("assets/x", vec![1], 0)]),
            "archive must contain SKILL.md at its root or in exactly one top-level directory",
        );
        refuse(
            &build(&[("a/SKILL.md", md("a"), 0), ("README.md", vec![1], 0)]),
            "archive contains entries outside the Skill package",
        );
        refuse(&build(&[("SKILL.md", md("a"), 0), ("README.md", vec![1], 0)]), "invalid package path: README.md");
        refuse(&build(&[("SKILL.md", md("a"), 0), ("references", vec![1], 0)]), "references must be a directory");
        refuse(&build(&[("SKILL.md", md("a"), 0), ("_meta.json/x", vec![1], 0)]), "invalid package path: _meta.json/x");
        let big_md = skill_md("a", "").into_bytes().into_iter().chain(vec![b'x'; 80_000]).collect();
        refuse(&build(&[("SKILL.md", big_md, 0)]), "package file is too large: SKILL.md");
        refuse(&build(&[("SKILL.md", vec![0xff, 0xfe], 0)]), "SKILL.md must be UTF-8");
        refuse(
            &build(&[("SKILL.md", b"---\nname: a\ndescription: d\n---\n  \n".to_vec(), 0)]),
            "SKILL.md body cannot be empty",
        );
        refuse(&build(&[("SKILL.md", b"no frontmatter".to_vec(), 0)]), "SKILL.md must start with YAML frontmatter");
        refuse(&build(&[("SKILL.md", md("Bad Name"), 0)]), crate::skills::INVALID_NAME);
    }

    /// Member paths are bounded before extraction: a 30,000-level name (whose extraction and
    /// removal used to overflow the `http-slow` stack) and over-long components are illegal
    /// paths; one level deeper than the loader walks gets the loader's message, with nothing
    /// written; the deepest tree the loader accepts still imports, flat and wrapped.
    #[test]
    fn member_paths_are_bounded_before_anything_is_written() {
        let deep = format!("pkg/scripts/{}run.sh", "d/".repeat(30_000));
        refuse(
            &build(&[("pkg/SKILL.md", md("pkg"), 0), (&deep, b"echo".to_vec(), 0)]),
            "archive contains an illegal path",
        );
        let long = format!("assets/{}", "n".repeat(MAX_COMPONENT_BYTES + 1));
        refuse(&build(&[("SKILL.md", md("a"), 0), (&long, vec![1], 0)]), "archive contains an illegal path");
        let long_path = format!("assets/{}x", "abcdefgh/".repeat(MAX_PATH_BYTES / 9));
        refuse(&build(&[("SKILL.md", md("a"), 0), (&long_path, vec![1], 0)]), "archive contains an illegal path");
        let walked = format!("scripts{}", "/d".repeat(package::MAX_SUPPORT_DEPTH + 1));
        let too_deep = format!("unsupported package entry: {}", bounded(&walked, 120));
        let deeper_file = format!("{walked}/run.sh");
        refuse(&build(&[("SKILL.md", md("a"), 0), (&deeper_file, vec![1], 0)]), &too_deep);
        let wrapped = format!("pkg/{walked}/");
        refuse(&build(&[("pkg/SKILL.md", md("pkg"), 0), (&wrapped, vec![], 0)]), &too_deep);

        let root = tmp("imp-deepest");
        let deepest = format!("scripts{}/run.sh", "/d".repeat(package::MAX_SUPPORT_DEPTH));
        let (t, p) = unpack(&build(&[("SKILL.md", md("deepest"), 0), (&deepest, b"echo".to_vec(), 0)]), &root).unwrap();
        assert_eq!(p.manifest.name, "deepest");
        assert_eq!(fs::read(t.path().join(&deepest)).unwrap(), b"echo");
        drop(t);
        assert!(tree(&root).is_empty());
        fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn declared_sizes_are_enforced_on_actual_bytes() {
        // A member whose header claims 10 bytes but inflates to 300,000: the extractor must stop.
        let real = build(&[("SKILL.md", md("a"), 0), ("assets/bomb", vec![b'z'; 300_000], 0)]);
        let mut z = real.clone();
        let mut i = 0;
        while i + 30 < z.len() {
            if z[i..i + 4] == [0x50, 0x4b, 0x01, 0x02] {
                let name_len = u16::from_le_bytes([z[i + 28], z[i + 29]]) as usize;
                if &z[i + 46..i + 46 + name_len] == b"assets/bomb" {
                    z[i + 24..i + 28].copy_from_slice(&10u32.to_le_bytes());
                }
            }
            i += 1;
        }
        let root = tmp("imp-bomb");
        let e = unpack(&z, &root).err().expect("must refuse");
        assert!(
            e.message() == "package file is too large: assets/bomb" || e.message() == "invalid ZIP archive",
            "{}",
            e.message()
        );
        assert!(tree(&root).is_empty());
        fs::remove_dir_all(root).unwrap();
    }
}
