#!/bin/sh
# strata serve with --session-dir and --kv-spill: a saved session survives kill -9 (the
# restarted server, same spill directory and instance id, resumes it with output equal to
# the uninterrupted run and the history counted as cached) even when it is killed mid-stream
# with pages spilled to disk (an 8-page hot pool), and SIGTERM lets an in-flight
# request finish and exits 0. Built-in model; needs curl and jq (else skipped, exit 77).
set -eu
bin=${STRATA_BIN:?STRATA_BIN names the strata binary}
command -v curl >/dev/null || { echo "SKIPPED: no curl"; exit 77; }
command -v jq >/dev/null || { echo "SKIPPED: no jq"; exit 77; }
work=$(mktemp -d /tmp/strata-sessions-sh-XXXXXX)
pid=
cleanup() { [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; [ -f "$work/log" ] && tail -20 "$work/log" >&2; exit 1; }

# Starts the server in the background; sets pid and port.
start() {
  "$bin" serve --port 0 -t 1 -c 2048 --session-dir "$work/sessions" --kv-spill "$work/spill" --instance-id t1 \
    --kv-ram 256K --metrics --shutdown-timeout 60 >"$work/log" 2>&1 &
  pid=$!
  port=
  for _ in $(seq 1 200); do
    port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/log")
    [ -n "$port" ] && return 0
    kill -0 "$pid" 2>/dev/null || fail "the server did not start"
    sleep 0.05
  done
  fail "the server did not say where it listens"
}

post() { curl -s -w '\n%{http_code}' -H 'Content-Type: application/json' --data-binary "$2" "http://127.0.0.1:$port$1"; }
body_of() { printf '%s\n' "$1" | sed '$d'; }
status_of() { printf '%s\n' "$1" | tail -n 1; }

hist='Once upon a time, in a town by the sea, there lived a keeper of lighthouses'
cont="$hist who counted ships"
req="{\"prompt\":\"$cont\",\"max_tokens\":16,\"temperature\":0,\"logprobs\":2}"

start
r=$(post /v1/completions "$req"); [ "$(status_of "$r")" = 200 ] || fail "uninterrupted run: $r"
want=$(body_of "$r" | jq -c '.choices[0] | {text, logprobs}')
r=$(post /v1/sessions/lighthouse "{\"prompt\":\"$hist\"}"); [ "$(status_of "$r")" = 200 ] || fail "save: $r"
n_hist=$(body_of "$r" | jq .n_tokens)
[ "$n_hist" -gt 10 ] || fail "save answered $r"
# kill -9 mid-traffic: a long stream is running, its pages spilling past the 8-page hot pool
curl -s -N -H 'Content-Type: application/json' \
  --data-binary '{"prompt":"Tell me a long story","max_tokens":1500,"temperature":0,"stream":true}' \
  "http://127.0.0.1:$port/v1/completions" >"$work/cut" &
kpid=$!
for _ in $(seq 1 200); do [ "$(grep -c '^data: ' "$work/cut" 2>/dev/null)" -gt 200 ] && break; sleep 0.02; done
spilled=$(curl -s "http://127.0.0.1:$port/metrics" | sed -n 's/^strata_tier_writes_total \([0-9]*\)$/\1/p')
[ "${spilled:-0}" -gt 0 ] || fail "no page was spilled before kill -9"
kill -9 "$pid"; wait "$pid" 2>/dev/null || true; pid=
wait "$kpid" || true
[ "$(grep -c '^data: ' "$work/cut")" -gt 200 ] || fail "the stream before kill -9 did not get far enough to spill"

start # same spill directory and instance id: the dead instance's lock is free
r=$(post /v1/completions "$req"); [ "$(status_of "$r")" = 200 ] || fail "resume: $r"
got=$(body_of "$r" | jq -c '.choices[0] | {text, logprobs}')
cached=$(body_of "$r" | jq .usage.prompt_tokens_details.cached_tokens)
[ "$got" = "$want" ] || fail "the resumed continuation differs: $got vs $want"
[ "$cached" = "$n_hist" ] || fail "cached $cached tokens, the session holds $n_hist"
r=$(curl -s "http://127.0.0.1:$port/v1/sessions")
[ "$(printf '%s' "$r" | jq -r '.data[0].name')" = lighthouse ] || fail "list: $r"

# SIGTERM while a long streamed request runs: it finishes, then the server exits 0
curl -s -N -H 'Content-Type: application/json' \
  --data-binary '{"prompt":"Tell me a long story","max_tokens":1500,"temperature":0,"stream":true}' \
  "http://127.0.0.1:$port/v1/completions" >"$work/stream" &
cpid=$!
for _ in $(seq 1 200); do grep -q '^data: ' "$work/stream" 2>/dev/null && break; sleep 0.02; done
in_flight=1
grep -q '\[DONE\]' "$work/stream" && in_flight=0
kill -TERM "$pid"
rc=0; wait "$pid" || rc=$?; pid=
wait "$cpid" || fail "the streaming client failed"
[ "$rc" = 0 ] || fail "SIGTERM: exit status $rc"
grep -v '^$' "$work/stream" | tail -n 1 | grep -q '^data: \[DONE\]' || fail "the in-flight stream was cut: $(tail -c 300 "$work/stream")"
grep -q '"finish_reason":"\(length\|stop\)"' "$work/stream" || fail "the in-flight stream has no finish"
grep -q 'stopped' "$work/log" || fail "no stop message"
[ "$in_flight" = 1 ] || echo "note: the request had finished before SIGTERM arrived"
echo "ok: session of $n_hist tokens resumed after kill -9 ($spilled pages spilled); SIGTERM finished the in-flight stream and exited 0"
