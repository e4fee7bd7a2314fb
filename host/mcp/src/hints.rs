//! The MCP tool annotations a tool gets from what it is granted.
//!
//! The rule (also in docs/mcp.md) is each capability's, stated in its
//! module as its `Effects` (`skillhost_runtime::Capability::effects`): `fs`
//! and `sql` read what ships with the scenario and `log` reaches nothing, so
//! a tool granted nothing else is `readOnlyHint` and `idempotentHint` (the
//! same input gives the same output: skills are deterministic apart from
//! their grants); `kv` writes state that outlives the call, so it is
//! neither read-only nor idempotent, and `destructiveHint` (a `set` may
//! overwrite a value); `http` and `llm` reach beyond the host, so they are
//! `openWorldHint` and not idempotent, and `http` is not read-only (a
//! request may change what it reaches). A run's own history in the store is
//! not counted as a write: it is Skillhost's record of the call, not the
//! caller's world. This module must not look at anything but grants.

use rmcp::model::ToolAnnotations;
use skillhost_runtime::{Effects, Grants};

/// Which kinds of reach a tool's calls have, summed over its grants.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hints(pub Effects);

impl Hints {
    /// What one set of grants (a node's, or a skill tool's) reaches.
    pub fn of(grants: &Grants) -> Hints {
        Hints(grants.effects())
    }

    /// Both reaches: a scenario reaches what any of its nodes does.
    pub fn union(self, other: Hints) -> Hints {
        Hints(self.0.union(other.0))
    }

    pub fn read_only(self) -> bool {
        self.0.read_only()
    }

    pub fn open_world(self) -> bool {
        self.0.open_world
    }

    pub fn idempotent(self) -> bool {
        self.0.idempotent()
    }

    pub fn destructive(self) -> bool {
        self.0.destructive
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

        let llm = Hints::of(&grants(&["llm=local/m"]));
        assert!(llm.read_only() && llm.open_world() && !llm.idempotent());
        assert_eq!(llm.annotations("t").destructive_hint, None);

        let both = pure.union(kv).union(http);
        assert!(!both.read_only() && both.destructive() && both.open_world());
        assert!(!both.idempotent());
        assert_eq!(both, kv.union(http));
    }
}
