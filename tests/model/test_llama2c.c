/* llama2.c checkpoints to GGUF (st_llama2c_convert_memory) on checkpoints made here: every
 * tensor lands where run.c reads it, the tokenizer's pieces, scores and byte tokens, the
 * shared and separate classifier, quantized output, and each malformed input's error. */
#include "strata/model.h"
#include "strata/quant.h"
#include "strata/tok.h"
#include "../test.h"

#include <math.h>

typedef struct shape { int32_t dim, hidden, n_layer, n_head, n_kv, vocab, seq; } shape;

static float value_at(size_t i) { return (float)((int)(i * 7919u % 2003u) - 1001) / 1024.0f; }

/* A legacy checkpoint: header, then float i of the body = value_at(i). vocab < 0: its own
 * classifier. */
static uint8_t *make_model(shape s, size_t *n, size_t *floats) {
    const size_t E = (size_t)s.dim, F = (size_t)s.hidden, L = (size_t)s.n_layer, V = (size_t)abs(s.vocab);
    const size_t hd = E / (size_t)s.n_head, KV = hd * (size_t)s.n_kv;
    size_t f = V * E + L * E + L * E * E + 2 * L * E * KV + L * E * E + L * E + 3 * L * F * E + E +
               2 * (size_t)s.seq * (hd / 2) + (s.vocab < 0 ? V * E : 0);
    *floats = f;
    *n = 28 + 4 * f;
    uint8_t *b = malloc(*n);
    memcpy(b, &s, 28);
    for (size_t i = 0; i < f; i++) {
        float v = value_at(i);
        memcpy(b + 28 + 4 * i, &v, 4);
    }
    return b;
}

/* tokenizer.bin for `vocab` tokens: specials, the 256 bytes spelled as `bytes_as` (0: raw,
 * 1: "<0xXX>", 2: Latin-1 in UTF-8), then " a", "b", " c d" .. with score -i. */
static uint8_t *make_tok(int32_t vocab, int bytes_as, size_t *n) {
    uint8_t *b = malloc(4 + (size_t)vocab * 24), *o = b + 4;
    int32_t max_len = 16;
    memcpy(b, &max_len, 4);
    for (int32_t i = 0; i < vocab; i++) {
        char piece[16];
        int32_t len;
        float score = (float)-i;
        if (i == 0) len = (int32_t)strlen(strcpy(piece, "<unk>"));
        else if (i == 1) len = (int32_t)strlen(strcpy(piece, "\n<s>\n"));
        else if (i == 2) len = (int32_t)strlen(strcpy(piece, "\n</s>\n"));
        else if (i < 259 && bytes_as == 0) piece[0] = (char)(i - 3), len = 1;
        else if (i < 259 && bytes_as == 1) len = snprintf(piece, sizeof piece, "<0x%02X>", i - 3);
        else if (i < 259 && i - 3 < 0x80) piece[0] = (char)(i - 3), len = 1;
        else if (i < 259) piece[0] = (char)(0xC0 | ((i - 3) >> 6)), piece[1] = (char)(0x80 | ((i - 3) & 0x3F)), len = 2;
        else if (i == 259) len = (int32_t)strlen(strcpy(piece, " a"));
        else if (i == 260) len = (int32_t)strlen(strcpy(piece, "b"));
        else len = snprintf(piece, sizeof piece, " c%d d", i);
        memcpy(o, &score, 4);
        memcpy(o + 4, &len, 4);
        memcpy(o + 8, piece, (size_t)len);
        o += 8 + len;
    }
    *n = (size_t)(o - b);
    return b;
}

static const shape small = {16, 24, 2, 4, 2, 262, 8};

static size_t img_size;

static int convert(st_ctx *ctx, shape s, int bytes_as, st_type type, st_gguf **g, void **img) {
    size_t mn, tn, fl, n = 0;
    uint8_t *m = make_model(s, &mn, &fl), *t = make_tok(abs(s.vocab), bytes_as, &tn);
    st_llama2c_params p = {.type = type, .name = "made"};
    *img = NULL;
    int rc = st_llama2c_convert_memory(ctx, m, mn, t, tn, &p, img, &n);
    free(m);
    free(t);
    img_size = n;
    if (!rc) rc = st_gguf_open_memory(ctx, *img, n, "converted", g);
    return rc;
}

