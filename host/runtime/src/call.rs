//! One call of a skill: a fresh `Store` and instance, the limits, the bridge
//! from JSON and back, and the translation of every way a call can end into a
//! [`CallError`] that names the skill and the cause.
//!
//! Nothing survives a call but its [`CallReport`]: a failed lift poisons an
//! instance, so no instance is ever reused.
//!
//! A call's timeout is a real-time [`Deadline`] checked at every epoch tick;
//! its memory limit covers linear memories and tables; what the guest may
//! hand the host in one call (its output included) is bounded by wasmtime's
//! hostcall fuel. Each way a call ends has its own named error: a WASI `exit`
//! is `exited` with its code, a panic the skill logged is part of its trap.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use wasmtime::component::Val;
use wasmtime::{Store, Trap};

use crate::bridge;
use crate::capabilities::wasi::{RandomSeed, WasiState};
use crate::capabilities::{Backends, Capability, CapabilityCalls, Grants, TokenUsage};
use crate::engine::Deadline;
use crate::error::CallError;
use crate::journal::{Journal, JournalMode, JournalRecord, JournalValue};
use crate::limits::{AnswerRoom, CallLimiter, HostCallBudget, LimitHit, Limits};
use crate::skill::Skill;

/// What a call may use and how much of it.
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    pub limits: Limits,
    pub grants: Arc<Grants>,
    /// Record the journaled host calls (the default), or answer them from a
    /// recorded journal.
    pub journal: JournalMode,
    /// The seed of the call's `wasi:random`. The engine derives it from the
    /// run, the node and the attempt, so every step gets its own bytes and
    /// a replay of the step the same ones; see `capabilities::wasi`.
    pub random_seed: RandomSeed,
    /// The tokens (input and output) the call's `llm` completions may still
    /// use: what is left of its run's token budget. `None`: no budget. The
    /// capability refuses a completion once nothing is left; the engine
    /// judges what a call used against the whole budget.
    pub token_budget: Option<u64>,
    /// Where this call's `kv` goes instead of the runtime's backend
    /// ([`Backends::kv`](crate::Backends)); `None`: the runtime's. Looked at
    /// only when the call has a `kv` grant.
    pub kv: Option<crate::capabilities::kv::KvOverride>,
    /// Time each journaled host call ([`CallReport::host_calls`]), for a
    /// trace's spans. Off, nothing is measured.
    pub time_host_calls: bool,
    /// Where the deltas of the call's streamed completions (`llm-stream`)
    /// go as the skill is handed them; `None`: nowhere. Looked at only when
    /// the call has an `llm` grant.
    pub tokens: Option<crate::TokenSink>,
}

/// When one journaled host call was made and how long it took.
#[derive(Debug, Clone, PartialEq)]
pub struct HostCallTiming {
    pub capability: Capability,
    pub started: std::time::SystemTime,
    pub duration: Duration,
    /// Its record in [`CallReport::journal`]; None for a call refused
    /// before it was journaled (the host-call budget).
    pub entry: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogLine {
    pub level: LogLevel,
    pub message: String,
}

/// Everything one call produced, successful or not.
#[derive(Debug, Clone)]
pub struct CallReport {
    pub result: Result<serde_json::Value, CallError>,
    pub logs: Vec<LogLine>,
    /// Log lines dropped because the call's log budget was spent.
    pub logs_dropped: u64,
    /// Fuel consumed by the call (instantiation included).
    pub fuel_consumed: u64,
    /// Peak linear memory of the instance, in bytes.
    pub memory_peak_bytes: u64,
    /// Capabilities the skill tried to use without a grant.
    pub denied: Vec<Capability>,
    /// The journaled host calls, in the order the skill made them: recorded,
    /// or, in a replay, the entries the call was answered from. Empty (and
    /// unallocated) for a call that made none.
    pub journal: Vec<JournalRecord>,
    /// The tokens the call's `llm` completions used, replayed ones included.
    pub usage: TokenUsage,
    pub duration: Duration,
    /// Each journaled host call's timing, when the options asked for them
    /// ([`CallOptions::time_host_calls`]); empty otherwise.
    pub host_calls: Vec<HostCallTiming>,
}

impl CallReport {
    pub fn into_result(self) -> Result<serde_json::Value, CallError> {
        self.result
    }
}

/// What every capability of one call shares: the skill's name, the
/// capabilities it was denied, the call's journal and what is left of its
/// host-call budget.
pub(crate) struct CallScope {
    skill: Arc<str>,
    denied: Vec<Capability>,
    pub(crate) journal: Journal,
    pub(crate) budget: HostCallBudget,
    /// When the call must stop: the epoch callback stops the guest, and a
    /// host call that waits (`http`) waits no longer than this.
    deadline: Instant,
    /// The journaled host calls' timings, when they are measured.
    timings: Option<Vec<HostCallTiming>>,
}

impl CallScope {
    pub(crate) fn skill_name(&self) -> &str {
        &self.skill
    }

