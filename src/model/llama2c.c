/* llama2.c checkpoints (Karpathy's run.c format) and their tokenizer.bin, written as a
 * llama GGUF. The TinyStories models of that project (stories15M, 42M, 110M) are the
 * trained models most often passed around in that format; converting them once lets every
 * tool here run them as any other GGUF.
 *
 * The checkpoint's matrices are row-major [out][in] with RoPE over adjacent pairs, which is
 * GGUF llama's own layout, so rows are copied (or quantized) without permutation. */
#include "model/model_int.h"
#include "strata/quant.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define L2C_MAX_DIM (1 << 16)
#define L2C_MAX_VOCAB (1 << 20)
#define L2C_MAX_PIECE 4096
#define L2C_MAGIC_V1 0x616b3432u /* "ak42": llama2.c's export.py, versions 1 and 2 */

typedef struct l2c_shape {
    int32_t dim, hidden, n_layer, n_head, n_head_kv, n_vocab, seq_len;
    int shared; /* the classifier is the token embedding */
} l2c_shape;

/* Offsets (in floats) of each weight group in a legacy checkpoint, after the header. */
typedef struct l2c_layout {
    size_t embd, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, wcls, total;
} l2c_layout;

static int read_shape(st_ctx *ctx, const uint8_t *b, size_t n, const char *name, l2c_shape *s) {
    int32_t h[7];
    if (n < sizeof h) return st_seterr(ctx, ST_E_FORMAT, "%s: %zu bytes, shorter than a llama2.c header (28)", name, n);
    memcpy(h, b, sizeof h);
    if ((uint32_t)h[0] == L2C_MAGIC_V1) {
        int32_t ver = 0;
        if (n >= 8) memcpy(&ver, b + 4, 4);
        return st_seterr(ctx, ST_E_UNSUPPORTED,
                         "%s: llama2.c export version %d; only the legacy format (run.c's, no magic) is read: "
                         "export it with llama2.c's export.py --version 0",
                         name, ver);
    }
#define CHK_(c, ...) \
    if (!(c)) return st_seterr(ctx, ST_E_FORMAT, __VA_ARGS__)
    CHK_(h[5] != INT32_MIN, "%s: vocab_size %d out of range", name, h[5]);
    *s = (l2c_shape){h[0], h[1], h[2], h[3], h[4], h[5] < 0 ? -h[5] : h[5], h[6], h[5] > 0};
    CHK_(s->dim >= 2 && s->dim <= L2C_MAX_DIM, "%s: dim %d out of [2, %d]", name, s->dim, L2C_MAX_DIM);
    CHK_(s->hidden >= 1 && s->hidden <= 4 * L2C_MAX_DIM, "%s: hidden_dim %d out of [1, %d]", name, s->hidden,
         4 * L2C_MAX_DIM);
    CHK_(s->n_layer >= 1 && s->n_layer <= 1024, "%s: n_layers %d out of [1, 1024]", name, s->n_layer);
    CHK_(s->n_head >= 1 && s->dim % s->n_head == 0, "%s: dim %d is not a multiple of n_heads %d", name, s->dim,
         s->n_head);
    CHK_((s->dim / s->n_head) % 2 == 0, "%s: head size %d is odd (RoPE rotates pairs)", name, s->dim / s->n_head);
    CHK_(s->n_head_kv >= 1 && s->n_head % s->n_head_kv == 0, "%s: n_heads %d is not a multiple of n_kv_heads %d", name,
         s->n_head, s->n_head_kv);
    CHK_(s->n_vocab >= 3 && s->n_vocab <= L2C_MAX_VOCAB, "%s: vocab_size %d out of [3, %d]", name, s->n_vocab,
         L2C_MAX_VOCAB);
    CHK_(s->seq_len >= 1 && s->seq_len <= (1 << 24), "%s: seq_len %d out of [1, 2^24]", name, s->seq_len);
#undef CHK_
    return 0;
}