/* Tensor `name` holds the checkpoint's floats from `off` on, as f32. */
static int holds(st_gguf *g, const char *name, size_t off, int64_t ne0, int64_t ne1) {
    const st_gguf_tensor *t = st_gguf_find_tensor(g, name);
    if (!t || t->type != ST_TYPE_F32 || t->ne[0] != ne0 || t->ne[1] != ne1) return 0;
    const float *d = t->data;
    for (int64_t i = 0; i < ne0 * ne1; i++)
        if (d[i] != value_at(off + (size_t)i)) return 0;
    return 1;
}

TEST(test_tensors_where_run_c_reads_them) {
    st_ctx *ctx = NULL;
    st_gguf *g = NULL;
    void *img = NULL;
    REQUIRE(st_ctx_create(NULL, &ctx) == 0);
    REQUIRE(convert(ctx, small, 0, ST_TYPE_F32, &g, &img) == 0);
    const size_t E = 16, F = 24, L = 2, V = 262, KV = 8; /* head 4, 2 KV heads */
    const size_t rms_att = V * E, wq = rms_att + L * E, wk = wq + L * E * E, wv = wk + L * E * KV,
                 wo = wv + L * E * KV, rms_ffn = wo + L * E * E, w1 = rms_ffn + L * E, w2 = w1 + L * F * E,
                 w3 = w2 + L * E * F, fin = w3 + L * F * E;
    CHECK_INT(st_gguf_n_tensors(g), 3 + 9 * 2);
    CHECK(holds(g, "token_embd.weight", 0, 16, 262));
    CHECK(holds(g, "output.weight", 0, 16, 262)); /* shared: the embedding */
    CHECK(holds(g, "output_norm.weight", fin, 16, 1));
    CHECK(holds(g, "blk.1.attn_norm.weight", rms_att + E, 16, 1));
    CHECK(holds(g, "blk.1.attn_q.weight", wq + E * E, 16, 16));
    CHECK(holds(g, "blk.0.attn_k.weight", wk, 16, 8));
    CHECK(holds(g, "blk.1.attn_v.weight", wv + E * KV, 16, 8));
    CHECK(holds(g, "blk.1.attn_output.weight", wo + E * E, 16, 16));
    CHECK(holds(g, "blk.1.ffn_norm.weight", rms_ffn + E, 16, 1));
    CHECK(holds(g, "blk.1.ffn_gate.weight", w1 + F * E, 16, 24));
    CHECK(holds(g, "blk.1.ffn_down.weight", w2 + E * F, 24, 16));
    CHECK(holds(g, "blk.1.ffn_up.weight", w3 + F * E, 16, 24));
    uint32_t u = 0;
    CHECK(st_gguf_get_u32(g, "llama.context_length", &u) == 0 && u == 8);
    CHECK(st_gguf_get_u32(g, "llama.attention.head_count_kv", &u) == 0 && u == 2);
    CHECK(st_gguf_get_u32(g, "llama.rope.dimension_count", &u) == 0 && u == 4);
    CHECK(st_gguf_get_u32(g, "llama.feed_forward_length", &u) == 0 && u == 24);
    const char *s;
    size_t sl;
    CHECK(st_gguf_get_str(g, "general.name", &s, &sl) == 0 && sl == 4 && !memcmp(s, "made", 4));
    /* the model loader takes it */
    st_model *m = NULL;
    REQUIRE(st_model_load_memory(ctx, img, img_size, "converted", &m) == 0);
    CHECK_INT(st_model_get_hparams(m)->n_head_kv, 2);
    CHECK_INT((long long)st_model_n_params(m), (long long)(2 * V * E + L * (2 * E * E + 2 * E * KV + 3 * E * F + 2 * E) + E));
    st_model_destroy(m);
    st_gguf_close(g);
    g = NULL;
    free(img);
    img = NULL;
    shape own = small;
    own.vocab = -262;
    REQUIRE(convert(ctx, own, 0, ST_TYPE_F32, &g, &img) == 0);
    const size_t wcls = fin + E + 2 * 8 * 2; /* after the RoPE tables (seq 8, head 4) */
    CHECK(holds(g, "output.weight", wcls, 16, 262));
    CHECK(holds(g, "token_embd.weight", 0, 16, 262));
    st_gguf_close(g);
    free(img);
    st_ctx_destroy(ctx);
}

