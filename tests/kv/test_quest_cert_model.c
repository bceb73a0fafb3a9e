/* Certified sparse decode on real models (label `model`): over thousands of audited
 * (decode step, layer, query head) samples on stories260K, on tiny-long (skipped when
 * absent) and on a random-weight synthetic model, the true skipped softmax mass never exceeds
 * the reported bound, some samples really left pages out, and every bound meets epsilon;
 * epsilon 0 is bit-identical (logits and tokens) to dense decode. */
#include "strata/model.h"
#include "strata/quest.h"
#include "strata/tok.h"
#include "../test.h"

#include <unistd.h>

typedef struct gen_out {
    int32_t *tokens;  /* [n_gen] */
    float *logits;    /* [n_gen][n_vocab] */
    st_runner_quest_stats qs;
} gen_out;

/* Greedy decode of n_gen tokens after prompt[n_prompt] on model m with KV pages of P tokens
 * and Quest params qp (NULL: dense), audit every `audit` steps. */
static int gen(st_ctx *ctx, st_model *m, const int32_t *prompt, int n_prompt, int n_gen, int P,
               const st_kv_quest_params *qp, int audit, gen_out *o) {
    const st_model_hparams *hp = st_model_get_hparams(m);
    st_kv_params kp = st_kv_default_params();
    kp.n_layer = hp->n_layer, kp.n_kv_head = hp->n_head_kv, kp.head_dim = hp->head_dim;
    kp.page_size = P;
    kp.n_pages = (n_prompt + n_gen) / P + 8;
    st_kv *kv = NULL;
    st_runner *r = NULL;
    float *lg = malloc((size_t)hp->n_vocab * sizeof *lg);
    int rc = lg ? 0 : ST_E_NOMEM;
    if (!rc) rc = st_kv_create(ctx, &kp, &kv);
    if (!rc) rc = st_runner_create(ctx, m, kv, NULL, &r);
    if (!rc && qp) rc = st_runner_set_quest(r, qp, audit);
    st_kv_seq_id s = -1;
    if (!rc) rc = st_kv_seq_create(kv, &s);
    st_batch b = {.n_tokens = n_prompt, .tokens = prompt, .seq_single = s};
    if (!rc) rc = st_runner_forward(r, &b, lg);
    for (int i = 0; i < n_gen && !rc; i++) {
        int32_t t = 0;
        for (int j = 1; j < hp->n_vocab; j++)
            if (lg[j] > lg[t]) t = j;
        o->tokens[i] = t;
        st_batch d = {.n_tokens = 1, .tokens = &t, .seq_single = s};
        rc = st_runner_forward(r, &d, lg);
        if (!rc && o->logits) memcpy(o->logits + (size_t)i * hp->n_vocab, lg, (size_t)hp->n_vocab * sizeof *lg);
    }
    if (r) st_runner_get_quest_stats(r, &o->qs);
    if (rc) fprintf(stderr, "  gen: %s (%s)\n", st_strerror(rc), st_ctx_error(ctx));
    free(lg);
    st_runner_destroy(r);
    st_kv_destroy(kv);
    return rc;
}

static void print_stats(const char *what, const st_runner_quest_stats *s) {
    printf("  %s: %lld steps, %.1f%% of pages, bound max %.3g mean %.3g, %lld pages added; audit %lld samples "
           "(%lld skipping), true skipped max %.3g, %lld violations\n",
           what, (long long)s->steps, s->pages_total ? 100.0 * (double)s->pages_listed / (double)s->pages_total : 100.0,
           s->bound_max, s->bound_mean, (long long)s->pages_grown, (long long)s->cert_audits,
           (long long)s->cert_audits_skipping, s->skip_max, (long long)s->cert_violations);
}

/* Certified run at eps from budget: 0 violations, samples >= min_samples, some skipping. */
static void check_certified(st_ctx *ctx, st_model *m, const int32_t *prompt, int n_prompt, int n_gen, int P,
                            int64_t budget, double eps, int64_t min_samples, const char *what) {
    st_kv_quest_params qp = st_kv_quest_default_params();
    qp.budget = budget;
    qp.dense_layers = 0;
    qp.certify = 1;
    qp.epsilon = eps;
    qp.cert_dense_frac = 1; /* grow to the end: the bound is checked on selections that skip */
    gen_out o = {.tokens = malloc((size_t)n_gen * sizeof(int32_t))};
    CHECK_OK(gen(ctx, m, prompt, n_prompt, n_gen, P, &qp, 1, &o));
    print_stats(what, &o.qs);
    CHECK_INT(o.qs.cert_violations, 0);
    CHECK(o.qs.cert_audits >= min_samples);
    CHECK(o.qs.cert_audits_skipping > 0);
    CHECK(o.qs.bound_max <= eps);
    CHECK(o.qs.skip_max <= eps);
    CHECK(o.qs.pages_listed < o.qs.pages_total); /* something was left out */
    free(o.tokens);
}