static l2c_layout layout_of(const l2c_shape *s) {
    const size_t E = (size_t)s->dim, L = (size_t)s->n_layer, F = (size_t)s->hidden, hd = E / (size_t)s->n_head,
                 KV = hd * (size_t)s->n_head_kv, V = (size_t)s->n_vocab;
    l2c_layout o;
    size_t at = 0;
#define AT_(f, n) o.f = at, at += (n)
    AT_(embd, V * E);
    AT_(rms_att, L * E);
    AT_(wq, L * E * E);
    AT_(wk, L * E * KV);
    AT_(wv, L * E * KV);
    AT_(wo, L * E * E);
    AT_(rms_ffn, L * E);
    AT_(w1, L * F * E);
    AT_(w2, L * E * F);
    AT_(w3, L * F * E);
    AT_(rms_final, E);
    at += 2 * (size_t)s->seq_len * (hd / 2); /* freq_cis_real, freq_cis_imag: RoPE tables run.c ignores */
    AT_(wcls, s->shared ? 0 : V * E);
#undef AT_
    o.total = at;
    if (s->shared) o.wcls = o.embd;
    return o;
}

/* ---- tokenizer.bin -------------------------------------------------------------------------- */

typedef struct l2c_vocab {
    char **text;
    float *score;
    int32_t *type;
    int32_t n;
} l2c_vocab;

static void vocab_free(l2c_vocab *v) {
    if (v->text)
        for (int32_t i = 0; i < v->n; i++) free(v->text[i]);
    free(v->text);
    free(v->score);
    free(v->type);
    memset(v, 0, sizeof *v);
}

/* The byte a piece of id 3..258 stands for, in the spellings llama2.c's exports use: "<0xXX>",
 * the raw byte, or the byte as a Latin-1 code point in UTF-8; -1 when it is none of them. */
