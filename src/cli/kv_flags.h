/* The SSD-tier flags shared by strata run and perplexity: --kv-spill DIR,
 * --instance-id ID, --kv-ram SIZE | --kv-pool-pages N, --kv-disk MiB, --kv-cold-type q8|q4,
 * --verbose. Parsed into an st_cli_kv_flags, then applied to the pool's st_kv_params once
 * its geometry is known (SIZE is converted to whole pages). */
#ifndef STRATA_CLI_KV_FLAGS_H
#define STRATA_CLI_KV_FLAGS_H

#include "strata/engine.h"
#include "strata/kv.h"

#include <stdio.h>

#define ST_CLI_KV_FLAGS_USAGE                                                                     \
    "SSD tier: --kv-spill DIR (spill cold KV pages to DIR/instance-<id>/), --instance-id ID\n"    \
    "(default the pid), --kv-ram SIZE|auto (hot KV pool in bytes: 64K, 512M, 2G; auto, the\n"      \
    "default: three quarters of the memory the weights leave) or --kv-pool-pages\n"             \
    "N, --kv-disk MiB (spill budget), --kv-cold-type q8|q4 (lossy), --verbose (a line per step\n" \
    "in which KV pages moved).\n"

typedef struct st_cli_kv_flags {
    const char *spill_dir, *instance_id;
    unsigned long long ram_bytes; /* 0: not given */
    int ram_auto;                 /* --kv-ram auto (also what no --kv-ram means with --kv-spill) */
    long long pool_pages;         /* 0: not given */
    long long disk_mib;           /* 0: unlimited */
    st_cold_type cold;
    int verbose;
    int given; /* a tier flag appeared (--verbose alone does not count) */
} st_cli_kv_flags;

void st_cli_kv_flags_init(st_cli_kv_flags *f);
/* Option a with value v: 1 consumed a and v, 2 consumed a alone (--verbose), 0 not a tier
 * flag, -1 bad or missing value. */
int st_cli_kv_flags_arg(st_cli_kv_flags *f, const char *a, const char *v);
/* "64K", "512M", "2G", "1048576" (K = 1024). Returns 0 or ST_E_USAGE. */
int st_cli_parse_size(const char *s, unsigned long long *out);
/* Fills the tier fields of p (geometry fields already set). Returns 0, or ST_E_USAGE with a
 * message on stderr (a RAM budget below two pages, --kv-ram without --kv-spill, ...). */
int st_cli_kv_flags_apply(const st_cli_kv_flags *f, st_kv_params *p, const char *cmd);
/* The same checks, filling an engine's tier fields (the engine converts --kv-ram to pages
 * and refuses fewer than two; without --kv-ram or --kv-pool-pages it sizes the hot pool from
 * the memory available, ram_auto). Refuses a spill directory that cannot be made or written
 * and a --kv-disk larger than its file system's free space, naming the flag. Returns 0 or
 * ST_E_USAGE with a message on stderr. */
int st_cli_kv_flags_engine(const st_cli_kv_flags *f, st_engine_params *p, const char *cmd);

#endif
