//! Running the real `host` binary from a test: a private component cache and
//! SQLite database in the test's directory, an optional failpoint, and the
//! output read back as JSON.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

/// A `host` command whose cache and database live in `dir`. The failpoint
/// variable is always set or removed, so one in the test's own environment
/// never leaks in.
pub fn host_command(dir: &Path, args: &[&str], failpoint: Option<&str>) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_host"));
    cmd.args(args)
        .env("SKILLHOST_CACHE_DIR", dir.join("cache"))
        .env("SKILLHOST_DATABASE_URL", sqlite_url(dir));
    match failpoint {
        Some(point) => cmd.env("SKILLHOST_FAILPOINT", point),
        None => cmd.env_remove("SKILLHOST_FAILPOINT"),
    };
    cmd
}

/// The database [`host_command`] uses.
pub fn sqlite_url(dir: &Path) -> String {
    format!("sqlite://{}", dir.join("runs.db").display())
}

/// Runs [`host_command`] to completion.
pub fn host(dir: &Path, args: &[&str], failpoint: Option<&str>) -> Output {
    host_command(dir, args, failpoint)
        .output()
        .expect("run host")
}

/// Standard output as JSON; panics with both streams when it is not.
pub fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}
