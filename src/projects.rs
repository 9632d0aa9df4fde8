//! Which directories a chat may work in as its project (docs/http-api.md §11): the one decision,
//! made here from the symlink-resolved path, that the WebSocket `new_chat`, `POST /api/sessions`
//! and every turn of a bound chat ask. Allowed are the roots the owner names —
//! `CASHCODE_PROJECT_ROOTS` and the Safety page's list in `<config>/settings/projects.json` —
//! and what lies under them; by default the workspace alone. Never the server's own data,
//! memory, config or log directories, nothing inside one, and no parent of one (a project's
//! file tools and `exec` could otherwise reach them). Called on the threads that ask
//! (`ws-client-N`, `http`, `worker-N`).

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::RwLock;

use serde::{Deserialize, Serialize};

use crate::config::Config;

/// Roots the owner may list on the Safety page.
pub(crate) const MAX_ROOTS: usize = 64;
/// Longest path accepted (bytes), as Linux's `PATH_MAX`.
const MAX_PATH_BYTES: usize = 4096;

/// Why a directory cannot be a project.
#[derive(Debug, PartialEq)]
pub(crate) enum ProjectError {
    /// Not an absolute path (or empty, too long, holding NUL).
    NotAbsolute(String),
    /// It does not exist or cannot be resolved.
    Missing(String),
    NotADirectory(PathBuf),
    /// Not under any allowed root.
    NotAllowed {
        path: PathBuf,
        roots: Vec<PathBuf>,
    },
    /// One of the server's own directories, inside one, or a parent of one.
    ServerDir {
        path: PathBuf,
        dir: PathBuf,
    },
    TooMany,
}

impl fmt::Display for ProjectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProjectError::NotAbsolute(p) => write!(f, "a project must be an absolute path, got {p:?}"),
            ProjectError::Missing(p) => write!(f, "{p} does not exist"),
            ProjectError::NotADirectory(p) => write!(f, "{} is not a directory", p.display()),
            ProjectError::NotAllowed { path, roots } => {
                let roots: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
                write!(
                    f,
                    "{} is not under an allowed project root ({}); add one with CASHCODE_PROJECT_ROOTS or on the Safety page",
                    path.display(),
                    roots.join(", ")
                )
            }
            ProjectError::ServerDir { path, dir } => {
                write!(f, "{} overlaps CashCode's own directory {}", path.display(), dir.display())
            }
            ProjectError::TooMany => write!(f, "at most {MAX_ROOTS} project roots"),
        }
    }
}

/// The saved list as stored and served.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SavedRoots {
    pub(crate) roots: Vec<String>,
}

pub(crate) struct Projects {
    /// `CASHCODE_PROJECT_ROOTS`, resolved.
    from_env: Vec<PathBuf>,
    /// The Safety page's list, resolved.
    saved: RwLock<Vec<PathBuf>>,
    file: PathBuf,
    workspace: PathBuf,
    /// The server's own directories, resolved.
    server_dirs: Vec<PathBuf>,
}

/// `path` with every symlink, `.` and `..` resolved.
fn resolved(raw: &str) -> Result<PathBuf, ProjectError> {
    let p = Path::new(raw);
    if raw.is_empty() || raw.len() > MAX_PATH_BYTES || raw.contains('\0') || !p.is_absolute() {
        return Err(ProjectError::NotAbsolute(crate::util::text::take_chars(raw, 200).to_string()));
    }
    let c = p.canonicalize().map_err(|_| ProjectError::Missing(crate::util::text::take_chars(raw, 200).to_string()))?;
    if !c.is_dir() {
        return Err(ProjectError::NotADirectory(c));
    }
    Ok(c)
}

fn canonical_or_self(p: &Path) -> PathBuf {
    p.canonicalize().unwrap_or_else(|_| p.to_path_buf())
}

