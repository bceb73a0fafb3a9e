/* The loader's corpus of malformed models: tiny synthetic models (llama, qwen2, qwen3) with
 * one thing wrong each (a hyper-parameter out of range or of the wrong type, a missing or
 * mis-shaped tensor, a broken rope-scaling setup, a tokenizer array that disagrees with the
 * vocabulary...), loaded as `strata run` loads a file (model_edit.h: model, tokenizer, KV
 * cache, runner). Each must be refused with the expected error code and a message that
 * names the file and the key or tensor at fault; nothing may stay allocated (ASan build).
 * A few edits that are valid must load and generate. fuzz/model_fuzz.c throws random edits
 * of the same kinds at the same load. CORPUS_VERBOSE=1 prints every refusal message.
 */
#include "../test.h"
#include "model/model_edit.h"

#define FILE_NAME "corpus.gguf"

typedef struct mcase {
    const char *what;
    st_arch arch;
    model_edit e[3];
    int n_e;
    int code;           /* 0: must load and generate */
    const char *needle; /* in the error message */
} mcase;

static model_edit u32_(const char *key, uint32_t v) {
    model_edit e = {.op = ME_SET_SCALAR, .vt = ST_GGUF_UINT32};
    snprintf(e.key, sizeof e.key, "%s", key);
    memcpy(e.val, &v, 4);
    return e;
}

static model_edit f32_(const char *key, float v) {
    model_edit e = {.op = ME_SET_SCALAR, .vt = ST_GGUF_FLOAT32};
    snprintf(e.key, sizeof e.key, "%s", key);
    memcpy(e.val, &v, 4);
    return e;
}

static model_edit bool_(const char *key, int v) {
    model_edit e = {.op = ME_SET_SCALAR, .vt = ST_GGUF_BOOL};
    snprintf(e.key, sizeof e.key, "%s", key);
    e.val[0] = (uint8_t)v;
    return e;
}

static model_edit str_(const char *key, const char *s) {
    model_edit e = {.op = ME_SET_STR, .str = s};
    snprintf(e.key, sizeof e.key, "%s", key);
    return e;
}

static model_edit arr_(const char *key, st_gguf_vtype et, uint64_t n, uint8_t byte) {
    model_edit e = {.op = ME_SET_ARR, .et = et, .n = n};
    snprintf(e.key, sizeof e.key, "%s", key);
    memset(e.val, byte, sizeof e.val);
    return e;
}

static model_edit op_(me_op op, const char *name) {
    model_edit e = {.op = op};
    snprintf(e.key, sizeof e.key, "%s", name);
    return e;
}

static model_edit shape_(const char *name, int nd, int64_t a, int64_t b, int64_t c) {
    model_edit e = op_(ME_SHAPE, name);
    e.n_dims = nd, e.ne[0] = a, e.ne[1] = b, e.ne[2] = c, e.ne[3] = 1;
    return e;
}

static model_edit type_(const char *name, st_type t) {
    model_edit e = op_(ME_TYPE, name);
    e.type = t;
    return e;
}

static model_edit add_(const char *name, int64_t n, float fill) {
    model_edit e = op_(ME_ADD, name);
    e.type = ST_TYPE_F32, e.n_dims = 1, e.ne[0] = n, e.ne[1] = e.ne[2] = e.ne[3] = 1, e.fill = fill;
    return e;
}

#define C1(w, a, e1, c, nd) {w, a, {e1}, 1, c, nd}
#define C2(w, a, e1, e2, c, nd) {w, a, {e1, e2}, 2, c, nd}
#define C3(w, a, e1, e2, e3, c, nd) {w, a, {e1, e2, e3}, 3, c, nd}

