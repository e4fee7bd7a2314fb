#!/usr/bin/env bash
# The project's test command: formatting, lints, and every test of the
# workspace (unit, integration and end-to-end tests of the `host` binary).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
# The fuzz targets are their own workspace over the host's crates: a new
# dependency of a host crate must reach fuzz/Cargo.lock too (copy the
# workspace's Cargo.lock over it and run `cargo tree --manifest-path
# fuzz/Cargo.toml`), or the fuzz run fails at its very end.
if ! cargo metadata --locked --format-version 1 --manifest-path fuzz/Cargo.toml >/dev/null; then
    echo "fuzz/Cargo.lock is out of date with the host's crates: see scripts/test.sh" >&2
    exit 1
fi
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace
