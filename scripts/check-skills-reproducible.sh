#!/usr/bin/env bash
# Checks that the committed components in skills/dist are what their sources
# build to: copies the sources (no target/, no .git, no skills/dist) to a
# temporary directory, so the rebuild starts from nothing and from another
# path, builds every skill there with `host skill build`, and compares the
# bytes. Exits 1 with the list of differences if any component differs.
#
# Usage: scripts/check-skills-reproducible.sh [--keep]
#   --keep  keep the temporary copy (it is kept anyway on failure)
# Environment: SKILLHOST_BIN as for build-skills.sh (default: this
# checkout's debug `host`, built if needed).
set -euo pipefail

keep=0
[ "${1:-}" = --keep ] && keep=1

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
committed="$root/skills/dist"
[ -f "$committed/SHA256SUMS" ] ||
  { echo "error: no $committed/SHA256SUMS; run scripts/build-skills.sh first" >&2; exit 2; }

host="${SKILLHOST_BIN:-}"
if [ -z "$host" ]; then
  # As the tests build it (tests/support/cli.rs): the workspace's
  # features, so a tree the tests built needs no second build of wasmtime.
  cargo build --quiet --workspace --bin host --test e2e
  host="${CARGO_TARGET_DIR:-$root/target}/debug/host"
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/skillhost-repro.XXXXXX")"
copy="$tmp/src"
mkdir -p "$copy"
# Compare against a snapshot, in case skills/dist is rebuilt meanwhile.
cp -r "$committed" "$tmp/committed"
committed="$tmp/committed"
tar -C "$root" --exclude=./target --exclude=./.git --exclude=./skills/dist --exclude=./fuzz/target \
    --exclude=./.skillhost -cf - . | tar -C "$copy" -xf -

echo "rebuilding in $copy (fresh target directory)" >&2
# The skills that have a committed component, so work in progress on a new
# skill does not fail the check (a missing component is reported below).
mapfile -t names < <(sed -n 's/^[0-9a-f]*  \(.*\)\.wasm$/\1/p' "$committed/SHA256SUMS")
SKILLHOST_BIN="$host" QUIET="${QUIET:-1}" "$copy/scripts/build-skills.sh" --out "$tmp/dist" "${names[@]}" ||
  echo "warning: some skills failed to build; they are listed below" >&2

status=0
declare -A want got
while read -r sum file; do want["$file"]="$sum"; done < "$committed/SHA256SUMS"
while read -r sum file; do got["$file"]="$sum"; done < "$tmp/dist/SHA256SUMS"
for file in $(printf '%s\n' "${!want[@]}" "${!got[@]}" | LC_ALL=C sort -u); do
  w="${want[$file]:-}"
  g="${got[$file]:-}"
  if [ -z "$g" ]; then
    echo "DIFF $file: committed but not rebuilt: skills/$(basename "$file" .wasm) failed to build or is gone"
    status=1
  elif [ -z "$w" ]; then
    echo "DIFF $file: built but not committed; run scripts/build-skills.sh and commit skills/dist"
    status=1
  elif [ "$w" != "$g" ]; then
    echo "DIFF $file: committed sha256 $w, rebuilt $g"
    status=1
  elif ! cmp -s "$committed/$file" "$tmp/dist/$file"; then
    echo "DIFF $file: bytes differ from SHA256SUMS; the committed file was changed by hand"
    status=1
  else
    echo "same $file $g"
  fi
done

if [ "$status" = 0 ]; then
  echo "all components reproduce byte for byte" >&2
  [ "$keep" = 1 ] && echo "kept $tmp" >&2 || rm -rf "$tmp"
else
  echo "components differ; the rebuild is in $tmp/dist (sources in $copy)" >&2
fi
exit "$status"
