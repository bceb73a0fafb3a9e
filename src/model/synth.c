/* Synthetic llama-family models: random weights of a given shape and type, written as GGUF.
 * Benchmarks and tests use them for the shapes llama.cpp was measured on. */
#include "model/model_int.h"
#include "strata/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#define SYNTH_STD 0.02f
#define SYNTH_MAX_DIM (1 << 18)

st_synth_params st_synth_default_params(void) {
    st_synth_params p = {.arch = ST_ARCH_LLAMA, .n_layer = 8, .n_embd = 512, .n_head = 8, .n_head_kv = 2,
                         .n_ff = 1536, .n_vocab = 32000, .n_ctx = 4096, .rope_base = 500000.0f,
                         .rms_eps = 1e-5f, .type = ST_TYPE_Q8_0, .embd_type = -1, .seed = 1};
    return p;
}

int st_synth_preset(const char *name, st_synth_params *p) {
    if (!strcasecmp(name, "1b")) {
        p->n_layer = 16, p->n_embd = 2048, p->n_head = 32, p->n_head_kv = 8, p->n_ff = 8192;
        p->n_vocab = 32000, p->rope_base = 500000.0f, p->n_ctx = 4096;
    } else if (!strcasecmp(name, "small")) {
        p->n_layer = 8, p->n_embd = 512, p->n_head = 8, p->n_head_kv = 2, p->n_ff = 1536;
        p->n_vocab = 32000, p->rope_base = 500000.0f, p->n_ctx = 4096;
    } else if (!strcasecmp(name, "tiny")) {
        p->n_layer = 2, p->n_embd = 64, p->n_head = 4, p->n_head_kv = 2, p->n_ff = 128;
        p->n_vocab = 259, p->rope_base = 10000.0f, p->n_ctx = 256;
    } else {
        return ST_E_NOT_FOUND;
    }
    return 0;
}

int st_synth_parse_type(const char *s, st_synth_params *p) {
    static const struct { const char *name; st_type t; } types[] = {
        {"f32", ST_TYPE_F32},   {"f16", ST_TYPE_F16},   {"bf16", ST_TYPE_BF16}, {"q8_0", ST_TYPE_Q8_0},
        {"q4_0", ST_TYPE_Q4_0}, {"q4_1", ST_TYPE_Q4_1}, {"q5_0", ST_TYPE_Q5_0}, {"q5_1", ST_TYPE_Q5_1},
        {"q2_k", ST_TYPE_Q2_K}, {"q3_k", ST_TYPE_Q3_K}, {"q4_k", ST_TYPE_Q4_K}, {"q5_k", ST_TYPE_Q5_K}, {"q6_k", ST_TYPE_Q6_K},
    };
    if (!strcasecmp(s, "q4_k_m")) {
        p->q4_k_m = 1;
        p->type = ST_TYPE_Q4_K;
        return 0;
    }
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (!strcasecmp(s, types[i].name)) {
            p->type = types[i].t;
            p->q4_k_m = 0;
            return 0;
        }
    return ST_E_NOT_FOUND;
}

/* ---- tensor plan ------------------------------------------------------------------------- */

typedef struct stensor {
    char name[64];
    st_type type;
    int64_t ne0, ne1; /* ne1 == 0: a vector */
    int ones;         /* norm weight: all 1 */
    void *data;       /* [ne1][row bytes] */
} stensor;

/* llama.cpp's use_more_bits: the first and last eighth of the layers and every third between. */
static int use_more_bits(int il, int n) { return il < n / 8 || il >= 7 * n / 8 || (il - n / 8) % 3 == 2; }

