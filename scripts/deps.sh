#!/usr/bin/env bash
# Installs the Debian packages strata needs to build and test; as non-root, names what is missing.
set -euo pipefail
PKGS=(build-essential cmake pkg-config libxxhash-dev libpcre2-dev liburing-dev clang libclang-rt-14-dev)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "strata: missing Debian packages: ${missing[*]}" >&2
  echo "        install them with: sudo apt-get install ${missing[*]}" >&2
  exit 1
fi
