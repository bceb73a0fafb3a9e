#!/usr/bin/env bash
# Installs the Debian packages strata needs; as non-root, names what is missing.
#   scripts/deps.sh        building and testing (make build, run, test, test-asan), and the npm
#                          client the server tests use (tests/server/node, from its lock file)
#   scripts/deps.sh fuzz   the libFuzzer build too (make fuzz, fuzz-smoke): clang and the
#                          runtime package of that clang's version (libFuzzer lives there)
set -euo pipefail
mode=${1:-build}
BUILD_PKGS=(build-essential cmake pkg-config libxxhash-dev libpcre2-dev liburing-dev libmicrohttpd-dev libjansson-dev curl jq nodejs prometheus chromium fonts-dejavu-core python3)

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

# Installs the packages not yet installed (root), or names them and fails.
ensure() {
  local missing=() p
  for p in "$@"; do installed "$p" || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -eq 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
  else
    echo "strata: missing Debian packages: ${missing[*]}" >&2
    echo "        install them with: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
}

fuzzer_runtime_ok() {
  command -v clang >/dev/null && [ -f "$(clang -print-file-name="libclang_rt.fuzzer-$(uname -m).a")" ]
}

# The runtime package of the clang installed (else of the one `clang` would install):
# libclang-rt-N-dev where Debian packages it apart (LLVM 14 and later in bookworm), else
# libclang-common-N-dev, which held it before.
clang_rt_pkg() {
  local v=""
  command -v clang >/dev/null && v=$(clang -dumpversion 2>/dev/null | cut -d. -f1)
  [ -n "$v" ] || v=$(apt-cache depends clang 2>/dev/null | sed -n 's/^ *Depends: clang-\([0-9][0-9]*\)$/\1/p' | head -1)
  [ -n "$v" ] || return 1
  if apt-cache show "libclang-rt-$v-dev" >/dev/null 2>&1; then echo "libclang-rt-$v-dev"; else echo "libclang-common-$v-dev"; fi
}

case "$mode" in
build)
  ensure "${BUILD_PKGS[@]}"
  # npm: Debian's own package, unless the nodejs installed carries it (NodeSource's does,
  # and conflicts with Debian's npm)
  command -v npm >/dev/null || ensure npm
  # the openai client of the server tests, exactly as the lock file pins it
  node_dir="$(dirname "$0")/../tests/server/node"
  if [ ! -d "$node_dir/node_modules/openai" ]; then
    (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error)
  fi
  ;;
fuzz)
  pkgs=("${BUILD_PKGS[@]}" clang)
  if ! fuzzer_runtime_ok && rt=$(clang_rt_pkg); then pkgs+=("$rt"); fi
  ensure "${pkgs[@]}"
  # on a fresh machine the version is known only once clang is in
  if ! fuzzer_runtime_ok && rt=$(clang_rt_pkg); then ensure "$rt"; fi
  if ! fuzzer_runtime_ok; then
    echo "strata: clang has no libFuzzer runtime (libclang_rt.fuzzer-$(uname -m).a): install the" >&2
    echo "        clang runtime package of its version ($(clang --version | head -1))" >&2
    exit 1
  fi
  ;;
*)
  echo "usage: scripts/deps.sh [fuzz]" >&2
  exit 2
  ;;
esac