/* A type whose blocks fit rows of ne0 (llama.cpp falls back the same way). */
static st_type fit_type(st_type t, int64_t ne0) {
    if (ne0 % st_type_block_size(t) == 0) return t;
    if (t == ST_TYPE_Q6_K && ne0 % 32 == 0) return ST_TYPE_Q8_0;
    if ((t == ST_TYPE_Q2_K || t == ST_TYPE_Q3_K) && ne0 % 32 == 0) return ST_TYPE_Q4_0;
    if ((t == ST_TYPE_Q4_K || t == ST_TYPE_Q5_K) && ne0 % 32 == 0) return ST_TYPE_Q5_0;
    return ST_TYPE_F16;
}

static void add(stensor *ts, int *n, const char *name, st_type t, int64_t ne0, int64_t ne1) {
    stensor *s = &ts[(*n)++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->type = ne1 ? fit_type(t, ne0) : ST_TYPE_F32;
    s->ne0 = ne0;
    s->ne1 = ne1;
    s->ones = ne1 == 0 && strstr(name, "norm") != NULL;
}

static int plan(const st_synth_params *p, stensor *ts) {
    const int64_t E = p->n_embd, hd = p->n_embd / p->n_head, HQ = hd * p->n_head, HK = hd * p->n_head_kv;
    const st_type base = p->q4_k_m ? ST_TYPE_Q4_K : p->type, big = p->q4_k_m ? ST_TYPE_Q6_K : p->type;
    int n = 0;
    char nm[64];
    add(ts, &n, "token_embd.weight", p->embd_type >= 0 ? (st_type)p->embd_type : base, E, p->n_vocab);
    add(ts, &n, "output_norm.weight", ST_TYPE_F32, E, 0);
    if (!p->tied_output) add(ts, &n, "output.weight", big, E, p->n_vocab);
    for (int il = 0; il < p->n_layer; il++) {
        const int more = p->q4_k_m && use_more_bits(il, p->n_layer);
#define L_(sfx, t, a, b)                                       \
    do {                                                       \
        snprintf(nm, sizeof nm, "blk.%d.%s", il, sfx);         \
        add(ts, &n, nm, t, a, b);                              \
    } while (0)
        L_("attn_norm.weight", base, E, 0);
        L_("attn_q.weight", base, E, HQ);
        L_("attn_k.weight", base, E, HK);
        L_("attn_v.weight", more ? ST_TYPE_Q6_K : base, E, HK);
        L_("attn_output.weight", base, HQ, E);
        if (p->arch == ST_ARCH_QWEN2) {
            L_("attn_q.bias", base, HQ, 0);
            L_("attn_k.bias", base, HK, 0);
            L_("attn_v.bias", base, HK, 0);
        }
        if (p->arch == ST_ARCH_QWEN3) {
            L_("attn_q_norm.weight", base, hd, 0);
            L_("attn_k_norm.weight", base, hd, 0);
        }
        L_("ffn_norm.weight", base, E, 0);
        L_("ffn_gate.weight", base, E, p->n_ff);
        L_("ffn_up.weight", base, E, p->n_ff);
        L_("ffn_down.weight", more ? ST_TYPE_Q6_K : base, p->n_ff, E);
#undef L_
    }
    return n;
}

/* ---- random fill ------------------------------------------------------------------------- */

static uint64_t mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* n normal deviates * std from the stream keyed (seed, ti, row): Box-Muller over splitmix. */
static void normals(uint64_t seed, int ti, int64_t row, float *x, int64_t n, float std) {
    uint64_t s = mix64(seed ^ mix64(((uint64_t)ti << 40) ^ (uint64_t)row));
    for (int64_t i = 0; i < n; i += 2) {
        s = mix64(s);
        double u1 = ((double)(s >> 11) + 0.5) * (1.0 / 9007199254740992.0);
        s = mix64(s);
        double u2 = (double)(s >> 11) * (1.0 / 9007199254740992.0);
        double r = sqrt(-2.0 * log(u1)) * std, a = 2.0 * M_PI * u2;
        x[i] = (float)(r * cos(a));
        if (i + 1 < n) x[i + 1] = (float)(r * sin(a));
    }
}

struct fill_job {
    const stensor *ts;
    int n;
    uint64_t seed;
    int64_t total_rows;
    int64_t max_ne0;
    _Atomic int err;
};

/* Rows of all tensors are numbered globally and split statically over threads. */
static void fill_task(void *arg, int ith, int nth) {
    struct fill_job *j = arg;
    int64_t r0, r1;
    st_split_range(j->total_rows, ith, nth, &r0, &r1);
    float *buf = malloc((size_t)j->max_ne0 * sizeof *buf);
    if (!buf) {
        j->err = ST_E_NOMEM;
        return;
    }
    int64_t base = 0;
    for (int ti = 0; ti < j->n && base < r1; ti++) {
        const stensor *t = &j->ts[ti];
        const int64_t rows = t->ne1 ? t->ne1 : 1;
        const size_t rb = st_row_bytes(t->type, t->ne0);
        for (int64_t r = r0 > base ? r0 - base : 0; r < rows && base + r < r1; r++) {
            if (t->ones)
                for (int64_t i = 0; i < t->ne0; i++) buf[i] = 1.0f;
            else
                normals(j->seed, ti, r, buf, t->ne0, SYNTH_STD);
            if (st_quantize_row(t->type, buf, (uint8_t *)t->data + (size_t)r * rb, t->ne0)) j->err = ST_E_INVAL;
        }
        base += rows;
    }
    free(buf);
}

/* ---- tokenizer ----------------------------------------------------------------------------- */

static int byte_vocab(st_gguf_writer *w, int32_t n_vocab) {
    char **toks = calloc((size_t)n_vocab, sizeof *toks);
    float *scores = calloc((size_t)n_vocab, sizeof *scores);
    int32_t *types = calloc((size_t)n_vocab, sizeof *types);
    int rc = ST_E_NOMEM;
    if (!toks || !scores || !types) goto done;
    for (int32_t i = 0; i < n_vocab; i++) {
        char b[32];
        if (i == 0) snprintf(b, sizeof b, "<unk>"), types[i] = 2;
        else if (i == 1) snprintf(b, sizeof b, "<s>"), types[i] = 3;
        else if (i == 2) snprintf(b, sizeof b, "</s>"), types[i] = 3;
        else if (i < 259) snprintf(b, sizeof b, "<0x%02X>", i - 3), types[i] = 6;
        else snprintf(b, sizeof b, "<unused_%d>", i - 259), types[i] = 5;
        if (!(toks[i] = strdup(b))) goto done;
    }
    rc = st_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    if (!rc) rc = st_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)toks, (uint64_t)n_vocab);
    if (!rc) rc = st_gguf_writer_set_arr(w, "tokenizer.ggml.scores", ST_GGUF_FLOAT32, scores, (uint64_t)n_vocab);
    if (!rc) rc = st_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", ST_GGUF_INT32, types, (uint64_t)n_vocab);
    if (!rc) rc = st_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    if (!rc) rc = st_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    if (!rc) rc = st_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    if (!rc) rc = st_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    if (!rc) rc = st_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false);
