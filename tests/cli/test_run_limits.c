/* `strata run` generation limits on the built-in synthetic model: -n N stops after N tokens,
 * -n -1 and -2 (llama.cpp's "no limit" and "until the context is filled") run until the
 * context is full, and the statistics say why generation stopped; -n below -2 is refused
 * (exit 2, the value named). */
#include "../test.h"
#include "chat_test_util.h"

/* `run -p PROMPT --temp 0 -c 64 EXTRA`: exit status; stderr into *err (stdout dropped). */
static int run(const char *extra, char **err) {
    char args[512], *out = NULL;
    snprintf(args, sizeof args, "run -p 'Once upon a time' --temp 0 -c 64 %s", extra);
    int rc = chat_run(args, "", &out, err);
    free(out);
    return rc;
}

/* The integer after `key` in s, or -1. */
static int field(const char *s, const char *key) {
    const char *p = s ? strstr(s, key) : NULL;
    return p ? atoi(p + strlen(key)) : -1;
}

TEST(test_run_limits) {
    atexit(chat_cleanup);
    char *err = NULL;
    CHECK_INT(run("-n 5", &err), 0);
    CHECK_INT(field(err, "generated tokens: "), 5);
    CHECK(err && strstr(err, "stopped: -n reached"));
    free(err);

    const char *unlimited[] = {"-n -1", "-n -2", "-n 1000"};
    for (int i = 0; i < 3; i++) {
        CHECK_INT(run(unlimited[i], &err), 0);
        const int n_prompt = field(err, "prompt tokens: ");
        CHECK(n_prompt > 0);
        /* the last token is sampled from the logits of position 63 and not forwarded */
        CHECK_INT(field(err, "generated tokens: ") + n_prompt, 64);
        CHECK(err && strstr(err, "stopped: context full (64 tokens"));
        free(err);
    }

    CHECK_INT(run("-n -3", &err), 2);
    CHECK(err && strstr(err, "bad value '-3' for -n"));
    free(err);
}

TEST_MAIN(test_run_limits)