    pub(crate) fn deadline(&self) -> Instant {
        self.deadline
    }

    pub(crate) fn record_denial(&mut self, capability: Capability) {
        if !self.denied.contains(&capability) {
            self.denied.push(capability);
        }
    }

    /// One journaled host call of `capability` (see [`Journal::call`]),
    /// charged to the call's budget with the `written` bytes it carries. A
    /// call past the deadline traps as the epoch would: a loop of quick
    /// host calls stops at the deadline, not at its next tick in wasm.
    pub(crate) fn journaled<T: JournalValue>(
        &mut self,
        capability: Capability,
        request: serde_json::Value,
        written: u64,
        perform: impl FnOnce(AnswerRoom) -> Result<T, crate::capabilities::GuestError>,
    ) -> wasmtime::Result<Result<T, crate::capabilities::GuestError>> {
        let now = Instant::now();
        if now >= self.deadline {
            return Err(Trap::Interrupt.into());
        }
        let Some(timings) = &mut self.timings else {
            return self
                .journal
                .call(capability, request, written, &mut self.budget, perform);
        };
        let (started, before) = (std::time::SystemTime::now(), self.journal.recorded());
        let answer = self
            .journal
            .call(capability, request, written, &mut self.budget, perform);
        let after = self.journal.recorded();
        timings.push(HostCallTiming {
            capability,
            started,
            duration: now.elapsed(),
            entry: (after > before).then_some(before),
        });
        answer
    }
}

impl CallScope {
    /// The timing of a journaled host call that did not go through
    /// [`journaled`](Self::journaled) (a streamed completion, timed from
    /// its start to its stream's end), when timings are measured.
    pub(crate) fn time_call(
        &mut self,
        capability: Capability,
        started: std::time::SystemTime,
        duration: Duration,
        entry: Option<usize>,
    ) {
        if let Some(timings) = &mut self.timings {
            timings.push(HostCallTiming {
                capability,
                started,
                duration,
                entry,
            });
        }
    }
}

/// The data of one call's `Store`.
pub struct CallState {
    pub(crate) scope: CallScope,
    pub(crate) capabilities: CapabilityCalls,
    pub(crate) limiter: CallLimiter,
    pub(crate) wasi: Option<Box<WasiState>>,
    pub(crate) random_seed: RandomSeed,
}

impl CallState {
    /// The state of a call with `options`, granted `grants` (the options',
    /// less what the skill did not declare).
    pub(crate) fn new(
        skill: Arc<str>,
        options: &CallOptions,
        grants: &Grants,
        backends: &Backends,
    ) -> Self {
        CallState {
            scope: CallScope {
                skill,
                denied: Vec::new(),
                journal: Journal::new(&options.journal),
                budget: HostCallBudget::new(&options.limits),
                deadline: Instant::now() + options.limits.timeout,
                timings: options.time_host_calls.then(Vec::new),
            },
            capabilities: CapabilityCalls::new(options, grants, backends),
            limiter: CallLimiter::new(&options.limits),
            wasi: None,
            random_seed: options.random_seed,
        }
    }