done:
    if (toks)
        for (int32_t i = 0; i < n_vocab; i++) free(toks[i]);
    free(toks);
    free(scores);
    free(types);
    return rc;
}

/* Opens the GGUF at path as a vocabulary source: *g (the caller closes it) and its token
 * count (tokenizer.ggml.tokens). */
static int open_vocab(st_ctx *ctx, const char *path, st_gguf **g, int32_t *n_vocab) {
    int rc = st_gguf_open(ctx, path, g);
    if (rc) return rc;
    st_gguf_vtype et;
    uint64_t n = 0;
    const void *d;
    rc = st_gguf_get_arr(*g, "tokenizer.ggml.tokens", &et, &n, &d);
    if (rc || et != ST_GGUF_STRING || n == 0 || n > SYNTH_MAX_DIM * 16) {
        st_gguf_close(*g);
        *g = NULL;
        return st_seterr(ctx, ST_E_FORMAT, "%s: no tokenizer.ggml.tokens array", path);
    }
    *n_vocab = (int32_t)n;
    return 0;
}

/* Copies every tokenizer.* key of path; *n_vocab = its token count. */
static int copy_vocab(st_ctx *ctx, st_gguf_writer *w, const char *path, int32_t *n_vocab) {
    st_gguf *g = NULL;
    int rc = open_vocab(ctx, path, &g, n_vocab);
    for (int64_t i = 0; !rc && i < st_gguf_n_kv(g); i++)
        if (!strncmp(st_gguf_key_name(g, i), "tokenizer.", 10)) rc = st_gguf_writer_copy_kv(w, g, i);
    st_gguf_close(g);
    return rc;
}

