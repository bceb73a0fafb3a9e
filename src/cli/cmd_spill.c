/* strata spill gc DIR: remove the spill directories of dead instances. */
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "strata/tier.h"

#include <stdio.h>
#include <string.h>

static void spill_usage(FILE *f) {
    fprintf(f, "usage: strata spill gc DIR\n"
               "  Removes DIR/instance-*/ directories whose lock no live process holds\n"
               "  (left behind by a crash); directories of running instances are kept.\n");
}

int st_cmd_spill(int argc, char **argv) {
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        spill_usage(stdout);
        return ST_EXIT_OK;
    }
    if (argc != 3 || strcmp(argv[1], "gc") != 0) {
        spill_usage(stderr);
        return ST_EXIT_INPUT;
    }
    st_ctx *ctx = NULL;
    int rc = st_cli_ctx_create("spill", 1, &ctx);
    if (rc) return rc;
    int removed = 0, live = 0, failed = 0;
    rc = st_spill_gc(argv[2], ctx, &removed, &live, &failed);
    if (rc) {
        fprintf(stderr, "strata spill gc: %s\n", st_ctx_error(ctx));
    } else {
        printf("spill gc %s: removed %d stale, kept %d live", argv[2], removed, live);
        if (failed) printf(", %d could not be removed (last: %s)", failed, st_ctx_error(ctx));
        printf("\n");
    }
    st_ctx_destroy(ctx);
    if (rc) return st_cli_exit_code(rc);
    return failed ? ST_EXIT_INTERNAL : ST_EXIT_OK;
}
