//! WASI 0.2, for components whose toolchains import it (Python, JavaScript, C
//! and Rust `wasip1`/`wasip2` builds), and for async components WASI 0.3.0
//! too (wasmtime-wasi's `p3`: `wasi:cli`, `wasi:clocks`, `wasi:random`,
//! `wasi:filesystem`, `wasi:sockets` at `@0.3.0`), over the same per-call
//! context, with no ambient authority and no nondeterminism:
//!
//! - no preopened directories, no environment, no arguments, no sockets
//!   (not even one that could reach no address, which would hold a file
//!   descriptor of the host's), no name lookup: wasmtime-wasi's defaults,
//!   stated explicitly and never widened here;
//! - stdin is empty; stdout and stderr (0.2's output streams, 0.3's
//!   `write-via-stream`) are captured into the call's log
//!   (stdout as `info`, stderr as `warn`), line by line in the order the
//!   lines were written, among the `log` capability's lines too (a line
//!   joins the log when its newline is written; what is left unfinished
//!   joins at the end of the call), up to the call's log budget: what
//!   is written past it is accepted and dropped, and the dropped lines are
//!   counted like the `log` capability's, so a chatty skill neither fails
//!   nor grows the host;
//! - the wall clock is fixed at 2000-01-01T00:00:00Z; the monotonic clock is
//!   virtual: it advances one microsecond per reading, and a timer on it
//!   (`subscribe-duration`, `subscribe-instant`, so every `sleep`; 0.3's
//!   `wait-for` and `wait-until`) fires at once by moving the clock to the
//!   timer's deadline, and the clock saturates at its end rather than
//!   wrap. A guest that sleeps 20 s returns at once and reads a clock 20 s
//!   later; nothing ever waits on real time, so a loop of sleeps is
//!   ordinary guest work that the call's deadline stops;
//! - `wasi:random` is a ChaCha12 generator seeded from the call's
//!   [`CallOptions::random_seed`](crate::CallOptions::random_seed), which
//!   the engine derives from the run, the node and the attempt and records
//!   with the step: different in every run and step, identical in a replay.
//!   It is for what WASI toolchains use it for (hash-table seeds, the
//!   randomised order of a language runtime), never for secrets: whoever
//!   has the seed has the bytes. A skill that needs real time or real
//!   entropy must get it through a journaled host import.
//!
//! The context is created lazily: a pure skill never pays for it.
//!
//! WASI is not a capability a scenario grants, and it is linked the way
//! wasmtime-wasi requires: through `WasiView` on the call's store data, which
//! hands wasmtime-wasi this call's context. The monotonic clock's interface
//! (0.2's and 0.3's) is then linked again over wasmtime-wasi's, whose timers
//! wait on real time (0.3's on tokio's timer, which the concurrent engine's
//! event loop does not drive). A component importing WASI 0.3 is called on
//! the concurrent engine (`imports::check`) and instantiated asynchronously:
//! 0.3's waits are concurrent host functions.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::SeedableRng as _;
use rand::rngs::StdRng;
use sha2::{Digest, Sha256};
use wasmtime::component::{HasData, Linker, Resource, ResourceTable};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::bindings::clocks::monotonic_clock;
use wasmtime_wasi::p2::{DynPollable, OutputStream, Pollable, StreamResult, subscribe};
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxView, WasiView};

use crate::call::{CallState, LogLevel};

/// Seconds from the Unix epoch to 2000-01-01T00:00:00Z.
const FIXED_WALL_CLOCK_SECS: u64 = 946_684_800;

/// Nanoseconds the virtual monotonic clock advances per reading.
const CLOCK_STEP_NS: u64 = 1_000;

/// The seed of one call's `wasi:random`.
pub type RandomSeed = [u8; 32];

/// Per-call WASI state.
pub(crate) struct WasiState {
    ctx: WasiCtx,
    table: ResourceTable,
    /// What the guest printed, both streams.
    output: Output,
    /// The virtual monotonic clock, in nanoseconds: shared by the context's
    /// clock and the timers.
    clock: Arc<AtomicU64>,
}

