#!/usr/bin/env bash
# Builds every shipped skill in skills/*/ (every Rust skill, and any other
# whose component is in skills/dist; or the ones named) into a component with
# `host skill build`, then writes SHA256SUMS (sorted, `sha256sum` format) of
# all the components in the output directory. A skill that fails to build is
# reported at the end and makes the script fail; the others are still built.
#
# Usage: scripts/build-skills.sh [--out DIR] [NAME...]   (default: skills/dist)
# Environment:
#   SKILLHOST_BIN   the `host` binary to use (default: build and use the
#                   debug one: building wasmtime in release takes much longer
#                   than the few milliseconds it would save per skill)
#   SKILL_TARGET_DIR  cargo target directory for the skill builds (default:
#                   target/skill-build of this checkout)
#   QUIET=1         hide cargo's progress
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out=""
names=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    -*) echo "unknown option $1; see $0 --help" >&2; exit 2 ;;
    *) names+=("${1%/}"); shift ;;
  esac
done
if [ -n "$out" ]; then
  mkdir -p "$out"
  out="$(cd "$out" && pwd)"
fi
cd "$root"
out="${out:-$root/skills/dist}"
if [ "${#names[@]}" -eq 0 ]; then
  for dir in skills/*/; do
    name="$(basename "$dir")"
    # Every Rust skill, and a skill in another language whose component
    # is shipped (the others, like echo-c, are built by their tests).
    [ "$name" = dist ] && continue
    if [ -f "$dir/Cargo.toml" ] || [ -f "skills/dist/$name.wasm" ]; then names+=("$name"); fi
  done
fi
mkdir -p "$out"

host="${SKILLHOST_BIN:-}"
if [ -z "$host" ]; then
  # As the tests build it (tests/support/cli.rs): the workspace's
  # features, so a tree the tests built needs no second build of wasmtime.
  cargo build --quiet --workspace --bin host --test e2e
  host="${CARGO_TARGET_DIR:-$root/target}/debug/host"
fi

args=()
[ "${QUIET:-0}" = 1 ] && args+=(--quiet)
[ -n "${SKILL_TARGET_DIR:-}" ] && args+=(--target-dir "$SKILL_TARGET_DIR")

built=0
failed=()
for name in "${names[@]}"; do
  name="$(basename "$name")"
  echo "==> $name" >&2
  if "$host" skill build "skills/$name" --out "$out/$name.wasm" "${args[@]}"; then
    built=$((built + 1))
  else
    failed+=("$name")
  fi
done

(cd "$out" && sha256sum -- *.wasm | LC_ALL=C sort -k2 > SHA256SUMS)
echo "built $built skill(s) into $out; checksums in $out/SHA256SUMS" >&2
if [ "${#failed[@]}" -gt 0 ]; then
  echo "error: failed to build: ${failed[*]}" >&2
  exit 1
fi
