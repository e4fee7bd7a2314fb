//! Per-call limits, the `ResourceLimiter` that enforces them inside a store,
//! and the budget of the host calls that bring answers from outside the run.
//!
//! The limiter never panics and never lets a guest grow past a limit: it refuses
//! the growth and remembers which limit was hit, so the caller can report the
//! limit by name instead of whatever trap the guest raised after the refusal.
//!
//! The guest's memory is not the only memory a call grows: every answer of a
//! journaled host call (`kv`, `http`, `sql`, `llm`) is held by the host, in
//! the call's journal, until the call ends. [`HostCallBudget`] bounds those:
//! how many such calls one call makes ([`Limits::max_host_calls`]) and how
//! many bytes their requests, answers and `kv` writes take
//! ([`Limits::host_call_bytes`], by default as many as the call's memory).
//! A host call the budget cannot take is refused with a `budget-exceeded`
//! error the skill sees, never a partial answer; the budget costs a call
//! that makes no such host call nothing but its two counters.

use std::time::Duration;

use crate::capabilities::{Capability, GuestError};

use wasmtime::ResourceLimiter;

/// The most memory one call may ever be given; also the pooling allocator's slot
/// size, so it bounds the address space the host reserves per instance.
pub const MAX_MEMORY_BYTES: u64 = 4 << 30;

/// Host bytes per table element (a function reference is a pointer).
pub const TABLE_ELEMENT_BYTES: u64 = 8;

/// Journaled host calls one call may make unless its node says otherwise.
pub const DEFAULT_MAX_HOST_CALLS: u32 = 10_000;
/// The most journaled host calls a node may allow one call.
pub const MAX_HOST_CALLS_LIMIT: u32 = 1_000_000;
/// The most bytes of host-call answers a node may allow one call: as much
/// as the most memory.
pub const MAX_HOST_CALL_BYTES: u64 = MAX_MEMORY_BYTES;

/// The error code of a host call its call's budget cannot take.
pub const BUDGET_EXCEEDED: &str = "budget-exceeded";

/// Limits applied to one call of a skill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock time for instantiation plus the call.
    pub timeout: Duration,
    /// Linear memory and tables, summed over every memory and table of the
    /// component (a table element counts [`TABLE_ELEMENT_BYTES`]).
    pub memory_bytes: u64,
    /// Instructions budget (wasmtime fuel); `None` is unlimited.
    pub fuel: Option<u64>,
    /// Size of the output, measured as compact JSON.
    pub max_output_bytes: u64,
    /// Core instances one call may create.
    pub max_instances: u32,
    /// Tables one call may create.
    pub max_tables: u32,
    /// Elements one table may hold.
    pub max_table_elements: u32,
    /// Bytes one call may log; further lines are dropped and counted.
    pub max_log_bytes: u64,
    /// Journaled host calls (`kv`, `http`, `sql`, `llm`) one call may make.
    pub max_host_calls: u32,
    /// Bytes the host may hold for one call's journaled host calls: their
    /// requests and answers as the journal keeps them, and the values its
    /// `kv` writes carry. `None`: as many as `memory_bytes`.
    pub host_call_bytes: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: Duration::from_secs(30),
            memory_bytes: 256 << 20,
            fuel: None,
            max_output_bytes: 16 << 20,
            max_instances: 64,
            max_tables: 64,
            max_table_elements: 1_000_000,
            max_log_bytes: 64 << 10,
            max_host_calls: DEFAULT_MAX_HOST_CALLS,
            host_call_bytes: None,
        }
    }
}

impl Limits {
    /// The bytes of the call's host-call budget: `host_call_bytes`, else
    /// `memory_bytes`.
    pub fn host_call_bytes(&self) -> u64 {
        self.host_call_bytes.unwrap_or(self.memory_bytes)
    }