impl Projects {
    pub(crate) fn load(cfg: &Config) -> Projects {
        let server_dirs = [&cfg.data_dir, &cfg.memory_dir, &cfg.config_dir, &cfg.log_dir]
            .into_iter()
            .map(|d| canonical_or_self(d))
            .collect();
        let file = cfg.config_dir.join("settings").join("projects.json");
        let mut p = Projects {
            from_env: cfg.project_roots.iter().map(|r| canonical_or_self(r)).collect(),
            saved: RwLock::new(Vec::new()),
            file,
            workspace: canonical_or_self(&cfg.workspace_dir),
            server_dirs,
        };
        let saved = match crate::util::fsx::read_opt(&p.file) {
            Ok(Some(text)) => match serde_json::from_str::<SavedRoots>(&text) {
                Ok(s) => s.roots.iter().filter_map(|r| p.check_root(r).ok()).collect(),
                Err(e) => {
                    log::warn!("event=projects.file_invalid path={} reason={:?}", p.file.display(), e.to_string());
                    Vec::new()
                }
            },
            Ok(None) => Vec::new(),
            Err(e) => {
                log::warn!("event=projects.file_unreadable path={} error_kind={:?}", p.file.display(), e.kind());
                Vec::new()
            }
        };
        p.saved = RwLock::new(saved);
        p
    }

    /// Every allowed root: the environment's and the saved ones, or the workspace when neither
    /// names any.
    pub(crate) fn roots(&self) -> Vec<PathBuf> {
        let saved = self.saved.read().map(|s| s.clone()).unwrap_or_default();
        let mut all: Vec<PathBuf> = self.from_env.iter().cloned().chain(saved).collect();
        all.dedup();
        if all.is_empty() {
            all.push(self.workspace.clone());
        }
        all
    }

    /// The roots from the environment (shown, not editable, on the Safety page).
    pub(crate) fn env_roots(&self) -> &[PathBuf] {
        &self.from_env
    }

    /// The saved roots.
    pub(crate) fn saved_roots(&self) -> Vec<PathBuf> {
        self.saved.read().map(|s| s.clone()).unwrap_or_default()
    }

    /// The server's default working directory (a chat without a project works there).
    pub(crate) fn workspace(&self) -> &Path {
        &self.workspace
    }

    fn overlaps_server(&self, c: &Path) -> Result<(), ProjectError> {
        match self.server_dirs.iter().find(|d| c.starts_with(d) || d.starts_with(c)) {
            Some(dir) => Err(ProjectError::ServerDir { path: c.to_path_buf(), dir: dir.clone() }),
            None => Ok(()),
        }
    }

    /// A root the owner wants to allow: an existing directory that does not overlap the
    /// server's own.
    fn check_root(&self, raw: &str) -> Result<PathBuf, ProjectError> {
        let c = resolved(raw)?;
        self.overlaps_server(&c)?;
        Ok(c)
    }

    /// The project directory `raw` names, if a chat may work there.
    pub(crate) fn resolve(&self, raw: &str) -> Result<PathBuf, ProjectError> {
        let c = resolved(raw)?;
        self.overlaps_server(&c)?;
        let roots = self.roots();
        if !roots.iter().any(|r| c.starts_with(r)) {
            return Err(ProjectError::NotAllowed { path: c, roots });
        }
        Ok(c)
    }

    /// Replaces the saved list (all or nothing) and stores it (0600, atomically).
    pub(crate) fn save(&self, roots: &[String]) -> Result<Vec<PathBuf>, SaveError> {
        if roots.len() > MAX_ROOTS {
            return Err(SaveError::Invalid(ProjectError::TooMany));
        }
        let mut checked: Vec<PathBuf> = Vec::new();
        for r in roots {
            let c = self.check_root(r).map_err(SaveError::Invalid)?;
            if !checked.contains(&c) {
                checked.push(c);
            }
        }
        let stored = SavedRoots { roots: checked.iter().map(|c| c.display().to_string()).collect() };
        let bytes = serde_json::to_vec_pretty(&stored).unwrap_or_default();
        crate::util::fsx::write_atomic(&self.file, &bytes, true).map_err(SaveError::Io)?;
        if let Ok(mut s) = self.saved.write() {
            s.clone_from(&checked);
        }
        Ok(checked)
    }
}

/// Why the saved list was not changed.
#[derive(Debug)]
pub(crate) enum SaveError {
    Invalid(ProjectError),
    Io(io::Error),
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    struct Dirs {
        base: PathBuf,
        projects: Projects,
    }

