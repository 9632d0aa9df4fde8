//! Property tests over generated and mutated inputs (the shared test PRNG, no extra crates):
//! ZIP archives for the importer and SKILL.md strings for the frontmatter parser. Every case
//! must finish without a panic; a refused import must leave the user root empty, an accepted
//! one must hold exactly its temp dir until dropped. `CASHCODE_FUZZ_CASES` scales the runs and
//! `CASHCODE_FUZZ_SEED` varies the inputs (`crate::util::prng`).

use std::fs;
use std::io::{Cursor, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use zip::write::SimpleFileOptions;

use super::frontmatter;
use super::import;
use super::package::tests::tmp;
use crate::util::hash::sha256_hex;
use crate::util::prng::{cases, seed, Prng};

const NAME_POOL: &[&str] = &[
    "SKILL.md",
    "skill.md",
    "_meta.json",
    "references/a.md",
    "references/",
    "references/deep/b.txt",
    "templates/t.html",
    "scripts/run.py",
    "assets/logo.png",
    "assets/",
    "README.md",
    "../SKILL.md",
    "/SKILL.md",
    "C:/SKILL.md",
    "a\\..\\b",
    "pkg/",
    "pkg/SKILL.md",
    "pkg/references/x.md",
    "other/SKILL.md",
    "pkg/_meta.json",
    "assets/Logo.PNG",
    "assets/f",
    "assets/f/g",
    "./SKILL.md",
    "references//x",
    "scripts/\u{0}x",
    "références/é.md",
    "",
];

fn random_skill_md(r: &mut Prng) -> Vec<u8> {
    let long = "a".repeat(70);
    let name = *r.pick(&["fuzzed", "pkg", "Bad Name", "yes", long.as_str()]);
    let mut s = format!("---\nname: {name}\ndescription: generated\n");
    if r.chance(30) {
        let extra: &&str =
            r.pick(&["version: 0\n", "tags: [x, '']\n", "display_name: \"\\u0007\"\n", "always: maybe\n"]);
        s.push_str(extra);
    }
    s.push_str("---\n");
    if r.chance(90) {
        s.push_str("# Body\n\nSteps.\n");
    }
    s.into_bytes()
}

/// A structurally valid archive from random members (many violate the package rules).
fn random_archive(r: &mut Prng) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    // Mostly well-formed members, so accepted archives are common enough to matter.
    let members = if r.chance(40) { 0 } else { r.below(6) };
    let mut used = std::collections::HashSet::new();
    if r.chance(85) {
        let wrapper = r.chance(30);
        let name = if wrapper { "pkg/SKILL.md" } else { "SKILL.md" };
        used.insert(name.to_string());
        let _ = w.start_file(name, SimpleFileOptions::default());
        let _ = w.write_all(&random_skill_md(r));
    }
    for _ in 0..members {
        let name = if r.chance(50) {
            r.pick(&["references/a.md", "templates/t.html", "assets/logo.png", "scripts/run.py"]).to_string()
        } else {
            r.pick(NAME_POOL).to_string()
        };
        if !used.insert(name.clone()) {
            continue;
        }
        let method = if r.chance(50) { zip::CompressionMethod::Deflated } else { zip::CompressionMethod::Stored };
        let mut opts = SimpleFileOptions::default().compression_method(method);
        if r.chance(20) {
            opts = opts.unix_permissions(*r.pick(&[0o100_644, 0o040_755, 0o120_777, 0o010_644, 0o020_644, 0o644]));
        }
        let size = if r.chance(3) { *r.pick(&[200_000usize, 200_001]) } else { *r.pick(&[0usize, 1, 100, 4096]) };
        let byte = r.below(256) as u8;
        let res = if name.ends_with('/') {
            w.add_directory(name, opts)
        } else if r.chance(5) {
            w.add_symlink(name, "/etc/passwd", opts)
        } else {
            w.start_file(name, opts).and_then(|()| w.write_all(&vec![byte; size]).map_err(zip::result::ZipError::Io))
        };
        if res.is_err() {
            // The writer refused this member (it validates some names); keep going.
            continue;
        }
    }
    w.finish().map(|c| c.into_inner()).unwrap_or_default()
}

/// Byte-level mutations, including the header fields the importer trusts least.
fn mutate(r: &mut Prng, mut z: Vec<u8>) -> Vec<u8> {
    let rounds = r.below(4);
    for _ in 0..rounds {
        if z.is_empty() {
            break;
        }
        match r.below(7) {
            0 => {
                let i = r.below(z.len());
                z[i] ^= 1 << r.below(8);
            }
            1 => {
                let cut = r.below(z.len());
                z.truncate(cut.max(2));
            }
            2 => {
                let i = r.below(z.len());
                let junk: Vec<u8> = (0..r.below(64)).map(|_| r.next_u64() as u8).collect();
                z.splice(i..i, junk);
            }
            3 | 4 => {
                // Patch a central-directory field: sizes, flags, attributes, name length.
                let sig = [0x50, 0x4b, 0x01, 0x02];
                let at: Vec<usize> = z.windows(4).enumerate().filter(|(_, w)| *w == sig).map(|(i, _)| i).collect();
                if let Some(&i) = at.get(r.below(at.len().max(1))) {
                    let off = *r.pick(&[8usize, 20, 24, 28, 38, 40, 42]);
                    if i + off + 4 <= z.len() {
                        let v = *r.pick(&[0u32, 1, 0xffff_ffff, 10, 300_000, 0o120_777 << 16, 0x8000_0000]);
                        z[i + off..i + off + 4].copy_from_slice(&v.to_le_bytes());
                    }
                }
            }
            5 => {
                let i = r.below(z.len());
                let j = r.below(z.len());
                z.swap(i, j);
            }
            _ => {
                let extra = z.clone();
                z.extend_from_slice(&extra[..extra.len().min(512)]);
            }
        }
    }
    z
}

