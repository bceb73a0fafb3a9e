#!/bin/sh
# strata serve with --session-dir and --kv-spill: a saved session survives kill -9 (the
# restarted server, same spill directory and instance id, resumes it with output equal to
# the uninterrupted run and the history counted as cached) even when it is killed mid-stream
# with pages spilled to disk (an 8-page hot pool), and SIGTERM lets an in-flight
# request finish and exits 0. Built-in model; needs curl and jq (else skipped, exit 77).
set -eu
. "$(dirname "$0")/serve_lib.sh"

# Starts the server in the background; sets pid and port.
start() {
  serve_start -t 1 -c 2048 --session-dir "$work/sessions" --kv-spill "$work/spill" --instance-id t1 \
    --kv-ram 256K --metrics --shutdown-timeout 300
}

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
# up to a minute: a sanitizer build on a slow machine streams a few tokens a second
for _ in $(seq 1 3000); do [ "$(grep -c '^data: ' "$work/cut" 2>/dev/null)" -gt 200 ] && break; sleep 0.02; done
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

# SIGTERM while a long streamed request runs: it finishes (a sanitizer build on a slow machine
# needs minutes for 1500 tokens, hence the long --shutdown-timeout), then the server exits 0
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
