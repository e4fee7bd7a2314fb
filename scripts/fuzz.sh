#!/usr/bin/env bash
# Builds the fuzz targets in fuzz/ and runs each for a bounded time on its
# committed corpus; fails if any target finds a crash (a panic, an abort, a
# stack overflow, a timeout or running out of memory).
#
# The driver is libFuzzer (the `libfuzzer-sys` crate, which compiles it with
# the system's C++ compiler) on stable Rust: the coverage instrumentation
# is LLVM's SanitizerCoverage, which stable rustc runs with
# `-Cpasses=sancov-module`; no nightly, no sanitizer runtime.
#
# Usage: scripts/fuzz.sh [--build-only] [SECONDS_PER_TARGET] [TARGET...]
#   SECONDS_PER_TARGET defaults to 30; TARGET defaults to every target:
#   scenario_check, json_bridge, checkpoint_load.
# New inputs that found coverage go to fuzz/target/corpus/<target>/ (a
# throwaway directory at a fixed seed; never the committed corpus); a crash
# is written to fuzz/artifacts/<target>/, and the command to reproduce it is
# printed.
#
# FUZZ_SEED fixes libFuzzer's random seed (default 1) and then also the
# number of inputs each target runs (about 30 s of CI's machine each,
# SECONDS_PER_TARGET staying the cap), so a CI run tries exactly the same
# inputs every time, on any machine: a pass or a failure is reproducible
# here. FUZZ_SEED=0 takes a fresh random seed and runs for the time only
# (what a long local hunt wants).
set -euo pipefail
cd "$(dirname "$0")/.."

build_only=0
if [ "${1:-}" = "--build-only" ]; then build_only=1; shift; fi
seconds="${1:-30}"
seed="${FUZZ_SEED:-1}"
shift || true
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
  targets=(scenario_check json_bridge checkpoint_load)
fi

# The host triple is named explicitly so that these flags reach only the
# code built for the target, never build scripts and proc macros (which run
# inside the compiler and have no libFuzzer to report coverage to).
triple="$(rustc -vV | sed -n 's/^host: //p')"
export RUSTFLAGS="-Cpasses=sancov-module \
-Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
-Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares \
--cfg fuzzing"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR_FUZZ:-fuzz/target}"

echo "== building the fuzz targets (${targets[*]})"
cargo build --manifest-path fuzz/Cargo.toml --release --locked --target "$triple" \
  $(printf -- '--bin %s ' "${targets[@]}")
[ "$build_only" = 1 ] && exit 0

# Inputs per target at a fixed seed: about 30 s of each on CI's machine.
runs_of() {
  case "$1" in
    scenario_check) echo 60000 ;;
    json_bridge) echo 400000 ;;
    checkpoint_load) echo 8000 ;;
    *) echo -1 ;;
  esac
}

# One target's run, its log in $CARGO_TARGET_DIR/<target>.log.
fuzz_one() {
  local target=$1 runs=-1
  [ "$seed" != 0 ] && runs="$(runs_of "$target")"
  local bin="$CARGO_TARGET_DIR/$triple/release/$target"
  local scratch="$CARGO_TARGET_DIR/corpus/$target"
  # At a fixed seed the run starts from the committed corpus alone (finds
  # kept from earlier runs would change what it tries).
  if [ "$seed" != 0 ]; then
    scratch="$(mktemp -d)"
  fi
  local artifacts="fuzz/artifacts/$target"
  mkdir -p "$scratch" "$artifacts"
  echo "== fuzzing $target for ${seconds}s at most, seed $seed, $runs inputs (corpus fuzz/corpus/$target)"
  # New finds go to the scratch corpus (listed first); the committed one is
  # read only. -rss_limit_mb makes unbounded memory use a crash (and
  # -malloc_limit_mb a single huge allocation, where libFuzzer can see it);
  # -timeout makes a hang one, with room for the first input, which also
  # compiles the shipped components the targets load.
  "$bin" "$scratch" "fuzz/corpus/$target" \
      -max_total_time="$seconds" -seed="$seed" -runs="$runs" -timeout=60 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
      -max_len=16384 -print_final_stats=1 -artifact_prefix="$artifacts/" \
      > "$CARGO_TARGET_DIR/$target.log" 2>&1
}

# The targets run side by side, each a single-threaded process: at a fixed
# seed each still tries exactly its inputs (its count, not the clock, ends
# it; the seconds stay a cap far above it), in about half the time on two
# cores.
declare -A pids
for target in "${targets[@]}"; do
  fuzz_one "$target" &
  pids[$target]=$!
done
failed=()
for target in "${targets[@]}"; do
  if ! wait "${pids[$target]}"; then
    tail -n 60 "$CARGO_TARGET_DIR/$target.log"
    echo "FAILED: $target found a crash; reproduce with: $CARGO_TARGET_DIR/$triple/release/$target fuzz/artifacts/$target/<file>" >&2
    failed+=("$target")
  else
    echo "== $target"
    grep -E '^stat::(number_of_executed_units|new_units_added)|^#[0-9]+.*DONE' \
      "$CARGO_TARGET_DIR/$target.log" || true
  fi
done

if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzzing found crashes in: ${failed[*]}" >&2
  exit 1
fi
echo "fuzzing: ${#targets[@]} targets ran side by side (${seconds}s each at most), no crash"
