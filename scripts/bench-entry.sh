#!/usr/bin/env bash
# The entry benchmark (issue 29; figures in docs/contributing.md, "How long
# getting in takes"): what a new user and a skill author wait for, measured
# with the programs they run, not with a timed test.
#
#   rebuild        `cargo build --release -p skillhost --bin host` after a
#                  one-line change to a file of the `host` crate (the
#                  release profile the README's first command builds)
#   skill build    `host skill build` of a new Python skill (componentize-py),
#                  and of a new JavaScript one (componentize-qjs)
#   first call     `host skill call` of that skill, compile included, with an
#     (cold)       empty compiled-component cache
#   first call     the same for an edited copy of it, with the cache the
#     (warm)       first skill's call left (what an edit-to-result loop pays
#                  after its first round)
#   warm call      `host skill call` of the edited skill again, its compiled
#                  component cached: the whole process, start to exit
#
# Each figure is the median of --repeat runs (default 3; the warm call 5x
# that), wall time, seconds. The machine is shared: quote medians, and run
# it on a quiet machine for figures worth comparing.
#
# Usage: scripts/bench-entry.sh [--repeat N] [--no-rebuild] [--host PATH]
#                               [--lang python|js|all]
#   --no-rebuild  skip the rebuild figure (it takes minutes)
#   --host PATH   the `host` binary to time (default: target/release/host,
#                 built first)
#   --lang L      the skills' language: python (default), js, or all
# Needs componentize-py for Python and componentize-qjs for JavaScript
# (scripts/install-guest-toolchains.sh).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

repeat=3
rebuild=1
host=""
langs="python"
while [ $# -gt 0 ]; do
    case "$1" in
        --lang)
            case "${2:-}" in
                python|js) langs="$2" ;;
                all) langs="python js" ;;
                *) echo "--lang takes python, js or all, not '${2:-}'" >&2; exit 2 ;;
            esac
            shift 2 ;;
        --repeat) repeat="$2"; shift 2 ;;
        --no-rebuild) rebuild=0; shift ;;
        --host) host="$2"; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
        *) echo "unknown argument $1; see $0 --help" >&2; exit 2 ;;
    esac
done
case "$repeat" in ''|*[!0-9]*|0) echo "--repeat takes a positive number, not '$repeat'" >&2; exit 2 ;; esac

work=$(mktemp -d)
touched=""
cleanup() {
    # The source file the rebuild changed goes back as it was.
    if [ -n "$touched" ] && [ -f "$work/touched.orig" ]; then
        cp "$work/touched.orig" "$touched"
    fi
    rm -rf "$work"
}
trap cleanup EXIT

now() { date +%s.%N; }
# The median of the numbers on stdin, to two decimals.
median() { sort -g | awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.2f", m }'; }
# Runs "$@" quietly and prints its wall time; a failure stops the benchmark
# with the command's output.
timed() {
    local start end
    start=$(now)
    if ! "$@" >"$work/out" 2>&1; then
        echo "error: $* failed:" >&2
        cat "$work/out" >&2
        exit 1
    fi
    end=$(now)
    awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f\n", b - a }'
}
row() { printf '%-40s %8s s   (median of %s)\n' "$1" "$2" "$3"; }

target_dir=$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
if [ -z "$host" ]; then
    echo "== building target/release/host" >&2
    cargo build --quiet --locked --release -p skillhost --bin host
    host="$target_dir/release/host"
fi
[ -x "$host" ] || { echo "error: no host binary at $host" >&2; exit 2; }
for lang in $langs; do
    case "$lang" in
        python) tool=componentize-py ;;
        js) tool=componentize-qjs ;;
    esac
    # `host skill build` finds the guest toolchains where the install script
    # puts them, so ask it rather than the PATH.
    if ! command -v "$tool" >/dev/null && [ ! -x "${SKILLHOST_TOOLCHAINS:-$HOME/.cache/skillhost/toolchains}/js/node_modules/.bin/$tool" ]; then
        echo "error: $tool is missing: scripts/install-guest-toolchains.sh $lang" >&2
        exit 2
    fi
done

echo "== $("$host" --version), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

if [ "$rebuild" = 1 ]; then
    touched="host/src/cli/run.rs"
    cp "$touched" "$work/touched.orig"
    samples=()
    for i in $(seq "$repeat"); do
        # A change cargo cannot skip: the file's contents, not only its time.
        printf '\n// bench-entry %s\n' "$i" >>"$touched"
        samples+=("$(timed cargo build --quiet --locked --release -p skillhost --bin host)")
        cp "$work/touched.orig" "$touched"
    done
    # The binary matches the sources again (not timed).
    cargo build --quiet --locked --release -p skillhost --bin host
    touched=""
    row "rebuild after a one-file change" "$(printf '%s\n' "${samples[@]}" | median)" "$repeat"
fi

input='{"name": "Ada"}'
# One language's four figures: a new skill's build, its first call with an
# empty cache, the first call of an edited copy with the cache that left,
# and warm calls of the edited one.
skill_loop() {
    local lang=$1 label=$2 tool=$3 logic=$4
    local builds=() cold=() warm=() calls=()
    for i in $(seq "$repeat"); do
        dir="$work/$lang$i"
        mkdir -p "$dir"
        "$host" skill new "entry-$lang" --lang "$lang" --dir "$dir/a" >/dev/null
        builds+=("$(timed "$host" skill build "$dir/a" --out "$dir/a.wasm")")
        # The edit: another greeting, so another component.
        cp -r "$dir/a" "$dir/b"
        sed -i 's/Hello, /Good day, /' "$dir/b/$logic"
        timed "$host" skill build "$dir/b" --out "$dir/b.wasm" >/dev/null
        cmp -s "$dir/a.wasm" "$dir/b.wasm" && { echo "error: the edit did not change the component" >&2; exit 1; }

        export SKILLHOST_CACHE_DIR="$dir/cache"
        cold+=("$(timed "$host" skill call "$dir/a.wasm" --input "$input")")
        warm+=("$(timed "$host" skill call "$dir/b.wasm" --input "$input")")
        grep -q "Good day, Ada!" "$work/out" || { echo "error: the edited skill answered: $(cat "$work/out")" >&2; exit 1; }
        for _ in $(seq 5); do
            calls+=("$(timed "$host" skill call "$dir/b.wasm" --input "$input")")
        done
        unset SKILLHOST_CACHE_DIR
        rm -rf "$dir"
    done
    row "$label skill build ($tool)" "$(printf '%s\n' "${builds[@]}" | median)" "$repeat"
    row "$label first call, empty cache" "$(printf '%s\n' "${cold[@]}" | median)" "$repeat"
    row "$label first call after an edit" "$(printf '%s\n' "${warm[@]}" | median)" "$repeat"
    row "$label warm call (whole process)" "$(printf '%s\n' "${calls[@]}" | median)" "$((repeat * 5))"
}
for lang in $langs; do
    case "$lang" in
        python) skill_loop python python componentize-py greet.py ;;
        js) skill_loop js javascript componentize-qjs greet.js ;;
    esac
done