static int n_cases(mcase *c) {
    const st_arch L = ST_ARCH_LLAMA, Q2 = ST_ARCH_QWEN2, Q3 = ST_ARCH_QWEN3;
    const float nan = nanf("");
    /* the tiny preset: 2 layers, 64 dim, 4/2 heads (head dim 16), ff 128, vocab 259, ctx 256 */
    mcase all[] = {
        /* hyper-parameters */
        C1("block_count 0", L, u32_("@.block_count", 0), ST_E_FORMAT, "llama.block_count = 0"),
        C1("block_count over the limit", L, u32_("@.block_count", 5000), ST_E_LIMIT, "block_count"),
        C1("block_count past the layers in the file", L, u32_("@.block_count", 3), ST_E_NOT_FOUND,
           "blk.2.attn_norm.weight"),
        C1("block_count a string", L, str_("@.block_count", "2"), ST_E_TYPE, "llama.block_count"),
        C1("block_count missing", L, op_(ME_DEL, "@.block_count"), ST_E_NOT_FOUND, "llama.block_count"),
        C1("head_count 0", L, u32_("@.attention.head_count", 0), ST_E_FORMAT, "head_count"),
        C1("head_count not dividing the width", L, u32_("@.attention.head_count", 3), ST_E_FORMAT, "head_count 3"),
        C1("head_count_kv not dividing head_count", L, u32_("@.attention.head_count_kv", 3), ST_E_FORMAT,
           "head_count_kv 3"),
        C1("head_count_kv over head_count", L, u32_("@.attention.head_count_kv", 8), ST_E_FORMAT, "head_count_kv 8"),
        C1("embedding_length unlike the tensors", L, u32_("@.embedding_length", 128), ST_E_FORMAT,
           "token_embd.weight"),
        C1("feed_forward_length missing", L, op_(ME_DEL, "@.feed_forward_length"), ST_E_NOT_FOUND,
           "llama.feed_forward_length"),
        C1("feed_forward_length unlike the tensors", L, u32_("@.feed_forward_length", 96), ST_E_FORMAT,
           "blk.0.ffn_gate.weight"),
        C1("context_length 0", L, u32_("@.context_length", 0), ST_E_FORMAT, "context_length"),
        C2("key_length unlike value_length", L, u32_("@.attention.key_length", 16),
           u32_("@.attention.value_length", 32), ST_E_UNSUPPORTED, "value_length"),
        C1("key_length unlike the tensors", L, u32_("@.attention.key_length", 32), ST_E_FORMAT,
           "blk.0.attn_q.weight"),
        C1("rope dimension odd", L, u32_("@.rope.dimension_count", 15), ST_E_FORMAT, "rope.dimension_count 15"),
        C1("rope dimension over the head", L, u32_("@.rope.dimension_count", 32), ST_E_FORMAT,
           "rope.dimension_count 32"),
        C1("rope base negative", L, f32_("@.rope.freq_base", -1.0f), ST_E_FORMAT, "rope.freq_base"),
        C1("rope base NaN", L, f32_("@.rope.freq_base", nan), ST_E_FORMAT, "rope.freq_base"),
        C1("rms epsilon missing (llama needs it)", L, op_(ME_DEL, "@.attention.layer_norm_rms_epsilon"),
           ST_E_NOT_FOUND, "layer_norm_rms_epsilon"),
        C1("rms epsilon an integer", L, u32_("@.attention.layer_norm_rms_epsilon", 1), ST_E_TYPE,
           "layer_norm_rms_epsilon"),
        C1("rms epsilon negative", L, f32_("@.attention.layer_norm_rms_epsilon", -1e-5f), ST_E_FORMAT,
           "layer_norm_rms_epsilon"),
        /* rope scaling */
        C1("rope scaling type unknown", L, str_("@.rope.scaling.type", "ntk"), ST_E_UNSUPPORTED, "'ntk'"),
        C1("rope scaling factor negative", L, f32_("@.rope.scaling.factor", -2.0f), ST_E_FORMAT,
           "rope.scaling.factor"),
        C1("yarn without a factor", L, str_("@.rope.scaling.type", "yarn"), ST_E_FORMAT, "yarn"),
        C1("llama3 scaling without rope_freqs", L, str_("@.rope.scaling.type", "llama3"), ST_E_NOT_FOUND,
           "rope_freqs.weight"),
        C1("rope_freqs with a zero divisor", L, add_("rope_freqs.weight", 8, 0.0f), ST_E_FORMAT,
           "rope_freqs.weight[0]"),
        C1("rope_freqs of the wrong length", L, add_("rope_freqs.weight", 5, 1.0f), ST_E_FORMAT,
           "rope_freqs.weight"),
        /* architecture */
        C1("architecture missing", L, op_(ME_DEL, "general.architecture"), ST_E_FORMAT, "general.architecture"),
        C1("architecture not a string", L, u32_("general.architecture", 1), ST_E_TYPE, "general.architecture"),
        C1("architecture unsupported", L, str_("general.architecture", "gpt2"), ST_E_UNSUPPORTED, "'gpt2'"),
        /* tokenizer */
        C1("tokenizer model missing", L, op_(ME_DEL, "tokenizer.ggml.model"), ST_E_NOT_FOUND,
           "tokenizer.ggml.model"),
        C1("tokenizer model unsupported", L, str_("tokenizer.ggml.model", "wordpiece"), ST_E_UNSUPPORTED,
           "'wordpiece'"),
        C1("tokens not strings", L, arr_("tokenizer.ggml.tokens", ST_GGUF_UINT32, 259, 1), ST_E_TYPE,
           "tokenizer.ggml.tokens"),
        C1("tokens fewer than token_embd rows", L, arr_("tokenizer.ggml.tokens", ST_GGUF_STRING, 200, 0),
           ST_E_FORMAT, "token_embd.weight"),
        C1("tokens missing", L, op_(ME_DEL, "tokenizer.ggml.tokens"), ST_E_NOT_FOUND, "tokenizer.ggml.tokens"),
        C1("scores shorter than tokens", L, arr_("tokenizer.ggml.scores", ST_GGUF_FLOAT32, 10, 0), ST_E_FORMAT,
           "tokenizer.ggml.scores"),
        C1("scores not numbers", L, arr_("tokenizer.ggml.scores", ST_GGUF_STRING, 259, 0), ST_E_TYPE,
           "tokenizer.ggml.scores"),
        C1("token types shorter than tokens", L, arr_("tokenizer.ggml.token_type", ST_GGUF_INT32, 3, 1),
           ST_E_FORMAT, "tokenizer.ggml.token_type"),
        C1("bos id a string", L, str_("tokenizer.ggml.bos_token_id", "1"), ST_E_TYPE,
           "tokenizer.ggml.bos_token_id"),
        C1("add_bos_token not a bool", L, u32_("tokenizer.ggml.add_bos_token", 1), ST_E_TYPE,
           "tokenizer.ggml.add_bos_token"),
        C1("chat template not a string", L, u32_("tokenizer.chat_template", 7), ST_E_TYPE,
           "tokenizer.chat_template"),
        /* tensors */
        C1("token_embd missing", L, op_(ME_DROP, "token_embd.weight"), ST_E_NOT_FOUND, "token_embd.weight"),
        C1("output_norm missing", L, op_(ME_DROP, "output_norm.weight"), ST_E_NOT_FOUND, "output_norm.weight"),
        C1("a norm quantized", L, type_("blk.0.attn_norm.weight", ST_TYPE_Q8_0), ST_E_UNSUPPORTED,
           "blk.0.attn_norm.weight has type q8_0, expected f32"),
        C1("a matrix of a type strata cannot compute", L, type_("blk.1.ffn_down.weight", ST_TYPE_IQ4_NL),
           ST_E_UNSUPPORTED, "blk.1.ffn_down.weight has type iq4_nl"),
        C1("attn_q with too few rows", L, shape_("blk.0.attn_q.weight", 2, 64, 48, 1), ST_E_FORMAT,
           "blk.0.attn_q.weight has shape [64, 48], expected [64, 64]"),
        C1("attn_k three-dimensional", L, shape_("blk.1.attn_k.weight", 3, 64, 16, 2), ST_E_FORMAT,
           "blk.1.attn_k.weight has shape [64, 16, 2]"),
        C1("output with the wrong vocabulary", L, shape_("output.weight", 2, 64, 100, 1), ST_E_FORMAT,
           "output.weight"),
        C1("ffn_down transposed", L, shape_("blk.1.ffn_down.weight", 2, 64, 128, 1), ST_E_FORMAT,
           "blk.1.ffn_down.weight"),
        C1("llama with only a q bias", L, add_("blk.0.attn_q.bias", 64, 0.0f), ST_E_FORMAT,
           "only some of the attn_q/k/v biases"),
        C3("biases on layer 1 only", L, add_("blk.1.attn_q.bias", 64, 0.0f), add_("blk.1.attn_k.bias", 32, 0.0f),
           add_("blk.1.attn_v.bias", 32, 0.0f), ST_E_FORMAT, "layer 1 differs from layer 0"),
        C1("qwen2 without attn_k.bias", Q2, op_(ME_DROP, "blk.0.attn_k.bias"), ST_E_NOT_FOUND,
           "blk.0.attn_k.bias"),
        C1("qwen2 bias of the wrong length", Q2, shape_("blk.1.attn_v.bias", 1, 16, 1, 1), ST_E_FORMAT,
           "blk.1.attn_v.bias"),
        C1("qwen3 without attn_k_norm", Q3, op_(ME_DROP, "blk.1.attn_k_norm.weight"), ST_E_NOT_FOUND,
           "blk.1.attn_k_norm.weight"),
        C1("qwen3 q_norm over the model width", Q3, shape_("blk.0.attn_q_norm.weight", 1, 64, 1, 1), ST_E_FORMAT,
           "blk.0.attn_q_norm.weight"),
        /* valid edits: load and generate */
        C2("linear rope scaling by 2", L, str_("@.rope.scaling.type", "linear"), f32_("@.rope.scaling.factor", 2.0f),
           0, NULL),
        C1("llama3 scaling from a rope_freqs tensor", L, add_("rope_freqs.weight", 8, 2.0f), 0, NULL),
        C1("bos id 0xFFFFFFFF (none)", L, u32_("tokenizer.ggml.bos_token_id", 0xFFFFFFFFu), 0, NULL),
        C1("head_count_kv absent: one per query head (the file's k/v are then too small)", L,
           op_(ME_DEL, "@.attention.head_count_kv"), ST_E_FORMAT, "blk.0.attn_k.weight"),
        C1("add_bos_token false", L, bool_("tokenizer.ggml.add_bos_token", 0), 0, NULL),
        C1("context_length 8 (a short context)", L, u32_("@.context_length", 8), 0, NULL),
    };
    const int n = (int)(sizeof all / sizeof all[0]);
    if (c) memcpy(c, all, sizeof all);
    return n;
}

