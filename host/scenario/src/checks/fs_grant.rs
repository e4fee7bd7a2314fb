//! Where a scenario may point an `fs` grant, or an `sql` grant (a database
//! file, under the same rules).
//!
//! A scenario is untrusted input: the directory it grants a skill is read
//! into the skill, and whatever the skill returns can end up in the run's
//! state and store. So a relative grant must stay inside the scenario's own
//! directory once resolved (symlinks followed), and an absolute one must lie
//! under a root the host allows ([`FS_ROOTS_VAR`]). `/proc`, `/sys` and `/dev`
//! are never granted at all: `FsGrant::parse` in the runtime refuses them
//! before this check runs, for every grant, a `host skill call --grant` on
//! the user's own command line included, while these two rules are for
//! scenarios only.
//!
//! A pure function of canonical paths: the caller resolves them.

use std::path::{Path, PathBuf};

/// The environment variable listing the directories (`:`-separated) under
/// which a scenario may grant an absolute `fs` path.
pub const FS_ROOTS_VAR: &str = "SKILLHOST_FS_ROOTS";

/// The roots [`FS_ROOTS_VAR`] lists that exist, canonical.
pub fn allowed_roots() -> Vec<PathBuf> {
    std::env::var(FS_ROOTS_VAR)
        .unwrap_or_default()
        .split(':')
        .filter(|root| !root.is_empty())
        .filter_map(|root| Path::new(root).canonicalize().ok())
        .collect()
}

/// What an `fs` grant is checked against: canonical paths.
#[derive(Debug, Clone, Default)]
pub struct FsPolicy {
    /// The scenario file's directory; `None` when it cannot be resolved.
    pub scenario_dir: Option<PathBuf>,
    /// The roots of [`FS_ROOTS_VAR`] that exist.
    pub allowed_roots: Vec<PathBuf>,
}

/// Checks the grant `written` (as the scenario spells it), which resolved to
/// the directory `resolved`. `Err` says which rule it breaks and what to do.
pub fn check(policy: &FsPolicy, written: &str, resolved: &Path) -> Result<(), String> {
    if Path::new(written).is_absolute() {
        if policy.allowed_roots.iter().any(|r| resolved.starts_with(r)) {
            return Ok(());
        }
        let allowed = if policy.allowed_roots.is_empty() {
            format!("{FS_ROOTS_VAR} allows none")
        } else {
            format!(
                "{FS_ROOTS_VAR} allows {}",
                policy
                    .allowed_roots
                    .iter()
                    .map(|r| format!("`{}`", r.display()))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        return Err(format!(
            "absolute grant `{written}` (resolved to `{}`) is not under a root the host \
             allows ({allowed}): add its directory to {FS_ROOTS_VAR} (`:`-separated) in \
             the host's environment, or grant a path relative to the scenario's directory",
            resolved.display()
        ));
    }
    match &policy.scenario_dir {
        Some(dir) if resolved.starts_with(dir) => Ok(()),
        Some(dir) => Err(format!(
            "relative grant `{written}` resolves to `{}`, outside the scenario's directory \
             `{}` (`..` and symlinks are followed): a relative grant must stay inside the \
             scenario's directory; move the files there, or grant an absolute path under a \
             root listed in {FS_ROOTS_VAR}",
            resolved.display(),
            dir.display()
        )),
        None => Err(format!(
            "relative grant `{written}`: the scenario's directory cannot be resolved, so \
             nothing relative to it can be granted"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(roots: &[&str]) -> FsPolicy {
        FsPolicy {
            scenario_dir: Some(PathBuf::from("/srv/scenarios/research")),
            allowed_roots: roots.iter().map(PathBuf::from).collect(),
        }
    }

    #[test]
    fn relative_grants_stay_in_the_scenario_directory() {
        let p = policy(&[]);
        assert!(check(&p, "corpus", Path::new("/srv/scenarios/research/corpus")).is_ok());
        assert!(check(&p, ".", Path::new("/srv/scenarios/research")).is_ok());
        let err = check(&p, "../..", Path::new("/srv")).unwrap_err();
        assert!(err.contains("outside the scenario's directory"), "{err}");
        // A sibling sharing a prefix is not inside.
        let err = check(&p, "../research2", Path::new("/srv/scenarios/research2")).unwrap_err();
        assert!(err.contains("outside"), "{err}");
    }

    #[test]
    fn absolute_grants_need_an_allowed_root() {
        let err = check(&policy(&[]), "/data/corpus", Path::new("/data/corpus")).unwrap_err();
        assert!(err.contains("SKILLHOST_FS_ROOTS allows none"), "{err}");
        let p = policy(&["/data"]);
        assert!(check(&p, "/data/corpus", Path::new("/data/corpus")).is_ok());
        let err = check(&p, "/etc", Path::new("/etc")).unwrap_err();
        assert!(err.contains("allows `/data`"), "{err}");
    }
}
