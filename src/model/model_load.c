/* Model loading: hyper-parameters from GGUF metadata, every tensor checked for presence,
 * type and shape (with an error naming it), and the model fingerprint. */
#include "model/model_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define ST_MODEL_MAX_LAYERS 4096
#define ST_MODEL_MAX_DIM (1 << 20)
#define ST_MODEL_MAX_VOCAB (1 << 24)
#define ST_MODEL_MAX_CTX (1u << 30)

static const char *const arch_names[ST_ARCH_COUNT_] = {"llama", "qwen2", "qwen3"};

const char *st_arch_name(st_arch a) { return (unsigned)a < ST_ARCH_COUNT_ ? arch_names[a] : NULL; }

int st_arch_parse(const char *name) {
    for (int i = 0; i < ST_ARCH_COUNT_; i++)
        if (!strcmp(name, arch_names[i])) return i;
    return -1;
}

int st_model_type_supported(st_type t) {
    switch (t) {
    case ST_TYPE_F32: case ST_TYPE_F16: case ST_TYPE_BF16: case ST_TYPE_Q8_0: case ST_TYPE_Q4_0:
    case ST_TYPE_Q4_1: case ST_TYPE_Q5_0: case ST_TYPE_Q5_1: case ST_TYPE_Q2_K: case ST_TYPE_Q3_K: case ST_TYPE_Q4_K: case ST_TYPE_Q5_K:
    case ST_TYPE_Q6_K:
        return 1;
    default:
        return 0;
    }
}

/* ---- hyper-parameters ------------------------------------------------------------------- */

struct loader {
    st_ctx *ctx;
    st_gguf *g;
    const char *path;
    const char *arch;
};

/* Reads "<arch>.<key>" as u32 into *v. Optional keys keep *v when absent. */
static int hp_u32(struct loader *L, const char *key, int required, int32_t *v) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", L->arch, key);
    uint32_t u;
    int rc = st_gguf_get_u32(L->g, full, &u);
    if (rc == ST_E_NOT_FOUND && !required) return 0;
    if (rc == ST_E_NOT_FOUND) return st_seterr(L->ctx, rc, "%s: missing metadata key %s", L->path, full);
    if (rc) return rc; /* the getter named the file, the key and its type */
    const uint32_t lim = strstr(key, "context_length") ? ST_MODEL_MAX_CTX : ST_MODEL_MAX_DIM;
    if (u == 0 || u > lim)
        return st_seterr(L->ctx, ST_E_FORMAT, "%s: metadata %s = %u out of range [1, %u]", L->path, full, u, lim);
    *v = (int32_t)u;
    return 0;
}

static int hp_f32(struct loader *L, const char *key, int required, float *v) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", L->arch, key);
    float f; /* the getter clears its output on entry: keep *v's default until success */
    int rc = st_gguf_get_f32(L->g, full, &f);
    if (rc == ST_E_NOT_FOUND && !required) return 0;
    if (rc == ST_E_NOT_FOUND) return st_seterr(L->ctx, rc, "%s: missing metadata key %s", L->path, full);
    if (rc) return rc; /* the getter named the file, the key and its type */
    if (!(f == f)) return st_seterr(L->ctx, ST_E_FORMAT, "%s: metadata %s is NaN", L->path, full);
    *v = f;
    return 0;
}

/* Rope scaling as llama.cpp's loader reads it: the type defaults to linear, the factor comes
 * from rope.scaling.factor or, when that key is absent, the older rope.scale_linear, and a
 * factor of 0 (absent) or 1 scales nothing. "llama3" (our name for the per-dimension factors
 * of a rope_freqs tensor, which llama.cpp applies whenever the tensor is there) is checked
 * against the tensor in get_tensors. Stricter than llama.cpp where it would run a file
 * silently unscaled: yarn without a factor, or a negative factor. */
