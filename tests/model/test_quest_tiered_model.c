/* Quest with the SSD tier on a real model : greedy generation from
 * stories260K with a hot KV pool of two pages (--kv-page 32 --kv-ram 40K: a page is 5 layers
 * x 4 KiB blocks = 20 KiB; 200 tokens fill 7 pages), so most of the past lives only in the
 * spill file and selection must work from the in-RAM key boxes alone.
 *   - A budget covering the context, every layer sparse: exactly the dense all-in-RAM tokens
 *     (the exactness gate through the tier).
 *   - A real sparse budget (128 tokens = 4 pages): exactly the all-in-RAM sparse tokens, which
 *     differ from dense (so the budget really bites), and fewer blocks are streamed from disk
 *     than with the covering budget (only selected pages are read).
 * Through the CLI, like test_tiered_model.c. */
#include "../test.h"

#include <unistd.h>


/* The stderr of the last tiered run (dir/err.txt), or NULL; caller frees. */
static char *read_err(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/err.txt", dir);
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char *err = calloc(1, 16384);
    if (err && fread(err, 1, 16383, f) == 0) err[0] = 0;
    fclose(f);
    unlink(path);
    return err;
}

/* Blocks streamed, from the "KV tier: ..." statistics line; -1 when absent. */
static long long blocks_streamed(const char *err) {
    const char *t = err ? strstr(err, "KV tier: hot pool 10 layer blocks") : NULL;
    const char *b = t ? strstr(t, " read ahead), ") : NULL;
    long long n = -1;
    if (b && sscanf(b, " read ahead), %lld blocks streamed", &n) != 1) n = -1;
    return n;
}

#define COMMON "-p 'Once upon a time' -n 200 --temp 0 --kv-page 32 -c 512 -b 64"

TEST(test_quest_tiered_identical) {
    const char *bin = getenv("STRATA_BIN");
    char model[512];
    snprintf(model, sizeof model, "%s/models/stories260K.gguf", test_shared_dir());
    if (!bin || access(model, R_OK)) {
        test_skip("STRATA_BIN or stories260K.gguf missing");
        return;
    }
    char dir[] = "/tmp/strata-quest-tiered-XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s run -m %s " COMMON " 2>/dev/null", bin, model);
    char *dense = test_run_capture(cmd);
    snprintf(cmd, sizeof cmd, "%s run -m %s " COMMON " --kv-budget 128 2>/dev/null", bin, model);
    char *sparse = test_run_capture(cmd);
    /* covering budget, every layer sparse, audit on: through the tier */
    snprintf(cmd, sizeof cmd, "%s run -m %s " COMMON " --kv-budget 512 --kv-dense-layers 0 --kv-audit 8 "
             "--kv-spill %s --kv-ram 40K 2>%s/err.txt", bin, model, dir, dir);
    char *full_t = test_run_capture(cmd);
    char *err_full = read_err(dir);
    snprintf(cmd, sizeof cmd, "%s run -m %s " COMMON " --kv-budget 128 --kv-spill %s --kv-ram 40K 2>%s/err.txt",
             bin, model, dir, dir);
    char *sparse_t = test_run_capture(cmd);
    char *err_sparse = read_err(dir);
    CHECK(dense && sparse && full_t && sparse_t);
    if (dense && sparse && full_t && sparse_t) {
        CHECK(strlen(dense) > 200);
        CHECK_STR(full_t, dense);
        CHECK_STR(sparse_t, sparse);
        CHECK(strcmp(sparse, dense) != 0); /* a budget of 4 of 7 pages changes the text */
    }
    /* both runs really went through the tier, and the selection limited what was read */
    long long bf = blocks_streamed(err_full), bs = blocks_streamed(err_sparse);
    CHECK(bf > 0 && bs > 0);
    CHECK(bs < bf);
    CHECK(err_full && strstr(err_full, "100.0% of pages attended"));
    CHECK(err_sparse && !strstr(err_sparse, "100.0% of pages attended"));
    free(err_full);
    free(err_sparse);
    free(dense);
    free(sparse);
    free(full_t);
    free(sparse_t);
    CHECK_INT(rmdir(dir), 0);
}

TEST_MAIN(test_quest_tiered_identical)