static void *base_model(st_ctx *ctx, st_arch arch, size_t *n) {
    st_synth_params p = st_synth_default_params();
    if (st_synth_preset("tiny", &p)) return NULL;
    p.arch = arch;
    p.type = ST_TYPE_F32;
    p.embd_type = ST_TYPE_F32;
    void *buf = NULL;
    return st_synth_write_memory(ctx, &p, &buf, n) ? NULL : buf;
}

TEST(test_corpus) {
    st_ctx_params cp = st_ctx_default_params();
    cp.n_threads = 1;
    st_ctx *ctx = NULL;
    REQUIRE(st_ctx_create(&cp, &ctx) == 0);
    void *base[ST_ARCH_COUNT_] = {0};
    size_t base_n[ST_ARCH_COUNT_] = {0};
    for (int a = 0; a < ST_ARCH_COUNT_; a++) REQUIRE((base[a] = base_model(ctx, (st_arch)a, &base_n[a])) != NULL);
    /* the unedited bases load and generate */
    for (int a = 0; a < ST_ARCH_COUNT_; a++) {
        me_session s;
        int32_t tok = -1;
        CHECK_OK(me_session_open(ctx, base[a], base_n[a], FILE_NAME, &s));
        if (s.model) CHECK_OK(me_session_run(&s, &tok));
        me_session_close(&s);
    }
    const int n = n_cases(NULL);
    mcase *cases = calloc((size_t)n, sizeof *cases);
    REQUIRE(cases);
    n_cases(cases);
    int n_refused = 0;
    for (int i = 0; i < n; i++) {
        const mcase *c = &cases[i];
        void *img = NULL;
        size_t img_n = 0;
        CHECK_OK(model_edit_apply(ctx, base[c->arch], base_n[c->arch], c->e, c->n_e, &img, &img_n));
        if (!img) continue;
        st_ctx_clear_error(ctx);
        me_session s;
        int rc = me_session_open(ctx, img, img_n, FILE_NAME, &s);
        const char *msg = st_ctx_error(ctx);
        if (c->code == 0) {
            int32_t tok = -1;
            if (rc) fprintf(stderr, "  FAIL case '%s': refused: %s (%s)\n", c->what, msg, st_errname(rc));
            CHECK_INT(rc, 0);
            if (!rc) CHECK_OK(me_session_run(&s, &tok));
            me_session_close(&s);
        } else {
            const int named = strstr(msg, FILE_NAME ": ") == msg, found = strstr(msg, c->needle) != NULL;
            if (rc != c->code || !named || !found)
                fprintf(stderr, "  FAIL case '%s': %s (%s), wanted %s and \"%s\"\n", c->what, msg, st_errname(rc),
                        st_errname(c->code), c->needle);
            CHECK_INT(rc, c->code);
            CHECK(named);
            CHECK(found);
            CHECK(s.model == NULL && s.tok == NULL && s.kv == NULL && s.runner == NULL);
            n_refused += rc != 0;
            if (getenv("CORPUS_VERBOSE")) fprintf(stderr, "  %-44s %s\n", c->what, msg);
        }
        free(img);
    }
    fprintf(stderr, "  %d cases, %d refused as expected\n", n, n_refused);
    free(cases);
    for (int a = 0; a < ST_ARCH_COUNT_; a++) free(base[a]);
    st_ctx_destroy(ctx);
}

