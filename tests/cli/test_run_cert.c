/* `strata run --kv-epsilon` on the built-in synthetic model: epsilon 0 prints exactly the
 * dense text, a certified run reports its bound and audit (0 violations) on the statistics
 * line, and an epsilon outside [0, 1] is refused (exit 2, the flag named). */
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

TEST_MAIN(test_run_cert)