static int read_rope_scaling(struct loader *L, st_model_hparams *hp) {
    char full[128];
    snprintf(full, sizeof full, "%s.rope.scaling.type", L->arch);
    const char *s;
    size_t n;
    int rc = st_gguf_get_str(L->g, full, &s, &n);
    if (rc == ST_E_NOT_FOUND) s = "linear", n = 6;
    else if (rc) return rc;
    if (n == 4 && !memcmp(s, "none", 4)) hp->rope_scaling = ST_ROPE_SCALING_NONE;
    else if (n == 6 && !memcmp(s, "linear", 6)) hp->rope_scaling = ST_ROPE_SCALING_LINEAR;
    else if (n == 4 && !memcmp(s, "yarn", 4)) hp->rope_scaling = ST_ROPE_SCALING_YARN;
    else if (n == 6 && !memcmp(s, "llama3", 6)) hp->rope_scaling = ST_ROPE_SCALING_LLAMA3;
    else
        return st_seterr(L->ctx, ST_E_UNSUPPORTED, "%s: unsupported rope scaling type '%.*s' (%s)", L->path,
                         (int)(n > 32 ? 32 : n), s, full);
    float factor = 0;
    const char *fkey = "rope.scaling.factor";
    char probe[128];
    snprintf(probe, sizeof probe, "%s.%s", L->arch, fkey);
    if (st_gguf_find_key(L->g, probe) < 0) fkey = "rope.scale_linear";
    if ((rc = hp_f32(L, fkey, 0, &factor))) return rc;
    if (factor < 0)
        return st_seterr(L->ctx, ST_E_FORMAT, "%s: metadata %s.%s = %g must be >= 0", L->path, L->arch, fkey,
                         factor);
    hp->rope_freq_scale = 1.0f;
    if (hp->rope_scaling == ST_ROPE_SCALING_YARN && factor == 0)
        return st_seterr(L->ctx, ST_E_FORMAT, "%s: rope scaling yarn needs %s.rope.scaling.factor > 0", L->path,
                         L->arch);
    if (hp->rope_scaling == ST_ROPE_SCALING_LINEAR || hp->rope_scaling == ST_ROPE_SCALING_YARN)
        hp->rope_freq_scale = factor == 0 ? 1.0f : 1.0f / factor;
    /* linear by 1 is no scaling: say so (a rope_freqs tensor may still make it llama3) */
    if (hp->rope_scaling == ST_ROPE_SCALING_LINEAR && hp->rope_freq_scale == 1.0f)
        hp->rope_scaling = ST_ROPE_SCALING_NONE;
    hp->rope_n_ctx_orig = hp->n_ctx_train;
    if ((rc = hp_u32(L, "rope.scaling.original_context_length", 0, &hp->rope_n_ctx_orig))) return rc;
    hp->yarn_ext_factor = hp->rope_scaling == ST_ROPE_SCALING_YARN ? 1.0f : 0.0f;
    hp->yarn_attn_factor = 1.0f;
    hp->yarn_beta_fast = 32.0f;
    hp->yarn_beta_slow = 1.0f;
    if ((rc = hp_f32(L, "rope.scaling.yarn_ext_factor", 0, &hp->yarn_ext_factor))) return rc;
    if ((rc = hp_f32(L, "rope.scaling.attn_factor", 0, &hp->yarn_attn_factor))) return rc;
    if ((rc = hp_f32(L, "rope.scaling.yarn_beta_fast", 0, &hp->yarn_beta_fast))) return rc;
    if ((rc = hp_f32(L, "rope.scaling.yarn_beta_slow", 0, &hp->yarn_beta_slow))) return rc;
    return 0;
}

