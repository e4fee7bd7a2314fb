//! The repository's shell scripts, run for real on what a fresh machine
//! looks like to them. Package tools are replaced by scripts on `PATH` that
//! answer as Debian's do on a machine that has never seen the packages, and
//! record what they were asked to do, so the test installs nothing.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

fn executable(dir: &Path, name: &str, body: &str) {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/bash\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// On a fresh Debian machine `dpkg-query` fails for a package it has never
/// seen; under `set -euo pipefail` that used to end the script with status 1
/// and no output. It must say what it installs and ask apt-get for it.
#[test]
fn install_wasm_toolchain_installs_on_a_machine_that_never_saw_the_packages() {
    let stubs = tempfile::tempdir().unwrap();
    let calls = stubs.path().join("calls.log");
    let calls_text = calls.display().to_string();
    // What Debian's tools print and exit with for unknown packages.
    executable(
        stubs.path(),
        "dpkg-query",
        &format!(
            "echo \"dpkg-query $*\" >> '{calls_text}'\n\
             echo \"dpkg-query: no packages found matching ${{@: -1}}\" >&2\nexit 1"
        ),
    );
    executable(
        stubs.path(),
        "apt-cache",
        &format!(
            "echo \"apt-cache $*\" >> '{calls_text}'\n\
             echo 'rustc-web:'\necho '  Installed: (none)'\necho '  Candidate: 1.96.0+dfsg1-1~deb12u2'"
        ),
    );
    // The install "succeeds" without installing: the script must then report
    // that rustc-web is still missing, with what to do.
    executable(
        stubs.path(),
        "apt-get",
        &format!("echo \"apt-get $*\" >> '{calls_text}'"),
    );
    executable(stubs.path(), "sudo", "exec \"$@\"");
    // No rustup on PATH: the system directories only, after the stubs.
    let path = format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", stubs.path().display());
    let script = skillhost_tests::repo_root().join("scripts/install-wasm-toolchain.sh");
    let output = Command::new("bash")
        .arg(&script)
        .env_clear()
        .env("PATH", &path)
        .env("HOME", stubs.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let calls = std::fs::read_to_string(&calls).unwrap_or_default();
    assert!(
        stdout.contains("installing rustc-web cargo-web rust-web-src lld wasi-libc"),
        "stdout: {stdout}\nstderr: {stderr}\ncalls: {calls}"
    );
    assert!(
        calls.contains(
            "apt-get install -y -o DPkg::Lock::Timeout=600 --no-install-recommends rustc-web"
        ),
        "{calls}"
    );
    assert_eq!(output.status.code(), Some(3), "stderr: {stderr}");
    assert!(
        stderr.contains("rustc-web is not installed; skills need 1.95 or newer"),
        "{stderr}"
    );
}