    /// Checks the limits against what the host can enforce.
    pub fn validate(&self) -> Result<(), String> {
        if self.memory_bytes > MAX_MEMORY_BYTES {
            return Err(format!(
                "memory limit of {} MiB exceeds the host's maximum of {} MiB",
                self.memory_bytes >> 20,
                MAX_MEMORY_BYTES >> 20
            ));
        }
        if self.timeout.is_zero() {
            return Err("timeout must be at least 1 ms".into());
        }
        if self.memory_bytes < 64 << 10 {
            return Err("memory limit must be at least 64 KiB (one WebAssembly page)".into());
        }
        if self.max_host_calls > MAX_HOST_CALLS_LIMIT {
            return Err(format!(
                "{} host calls per call exceeds the host's maximum of {MAX_HOST_CALLS_LIMIT}",
                self.max_host_calls
            ));
        }
        if let Some(bytes) = self.host_call_bytes
            && !(1..=MAX_HOST_CALL_BYTES).contains(&bytes)
        {
            return Err(format!(
                "a host-call budget of {bytes} bytes is not between 1 byte and the host's \
                 maximum of {} MiB",
                MAX_HOST_CALL_BYTES >> 20
            ));
        }
        Ok(())
    }
}

/// Which limit a call ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitHit {
    Memory { requested: u64 },
    TableElements { requested: u64 },
}

/// Enforces [`Limits`] for one store and records peak usage.
pub struct CallLimiter {
    memory_limit: u64,
    table_elements: u32,
    instances: u32,
    tables: u32,
    /// Bytes of linear memory currently allocated, over all memories.
    memory_now: u64,
    /// Bytes of table elements currently allocated, over all tables.
    tables_now: u64,
    /// Peak linear memory (tables not included), as the call reports it.
    pub memory_peak: u64,
    pub hit: Option<LimitHit>,
}

impl CallLimiter {
    pub fn new(limits: &Limits) -> Self {
        CallLimiter {
            memory_limit: limits.memory_bytes,
            table_elements: limits.max_table_elements,
            instances: limits.max_instances,
            tables: limits.max_tables,
            memory_now: 0,
            tables_now: 0,
            memory_peak: 0,
            hit: None,
        }
    }
}

impl ResourceLimiter for CallLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let after = self.memory_now.saturating_sub(current as u64) + desired as u64;
        if after + self.tables_now > self.memory_limit {
            self.hit = Some(LimitHit::Memory {
                requested: after + self.tables_now,
            });
            return Ok(false);
        }
        self.memory_now = after;
        self.memory_peak = self.memory_peak.max(after);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired as u64 > u64::from(self.table_elements) {
            self.hit = Some(LimitHit::TableElements {
                requested: desired as u64,
            });
            return Ok(false);
        }
        // A table's elements are host memory as much as a linear memory's
        // pages: 63 full tables are half a gigabyte. They count against the
        // same limit.
        let after = self
            .tables_now
            .saturating_sub(current as u64 * TABLE_ELEMENT_BYTES)
            + desired as u64 * TABLE_ELEMENT_BYTES;
        if self.memory_now + after > self.memory_limit {
            self.hit = Some(LimitHit::Memory {
                requested: self.memory_now + after,
            });
            return Ok(false);
        }
        self.tables_now = after;
        Ok(true)
    }

    fn instances(&self) -> usize {
        self.instances as usize
    }

    fn tables(&self) -> usize {
        self.tables as usize
    }

    fn memories(&self) -> usize {
        // Memories are bounded by bytes; the count only needs to stop absurd
        // components, and the pooling allocator bounds it per component too.
        64
    }
}

/// What one call's journaled host calls may still take: calls and bytes.
/// Both modes of the journal charge it alike (a replay charges the recorded
/// entries), so a replay under the same limits makes the same decisions.
#[derive(Debug, Clone)]
pub(crate) struct HostCallBudget {
    max_calls: u32,
    max_bytes: u64,
    /// Whether `max_bytes` is the node's own, or its memory's.
    bytes_set: bool,
    calls: u32,
    bytes: u64,
    /// The first refusal, for the call's error if the skill then fails.
    pub(crate) refused: Option<GuestError>,
}

