#!/bin/sh
# The dashboard at GET / in headless Chromium against strata serve (tests/server/dashboard.py).
# Skips (exit 77, ctest's SKIP_RETURN_CODE) without chromium, python3 or curl.
set -eu
src=$1
bin=${STRATA_BIN:?STRATA_BIN names the strata binary}
[ -x "${CHROMIUM:-/usr/bin/chromium}" ] || { echo "SKIPPED: no ${CHROMIUM:-/usr/bin/chromium}"; exit 77; }
command -v python3 >/dev/null || { echo "SKIPPED: no python3"; exit 77; }
command -v curl >/dev/null || { echo "SKIPPED: no curl"; exit 77; }
exec python3 "$src/tests/server/dashboard.py" "$bin"
