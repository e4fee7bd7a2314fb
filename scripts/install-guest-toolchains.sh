#!/usr/bin/env bash
# Installs the pinned toolchains `host skill build` uses for skills in
# languages other than Rust (Rust's: scripts/install-wasm-toolchain.sh):
#   python  componentize-py 0.25.1 (PyPI)
#   js      @bytecodealliance/jco 1.35.0 and componentize-js 0.23.0 (npm;
#           componentize-qjs comes with jco) into
#           ${SKILLHOST_TOOLCHAINS:-~/.cache/skillhost/toolchains}/js, where
#           the build looks for them
#   c       clang, lld, wasi-libc, libclang-rt-dev-wasm32 (Debian)
#   zig     ziglang 0.17.1 (PyPI; `python3 -m ziglang`)
# Go is not supported: see sdk/README.md.
#
# Usage: scripts/install-guest-toolchains.sh [python|js|c|zig ...]   (default: all)
# Idempotent: what is installed at the pinned version is left alone.
set -euo pipefail

COMPONENTIZE_PY=0.25.1
ZIGLANG=0.17.1
JCO=1.35.0
COMPONENTIZE_JS=0.23.0

want=("$@")
[ "${#want[@]}" -eq 0 ] && want=(python js c zig)
toolchains="${SKILLHOST_TOOLCHAINS:-${HOME:-/root}/.cache/skillhost/toolchains}"

sudo_if_needed() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

pip_pinned() { # package version
  if python3 -m pip show "$1" 2>/dev/null | grep -qx "Version: $2"; then
    echo "$1 $2 already installed" >&2
  else
    python3 -m pip install --quiet --disable-pip-version-check "$1==$2"
  fi
}

for language in "${want[@]}"; do
  case "$language" in
    python) pip_pinned componentize-py "$COMPONENTIZE_PY" ;;
    zig) pip_pinned ziglang "$ZIGLANG" ;;
    js)
      dir="$toolchains/js"
      if [ -x "$dir/node_modules/.bin/componentize-qjs" ] &&
         grep -q "\"version\": \"$JCO\"" "$dir/node_modules/@bytecodealliance/jco/package.json" 2>/dev/null &&
         grep -q "\"version\": \"$COMPONENTIZE_JS\"" "$dir/node_modules/@bytecodealliance/componentize-js/package.json" 2>/dev/null; then
        echo "jco $JCO and componentize-js $COMPONENTIZE_JS already installed in $dir" >&2
      else
        command -v npm >/dev/null || {
          echo "error: npm is missing; apt-get install -y nodejs npm" >&2; exit 3; }
        mkdir -p "$dir"
        [ -f "$dir/package.json" ] || echo '{"private": true}' > "$dir/package.json"
        npm install --prefix "$dir" --no-audit --no-fund --silent --save-exact \
          "@bytecodealliance/jco@$JCO" "@bytecodealliance/componentize-js@$COMPONENTIZE_JS"
      fi
      ;;
    c)
      if command -v clang >/dev/null && [ -f /usr/lib/wasm32-wasi/libc.a ] &&
         ls /usr/lib/llvm-*/lib/clang/*/lib/wasi/libclang_rt.builtins-wasm32.a >/dev/null 2>&1; then
        echo "clang and wasi-libc already installed" >&2
      else
        sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get update -qq -o DPkg::Lock::Timeout=600
        sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600 \
          --no-install-recommends clang lld wasi-libc libclang-rt-dev-wasm32 >/dev/null
      fi
      ;;
    *) echo "unknown language $language; give python, js, c or zig" >&2; exit 2 ;;
  esac
done
echo "guest toolchains ready: ${want[*]}" >&2