/* Token count of the GGUF at path (tokenizer.ggml.tokens). */
static int vocab_count(st_ctx *ctx, const char *path, int32_t *n_vocab) {
    st_gguf *g = NULL;
    int rc = open_vocab(ctx, path, &g, n_vocab);
    st_gguf_close(g);
    return rc;
}

/* ---- writer ---------------------------------------------------------------------------------- */

static int check_params(st_ctx *ctx, const st_synth_params *p) {
#define CHK_(cond, ...) \
    if (!(cond)) return st_seterr(ctx, ST_E_INVAL, __VA_ARGS__)
    CHK_(st_arch_name(p->arch), "unknown architecture %d", (int)p->arch);
    CHK_(p->n_layer >= 1 && p->n_layer <= 1024, "--layers %d out of [1, 1024]", p->n_layer);
    CHK_(p->n_embd >= 1 && p->n_embd <= SYNTH_MAX_DIM, "--dim %d out of range", p->n_embd);
    CHK_(p->n_head >= 1 && p->n_embd % p->n_head == 0, "--dim %d is not a multiple of --heads %d", p->n_embd,
         p->n_head);
    CHK_(p->n_head_kv >= 1 && p->n_head % p->n_head_kv == 0, "--heads %d is not a multiple of --kv-heads %d",
         p->n_head, p->n_head_kv);
    CHK_((p->n_embd / p->n_head) % 2 == 0, "head dim %d must be even (RoPE)", p->n_embd / p->n_head);
    CHK_(p->n_ff >= 1 && p->n_ff <= SYNTH_MAX_DIM * 4, "--ff %d out of range", p->n_ff);
    CHK_(p->n_ctx >= 1, "--ctx %d must be >= 1", p->n_ctx);
    CHK_(p->rope_base > 0, "--rope-base must be > 0");
    CHK_(p->vocab_from || (p->n_vocab >= 259 && p->n_vocab <= SYNTH_MAX_DIM * 16),
         "--vocab %d: the built-in byte-level tokenizer needs at least 259 tokens", p->n_vocab);
    CHK_(p->embd_type < 0 || st_type_has_kernels((st_type)p->embd_type), "token_embd type %d has no kernels",
         (int)p->embd_type);
    CHK_(st_type_has_kernels(p->type) && st_type_vec_dot_type(p->type) != ST_TYPE_COUNT_, "weight type %s has no kernels",
         st_type_name(p->type) ? st_type_name(p->type) : "?");
#undef CHK_
    return 0;
}

