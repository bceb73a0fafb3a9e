/* The Quest sparse-decode flags shared by strata run, perplexity and bench:
 * --kv-budget N, --kv-sinks N, --kv-recent N, --kv-dense-layers N, --kv-audit N, --kv-epsilon E,
 * --kv-cert-dense F, --kv-resident-bonus B. */
#ifndef STRATA_CLI_QUEST_H
#define STRATA_CLI_QUEST_H

#include "strata/model.h"

#include <stdio.h>

#define ST_CLI_QUEST_USAGE                                                                        \
    "Quest sparse decode: --kv-budget N (tokens attended per KV head at decode; 0 = dense),\n"    \
    "--kv-sinks N (default one page), --kv-recent N (default two pages), --kv-dense-layers N\n"   \
    "(default 2), --kv-audit N (every N decode steps measure the softmax mass captured; with\n"   \
    "--kv-epsilon also check it against the certified bound), --kv-epsilon E (certified: grow\n"  \
    "each selection from the budget until the skipped softmax mass is provably <= E for every\n"  \
    "query head; 0 = dense), --kv-cert-dense F (a head whose certified selection would list\n"   \
    "more than F of the pages goes dense at once; default 0.5, 1 = grow to the end),\n"        \
    "--kv-resident-bonus B (with --kv-spill: a page whose layer block is in RAM ranks as if\n"   \
    "its bound were B nats of score higher, so close calls read no disk; default 0 = off,\n"    \
    "which keeps the tiered output equal to all in RAM).\n"

typedef struct st_cli_quest {
    st_kv_quest_params p;
    long long audit; /* 0: off */
    int given;       /* any of the flags appeared */
} st_cli_quest;

void st_cli_quest_init(st_cli_quest *q);
/* Option a with value v: 1 consumed (v valid), 0 not a Quest flag, -1 bad or missing value. */
int st_cli_quest_arg(st_cli_quest *q, const char *a, const char *v);
/* Turns it on in the runner: 0 or an error code (message in the runner's ctx). */
int st_cli_quest_apply(const st_cli_quest *q, st_runner *r);
/* The statistics line(s) on f when a budget or epsilon is set. Returns 0, or ST_E_CORRUPT
 * after a loud line when the audit caught a certificate violation (a bug: the caller
 * fails the command). */
int st_cli_quest_print(const st_cli_quest *q, const st_runner *r, FILE *f);

#endif
