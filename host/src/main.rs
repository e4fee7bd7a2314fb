//! The `host` binary: argument parsing and printing only; the work is in the
//! library crates under `host/` (runtime, scenario, store, engine, build).

mod cli;
#[cfg(test)]
mod cli_layering;

/// mimalloc instead of glibc's malloc: a skill call allocates and frees many
/// small objects (the store, its instance records, JSON values), and glibc's
/// allocator was about a quarter of the engine's per-node time (see
/// `docs/architecture.md`, "Allocation").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // Like other Unix tools, end quietly when the reader of our output goes
    // away (`host skill inspect x.wasm | head`) instead of panicking in println!.
    // SAFETY: resetting a signal disposition to its default before any thread
    // starts has no preconditions.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // `RUST_BACKTRACE=1`, common in a Rust developer's shell, also turns on
    // `std::backtrace::Backtrace::capture` for every error value created,
    // unless `RUST_LIB_BACKTRACE` says otherwise. wasmtime creates one on
    // every async (WASI 0.3) call, when the store's idle worker fiber is
    // disposed of, and walking the stack made such a call 16.7 µs instead
    // of 12.4 (`host bench async`). Panics keep their backtraces
    // (`RUST_BACKTRACE` alone decides those); `RUST_LIB_BACKTRACE=1` brings
    // the errors' back.
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        // SAFETY: no other thread exists yet, so none reads the environment
        // while it changes.
        unsafe { std::env::set_var("RUST_LIB_BACKTRACE", "0") };
    }
    cli::main()
}
