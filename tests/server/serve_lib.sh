# Shared by the shell tests of strata serve (sourced): skips without curl or jq (exit 77),
# a work directory removed at exit with the server killed, and the helpers below.
# Needs STRATA_BIN; sets bin, work, pid, port, log.
bin=${STRATA_BIN:?STRATA_BIN names the strata binary}
command -v curl >/dev/null || { echo "SKIPPED: no curl"; exit 77; }
command -v jq >/dev/null || { echo "SKIPPED: no jq"; exit 77; }
work=$(mktemp -d /tmp/strata-serve-sh-XXXXXX)
pid=
log="$work/log"
cleanup() { [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; [ -f "$log" ] && tail -20 "$log" >&2; exit 1; }

# serve_start ARGS...: `strata serve --port 0 ARGS` in the background, its output in $log;
# returns once it says where it listens (sets pid and port).
serve_start() {
  : >"$log" # exists before the background shell opens it, so the first poll can read it
  "$bin" serve --port 0 "$@" >"$log" 2>&1 &
  pid=$!
  port=
  for _ in $(seq 1 200); do
    port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log")
    [ -n "$port" ] && return 0
    kill -0 "$pid" 2>/dev/null || fail "the server did not start"
    sleep 0.05
  done
  fail "the server did not say where it listens"
}

# post PATH BODY: the response body, then its HTTP status on the last line.
post() { curl -s -w '\n%{http_code}' -H 'Content-Type: application/json' --data-binary "$2" "http://127.0.0.1:$port$1"; }
body_of() { printf '%s\n' "$1" | sed '$d'; }
status_of() { printf '%s\n' "$1" | tail -n 1; }
