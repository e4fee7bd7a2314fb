#!/usr/bin/env bash
# The performance guard against a FIXED baseline (docs/contributing.md,
# "Benchmarks"): builds the baseline commit beside the working tree (its
# sources and target directory outside the clone, kept for the next time),
# builds the working tree with the `dist` profile (thin LTO, as published),
# runs `host bench runtime|engine|postgres` of both in ABBA rounds (baseline,
# head, head, baseline) on the same `echo` component, and prints each
# figure's medians and the ratio head / baseline. A guarded figure more than
# 10% worse makes the script exit 1.
#
# Usage: scripts/bench-baseline.sh [--rounds N] [--database URL] [MODE...]
#   MODE        runtime, engine, postgres (default: runtime engine postgres)
#   --rounds N  ABBA rounds (default 8: 16 runs of each side)
#   --database  URL: `host bench postgres` of the baseline uses URL_base, the
#               head's URL_head (two existing databases: the head may migrate
#               past the baseline's schema); default: a throwaway cluster
#               started here, fsync on, as CI's machine
# Environment:
#   SKILLHOST_BENCH_DIR  where the baseline is built (default
#                        ~/.cache/skillhost/bench-baseline)
#   BASELINE             another commit to compare with, for a one-off
#
# The baseline moves only on purpose: change BASELINE_COMMIT below in a
# commit of its own that says why, with the figures of both.
set -euo pipefail

# 80a6ef1, main at the end of 2026-11-27: the research run and the engine's
# per-node time measured the same as main of 2026-11-24 (9bfaa8c) on this
# machine (issue 29), and its `host bench` takes `--echo` and `--json` as
# today's does. Its `release` profile is thin LTO, today's `dist`.
BASELINE_COMMIT=80a6ef189defd9ec2dc3c58546066e929ab21795

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

rounds=8
database=""
modes=()
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) rounds="$2"; shift 2 ;;
        --database) database="$2"; shift 2 ;;
        runtime|engine|postgres) modes+=("$1"); shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
        *) echo "unknown argument $1; see $0 --help" >&2; exit 2 ;;
    esac
done
[ "${#modes[@]}" -gt 0 ] || modes=(runtime engine postgres)

baseline="${BASELINE:-$BASELINE_COMMIT}"
baseline=$(git rev-parse --verify "$baseline^{commit}") ||
    { echo "error: baseline commit $baseline is not in this clone (git fetch it)" >&2; exit 2; }
bench_dir="${SKILLHOST_BENCH_DIR:-${HOME:-/root}/.cache/skillhost/bench-baseline}"
src="$bench_dir/src"
mkdir -p "$bench_dir"

echo "== the baseline, $(git log -1 --format='%h %ad %s' --date=short "$baseline"), in $src" >&2
if [ "$(cat "$src/.commit" 2>/dev/null)" != "$baseline" ]; then
    rm -rf "$src"
    mkdir -p "$src"
    git archive "$baseline" | tar -x -C "$src"
    echo "$baseline" >"$src/.commit"
fi
# Its `release` was thin LTO before `dist` existed.
if grep -q '^\[profile\.dist\]' "$src/Cargo.toml"; then base_profile=dist; else base_profile=release; fi
CARGO_TARGET_DIR="$bench_dir/target" cargo build --quiet --locked --manifest-path "$src/Cargo.toml" \
    --profile "$base_profile" -p skillhost --bin host
base_bin="$bench_dir/target/$base_profile/host"

echo "== the working tree, profile dist" >&2
cargo build --quiet --locked --profile dist -p skillhost --bin host
target_dir=$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
head_bin="$target_dir/dist/host"

cleanup=()
if [[ " ${modes[*]} " == *" postgres "* ]] && [ -z "$database" ]; then
    # shellcheck source=scripts/test-postgres.sh
    source scripts/test-postgres.sh
    # A benchmark's server keeps fsync on: commit latency is what it measures.
    TEST_PG_OPTIONS="-c shared_buffers=128MB" test_postgres_start
    cleanup+=(test_postgres_stop)
    database="${SKILLHOST_TEST_DATABASE_URL%/postgres}/bench"
    "${TEST_PG_PSQL[@]}" -c "CREATE DATABASE bench_base" -c "CREATE DATABASE bench_head" >/dev/null
fi
trap 'for c in "${cleanup[@]}"; do "$c"; done' EXIT

python3 - "$base_bin" "$head_bin" "$root/skills/dist/echo.wasm" "$rounds" "$database" "${modes[@]}" <<'EOF'
import json, statistics, subprocess, sys

base_bin, head_bin, echo, rounds, database, *modes = sys.argv[1:]
rounds = int(rounds)
# Each mode's command, and its figures: (key, lower is better).
MODES = {
    "runtime": (["bench", "runtime"], [("fresh_call_us", True), ("cached_load_ms", True), ("compile_ms", True)]),
    "engine": (["bench", "engine"], [("per_node_us_memory", True), ("engine_us_memory", True),
                                     ("call_us", True), ("per_node_us_sqlite", True)]),
    # Each side on a database of its own: the head may migrate its schema
    # past what the baseline knows.
    "postgres": (["bench", "postgres", "--database", "{database}"],
                 [("per_node_us_single", True), ("node_steps_per_s", False)]),
}

def run(binary, mode):
    args, _ = MODES[mode]
    side = "base" if binary == base_bin else "head"
    args = [a.replace("{database}", f"{database}_{side}") for a in args]
    out = subprocess.run([binary, *args, "--echo", echo, "--json"], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{binary} {' '.join(args)} failed:\n{out.stderr}")
    return json.loads(out.stdout)

worse = []
print(f"{'figure':<24} {'baseline':>11} {'head':>11} {'head/base':>10}   ({rounds} ABBA rounds, medians)")
for mode in modes:
    figures = {"base": [], "head": []}
    for _ in range(rounds):
        for side in ("base", "head", "head", "base"):
            figures[side].append(run(base_bin if side == "base" else head_bin, mode))
    for key, lower_is_better in MODES[mode][1]:
        base = statistics.median(f[key] for f in figures["base"])
        head = statistics.median(f[key] for f in figures["head"])
        ratio = head / base if base else float("nan")
        slower = ratio if lower_is_better else 1 / ratio
        flag = "  SLOWER >10%" if slower > 1.10 else ""
        if flag:
            worse.append(key)
        print(f"{mode + '.' + key:<24} {base:>11.3f} {head:>11.3f} {ratio:>10.3f}{flag}")
if worse:
    print(f"more than 10% slower than the baseline: {', '.join(worse)}", file=sys.stderr)
    sys.exit(1)
EOF