    fn drain_wasi_output(&mut self) {
        if let Some(wasi) = self.wasi.take() {
            let log = &mut self.capabilities.log;
            let skill = &self.scope.skill;
            let dropped = wasi.drain_output(&mut |level, line| log.push(skill, level, line));
            log.dropped += dropped;
        }
    }
}

impl Skill {
    /// Calls the skill's `run` with `input` in a fresh instance.
    pub fn call(&self, input: &serde_json::Value, options: &CallOptions) -> CallReport {
        let start = Instant::now();
        let arg = match bridge::json_to_val(&self.input_type, input) {
            Ok(arg) => arg,
            Err(error) => {
                return CallReport {
                    result: Err(CallError::InvalidInput {
                        skill: self.name.clone(),
                        error,
                    }),
                    logs: Vec::new(),
                    logs_dropped: 0,
                    fuel_consumed: 0,
                    memory_peak_bytes: 0,
                    denied: Vec::new(),
                    journal: Vec::new(),
                    usage: TokenUsage::default(),
                    duration: start.elapsed(),
                    host_calls: Vec::new(),
                };
            }
        };

        let limits = &options.limits;
        let declared = self.declared_grants(&options.grants);
        let grants = declared.as_ref().unwrap_or(&options.grants);
        let state = CallState::new(self.name_arc.clone(), options, grants, self.backends());
        let mut store = Store::new(self.pre.engine(), state);
        store.limiter(|state| &mut state.limiter);
        // What the guest may hand the host in one call (the output's lift
        // included): enough for any output within the limit, however its
        // canonical layout compares with its JSON.
        store.set_hostcall_fuel(hostcall_fuel(limits));
        let fuel = limits.fuel.unwrap_or(u64::MAX);
        let result = store
            .set_fuel(fuel)
            .map_err(|e| self.host_error(e, false))
            .and_then(|()| {
                Deadline::at(store.data().scope.deadline).arm(&mut store);
                self.instantiate_and_run(&mut store, arg, limits)
            });
        let fuel_consumed = fuel - store.get_fuel().unwrap_or(fuel);

        let mut state = store.into_data();
        state.drain_wasi_output();
        let CallState {
            mut scope,
            mut capabilities,
            limiter,
            ..
        } = state;
        capabilities.llm.close_streams(&mut scope);
        capabilities.http.close_streams(&mut scope);
        let (journal, mismatch) = scope.journal.finish();
        let denied = scope.denied;
        let host_calls = scope.timings.unwrap_or_default();
        let over_budget = scope.budget.refused;
        // Whatever the guest made of it, a replay that diverged did not
        // reproduce the recorded call; one that merely stopped early did not
        // either, unless a limit stopped it, which its own error says.
        let mismatch = mismatch.filter(|m| {
            !m.left_unused
                || matches!(
                    result,
                    Ok(_) | Err(CallError::Skill { .. } | CallError::Trap { .. })
                )
        });
        let result = match mismatch {
            Some(mismatch) => Err(CallError::JournalMismatch {
                skill: self.name.clone(),
                capability: mismatch.capability.to_string(),
                entry: mismatch.entry,
                difference: mismatch.difference,
            }),
            None => result.map_err(|error| match error {
                // A guest that met a denied import usually turns the denial
                // into its own error; report the denial, which is what must
                // be fixed.
                CallError::Skill { .. } | CallError::Trap { .. } if !denied.is_empty() => {
                    CallError::CapabilityDenied {
                        skill: self.name.clone(),
                        capability: denied[0].to_string(),
                        message: error.to_string(),
                    }
                }
                // So is a host call the budget refused: the budget is what
                // must be raised (or the skill made to ask for less).
                CallError::Skill { .. } | CallError::Trap { .. } if over_budget.is_some() => {
                    CallError::HostCallBudget {
                        skill: self.name.clone(),
                        budget: over_budget
                            .map(|refusal| refusal.message)
                            .unwrap_or_default(),
                        message: error.to_string(),
                    }
                }
                other => other,
            }),
        };
        let log = capabilities.log;
        let result = result.map_err(|error| match error {
            CallError::Trap { skill, message } => CallError::Trap {
                message: with_panic_message(message, &log.lines),
                skill,
            },
            other => other,
        });
        CallReport {
            result,
            logs: log.lines,
            logs_dropped: log.dropped,
            fuel_consumed,
            memory_peak_bytes: limiter.memory_peak,
            denied,
            journal,
            usage: capabilities.llm.usage,
            duration: start.elapsed(),
            host_calls,
        }
    }

