//! WASI 0.2, for components whose toolchains import it (Python, JavaScript, C
//! and Rust `wasip1`/`wasip2` builds), with no ambient authority and no
//! nondeterminism:
//!
//! - no preopened directories, no environment, no arguments, no sockets, no
//!   name lookup (wasmtime-wasi's defaults, never widened here);
//! - stdin is empty; stdout and stderr are captured, bounded, into the call's
//!   log (stdout as `info`, stderr as `warn`);
//! - the wall clock is fixed at 2000-01-01T00:00:00Z and the monotonic clock
//!   advances one microsecond per reading; "random" bytes come from a fixed
//!   seed. A skill that needs real time or entropy must get it through a
//!   journaled host import, so replays reproduce it.
//!
//! The context is created lazily: a pure skill never pays for it.
//!
//! WASI is not a capability a scenario grants, and it is linked the way
//! wasmtime-wasi requires: through `WasiView` on the call's store data, which
//! hands wasmtime-wasi this call's context.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::component::{Linker, ResourceTable};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::random::Deterministic;
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxView, WasiView};

use crate::call::{CallState, LogLevel};

/// Seconds from the Unix epoch to 2000-01-01T00:00:00Z.
const FIXED_WALL_CLOCK_SECS: u64 = 946_684_800;

/// Per-call WASI state.
pub(crate) struct WasiState {
    ctx: WasiCtx,
    table: ResourceTable,
    stdout: MemoryOutputPipe,
    stderr: MemoryOutputPipe,
}

impl WasiState {
    fn new(output_capacity: usize) -> Self {
        let stdout = MemoryOutputPipe::new(output_capacity);
        let stderr = MemoryOutputPipe::new(output_capacity);
        let ctx = WasiCtx::builder()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .wall_clock(FixedWallClock)
            .monotonic_clock(SteppingClock::default())
            .secure_random(Deterministic::new(seed_bytes(b"secure")))
            .insecure_random(Deterministic::new(seed_bytes(b"insecure")))
            .insecure_random_seed(0x5eed_5eed_5eed_5eed)
            .build();
        WasiState {
            ctx,
            table: ResourceTable::new(),
            stdout,
            stderr,
        }
    }

    /// Moves what the guest printed into the call's log.
    pub(crate) fn drain_output(&self, state_logs: &mut impl FnMut(LogLevel, String)) {
        for (pipe, level) in [
            (&self.stdout, LogLevel::Info),
            (&self.stderr, LogLevel::Warn),
        ] {
            let bytes = pipe.contents();
            let text = String::from_utf8_lossy(&bytes);
            for line in text.lines().filter(|l| !l.is_empty()) {
                state_logs(level, line.to_string());
            }
        }
    }
}

fn seed_bytes(label: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(32 * 8);
    let mut block = Sha256::digest(label);
    for _ in 0..8 {
        bytes.extend_from_slice(&block);
        block = Sha256::digest(block);
    }
    bytes
}

struct FixedWallClock;

impl HostWallClock for FixedWallClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn now(&self) -> Duration {
        Duration::from_secs(FIXED_WALL_CLOCK_SECS)
    }
}

#[derive(Default)]
struct SteppingClock {
    now: Arc<AtomicU64>,
}

impl HostMonotonicClock for SteppingClock {
    fn resolution(&self) -> u64 {
        1_000
    }

    fn now(&self) -> u64 {
        self.now.fetch_add(1_000, Ordering::Relaxed) + 1_000
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        let capacity = self.capabilities.log.max_bytes() as usize;
        let wasi = self
            .wasi
            .get_or_insert_with(|| Box::new(WasiState::new(capacity)));
        WasiCtxView {
            ctx: &mut wasi.ctx,
            table: &mut wasi.table,
        }
    }
}

pub(crate) fn link(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
    wasmtime_wasi::p2::add_to_linker_sync(linker)
}
