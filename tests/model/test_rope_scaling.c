/* Rope scaling as the loader reads it from GGUF metadata, on synthetic llama GGUFs written with
 * the project's writer and carrying <arch>.rope.scaling.* keys and a rope_freqs.weight tensor:
 * the hyper-parameters llama.cpp's loader would take (linear by default when only a factor is
 * given, the older rope.scale_linear key, factor 0 or 1 meaning none), and the files refused
 * with an error naming the key or tensor. */
#include "model/model_int.h"
#include "../test.h"

enum { KV_STR, KV_F32, KV_U32 };
typedef struct kv_edit {
    const char *key; /* without the "llama." prefix */
    int kind;
    const char *s;
    float f;
    uint32_t u;
} kv_edit;

#define N_ROT_HALF 8 /* the preset below: head dim 16, every dim rotated */

static st_synth_params small_llama(void) {
    st_synth_params p = st_synth_default_params();
    p.arch = ST_ARCH_LLAMA;
    p.n_layer = 1, p.n_embd = 64, p.n_head = 4, p.n_head_kv = 2, p.n_ff = 128, p.n_vocab = 260, p.n_ctx = 256;
    p.type = ST_TYPE_F32, p.embd_type = ST_TYPE_F32, p.seed = 11;
    return p;
}

/* A copy of GGUF image src with the edits added and, when n_freqs > 0, a rope_freqs.weight of
 * n_freqs f32 values (freqs). */
static int edited(st_ctx *ctx, const void *src, size_t n, const kv_edit *e, int n_e, const float *freqs,
                  int64_t n_freqs, void **out, size_t *out_n) {
    st_gguf *g = NULL;
    st_gguf_writer *w = NULL;
    int rc = st_gguf_open_memory(ctx, src, n, "src", &g);
    if (!rc) rc = st_gguf_writer_create(ctx, &w);
    for (int64_t i = 0; !rc && i < st_gguf_n_kv(g); i++) rc = st_gguf_writer_copy_kv(w, g, i);
    for (int i = 0; !rc && i < n_e; i++) {
        char key[128];
        snprintf(key, sizeof key, "llama.%s", e[i].key);
        rc = e[i].kind == KV_STR   ? st_gguf_writer_set_str(w, key, e[i].s)
             : e[i].kind == KV_F32 ? st_gguf_writer_set_f32(w, key, e[i].f)
                                   : st_gguf_writer_set_u32(w, key, e[i].u);
    }
    for (int64_t i = 0; !rc && i < st_gguf_n_tensors(g); i++) {
        const st_gguf_tensor *t = st_gguf_tensor_at(g, i);
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        rc = st_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, ne, t->data);
    }
    int64_t fne[4] = {n_freqs, 1, 1, 1};
    if (!rc && n_freqs > 0) rc = st_gguf_writer_add_tensor(w, "rope_freqs.weight", ST_TYPE_F32, 1, fne, freqs);
    if (!rc) rc = st_gguf_writer_write_memory(w, out, out_n);
    st_gguf_writer_destroy(w);
    st_gguf_close(g);
    return rc;
}

typedef struct fixture {
    st_ctx *ctx;
    void *base;
    size_t n_base;
    void *img;
    st_model *m;
} fixture;

static int fx_open(fixture *f) {
    memset(f, 0, sizeof *f);
    st_synth_params p = small_llama();
    int rc = st_ctx_create(NULL, &f->ctx);
    if (!rc) rc = st_synth_write_memory(f->ctx, &p, &f->base, &f->n_base);
    return rc;
}

/* Loads the base model with the edits; 0 or the loader's error (f->m set on success). */
static int fx_load(fixture *f, const kv_edit *e, int n_e, const float *freqs, int64_t n_freqs) {
    st_model_destroy(f->m), f->m = NULL;
    free(f->img), f->img = NULL;
    size_t n = 0;
    int rc = edited(f->ctx, f->base, f->n_base, e, n_e, freqs, n_freqs, &f->img, &n);
    if (rc) {
        fprintf(stderr, "  could not write the edited GGUF: %s\n", st_strerror(rc));
        return rc;
    }
    return st_model_load_memory(f->ctx, f->img, n, "edited", &f->m);
}

static void fx_close(fixture *f) {
    st_model_destroy(f->m);
    free(f->img);
    free(f->base);
    st_ctx_destroy(f->ctx);
}

#define N_(a) ((int)(sizeof(a) / sizeof(a)[0]))

/* A factor without a type is linear scaling (llama.cpp's default type), and rotates position
 * 4 by the angles unscaled rope gives position 1. */
