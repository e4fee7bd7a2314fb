#!/usr/bin/env bash
# The project's test command: formatting, lints, and every test of the
# workspace (unit, integration and end-to-end tests of the `host` binary).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace
