//! Failures and their exit codes (1: the run failed, 2: the input, 3: the
//! environment), and how the libraries' errors become them: the engine's
//! remedies said as `host` commands ([`HostCommands`]).

use std::fmt::Display;

use skillhost_oci::OciError;
use skillhost_store::StoreError;

use super::DEFAULT_DATABASE;

/// A failure with its exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    /// The skill or run failed (exit 1).
    pub fn failed(message: impl Display) -> Self {
        Failure {
            code: 1,
            message: message.to_string(),
        }
    }

    /// Bad invocation or input (exit 2).
    pub fn bad_input(message: impl Display) -> Self {
        Failure {
            code: 2,
            message: message.to_string(),
        }
    }

    /// The environment is not fit (exit 3).
    pub fn environment(message: impl Display) -> Self {
        Failure {
            code: 3,
            message: message.to_string(),
        }
    }
}

pub type CliResult = Result<(), Failure>;

/// A registry failure: the environment's (exit 3: unreachable, a damaged
/// download, the cache) or the input's (exit 2).
pub fn oci_failure(e: OciError) -> Failure {
    if e.is_environment() {
        Failure::environment(e)
    } else {
        Failure::bad_input(e)
    }
}

/// An engine error as the CLI reports it: the store's and the engine's own
/// failures are the environment's (exit 3), the rest the input's (exit 2).
pub fn engine_failure(e: skillhost_engine::EngineError) -> Failure {
    use skillhost_engine::EngineError::*;
    match e {
        Store(_) | Internal { .. } => Failure::environment(e.render(&HostCommands)),
        _ => Failure::bad_input(e.render(&HostCommands)),
    }
}

/// The library's remedies as `host` commands: what the command line says
/// to do about a refusal.
pub struct HostCommands;

impl skillhost_engine::Remedies for HostCommands {
    fn way(&self, remedy: &skillhost_engine::Remedy) -> Option<String> {
        use skillhost_engine::Remedy::*;
        Some(match remedy {
            ShowRun { run } => format!("`host runs show {run}`"),
            ResumeRun { run } => format!("`host resume {run}`"),
            ResumeChanged { run } => format!("`host resume {run} --allow-changed`"),
            AnswerRun { run } => format!(
                "`host runs answer {run} --data JSON` (or `host runs approve|reject {run}` for a \
                 yes/no answer)"
            ),
            CancelRun { run } => format!("`host runs cancel {run}`"),
            ListRuns { waiting: false } => "`host runs list`".into(),
            ListRuns { waiting: true } => "`host runs list --status waiting`".into(),
            StartRun => "`host run <scenario>`".into(),
            ListCheckpoints { run } => format!("`host checkpoints {run}`"),
            ExportRun { run, components } => format!(
                "`host runs export{}{}`",
                match (run, components) {
                    (Some(run), _) => format!(" {run}"),
                    (None, true) => " RUN".into(),
                    (None, false) => String::new(),
                },
                if *components { " --components DIR" } else { "" }
            ),
            ReplayExport => "`host replay --file`".into(),
        })
    }
}

/// A database that cannot be opened is the environment (exit 3), except a URL
/// this build cannot use, which is a bad invocation (exit 2).
pub fn open_failure(e: StoreError) -> Failure {
    match e {
        StoreError::UnsupportedUrl { .. } => Failure::bad_input(e),
        StoreError::Missing { .. } => Failure::environment(format!(
            "{e}. Runs are stored in {DEFAULT_DATABASE} under the current directory unless \
             --database or SKILLHOST_DATABASE_URL names another; run from the directory the \
             runs were made in, or give their database with --database"
        )),
        _ => Failure::environment(e),
    }
}

/// A store that fails once open is the environment (exit 3).
pub fn store_error(e: StoreError) -> Failure {
    Failure::environment(e.to_string())
}

#[cfg(test)]
mod tests {
    use skillhost_engine::EngineError;
    use skillhost_engine::replay::ReplayError;

    use super::HostCommands;

    fn said(e: &EngineError) -> String {
        e.render(&HostCommands)
    }

