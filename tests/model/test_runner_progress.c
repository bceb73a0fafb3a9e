/* The runner's per-layer prefill reports (st_runner_set_progress), which move the CLI's
 * progress bar within a chunk: one report per layer of each multi-token chunk, counting
 * token-layers up to the call's total; none for decode steps; none once detached. */
#include "strata/model.h"
#include "../test.h"

typedef struct rec {
    int n;
    int64_t done[64], total[64];
} rec;

static void on_progress(void *user, int64_t done, int64_t total) {
    rec *r = user;
    if (r->n < 64) r->done[r->n] = done, r->total[r->n] = total;
    r->n++;
}

TEST(test_progress_per_layer) {
    st_ctx *ctx = NULL;
    REQUIRE(st_ctx_create(NULL, &ctx) == 0);
    st_synth_params p = st_synth_default_params();
    p.n_layer = 3, p.n_embd = 64, p.n_head = 4, p.n_head_kv = 2, p.n_ff = 128, p.n_vocab = 260, p.n_ctx = 512;
    p.type = ST_TYPE_F32, p.embd_type = ST_TYPE_F32;
    void *buf = NULL;
    size_t n = 0;
    st_model *m = NULL;
    REQUIRE(st_synth_write_memory(ctx, &p, &buf, &n) == 0);
    REQUIRE(st_model_load_memory(ctx, buf, n, "synthetic", &m) == 0);
    st_kv_params kp = st_kv_default_params();
    kp.n_layer = 3, kp.n_kv_head = 2, kp.head_dim = 16, kp.n_pages = 128;
    st_kv *kv = NULL;
    REQUIRE(st_kv_create(ctx, &kp, &kv) == 0);
    st_runner_params rp = st_runner_default_params();
    rp.n_batch = 128;
    st_runner *r = NULL;
    REQUIRE(st_runner_create(ctx, m, kv, &rp, &r) == 0);
    int32_t tok[300];
    for (int i = 0; i < 300; i++) tok[i] = (i * 37 + 5) % 260;
    float *lg = malloc(2 * 260 * sizeof(float));
    rec rc = {0};
    st_runner_set_progress(r, on_progress, &rc);

    /* 300 tokens in chunks of 128, 128, 44: 3 layers each, 900 token-layers */
    st_kv_seq_id a, b;
    REQUIRE(st_kv_seq_create(kv, &a) == 0);
    st_batch pb = {.n_tokens = 300, .tokens = tok, .seq_single = a};
    CHECK_OK(st_runner_forward(r, &pb, lg));
    CHECK_INT(rc.n, 9);
    const int64_t want[9] = {128, 256, 384, 512, 640, 768, 812, 856, 900};
    for (int i = 0; i < 9 && i < rc.n; i++) {
        CHECK_INT(rc.done[i], want[i]);
        CHECK_INT(rc.total[i], 900);
    }

    /* a decode step reports nothing; a batch of a 10-token run and a decode token counts the run only */
    rc.n = 0;
    st_batch d = {.n_tokens = 1, .tokens = tok, .seq_single = a};
    CHECK_OK(st_runner_forward(r, &d, lg));
    CHECK_INT(rc.n, 0);
    REQUIRE(st_kv_seq_create(kv, &b) == 0);
    st_kv_seq_id seqs[11] = {b, b, b, b, b, b, b, b, b, b, a};
    st_batch mix = {.n_tokens = 11, .tokens = tok, .seq = seqs};
    CHECK_OK(st_runner_forward(r, &mix, lg));
    CHECK_INT(rc.n, 3);
    CHECK_INT(rc.done[rc.n > 0 ? rc.n - 1 : 0], 30);
    CHECK_INT(rc.total[0], 30);

    /* detached: silent */
    rc.n = 0;
    st_runner_set_progress(r, NULL, NULL);
    st_batch more = {.n_tokens = 20, .tokens = tok, .seq_single = b};
    CHECK_OK(st_runner_forward(r, &more, lg));
    CHECK_INT(rc.n, 0);

    free(lg);
    st_runner_destroy(r);
    st_kv_destroy(kv);
    st_model_destroy(m);
    free(buf);
    st_ctx_destroy(ctx);
}

TEST_MAIN(test_progress_per_layer)
