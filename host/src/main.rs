//! The `host` binary: argument parsing and printing only; the work is in the
//! `skillhost` library.

fn main() -> std::process::ExitCode {
    skillhost::cli::main()
}