static int set_hparams(st_gguf_writer *w, const st_synth_params *p, int32_t n_vocab) {
    const char *a = st_arch_name(p->arch);
    char k[96];
    int rc = st_gguf_writer_set_str(w, "general.architecture", a);
    if (!rc) rc = st_gguf_writer_set_str(w, "general.name", "strata-synthetic");
    if (!rc) rc = st_gguf_writer_set_u32(w, "general.quantization_version", 2);
#define U_(key, v) \
    if (!rc) snprintf(k, sizeof k, "%s." key, a), rc = st_gguf_writer_set_u32(w, k, (uint32_t)(v))
#define F_(key, v) \
    if (!rc) snprintf(k, sizeof k, "%s." key, a), rc = st_gguf_writer_set_f32(w, k, v)
    U_("context_length", p->n_ctx);
    U_("embedding_length", p->n_embd);
    U_("block_count", p->n_layer);
    U_("feed_forward_length", p->n_ff);
    U_("attention.head_count", p->n_head);
    U_("attention.head_count_kv", p->n_head_kv);
    U_("rope.dimension_count", p->n_embd / p->n_head);
    U_("vocab_size", n_vocab);
    F_("rope.freq_base", p->rope_base);
    F_("attention.layer_norm_rms_epsilon", p->rms_eps);
#undef U_
#undef F_
    return rc;
}

static int build(st_ctx *ctx, const st_synth_params *p, st_gguf_writer **wout, stensor **tsout, int *ntout) {
    int rc = check_params(ctx, p);
    if (rc) return rc;
    st_gguf_writer *w = NULL;
    if ((rc = st_gguf_writer_create(ctx, &w))) return rc;
    int32_t n_vocab = p->n_vocab;
    rc = p->vocab_from ? copy_vocab(ctx, w, p->vocab_from, &n_vocab) : byte_vocab(w, n_vocab);
    st_synth_params q = *p;
    q.n_vocab = n_vocab;
    if (!rc) rc = set_hparams(w, &q, n_vocab);
    stensor *ts = calloc((size_t)q.n_layer * 16 + 8, sizeof *ts);
    if (!ts && !rc) rc = ST_E_NOMEM;
    int nt = 0;
    if (!rc) nt = plan(&q, ts);
    int64_t rows = 0, max_ne0 = 1;
    for (int i = 0; i < nt && !rc; i++) {
        int64_t r = ts[i].ne1 ? ts[i].ne1 : 1;
        size_t bytes = st_row_bytes(ts[i].type, ts[i].ne0) * (size_t)r;
        ts[i].data = st_alloc_aligned(bytes ? bytes : 1, 64);
        if (!ts[i].data) rc = ST_E_NOMEM;
        rows += r;
        if (ts[i].ne0 > max_ne0) max_ne0 = ts[i].ne0;
    }
    if (!rc) {
        struct fill_job j = {.ts = ts, .n = nt, .seed = p->seed, .total_rows = rows, .max_ne0 = max_ne0 + 1};
        st_threadpool_run(st_ctx_threadpool(ctx), fill_task, &j);
        rc = j.err;
    }
    for (int i = 0; i < nt && !rc; i++) {
        int64_t ne[2] = {ts[i].ne0, ts[i].ne1};
        rc = st_gguf_writer_add_tensor(w, ts[i].name, ts[i].type, ts[i].ne1 ? 2 : 1, ne, ts[i].data);
    }
    if (rc) {
        for (int i = 0; i < nt; i++) st_free_aligned(ts[i].data);
        free(ts);
        st_gguf_writer_destroy(w);
        return rc;
    }
    *wout = w;
    *tsout = ts;
    *ntout = nt;
    return 0;
}

static void release(st_gguf_writer *w, stensor *ts, int nt) {
    for (int i = 0; i < nt; i++) st_free_aligned(ts[i].data);
    free(ts);
    st_gguf_writer_destroy(w);
}

int st_synth_write(st_ctx *ctx, const st_synth_params *p, const char *path) {
    if (!p || !path) return ST_E_INVAL;
    st_gguf_writer *w = NULL;
    stensor *ts = NULL;
    int nt = 0;
    int rc = build(ctx, p, &w, &ts, &nt);
    if (rc) return rc;
    rc = st_gguf_writer_write(w, path);
    release(w, ts, nt);
    return rc;
}

