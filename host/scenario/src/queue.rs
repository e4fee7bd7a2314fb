//! How a scenario's runs wait in the queue and when they start on their
//! own: `[scenario] priority`, `concurrency` and `concurrency_key` (the
//! queue's flow control, which the store enforces when a worker claims a
//! run), and `[[schedule]]` (cron entries that `host worker --schedules`
//! turns into queued runs, one per tick).
//!
//! Owns: parsing and checking those keys, a run's concurrency key from its
//! input, and the arithmetic of ticks (which ticks are due between two
//! instants, in UTC). Must not: read a clock (callers pass the time, so
//! tests choose it), touch a store, or run anything.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use croner::Cron;
use croner::parser::{CronParser, Year};
use serde_json::Value;
use toml::Spanned;

use super::diagnostic::codes;
use super::file::{Header, ScheduleDecl};
use super::parse::Parser;
use super::{Expr, Vars};

/// The variables a `concurrency_key` sees: the run's input only, since it
/// is evaluated when the run is queued, before it has any state.
pub const KEY_VARS: &[&str] = &["input"];

/// `[scenario] priority`, `concurrency`, `concurrency_key`.
#[derive(Debug, Clone, Default)]
pub struct QueuePolicy {
    /// Queued runs of a higher priority are claimed first (default 0;
    /// negative runs after the default).
    pub priority: i64,
    /// The most runs of this scenario (by name) running at once, across
    /// every worker on the database.
    pub concurrency: Option<u32>,
    /// CEL over `input`: runs of this scenario with the same key run one at
    /// a time.
    pub concurrency_key: Option<Expr>,
}

impl QueuePolicy {
    /// The concurrency key of a run with this input (defaults applied): the
    /// expression's value, a string as it is and anything else as canonical
    /// JSON; `None` without an expression or when it is `null` (such a run
    /// is held by no key).
    pub fn key_for(&self, input: &Value) -> Result<Option<String>, String> {
        let Some(expr) = &self.concurrency_key else {
            return Ok(None);
        };
        let mut vars = Vars::new();
        vars.set("input", input);
        match expr.eval(&vars) {
            Ok(Value::Null) => Ok(None),
            Ok(Value::String(key)) => Ok(Some(key)),
            Ok(other) => Ok(Some(skillhost_model::canonical_json(&other))),
            Err(e) => Err(format!(
                "`[scenario] concurrency_key` (`{}`) failed on this input: {e}",
                expr.source
            )),
        }
    }
}

/// One `[[schedule]]` entry.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// What its ticks are recorded under: `name`, else its position (`1`, …).
    pub name: String,
    /// The cron expression as written.
    pub cron: String,
    parsed: Arc<Cron>,
    /// The input of every run it starts, as written (the scenario's
    /// `[input]` defaults are applied when a run is queued).
    pub input: Value,
    pub line: usize,
}

/// The environment variable that sets the shortest time between two ticks
/// of a schedule (a duration: `1m`, `30s`, `1h`). It is the host
/// operator's, not the scenario's: a scenario cannot lower it.
pub const MIN_SCHEDULE_INTERVAL_VAR: &str = "SKILLHOST_MIN_SCHEDULE_INTERVAL";

/// The shortest time between two ticks of a schedule when
/// [`MIN_SCHEDULE_INTERVAL_VAR`] is not set: one minute, the finest a
/// five-field cron expresses. A six-field cron whose seconds name more than
/// one second (`*/10 * * * * *`) would queue a run every few seconds,
/// forever; the checker refuses it.
pub const DEFAULT_MIN_SCHEDULE_INTERVAL_MS: i64 = 60_000;

/// How many of a schedule's ticks (from [`FIRST_LOOK_MS`]) the checker
/// measures the gaps between: enough for every second of a minute and for
/// a day of every-minute ticks, so that the gaps a pattern repeats are
/// among them.
const TICKS_MEASURED: usize = 2_000;

/// The shortest time between two ticks this host allows: [`MIN_SCHEDULE_INTERVAL_VAR`],
/// else [`DEFAULT_MIN_SCHEDULE_INTERVAL_MS`]; at least a second.
pub fn min_schedule_interval_ms() -> Result<i64, String> {
    let Ok(text) = std::env::var(MIN_SCHEDULE_INTERVAL_VAR) else {
        return Ok(DEFAULT_MIN_SCHEDULE_INTERVAL_MS);
    };
    let interval = skillhost_model::parse_duration(&text)
        .map_err(|e| format!("{MIN_SCHEDULE_INTERVAL_VAR}: {e}"))?;
    match i64::try_from(interval.as_millis()) {
        Ok(ms) if ms >= 1_000 => Ok(ms),
        _ => Err(format!(
            "{MIN_SCHEDULE_INTERVAL_VAR} is `{text}`; a cron fires at most once a second, so \
             give at least `1s` (it is unset by default: one minute)"
        )),
    }
}

