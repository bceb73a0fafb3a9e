/* RAM residency by layer block on real models: greedy generation with a hot KV pool of a
 * few pages' worth of layer blocks (--kv-ram of 2.5 pages: the half page is whole blocks
 * too) must give exactly the tokens of the all-in-RAM run, dense and with a sparse budget
 * in every layer (each layer's selection fetches and evicts only its own blocks), on
 * stories260K, tiny-long and the built-in synthetic model. Through the CLI; each model is
 * skipped when absent. */
#include "../test.h"

#include <unistd.h>

/* The stderr of the last tiered run (dir/err.txt, removed), or NULL; caller frees. */
static char *read_err(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/err.txt", dir);
    char *err = test_slurp(path, NULL);
    unlink(path);
    return err;
}

/* model_arg: "-m PATH" or "" (built-in); ram: the --kv-ram bytes; blocks: the hot pool's
 * size in layer blocks that must be reported. */
static void compare(const char *bin, const char *model_arg, const char *dir, long long ram,
                    long long blocks) {
    static const char *modes[] = {"", "--kv-budget 64 --kv-dense-layers 0"};
    for (int m = 0; m < 2; m++) {
        char a[2048], b[2048];
        snprintf(a, sizeof a, "%s run %s -p 'Once upon a time' -n 160 --temp 0 -c 256 %s 2>/dev/null",
                 bin, model_arg, modes[m]);
        snprintf(b, sizeof b, "%s run %s -p 'Once upon a time' -n 160 --temp 0 -c 256 %s "
                 "--kv-spill %s --kv-ram %lld 2>%s/err.txt", bin, model_arg, modes[m], dir, ram, dir);
        char *ra = test_run_capture(a), *rb = test_run_capture(b), *err = read_err(dir);
        CHECK(ra && rb);
        if (ra && rb) {
            CHECK(strlen(ra) > 50); /* the synthetic model writes short noise tokens */
            CHECK_STR(ra, rb);
        }
        char want[96];
        snprintf(want, sizeof want, "KV tier: hot pool %lld layer blocks", blocks);
        CHECK(err && strstr(err, want));
        /* blocks left RAM and came back (fetched or streamed) */
        CHECK(err && !strstr(err, "; 0 spilled"));
        CHECK(err && (!strstr(err, " 0 fetched") || !strstr(err, " 0 blocks streamed")));
        if (err && !strstr(err, want)) fprintf(stderr, "%s\n", err);
        free(ra);
        free(rb);
        free(err);
    }
}

TEST(test_block_residency_identical) {
    const char *bin = getenv("STRATA_BIN");
    if (!bin) {
        test_skip("STRATA_BIN missing");
        return;
    }
    char dir[] = "/tmp/strata-tier-blocks-XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    static const char *files[] = {"stories260K.gguf", "tiny-long.gguf", NULL};
    int ran = 0;
    for (int i = 0; i < 3; i++) {
        char path[512], arg[600];
        arg[0] = 0;
        if (files[i]) {
            snprintf(path, sizeof path, "%s/models/%s", test_shared_dir(), files[i]);
            if (access(path, R_OK)) continue;
            snprintf(arg, sizeof arg, "-m %s", path);
        }
        /* the geometry from a probe run: the CLI names the page bytes when the pool is
         * too small ("... of 1 pages (N bytes each)") */
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "%s run %s -p x -n 1 -c 256 --kv-spill %s --kv-ram 1 2>&1; true", bin, arg, dir);
        char *probe = test_run_capture(cmd);
        const char *at = probe ? strstr(probe, "pages (") : NULL;
        long long page_bytes = 0;
        if (!at || sscanf(at, "pages (%lld bytes each)", &page_bytes) != 1 || page_bytes <= 0) {
            CHECK(0 && "no page size from the probe run");
            fprintf(stderr, "%s\n", probe ? probe : "(no output)");
            free(probe);
            continue;
        }
        free(probe);
        /* n_layer from the hot pool of a two-page budget (2 * n_layer blocks) */
        const long long ram = page_bytes * 5 / 2;
        long long n_layer = 0, block = 0;
        snprintf(cmd, sizeof cmd, "%s run %s -p x -n 1 -c 256 --kv-spill %s --kv-ram %lld 2>&1 >/dev/null",
                 bin, arg, dir, page_bytes * 2);
        char *o = test_run_capture(cmd);
        const char *t = o ? strstr(o, "KV tier: hot pool ") : NULL;
        long long b2 = 0;
        if (t && sscanf(t, "KV tier: hot pool %lld layer blocks", &b2) == 1 && b2 > 0) {
            n_layer = b2 / 2;
            block = page_bytes / n_layer;
        }
        free(o);
        REQUIRE(n_layer > 0 && block > 0);
        compare(bin, arg, dir, ram, ram / block);
        ran++;
    }
    CHECK(ran >= 1);
    CHECK_INT(rmdir(dir), 0);
}

TEST_MAIN(test_block_residency_identical)