TEST(test_tokenizer_pieces_and_bytes) {
    st_ctx *ctx = NULL;
    REQUIRE(st_ctx_create(NULL, &ctx) == 0);
    for (int as = 0; as < 3; as++) {
        st_gguf *g = NULL;
        void *img = NULL;
        REQUIRE(convert(ctx, small, as, ST_TYPE_F32, &g, &img) == 0);
        const char *s;
        size_t n;
        CHECK(st_gguf_get_arr_str(g, "tokenizer.ggml.tokens", 1, &s, &n) == 0 && n == 3 && !memcmp(s, "<s>", 3));
        CHECK(st_gguf_get_arr_str(g, "tokenizer.ggml.tokens", 3 + 0x41, &s, &n) == 0 && n == 6 &&
              !memcmp(s, "<0x41>", 6));
        CHECK(st_gguf_get_arr_str(g, "tokenizer.ggml.tokens", 3 + 0xE9, &s, &n) == 0 && n == 6 &&
              !memcmp(s, "<0xE9>", 6));
        CHECK(st_gguf_get_arr_str(g, "tokenizer.ggml.tokens", 259, &s, &n) == 0 && n == 4 &&
              !memcmp(s, "\xE2\x96\x81" "a", 4));
        st_gguf_vtype et;
        uint64_t cnt;
        const void *d;
        REQUIRE(st_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &cnt, &d) == 0 && cnt == 262);
        /* metadata arrays are not aligned in the file: copied out */
        int32_t ty[262];
        memcpy(ty, d, sizeof ty);
        CHECK(ty[0] == 2 && ty[1] == 3 && ty[2] == 3 && ty[3] == 6 && ty[258] == 6 && ty[259] == 1 && ty[261] == 1);
        REQUIRE(st_gguf_get_arr(g, "tokenizer.ggml.scores", &et, &cnt, &d) == 0 && cnt == 262);
        float sc;
        memcpy(&sc, (const char *)d + 260 * sizeof sc, sizeof sc);
        CHECK(sc == -260.0f);
        /* the tokenizer reads it: " a" + "b" is one piece each, a byte falls back to its token */
        st_tok *tok = NULL;
        REQUIRE(st_tok_load(ctx, g, NULL, &tok) == 0);
        int32_t ids[16];
        int k = 0;
        REQUIRE(st_tok_encode(tok, "ab!", 3, false, false, ids, 16, &k) == 0);
        CHECK_INT(k, 3);
        CHECK_INT(ids[0], 259);
        CHECK_INT(ids[1], 260);
        CHECK_INT(ids[2], 3 + '!');
        st_tok_destroy(tok);
        st_gguf_close(g);
        free(img);
    }
    st_ctx_destroy(ctx);
}

TEST(test_quantized_types) {
    st_ctx *ctx = NULL;
    REQUIRE(st_ctx_create(NULL, &ctx) == 0);
    shape s = small;
    s.dim = 64, s.hidden = 48, s.n_head = 4, s.n_kv = 4;
    st_gguf *g = NULL;
    void *img = NULL;
    REQUIRE(convert(ctx, s, 0, ST_TYPE_Q8_0, &g, &img) == 0);
    const st_gguf_tensor *t = st_gguf_find_tensor(g, "blk.0.attn_q.weight");
    CHECK(t && t->type == ST_TYPE_Q8_0);
    t = st_gguf_find_tensor(g, "blk.0.ffn_down.weight"); /* rows of 48: not a multiple of 32 */
    CHECK(t && t->type == ST_TYPE_F16);
    t = st_gguf_find_tensor(g, "blk.0.ffn_norm.weight");
    CHECK(t && t->type == ST_TYPE_F32);
    /* the quantized rows are the checkpoint's within q8_0's step */
    t = st_gguf_find_tensor(g, "output.weight");
    REQUIRE(t && t->type == ST_TYPE_Q8_0);
    float row[64];
    double worst = 0;
    for (int64_t r = 0; r < 262; r++) {
        REQUIRE(st_dequantize_row(ST_TYPE_Q8_0, (const uint8_t *)t->data + r * st_row_bytes(ST_TYPE_Q8_0, 64), row, 64) == 0);
        for (int i = 0; i < 64; i++) worst = fmax(worst, fabs(row[i] - value_at((size_t)r * 64 + (size_t)i)));
    }
    CHECK(worst < 1.0 / 127); /* values within [-1, 1): half a step of the largest scale */
    st_gguf_close(g);
    free(img);
    st_ctx_destroy(ctx);
}

