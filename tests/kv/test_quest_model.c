/* Quest on ../shared/models/stories260K.gguf (label `model`): the exactness gate on a real
 * model — greedy decode with a budget covering the context (every layer sparse, so every
 * step goes through the selection path) emits exactly the dense token stream — and a small
 * budget really attends fewer pages and still captures most of the softmax mass. */
#include "strata/model.h"
#include "strata/quest.h"
#include "strata/tok.h"
#include "../test.h"

#include <unistd.h>

#define N_GEN 200

/* Greedy tokens after "Once upon a time" with Quest params qp (NULL: dense). */
static int greedy(const char *path, const st_kv_quest_params *qp, int32_t audit, int32_t *out,
                  st_runner_quest_stats *qs) {
    st_ctx *ctx = NULL;
    st_model *m = NULL;
    st_tok *tok = NULL;
    st_kv *kv = NULL;
    st_runner *r = NULL;
    int32_t *ids = NULL;
    int n_ids = 0, rc;
    float *lg = NULL;
    if ((rc = st_ctx_create(NULL, &ctx)) || (rc = st_model_load(ctx, path, NULL, &m)) ||
        (rc = st_tok_load(ctx, st_model_gguf(m), NULL, &tok)))
        goto out;
    const st_model_hparams *hp = st_model_get_hparams(m);
    st_kv_params kp = st_kv_default_params();
    kp.n_layer = hp->n_layer, kp.n_kv_head = hp->n_head_kv, kp.head_dim = hp->head_dim;
    kp.n_pages = 64;
    if ((rc = st_kv_create(ctx, &kp, &kv)) || (rc = st_runner_create(ctx, m, kv, NULL, &r))) goto out;
    if (qp && (rc = st_runner_set_quest(r, qp, audit))) goto out;
    const char *prompt = "Once upon a time";
    if ((rc = st_tok_encode_alloc(tok, prompt, strlen(prompt), true, true, &ids, &n_ids))) goto out;
    lg = malloc((size_t)hp->n_vocab * sizeof *lg);
    st_kv_seq_id s;
    if ((rc = st_kv_seq_create(kv, &s))) goto out;
    st_batch b = {.n_tokens = n_ids, .tokens = ids, .seq_single = s};
    rc = st_runner_forward(r, &b, lg);
    for (int i = 0; i < N_GEN && !rc; i++) {
        int32_t t = 0;
        for (int j = 1; j < hp->n_vocab; j++)
            if (lg[j] > lg[t]) t = j;
        out[i] = t;
        st_batch d = {.n_tokens = 1, .tokens = &t, .seq_single = s};
        rc = st_runner_forward(r, &d, lg);
    }
    if (qs) st_runner_get_quest_stats(r, qs);
out:
    if (rc) fprintf(stderr, "  greedy: %s (%s)\n", st_strerror(rc), ctx ? st_ctx_error(ctx) : "");
    free(lg);
    free(ids);
    st_runner_destroy(r);
    st_kv_destroy(kv);
    st_tok_destroy(tok);
    st_model_destroy(m);
    st_ctx_destroy(ctx);
    return rc;
}

TEST(test_quest_exactness_gate_stories) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", test_shared_dir());
    if (access(path, R_OK) != 0) {
        test_skip("../shared/models/stories260K.gguf not found");
        return;
    }
    int32_t dense[N_GEN], full[N_GEN], small[N_GEN];
    st_runner_quest_stats fs, ss;
    CHECK_OK(greedy(path, NULL, 0, dense, NULL));
    st_kv_quest_params qp = st_kv_quest_default_params();
    qp.budget = 1024; /* covers the whole context */
    qp.dense_layers = 0;
    CHECK_OK(greedy(path, &qp, 16, full, &fs));
    int first_diff = -1;
    for (int i = 0; i < N_GEN && first_diff < 0; i++)
        if (dense[i] != full[i]) first_diff = i;
    CHECK_INT(first_diff, -1);
    CHECK(fs.steps == N_GEN && fs.selects > 0 && fs.pages_listed == fs.pages_total);
    CHECK(fs.audits > 0 && fs.mass_min == 1.0);
    /* 4 pages of 16: fewer pages, most of the mass */
    qp.budget = 64;
    qp.dense_layers = -1;
    CHECK_OK(greedy(path, &qp, 4, small, &ss));
    CHECK(ss.pages_listed < ss.pages_total);
    CHECK(ss.audits > 0 && ss.mass_mean > 0.5 && ss.mass_mean < 1.0);
    CHECK(ss.mass_min >= 0 && ss.mass_min <= ss.mass_mean);
}

TEST_MAIN(test_quest_exactness_gate_stories)
