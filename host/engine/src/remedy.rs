//! What to do about a refusal, typed: an error of the engine carries its
//! [`Remedy`]s and each face (the `host` command line, the MCP server, the
//! HTTP API) says them in its own words through [`Remedies`]: `host runs
//! answer RUN`, the `run_answer` tool, `POST /api/runs/RUN/answer`.
//!
//! The engine's own `Display` of an error names no face: it says what to
//! do in plain words ("answer it, or cancel it"), which is what
//! [`Plain`] renders.
//!
//! Must not: name a command, a tool or a route (the faces do).

/// One thing a person or an agent can do about a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Remedy {
    /// See the run: its steps, waits, components and child runs.
    ShowRun { run: String },
    /// Continue an unfinished run from its last checkpoint.
    ResumeRun { run: String },
    /// Continue a run whose scenario or components changed since it
    /// started, with the changed ones.
    ResumeChanged { run: String },
    /// Answer a run that waits at an approval node (a yes/no answer too).
    AnswerRun { run: String },
    /// Cancel a run.
    CancelRun { run: String },
    /// List the runs: only those waiting for an answer when `waiting`.
    ListRuns { waiting: bool },
    /// Start a new run of the scenario.
    StartRun,
    /// List a run's checkpoints.
    ListCheckpoints { run: String },
    /// Export a run (`run`, else any), with its components when
    /// `components`.
    ExportRun {
        run: Option<String>,
        components: bool,
    },
    /// Replay a run from an export of it rather than from its database.
    ReplayExport,
}

/// How one face says a [`Remedy`]: the way to do it (a command, a tool, a
/// route), or `None` when the face offers none; the error's message then
/// says what to do without it.
pub trait Remedies {
    fn way(&self, remedy: &Remedy) -> Option<String>;
}

/// No face: every remedy in plain words only (the errors' `Display`).
pub struct Plain;

impl Remedies for Plain {
    fn way(&self, _remedy: &Remedy) -> Option<String> {
        None
    }
}

/// The phrases an error's message builds around a face's ways.
pub(crate) struct Words<'a>(pub &'a dyn Remedies);

impl Words<'_> {
    /// ` with WAY`, or nothing.
    pub fn with(&self, remedy: Remedy) -> String {
        self.0
            .way(&remedy)
            .map(|way| format!(" with {way}"))
            .unwrap_or_default()
    }

    /// ` (WAY{tail})`, or nothing.
    pub fn aside(&self, remedy: Remedy, tail: &str) -> String {
        self.0
            .way(&remedy)
            .map(|way| format!(" ({way}{tail})"))
            .unwrap_or_default()
    }

    /// ` ({head}WAY)`, or nothing.
    pub fn aside_after(&self, head: &str, remedy: Remedy) -> String {
        self.0
            .way(&remedy)
            .map(|way| format!(" ({head}{way})"))
            .unwrap_or_default()
    }
}
