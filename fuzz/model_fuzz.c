/* libFuzzer target for the model and tokenizer loaders, structure-aware: the input picks a
 * tiny synthetic model (llama, qwen2 or qwen3; f32 or q8_0 weights) and a list of edits of
 * the kinds tests/model/model_edit.h makes (set a metadata key to any type and value, remove
 * it, drop, reshape, retype or add a tensor), and the edited file is loaded as `strata run`
 * loads one (model, tokenizer, KV cache, runner). A refusal must be one of the loaders' error
 * codes with a message that names the file, leaving nothing allocated; a file that loads
 * must encode a prompt, prefill it and decode a token (ASan + UBSan watch all of it).
 * Random bytes through the whole GGUF would almost never get past the reader; this reaches
 * the hyper-parameter, tensor and vocabulary checks behind it.
 *
 *   build: make fuzz   (target model_fuzz)
 *   run:   build-fuzz/fuzz/model_fuzz CORPUS_DIR   (any bytes seed it; see scripts/fuzz-smoke.sh) */
#include "model/model_edit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_CHECK(c)                                                                   \
    do {                                                                                \
        if (!(c)) {                                                                     \
            fprintf(stderr, "model_fuzz: check failed: %s (line %d)\n", #c, __LINE__);  \
            abort();                                                                    \
        }                                                                               \
    } while (0)

#define MAX_EDITS 8
#define N_BASES (ST_ARCH_COUNT_ * 2)

static const char *const k_keys[] = {
    "@.block_count", "@.embedding_length", "@.feed_forward_length", "@.attention.head_count",
    "@.attention.head_count_kv", "@.context_length", "@.attention.key_length", "@.attention.value_length",
    "@.rope.dimension_count", "@.rope.freq_base", "@.attention.layer_norm_rms_epsilon", "@.rope.scaling.type",
    "@.rope.scaling.factor", "@.rope.scale_linear", "@.rope.scaling.original_context_length",
    "@.rope.scaling.yarn_ext_factor", "@.rope.scaling.attn_factor", "@.rope.scaling.yarn_beta_fast",
    "@.rope.scaling.yarn_beta_slow", "general.architecture", "general.alignment", "general.name",
    "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.scores",
    "tokenizer.ggml.token_type", "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.eot_token_id",
    "tokenizer.ggml.padding_token_id", "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token",
    "tokenizer.ggml.add_space_prefix", "tokenizer.chat_template",
};
static const char *const k_strs[] = {
    "llama", "qwen2", "qwen3", "gpt2", "linear", "yarn", "llama3", "none", "default", "llama-bpe",
    "<|im_start|>{{ message }}", "[INST]", "", "\xff\xfe", "bert", "t5",
};
static const char *const k_tensors[] = {
    "attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
    "attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.bias", "attn_q_norm.weight",
    "attn_k_norm.weight", "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight",
};
static const char *const k_globals[] = {"token_embd.weight", "output_norm.weight", "output.weight", "rope_freqs.weight"};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static st_ctx *g_ctx;
static long g_runs, g_loaded, g_refused[8]; /* MODEL_FUZZ_STATS=1: printed every 10000 runs */
static void *g_base[N_BASES];
static size_t g_base_n[N_BASES];

static void init(void) {
    st_ctx_params cp = st_ctx_default_params();
    cp.n_threads = 1;
    FUZZ_CHECK(st_ctx_create(&cp, &g_ctx) == 0);
    for (int i = 0; i < N_BASES; i++) {
        st_synth_params p = st_synth_default_params();
        FUZZ_CHECK(st_synth_preset("tiny", &p) == 0);
        p.arch = (st_arch)(i % ST_ARCH_COUNT_);
        p.type = i < ST_ARCH_COUNT_ ? ST_TYPE_F32 : ST_TYPE_Q8_0;
        p.embd_type = ST_TYPE_F32;
        p.n_ctx = 64;
        FUZZ_CHECK(st_synth_write_memory(g_ctx, &p, &g_base[i], &g_base_n[i]) == 0);
    }
}

typedef struct reader {
    const uint8_t *p;
    size_t n;
} reader;

static uint8_t byte(reader *r) {
    if (!r->n) return 0;
    r->n--;
    return *r->p++;
}

static void bytes(reader *r, uint8_t *out, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = byte(r);
}

static void tensor_name(reader *r, char *out, size_t cap) {
    const uint8_t b = byte(r);
    if (b < 40) snprintf(out, cap, "%s", k_globals[b % COUNT(k_globals)]);
    else snprintf(out, cap, "blk.%d.%s", b % 3, k_tensors[(b / 3) % COUNT(k_tensors)]);
}

/* One edit from the input (the reader's bytes run out into zeros). */
static void read_edit(reader *r, model_edit *e) {
    memset(e, 0, sizeof *e);
    const uint8_t op = byte(r) % 9;
    switch (op) {
    case 0: /* a key to a small unsigned value: plausible values get past the first checks */
        e->op = ME_SET_SCALAR, e->vt = ST_GGUF_UINT32;
        snprintf(e->key, sizeof e->key, "%s", k_keys[byte(r) % COUNT(k_keys)]);
        e->val[0] = byte(r);
        break;
    case 1: /* a key to any scalar type and bits */
        e->op = ME_SET_SCALAR, e->vt = (st_gguf_vtype)(byte(r) % ST_GGUF_VTYPE_COUNT_);
        snprintf(e->key, sizeof e->key, "%s", k_keys[byte(r) % COUNT(k_keys)]);
        bytes(r, e->val, 8);
        break;
    case 2:
        e->op = ME_SET_STR;
        snprintf(e->key, sizeof e->key, "%s", k_keys[byte(r) % COUNT(k_keys)]);
        e->str = k_strs[byte(r) % COUNT(k_strs)];
        break;
    case 3: /* an array of any element type and length (up to 4096; 259 is the vocabulary) */
        e->op = ME_SET_ARR, e->et = (st_gguf_vtype)(byte(r) % ST_GGUF_VTYPE_COUNT_);
        snprintf(e->key, sizeof e->key, "%s", k_keys[byte(r) % COUNT(k_keys)]);
        e->n = byte(r) & 1 ? 259 : (uint64_t)byte(r) * 16 + byte(r) % 16;
        bytes(r, e->val, 8);
        break;
    case 4:
        e->op = ME_DEL;
        snprintf(e->key, sizeof e->key, "%s", k_keys[byte(r) % COUNT(k_keys)]);
        break;
    case 5:
        e->op = ME_DROP;
        tensor_name(r, e->key, sizeof e->key);
        break;
    case 6:
    case 8: { /* reshape, or add a tensor: 1-3 dimensions of 1..256 (times 16 when the byte says) */
        e->op = op == 6 ? ME_SHAPE : ME_ADD;
        tensor_name(r, e->key, sizeof e->key);
        e->n_dims = 1 + byte(r) % 3;
        for (int d = 0; d < 4; d++) {
            const uint8_t b = byte(r);
            e->ne[d] = d < e->n_dims ? (int64_t)(b & 0x7f) * (b & 0x80 ? 16 : 1) + 1 : 1;
        }
        e->type = byte(r) & 1 ? ST_TYPE_F32 : ST_TYPE_Q8_0;
        if (e->type == ST_TYPE_Q8_0) e->ne[0] = (e->ne[0] + 31) / 32 * 32;
        uint8_t f[4];
        bytes(r, f, 4);
        memcpy(&e->fill, f, 4);
        break;
    }
    default: /* retype (zeros, or the fill's bits) */
        e->op = ME_TYPE;
        tensor_name(r, e->key, sizeof e->key);
        e->type = (st_type)(byte(r) % 40);
        e->fill = byte(r) & 1 ? 1.0f : 0.0f;
        break;
    }
}

static int known_error(int rc) {
    switch (rc) {
    case ST_E_FORMAT: case ST_E_TYPE: case ST_E_NOT_FOUND: case ST_E_UNSUPPORTED: case ST_E_LIMIT:
    case ST_E_VERSION: case ST_E_NOMEM:
        return 1;
    default:
        return 0;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_ctx) init();
    reader r = {data, size};
    const int base = byte(&r) % N_BASES;
    model_edit e[MAX_EDITS];
    int n_e = 0;
    while (r.n && n_e < MAX_EDITS) read_edit(&r, &e[n_e++]);
    void *img = NULL;
    size_t img_n = 0;
    FUZZ_CHECK(model_edit_apply(g_ctx, g_base[base], g_base_n[base], e, n_e, &img, &img_n) == 0);
    st_ctx_clear_error(g_ctx);
    me_session s;
    const int rc = me_session_open(g_ctx, img, img_n, "fuzz.gguf", &s);
    if (rc) {
        const char *msg = st_ctx_error(g_ctx);
        if (!known_error(rc) || strncmp(msg, "fuzz.gguf: ", 11) != 0) {
            fprintf(stderr, "model_fuzz: refusal %s: '%s'\n", st_errname(rc), msg);
            abort();
        }
        FUZZ_CHECK(!s.model && !s.tok && !s.kv && !s.runner);
        g_refused[(-rc) % 8]++;
    } else {
        g_loaded++;
        int32_t tok = -1;
        const int run = me_session_run(&s, &tok);
        if (run) {
            fprintf(stderr, "model_fuzz: a loaded file failed to run: %s: '%s'\n", st_errname(run),
                    st_ctx_error(g_ctx));
            abort();
        }
        FUZZ_CHECK(tok >= 0 && tok < st_model_get_hparams(s.model)->n_vocab);
        me_session_close(&s);
    }
    free(img);
    if (++g_runs % 10000 == 0 && getenv("MODEL_FUZZ_STATS")) {
        fprintf(stderr, "model_fuzz: %ld runs, %ld loaded and ran; refused by code %% 8:", g_runs, g_loaded);
        for (int i = 0; i < 8; i++) fprintf(stderr, " %ld", g_refused[i]);
        fprintf(stderr, " (last: %s)\n", st_ctx_error(g_ctx));
    }
    return 0;
}
