//! The codes the engine gives the failures it detects itself: the `code` of
//! an entry of `state.errors`, of a failed step's error and of a failed
//! run's error. A failure the engine did not detect keeps the code it came
//! with: a skill call's ([`skillhost_runtime::CallError::code`]: the skill's
//! own code, or the call's kind), a fatal rule's (`[[rule]] code`).
//!
//! Each code is stable (tests, tools and scenarios' guards match on it) and
//! listed in docs/scenarios.md ("Failure codes"); a test holds the two
//! together, and checks that every code an example or a doc compares with
//! is one the host can give.

use std::fmt;

macro_rules! failure_codes {
    ($($variant:ident = $code:literal,)*) => {
        /// A failure the engine detected, by its stable code.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum FailureCode {
            $($variant,)*
        }

        impl FailureCode {
            /// Every code, in the order docs/scenarios.md lists them.
            pub const ALL: &'static [FailureCode] = &[$(FailureCode::$variant,)*];

            /// The code as it is stored and shown (kebab-case).
            pub fn as_str(self) -> &'static str {
                match self {
                    $(FailureCode::$variant => $code,)*
                }
            }
        }
    };
}

failure_codes! {
    InputMappingFailed = "input-mapping-failed",
    InputConstraintFailed = "input-constraint-failed",
    OutputConstraintFailed = "output-constraint-failed",
    PreconditionFailed = "precondition-failed",
    PreconditionError = "precondition-error",
    PostconditionFailed = "postcondition-failed",
    PostconditionError = "postcondition-error",
    CitationCheckFailed = "citation-check-failed",
    CitationCheckError = "citation-check-error",
    ArtifactFailed = "artifact-failed",
    WriteFailed = "write-failed",
    OutputTooDeep = "output-too-deep",
    RuleError = "rule-error",
    BranchError = "branch-error",
    NoRoute = "no-route",
    MaxVisitsExceeded = "max-visits-exceeded",
    TokenBudgetExceeded = "token-budget-exceeded",
    UnknownSkill = "unknown-skill",
    MapOverFailed = "map-over-failed",
    MapOverNotAList = "map-over-not-a-list",
    MapItemFailed = "map-item-failed",
    PromptError = "prompt-error",
    ApprovalNeedsDatabase = "approval-needs-database",
    ApprovalNotRecorded = "approval-not-recorded",
    ApprovalTimeoutWithoutRoute = "approval-timeout-without-route",
    SubgraphInput = "subgraph-input",
    SubgraphFailed = "subgraph-failed",
    SubgraphError = "subgraph-error",
    SubgraphNotLoaded = "subgraph-not-loaded",
    SubgraphNotReplayable = "subgraph-not-replayable",
    SubgraphTooDeep = "subgraph-too-deep",
    RoutedToFailure = "routed-to-failure",
    Cancelled = "cancelled",
    StoreError = "store-error",
    ScenarioUnavailable = "scenario-unavailable",
    ScenarioChanged = "scenario-changed",
    ComponentsChanged = "components-changed",
}

impl fmt::Display for FailureCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for FailureCode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::FailureCode;

    #[test]
    fn codes_are_distinct_kebab_case() {
        let mut seen = std::collections::BTreeSet::new();
        for code in FailureCode::ALL {
            let text = code.as_str();
            assert!(seen.insert(text), "`{text}` twice");
            assert!(
                text.split('-')
                    .all(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_lowercase())),
                "`{text}` is not kebab-case"
            );
        }
    }
}
