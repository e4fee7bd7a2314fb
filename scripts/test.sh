#!/usr/bin/env bash
# The project's test command: formatting, lints, and every test of the
# workspace (unit, integration and end-to-end tests of the `host` binary),
# each stage timed, the twenty slowest tests named at the end.
#
# Usage: scripts/test.sh [--quick]
#   --quick  the inner loop: formatting, lints, the unit and integration
#            tests and the core end-to-end tests, without the ones that
#            drive outside tools (Chromium, LibreOffice, the MCP SDKs,
#            registries, guest toolchains, Prometheus: `.config/nextest.toml`)
#
# The tests run under cargo-nextest (a process per test, every test's
# time); without it they run under `cargo test`, the same tests, untimed.
# One Postgres cluster serves every test that needs a database of its own
# (tests that stop or restart Postgres start their own), and one
# compiled-component cache serves every test that is not about the cache.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
case "${1:-}" in
    --quick) quick=1 ;;
    "") ;;
    *) echo "usage: scripts/test.sh [--quick]" >&2; exit 2 ;;
esac

started=$SECONDS
stages=()
stage() {
    local name=$1
    shift
    local t0=$SECONDS
    echo "== $name" >&2
    local status=0
    "$@" || status=$?
    local took=$((SECONDS - t0))
    local failed=""
    [ "$status" = 0 ] || failed="  (failed, exit $status)"
    stages+=("$(printf '%5ds  %s%s' "$took" "$name" "$failed")")
    echo "== $name: ${took}s$failed" >&2
    return "$status"
}
cleanups=()
summary() {
    local status=$?
    for cleanup in "${cleanups[@]}"; do "$cleanup" || true; done
    if [ "${#stages[@]}" -gt 0 ]; then
        echo "== stages" >&2
        printf '%s\n' "${stages[@]}" >&2
        printf '%5ds  total\n' "$((SECONDS - started))" >&2
    fi
    return $status
}
trap summary EXIT

stage "format (cargo fmt --check)" cargo fmt --all -- --check

# The fuzz targets are their own workspace over the host's crates: a new
# dependency of a host crate must reach fuzz/Cargo.lock too (copy the
# workspace's Cargo.lock over it and run `cargo tree --manifest-path
# fuzz/Cargo.toml`), or the fuzz run fails at its very end.
fuzz_lock() {
    if ! cargo metadata --locked --format-version 1 --manifest-path fuzz/Cargo.toml >/dev/null; then
        echo "fuzz/Cargo.lock is out of date with the host's crates: see scripts/test.sh" >&2
        return 1
    fi
}
stage "fuzz/Cargo.lock up to date" fuzz_lock

stage "lints (cargo clippy -D warnings)" cargo clippy --workspace --all-targets -- -D warnings

target_dir=$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')

# Everything the tests run, built once: the test binaries and the `host`
# binary the end-to-end tests run (under nextest every test is a process,
# and each would otherwise ask cargo for it). The whole workspace with its
# tests, so dependencies are built once, with one set of features.
stage "build (cargo build --workspace --all-targets)" cargo build --workspace --all-targets
export SKILLHOST_TEST_HOST_BIN="$target_dir/debug/host"

# The compiled-component cache the tests share: the one given (.ci/run
# keeps one beside its build, so a warm machine compiles only the
# components that changed), else a fresh one per run of this script. A
# given one loses what no run used for a week (`host cache prune`); its
# entries are keyed by the engine's compatibility hash and checked against
# their digests on every load, as any user's are.
if [ -n "${SKILLHOST_TEST_COMPONENT_CACHE:-}" ]; then
    mkdir -p "$SKILLHOST_TEST_COMPONENT_CACHE"
    prune_component_cache() {
        # Only the component cache: the registry cache named is an empty
        # directory of its own, not the user's.
        local registry
        registry=$(mktemp -d)
        "$SKILLHOST_TEST_HOST_BIN" cache prune --older-than 7d \
            --cache-dir "$SKILLHOST_TEST_COMPONENT_CACHE" --registry-cache "$registry"
        rm -rf "$registry"
    }
    stage "prune the shared component cache (host cache prune --older-than 7d)" prune_component_cache
else
    export SKILLHOST_TEST_COMPONENT_CACHE="$target_dir/tmp/test-components-run"
    rm -rf "$SKILLHOST_TEST_COMPONENT_CACHE"
    mkdir -p "$SKILLHOST_TEST_COMPONENT_CACHE"
fi

# One throwaway Postgres cluster for the run, unless one is given.
if [ -z "${SKILLHOST_TEST_DATABASE_URL:-}" ]; then
    # shellcheck source=scripts/test-postgres.sh
    source scripts/test-postgres.sh
    stage "start a throwaway Postgres" test_postgres_start
    cleanups+=(test_postgres_stop)
fi

if command -v cargo-nextest >/dev/null 2>&1; then
    profile=ci
    [ "$quick" = 1 ] && profile=quick
    # The doctests and the slowest tests even when a test failed; the
    # script fails at the end.
    failed=0
    rm -f "target/nextest/$profile/failures.txt"
    stage "tests (cargo nextest run --profile $profile)" \
        cargo nextest run --workspace --profile "$profile" --no-fail-fast || failed=1
    # nextest runs no doctests.
    stage "doctests (cargo test --doc)" cargo test --workspace --doc --quiet || failed=1
    # .config/nextest.toml keeps its store in the clone's target/, whatever
    # CARGO_TARGET_DIR says. Why each failed test failed goes to a file
    # .ci/run prints last.
    python3 scripts/slowest-tests.py "target/nextest/$profile/junit.xml" 20 \
        --failures "target/nextest/$profile/failures.txt" || true
    exit "$failed"
else
    echo "warning: cargo-nextest is not installed (cargo install --locked cargo-nextest); running cargo test, without per-test times" >&2
    if [ "$quick" = 1 ]; then
        echo "error: --quick needs cargo-nextest (its filter is in .config/nextest.toml)" >&2
        exit 3
    fi
    stage "tests (cargo test)" cargo test --workspace
fi
