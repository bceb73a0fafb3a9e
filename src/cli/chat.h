/* strata run --chat: an interactive multi-turn chat that keeps the conversation's KV between
 * turns, so each turn prefills only what is new; each turn is one engine request. */
#ifndef STRATA_CLI_CHAT_H
#define STRATA_CLI_CHAT_H

#include "cli/cli_util.h"
#include "strata/engine.h"
#include "strata/sample.h"

#include <stdio.h>

/* -n -1 (or -2, as llama.cpp spells "until the context is filled"): generate until the
 * end of the text or a full context (no context shift: KV positions never move). */
#define N_PREDICT_UNTIL_FULL (1LL << 40)

typedef struct st_cli_chat_opts {
    const char *template_name; /* --chat-template NAME, or NULL: detected from the GGUF */
    const char *system;        /* --system TEXT, or NULL: no system message; taken as written,
                                  since llama-cli applies its escapes to -p, -f and typed lines
                                  but not to -sys */
    long long n_predict;       /* most tokens generated per reply (-n; N_PREDICT_UNTIL_FULL) */
    int32_t n_batch;           /* prefill chunk (0: 256) */
    st_sampler_params sp;
    FILE *in;                  /* where user lines come from (stdin); borrowed */
    int escape;                /* process each line's escapes (st_cli_prompt_text), as -e */
    st_engine *engine;         /* runs every turn (one request continuing the conversation's
                                  sequence); s holds its parts; borrowed */
} st_cli_chat_opts;

/* Runs the chat over the open session s (the engine's parts; one KV sequence) until
 * end of input or "/exit"; "/reset" starts the conversation over (keeping --system).
 * Replies go to stdout, statistics and messages to stderr. A turn that would overflow the
 * context, or whose forward fails, is refused with a message and the conversation stays
 * usable. Returns the process exit code: 0 at the end of input, 2 for an unknown or missing
 * chat template (the message names it), 1 when memory runs out. */
int st_cli_chat(st_cli_session *s, const st_cli_chat_opts *o);

#endif