static void expect_err(st_ctx *ctx, const uint8_t *m, size_t mn, const uint8_t *t, size_t tn, int want,
                       const char *needle) {
    st_llama2c_params p = {.type = ST_TYPE_F32};
    void *out = (void *)1;
    size_t n = 7;
    const int rc = st_llama2c_convert_memory(ctx, m, mn, t, tn, &p, &out, &n);
    CHECK_INT(rc, want);
    CHECK(out == NULL && n == 0);
    if (!strstr(st_ctx_error(ctx), needle)) {
        fprintf(stderr, "  message '%s' lacks '%s'\n", st_ctx_error(ctx), needle);
        CHECK(0);
    }
}

TEST(test_malformed_inputs_named) {
    st_ctx *ctx = NULL;
    REQUIRE(st_ctx_create(NULL, &ctx) == 0);
    size_t mn, tn, fl;
    uint8_t *m = make_model(small, &mn, &fl), *t = make_tok(262, 0, &tn);
    expect_err(ctx, m, 20, t, tn, ST_E_FORMAT, "shorter than a llama2.c header");
    expect_err(ctx, m, mn - 4, t, tn, ST_E_FORMAT, "truncated");
    expect_err(ctx, m, mn, t, tn - 3, ST_E_FORMAT, "token 261");
    uint8_t *m2 = malloc(mn + 64);
    memcpy(m2, m, mn);
    expect_err(ctx, m2, mn + 4, t, tn, ST_E_FORMAT, "truncated");
    uint8_t *t2 = malloc(tn + 8);
    memcpy(t2, t, tn);
    memset(t2 + tn, 0, 8);
    expect_err(ctx, m, mn, t2, tn + 8, ST_E_FORMAT, "after the model's 262 tokens");
    /* a model of fewer tokens than the tokenizer holds */
    shape s = small;
    s.vocab = 261;
    size_t mn3, fl3;
    uint8_t *m3 = make_model(s, &mn3, &fl3);
    expect_err(ctx, m3, mn3, t, tn, ST_E_FORMAT, "another vocabulary size");
    free(m3);
    int32_t h[7];
    memcpy(h, m, 28);
    const struct { int field; int32_t v; const char *needle; } bad[] = {
        {0, 18, "not a multiple of n_heads"}, {3, 0, "not a multiple of n_heads"}, {4, 3, "n_kv_heads"},
        {5, 2, "vocab_size"},                {6, 0, "seq_len"},                     {2, 0, "n_layers"},
        {0, 12, "odd"},                      {5, INT32_MIN, "vocab_size"},       {1, 0, "hidden_dim"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int32_t hb[7];
        memcpy(hb, h, 28);
        hb[bad[i].field] = bad[i].v;
        memcpy(m2, hb, 28);
        memcpy(m2 + 28, m + 28, mn - 28);
        expect_err(ctx, m2, mn, t, tn, ST_E_FORMAT, bad[i].needle);
    }
    /* a NaN in a layer's w3 (ffn_up), and an infinity in the final norm */
    memcpy(m2, m, mn);
    const float nan = NAN, inf = INFINITY;
    const size_t w3 = 262 * 16 + 2 * 16 + 2 * 16 * 16 * 2 + 2 * 16 * 8 * 2 + 2 * 16 + 2 * 2 * 24 * 16;
    memcpy(m2 + 28 + 4 * (w3 + 24 * 16 + 16 * 5 + 1), &nan, 4);
    expect_err(ctx, m2, mn, t, tn, ST_E_FORMAT, "blk.1.ffn_up.weight row 5 holds NaN");
    memcpy(m2, m, mn);
    memcpy(m2 + 28 + 4 * (w3 + 2 * 24 * 16 + 3), &inf, 4);
    expect_err(ctx, m2, mn, t, tn, ST_E_FORMAT, "output_norm.weight row 0 holds an infinity");
    const uint32_t v1[2] = {0x616b3432u, 1};
    memcpy(m2, v1, 8);
    expect_err(ctx, m2, mn, t, tn, ST_E_UNSUPPORTED, "version 1");
    /* a piece longer than max_token_length */
    memcpy(t2, t, tn);
    const int32_t huge = 1 << 20;
    memcpy(t2 + 4 + 4, &huge, 4);
    expect_err(ctx, m, mn, t2, tn, ST_E_FORMAT, "token 0 has length");
    free(m);
    free(m2);
    free(t);
    free(t2);
    st_ctx_destroy(ctx);
}

TEST_MAIN(test_tensors_where_run_c_reads_them, test_tokenizer_pieces_and_bytes, test_quantized_types,
          test_malformed_inputs_named)
