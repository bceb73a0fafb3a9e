/* `strata run` takes llama.cpp's "stage off" values of the sampling flags with llama.cpp's
 * meaning, on the built-in synthetic model: --temp below 0 is greedy like --temp 0, --top-k
 * below 0 is off like --top-k 0, --top-p 1 / --min-p 0 / --repeat-penalty 1 are accepted, and
 * --seed -1 draws a seed, prints it on stderr, and --seed with that number repeats the text. */
#include "../test.h"
#include "chat_test_util.h"

/* stdout of `run -p ... -c 64 -n 24 EXTRA` (exit status into *rc); stderr into *err when err. */
static char *gen(const char *extra, int *rc, char **err) {
    char args[512], *out = NULL, *e = NULL;
    snprintf(args, sizeof args, "run -p 'Once upon a time' -c 64 -n 24 %s", extra);
    *rc = chat_run(args, "", &out, &e);
    if (*rc) fprintf(stderr, "  run %s: exit %d: %s\n", extra, *rc, e ? e : "");
    if (err) *err = e;
    else free(e);
    return out;
}

TEST(test_off_values_mean_what_llama_cpp_means) {
    atexit(chat_cleanup);
    int rc0, rc1;
    char *greedy = gen("--temp 0", &rc0, NULL), *neg = gen("--temp -1 --seed 9", &rc1, NULL);
    CHECK_INT(rc0, 0);
    CHECK_INT(rc1, 0);
    REQUIRE(greedy && neg && strlen(greedy) > 1);
    CHECK_STR(neg, greedy);
    /* a sampled run differs from greedy, so the equality above is not every run's text */
    char *sampled = gen("--temp 1.5 --top-k 0 --top-p 1 --min-p 0 --seed 9", &rc0, NULL);
    CHECK_INT(rc0, 0);
    CHECK(sampled && strcmp(sampled, greedy) != 0);
    char *k0 = gen("--temp 1.5 --top-k 0 --seed 9", &rc0, NULL), *kneg = gen("--temp 1.5 --top-k -7 --seed 9", &rc1, NULL);
    CHECK_INT(rc0, 0);
    CHECK_INT(rc1, 0);
    CHECK(k0 && kneg);
    if (k0 && kneg) CHECK_STR(kneg, k0);
    char *off = gen("--top-p 1 --min-p 0 --repeat-penalty 1", &rc0, NULL);
    CHECK_INT(rc0, 0);
    free(greedy), free(neg), free(sampled), free(k0), free(kneg), free(off);
}

TEST(test_random_seed_printed_and_repeatable) {
    int rc;
    char *err = NULL, *out = gen("--temp 1.5 --top-k 0 --seed -1", &rc, &err);
    CHECK_INT(rc, 0);
    REQUIRE(out && err);
    const char *p = strstr(err, "sampler seed: ");
    CHECK(p != NULL);
    if (!p) fprintf(stderr, "  stderr:\n%s\n", err);
    REQUIRE(p);
    unsigned long long seed = strtoull(p + strlen("sampler seed: "), NULL, 10);
    char extra[128];
    snprintf(extra, sizeof extra, "--temp 1.5 --top-k 0 --seed %llu", seed);
    char *again = gen(extra, &rc, NULL);
    CHECK_INT(rc, 0);
    CHECK(again != NULL);
    if (again) CHECK_STR(again, out);
    free(out), free(err), free(again);
    /* other negative seeds are refused, naming the value */
    out = gen("--seed -2", &rc, &err);
    CHECK_INT(rc, 2);
    CHECK(err && strstr(err, "bad value '-2' for --seed"));
    free(out), free(err);
}

TEST_MAIN(test_off_values_mean_what_llama_cpp_means, test_random_seed_printed_and_repeatable)