/// `ms` as people write a duration: `1m`, `90s`, `1500ms`.
fn duration_text(ms: i64) -> String {
    match ms {
        ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        ms if ms % 1_000 == 0 => format!("{}s", ms / 1_000),
        ms => format!("{ms}ms"),
    }
}

/// Where the checker starts looking for a schedule's ticks: 2000-01-01
/// 00:00:00 UTC. The Gregorian calendar repeats every 400 years, weekdays
/// included, so a cron with no tick in the 400 years after it has none
/// ever.
const FIRST_LOOK_MS: i64 = 946_684_800_000;
/// 2400-01-01 00:00:00 UTC: 400 years after [`FIRST_LOOK_MS`].
const LAST_LOOK_MS: i64 = 13_569_465_600_000;

fn rfc3339(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms).map_or_else(
        || ms.to_string(),
        |t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
    )
}

/// The ticks due between two instants.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DueTicks {
    /// Unix milliseconds, oldest first.
    pub ticks: Vec<i64>,
    /// The newest tick left out because it was older than the limit allows,
    /// if any was.
    pub skipped_newest: Option<i64>,
}

impl Schedule {
    /// Parses `cron` as this module accepts it: five fields (minute, hour,
    /// day of month, month, day of week), or six with seconds first; names
    /// (`MON`, `JAN`) and `@hourly`-style nicknames; always in UTC.
    pub fn parse_cron(cron: &str) -> Result<Cron, String> {
        CronParser::builder()
            .year(Year::Disallowed)
            .build()
            .parse(cron)
            .map_err(|e| e.to_string())
    }

    /// Why a parsed cron cannot be a schedule: it never fires (a date that
    /// never comes, such as 31 February), or two of its ticks come closer
    /// than `min_interval_ms`, among the first [`TICKS_MEASURED`] from
    /// 2000 on. The code and the message.
    fn firing_problem(cron: &Cron, min_interval_ms: i64) -> Option<(&'static str, String)> {
        let tick = |after_ms: i64| {
            let after = DateTime::<Utc>::from_timestamp_millis(after_ms)?;
            cron.find_next_occurrence(&after, false)
                .ok()
                .map(|t| t.timestamp_millis())
                .filter(|&ms| ms < LAST_LOOK_MS)
        };
        // From the last millisecond before a minute starts, so the first
        // tick is the first second it names in the first minute it fires.
        let Some(mut last) = tick(FIRST_LOOK_MS - 1) else {
            return Some((
                codes::CRON_NEVER_FIRES,
                "never fires: no date in a whole 400-year cycle of the calendar matches it (a \
                 day the month never has, such as `0 0 31 2 *`); write a date that comes"
                    .to_string(),
            ));
        };
        for _ in 1..TICKS_MEASURED {
            let next = tick(last)?;
            if next - last < min_interval_ms {
                return Some((
                    codes::CRON_TOO_FREQUENT,
                    format!(
                        "fires {} after a tick (at {} and {}); this host runs a schedule at \
                         most once every {} ({MIN_SCHEDULE_INTERVAL_VAR}, one minute unless \
                         its operator set it): name one second in a six-field cron, or write \
                         five fields (`* * * * *` is every minute)",
                        duration_text(next - last),
                        rfc3339(last),
                        rfc3339(next),
                        duration_text(min_interval_ms)
                    ),
                ));
            }
            last = next;
        }
        None
    }

    /// The first tick strictly after `after_ms`, or `None` if there is none
    /// (a date that never comes, such as 30 February).
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        let after = DateTime::<Utc>::from_timestamp_millis(after_ms)?;
        self.parsed
            .find_next_occurrence(&after, false)
            .ok()
            .map(|t| t.timestamp_millis())
    }

    /// The ticks strictly after `after_ms` and at or before `until_ms`, at
    /// most the `limit` newest of them (older ones are skipped: a worker
    /// that was down for a week does not start a week of runs). Searched
    /// backwards from `until_ms`, so the work is bounded by `limit`, not by
    /// the length of the gap.
    pub fn due_ticks(&self, after_ms: i64, until_ms: i64, limit: usize) -> DueTicks {
        let mut due = DueTicks::default();
        let Some(mut cursor) = DateTime::<Utc>::from_timestamp_millis(until_ms) else {
            return due;
        };
        let mut inclusive = true;
        while let Ok(tick) = self.parsed.find_previous_occurrence(&cursor, inclusive) {
            let ms = tick.timestamp_millis();
            if ms <= after_ms {
                break;
            }
            if due.ticks.len() == limit {
                due.skipped_newest = Some(ms);
                break;
            }
            due.ticks.push(ms);
            cursor = tick;
            inclusive = false;
        }
        due.ticks.reverse();
        due
    }
}