impl WasiState {
    fn new(output_capacity: usize, seed: &RandomSeed) -> Self {
        let output = Output::new(output_capacity);
        let clock = Arc::new(AtomicU64::new(0));
        let insecure_seed = derive_seed(seed, b"insecure-seed");
        let ctx = WasiCtx::builder()
            // No socket at all, not even one that could reach no address:
            // each would be a file descriptor of the host's, held as long
            // as the guest holds its handle. wasmtime-wasi 48's default,
            // said here (and tested) so that an upgrade cannot widen it.
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .stdout(output.stream(Stream::Stdout))
            .stderr(output.stream(Stream::Stderr))
            .wall_clock(FixedWallClock)
            .monotonic_clock(VirtualClock { now: clock.clone() })
            .secure_random(StdRng::from_seed(derive_seed(seed, b"random")))
            .insecure_random(StdRng::from_seed(derive_seed(seed, b"insecure")))
            .insecure_random_seed(u128::from_le_bytes(
                insecure_seed[..16].try_into().expect("16 of 32 bytes"),
            ))
            .build();
        WasiState {
            ctx,
            table: ResourceTable::new(),
            output,
            clock,
        }
    }

    /// Moves the lines the guest has finished printing into the call's log,
    /// in the order they were finished: the `log` capability calls it before
    /// each of its own lines, so the two stay in the order they were written.
    pub(crate) fn take_lines(&self, log: &mut impl FnMut(LogLevel, String)) {
        let lines = std::mem::take(&mut self.output.lock().lines);
        for (level, line) in lines {
            log(level, line);
        }
    }

    /// Moves everything the guest printed that is not in the log yet (its
    /// unfinished last lines too, stdout's first) into the call's log, and
    /// says how many lines were dropped past the budget (a partial line
    /// counts as one).
    pub(crate) fn drain_output(&self, log: &mut impl FnMut(LogLevel, String)) -> u64 {
        self.take_lines(log);
        let mut output = self.output.lock();
        for stream in [Stream::Stdout, Stream::Stderr] {
            let rest = std::mem::take(&mut output.partial[stream as usize]);
            let text = String::from_utf8_lossy(&rest);
            if !text.is_empty() {
                log(stream.level(), text.into_owned());
            }
        }
        output.dropped_newlines
            + output
                .dropped_partial
                .iter()
                .map(|&p| u64::from(p))
                .sum::<u64>()
    }
}

/// The guest's two output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stream {
    Stdout = 0,
    Stderr = 1,
}

impl Stream {
    /// The level a line of the stream is logged at.
    fn level(self) -> LogLevel {
        match self {
            Stream::Stdout => LogLevel::Info,
            Stream::Stderr => LogLevel::Warn,
        }
    }
}

/// What the guest printed on stdout and stderr: its finished lines in the
/// order they were finished, and each stream's unfinished line. Keeps up to
/// its capacity (both streams together), accepts and counts the rest.
/// Refusing the write instead (as wasmtime-wasi's memory pipe does) traps the
/// guest, and a skill must not fail for printing.
#[derive(Clone)]
struct Output {
    inner: Arc<Mutex<Printed>>,
}

struct Printed {
    /// Finished lines not yet in the call's log; empty lines are left out.
    lines: Vec<(LogLevel, String)>,
    /// Each stream's unfinished line.
    partial: [Vec<u8>; 2],
    /// Bytes kept so far, over both streams.
    kept: usize,
    capacity: usize,
    /// Newlines in the dropped bytes.
    dropped_newlines: u64,
    /// Per stream: whether dropped bytes follow its last dropped newline.
    dropped_partial: [bool; 2],
}

impl Output {
    fn new(capacity: usize) -> Self {
        Output {
            inner: Arc::new(Mutex::new(Printed {
                lines: Vec::new(),
                partial: [Vec::new(), Vec::new()],
                kept: 0,
                capacity,
                dropped_newlines: 0,
                dropped_partial: [false; 2],
            })),
        }
    }