static int read_hparams(struct loader *L, st_model_hparams *hp) {
    int rc;
    memset(hp, 0, sizeof *hp);
    hp->arch = (st_arch)st_arch_parse(L->arch);
    if ((rc = hp_u32(L, "block_count", 1, &hp->n_layer))) return rc;
    if ((rc = hp_u32(L, "embedding_length", 1, &hp->n_embd))) return rc;
    if ((rc = hp_u32(L, "feed_forward_length", 1, &hp->n_ff))) return rc;
    if ((rc = hp_u32(L, "attention.head_count", 1, &hp->n_head))) return rc;
    hp->n_head_kv = hp->n_head;
    if ((rc = hp_u32(L, "attention.head_count_kv", 0, &hp->n_head_kv))) return rc;
    if ((rc = hp_u32(L, "context_length", 1, &hp->n_ctx_train))) return rc;
    if (hp->n_layer > ST_MODEL_MAX_LAYERS)
        return st_seterr(L->ctx, ST_E_LIMIT, "%s: %s.block_count = %d over the limit %d", L->path, L->arch,
                         hp->n_layer, ST_MODEL_MAX_LAYERS);
    if (hp->n_embd % hp->n_head)
        return st_seterr(L->ctx, ST_E_FORMAT, "%s: embedding_length %d not a multiple of head_count %d", L->path,
                         hp->n_embd, hp->n_head);
    if (hp->n_head % hp->n_head_kv)
        return st_seterr(L->ctx, ST_E_FORMAT, "%s: head_count %d not a multiple of head_count_kv %d", L->path,
                         hp->n_head, hp->n_head_kv);
    hp->head_dim = hp->n_embd / hp->n_head;
    int32_t kl = hp->head_dim, vl = 0;
    if ((rc = hp_u32(L, "attention.key_length", 0, &kl))) return rc;
    vl = kl;
    if ((rc = hp_u32(L, "attention.value_length", 0, &vl))) return rc;
    if (kl != vl)
        return st_seterr(L->ctx, ST_E_UNSUPPORTED, "%s: key_length %d != value_length %d", L->path, kl, vl);
    hp->head_dim = kl;
    hp->n_rot = hp->head_dim;
    if ((rc = hp_u32(L, "rope.dimension_count", 0, &hp->n_rot))) return rc;
    if (hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return st_seterr(L->ctx, ST_E_FORMAT, "%s: rope.dimension_count %d must be even and <= head dim %d",
                         L->path, hp->n_rot, hp->head_dim);
    hp->rope_base = 10000.0f;
    if ((rc = hp_f32(L, "rope.freq_base", 0, &hp->rope_base))) return rc;
    if (!(hp->rope_base > 0))
        return st_seterr(L->ctx, ST_E_FORMAT, "%s: rope.freq_base %g must be > 0", L->path, hp->rope_base);
    hp->rms_eps = 1e-5f;
    if ((rc = hp_f32(L, "attention.layer_norm_rms_epsilon", hp->arch == ST_ARCH_LLAMA, &hp->rms_eps))) return rc;
    /* a negative epsilon makes RMSNorm's root NaN for a small row: every logit would be NaN */
    if (!(hp->rms_eps >= 0) || hp->rms_eps == INFINITY)
        return st_seterr(L->ctx, ST_E_FORMAT, "%s: %s.attention.layer_norm_rms_epsilon %g must be finite and >= 0",
                         L->path, L->arch, hp->rms_eps);
    hp->rope_neox = hp->arch != ST_ARCH_LLAMA;
    return read_rope_scaling(L, hp);
}

/* ---- tensors ---------------------------------------------------------------------------- */

static const char *shape_str(char *buf, size_t n, int nd, const int64_t *ne) {
    int o = snprintf(buf, n, "[%lld", (long long)ne[0]);
    for (int i = 1; i < nd && o < (int)n; i++) o += snprintf(buf + o, n - (size_t)o, ", %lld", (long long)ne[i]);
    if (o < (int)n) snprintf(buf + o, n - (size_t)o, "]");
    return buf;
}

/* Finds name; checks shape [ne0] (ne1 == 0) or [ne0, ne1] and type (matrix: any kernel type;
 * vector: f32). Absent + optional leaves w zeroed. */
static int get_tensor(struct loader *L, st_wt *w, const char *name, int64_t ne0, int64_t ne1, int required) {
    memset(w, 0, sizeof *w);
    const st_gguf_tensor *t = st_gguf_find_tensor(L->g, name);
    if (!t) {
        if (!required) return 0;
        return st_seterr(L->ctx, ST_E_NOT_FOUND, "%s: missing tensor %s", L->path, name);
    }
    int nd_want = ne1 ? 2 : 1;
    int64_t want[2] = {ne0, ne1 ? ne1 : 1};
    int ok = t->ne[0] == want[0] && t->ne[1] == want[1] && t->ne[2] == 1 && t->ne[3] == 1;
    if (!ok) {
        char a[96], b[96];
        return st_seterr(L->ctx, ST_E_FORMAT, "%s: tensor %s has shape %s, expected %s", L->path, name,
                         shape_str(a, sizeof a, t->n_dims, t->ne), shape_str(b, sizeof b, nd_want, want));
    }
    if (nd_want == 1 && t->type != ST_TYPE_F32)
        return st_seterr(L->ctx, ST_E_UNSUPPORTED, "%s: tensor %s has type %s, expected f32", L->path, name,
                         st_type_name(t->type) ? st_type_name(t->type) : "?");
    if (nd_want == 2 && !st_model_type_supported(t->type))
        return st_seterr(L->ctx, ST_E_UNSUPPORTED, "%s: tensor %s has type %s, which strata cannot compute with",
                         L->path, name, st_type_name(t->type) ? st_type_name(t->type) : "?");
    size_t rb = st_row_bytes(t->type, t->ne[0]);
    if (!rb || (uint64_t)rb * (uint64_t)want[1] != t->nbytes)
        return st_seterr(L->ctx, ST_E_FORMAT, "%s: tensor %s: %llu bytes do not match type %s and shape", L->path,
                         name, (unsigned long long)t->nbytes, st_type_name(t->type));
    w->name = t->name;
    w->type = t->type;
    w->ne0 = t->ne[0];
    w->ne1 = want[1];
    w->row_bytes = rb;
    w->data = t->data;
    return 0;
}

static int get_layer(struct loader *L, const st_model_hparams *hp, int il, st_layer *ly) {
    const int64_t E = hp->n_embd, HQ = (int64_t)hp->n_head * hp->head_dim, HK = (int64_t)hp->n_head_kv * hp->head_dim;
    const int bias_req = hp->arch == ST_ARCH_QWEN2, norm_req = hp->arch == ST_ARCH_QWEN3;
    char nm[96];
    int rc;
#define T_(field, suffix, a, b, req)                                                  \
    do {                                                                              \
        snprintf(nm, sizeof nm, "blk.%d.%s", il, suffix);                             \
        if ((rc = get_tensor(L, &ly->field, nm, a, b, req))) return rc;               \
    } while (0)
    T_(attn_norm, "attn_norm.weight", E, 0, 1);
    T_(wq, "attn_q.weight", E, HQ, 1);
    T_(wk, "attn_k.weight", E, HK, 1);
    T_(wv, "attn_v.weight", E, HK, 1);
    T_(wo, "attn_output.weight", HQ, E, 1);
    T_(bq, "attn_q.bias", HQ, 0, bias_req);
    T_(bk, "attn_k.bias", HK, 0, bias_req);
    T_(bv, "attn_v.bias", HK, 0, bias_req);
    T_(bo, "attn_output.bias", E, 0, 0);
    T_(q_norm, "attn_q_norm.weight", hp->head_dim, 0, norm_req);
    T_(k_norm, "attn_k_norm.weight", hp->head_dim, 0, norm_req);
    T_(ffn_norm, "ffn_norm.weight", E, 0, 1);
    T_(w_gate, "ffn_gate.weight", E, hp->n_ff, 1);
    T_(w_up, "ffn_up.weight", E, hp->n_ff, 1);
    T_(w_down, "ffn_down.weight", hp->n_ff, E, 1);
#undef T_
    if ((!ly->bq.data) != (!ly->bk.data) || (!ly->bq.data) != (!ly->bv.data))
        return st_seterr(L->ctx, ST_E_FORMAT, "%s: layer %d has only some of the attn_q/k/v biases", L->path, il);
    if ((!ly->q_norm.data) != (!ly->k_norm.data))
        return st_seterr(L->ctx, ST_E_FORMAT, "%s: layer %d has only one of attn_q_norm / attn_k_norm", L->path, il);
    return 0;
}

static int get_tensors(struct loader *L, st_model *m) {
    st_model_hparams *hp = &m->hp;
    int rc;
    if ((rc = get_tensor(L, &m->tok_embd, "token_embd.weight", hp->n_embd, hp->n_vocab, 1))) return rc;
    if ((rc = get_tensor(L, &m->output_norm, "output_norm.weight", hp->n_embd, 0, 1))) return rc;
    if ((rc = get_tensor(L, &m->output, "output.weight", hp->n_embd, hp->n_vocab, 0))) return rc;
    hp->tied_output = m->output.data == NULL;
    if (hp->tied_output) m->output = m->tok_embd;
    if ((rc = get_tensor(L, &m->rope_freqs, "rope_freqs.weight", hp->n_rot / 2, 0, 0))) return rc;
    if (m->rope_freqs.data && hp->rope_scaling == ST_ROPE_SCALING_NONE) hp->rope_scaling = ST_ROPE_SCALING_LLAMA3;
    if (hp->rope_scaling == ST_ROPE_SCALING_LLAMA3 && !m->rope_freqs.data)
        return st_seterr(L->ctx, ST_E_NOT_FOUND, "%s: %s.rope.scaling.type llama3 needs tensor rope_freqs.weight",
                         L->path, L->arch);
    for (int64_t i = 0; m->rope_freqs.data && i < m->rope_freqs.ne0; i++) {
        const float f = ((const float *)m->rope_freqs.data)[i]; /* divisors of theta */
        if (!(f > 0) || f == INFINITY)
            return st_seterr(L->ctx, ST_E_FORMAT, "%s: tensor rope_freqs.weight[%lld] = %g must be finite and > 0",
                             L->path, (long long)i, f);
    }
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) return ST_E_NOMEM;
    for (int il = 0; il < hp->n_layer; il++)
        if ((rc = get_layer(L, hp, il, &m->layers[il]))) return rc;
    const st_layer *l0 = &m->layers[0];
    hp->has_qkv_bias = l0->bq.data != NULL;
    hp->has_qk_norm = l0->q_norm.data != NULL;
    for (int il = 1; il < hp->n_layer; il++)
        if ((m->layers[il].bq.data != NULL) != hp->has_qkv_bias ||
            (m->layers[il].q_norm.data != NULL) != hp->has_qk_norm)
            return st_seterr(L->ctx, ST_E_FORMAT, "%s: layer %d differs from layer 0 in biases or q/k norms",
                             L->path, il);
    return 0;
}