fn assert_empty(root: &Path, case: usize) {
    let left: Vec<_> = fs::read_dir(root).expect("root readable").collect();
    assert!(left.is_empty(), "case {case}: import left {} entries behind", left.len());
}

#[test]
fn zip_importer_never_panics_and_never_leaves_files() {
    // 1,000 archives reach every generator branch many times over in the test command (each
    // case writes to disk); scripts/fuzz.sh runs 20,000 and more in release.
    let n = cases(1000);
    let mut r = Prng::new(seed(0x5EED_CAFE));
    let root = tmp("fuzz-zip");
    let (mut accepted, mut refused) = (0usize, 0usize);
    for case in 0..n {
        let archive = random_archive(&mut r);
        let bytes = if r.chance(60) { mutate(&mut r, archive) } else { archive };
        let result = catch_unwind(AssertUnwindSafe(|| import::unpack(&bytes, &root)));
        match result {
            Err(_) => panic!("case {case}: importer panicked"),
            Ok(Ok((t, parsed))) => {
                accepted += 1;
                assert!(t.path().starts_with(&root));
                assert_eq!(fs::read_dir(&root).unwrap().count(), 1, "case {case}");
                assert!(super::is_valid_name(&parsed.manifest.name));
                drop(t);
            }
            Ok(Err(e)) => {
                refused += 1;
                assert!(!e.message().is_empty());
                assert!(!e.message().contains(&root.display().to_string()), "case {case}: path leaked");
            }
        }
        assert_empty(&root, case);
    }
    eprintln!("zip property test: {n} archives, {accepted} accepted, {refused} refused");
    assert!(accepted > 0 && refused > 0, "the generator must reach both outcomes");
    fs::remove_dir_all(root).unwrap();
}

const FM_FRAGMENTS: &[&str] = &[
    "---",
    "---\n",
    "\n",
    "\r\n",
    "\r",
    " ",
    "\t",
    "name: ",
    "fuzz",
    "description: ",
    "d",
    "display_name: ",
    "version: ",
    "1",
    "0",
    "-3",
    "1.5",
    "true",
    "yes",
    "no",
    "always: ",
    "tags: ",
    "[a, b]",
    "['']",
    "triggers:\n  - x\n",
    "requires:\n  tools: [a]\n",
    "optional: 5\n",
    "&a [*a, *a]",
    "*a",
    "!!binary aGk=",
    "!!python/object:os.system",
    "{",
    "}",
    "[",
    "]",
    "'",
    "\"",
    "\\u0000",
    "# c",
    "字",
    "\u{feff}",
    "\u{202e}",
    ": ",
    "- ",
    "|\n  block\n",
    ">\n  folded\n",
    "2024-01-02",
    "~",
    "null",
    "key: [[[[[[[[",
    "? complex\n: key\n",
    "%YAML 1.1\n",
    "...\n",
    "# Body\n",
];

#[test]
fn frontmatter_parser_never_panics_and_keeps_its_invariants() {
    // 5,000 documents in the test command; scripts/fuzz.sh runs 200,000 and more in release.
    let n = cases(5000);
    let mut r = Prng::new(seed(0xF00D_F00D));
    let mut ok = 0usize;
    for case in 0..n {
        let mut s = String::new();
        if r.chance(70) {
            s.push_str("---\nname: fuzz\ndescription: d\n");
        }
        for _ in 0..r.below(24) {
            let frag: &&str = r.pick(FM_FRAGMENTS);
            s.push_str(frag);
        }
        if r.chance(60) {
            s.push_str("\n---\n# Body\n");
        }
        if r.chance(1) {
            // Deep nesting probes the YAML parser's recursion limit (slow-ish in debug builds).
            let depth = r.below(1000);
            s = format!("---\nname: fuzz\ndescription: d\nx: {}{}\n---\nb", "[".repeat(depth), "]".repeat(depth));
        }
        let expected = if r.chance(50) { Some("fuzz") } else { None };
        let res = catch_unwind(|| frontmatter::parse(&s, expected));
        match res {
            Err(_) => panic!("case {case}: parser panicked on {s:?}"),
            Ok(Ok(p)) => {
                ok += 1;
                assert!(super::is_valid_name(&p.manifest.name), "case {case}");
                assert!(!p.manifest.body.trim().is_empty(), "case {case}");
                assert!(!p.manifest.description.is_empty(), "case {case}");
                assert!(!p.text.contains('\r'), "case {case}");
                assert_eq!(p.hash, sha256_hex(p.text.as_bytes()), "case {case}");
                assert!(p.manifest.version >= 1);
            }
            Ok(Err(e)) => assert!(!e.message().is_empty()),
        }
    }
    eprintln!("frontmatter property test: {n} strings, {ok} valid");
    assert!(ok > 0 && ok < n, "the generator must reach both outcomes");
}