/// Room an answer has in the budget when its host call is made, and how to
/// word its refusal.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AnswerRoom {
    /// Bytes the answer may take as the journal holds it.
    pub bytes: u64,
    max_bytes: u64,
    bytes_set: bool,
    used: u64,
}

impl AnswerRoom {
    /// The refusal of a `capability` answer that takes `size` bytes held
    /// (`None`: more than the room, size unknown).
    pub(crate) fn refuse(&self, capability: Capability, size: Option<u64>) -> GuestError {
        let takes = match size {
            Some(size) => format!("{size} bytes of host memory, more than the {}", self.bytes),
            None => format!("more than the {} bytes of host memory", self.bytes),
        };
        budget_error(format!(
            "the `{capability}` answer would take {takes} left of the call's {} bytes for host \
             calls ({} used); {}",
            self.max_bytes,
            self.used,
            raise_bytes(self.bytes_set, capability),
        ))
    }
}

impl HostCallBudget {
    pub(crate) fn new(limits: &Limits) -> Self {
        HostCallBudget {
            max_calls: limits.max_host_calls,
            max_bytes: limits.host_call_bytes(),
            bytes_set: limits.host_call_bytes.is_some(),
            calls: 0,
            bytes: 0,
            refused: None,
        }
    }

    /// Admits one more `capability` call whose request (and what it
    /// writes) takes `request` bytes, or refuses it before anything is
    /// performed or journaled: no calls left, or no room for the request.
    pub(crate) fn admit(
        &mut self,
        capability: Capability,
        request: u64,
    ) -> Result<AnswerRoom, GuestError> {
        if self.calls >= self.max_calls {
            return Err(self.refused(budget_error(format!(
                "the call has made {} `kv`, `http`, `sql` and `llm` calls, the most one call may \
                 make, so this `{capability}` call is refused; raise the node's \
                 `max_host_calls` (now {}, at most {MAX_HOST_CALLS_LIMIT}), or make fewer, \
                 larger calls",
                self.calls, self.max_calls
            ))));
        }
        let left = self.max_bytes - self.bytes;
        if request > left {
            return Err(self.refused(budget_error(format!(
                "this `{capability}` call's request takes {request} bytes of host memory, and \
                 only {left} of the call's {} bytes for host calls are left ({} used); {}",
                self.max_bytes,
                self.bytes,
                raise_bytes(self.bytes_set, capability),
            ))));
        }
        self.calls += 1;
        Ok(AnswerRoom {
            bytes: left - request,
            max_bytes: self.max_bytes,
            bytes_set: self.bytes_set,
            used: self.bytes,
        })
    }

    /// The room an answer has now, without admitting a call: what a
    /// streamed answer, recorded when the call ends, may take.
    pub(crate) fn room(&self) -> AnswerRoom {
        AnswerRoom {
            bytes: self.max_bytes - self.bytes,
            max_bytes: self.max_bytes,
            bytes_set: self.bytes_set,
            used: self.bytes,
        }
    }

    /// Takes `bytes` more from the budget (never past its end).
    pub(crate) fn charge(&mut self, bytes: u64) {
        self.bytes = self.bytes.saturating_add(bytes).min(self.max_bytes);
    }

    /// Remembers the first refusal; returns it.
    pub(crate) fn refused(&mut self, error: GuestError) -> GuestError {
        self.refused.get_or_insert_with(|| error.clone());
        error
    }
}

fn budget_error(message: String) -> GuestError {
    GuestError {
        code: BUDGET_EXCEEDED.into(),
        message,
        retryable: false,
    }
}

/// Where a budget of host-call bytes is raised.
fn raise_bytes(set: bool, capability: Capability) -> String {
    let fewer = capability.ask_less();
    if set {
        format!("raise the node's `host_call_mb`, or {fewer}")
    } else {
        format!(
            "raise the node's `host_call_mb` (by default as much as its `memory_mb`), or {fewer}"
        )
    }
}