/* ---- fingerprint and sizes --------------------------------------------------------------- */

static void hash_tokenizer(st_gguf *g, XXH3_state_t *st) {
    for (int64_t i = 0; i < st_gguf_n_kv(g); i++) {
        const char *k = st_gguf_key_name(g, i);
        if (strncmp(k, "tokenizer.", 10) != 0) continue;
        XXH3_128bits_update(st, k, strlen(k) + 1);
        st_gguf_vtype vt = st_gguf_key_type(g, i);
        const char *s;
        size_t n;
        if (vt == ST_GGUF_STRING && st_gguf_get_str(g, k, &s, &n) == 0) {
            XXH3_128bits_update(st, s, n);
        } else if (vt == ST_GGUF_ARRAY) {
            st_gguf_vtype et;
            uint64_t cnt;
            const void *data;
            if (st_gguf_get_arr(g, k, &et, &cnt, &data)) continue;
            XXH3_128bits_update(st, &cnt, sizeof cnt);
            if (et == ST_GGUF_STRING) {
                for (uint64_t j = 0; j < cnt; j++)
                    if (st_gguf_get_arr_str(g, k, j, &s, &n) == 0) {
                        XXH3_128bits_update(st, s, n);
                        XXH3_128bits_update(st, "", 1);
                    }
            } else if (data) {
                static const uint8_t sz[ST_GGUF_VTYPE_COUNT_] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
                if ((unsigned)et < ST_GGUF_VTYPE_COUNT_) XXH3_128bits_update(st, data, cnt * sz[et]);
            }
        } else {
            uint64_t u;
            float f;
            if (st_gguf_get_u64(g, k, &u) == 0) XXH3_128bits_update(st, &u, sizeof u);
            else if (st_gguf_get_f32(g, k, &f) == 0) XXH3_128bits_update(st, &f, sizeof f);
        }
    }
}

