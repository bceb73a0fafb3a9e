/* Prompt lookup drafting on trained models from ../shared/models (stories260K, tiny-long when
 * present): greedy streams with drafting equal plain decode token for token, on a copy-heavy
 * prompt and on free text, in RAM, spilling, and with a Quest budget across the crossover,
 * at 1 and 2 threads. */
#include "strata/engine.h"
#include "../test.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_GEN 96

static const char *passage =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun. "
    "One day, she saw a big red ball in the park. She ran to the ball and kicked it very high.\n\n"
    "Once upon a time, there was a little girl named Lily. She loved";

static int gen(const st_engine_params *p, const char *prompt, int spec, int32_t *toks, st_engine_stats *es) {
    st_engine *e = NULL;
    if (st_engine_create(p, &e, NULL, 0)) return -1;
    st_engine_req_params rp = st_engine_req_default_params();
    rp.text = prompt, rp.text_len = strlen(prompt);
    rp.sampling.temp = 0;
    rp.max_tokens = N_GEN;
    rp.ignore_eos = 1;
    rp.spec_ngram = spec;
    st_req_id id;
    int n = 0;
    if (st_engine_submit(e, &rp, &id)) n = -1;
    for (int done = n < 0; !done;) {
        const st_engine_event *ev;
        int nev;
        if (st_engine_step(e, &ev, &nev)) {
            n = -1;
            break;
        }
        for (int k = 0; k < nev; k++) {
            if (ev[k].token >= 0 && n < N_GEN) toks[n++] = ev[k].token;
            if (ev[k].finish) done = 1;
        }
    }
    st_engine_get_stats(e, es);
    st_engine_destroy(e);
    return n;
}

static void check_model(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/%s", test_shared_dir(), name);
    if (access(path, R_OK)) {
        test_untested(name);
        return;
    }
    char dir[] = "/tmp/strata-specm-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    const char *prompts[2] = {passage, "Once upon a time"};
    int64_t accepted = 0;
    for (int mode = 0; mode < 3; mode++)
        for (int th = 1; th <= 2; th++)
            for (int pi = 0; pi < 2; pi++) {
                st_engine_params p = st_engine_default_params();
                p.model_path = path;
                p.n_threads = th, p.n_parallel = 1, p.n_ctx = 512, p.n_batch = 64;
                if (mode == 1) p.spill_dir = dir, p.ram_pages = 4;
                if (mode == 2) p.quest.budget = 128; /* the crossover falls inside the run */
                int32_t a[N_GEN], b[N_GEN];
                st_engine_stats ea, eb;
                const int na = gen(&p, prompts[pi], 0, a, &ea), nb = gen(&p, prompts[pi], 3, b, &eb);
                CHECK_INT(na, N_GEN);
                CHECK_INT(na, nb);
                CHECK(na > 0 && !memcmp(a, b, sizeof(int32_t) * (size_t)na));
                CHECK_INT(ea.spec_drafts, 0);
                accepted += eb.spec_accepted;
                if (th == 1)
                    fprintf(stderr, "  %s %s %s: %lld rounds, %lld/%lld accepted\n", name,
                            mode == 0 ? "RAM" : mode == 1 ? "spill" : "quest 128", pi ? "free" : "copy",
                            (long long)eb.spec_drafts, (long long)eb.spec_accepted, (long long)eb.spec_drafted);
            }
    CHECK(accepted > 0);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

TEST(test_spec_trained_models) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", test_shared_dir());
    if (access(path, R_OK)) {
        test_skip("../shared/models/stories260K.gguf not found");
        return;
    }
    check_model("stories260K.gguf");
    check_model("tiny-long.gguf");
}

TEST_MAIN(test_spec_trained_models)