    fn instantiate_and_run(
        &self,
        store: &mut Store<CallState>,
        arg: Val,
        limits: &Limits,
    ) -> Result<serde_json::Value, CallError> {
        let instance = crate::skill::instantiate(&self.pre, store, self.instantiates_async)
            .map_err(|e| self.classify(e, store, limits))?;
        let func = instance
            .get_func(&mut *store, self.run_index)
            .ok_or_else(|| CallError::Host {
                skill: self.name.clone(),
                message: "the instance has no `run` export".into(),
                retryable: false,
            })?;
        let mut results = [Val::Bool(false)];
        match self.abi() {
            crate::Abi::Sync => func.call(&mut *store, std::slice::from_ref(&arg), &mut results),
            // The concurrent engine's event loop, driven on this thread until
            // the task returns; it stops with a trap when the guest waits on
            // nothing that can ever complete, and the epoch, fuel and memory
            // bounds stop it as they stop a synchronous call.
            crate::Abi::Async => futures_executor::block_on(func.call_async(
                &mut *store,
                std::slice::from_ref(&arg),
                &mut results,
            )),
        }
        .map_err(|e| self.classify(e, store, limits))?;
        let [result] = results;
        self.interpret(result, limits)
    }

    /// Turns `run`'s `result<T, skill-error>` into JSON or a [`CallError`].
    fn interpret(&self, result: Val, limits: &Limits) -> Result<serde_json::Value, CallError> {
        match result {
            Val::Result(Ok(Some(value))) => {
                let json = bridge::val_to_json(&self.output_type, &value).map_err(|e| {
                    CallError::InvalidOutput {
                        skill: self.name.clone(),
                        message: e.to_string(),
                    }
                })?;
                let size = json_size(&json);
                if size > limits.max_output_bytes {
                    return Err(CallError::OutputTooLarge {
                        skill: self.name.clone(),
                        limit_bytes: limits.max_output_bytes,
                        actual_bytes: size,
                    });
                }
                Ok(json)
            }
            Val::Result(Err(Some(error))) => Err(self.skill_error(*error)),
            other => Err(CallError::InvalidOutput {
                skill: self.name.clone(),
                message: format!("`run` returned {other:?} instead of result<T, skill-error>"),
            }),
        }
    }

    fn skill_error(&self, error: Val) -> CallError {
        let mut code = String::new();
        let mut message = String::new();
        let mut retryable = false;
        if let Val::Record(fields) = error {
            for (name, value) in fields {
                match (name.as_str(), value) {
                    ("code", Val::String(s)) => code = s,
                    ("message", Val::String(s)) => message = s,
                    ("retryable", Val::Bool(b)) => retryable = b,
                    _ => {}
                }
            }
        }
        CallError::Skill {
            skill: self.name.clone(),
            code,
            message,
            retryable,
        }
    }