static void compute_fingerprint(st_model *m) {
    XXH3_state_t *st = XXH3_createState();
    ST_ASSERT(st);
    XXH3_128bits_reset(st);
    XXH3_128bits_update(st, "strata-model-v1", 16);
    XXH3_128bits_update(st, &m->hp, sizeof m->hp); /* plain ints and floats: no padding holes */
    hash_tokenizer(m->g, st);
    for (int64_t i = 0; i < st_gguf_n_tensors(m->g); i++) {
        const st_gguf_tensor *t = st_gguf_tensor_at(m->g, i);
        XXH3_128bits_update(st, t->name, strlen(t->name) + 1);
        int32_t ty = t->type;
        XXH3_128bits_update(st, &ty, sizeof ty);
        XXH3_128bits_update(st, t->ne, sizeof t->ne);
        uint64_t h = XXH3_64bits(t->data, t->nbytes);
        XXH3_128bits_update(st, &h, sizeof h);
    }
    XXH128_hash_t h = XXH3_128bits_digest(st);
    XXH3_freeState(st);
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, h);
    memcpy(m->fingerprint, c.digest, 16);
}

static uint64_t wbytes(const st_wt *w) { return w->data ? (uint64_t)w->row_bytes * (uint64_t)w->ne1 : 0; }
static uint64_t wparams(const st_wt *w) { return w->data ? (uint64_t)w->ne0 * (uint64_t)w->ne1 : 0; }

