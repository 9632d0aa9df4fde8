//! The built-in skills, embedded in the binary from `src/skills/builtin/` so an installed server
//! has them, and materialised read-only into the built-in root at startup (the loader, the
//! resource reader and `Skill package root:` all work on real directories). Runs once at
//! startup on the main thread.

use std::fs;
use std::path::Path;

use super::package::{self, remove_tree};
use super::Result;
use crate::util::fsx;

/// `(package-relative path, bytes)` of every embedded file, grouped by package.
pub(crate) const FILES: &[(&str, &str, &[u8])] = &[
    ("chart-visualization", "SKILL.md", include_bytes!("builtin/chart-visualization/SKILL.md")),
    (
        "chart-visualization",
        "references/echarts.md",
        include_bytes!("builtin/chart-visualization/references/echarts.md"),
    ),
    ("chart-visualization", "templates/chart.html", include_bytes!("builtin/chart-visualization/templates/chart.html")),
    ("github", "SKILL.md", include_bytes!("builtin/github/SKILL.md")),
    ("skill-creator", "SKILL.md", include_bytes!("builtin/skill-creator/SKILL.md")),
    ("skill-creator", "scripts/quick_validate.py", include_bytes!("builtin/skill-creator/scripts/quick_validate.py")),
    ("weather", "SKILL.md", include_bytes!("builtin/weather/SKILL.md")),
];

/// True when `root` already holds exactly the embedded files (nothing more, nothing less).
fn up_to_date(root: &Path) -> bool {
    let mut expected: Vec<String> = FILES.iter().map(|(p, f, _)| format!("{p}/{f}")).collect();
    expected.sort();
    let mut found = Vec::new();
    if collect_files(root, root, &mut found).is_err() {
        return false;
    }
    found.sort();
    found == expected && FILES.iter().all(|(p, f, bytes)| fs::read(root.join(p).join(f)).is_ok_and(|b| b == *bytes))
}

fn collect_files(base: &Path, dir: &Path, out: &mut Vec<String>) -> std::io::Result<()> {
    for e in fs::read_dir(dir)? {
        let e = e?;
        let ft = e.file_type()?;
        if ft.is_dir() {
            collect_files(base, &e.path(), out)?;
        } else {
            let rel = e.path();
            let rel = rel.strip_prefix(base).map_err(std::io::Error::other)?;
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
    Ok(())
}

/// Makes `root` hold exactly the embedded built-ins: a fresh copy is built in a hidden
/// sibling and swapped in, so a reader never sees a half-written package.
pub fn install(root: &Path) -> Result<()> {
    if up_to_date(root) {
        return Ok(());
    }
    let parent = root.parent().ok_or_else(|| super::SkillError::Internal("built-in root has no parent".into()))?;
    fsx::create_private_dirs(parent)?;
    let tmp = super::service::TempDir(Some(package::hidden_temp(parent, "builtin", "tmp")));
    fsx::create_private_dir(tmp.path())?;
    for (pkg, rel, bytes) in FILES {
        let target = tmp.path().join(pkg).join(rel);
        if let Some(dir) = target.parent() {
            fsx::create_private_dirs(dir)?;
        }
        fsx::write_private(&target, bytes)?;
    }
    let bak = package::hidden_temp(parent, "builtin", "bak");
    let had_old = fs::symlink_metadata(root).is_ok();
    if had_old {
        fs::rename(root, &bak)?;
    }
    if let Err(e) = fs::rename(tmp.path(), root) {
        if had_old {
            fs::rename(&bak, root)?;
        }
        return Err(e.into());
    }
    let mut tmp = tmp;
    tmp.0 = None;
    if had_old {
        remove_tree(&bak)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::skills::catalog::{scan, DepProbe};
    use crate::skills::frontmatter;
    use crate::skills::package::tests::tmp;
    use crate::skills::Source;

    #[test]
    fn builtins_install_idempotently_and_are_valid_under_our_loader() {
        let base = tmp("builtin");
        let root = base.join("skills").join("builtin");
        install(&root).unwrap();
        fs::write(root.join("weather/SKILL.md"), "tampered").unwrap();
        fs::create_dir(root.join("stale")).unwrap();
        install(&root).unwrap();
        assert!(up_to_date(&root));
        assert!(!root.join("stale").exists());
        // No temp or backup left next to the root.
        let siblings: Vec<_> = fs::read_dir(base.join("skills")).unwrap().collect();
        assert_eq!(siblings.len(), 1);

        let cat = scan(&[(Source::Builtin, root.clone())], &DepProbe::base(Default::default()), 1).unwrap();
        assert!(cat.invalid.is_empty(), "{:?}", cat.invalid);
        let names: Vec<&str> = cat.records.keys().map(String::as_str).collect();
        assert_eq!(names, ["chart-visualization", "github", "skill-creator", "weather"]);
        // skill-creator needs only agent_skill_manage, which is always registered.
        assert_eq!(cat.get("skill-creator").unwrap().availability(), "available");
        assert_eq!(cat.get("weather").unwrap().manifest.requires.tools, ["web_fetch"]);
        assert_eq!(cat.get("github").unwrap().manifest.requires.bins, ["gh"]);
        fs::remove_dir_all(base).unwrap();
    }

    #[test]
    fn skill_creator_example_passes_the_loader() {
        let md =
            std::str::from_utf8(FILES.iter().find(|f| f.0 == "skill-creator" && f.1 == "SKILL.md").unwrap().2).unwrap();
        let start = md.find("```markdown\n").unwrap() + "```markdown\n".len();
        let end = start + md[start..].find("\n```\n").unwrap();
        let example = &md[start..end];
        let p = frontmatter::parse(example, Some("renzhi-niuqu")).unwrap();
        assert_eq!(p.manifest.display_name.as_deref(), Some("认知扭曲"));
    }
}