    fn stream(&self, stream: Stream) -> Capture {
        Capture {
            output: self.clone(),
            stream,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Printed> {
        // Every write leaves the buffers whole; a poisoned lock is usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Printed {
    fn write(&mut self, stream: Stream, bytes: &[u8]) {
        let room = self.capacity.saturating_sub(self.kept);
        let keep = bytes.len().min(room);
        self.kept += keep;
        let partial = &mut self.partial[stream as usize];
        for piece in bytes[..keep].split_inclusive(|&b| b == b'\n') {
            match piece.strip_suffix(b"\n") {
                Some(end) => {
                    partial.extend_from_slice(end);
                    let line = std::mem::take(partial);
                    if !line.is_empty() {
                        let text = String::from_utf8_lossy(&line).into_owned();
                        self.lines.push((stream.level(), text));
                    }
                }
                None => partial.extend_from_slice(piece),
            }
        }
        let rest = &bytes[keep..];
        if !rest.is_empty() {
            self.dropped_newlines += rest.iter().filter(|&&b| b == b'\n').count() as u64;
            self.dropped_partial[stream as usize] = rest.last() != Some(&b'\n');
        }
    }
}

/// One of the guest's output streams, writing into the shared [`Output`].
#[derive(Clone)]
struct Capture {
    output: Output,
    stream: Stream,
}

impl IsTerminal for Capture {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Capture {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        // WASI 0.3's `write-via-stream`: into the same bounded log.
        Box::new(self.clone())
    }
}

/// WASI 0.3's side of a capture: every write is taken whole (what does not
/// fit in the log's budget is counted and dropped, as on 0.2), so nothing
/// ever waits and no runtime's reactor is needed.
impl tokio::io::AsyncWrite for Capture {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        bytes: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.output.lock().write(self.stream, bytes);
        std::task::Poll::Ready(Ok(bytes.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for Capture {
    async fn ready(&mut self) {}
}

impl OutputStream for Capture {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        self.output.lock().write(self.stream, &bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        // Always room: what does not fit is dropped, not refused.
        Ok(self.output.lock().capacity.max(4096))
    }
}

/// The seed of a call's `wasi:random` for the call that `scope` names (the
/// engine's: run id, node id, map item, attempt). Each part is hashed with
/// its length, so no two scopes collide by concatenation.
pub fn derive_random_seed(scope: &[&[u8]]) -> RandomSeed {
    let mut hasher = Sha256::new();
    hasher.update(b"skillhost wasi:random seed");
    for part in scope {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    hasher.finalize().into()
}

/// 32 bytes for one use (`label`) of the call's seed.
fn derive_seed(seed: &RandomSeed, label: &[u8]) -> RandomSeed {
    let mut hasher = Sha256::new();
    hasher.update(seed);
    hasher.update(label);
    hasher.finalize().into()
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

/// Moves the virtual clock `by` nanoseconds and returns where it is now. It
/// saturates: a wait of `u64::MAX` leaves the clock at its end, and later
/// readings stay there rather than wrap to its start (a clock that runs
/// backwards).
fn advance(clock: &AtomicU64, by: u64) -> u64 {
    let before = clock
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
            Some(now.saturating_add(by))
        })
        .unwrap_or_else(|now| now);
    before.saturating_add(by)
}

/// The context's view of the virtual monotonic clock.
struct VirtualClock {
    now: Arc<AtomicU64>,
}

impl HostMonotonicClock for VirtualClock {
    fn resolution(&self) -> u64 {
        CLOCK_STEP_NS
    }

    fn now(&self) -> u64 {
        advance(&self.now, CLOCK_STEP_NS)
    }
}

/// A timer on the virtual clock: ready at once, having moved the clock to
/// its deadline.
struct VirtualTimer {
    clock: Arc<AtomicU64>,
    deadline: u64,
}

#[wasmtime_wasi::async_trait]
impl Pollable for VirtualTimer {
    async fn ready(&mut self) {
        self.clock.fetch_max(self.deadline, Ordering::Relaxed);
    }
}

/// What the virtual clock's interface sees of a call.
struct ClockView<'a> {
    clock: &'a Arc<AtomicU64>,
    table: &'a mut ResourceTable,
}

struct HasClockView;

impl HasData for HasClockView {
    type Data<'a> = ClockView<'a>;
}

impl ClockView<'_> {
    fn subscribe_at(&mut self, deadline: u64) -> wasmtime::Result<Resource<DynPollable>> {
        let timer = self.table.push(VirtualTimer {
            clock: self.clock.clone(),
            deadline,
        })?;
        subscribe(self.table, timer)
    }
}

impl monotonic_clock::Host for ClockView<'_> {
    fn now(&mut self) -> wasmtime::Result<u64> {
        Ok(advance(self.clock, CLOCK_STEP_NS))
    }

    fn resolution(&mut self) -> wasmtime::Result<u64> {
        Ok(CLOCK_STEP_NS)
    }

    fn subscribe_instant(&mut self, when: u64) -> wasmtime::Result<Resource<DynPollable>> {
        self.subscribe_at(when)
    }

    fn subscribe_duration(&mut self, duration: u64) -> wasmtime::Result<Resource<DynPollable>> {
        let now = self.clock.load(Ordering::Relaxed);
        self.subscribe_at(now.saturating_add(duration))
    }
}

impl CallState {
    fn wasi_state(&mut self) -> &mut WasiState {
        let capacity = self.capabilities.log.max_bytes() as usize;
        let seed = &self.random_seed;
        self.wasi
            .get_or_insert_with(|| Box::new(WasiState::new(capacity, seed)))
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        let wasi = self.wasi_state();
        WasiCtxView {
            ctx: &mut wasi.ctx,
            table: &mut wasi.table,
        }
    }
}

/// Links WASI 0.2 into `linker`, and for the concurrent engine WASI 0.3
/// (`p3`) too; each one's monotonic clock is then linked again, virtual.
pub(crate) fn link(linker: &mut Linker<CallState>, abi: crate::Abi) -> wasmtime::Result<()> {
    wasmtime_wasi::p2::add_to_linker_sync(linker)?;
    if abi == crate::Abi::Async {
        wasmtime_wasi::p3::add_to_linker(linker)?;
    }
    linker.allow_shadowing(true);
    monotonic_clock::add_to_linker::<CallState, HasClockView>(linker, |state| {
        let wasi = state.wasi_state();
        ClockView {
            clock: &wasi.clock,
            table: &mut wasi.table,
        }
    })?;
    if abi == crate::Abi::Async {
        p3_clock::link(linker)?;
    }
    linker.allow_shadowing(false);
    Ok(())
}

/// WASI 0.3's monotonic clock on the call's virtual clock: wasmtime-wasi's
/// `wait-for` and `wait-until` sleep on tokio's timer, in real time; these
/// return at once, having moved the clock to the deadline, as a 0.2 timer
/// does. `now` reads the same clock as 0.2's.
mod p3_clock {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use wasmtime::component::{Accessor, HasData, Linker};
    use wasmtime_wasi::p3::bindings::clocks::monotonic_clock;

    use super::CLOCK_STEP_NS;
    use crate::call::CallState;

    /// What the interface sees of a call: its virtual clock.
    pub(super) struct Clock<'a> {
        now: &'a Arc<AtomicU64>,
    }

    pub(super) struct HasClock;

    impl HasData for HasClock {
        type Data<'a> = Clock<'a>;
    }

    pub(super) fn link(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
        monotonic_clock::add_to_linker::<CallState, HasClock>(linker, |state| Clock {
            now: &state.wasi_state().clock,
        })
    }

    impl monotonic_clock::Host for Clock<'_> {
        fn now(&mut self) -> wasmtime::Result<u64> {
            Ok(super::advance(self.now, CLOCK_STEP_NS))
        }

        fn get_resolution(&mut self) -> wasmtime::Result<u64> {
            Ok(CLOCK_STEP_NS)
        }
    }

    impl<U> monotonic_clock::HostWithStore<U> for HasClock {
        async fn wait_until(store: &Accessor<U, Self>, when: u64) -> wasmtime::Result<()> {
            store.with(|mut access| access.get().now.fetch_max(when, Ordering::Relaxed));
            Ok(())
        }

        async fn wait_for(store: &Accessor<U, Self>, how_long: u64) -> wasmtime::Result<()> {
            store.with(|mut access| super::advance(access.get().now, how_long));
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime_wasi::sockets::WasiSocketsCtxView;

    /// Neither WASI release creates a socket, not even one that could reach
    /// no address: each would hold a file descriptor of the host's for as
    /// long as the guest kept its handle. (wasmtime-wasi 48 refuses them by
    /// default; this holds the host to it across upgrades.)
    #[test]
    fn no_socket_is_created_on_either_release() {
        use wasmtime_wasi::p2::bindings::sockets::network::IpAddressFamily as Family2;
        use wasmtime_wasi::p2::bindings::sockets::{tcp_create_socket, udp_create_socket};
        use wasmtime_wasi::p3::bindings::sockets::types::{
            HostTcpSocket, IpAddressFamily as Family3,
        };

        let mut wasi = WasiState::new(1 << 10, &[0; 32]);
        let mut view = WasiSocketsCtxView {
            ctx: wasi.ctx.sockets(),
            table: &mut wasi.table,
        };
        for family in [Family2::Ipv4, Family2::Ipv6] {
            assert!(tcp_create_socket::Host::create_tcp_socket(&mut view, family).is_err());
            let udp = udp_create_socket::Host::create_udp_socket(&mut view, family);
            assert!(futures_executor::block_on(udp).is_err());
        }
        for family in [Family3::Ipv4, Family3::Ipv6] {
            assert!(HostTcpSocket::create(&mut view, family).is_err());
        }
        assert!(view.table.is_empty(), "nothing was kept for the guest");
    }
}