    /// Names the cause of a failed instantiation or call.
    fn classify(
        &self,
        error: wasmtime::Error,
        store: &Store<CallState>,
        limits: &Limits,
    ) -> CallError {
        let skill = self.name.clone();
        match store.data().limiter.hit {
            Some(LimitHit::Memory { requested }) => {
                return CallError::MemoryLimit {
                    skill,
                    limit_mib: limits.memory_bytes >> 20,
                    requested_bytes: requested,
                };
            }
            Some(LimitHit::TableElements { .. }) => {
                return CallError::ResourceLimit {
                    skill,
                    limit_name: "table elements",
                    limit: u64::from(limits.max_table_elements),
                };
            }
            None => {}
        }
        if let Some(exit) = error.downcast_ref::<wasmtime_wasi::I32Exit>() {
            return CallError::Exited {
                skill,
                code: exit.0,
            };
        }
        if let Some(trap) = error.downcast_ref::<Trap>() {
            return match trap {
                Trap::Interrupt => CallError::Timeout {
                    skill,
                    limit_ms: limits.timeout.as_millis() as u64,
                },
                Trap::OutOfFuel => CallError::FuelExhausted {
                    skill,
                    limit: limits.fuel.unwrap_or(u64::MAX),
                },
                Trap::AsyncDeadlock => CallError::Deadlock { skill },
                trap => CallError::Trap {
                    skill,
                    message: trap_message(trap, &error),
                },
            };
        }
        let text = format!("{error:#}");
        if text.contains("fuel allocated for hostcalls has been exhausted") {
            let in_wasm = error
                .downcast_ref::<wasmtime::WasmBacktrace>()
                .is_some_and(|bt| !bt.frames().is_empty());
            let fuel = hostcall_fuel(limits) as u64;
            // With no guest frame on the stack, `run` had returned: the host
            // ran out lifting its result.
            return if in_wasm {
                CallError::ResourceLimit {
                    skill,
                    limit_name: "bytes passed to one host call",
                    limit: fuel,
                }
            } else {
                CallError::OutputTooLarge {
                    skill,
                    limit_bytes: limits.max_output_bytes,
                    actual_bytes: fuel,
                }
            };
        }
        if text.contains("store handle limit exceeded") {
            // wasmtime's bound on what one store holds at once (futures,
            // streams, subtasks, waitable sets, resources): what keeps a
            // skill that creates them without end from growing the host.
            return CallError::ResourceLimit {
                skill,
                limit_name: "handles (futures, streams, tasks and resources held at once)",
                limit: MAX_HANDLES,
            };
        }
        if text.contains("instance count too high") {
            return CallError::ResourceLimit {
                skill,
                limit_name: "instances",
                limit: u64::from(limits.max_instances),
            };
        }
        if text.contains("table count too high") {
            return CallError::ResourceLimit {
                skill,
                limit_name: "tables",
                limit: u64::from(limits.max_tables),
            };
        }
        if text.contains("concurrent") && text.contains("limit") {
            // The pooling allocator is full: other calls hold every slot.
            return self.host_error(error, true);
        }
        CallError::InvalidOutput {
            skill,
            message: text,
        }
    }

    fn host_error(&self, error: wasmtime::Error, retryable: bool) -> CallError {
        CallError::Host {
            skill: self.name.clone(),
            message: format!("{error:#}"),
            retryable,
        }
    }
}

/// A trap's message with the panic that caused it, when the skill logged one
/// (the SDK's panic hook logs `panicked at …` at error level before Rust
/// aborts with `unreachable`): a pure skill has no stderr to print it to.
fn with_panic_message(message: String, logs: &[LogLine]) -> String {
    let panic = logs
        .iter()
        .rev()
        .find(|line| line.level == LogLevel::Error && line.message.starts_with("panicked at "));
    match panic {
        Some(line) => format!("{message}; the skill {}", line.message),
        None => message,
    }
}

/// The trap's description plus the innermost named wasm frame.
fn trap_message(trap: &Trap, error: &wasmtime::Error) -> String {
    let frame = error
        .downcast_ref::<wasmtime::WasmBacktrace>()
        .and_then(|bt| {
            bt.frames()
                .iter()
                .find_map(|f| f.func_name().map(str::to_string))
        });
    match frame {
        Some(func) => format!("{trap} (in `{func}`)"),
        None => trap.to_string(),
    }
}

/// wasmtime's bound on the handles one store holds at once
/// (`DEFAULT_MAX_COMPONENT_HANDLES`, which it does not export).
const MAX_HANDLES: u64 = 100_000;

/// The bytes the guest may pass the host in one call, the output included:
/// wasmtime's default, or four times the output limit if that is more (a
/// value's canonical layout, padding included, is never more than about
/// twice its JSON).
fn hostcall_fuel(limits: &Limits) -> usize {
    const WASMTIME_DEFAULT: u64 = 128 << 20;
    limits
        .max_output_bytes
        .saturating_mul(4)
        .max(WASMTIME_DEFAULT)
        .try_into()
        .unwrap_or(usize::MAX)
}

/// Size of `value` as compact JSON, without building the string.
fn json_size(value: &serde_json::Value) -> u64 {
    struct Count(u64);
    impl Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a `Value` to an infallible writer cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}
