/* `strata run` sampling end to end on ../shared/models/stories260K.gguf (label `model`):
 * --temp 0.8 --top-k 40 --top-p 0.9 --seed 42 -n 32 writes the same text twice, seed 43 (on
 * this model and prompt, checked to differ) another text, and --seed -1 runs and prints the
 * seed it drew on stderr, which repeats its text. */
#include "../test.h"
#include "chat_test_util.h"

#define SAMPLING "--temp 0.8 --top-k 40 --top-p 0.9 -n 32"

static char model[1024];

static int have_model(void) {
    snprintf(model, sizeof model, "%s/models/stories260K.gguf", test_shared_dir());
    if (access(model, R_OK) == 0) return 1;
    char why[1200];
    snprintf(why, sizeof why, "%s not found (needs ../shared)", model);
    test_skip(why);
    return 0;
}

/* stdout of `run -m stories260K SAMPLING --seed SEED`; stderr into *err when err. */
static char *gen(const char *seed, char **err) {
    char args[2048], *out = NULL, *e = NULL;
    snprintf(args, sizeof args, "run -m %s " SAMPLING " --seed %s", model, seed);
    int rc = chat_run(args, "", &out, &e);
    CHECK_INT(rc, 0);
    if (rc) fprintf(stderr, "  run --seed %s: exit %d: %s\n", seed, rc, e ? e : "");
    if (err) *err = e;
    else free(e);
    return out;
}

TEST(test_seeded_sampling_reproducible) {
    atexit(chat_cleanup);
    if (!have_model()) return;
    char *a = gen("42", NULL), *b = gen("42", NULL), *c = gen("43", NULL);
    REQUIRE(a && b && c);
    CHECK(strlen(a) > 32); /* 32 tokens of story, not an empty line */
    CHECK_STR(b, a);
    CHECK(strcmp(c, a) != 0);
    fprintf(stderr, "  seed 42: %s  seed 43: %s", a, c);
    free(a), free(b), free(c);
}

TEST(test_random_seed_printed) {
    if (!have_model()) return;
    char *err = NULL, *out = gen("-1", &err);
    REQUIRE(out && err);
    const char *p = strstr(err, "sampler seed: ");
    CHECK(p != NULL);
    REQUIRE(p);
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", strtoull(p + strlen("sampler seed: "), NULL, 10));
    char *again = gen(seed, NULL);
    CHECK(again != NULL);
    if (again) CHECK_STR(again, out);
    free(out), free(err), free(again);
}

TEST_MAIN(test_seeded_sampling_reproducible, test_random_seed_printed)
