/* `strata run` generation limits on the built-in synthetic model: -n N stops after N tokens,
 * -n -1 and -2 (llama.cpp's "no limit" and "until the context is filled") run until the
 * context is full, and the statistics say why generation stopped; -n below -2 is refused
 * (exit 2, the value named). The newline after the text comes only when the generation
 * succeeded. */
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

/* stdout of `run ... -c 2048 EXTRA` (the built-in model's whole context); exit status in *rc */
static char *run_out(const char *extra, int *rc, char **err) {
    char args[1024], *out = NULL;
    snprintf(args, sizeof args, "run -p 'Once upon a time' --temp 0 -c 2048 %s", extra);
    *rc = chat_run(args, "", &out, err);
    return out;
}

/* The newline that ends the text is written after a generation that succeeded. A run whose
 * pages may not fit the pool (-n -1 fills the context; a 2-page hot pool and 1 MiB of spill
 * hold far less) is refused before it starts, naming the pages, with no text at all: the
 * engine admits only what it can finish. */
TEST(test_newline_only_on_success) {
    int rc;
    char *err = NULL, *out = run_out("-n 40", &rc, &err);
    CHECK_INT(rc, 0);
    REQUIRE(out && strlen(out) > 1);
    CHECK(out[strlen(out) - 1] == '\n');
    free(out), free(err);
    char extra[512];
    snprintf(extra, sizeof extra, "-n -1 --kv-spill %s/spill --kv-pool-pages 2 --kv-disk 1", chat_dir());
    out = run_out(extra, &rc, &err);
    CHECK_INT(rc, 2);
    CHECK(err && strstr(err, "may need 129 KV pages") && strstr(err, "more than the pool's 34"));
    CHECK(out && strlen(out) == 0);
    free(out), free(err);
    /* within the pool it runs, spilling, to its end */
    snprintf(extra, sizeof extra, "-n 400 --kv-spill %s/spill --kv-pool-pages 2 --kv-disk 1", chat_dir());
    out = run_out(extra, &rc, &err);
    CHECK_INT(rc, 0);
    CHECK(err && strstr(err, "generated tokens: 400 "));
    CHECK(out && strlen(out) > 40 && out[strlen(out) - 1] == '\n');
    free(out), free(err);
}

TEST_MAIN(test_run_limits, test_newline_only_on_success)
