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
    cli::main()
}