static int byte_of(const uint8_t *p, int32_t len) {
    unsigned v;
    char tail;
    if (len == 6) {
        char buf[7];
        memcpy(buf, p, 6);
        buf[6] = 0;
        if (sscanf(buf, "<0x%2X>%c", &v, &tail) == 1 && buf[5] == '>') return (int)v;
    }
    if (len == 1) return p[0];
    if (len == 2 && (p[0] & 0xE0) == 0xC0 && (p[1] & 0xC0) == 0x80) {
        v = ((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu);
        return v >= 0x80 && v < 0x100 ? (int)v : -1;
    }
    return -1;
}

/* SPM's spelling of a piece: spaces become U+2581. */
static char *spm_text(const uint8_t *p, int32_t len) {
    size_t n = 0;
    for (int32_t i = 0; i < len; i++) n += p[i] == ' ' ? 3 : 1;
    char *s = malloc(n + 1), *o = s;
    if (!s) return NULL;
    for (int32_t i = 0; i < len; i++)
        if (p[i] == ' ') *o++ = (char)0xE2, *o++ = (char)0x96, *o++ = (char)0x81;
        else *o++ = (char)p[i];
    *o = 0;
    return s;
}

/* tokenizer.bin: int32 max_token_length, then per token float32 score, int32 length, bytes.
 * Ids 0, 1, 2 are <unk>, <s>, </s> (run.c's convention); 3..258 are byte tokens when their
 * pieces spell bytes 0x00..0xFF in order, as every SentencePiece byte-fallback vocabulary
 * does; the rest are normal pieces. */
static int read_vocab(st_ctx *ctx, const uint8_t *b, size_t n, const char *name, int32_t n_vocab, l2c_vocab *v) {
    memset(v, 0, sizeof *v);
    if (n < 4) return st_seterr(ctx, ST_E_FORMAT, "%s: %zu bytes, too short for a llama2.c tokenizer", name, n);
    int32_t max_len;
    memcpy(&max_len, b, 4);
    if (max_len < 1 || max_len > L2C_MAX_PIECE)
        return st_seterr(ctx, ST_E_FORMAT, "%s: max_token_length %d out of [1, %d]", name, max_len, L2C_MAX_PIECE);
    v->text = calloc((size_t)n_vocab, sizeof *v->text);
    v->score = calloc((size_t)n_vocab, sizeof *v->score);
    v->type = calloc((size_t)n_vocab, sizeof *v->type);
    if (!v->text || !v->score || !v->type) return vocab_free(v), ST_E_NOMEM;
    v->n = n_vocab;
    size_t at = 4;
    int bytes_ok = n_vocab >= 259;
    for (int32_t i = 0; i < n_vocab; i++) {
        int32_t len;
        if (n - at < 8) {
            vocab_free(v);
            return st_seterr(ctx, ST_E_FORMAT, "%s: ends at token %d of the model's %d (truncated, or not this "
                                               "model's tokenizer)", name, i, n_vocab);
        }
        memcpy(&v->score[i], b + at, 4);
        memcpy(&len, b + at + 4, 4);
        at += 8;
        if (len < 0 || len > max_len || (size_t)len > n - at) {
            vocab_free(v);
            return st_seterr(ctx, ST_E_FORMAT, "%s: token %d has length %d (max_token_length %d, %zu bytes left)", name,
                             i, len, max_len, n - at);
        }
        if (i >= 3 && i < 259 && byte_of(b + at, len) != i - 3) bytes_ok = 0;
        v->type[i] = 1;
        v->text[i] = len ? spm_text(b + at, len) : NULL;
        at += (size_t)len;
        if (len && !v->text[i]) return vocab_free(v), ST_E_NOMEM;
    }
    if (at != n) {
        vocab_free(v);
        return st_seterr(ctx, ST_E_FORMAT, "%s: %zu bytes after the model's %d tokens (a tokenizer for another "
                                           "vocabulary size?)", name, n - at, n_vocab);
    }
    static const char *const special[3] = {"<unk>", "<s>", "</s>"};
    for (int32_t i = 0; i < n_vocab; i++) {
        char buf[32];
        const char *fixed = NULL;
        if (i < 3) fixed = special[i], v->type[i] = i ? 3 : 2;
        else if (bytes_ok && i < 259) snprintf(buf, sizeof buf, "<0x%02X>", i - 3), fixed = buf, v->type[i] = 6;
        else if (!v->text[i]) snprintf(buf, sizeof buf, "<unused_%d>", i), fixed = buf, v->type[i] = 5;
        if (!fixed) continue;
        free(v->text[i]);
        if (!(v->text[i] = strdup(fixed))) return vocab_free(v), ST_E_NOMEM;
    }
    return 0;
}

/* ---- conversion ------------------------------------------------------------------------------ */

typedef struct l2c_tensor {
    char name[48];
    size_t off;    /* floats into the checkpoint body */
    int64_t ne0, ne1;
    void *data;    /* quantized rows, or NULL: written straight from the checkpoint (f32) */
} l2c_tensor;

static int set_meta(st_gguf_writer *w, const l2c_shape *s, const l2c_vocab *v, const char *model_name) {
    int rc = st_gguf_writer_set_str(w, "general.architecture", "llama");
    if (!rc) rc = st_gguf_writer_set_str(w, "general.name", model_name && *model_name ? model_name : "llama2.c");
    if (!rc) rc = st_gguf_writer_set_u32(w, "general.quantization_version", 2);
    if (!rc) rc = st_gguf_writer_set_u32(w, "llama.context_length", (uint32_t)s->seq_len);
    if (!rc) rc = st_gguf_writer_set_u32(w, "llama.embedding_length", (uint32_t)s->dim);
    if (!rc) rc = st_gguf_writer_set_u32(w, "llama.feed_forward_length", (uint32_t)s->hidden);
    if (!rc) rc = st_gguf_writer_set_u32(w, "llama.attention.head_count", (uint32_t)s->n_head);
    if (!rc) rc = st_gguf_writer_set_u32(w, "llama.attention.head_count_kv", (uint32_t)s->n_head_kv);
    if (!rc) rc = st_gguf_writer_set_u32(w, "llama.block_count", (uint32_t)s->n_layer);
    if (!rc) rc = st_gguf_writer_set_u32(w, "llama.rope.dimension_count", (uint32_t)(s->dim / s->n_head));
    if (!rc) rc = st_gguf_writer_set_u32(w, "llama.vocab_size", (uint32_t)s->n_vocab);
    /* run.c's constants: RoPE base 10000, RMS norm epsilon 1e-5 */
    if (!rc) rc = st_gguf_writer_set_f32(w, "llama.rope.freq_base", 10000.0f);
    if (!rc) rc = st_gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    if (!rc) rc = st_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    if (!rc) rc = st_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->text, (uint64_t)v->n);
    if (!rc) rc = st_gguf_writer_set_arr(w, "tokenizer.ggml.scores", ST_GGUF_FLOAT32, v->score, (uint64_t)v->n);
    if (!rc) rc = st_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", ST_GGUF_INT32, v->type, (uint64_t)v->n);
    if (!rc) rc = st_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    if (!rc) rc = st_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    if (!rc) rc = st_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    if (!rc) rc = st_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    if (!rc) rc = st_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false);
    return rc;
}