static void compute_sizes(st_model *m) {
    uint64_t b = m->tok_embd.row_bytes + wbytes(&m->output_norm) + wbytes(&m->output) + wbytes(&m->rope_freqs);
    uint64_t p = wparams(&m->tok_embd) + wparams(&m->output_norm) + (m->hp.tied_output ? 0 : wparams(&m->output));
    for (int il = 0; il < m->hp.n_layer; il++) {
        const st_wt *w = &m->layers[il].attn_norm;
        for (size_t k = 0; k < sizeof(st_layer) / sizeof(st_wt); k++) {
            b += wbytes(&w[k]);
            p += wparams(&w[k]);
        }
    }
    m->weight_bytes = b;
    m->n_params = p;
    const st_model_hparams *hp = &m->hp;
    snprintf(m->desc, sizeof m->desc, "%s %dL %dd %d/%dh hd %d ff %d vocab %d ctx %d, %s weights (%s)",
             st_arch_name(hp->arch), hp->n_layer, hp->n_embd, hp->n_head, hp->n_head_kv, hp->head_dim, hp->n_ff,
             hp->n_vocab, hp->n_ctx_train, st_type_name(m->layers[0].wq.type),
             hp->tied_output ? "tied output" : "separate output");
}

/* w into the quad layout when k runs its type and shape in it, else into the panel layout
 * when its rows are long enough to be cut. */
static void pack_one(const st_kernels *k, st_model *m, st_wt *w) {
    if (!w->data) return;
    /* the loader's own copy of the file (ST_GGUF_OPEN_ANON), writable for now */
    void *data = (void *)(uintptr_t)w->data;
    if (st_quads_fit(k, w->type, w->ne1, w->ne0)) {
        if (st_pack_quads(w->type, data, w->ne1, w->ne0) == 0) {
            w->layout = ST_WLAYOUT_QUADS;
            m->n_quads++;
        }
    } else if (st_pack_panels(w->type, data, w->ne1, w->ne0) == 0) { /* ST_E_INVAL: rows too short to cut */
        w->layout = ST_WLAYOUT_PANELS;
        m->n_panels++;
    }
}

/* Rearranges the product weights that can take it into the quad layout (quant.h), in the
 * file's bytes read into our own memory: q4_0/q4_1/q5_0/q5_1 decode streams 4 rows at once
 * and converts each activation once per 4 rows; q4_K, q5_K, q6_K and q8_0 take quad blocks
 * whose kernels do 4 rows' per-block work at once (bench/matvec measures both). Other matrices
 * with rows over ST_PANEL_MAX_COLS take the panel layout (a panel's activation slice stays in
 * L1 beside the weight stream; docs/PERFORMANCE.md, quantized matvec). The embeddings
 * (rows looked up one at a time) and a tied output keep the row layout. After the
 * fingerprint, which is of the file's bytes. ST_WEIGHT_LAYOUT_ROWS keeps every matrix as in
 * the file (for comparisons). */
static void pack_weights(st_ctx *ctx, st_model *m, st_weight_layout layout) {
    if (layout == ST_WEIGHT_LAYOUT_ROWS || st_gguf_set_writable(m->g, 1)) return;
    /* without a ctx, the best table the CPU runs (what a default ctx would pick) */
    const st_kernels *k = st_kernels_get(ctx ? st_ctx_isa(ctx) : st_cpu_best_isa());
    if (!m->hp.tied_output) pack_one(k, m, &m->output);
    for (int il = 0; il < m->hp.n_layer; il++) {
        st_layer *ly = &m->layers[il];
        st_wt *lw[7] = {&ly->wq, &ly->wk, &ly->wv, &ly->wo, &ly->w_gate, &ly->w_up, &ly->w_down};
        for (int i = 0; i < 7; i++) pack_one(k, m, lw[i]);
    }
    st_gguf_set_writable(m->g, 0); /* cannot fail after the same call succeeded */
}

/* ---- public ------------------------------------------------------------------------------ */

/* Takes ownership of g (closed on error). Weights are rearranged (pack_weights) only when g
 * holds its own copy of the file, which st_gguf_set_writable checks. */