impl Parser<'_> {
    /// `[scenario] priority`, `concurrency` and `concurrency_key`, each bad
    /// value reported with what to write instead.
    pub(crate) fn queue_policy(&mut self, header: &Header) -> QueuePolicy {
        let mut policy = QueuePolicy {
            priority: header.priority.as_ref().map_or(0, |p| *p.get_ref()),
            ..QueuePolicy::default()
        };
        if let Some(limit) = &header.concurrency {
            match u32::try_from(*limit.get_ref()) {
                Ok(n) if n > 0 => policy.concurrency = Some(n),
                _ => {
                    let line = self.line(limit);
                    self.reporter.error(
                        line,
                        None,
                        codes::INVALID_VALUE,
                        format!(
                            "`[scenario] concurrency` is {}; it is the most runs of this \
                             scenario running at once across all workers, a whole number from 1 \
                             (e.g. `concurrency = 2`), or leave it out for no limit",
                            limit.get_ref()
                        ),
                    );
                }
            }
        }
        if let Some(source) = &header.concurrency_key {
            policy.concurrency_key = self.expr(None, "`[scenario] concurrency_key`", source);
        }
        policy
    }

    /// The `[[schedule]]` entries: each cron expression parsed, names
    /// unique. Their inputs are checked against `[input]` once the scenario
    /// is built ([`check_inputs`]).
    pub(crate) fn schedules(&mut self, decls: Vec<Spanned<ScheduleDecl>>) -> Vec<Schedule> {
        let mut schedules: Vec<Schedule> = Vec::new();
        let min_interval = match decls.first() {
            Some(first) => match min_schedule_interval_ms() {
                Ok(ms) => ms,
                Err(e) => {
                    let line = self.line(first);
                    self.reporter.error(line, None, codes::INVALID_VALUE, e);
                    return schedules;
                }
            },
            None => return schedules,
        };
        for (index, decl) in decls.into_iter().enumerate() {
            let line = self.line(&decl);
            let decl = decl.into_inner();
            let name = match &decl.name {
                Some(name) => {
                    let written = name.get_ref().trim();
                    if written.is_empty() {
                        let line = self.line(name);
                        self.reporter.error(
                            line,
                            None,
                            codes::INVALID_VALUE,
                            format!(
                                "[[schedule]] {}: `name` is empty; name it (e.g. `nightly`) or \
                                 leave `name` out",
                                index + 1
                            ),
                        );
                        continue;
                    }
                    written.to_owned()
                }
                None => (index + 1).to_string(),
            };
            if schedules.iter().any(|s| s.name == name) {
                self.reporter.error(
                    line,
                    None,
                    codes::INVALID_VALUE,
                    format!(
                        "[[schedule]] `{name}`: another schedule has this name; each needs its \
                         own, since its ticks are recorded under it"
                    ),
                );
                continue;
            }
            let cron = decl.cron.get_ref();
            let parsed = Schedule::parse_cron(cron).map(|parsed| {
                let problem = Schedule::firing_problem(&parsed, min_interval);
                (parsed, problem)
            });
            match parsed {
                Ok((_, Some((code, problem)))) => {
                    let line = self.line(&decl.cron);
                    self.reporter.error(
                        line,
                        None,
                        code,
                        format!("[[schedule]] `{name}`: cron `{cron}` {problem}"),
                    );
                }
                Ok((parsed, None)) => schedules.push(Schedule {
                    name,
                    cron: cron.clone(),
                    parsed: Arc::new(parsed),
                    input: Value::Object(decl.input),
                    line,
                }),
                Err(e) => {
                    let line = self.line(&decl.cron);
                    self.reporter.error(
                        line,
                        None,
                        codes::BAD_CRON,
                        format!(
                            "[[schedule]] `{name}`: cron `{cron}` does not parse: {e}; write five \
                             fields (minute hour day-of-month month day-of-week, e.g. \
                             `0 * * * *` for every hour) or six with seconds first \
                             (e.g. `*/10 * * * * *`), in UTC"
                        ),
                    );
                }
            }
        }
        schedules
    }
}

/// Reports each schedule whose input, with `[input]`'s defaults applied,
/// is not a valid input of the scenario.
pub(crate) fn check_inputs(scenario: &super::Scenario, reporter: &mut super::diagnostic::Reporter) {
    for schedule in &scenario.schedules {
        let mut input = schedule.input.clone();
        scenario.apply_input_defaults(&mut input);
        if let Err(message) = scenario.validate_input(&input) {
            reporter.error(
                schedule.line,
                None,
                codes::SCHEDULE_INPUT,
                format!(
                    "[[schedule]] `{}`: its `input` does not fit [input]: {message}",
                    schedule.name
                ),
            );
        }
    }
}
