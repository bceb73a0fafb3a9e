/* SSD tier on a real model: greedy generation from stories260K with a hot KV pool
 * of ten layer blocks, two pages' worth (--kv-ram 40K: a page of 32 tokens is 5 layers x
 * 4 KiB = 20 KiB; the KV of the 512-token context is 17 pages) must produce exactly the
 * tokens of the all-in-RAM run, for a short prompt (decode streams the past every step) and
 * for a long one prefilled in chunks (chunk attention streams too). Through the CLI. */
#include "../test.h"

#include <unistd.h>


static void compare(const char *bin, const char *model, const char *prompt_args, const char *dir) {
    char a[2048], b[2048];
    snprintf(a, sizeof a, "%s run -m %s %s -n 300 --temp 0 --kv-page 32 -c 512 -b 64 2>/dev/null",
             bin, model, prompt_args);
    snprintf(b, sizeof b, "%s run -m %s %s -n 300 --temp 0 --kv-page 32 -c 512 -b 64 "
             "--kv-spill %s --kv-ram 40K 2>%s/err.txt", bin, model, prompt_args, dir, dir);
    char *ra = test_run_capture(a), *rb = test_run_capture(b);
    CHECK(ra && rb);
    if (ra && rb) {
        CHECK(strlen(ra) > 200);
        CHECK_STR(ra, rb);
    }
    char path[512], *err = NULL;
    snprintf(path, sizeof path, "%s/err.txt", dir);
    FILE *f = fopen(path, "r");
    if (f) {
        err = calloc(1, 8192);
        if (err) fread(err, 1, 8191, f);
        fclose(f);
        unlink(path);
    }
    /* the run really went through the tier: pages spilled and streamed */
    CHECK(err && strstr(err, "KV tier: hot pool 10 layer blocks"));
    CHECK(err && !strstr(err, " 0 blocks streamed"));
    free(err);
    free(ra);
    free(rb);
}

TEST(test_tiered_greedy_identical) {
    const char *bin = getenv("STRATA_BIN");
    char model[512];
    snprintf(model, sizeof model, "%s/models/stories260K.gguf", test_shared_dir());
    if (!bin || access(model, R_OK)) {
        test_skip("STRATA_BIN or stories260K.gguf missing");
        return;
    }
    char dir[] = "/tmp/strata-tiered-model-XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    compare(bin, model, "-p 'Once upon a time'", dir);
    /* a long prompt: prefill in chunks of 64 through the tier */
    char pf[600];
    snprintf(pf, sizeof pf, "%s/prompt.txt", dir);
    FILE *f = fopen(pf, "w");
    REQUIRE(f != NULL);
    for (int i = 0; i < 12; i++)
        fputs("Once upon a time, there was a little girl named Lily. She loved to play outside. ", f);
    fclose(f);
    char args[700];
    snprintf(args, sizeof args, "-f %s", pf);
    compare(bin, model, args, dir);
    unlink(pf);
    CHECK_INT(rmdir(dir), 0);
}

TEST_MAIN(test_tiered_greedy_identical)
