/* `strata run --kv-epsilon` on the built-in synthetic model: epsilon 0 prints exactly the
 * dense text, a certified run reports its bound and audit (0 violations) on the statistics
 * line, and an epsilon outside [0, 1] is refused (exit 2, the flag named). And
 * `--kv-resident-bonus`: without a tier it changes nothing (every block is in RAM), through
 * a tier of a few hot pages bonus 0 prints the all-in-RAM text, and a negative bonus is
 * refused. */
#include "../test.h"
#include "chat_test_util.h"

static char *run_out(const char *extra, int *rc, char **err) {
    char args[512], *out = NULL;
    snprintf(args, sizeof args, "run -p 'Once upon a time' --temp 0 -c 512 -n 48 --kv-page 16 %s", extra);
    *rc = chat_run(args, "", &out, err);
    return out;
}

TEST(test_run_cert) {
    atexit(chat_cleanup);
    int rc;
    char *err = NULL;
    char *dense = run_out("", &rc, &err);
    CHECK_INT(rc, 0);
    free(err);
    char *zero = run_out("--kv-budget 32 --kv-dense-layers 0 --kv-epsilon 0", &rc, &err);
    CHECK_INT(rc, 0);
    CHECK(dense && zero && strlen(dense) > 20 && !strcmp(dense, zero));
    free(err);
    free(zero);
    char *cert = run_out("--kv-budget 32 --kv-dense-layers 0 --kv-epsilon 0.5 --kv-cert-dense 1 --kv-audit 1", &rc, &err);
    CHECK_INT(rc, 0);
    CHECK(err && strstr(err, "quest: certified, epsilon 0.5"));
    CHECK(err && strstr(err, "skipped-mass bound max"));
    CHECK(err && strstr(err, " 0 violations"));
    CHECK(err && !strstr(err, "VIOLATED"));
    if (err && !strstr(err, " 0 violations")) fprintf(stderr, "%s\n", err);
    free(err);
    free(cert);
    free(run_out("--kv-epsilon 1.5", &rc, &err));
    CHECK_INT(rc, 2);
    CHECK(err && strstr(err, "--kv-epsilon"));
    free(err);
    free(dense);
}

/* The MiB the tier read, from the --verbose statistics line; -1 when absent. */
static double tier_mib(const char *err) {
    const char *t = err ? strstr(err, "KV tier:") : NULL;
    const char *m = t ? strstr(t, " MiB read") : NULL;
    if (!m) return -1;
    while (m > t && m[-1] != ' ') m--;
    return atof(m);
}

TEST(test_run_resident_bonus) {
    atexit(chat_cleanup);
    int rc;
    char *err = NULL, extra[256];
    /* 200 tokens of 16-token pages with a 64-token budget: candidates beyond the sinks and
     * the recent pages, so the ranking (and the bonus) chooses */
    const char *q = "-n 200 --kv-budget 64 --kv-dense-layers 0";
    char *plain = run_out(q, &rc, &err);
    CHECK_INT(rc, 0);
    free(err);
    snprintf(extra, sizeof extra, "%s --kv-resident-bonus 4", q);
    char *ram = run_out(extra, &rc, &err);
    CHECK_INT(rc, 0);
    CHECK(plain && ram && strlen(plain) > 20 && !strcmp(plain, ram));
    free(err);
    /* a hot pool of 4 pages for a run of 14 spills */
    snprintf(extra, sizeof extra, "%s --kv-spill %s --kv-pool-pages 4 --verbose", q, chat_dir());
    char *tier0 = run_out(extra, &rc, &err);
    CHECK_INT(rc, 0);
    CHECK(plain && tier0 && !strcmp(plain, tier0));
    const double mib0 = tier_mib(err);
    free(err);
    snprintf(extra, sizeof extra, "%s --kv-spill %s --kv-pool-pages 4 --verbose --kv-resident-bonus 4", q,
             chat_dir());
    char *tier4 = run_out(extra, &rc, &err);
    CHECK_INT(rc, 0);
    CHECK(tier4 && strlen(tier4) > 20);
    const double mib4 = tier_mib(err);
    free(err);
    fprintf(stderr, "  tier reads: bonus 0 %.1f MiB, bonus 4 %.1f MiB\n", mib0, mib4);
    CHECK(mib0 > 0 && mib4 >= 0 && mib4 < mib0);
    free(run_out("--kv-resident-bonus -1", &rc, &err));
    CHECK_INT(rc, 2);
    CHECK(err && strstr(err, "--kv-resident-bonus"));
    free(err);
    free(plain), free(ram), free(tier0), free(tier4);
}

TEST_MAIN(test_run_cert, test_run_resident_bonus)