TEST(test_factor_alone_is_linear) {
    fixture f;
    REQUIRE(fx_open(&f) == 0);
    const kv_edit e[] = {{"rope.scaling.factor", KV_F32, .f = 4.0f}};
    CHECK_OK(fx_load(&f, e, N_(e), NULL, 0));
    REQUIRE(f.m);
    const st_model_hparams *hp = st_model_get_hparams(f.m);
    CHECK_INT(hp->rope_scaling, ST_ROPE_SCALING_LINEAR);
    CHECK_NEAR(hp->rope_freq_scale, 0.25, 0);
    CHECK_NEAR(hp->yarn_ext_factor, 0, 0);
    st_model_hparams plain = *hp;
    plain.rope_scaling = ST_ROPE_SCALING_NONE, plain.rope_freq_scale = 1.0f;
    float a[N_ROT_HALF * 2], b[N_ROT_HALF * 2];
    st_rope_cache(hp, NULL, 4, a);
    st_rope_cache(&plain, NULL, 1, b);
    for (int i = 0; i < N_ROT_HALF * 2; i++) CHECK_NEAR(a[i], b[i], 1e-6);
    fx_close(&f);
}

/* The older key, the "no scaling" spellings, and what llama.cpp does with each. */
TEST(test_linear_variants) {
    fixture f;
    REQUIRE(fx_open(&f) == 0);
    struct {
        kv_edit e[2];
        int n;
        st_rope_scaling type;
        float scale;
    } cases[] = {
        {{{"rope.scale_linear", KV_F32, .f = 2.0f}}, 1, ST_ROPE_SCALING_LINEAR, 0.5f},
        {{{"rope.scaling.type", KV_STR, .s = "linear"}, {"rope.scaling.factor", KV_F32, .f = 8.0f}}, 2,
         ST_ROPE_SCALING_LINEAR, 0.125f},
        {{{"rope.scaling.factor", KV_F32, .f = 1.0f}}, 1, ST_ROPE_SCALING_NONE, 1.0f},
        {{{"rope.scaling.type", KV_STR, .s = "linear"}}, 1, ST_ROPE_SCALING_NONE, 1.0f},
        {{{"rope.scaling.type", KV_STR, .s = "none"}, {"rope.scaling.factor", KV_F32, .f = 4.0f}}, 2,
         ST_ROPE_SCALING_NONE, 1.0f},
        /* a factor key of 0 is read (no scaling); the older key is consulted only without it */
        {{{"rope.scaling.factor", KV_F32, .f = 0.0f}, {"rope.scale_linear", KV_F32, .f = 2.0f}}, 2,
         ST_ROPE_SCALING_NONE, 1.0f},
        {{{"rope.freq_base", KV_F32, .f = 10000.0f}}, 1, ST_ROPE_SCALING_NONE, 1.0f},
    };
    for (int i = 0; i < N_(cases); i++) {
        CHECK_OK(fx_load(&f, cases[i].e, cases[i].n, NULL, 0));
        if (!f.m) continue;
        const st_model_hparams *hp = st_model_get_hparams(f.m);
        if ((int)hp->rope_scaling != (int)cases[i].type || hp->rope_freq_scale != cases[i].scale)
            fprintf(stderr, "  case %d (%s)\n", i, cases[i].e[0].key);
        CHECK_INT(hp->rope_scaling, cases[i].type);
        CHECK_NEAR(hp->rope_freq_scale, cases[i].scale, 0);
        CHECK_INT(hp->rope_n_ctx_orig, 256); /* the training context when not given */
    }
    fx_close(&f);
}

TEST(test_yarn_params) {
    fixture f;
    REQUIRE(fx_open(&f) == 0);
    const kv_edit e[] = {
        {"rope.scaling.type", KV_STR, .s = "yarn"},
        {"rope.scaling.factor", KV_F32, .f = 8.0f},
        {"rope.scaling.original_context_length", KV_U32, .u = 64},
        {"rope.scaling.attn_factor", KV_F32, .f = 1.5f},
        {"rope.scaling.yarn_beta_fast", KV_F32, .f = 16.0f},
        {"rope.scaling.yarn_beta_slow", KV_F32, .f = 2.0f},
    };
    CHECK_OK(fx_load(&f, e, N_(e), NULL, 0));
    REQUIRE(f.m);
    const st_model_hparams *hp = st_model_get_hparams(f.m);
    CHECK_INT(hp->rope_scaling, ST_ROPE_SCALING_YARN);
    CHECK_NEAR(hp->rope_freq_scale, 0.125, 0);
    CHECK_INT(hp->rope_n_ctx_orig, 64);
    CHECK_NEAR(hp->yarn_ext_factor, 1, 0); /* llama.cpp's default for yarn */
    CHECK_NEAR(hp->yarn_attn_factor, 1.5, 0);
    CHECK_NEAR(hp->yarn_beta_fast, 16, 0);
    CHECK_NEAR(hp->yarn_beta_slow, 2, 0);
    const kv_edit e2[] = {e[0], e[1], {"rope.scaling.yarn_ext_factor", KV_F32, .f = 0.5f}};
    CHECK_OK(fx_load(&f, e2, N_(e2), NULL, 0));
    REQUIRE(f.m);
    hp = st_model_get_hparams(f.m);
    CHECK_NEAR(hp->yarn_ext_factor, 0.5, 0);
    CHECK_NEAR(hp->yarn_attn_factor, 1, 0);
    CHECK_NEAR(hp->yarn_beta_fast, 32, 0);
    CHECK_NEAR(hp->yarn_beta_slow, 1, 0);
    CHECK_INT(hp->rope_n_ctx_orig, 256);
    fx_close(&f);
}