static int load_from(st_ctx *ctx, st_gguf *g, const char *path, st_weight_layout layout,
                     st_model **out) {
    st_model *m = calloc(1, sizeof *m);
    if (!m) {
        st_gguf_close(g);
        return ST_E_NOMEM;
    }
    m->g = g;
    char *arch = NULL;
    int rc = st_gguf_get_str_dup(m->g, "general.architecture", &arch);
    if (rc) {
        if (rc == ST_E_NOT_FOUND) rc = st_seterr(ctx, ST_E_FORMAT, "%s: no general.architecture string", path);
        goto fail;
    }
    struct loader L = {ctx, m->g, path, arch};
    if (st_arch_parse(arch) < 0) {
        rc = st_seterr(ctx, ST_E_UNSUPPORTED, "%s: unsupported architecture '%s' (strata runs llama, qwen2, qwen3)",
                       path, arch);
    } else {
        rc = read_hparams(&L, &m->hp);
    }
    if (!rc) {
        uint64_t nv = 0;
        st_gguf_vtype et;
        const void *d;
        int r2 = st_gguf_get_arr(m->g, "tokenizer.ggml.tokens", &et, &nv, &d);
        const st_gguf_tensor *te = st_gguf_find_tensor(m->g, "token_embd.weight");
        if (r2 == 0 && nv > 0 && nv <= ST_MODEL_MAX_VOCAB) m->hp.n_vocab = (int32_t)nv;
        else if (te && te->n_dims == 2 && te->ne[1] > 0 && te->ne[1] <= ST_MODEL_MAX_VOCAB)
            m->hp.n_vocab = (int32_t)te->ne[1];
        else
            rc = st_seterr(ctx, ST_E_FORMAT, "%s: cannot tell the vocabulary size (tokenizer.ggml.tokens)", path);
    }
    if (!rc) rc = get_tensors(&L, m);
    free(arch);
    if (rc) goto fail;
    compute_sizes(m);
    compute_fingerprint(m);
    pack_weights(ctx, m, layout);
    *out = m;
    return 0;
fail:
    st_model_destroy(m);
    return rc;
}

st_model_load_params st_model_load_default_params(void) {
    st_model_load_params p = {.use_mmap = 0, .layout = ST_WEIGHT_LAYOUT_AUTO};
    return p;
}

int st_model_load(st_ctx *ctx, const char *path, const st_model_load_params *params, st_model **out) {
    if (!out || !path) return ST_E_INVAL;
    *out = NULL;
    st_model_load_params p = params ? *params : st_model_load_default_params();
    if (p.layout != ST_WEIGHT_LAYOUT_AUTO && p.layout != ST_WEIGHT_LAYOUT_ROWS)
        return st_seterr(ctx, ST_E_INVAL, "%s: weight layout %d is not auto (0) or rows (1)", path,
                         (int)p.layout);
    st_gguf *g = NULL;
    /* Weights are read into huge-page-backed memory by default: decode streams every weight
     * once per token, and behind a file mapping its 4 KiB pages cost TLB misses (figures in
     * docs/PERFORMANCE.md, end to end). use_mmap maps the file instead (less RAM when several
     * processes share it). */
    int rc = st_gguf_open_flags(ctx, path, p.use_mmap ? 0 : ST_GGUF_OPEN_ANON, &g);
    if (rc) return rc;
    return load_from(ctx, g, path, p.layout, out);
}

int st_model_load_memory(st_ctx *ctx, const void *buf, size_t size, const char *name, st_model **out) {
    if (!out || !buf) return ST_E_INVAL;
    *out = NULL;
    st_gguf *g = NULL;
    int rc = st_gguf_open_memory(ctx, buf, size, name ? name : "(memory)", &g);
    if (rc) return rc;
    return load_from(ctx, g, name ? name : "(memory)", ST_WEIGHT_LAYOUT_AUTO, out);
}

void st_model_destroy(st_model *m) {
    if (!m) return;
    st_gguf_close(m->g);
    free(m->layers);
    free(m);
}

const st_model_hparams *st_model_get_hparams(const st_model *m) { return &m->hp; }
st_gguf *st_model_gguf(const st_model *m) { return m->g; }
void st_model_fingerprint(const st_model *m, uint8_t out[16]) { memcpy(out, m->fingerprint, 16); }
uint64_t st_model_weight_bytes(const st_model *m) { return m->weight_bytes; }
uint64_t st_model_n_params(const st_model *m) { return m->n_params; }
const char *st_model_desc(const st_model *m) { return m->desc; }
int st_model_n_quad_matrices(const st_model *m) { return m->n_quads; }
int st_model_n_panel_matrices(const st_model *m) { return m->n_panels; }