int st_synth_write_memory(st_ctx *ctx, const st_synth_params *p, void **buf, size_t *size) {
    if (!p || !buf || !size) return ST_E_INVAL;
    *buf = NULL;
    *size = 0;
    st_gguf_writer *w = NULL;
    stensor *ts = NULL;
    int nt = 0;
    int rc = build(ctx, p, &w, &ts, &nt);
    if (rc) return rc;
    rc = st_gguf_writer_write_memory(w, buf, size);
    release(w, ts, nt);
    return rc;
}

/* What st_synth_write would write for p, in everything but the random values: architecture,
 * shape keys, vocabulary size, and every tensor's name, type and shape (no more, no fewer). */
int st_synth_check(st_ctx *ctx, const st_synth_params *p, st_gguf *g) {
    if (!p || !g) return ST_E_INVAL;
    int rc = check_params(ctx, p);
    if (rc) return rc;
    st_synth_params q = *p;
    if (p->vocab_from && (rc = vocab_count(ctx, p->vocab_from, &q.n_vocab))) return rc;
    const char *a = st_arch_name(p->arch), *s = NULL;
    size_t n = 0;
    if (st_gguf_get_str(g, "general.architecture", &s, &n) || n != strlen(a) || memcmp(s, a, n))
        return st_seterr(ctx, ST_E_FORMAT, "general.architecture is '%.*s', these parameters make '%s'",
                         s ? (int)(n > 32 ? 32 : n) : 0, s ? s : "", a);
    const struct { const char *key; int64_t want; } keys[] = {
        {"block_count", q.n_layer},          {"embedding_length", q.n_embd},
        {"attention.head_count", q.n_head},  {"attention.head_count_kv", q.n_head_kv},
        {"feed_forward_length", q.n_ff},     {"context_length", q.n_ctx},
        {"rope.dimension_count", q.n_embd / q.n_head},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char k[96];
        snprintf(k, sizeof k, "%s.%s", a, keys[i].key);
        uint32_t v = 0;
        if (st_gguf_get_u32(g, k, &v) || v != keys[i].want)
            return st_seterr(ctx, ST_E_FORMAT, "%s is %u, these parameters make %lld", k, v, (long long)keys[i].want);
    }
    st_gguf_vtype et;
    uint64_t nv = 0;
    const void *d;
    if (st_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &nv, &d) || nv != (uint64_t)q.n_vocab)
        return st_seterr(ctx, ST_E_FORMAT, "the vocabulary has %llu tokens, these parameters make %d",
                         (unsigned long long)nv, q.n_vocab);
    stensor *ts = calloc((size_t)q.n_layer * 16 + 8, sizeof *ts);
    if (!ts) return ST_E_NOMEM;
    const int nt = plan(&q, ts);
    if (st_gguf_n_tensors(g) != nt)
        rc = st_seterr(ctx, ST_E_FORMAT, "%lld tensors, these parameters make %d", (long long)st_gguf_n_tensors(g), nt);
    for (int i = 0; i < nt && !rc; i++) {
        const st_gguf_tensor *t = st_gguf_find_tensor(g, ts[i].name);
        const int64_t ne1 = ts[i].ne1 ? ts[i].ne1 : 1;
        if (!t)
            rc = st_seterr(ctx, ST_E_FORMAT, "no tensor %s", ts[i].name);
        else if (t->type != ts[i].type)
            rc = st_seterr(ctx, ST_E_FORMAT, "tensor %s is %s, these parameters make %s", ts[i].name,
                           st_type_name(t->type) ? st_type_name(t->type) : "?", st_type_name(ts[i].type));
        else if (t->ne[0] != ts[i].ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1)
            rc = st_seterr(ctx, ST_E_FORMAT, "tensor %s is [%lld, %lld], these parameters make [%lld, %lld]",
                           ts[i].name, (long long)t->ne[0], (long long)t->ne[1], (long long)ts[i].ne0, (long long)ne1);
    }
    free(ts);
    return rc;
}
