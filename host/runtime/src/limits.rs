//! Per-call limits and the `ResourceLimiter` that enforces them inside a store.
//!
//! The limiter never panics and never lets a guest grow past a limit: it refuses
//! the growth and remembers which limit was hit, so the caller can report the
//! limit by name instead of whatever trap the guest raised after the refusal.

use std::time::Duration;

use wasmtime::ResourceLimiter;

/// The most memory one call may ever be given; also the pooling allocator's slot
/// size, so it bounds the address space the host reserves per instance.
pub const MAX_MEMORY_BYTES: u64 = 4 << 30;

/// Host bytes per table element (a function reference is a pointer).
pub const TABLE_ELEMENT_BYTES: u64 = 8;

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
        }
    }
}

impl Limits {
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