    /// The engine's remedies, said as `host` commands, are the messages
    /// the command line has always printed, word for word.
    #[test]
    fn the_engines_remedies_are_said_as_host_commands() {
        let id = || "r1".to_string();
        assert_eq!(
            said(&EngineError::UnknownRun(id())),
            "run `r1` does not exist in this database; list runs with `host runs list`"
        );
        assert_eq!(
            said(&EngineError::RunFinished {
                id: id(),
                status: "completed".into()
            }),
            "run `r1` is completed; only unfinished runs can be resumed. Start a new run with \
             `host run <scenario>`, or see this run's steps with `host runs show r1`"
        );
        assert_eq!(
            said(&EngineError::ScenarioChanged {
                id: id(),
                scenario: "loop".into(),
                expected: "aa".into(),
                found: "bb".into()
            }),
            "run `r1` was started from scenario `loop` with digest aa, but the file now has \
             digest bb; resume it with the scenario it started with, or continue it with the \
             changed scenario with `host resume r1 --allow-changed`"
        );
        assert_eq!(
            said(&EngineError::ComponentsChanged {
                id: id(),
                changes: "skill `a` changed".into()
            }),
            "run `r1` started with other code than it would continue with: skill `a` changed; a \
             run in flight never switches code silently: resume it with the components it \
             started with (`host runs show r1` lists them), or continue it with the new ones \
             with `host resume r1 --allow-changed`"
        );
        assert_eq!(
            said(&EngineError::Waiting {
                id: id(),
                node: "approve".into(),
                prompt: "Ship?".into()
            }),
            "run `r1` is waiting for an answer at node `approve` (Ship?); answer it with `host \
             runs answer r1 --data JSON` (or `host runs approve|reject r1` for a yes/no \
             answer), or cancel it with `host runs cancel r1`"
        );
        assert_eq!(
            said(&EngineError::NotWaiting {
                id: id(),
                status: "completed".into()
            }),
            "run `r1` is completed, not waiting for an answer; only a run waiting at an \
             approval node can be answered (`host runs list --status waiting`)"
        );
        assert_eq!(
            said(&EngineError::AlreadyAnswered {
                id: id(),
                node: "approve".into(),
                by: "alice".into(),
                at: "T".into(),
                status: "queued".into()
            }),
            "run `r1` was already answered at node `approve` by `alice` at T and is queued now; \
             an answer is given once (see it with `host runs show r1`)"
        );
        assert_eq!(
            said(&EngineError::WaitTimedOut {
                id: id(),
                node: "approve".into(),
                deadline: "T".into()
            }),
            "run `r1` stopped waiting at node `approve`: its wait timed out at T, so it takes \
             the node's `on_timeout` route; continue it with `host resume r1` (a worker does \
             that by itself)"
        );
        assert_eq!(
            said(&EngineError::NoSuchCheckpoint {
                id: id(),
                seq: 9,
                last: 3
            }),
            "run `r1` has no checkpoint 9 (its checkpoints are 0 to 3); see them with `host \
             checkpoints r1`"
        );
        assert_eq!(
            said(&EngineError::ForkGoesNowhere { id: id(), seq: 3 }),
            "checkpoint 3 of run `r1` leads to no node (the run failed there with no failure \
             handler); fork at an earlier checkpoint (`host checkpoints r1`)"
        );
    }

    #[test]
    fn a_replays_remedies_are_said_as_host_commands() {
        let said = |e: ReplayError| e.render(&HostCommands);
        assert_eq!(
            said(ReplayError::UnknownRun {
                id: "r1".into(),
                db: "sqlite://x.db".into()
            }),
            "run `r1` does not exist in sqlite://x.db; list runs with `host runs list`"
        );
        assert_eq!(
            said(ReplayError::NotFinished {
                id: "r1".into(),
                status: "running".into()
            }),
            "run `r1` is running; only a finished run (completed or failed) can be replayed. \
             Resume it with `host resume r1` first, or see its steps with `host runs show r1`"
        );
        assert_eq!(
            said(ReplayError::ScenarioUnreadable {
                path: "s.toml".into(),
                message: "gone".into()
            }),
            "cannot read the scenario file `s.toml`: gone; a replay reads the scenario the run \
             was started from. Put it back, or replay an export of the run (`host runs export`) \
             with `host replay --file`"
        );
        assert_eq!(
            said(ReplayError::HasSubgraphs {
                id: "r1".into(),
                node: "child".into()
            }),
            "run `r1` runs another scenario as a child run (subgraph node `child`), which a \
             replay does not re-execute; replay each child run on its own (`host runs show r1` \
             lists them)"
        );
        assert_eq!(
            said(ReplayError::ComponentsMissing { missing: vec![] }),
            "0 component(s) the run used cannot be found: . Put each one back where the \
             scenario expects it, or pass --components DIR holding it as <sha256>.wasm (`host \
             runs export RUN --components DIR` writes them)"
        );
    }
}