/* eps 0 against dense: the same tokens and bit-identical logits at every step. */
static void check_eps0(st_ctx *ctx, st_model *m, const int32_t *prompt, int n_prompt, int n_gen, int P) {
    const int32_t nv = st_model_get_hparams(m)->n_vocab;
    gen_out d = {.tokens = malloc((size_t)n_gen * sizeof(int32_t)),
                 .logits = malloc((size_t)n_gen * nv * sizeof(float))};
    gen_out z = {.tokens = malloc((size_t)n_gen * sizeof(int32_t)),
                 .logits = malloc((size_t)n_gen * nv * sizeof(float))};
    CHECK_OK(gen(ctx, m, prompt, n_prompt, n_gen, P, NULL, 0, &d));
    st_kv_quest_params qp = st_kv_quest_default_params();
    qp.budget = 2 * P; /* would be sparse without the certificate */
    qp.dense_layers = 0;
    qp.certify = 1;
    qp.epsilon = 0;
    CHECK_OK(gen(ctx, m, prompt, n_prompt, n_gen, P, &qp, 0, &z));
    CHECK(memcmp(d.tokens, z.tokens, (size_t)n_gen * sizeof(int32_t)) == 0);
    CHECK(memcmp(d.logits, z.logits, (size_t)n_gen * nv * sizeof(float)) == 0);
    CHECK(z.qs.cert_selects > 0 && z.qs.pages_listed == z.qs.pages_total && z.qs.bound_max == 0);
    free(d.tokens), free(d.logits), free(z.tokens), free(z.logits);
}

static int load(st_ctx *ctx, const char *name, st_model **m) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/%s", test_shared_dir(), name);
    if (access(path, R_OK) != 0) return 1;
    return st_model_load(ctx, path, NULL, m) ? -1 : 0;
}

TEST(test_cert_stories) {
    st_ctx *ctx = NULL;
    st_model *m = NULL;
    st_tok *tok = NULL;
    REQUIRE(st_ctx_create(NULL, &ctx) == 0);
    int rc = load(ctx, "stories260K.gguf", &m);
    if (rc) {
        if (rc > 0) test_skip("stories260K.gguf not found");
        else CHECK(0);
        st_ctx_destroy(ctx);
        return;
    }
    CHECK_OK(st_tok_load(ctx, st_model_gguf(m), NULL, &tok));
    int32_t *ids = NULL;
    int n_ids = 0;
    const char *prompt = "Once upon a time";
    CHECK_OK(st_tok_encode_alloc(tok, prompt, strlen(prompt), true, true, &ids, &n_ids));
    check_eps0(ctx, m, ids, n_ids, 100, 8);
    check_certified(ctx, m, ids, n_ids, 200, 8, 32, 1e-3, 2000, "stories260K eps 1e-3");
    check_certified(ctx, m, ids, n_ids, 200, 8, 0, 0.1, 2000, "stories260K eps 0.1");
    free(ids);
    st_tok_destroy(tok);
    st_model_destroy(m);
    st_ctx_destroy(ctx);
}

TEST(test_cert_tiny_long) {
    st_ctx *ctx = NULL;
    st_model *m = NULL;
    REQUIRE(st_ctx_create(NULL, &ctx) == 0);
    int rc = load(ctx, "tiny-long.gguf", &m);
    if (rc) {
        if (rc > 0) test_skip("tiny-long.gguf not found");
        else CHECK(0);
        st_ctx_destroy(ctx);
        return;
    }
    /* C source (what it was trained on): the first bytes of the KV pool's design essay */
    enum { N_BYTES = 2000, N_GEN = 64 };
    char path[1024], text[N_BYTES + 1];
    snprintf(path, sizeof path, "%s", __FILE__);
    char *slash = strrchr(path, '/');
    REQUIRE(slash != NULL);
    snprintf(slash, sizeof path - (size_t)(slash - path), "/../../src/kv/kv_pool.c");
    FILE *fp = fopen(path, "rb");
    REQUIRE(fp != NULL);
    const size_t nb = fread(text, 1, N_BYTES, fp);
    fclose(fp);
    text[nb] = 0;
    st_tok *tok = NULL;
    int32_t *prompt = NULL;
    int N_PROMPT = 0;
    CHECK_OK(st_tok_load(ctx, st_model_gguf(m), NULL, &tok));
    CHECK_OK(st_tok_encode_alloc(tok, text, nb, true, true, &prompt, &N_PROMPT));
    REQUIRE(N_PROMPT > 1000);
    check_eps0(ctx, m, prompt, N_PROMPT, 16, 16);
    /* its 64-dim page boxes are loose (quest.h): a tight epsilon attends nearly every page */
    check_certified(ctx, m, prompt, N_PROMPT, N_GEN, 16, 256, 0.5, 1000, "tiny-long eps 0.5");
    free(prompt);
    st_tok_destroy(tok);
    st_model_destroy(m);
    st_ctx_destroy(ctx);
}

TEST(test_cert_random_weights) {
    st_ctx *ctx = NULL;
    st_model *m = NULL;
    void *buf = NULL;
    size_t size = 0;
    REQUIRE(st_ctx_create(NULL, &ctx) == 0);
    st_synth_params p = st_synth_default_params();
    REQUIRE(st_synth_preset("tiny", &p) == 0);
    p.n_vocab = 300, p.n_ctx = 1024, p.seed = 3;
    p.embd_type = ST_TYPE_F32;
    CHECK_OK(st_synth_parse_type("f32", &p));
    CHECK_OK(st_synth_write_memory(ctx, &p, &buf, &size));
    CHECK_OK(st_model_load_memory(ctx, buf, size, "synthetic", &m));
    REQUIRE(m != NULL);
    enum { N_PROMPT = 400, N_GEN = 160 };
    int32_t prompt[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) prompt[i] = 3 + (i * 37 + i / 7) % 290;
    check_eps0(ctx, m, prompt, N_PROMPT, 32, 8);
    /* random weights attend almost uniformly: only a loose epsilon leaves pages out */
    check_certified(ctx, m, prompt, N_PROMPT, N_GEN, 8, 64, 0.5, 1000, "random weights eps 0.5");
    st_model_destroy(m);
    free(buf);
    st_ctx_destroy(ctx);
}

TEST_MAIN(test_cert_stories, test_cert_tiny_long, test_cert_random_weights)
