#!/bin/sh
# strata serve --kv-spill D --instance-id X: the prefix cache survives a graceful restart.
# SIGTERM writes D/prefix-X.kv and exits 0; the next start with the same flags resumes it and
# the same completion reports cached prompt tokens and the same text (also after a kill -9,
# from the file of the earlier stop); a damaged file is
# refused with a message, removed, and the request answers the same with nothing cached.
# Built-in model; needs curl and jq (else skipped, exit 77).
set -eu
. "$(dirname "$0")/serve_lib.sh"
file="$work/spill/prefix-px1.kv"

# Starts the server in the background (its log in $work/log.N); sets pid and port.
n_start=0
start() {
  n_start=$((n_start + 1))
  log="$work/log.$n_start"
  serve_start -t 1 -c 2048 --kv-spill "$work/spill" --instance-id px1 --kv-ram 256K --shutdown-timeout 30
}
stop() {
  kill -TERM "$pid"
  rc=0; wait "$pid" || rc=$?; pid=
  [ "$rc" = 0 ] || { cat "$log" >&2; fail "SIGTERM: exit status $rc"; }
}

long='The harbour master kept a ledger of every ship that came in: its name, its flag, its cargo'
long="$long, the tide it sailed on and the weather it had seen. Over forty years the ledger grew"
long="$long to fill a shelf, then a room, and the town came to ask him what the sea would do."
req="{\"prompt\":\"$long\",\"max_tokens\":12,\"temperature\":0}"

start
r=$(post /v1/completions "$req"); [ "$(status_of "$r")" = 200 ] || fail "first run: $r"
want=$(body_of "$r" | jq -r '.choices[0].text')
n_prompt=$(body_of "$r" | jq .usage.prompt_tokens)
c0=$(body_of "$r" | jq .usage.prompt_tokens_details.cached_tokens)
[ "$c0" = 0 ] || fail "a fresh server cached $c0 tokens"
stop
[ -s "$file" ] || fail "no prefix-cache file after SIGTERM: $(ls -la "$work/spill")"
grep -q 'prefix cache saved to' "$log" || fail "no save message"
saved_line=$(grep 'prefix cache saved to' "$log")
size=$(wc -c <"$file")

start
grep -q 'prefix cache resumed from' "$log" || fail "no resume message"
resumed_line=$(grep 'prefix cache resumed from' "$log")
r=$(post /v1/completions "$req"); [ "$(status_of "$r")" = 200 ] || fail "resumed run: $r"
got=$(body_of "$r" | jq -r '.choices[0].text')
cached=$(body_of "$r" | jq .usage.prompt_tokens_details.cached_tokens)
[ "$got" = "$want" ] || fail "the resumed run's text differs: '$got' vs '$want'"
[ "$cached" -gt 0 ] || fail "the resumed run cached nothing"
[ "$cached" -lt "$n_prompt" ] || fail "cached $cached of $n_prompt prompt tokens"
cached_resumed=$cached
# kill -9 writes nothing: the file of the earlier graceful stop is resumed as it was
kill -9 "$pid"; wait "$pid" 2>/dev/null || true; pid=
[ "$(wc -c <"$file")" = "$size" ] || fail "kill -9 changed the file"
start
grep -q 'prefix cache resumed from' "$log" || fail "no resume after kill -9"
r=$(post /v1/completions "$req"); [ "$(status_of "$r")" = 200 ] || fail "run after kill -9: $r"
[ "$(body_of "$r" | jq -r '.choices[0].text')" = "$want" ] || fail "the run after kill -9 differs"
[ "$(body_of "$r" | jq .usage.prompt_tokens_details.cached_tokens)" = "$cached_resumed" ] || fail "after kill -9: $r"
stop

# a damaged file: refused with a message, removed, never served
python3 - "$file" <<'PY' 2>/dev/null || { off=$((size / 2)); printf 'X' | dd of="$file" bs=1 seek="$off" conv=notrunc 2>/dev/null; }
import sys
p = sys.argv[1]
b = bytearray(open(p, 'rb').read())
b[len(b) // 2] ^= 0x20
open(p, 'wb').write(b)
PY
start
grep -q "prefix cache refused" "$log" || fail "no refusal message: $(cat "$log")"
refused_line=$(grep "prefix cache refused" "$log")
[ ! -e "$file" ] || fail "the damaged file was not removed"
r=$(post /v1/completions "$req"); [ "$(status_of "$r")" = 200 ] || fail "run after refusal: $r"
got=$(body_of "$r" | jq -r '.choices[0].text')
cached=$(body_of "$r" | jq .usage.prompt_tokens_details.cached_tokens)
[ "$got" = "$want" ] || fail "the run after the refusal differs: '$got' vs '$want'"
[ "$cached" = 0 ] || fail "a refused file served $cached tokens"
stop
echo "ok: $n_prompt-token prompt, $cached_resumed tokens cached after the restart; file $size bytes"
echo "  $saved_line"
echo "  $resumed_line"
echo "  $refused_line"
