/* strata run --prompt-cache FILE (llama.cpp's flag): the KV of an earlier run's prompt,
 * kept in a KV snapshot file (docs/FORMATS.md, "KV snapshot"), so a run whose prompt shares
 * a prefix with it computes only the rest. The snapshot carries the model fingerprint and
 * the KV geometry: a file made by another model or KV configuration is refused. */
#ifndef STRATA_CLI_PROMPT_CACHE_H
#define STRATA_CLI_PROMPT_CACHE_H

#include "cli/cli_util.h"

/* Restores path into s->kv as a new sequence *seq cut to the longest prefix it shares with
 * prompt[n] and shorter than n (the last prompt token is always computed: its logits start
 * the generation); *n_reused = the tokens kept, *n_common = the prefix shared before that
 * cut (== n: the file covers the whole prompt). A missing file: a new empty sequence, both
 * 0. Prints what it restored to stderr. Returns 0, or an exit code after a one-line
 * message naming the file (2: not a snapshot of this model and KV configuration, malformed,
 * or too large for the context; 1: out of memory or an I/O error). */
int st_cli_prompt_cache_load(st_cli_session *s, const char *path, const int32_t *prompt, int n,
                             st_kv_seq_id *seq, int *n_reused, int *n_common);

/* Writes seq's KV to path: first to path.tmp, synced, then renamed over path, so a crash or
 * a full disk never leaves a half-written cache in its place. Returns 0 or an exit code
 * after a one-line message. */
int st_cli_prompt_cache_save(st_cli_session *s, const char *path, st_kv_seq_id seq);

#endif