/* A rope_freqs tensor is llama3 scaling with or without the type key; its values are the
 * model's per-pair theta divisors. */
TEST(test_llama3_freq_factors) {
    fixture f;
    REQUIRE(fx_open(&f) == 0);
    float ff[N_ROT_HALF];
    for (int i = 0; i < N_ROT_HALF; i++) ff[i] = 1.0f + 0.5f * (float)i;
    const kv_edit typed[] = {{"rope.scaling.type", KV_STR, .s = "llama3"}};
    for (int with_type = 0; with_type < 2; with_type++) {
        CHECK_OK(fx_load(&f, typed, with_type, ff, N_ROT_HALF));
        if (!f.m) continue;
        const st_model_hparams *hp = st_model_get_hparams(f.m);
        CHECK_INT(hp->rope_scaling, ST_ROPE_SCALING_LLAMA3);
        CHECK_NEAR(hp->rope_freq_scale, 1, 0);
        REQUIRE(f.m->rope_freqs.data);
        CHECK_INT(f.m->rope_freqs.ne0, N_ROT_HALF);
        CHECK(memcmp(f.m->rope_freqs.data, ff, sizeof ff) == 0);
    }
    fx_close(&f);
}

TEST(test_rejections) {
    fixture f;
    REQUIRE(fx_open(&f) == 0);
    float ff[N_ROT_HALF + 1], zero[N_ROT_HALF];
    for (int i = 0; i <= N_ROT_HALF; i++) ff[i] = 1.0f;
    for (int i = 0; i < N_ROT_HALF; i++) zero[i] = i == 3 ? 0.0f : 1.0f;
    struct {
        kv_edit e;
        const float *freqs;
        int64_t n_freqs;
        int code;
        const char *needle;
    } cases[] = {
        {{"rope.scaling.type", KV_STR, .s = "llama3"}, NULL, 0, ST_E_NOT_FOUND, "rope_freqs.weight"},
        {{"rope.scaling.type", KV_STR, .s = "llama3"}, ff, N_ROT_HALF + 1, ST_E_FORMAT, "rope_freqs.weight"},
        {{"rope.freq_base", KV_F32, .f = 10000.0f}, ff, N_ROT_HALF - 1, ST_E_FORMAT, "rope_freqs.weight"},
        {{"rope.freq_base", KV_F32, .f = 10000.0f}, zero, N_ROT_HALF, ST_E_FORMAT, "rope_freqs.weight[3]"},
        {{"rope.scaling.type", KV_STR, .s = "yarn"}, NULL, 0, ST_E_FORMAT, "llama.rope.scaling.factor"},
        {{"rope.scaling.type", KV_STR, .s = "dynamic"}, NULL, 0, ST_E_UNSUPPORTED, "llama.rope.scaling.type"},
        {{"rope.scaling.factor", KV_F32, .f = -2.0f}, NULL, 0, ST_E_FORMAT, "llama.rope.scaling.factor"},
        {{"rope.scale_linear", KV_F32, .f = -2.0f}, NULL, 0, ST_E_FORMAT, "llama.rope.scale_linear"},
    };
    for (int i = 0; i < N_(cases); i++) {
        int rc = fx_load(&f, &cases[i].e, 1, cases[i].freqs, cases[i].n_freqs);
        CHECK_INT(rc, cases[i].code);
        CHECK(f.m == NULL);
        const char *msg = st_ctx_error(f.ctx);
        if (!strstr(msg, cases[i].needle)) fprintf(stderr, "  case %d: '%s' lacks '%s'\n", i, msg, cases[i].needle);
        CHECK(strstr(msg, cases[i].needle) != NULL);
        fprintf(stderr, "  rejected: %s\n", msg);
    }
    fx_close(&f);
}

TEST_MAIN(test_factor_alone_is_linear, test_linear_variants, test_yarn_params, test_llama3_freq_factors,
          test_rejections)
