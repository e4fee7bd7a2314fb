//! The MCP tool annotations a tool gets from what it is granted.
//!
//! The rule (also in docs/mcp.md): `fs` is read-only and `log` reaches
//! nothing, so a tool granted nothing else is `readOnlyHint` and
//! `idempotentHint` (the same input gives the same output: skills are
//! deterministic apart from their grants); `kv` writes state that outlives
//! the call, so it is neither read-only nor idempotent, and
//! `destructiveHint` (a `set` may overwrite a value); `http` and `llm` reach
//! beyond the host, so they are `openWorldHint` and not idempotent, and
//! `http` is not read-only (a request may change what it reaches). A run's
//! own history in the store is not counted as a write: it is Skillhost's
//! record of the call, not the caller's world. This module must not look
//! at anything but grants.

use rmcp::model::ToolAnnotations;
use skillhost_runtime::Grants;

/// Which kinds of reach a tool's calls have, summed over its grants.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hints {
    pub writes_kv: bool,
    pub http: bool,
    pub llm: bool,
}

impl Hints {
    /// What one set of grants (a node's, or a skill tool's) reaches.
    pub fn of(grants: &Grants) -> Hints {
        Hints {
            writes_kv: grants.kv.is_some(),
            http: grants.http.is_some(),
            llm: grants.llm.is_some(),
        }
    }

    /// Both reaches: a scenario reaches what any of its nodes does.
    pub fn union(self, other: Hints) -> Hints {
        Hints {
            writes_kv: self.writes_kv || other.writes_kv,
            http: self.http || other.http,
            llm: self.llm || other.llm,
        }
    }

    pub fn read_only(self) -> bool {
        !self.writes_kv && !self.http
    }

    pub fn open_world(self) -> bool {
        self.http || self.llm
    }

    pub fn idempotent(self) -> bool {
        !self.writes_kv && !self.http && !self.llm
    }

    pub fn destructive(self) -> bool {
        self.writes_kv
    }

    pub fn annotations(self, title: &str) -> ToolAnnotations {
        let annotations = ToolAnnotations::with_title(title)
            .read_only(self.read_only())
            .idempotent(self.idempotent())
            .open_world(self.open_world());
        // `destructiveHint` means something only for a tool that writes.
        match self.read_only() {
            true => annotations,
            false => annotations.destructive(self.destructive()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grants(specs: &[&str]) -> Grants {
        let mut grants = Grants::default();
        for spec in specs {
            grants.add_spec(spec).unwrap();
        }
        grants
    }

    #[test]
    fn hints_follow_the_grants() {
        let dir = tempfile::tempdir().unwrap();
        let fs = format!("fs={}", dir.path().display());
        let pure = Hints::of(&grants(&[&fs]));
        assert!(pure.read_only() && pure.idempotent() && !pure.open_world());
        let a = pure.annotations("t");
        assert_eq!(a.read_only_hint, Some(true));
        assert_eq!(a.destructive_hint, None);

        let kv = Hints::of(&grants(&["kv=notes"]));
        assert!(!kv.read_only() && !kv.idempotent() && kv.destructive() && !kv.open_world());
        assert_eq!(kv.annotations("t").destructive_hint, Some(true));

        let http = Hints::of(&grants(&["http=example.com"]));
        assert!(!http.read_only() && http.open_world() && !http.idempotent());
        assert_eq!(http.annotations("t").destructive_hint, Some(false));

        let both = pure.union(kv).union(http);
        assert_eq!(
            both,
            Hints {
                writes_kv: true,
                http: true,
                llm: false
            }
        );
    }
}
