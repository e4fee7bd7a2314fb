#!/usr/bin/env bash
# Installs a Rust toolchain that can build skills for Wasm, if none is there.
#
# `host skill build` uses, in this order:
#   1. rustup, when it has the target installed (wasm32-unknown-unknown, or
#      wasm32-wasip1/wasip2 for --wasi). On a machine with internet, that is
#      `rustup target add wasm32-unknown-unknown wasm32-wasip1`.
#   2. Debian's rustc-web, which builds std from source (rust-web-src) and links
#      with lld; wasi-libc for --wasi. This script installs that one.
# Idempotent: does nothing when either toolchain is already complete.
#
# Usage: scripts/install-wasm-toolchain.sh [--wasi]
set -euo pipefail

wasi=0
case "${1:-}" in
  --wasi) wasi=1 ;;
  "") ;;
  -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
  *) echo "usage: $0 [--wasi]" >&2; exit 2 ;;
esac

if command -v rustup >/dev/null 2>&1; then
  installed="$(rustup target list --installed 2>/dev/null || true)"
  if [ "$wasi" = 1 ]; then
    wanted='^wasm32-wasip[12]$'
  else
    wanted='^wasm32-unknown-unknown$'
  fi
  if grep -Eq "$wanted" <<<"$installed"; then
    echo "rustup already has the Wasm target ($(grep -E "$wanted" <<<"$installed" | head -1)); nothing to install"
    exit 0
  fi
fi

# The skills' crates (and the workspace's rust-version) need this rustc. A
# fresh machine's package index may still offer an older rustc-web (bookworm's
# own is 1.85; the newer one comes from bookworm-security), so the index is
# refreshed whenever what it would install, or what is installed, is older.
min_rustc="1.95"
version_at_least() { # version_at_least HAVE WANT: both "major.minor[.patch…]"
  local have_major have_minor want_major want_minor
  IFS=. read -r have_major have_minor _ <<<"$1"
  IFS=. read -r want_major want_minor _ <<<"$2"
  (( have_major > want_major || (have_major == want_major && have_minor >= want_minor) ))
}
rustc_web_version() { # the upstream version of the installed rustc-web, or nothing
  # dpkg-query fails for a package it has never seen (a fresh machine): under
  # pipefail that would end the script here, so its status is not the pipe's.
  { dpkg-query -W -f='${Status} ${Version}' rustc-web 2>/dev/null || true; } |
    sed -n 's/^install ok installed \([0-9][0-9.]*\).*/\1/p'
}
candidate_version() { # what `apt-get install rustc-web` would install now
  apt-cache policy rustc-web 2>/dev/null | sed -n 's/^ *Candidate: \([0-9][0-9.]*\).*/\1/p'
}

packages=(rustc-web cargo-web rust-web-src lld wasi-libc)
missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
installed_version="$(rustc_web_version)"
if [ -n "$installed_version" ] && ! version_at_least "$installed_version" "$min_rustc"; then
  echo "rustc-web $installed_version is installed; skills need $min_rustc or newer"
  missing=("${packages[@]}")
fi

if [ "${#missing[@]}" -gt 0 ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "error: no rustup Wasm target and no apt-get; install rustup and run" >&2
    echo "       rustup target add wasm32-unknown-unknown wasm32-wasip1" >&2
    exit 3
  fi
  sudo=()
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo=(sudo); else
      echo "error: installing ${missing[*]} needs root (no sudo found)" >&2
      exit 3
    fi
  fi
  candidate="$(candidate_version)"
  if [ -z "$candidate" ] || ! version_at_least "$candidate" "$min_rustc"; then
    echo "refreshing the package index (it offers rustc-web ${candidate:-not at all})"
    # Two apt-get at once collide on the dpkg lock; wait for it instead.
    "${sudo[@]}" apt-get update -o DPkg::Lock::Timeout=600
  fi
  echo "installing ${missing[*]}"
  "${sudo[@]}" apt-get install -y -o DPkg::Lock::Timeout=600 --no-install-recommends "${missing[@]}" ||
  { "${sudo[@]}" apt-get update -o DPkg::Lock::Timeout=600 &&
    "${sudo[@]}" apt-get install -y -o DPkg::Lock::Timeout=600 --no-install-recommends "${missing[@]}"; }
fi

installed_version="$(rustc_web_version)"
if [ -z "$installed_version" ] || ! version_at_least "$installed_version" "$min_rustc"; then
  echo "error: rustc-web ${installed_version:-is not installed}; skills need $min_rustc or newer." >&2
  echo "       Debian 12 has it in bookworm-security: check that /etc/apt/sources.list.d names it," >&2
  echo "       or install rustup's Wasm target: rustup target add wasm32-unknown-unknown wasm32-wasip1" >&2
  exit 3
fi

# Check what `host skill build` will check, so a broken install shows here.
sysroot="$(/usr/bin/rustc --print sysroot)"
[ -d "$sysroot/lib/rustlib/src/rust/library/std" ] ||
  { echo "error: no std sources under $sysroot/lib/rustlib/src/rust/library (rust-web-src)" >&2; exit 3; }
# (Not `compgen -c | grep -q`: under pipefail, grep's early exit fails the pipe.)
{ command -v wasm-ld >/dev/null || compgen -c wasm-ld- >/dev/null; } ||
  { echo "error: no wasm-ld in PATH (lld)" >&2; exit 3; }
[ -e /usr/lib/wasm32-wasi/libc.a ] ||
  { echo "error: no /usr/lib/wasm32-wasi/libc.a (wasi-libc)" >&2; exit 3; }
echo "Wasm toolchain ready: $(/usr/bin/rustc --version), $(/usr/bin/cargo --version)"