/* st_tok_load's errors land in the ctx it is given, even when the file was opened with
 * another (the GGUF getters write to the file's own ctx). */
TEST(test_tok_errors_in_callers_ctx) {
    st_ctx *a = NULL, *b = NULL;
    REQUIRE(st_ctx_create(NULL, &a) == 0 && st_ctx_create(NULL, &b) == 0);
    size_t n = 0, img_n = 0;
    void *base = base_model(a, ST_ARCH_LLAMA, &n), *img = NULL;
    REQUIRE(base);
    const model_edit e[2] = {str_("tokenizer.ggml.bos_token_id", "1"), u32_("tokenizer.ggml.merges", 3)};
    const char *needle[2] = {"tokenizer.ggml.bos_token_id (string)", "tokenizer.ggml.merges (uint32)"};
    for (int i = 0; i < 2; i++) {
        model_edit ei[2] = {e[i], str_("tokenizer.ggml.model", "gpt2")}; /* merges are read for BPE only */
        REQUIRE(model_edit_apply(a, base, n, ei, i + 1, &img, &img_n) == 0);
        st_gguf *g = NULL;
        REQUIRE(st_gguf_open_memory(a, img, img_n, FILE_NAME, &g) == 0);
        st_tok *tok = NULL;
        CHECK_INT(st_tok_load(b, g, NULL, &tok), ST_E_TYPE);
        CHECK(tok == NULL);
        const char *msg = st_ctx_error(b);
        if (strncmp(msg, FILE_NAME ": ", strlen(FILE_NAME) + 2) || !strstr(msg, needle[i]))
            fprintf(stderr, "  FAIL: '%s' (wanted \"%s\")\n", msg, needle[i]);
        CHECK(strncmp(msg, FILE_NAME ": ", strlen(FILE_NAME) + 2) == 0);
        CHECK(strstr(msg, needle[i]) != NULL);
        st_gguf_close(g);
        free(img);
    }
    free(base);
    st_ctx_destroy(a);
    st_ctx_destroy(b);
}

TEST_MAIN(test_corpus, test_tok_errors_in_callers_ctx)