static int plan(const l2c_shape *s, const l2c_layout *o, l2c_tensor *ts) {
    const int64_t E = s->dim, F = s->hidden, KV = (int64_t)(s->dim / s->n_head) * s->n_head_kv, V = s->n_vocab;
    int n = 0;
#define T_(nm, at, a, b) ts[n++] = (l2c_tensor){.off = (at), .ne0 = (a), .ne1 = (b)}, snprintf(ts[n - 1].name, sizeof ts[0].name, "%s", nm)
    T_("token_embd.weight", o->embd, E, V);
    T_("output_norm.weight", o->rms_final, E, 0);
    /* output.weight even when shared, as llama.cpp's converter writes it: the classifier
     * then takes the matrices' type while the embedding rows stay exact */
    T_("output.weight", o->wcls, E, V);
    for (int il = 0; il < s->n_layer; il++) {
        char nm[48];
        const size_t l = (size_t)il;
#define B_(sfx, at, a, b) snprintf(nm, sizeof nm, "blk.%d.%s", il, sfx), T_(nm, at, a, b)
        B_("attn_q.weight", o->wq + l * (size_t)(E * E), E, E);
        B_("attn_k.weight", o->wk + l * (size_t)(E * KV), E, KV);
        B_("attn_v.weight", o->wv + l * (size_t)(E * KV), E, KV);
        B_("attn_output.weight", o->wo + l * (size_t)(E * E), E, E);
        B_("attn_norm.weight", o->rms_att + l * (size_t)E, E, 0);
        B_("ffn_gate.weight", o->w1 + l * (size_t)(F * E), E, F);
        B_("ffn_down.weight", o->w2 + l * (size_t)(E * F), F, E);
        B_("ffn_up.weight", o->w3 + l * (size_t)(F * E), E, F);
        B_("ffn_norm.weight", o->rms_ffn + l * (size_t)E, E, 0);
#undef B_
    }
#undef T_
    return n;
}

