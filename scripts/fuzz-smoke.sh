#!/usr/bin/env bash
# Runs every libFuzzer target in BUILD/fuzz/ for SECONDS each from a seed corpus, failing on
# the first crash, leak, timeout or failed check (CI's smoke test of the parsers; `make fuzz`
# and a long run of one target are for real fuzzing).
#   scripts/fuzz-smoke.sh [BUILD (build-fuzz)] [SECONDS (20)]
# Seeds: the GGUF corpus of the unit tests (test_gguf_corpus --write), a valid KV snapshot
# and a patch of one ('S' and 'P', see fuzz/kv_snapshot_fuzz.c), a few texts for tok_fuzz,
# a few edit lists for model_fuzz (its first byte picks the base model, then edits follow),
# a few request bodies for server_request_fuzz (first byte: completions or chat), a valid
# session file and patches of one for session_file_fuzz ('S' and 'P', see its header), a valid
# prefix-cache file and patches of one for prefix_file_fuzz ('S' and 'P', see its header), the
# valid llama2.c pair and patches of it for llama2c_fuzz (see its header).
set -euo pipefail
build=${1:-build-fuzz}
secs=${2:-20}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

shopt -s nullglob
targets=("$build"/fuzz/*_fuzz)
if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz-smoke: no targets in $build/fuzz (make fuzz builds them)" >&2
  exit 1
fi

mkdir -p "$work/seeds/gguf" "$work/seeds/kv_snapshot" "$work/seeds/tok" "$work/seeds/model" "$work/seeds/server_request" \
  "$work/seeds/session_file" "$work/seeds/prefix_file" "$work/seeds/llama2c"
"$build/tests/test_gguf_corpus" --write "$work/seeds/gguf" >/dev/null
printf 'S' >"$work/seeds/kv_snapshot/valid"
printf 'P\x00\x10\x01' >"$work/seeds/kv_snapshot/patch"
printf '\x00Hello, world! 123' >"$work/seeds/tok/ascii"
printf '\x03caf\xc3\xa9 \xe2\x82\xac <s> \xff\xfe' >"$work/seeds/tok/utf8"
printf '\x00' >"$work/seeds/model/llama"                   # the unedited tiny llama model
printf '\x04\x00\x08\x10' >"$work/seeds/model/rope"         # qwen2 (q8_0), rope.dimension_count = 16
printf '\x02\x05\x2a\x07\x4b\x0c\x01' >"$work/seeds/model/tensors" # qwen3: ffn_down dropped, attn_k_norm retyped
printf '\x00{"prompt":"Once upon a time","max_tokens":8,"stop":["\\n",". "],"logit_bias":{"3":-100},"stream":true}' \
  >"$work/seeds/server_request/completion"
printf '\x01{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi \\u00e9"}],"temperature":0.5,"stream_options":{"include_usage":true}}' \
  >"$work/seeds/server_request/chat"
printf '\x00{"prompt":[1,5,9],"n":1,"seed":7,"top_k":3,"min_p":0.1}' >"$work/seeds/server_request/ids"
printf '\x00{"prompt":"a b a b a","spec_ngram":2,"spec_draft":false,"draft_max":4,"ignore_eos":true,"session":"s1","logprobs":3}' \
  >"$work/seeds/server_request/fields"
printf 'S' >"$work/seeds/session_file/valid"
printf 'P\x00\x20\x00\x01' >"$work/seeds/session_file/count"   # the token count edited, checksum fixed
printf 'P\x00\x60\x00\x04\x80' >"$work/seeds/session_file/cut" # a token edited, cut to half
printf 'P\x01\x10\x00\xff' >"$work/seeds/session_file/model"    # the fingerprint edited, checksum stale
printf 'S' >"$work/seeds/prefix_file/valid"
printf 'P\x0c\x00\x03' >"$work/seeds/prefix_file/parts"       # the part count edited, checksum fixed
printf 'P\x00\x02\x01\xc0' >"$work/seeds/prefix_file/cut"    # a page record edited, cut in the second part
printf '\x02' >"$work/seeds/llama2c/valid"                       # the valid pair, f32
printf '\x03\x08\x00\x40' >"$work/seeds/llama2c/q8_0"             # q8_0, n_layers edited: refused
printf '\x02\x14\x00\x01\xf0' >"$work/seeds/llama2c/cut"          # vocab_size edited, cut in the checkpoint

fail=0
for t in "${targets[@]}"; do
  name=$(basename "$t" _fuzz)
  corpus="$work/corpus/$name"
  mkdir -p "$corpus"
  seeds=()
  [ -d "$work/seeds/$name" ] && seeds=("$work/seeds/$name")
  echo "fuzz-smoke: $name for ${secs}s (${#seeds[@]} seed dir)"
  # -timeout: one input taking this long is a hang; -rss_limit_mb: a blow-up is a failure
  if ! "$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$work/$name-" "$corpus" "${seeds[@]}" >"$work/$name.log" 2>&1; then
    echo "fuzz-smoke: $name FAILED; the end of its log:" >&2
    tail -40 "$work/$name.log" >&2
    fail=1
  else
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$work/$name.log" | tr '\n' ' '
    echo
  fi
done
exit $fail
