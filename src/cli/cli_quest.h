/* The Quest sparse-decode flags shared by strata run, perplexity and bench:
 * --kv-budget N, --kv-sinks N, --kv-recent N, --kv-dense-layers N, --kv-audit N. */
#ifndef STRATA_CLI_QUEST_H
#define STRATA_CLI_QUEST_H

#include "strata/model.h"

#include <stdio.h>

#define ST_CLI_QUEST_USAGE                                                                        \
    "Quest sparse decode: --kv-budget N (tokens attended per KV head at decode; 0 = dense),\n"    \
    "--kv-sinks N (default one page), --kv-recent N (default two pages), --kv-dense-layers N\n"   \
    "(default 2), --kv-audit N (every N decode steps measure the softmax mass captured).\n"

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
/* The statistics line(s) on f when a budget is set. */
void st_cli_quest_print(const st_cli_quest *q, const st_runner *r, FILE *f);

#endif