/* Writes to path, or into *out when path is NULL; mname and tname name the inputs in errors. */
static int convert(st_ctx *ctx, const void *model, size_t model_size, const char *mname, const void *tok,
                   size_t tok_size, const char *tname, const st_llama2c_params *p, const char *path, void **out,
                   size_t *out_size) {
    if (p->type != ST_TYPE_F32 && (!st_type_has_kernels(p->type) || st_type_vec_dot_type(p->type) == ST_TYPE_COUNT_))
        return st_seterr(ctx, ST_E_INVAL, "weight type %s has no kernels", st_type_name(p->type) ? st_type_name(p->type) : "?");
    l2c_shape s = {0};
    int rc = read_shape(ctx, model, model_size, mname, &s);
    if (rc) return rc;
    const l2c_layout o = layout_of(&s);
    if ((model_size - 28) % 4 || (model_size - 28) / 4 != o.total)
        return st_seterr(ctx, ST_E_FORMAT,
                         "%s: %zu bytes, but a llama2.c checkpoint of dim %d, hidden %d, %d layers, %d/%d heads, vocab "
                         "%d (%s classifier), seq_len %d holds %zu (truncated, or another format)",
                         mname, model_size, s.dim, s.hidden, s.n_layer, s.n_head, s.n_head_kv, s.n_vocab,
                         s.shared ? "shared" : "own", s.seq_len, 28 + 4 * o.total);
    l2c_vocab v;
    if ((rc = read_vocab(ctx, tok, tok_size, tname, s.n_vocab, &v))) return rc;
    /* the body after a 28-byte header is not float-aligned in a mapped file: copy it out */
    float *body = st_alloc_aligned(o.total * sizeof(float), 64);
    l2c_tensor *ts = calloc((size_t)s.n_layer * 9 + 3, sizeof *ts);
    st_gguf_writer *w = NULL;
    int nt = 0;
    if (!body || !ts) rc = ST_E_NOMEM;
    if (!rc) {
        memcpy(body, (const uint8_t *)model + 28, o.total * sizeof(float));
        rc = st_gguf_writer_create(ctx, &w);
    }
    if (!rc) rc = set_meta(w, &s, &v, p->name);
    if (!rc) nt = plan(&s, &o, ts);
    for (int i = 0; i < nt && !rc; i++) {
        l2c_tensor *t = &ts[i];
        const int64_t rows = t->ne1 ? t->ne1 : 1;
        /* norms stay f32; a matrix whose rows the type's blocks do not fit is f16 */
        st_type ty = t->ne1 ? p->type : ST_TYPE_F32;
        if (ty != ST_TYPE_F32 && t->ne0 % st_type_block_size(ty)) ty = ST_TYPE_F16;
        const float *src = body + t->off;
        const void *data = src;
        /* a NaN or an infinity is a damaged checkpoint, and no quantizer has a code for it */
        for (int64_t j = 0; j < rows * t->ne0 && !rc; j++)
            if (!isfinite(src[j]))
                rc = st_seterr(ctx, ST_E_FORMAT, "%s: %s row %lld holds %s (a damaged checkpoint)", mname, t->name,
                               (long long)(j / t->ne0), isnan(src[j]) ? "NaN" : "an infinity");
        if (rc) break;
        if (ty != ST_TYPE_F32) {
            const size_t rb = st_row_bytes(ty, t->ne0);
            if (!(t->data = st_alloc_aligned(rb * (size_t)rows, 64))) {
                rc = ST_E_NOMEM;
                break;
            }
            for (int64_t r = 0; r < rows && !rc; r++)
                rc = st_quantize_row(ty, src + r * t->ne0, (uint8_t *)t->data + (size_t)r * rb, t->ne0);
            data = t->data;
        }
        const int64_t ne[2] = {t->ne0, t->ne1};
        if (!rc) rc = st_gguf_writer_add_tensor(w, t->name, ty, t->ne1 ? 2 : 1, ne, data);
    }
    if (!rc) rc = path ? st_gguf_writer_write(w, path) : st_gguf_writer_write_memory(w, out, out_size);
    st_gguf_writer_destroy(w);
    for (int i = 0; i < nt; i++) st_free_aligned(ts[i].data);
    free(ts);
    st_free_aligned(body);
    vocab_free(&v);
    return rc;
}

/* The whole file into memory: checkpoints are read once, front to back. */
static int slurp(st_ctx *ctx, const char *path, uint8_t **buf, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return st_seterr(ctx, -errno, "%s: %s", path, strerror(errno));
    int rc = 0;
    long sz = -1;
    if (fseek(f, 0, SEEK_END) || (sz = ftell(f)) < 0 || fseek(f, 0, SEEK_SET))
        rc = st_seterr(ctx, -(errno ? errno : EIO), "%s: cannot size it: %s", path, strerror(errno ? errno : EIO));
    if (!rc && !(*buf = malloc(sz ? (size_t)sz : 1))) rc = ST_E_NOMEM;
    if (!rc && fread(*buf, 1, (size_t)sz, f) != (size_t)sz)
        rc = st_seterr(ctx, -EIO, "%s: short read", path), free(*buf), *buf = NULL;
    fclose(f);
    *n = rc ? 0 : (size_t)sz;
    return rc;
}

int st_llama2c_convert(st_ctx *ctx, const char *model_path, const char *tok_path, const st_llama2c_params *p,
                       const char *out_path) {
    if (!model_path || !tok_path || !p || !out_path) return ST_E_INVAL;
    uint8_t *mb = NULL, *tb = NULL;
    size_t mn = 0, tn = 0;
    int rc = slurp(ctx, model_path, &mb, &mn);
    if (!rc) rc = slurp(ctx, tok_path, &tb, &tn);
    if (!rc) rc = convert(ctx, mb, mn, model_path, tb, tn, tok_path, p, out_path, NULL, NULL);
    free(mb);
    free(tb);
    return rc;
}

int st_llama2c_convert_memory(st_ctx *ctx, const void *model, size_t model_size, const void *tok, size_t tok_size,
                              const st_llama2c_params *p, void **out, size_t *out_size) {
    if (!model || !tok || !p || !out || !out_size) return ST_E_INVAL;
    *out = NULL;
    *out_size = 0;
    return convert(ctx, model, model_size, "model", tok, tok_size, "tokenizer", p, NULL, out, out_size);
}
