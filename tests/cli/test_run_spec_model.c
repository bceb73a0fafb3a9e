/* `strata run --spec-ngram` with a Quest budget on stories260K: the engine's drafting gate must
 * see the budget the runner decodes with. Below the context (drafts would attend densely where
 * plain decode is sparse) nothing is drafted and the text is plain sparse decode's; with a
 * budget covering the context, rounds run and the text is still plain decode's. */
#include "../test.h"
#include "chat_test_util.h"

static char *run_out(const char *model, const char *extra, int *rc, char **err) {
    char args[1024], *out = NULL;
    snprintf(args, sizeof args,
             "run -m %s -p 'Once upon a time' --temp 0 -n 300 --kv-page 8 --kv-dense-layers 0 %s", model, extra);
    *rc = chat_run(args, "", &out, err);
    return out;
}

/* "speculative: N rounds" on the statistics lines: N, or -1 without the line */
static long rounds(const char *err) {
    const char *s = err ? strstr(err, "speculative: ") : NULL;
    return s ? strtol(s + strlen("speculative: "), NULL, 10) : -1;
}

TEST(test_run_spec_budget_gate) {
    char model[512];
    if (!chat_stories_model(model, sizeof model)) return;
    atexit(chat_cleanup);
    int rc;
    char *err = NULL;
    /* budget 32 tokens: the 300-token context crosses it early */
    char *plain = run_out(model, "--kv-budget 32", &rc, &err);
    CHECK_INT(rc, 0);
    free(err);
    char *spec = run_out(model, "--kv-budget 32 --spec-ngram 2", &rc, &err);
    CHECK_INT(rc, 0);
    CHECK(plain && spec && strlen(plain) > 100);
    CHECK(plain && spec && !strcmp(plain, spec));
    CHECK(rounds(err) <= 0); /* past the crossover from the first steps: no round may run */
    free(err), free(spec), free(plain);
    /* budget 1024: it covers the whole context, so rounds run and stay exact */
    plain = run_out(model, "--kv-budget 1024", &rc, &err);
    CHECK_INT(rc, 0);
    free(err);
    spec = run_out(model, "--kv-budget 1024 --spec-ngram 2", &rc, &err);
    CHECK_INT(rc, 0);
    CHECK(plain && spec && !strcmp(plain, spec));
    CHECK(rounds(err) > 0);
    free(err), free(spec), free(plain);
}

TEST_MAIN(test_run_spec_budget_gate)