    impl Drop for Dirs {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.base);
        }
    }

    fn dirs(env_roots: &[&str]) -> Dirs {
        let base = std::env::temp_dir().join(format!("cc-projects-{}", crate::util::rand::hex(6)));
        for d in ["data", "memory", "config", "logs", "workspace/sub", "code/app", "code/other", "elsewhere"] {
            std::fs::create_dir_all(base.join(d)).unwrap();
        }
        std::fs::write(base.join("code/file.txt"), "x").unwrap();
        symlink(base.join("elsewhere"), base.join("code/link-out")).unwrap();
        symlink(base.join("data"), base.join("code/link-data")).unwrap();
        let base = base.canonicalize().unwrap();
        let mut cfg = crate::config::tests::config_in(&base);
        cfg.project_roots = env_roots.iter().map(|r| base.join(r)).collect();
        Dirs { projects: Projects::load(&cfg), base }
    }

    #[test]
    fn the_workspace_alone_by_default() {
        let d = dirs(&[]);
        let b = &d.base;
        assert_eq!(d.projects.roots(), vec![b.join("workspace")]);
        assert_eq!(d.projects.resolve(&b.join("workspace/sub").display().to_string()), Ok(b.join("workspace/sub")));
        assert!(matches!(
            d.projects.resolve(&b.join("code/app").display().to_string()),
            Err(ProjectError::NotAllowed { .. })
        ));
    }

    /// The same directories spelled many ways get the same decision.
    #[test]
    fn spellings_escapes_and_server_dirs() {
        let d = dirs(&["code"]);
        let b = d.base.display().to_string();
        let ok = d.base.join("code/app");
        for spelling in [
            format!("{b}/code/app"),
            format!("{b}/code/app/"),
            format!("{b}/code/./app"),
            format!("{b}/code/other/../app"),
            format!("{b}//code//app"),
        ] {
            assert_eq!(d.projects.resolve(&spelling), Ok(ok.clone()), "{spelling}");
        }
        let refused = |s: String| d.projects.resolve(&s).unwrap_err();
        assert!(matches!(refused(format!("{b}/code/../elsewhere")), ProjectError::NotAllowed { .. }));
        assert!(matches!(refused(format!("{b}/code/link-out")), ProjectError::NotAllowed { .. }));
        assert!(matches!(refused(format!("{b}/code/link-data")), ProjectError::ServerDir { .. }));
        assert!(matches!(refused(format!("{b}/data")), ProjectError::ServerDir { .. }));
        assert!(matches!(refused(format!("{b}/logs/../memory")), ProjectError::ServerDir { .. }));
        assert!(matches!(refused(b.clone()), ProjectError::ServerDir { .. }), "a parent of the server's dirs");
        assert!(matches!(refused(format!("{b}/code/file.txt")), ProjectError::NotADirectory(_)));
        assert!(matches!(refused(format!("{b}/code/missing")), ProjectError::Missing(_)));
        for bad in ["code/app", "", "~/code", "/tmp/\0x"] {
            assert!(matches!(refused(bad.to_string()), ProjectError::NotAbsolute(_)), "{bad:?}");
        }
        assert!(matches!(refused(format!("/{}", "a".repeat(5000))), ProjectError::NotAbsolute(_)));
    }

    #[test]
    fn the_saved_list_is_checked_stored_and_reloaded() {
        let d = dirs(&[]);
        let b = d.base.display().to_string();
        let saved = d.projects.save(&[format!("{b}/code"), format!("{b}/code/")]).unwrap();
        assert_eq!(saved, vec![d.base.join("code")]);
        assert_eq!(d.projects.resolve(&format!("{b}/code/app")), Ok(d.base.join("code/app")));
        // An explicit list replaces the default: the workspace is no longer allowed unless listed.
        assert!(d.projects.resolve(&format!("{b}/workspace")).is_err());
        let file = d.base.join("config/settings/projects.json");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
        for bad in [vec![format!("{b}/data")], vec![b.clone()], vec!["relative".into()], vec![format!("{b}/nope")]] {
            assert!(matches!(d.projects.save(&bad), Err(SaveError::Invalid(_))), "{bad:?}");
        }
        assert_eq!(d.projects.saved_roots(), vec![d.base.join("code")], "a refused list changes nothing");
        let too_many: Vec<String> = (0..=MAX_ROOTS).map(|_| format!("{b}/code")).collect();
        assert!(matches!(d.projects.save(&too_many), Err(SaveError::Invalid(ProjectError::TooMany))));
        let mut cfg = crate::config::tests::config_in(&d.base);
        cfg.project_roots = Vec::new();
        assert_eq!(Projects::load(&cfg).roots(), vec![d.base.join("code")], "reloaded after a restart");
    }
}
