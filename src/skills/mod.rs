//! Skills: SKILL.md packages in three roots (built-in < user < agent), the catalog and search
//! over them, the mutating store (create/replace/enable/delete/versions/rollback/import) and
//! the off-by-default self-evolution proposals. Everything here is synchronous and is called
//! from the HTTP thread and from turn workers; [`service::SkillService`] serialises mutations
//! with one process-wide lock and publishes catalog snapshots readers can hold without locking.
//!
//! Reading order: `frontmatter` and `package` (one package on disk), `catalog` and `search`
//! (all of them), `service` (mutations) and `read` (queries), `views` (the typed wire),
//! `import` (ZIP), then the model side: `tools` (search/load/resources), `manage` (authoring),
//! `activated` and `mention` (per-chat state, `@name`), `ext` (the turn hook), `evolution`.

use std::fmt;

pub(crate) mod activated;
pub mod builtin;
pub mod catalog;
pub(crate) mod evolution;
pub(crate) mod ext;
pub(crate) mod frontmatter;
#[cfg(test)]
mod fuzz;
pub mod import;
pub(crate) mod manage;
pub(crate) mod mention;
pub(crate) mod package;
pub(crate) mod read;
pub(crate) mod search;
pub mod service;
pub mod tools;
pub(crate) mod views;
pub(crate) mod yaml_depth;

/// Largest SKILL.md accepted, in UTF-8 bytes.
pub(crate) const MAX_SKILL_MD_BYTES: usize = 80_000;
/// Largest support file (references/, templates/, scripts/, assets/), in bytes.
pub(crate) const MAX_SUPPORT_FILE_BYTES: u64 = 200_000;
/// Support directories allowed at a package root.
pub(crate) const SUPPORT_DIRS: [&str; 4] = ["references", "templates", "scripts", "assets"];

/// The message for a name that breaks `^[a-z0-9][a-z0-9._-]{0,63}$`.
pub(crate) const INVALID_NAME: &str =
    "invalid Skill name; use lowercase letters, numbers, dots, underscores, and hyphens";

/// Where a package lives; the order is the precedence (later wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Source {
    Builtin,
    User,
    Agent,
}

impl Source {
    pub(crate) const ALL: [Source; 3] = [Source::Builtin, Source::User, Source::Agent];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Source::Builtin => "builtin",
            Source::User => "user",
            Source::Agent => "agent",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Source> {
        match s {
            "builtin" => Some(Source::Builtin),
            "user" => Some(Source::User),
            "agent" => Some(Source::Agent),
            _ => None,
        }
    }

    pub(crate) fn mutable(self) -> bool {
        self != Source::Builtin
    }
}

/// A skill operation failure, classified the way the HTTP layer maps it
/// (docs/http-api.md §7: permission 403, conflict 409, "not found" 404, other 422, internal 500).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkillError {
    Permission(String),
    Conflict(String),
    /// Something named does not exist (a Skill, a snapshot, a proposal, a package's SKILL.md).
    NotFound(String),
    /// Validation failures.
    Invalid(String),
    /// Broken infrastructure (I/O on our own roots); never shown with paths.
    Internal(String),
}

impl SkillError {
    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        SkillError::Invalid(msg.into())
    }

    pub(crate) fn not_found(msg: impl Into<String>) -> Self {
        SkillError::NotFound(msg.into())
    }

    /// The same kind of error with another message (e.g. paths taken out).
    pub(crate) fn with_message(&self, msg: String) -> Self {
        match self {
            SkillError::Permission(_) => SkillError::Permission(msg),
            SkillError::Conflict(_) => SkillError::Conflict(msg),
            SkillError::NotFound(_) => SkillError::NotFound(msg),
            SkillError::Invalid(_) => SkillError::Invalid(msg),
            SkillError::Internal(_) => SkillError::Internal(msg),
        }
    }

    pub(crate) fn message(&self) -> &str {
        match self {
            SkillError::Permission(m)
            | SkillError::Conflict(m)
            | SkillError::NotFound(m)
            | SkillError::Invalid(m)
            | SkillError::Internal(m) => m,
        }
    }

    /// HTTP status per the contract's mapping.
    pub(crate) fn status(&self) -> u16 {
        match self {
            SkillError::Permission(_) => 403,
            SkillError::Conflict(_) => 409,
            SkillError::NotFound(_) => 404,
            SkillError::Invalid(_) => 422,
            SkillError::Internal(_) => 500,
        }
    }
}

impl fmt::Display for SkillError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for SkillError {}

impl From<std::io::Error> for SkillError {
    fn from(e: std::io::Error) -> Self {
        // The kind only: io errors carry no path, but their Display may on some platforms.
        SkillError::Internal(format!("skill storage error: {}", e.kind()))
    }
}

pub(crate) type Result<T, E = SkillError> = std::result::Result<T, E>;

/// `^[a-z0-9][a-z0-9._-]{0,63}$` (the caller trims first where the contract says so).
pub(crate) fn is_valid_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b[1..].iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'.' | b'_' | b'-'))
}

/// Trims and checks a skill name, returning the canonical form.
pub(crate) fn validate_name(s: &str) -> Result<String> {
    let t = s.trim();
    if is_valid_name(t) {
        Ok(t.to_string())
    } else {
        Err(SkillError::invalid(INVALID_NAME))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_rule() {
        for ok in ["a", "0", "weather", "a.b_c-d", &"a".repeat(64)] {
            assert!(is_valid_name(ok), "{ok}");
        }
        for bad in ["", "A", "-a", ".a", "_a", "a b", "a/b", "ä", &"a".repeat(65), "a\n"] {
            assert!(!is_valid_name(bad), "{bad:?}");
        }
        assert_eq!(validate_name("  web  ").unwrap(), "web");
        assert_eq!(validate_name("Web").unwrap_err().message(), INVALID_NAME);
    }

    #[test]
    fn error_status_mapping() {
        assert_eq!(SkillError::Permission("x".into()).status(), 403);
        assert_eq!(SkillError::Conflict("x".into()).status(), 409);
        assert_eq!(SkillError::not_found("Skill not found").status(), 404);
        assert_eq!(SkillError::invalid("a name that says not found").status(), 422, "the kind decides, not the words");
        assert_eq!(SkillError::invalid("bad").status(), 422);
    }
}
