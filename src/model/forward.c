/* The forward pass: embeddings -> n_layer x (RMSNorm, QKV, RoPE, paged GQA attention, output
 * projection, RMSNorm, SwiGLU FFN) -> RMSNorm -> logits, over chunks of tokens.
 *
 * A chunk is either one sequence's run of consecutive tokens (prefill: matrix-matrix
 * products, st_attn_chunk) or a set of sequences with one token each (decode:
 * matrix-vector products, st_attn_decode_batch). Every per-token computation reads only
 * that token's row, and the quant and attention kernels guarantee bit-identical rows
 * whatever the thread count or batch width, so a sequence's logits do not depend on what
 * else is in the batch as long as its own runs are cut the same way (st_runner_forward cuts
 * each run at multiples of n_batch from its start). */
#include "model/forward_int.h"
#include "strata/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

st_runner_params st_runner_default_params(void) {
    st_runner_params p = {.n_batch = 256, .n_ctx = 0};
    return p;
}

static size_t max_act_bytes(const st_model *m, int64_t cols_max) {
    size_t b = 0;
    static const st_type types[] = {ST_TYPE_F32, ST_TYPE_F16, ST_TYPE_BF16, ST_TYPE_Q8_0, ST_TYPE_Q4_1, ST_TYPE_Q4_K};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        int64_t bs = st_type_block_size(st_type_vec_dot_type(types[i]));
        if (bs <= 0) continue;
        size_t a = st_act_bytes(types[i], (cols_max + bs - 1) / bs * bs);
        if (a > b) b = a;
    }
    (void)m;
    return b;
}

void st_runner_destroy(st_runner *r) {
    if (!r) return;
    st_attn_ws_destroy(r->ws);
    st_free_aligned(r->x);
    st_free_aligned(r->xn);
    st_free_aligned(r->q);
    st_free_aligned(r->k);
    st_free_aligned(r->v);
    st_free_aligned(r->att);
    st_free_aligned(r->tmp);
    st_free_aligned(r->g);
    st_free_aligned(r->u);
    st_free_aligned(r->actq);
    free(r->rope);
    free(r->views);
    for (int32_t i = 0; r->qsel && i < r->n_batch; i++) st_kv_select_destroy(r->qsel[i]);
    free(r->qsel);
    free(r->qfrac);
    free(r->qbound);
    free(r->qskip);
    free(r->tap_seq);
    free(r->tap_pos);
    free(r);
}

int st_runner_set_act_tap(st_runner *r, st_act_tap_fn fn, void *user) {
    if (fn && !r->tap_pos) {
        r->tap_seq = malloc((size_t)r->n_batch * sizeof *r->tap_seq);
        r->tap_pos = malloc((size_t)r->n_batch * sizeof *r->tap_pos);
        if (!r->tap_seq || !r->tap_pos) return ST_E_NOMEM;
    }
    r->tap = fn;
    r->tap_user = user;
    return 0;
}

/* The projection about to run reads its rows for `site` of layer il, from chunk token row0. */
static inline void tap_at(st_runner *r, int il, st_act_site site, int32_t row0) {
    r->tap_layer = il, r->tap_site = site, r->tap_row0 = row0;
}

static float *falloc(size_t n) { return st_alloc_aligned((n ? n : 1) * sizeof(float), 64); }

int st_runner_create(st_ctx *ctx, const st_model *m, st_kv *kv, const st_runner_params *p, st_runner **out) {
    if (!out || !m || !kv) return ST_E_INVAL;
    *out = NULL;
    st_runner_params rp = p ? *p : st_runner_default_params();
    const st_model_hparams *hp = &m->hp;
    if (rp.n_batch <= 0) rp.n_batch = 256;
    if (rp.n_ctx <= 0) rp.n_ctx = hp->n_ctx_train;
    if (rp.n_ctx > hp->n_ctx_train)
        return st_seterr(ctx, ST_E_LIMIT, "context %d is larger than the model's %d", rp.n_ctx, hp->n_ctx_train);
    const st_kv_geometry *kg = st_kv_get_geometry(kv);
    if (kg->n_layer != hp->n_layer || kg->n_kv_head != hp->n_head_kv || kg->head_dim != hp->head_dim)
        return st_seterr(ctx, ST_E_INVAL, "KV geometry %d layers x %d heads x %d dims does not match the model's "
                         "%d x %d x %d", kg->n_layer, kg->n_kv_head, kg->head_dim, hp->n_layer, hp->n_head_kv,
                         hp->head_dim);
    st_runner *r = calloc(1, sizeof *r);
    if (!r) return ST_E_NOMEM;
    r->ctx = ctx;
    r->tp = st_ctx_threadpool(ctx);
    r->m = m;
    r->kv = kv;
    r->kern = st_kernels_get_ex(st_ctx_isa(ctx), st_ctx_amx(ctx));
    r->n_batch = rp.n_batch;
    r->n_ctx = rp.n_ctx;
    r->E = hp->n_embd;
    r->HQ = hp->n_head * hp->head_dim;
    r->HK = hp->n_head_kv * hp->head_dim;
    r->F = hp->n_ff;
    r->ag = (st_attn_geom){.n_head = hp->n_head, .n_kv_head = hp->n_head_kv, .head_dim = hp->head_dim,
                           .page_size = kg->page_size, .type = kg->type, .scale = 0};
    const size_t NB = (size_t)rp.n_batch, EQ = (size_t)(r->E > r->HQ ? r->E : r->HQ);
    int64_t cols_max = r->E > r->HQ ? r->E : r->HQ;
    if (r->F > cols_max) cols_max = r->F;
    r->act_row_max = max_act_bytes(m, cols_max);
    r->x = falloc(NB * r->E);
    r->xn = falloc(NB * EQ);
    r->q = falloc(NB * r->HQ);
    r->k = falloc(NB * r->HK);
    r->v = falloc(NB * r->HK);
    r->att = falloc(NB * r->HQ);
    r->tmp = falloc(NB * r->E);
    r->g = falloc(NB * r->F);
    r->u = falloc(NB * r->F);
    r->actq = st_alloc_aligned(NB * r->act_row_max + 64, 64);
    r->rope = malloc(NB * (size_t)(hp->n_rot ? hp->n_rot : 1) * sizeof(float));
    r->quest = st_kv_quest_default_params();
    r->qst.mass_mean = r->qst.mass_min = 1;
    r->views_cap = 64;
    r->views = malloc((size_t)r->views_cap * sizeof *r->views);
    int rc = st_attn_ws_create(st_ctx_isa(ctx), &r->ws);
    if (rc || !r->x || !r->xn || !r->q || !r->k || !r->v || !r->att || !r->tmp || !r->g || !r->u || !r->actq ||
        !r->rope || !r->views) {
        st_runner_destroy(r);
        return rc ? rc : ST_E_NOMEM;
    }
    *out = r;
    return 0;
}

double st_runner_last_seconds(const st_runner *r) { return r->last_s; }

void st_runner_set_progress(st_runner *r, st_runner_progress_fn fn, void *user) {
    r->progress = fn;
    r->progress_user = user;
}

/* ---- elementwise pieces (as ggml computes them) ------------------------------------------- */

static void rmsnorm(const st_runner *r, float *y, const float *x, const float *w, int64_t n) {
    r->kern->ops.rms_norm(n, y, x, w, r->m->hp.rms_eps);
}

static void add_bias(float *y, const st_wt *b, int32_t n_tok, int64_t ld) {
    if (!b->data) return;
    const float *bv = b->data;
    for (int32_t t = 0; t < n_tok; t++)
        for (int64_t i = 0; i < b->ne0; i++) y[t * ld + i] += bv[i];
}

/* ---- projections ------------------------------------------------------------------------- */

/* Ys[i][t][rows_i] = W_i . X[t] for i < n_w (all W_i have X's width `cols`). Quantizes X once
 * per distinct activation type; single-token steps batch equal-typed weights in one dispatch. */
static int project(st_runner *r, int32_t n_tok, const float *X, int64_t cols, const st_wt *const *W,
                   float *const *Y, int n_w) {
    st_type have = ST_TYPE_COUNT_;
    size_t arow = 0;
    for (int i = 0; i < n_w;) {
        const st_wt *w = W[i];
        st_type vdt = st_type_vec_dot_type(w->type);
        if (vdt != have) {
            int rc = st_quantize_act_rows(n_tok > 1 ? r->tp : NULL, r->kern, w->type, X, cols, n_tok, cols, r->actq);
            if (rc) return st_seterr(r->ctx, rc, "quantizing activations for %s: %s", w->name, st_strerror(rc));
            have = vdt;
            arow = st_act_bytes(w->type, cols);
            for (int32_t t = 0; r->tap && vdt != ST_TYPE_F32 && t < n_tok; t++) {
                const int32_t c = r->tap_row0 + t;
                r->tap(r->tap_user, r->tap_layer, r->tap_site, r->tap_seq[c], r->tap_pos[c], vdt,
                       r->actq + (size_t)t * arow, arow);
            }
        }
        if (n_tok == 1) {
            int j = i + 1;
            while (j < n_w && W[j]->type == w->type && W[j]->layout == w->layout) j++;
            const void *wd[4];
            int64_t rows[4];
            float *ys[4];
            int nm = j - i > 4 ? 4 : j - i;
            for (int t = 0; t < nm; t++) {
                wd[t] = W[i + t]->data;
                rows[t] = W[i + t]->ne1;
                ys[t] = Y[i + t];
            }
            int rc = st_matvec_multi_l(r->tp, r->kern, w->type, w->layout, nm, wd, rows, cols, r->actq, ys);
            if (rc) return st_seterr(r->ctx, rc, "matvec %s: %s", w->name, st_strerror(rc));
            i += nm;
        } else {
            int rc = st_matmul_l(r->tp, r->kern, w->type, w->layout, w->data, w->ne1, cols, n_tok, r->actq, Y[i],
                                 w->ne1);
            if (rc) return st_seterr(r->ctx, rc, "matmul %s: %s", w->name, st_strerror(rc));
            i++;
        }
    }
    return 0;
}

/* ---- attention ---------------------------------------------------------------------------- */

/* The sequence a failed multi-sequence KV call belongs to: the first of ids whose sticky error
 * is set (an I/O error fails just the sequences whose pages it touched), else -1. */
static st_kv_seq_id failed_of(const st_runner *r, const span *sp, int n_sp) {
    for (int s = 0; s < n_sp; s++)
        if (st_kv_seq_error(r->kv, sp[s].seq) < 0) return sp[s].seq;
    return n_sp == 1 ? sp[0].seq : -1;
}

/* A chunk's decode spans come first (rows [0, n_dec), one token each), then its prompt
 * pieces; the decode spans attend in one batched call, each prompt piece alone. */
static int attention(st_runner *r, int layer, const span *sp, int n_sp, int n_dec) {
    int rc = 0;
    int quest = 0;
    for (int s = 0; s < n_dec && !quest; s++) quest = st_fwd_span_sparse(r, &sp[s]);
    if (quest && (rc = st_fwd_quest_alloc(r))) return st_seterr(r->ctx, rc, "attention: out of memory");
    if (quest && (rc = st_fwd_quest_select(r, layer, sp, n_dec))) return rc;
    /* The KV library attends (SSD tier: fetching or streaming cold pages), bit-identical to
     * the kernels over the views. A verify run's tokens are entries of the same call, each
     * limited to the positions up to its own: the views a decode step at that length had. */
    if (n_dec) {
        const int32_t n_ent = sp[n_dec - 1].i0 + sp[n_dec - 1].n;
        st_kv_seq_id *ids = malloc((size_t)n_ent * sizeof *ids);
        int64_t *lens = malloc((size_t)n_ent * sizeof *lens);
        const st_kv_select **sel = malloc((size_t)n_ent * sizeof *sel);
        if (!ids || !lens || !sel) {
            free(ids), free(lens), free(sel);
            return st_seterr(r->ctx, ST_E_NOMEM, "attention: out of memory");
        }
        int any_lim = 0;
        for (int s = 0; s < n_dec; s++)
            for (int32_t t = 0; t < sp[s].n; t++) {
                const int32_t e = sp[s].i0 + t;
                ids[e] = sp[s].seq;
                lens[e] = sp[s].verify ? sp[s].pos0 + t + 1 : 0;
                sel[e] = quest && !sp[s].verify ? r->qsel[s] : NULL;
                any_lim |= sp[s].verify;
            }
        rc = st_kv_attend_decode_at(r->kv, r->ctx, r->ws, &r->ag, layer, ids, any_lim ? lens : NULL, n_ent,
                                    quest ? sel : NULL, r->q, r->att);
        free(ids), free(lens), free(sel);
        if (rc) r->failed_seq = failed_of(r, sp, n_dec);
    }
    for (int s = n_dec; s < n_sp && !rc; s++) {
        const size_t o = (size_t)sp[s].i0 * r->HQ;
        rc = st_kv_attend_chunk(r->kv, r->ctx, r->ws, &r->ag, layer, sp[s].seq, r->q + o, sp[s].n, sp[s].pos0,
                                r->att + o);
        if (rc) r->failed_seq = sp[s].seq;
    }
    return rc;
}

/* ---- one chunk ---------------------------------------------------------------------------- */

static void embed(st_runner *r, const int32_t *tokens, int32_t n) {
    const st_wt *e = &r->m->tok_embd;
    for (int32_t t = 0; t < n; t++) {
        int rc = st_dequantize_row(e->type, (const uint8_t *)e->data + (size_t)tokens[t] * e->row_bytes,
                                   r->x + (size_t)t * r->E, r->E);
        ST_ASSERT(rc == 0);
    }
}

/* ---- row-wise elementwise steps, split over threads when there are several tokens ---------- */

typedef enum row_op {
    OP_NORM,     /* xn[t] = rmsnorm(x[t]) * w */
    OP_ADD_NORM, /* x[t] += tmp[t] (+ bias); xn[t] = rmsnorm(x[t]) * w */
    OP_ADD,      /* x[t] += tmp[t] (+ bias) */
    OP_QK,       /* q/k/v biases, q/k norms, rope of token t */
    OP_SWIGLU,   /* g[t] = silu(g[t]) * u[t] */
} row_op;

struct rows_job {
    st_runner *r;
    const st_layer *ly;
    row_op op;
    const float *w;    /* norm weight */
    const st_wt *bias; /* OP_ADD*: bias added with tmp (data may be NULL) */
    int32_t n;
};

static void qk_row(st_runner *r, const st_layer *ly, int32_t t) {
    const st_model_hparams *hp = &r->m->hp;
    const int hd = hp->head_dim;
    float *q = r->q + (size_t)t * r->HQ, *k = r->k + (size_t)t * r->HK, *v = r->v + (size_t)t * r->HK;
    if (ly->bq.data) {
        add_bias(q, &ly->bq, 1, r->HQ);
        add_bias(k, &ly->bk, 1, r->HK);
        add_bias(v, &ly->bv, 1, r->HK);
    }
    if (ly->q_norm.data) {
        for (int h = 0; h < hp->n_head; h++) rmsnorm(r, q + h * hd, q + h * hd, ly->q_norm.data, hd);
        for (int h = 0; h < hp->n_head_kv; h++) rmsnorm(r, k + h * hd, k + h * hd, ly->k_norm.data, hd);
    }
    const float *cs = r->rope + (size_t)t * hp->n_rot;
    st_rope_apply(hp, cs, q, hp->n_head);
    st_rope_apply(hp, cs, k, hp->n_head_kv);
}

static void rows_task(void *arg, int ith, int nth) {
    const struct rows_job *j = arg;
    st_runner *r = j->r;
    const int64_t E = r->E, F = r->F;
    int64_t t0, t1;
    st_split_range(j->n, ith, nth, &t0, &t1);
    for (int64_t t = t0; t < t1; t++) {
        float *x = r->x + t * E, *xn = r->xn + t * E, *tmp = r->tmp + t * E;
        switch (j->op) {
        case OP_ADD:
        case OP_ADD_NORM:
            add_bias(tmp, j->bias, 1, E);
            for (int64_t i = 0; i < E; i++) x[i] += tmp[i];
            if (j->op == OP_ADD) break;
            /* fall through */
        case OP_NORM:
            rmsnorm(r, xn, x, j->w, E);
            break;
        case OP_QK:
            qk_row(r, j->ly, (int32_t)t);
            break;
        case OP_SWIGLU: {
            float *g = r->g + t * F, *u = r->u + t * F;
            r->kern->ops.silu_mul(F, g, u);
            break;
        }
        }
    }
}

static void rows(st_runner *r, const st_layer *ly, row_op op, const float *w, const st_wt *bias, int32_t n) {
    struct rows_job j = {r, ly, op, w, bias, n};
    st_threadpool_run(n > 1 ? r->tp : NULL, rows_task, &j);
}

static int layer_forward(st_runner *r, int il, const span *sp, int n_sp, int32_t n, int n_dec) {
    const st_layer *ly = &r->m->layers[il];
    const int32_t E = r->E, HQ = r->HQ, HK = r->HK, F = r->F;
    int rc;
    /* x already holds this layer's input; the previous layer left its FFN output in tmp */
    const st_wt *wqkv[3] = {&ly->wq, &ly->wk, &ly->wv};
    float *yqkv[3] = {r->q, r->k, r->v};
    tap_at(r, il, ST_ACT_ATTN_IN, 0);
    if ((rc = project(r, n, r->xn, E, wqkv, yqkv, 3))) return rc;
    rows(r, ly, OP_QK, NULL, NULL, n);
    for (int s = 0; s < n_sp; s++) {
        rc = st_kv_write(r->kv, sp[s].seq, il, sp[s].pos0, sp[s].n, r->k + (size_t)sp[s].i0 * HK,
                         r->v + (size_t)sp[s].i0 * HK);
        if (rc) {
            r->failed_seq = sp[s].seq;
            return st_seterr(r->ctx, rc, "KV write (layer %d): %s", il, st_strerror(rc));
        }
    }
    if ((rc = attention(r, il, sp, n_sp, n_dec))) return rc;
    const st_wt *wo[1] = {&ly->wo};
    float *yo[1] = {r->tmp};
    tap_at(r, il, ST_ACT_ATTN_OUT, 0);
    if ((rc = project(r, n, r->att, HQ, wo, yo, 1))) return rc;
    rows(r, ly, OP_ADD_NORM, ly->ffn_norm.data, &ly->bo, n);
    const st_wt *wgu[2] = {&ly->w_gate, &ly->w_up};
    float *ygu[2] = {r->g, r->u};
    tap_at(r, il, ST_ACT_FFN_IN, 0);
    if ((rc = project(r, n, r->xn, E, wgu, ygu, 2))) return rc;
    rows(r, ly, OP_SWIGLU, NULL, NULL, n);
    const st_wt *wd[1] = {&ly->w_down};
    float *yd[1] = {r->tmp};
    tap_at(r, il, ST_ACT_FFN_MID, 0);
    if ((rc = project(r, n, r->g, F, wd, yd, 1))) return rc;
    /* the residual add fused with the next layer's attention norm */
    static const st_wt no_bias;
    if (il + 1 < r->m->hp.n_layer) rows(r, ly, OP_ADD_NORM, r->m->layers[il + 1].attn_norm.data, &no_bias, n);
    else rows(r, ly, OP_ADD, NULL, &no_bias, n);
    return 0;
}

/* Logits of the chunk tokens with out_row[t] >= 0, written to logits + out_row[t] * n_vocab.
 * Consecutive destination rows go through one product. */
static int output(st_runner *r, int32_t n, const int32_t *out_row, float *logits) {
    const st_model_hparams *hp = &r->m->hp;
    const st_wt *wout[1] = {&r->m->output};
    for (int32_t t = 0; t < n;) {
        if (out_row[t] < 0) {
            t++;
            continue;
        }
        int32_t t1 = t + 1;
        while (t1 < n && out_row[t1] == out_row[t1 - 1] + 1) t1++;
        for (int32_t j = t; j < t1; j++)
            rmsnorm(r, r->xn + (size_t)(j - t) * r->E, r->x + (size_t)j * r->E, r->m->output_norm.data, r->E);
        float *y[1] = {logits + (size_t)out_row[t] * hp->n_vocab};
        /* project writes [n][n_vocab] packed: exactly consecutive logits rows */
        tap_at(r, hp->n_layer, ST_ACT_OUTPUT, t);
        int rc = project(r, t1 - t, r->xn, r->E, wout, y, 1);
        if (rc) return rc;
        t = t1;
    }
    return 0;
}

/* Runs n tokens: spans sp[0..n_sp) cover [0, n) in order, the n_dec decode spans first. */
static int run_chunk(st_runner *r, const int32_t *tokens, span *sp, int n_sp, int n_dec, int32_t n,
                     const int32_t *out_row, float *logits) {
    const st_model_hparams *hp = &r->m->hp;
    int rc;
    for (int s = 0; s < n_sp; s++) {
        rc = st_kv_seq_reserve(r->kv, sp[s].seq, sp[s].n, tokens + sp[s].i0, &sp[s].pos0);
        if (rc) {
            r->failed_seq = sp[s].seq;
            return st_seterr(r->ctx, rc, "KV reserve of %d tokens: %s", sp[s].n, st_strerror(rc));
        }
        for (int32_t t = 0; t < sp[s].n; t++)
            st_rope_cache(hp, r->m->rope_freqs.data, sp[s].pos0 + t, r->rope + (size_t)(sp[s].i0 + t) * hp->n_rot);
        for (int32_t t = 0; r->tap && t < sp[s].n; t++) {
            r->tap_seq[sp[s].i0 + t] = sp[s].seq;
            r->tap_pos[sp[s].i0 + t] = sp[s].pos0 + t;
        }
    }
    embed(r, tokens, n);
    rows(r, NULL, OP_NORM, r->m->layers[0].attn_norm.data, NULL, n);
    const int32_t n_prefill = n - (n_dec ? sp[n_dec - 1].i0 + sp[n_dec - 1].n : 0);
    for (int il = 0; il < hp->n_layer; il++) {
        if ((rc = layer_forward(r, il, sp, n_sp, n, n_dec))) return rc;
        if (n_prefill && r->progress) r->progress(r->progress_user, r->prog_done += n_prefill, r->prog_total);
    }
    for (int s = 0; s < n_sp; s++)
        if ((rc = st_kv_seq_commit(r->kv, sp[s].seq))) {
            r->failed_seq = sp[s].seq;
            return st_seterr(r->ctx, rc, "KV commit: %s", st_strerror(rc));
        }
    return output(r, n, out_row, logits);
}

/* ---- public entry ------------------------------------------------------------------------- */

typedef struct run {
    st_kv_seq_id seq;
    int32_t i0, n;
    int64_t len0;   /* sequence length before the call */
    int prefill;    /* prompt tokens: chunk attention */
    int verify;     /* decode-attended run (st_batch.verify) */
    int64_t budget; /* Quest budget of the sequence's decode token (-1: the runner's) */
    double eps;     /* its certified-mode epsilon (< 0: the runner's) */
} run;

/* Splits the batch into runs of one sequence; checks ids, contiguity, lengths. */
static int plan_runs(st_runner *r, const st_batch *b, run **out, int *n_out) {
    run *rs = malloc((size_t)b->n_tokens * sizeof *rs);
    if (!rs) return ST_E_NOMEM;
    int nr = 0, rc = 0;
    for (int32_t i = 0; i < b->n_tokens; i++) {
        if (b->tokens[i] < 0 || b->tokens[i] >= r->m->hp.n_vocab) {
            rc = st_seterr(r->ctx, ST_E_INVAL, "token %d at batch index %d is outside the vocabulary [0, %d)",
                           b->tokens[i], i, r->m->hp.n_vocab);
            goto fail;
        }
        st_kv_seq_id s = b->seq ? b->seq[i] : b->seq_single;
        if (nr && rs[nr - 1].seq == s) {
            rs[nr - 1].n++;
            continue;
        }
        for (int j = 0; j < nr; j++)
            if (rs[j].seq == s) {
                rc = st_seterr(r->ctx, ST_E_INVAL,
                               "batch index %d: the tokens of sequence %lld are not contiguous",
                               i, (long long)s);
                goto fail;
            }
        rs[nr] = (run){.seq = s, .i0 = i, .n = 1, .prefill = b->prefill && b->prefill[i],
                       .verify = b->verify && b->verify[i],
                       .budget = b->quest_budget ? b->quest_budget[i] : -1,
                       .eps = b->quest_epsilon ? b->quest_epsilon[i] : -1};
        if (rs[nr].verify) rs[nr].prefill = 0;
        if ((rc = st_kv_seq_len(r->kv, s, &rs[nr].len0))) {
            r->failed_seq = s;
            rc = st_seterr(r->ctx, rc, "batch index %d: sequence %lld: %s", i, (long long)s,
                           st_strerror(rc));
            goto fail;
        }
        nr++;
    }
    for (int j = 0; j < nr; j++) {
        if (rs[j].n > 1 && !rs[j].verify) rs[j].prefill = 1;
        if (rs[j].budget < -1) {
            rc = st_seterr(r->ctx, ST_E_INVAL, "sequence %lld: Quest budget %lld", (long long)rs[j].seq,
                           (long long)rs[j].budget);
            goto fail;
        }
        if (!(rs[j].eps < 0 || rs[j].eps <= 1)) {
            rc = st_seterr(r->ctx, ST_E_INVAL, "sequence %lld: Quest epsilon %g (not in [0, 1])",
                           (long long)rs[j].seq, rs[j].eps);
            goto fail;
        }
        if (rs[j].len0 + rs[j].n > r->n_ctx) {
            r->failed_seq = rs[j].seq;
            rc = st_seterr(r->ctx, ST_E_LIMIT,
                           "sequence %lld: %lld + %d tokens exceed the context of %d tokens",
                           (long long)rs[j].seq, (long long)rs[j].len0, rs[j].n, r->n_ctx);
            goto fail;
        }
    }
    *out = rs;
    *n_out = nr;
    return 0;
fail:
    free(rs);
    return rc;
}

st_kv_seq_id st_runner_failed_seq(const st_runner *r) { return r->failed_seq; }

int st_runner_forward(st_runner *r, const st_batch *b, float *logits) {
    if (!r) return ST_E_INVAL;
    r->failed_seq = -1;
    if (!b || b->n_tokens <= 0 || !b->tokens) return st_seterr(r->ctx, ST_E_INVAL, "empty batch");
    double t0 = st_time_now();
    run *rs = NULL;
    int nr = 0;
    int rc = plan_runs(r, b, &rs, &nr);
    if (rc) return rc;
    int32_t *out_row = malloc((size_t)b->n_tokens * sizeof *out_row);
    span *sp = malloc((size_t)r->n_batch * sizeof *sp);
    int32_t *tok = malloc((size_t)r->n_batch * sizeof *tok), *orow = malloc((size_t)r->n_batch * sizeof *orow);
    if (!out_row || !sp || !tok || !orow) {
        rc = ST_E_NOMEM;
        goto done;
    }
    int32_t n_out = 0;
    for (int j = 0; j < nr; j++)
        for (int32_t i = rs[j].i0; i < rs[j].i0 + rs[j].n; i++) {
            int want = b->want_logits ? b->want_logits[i] != 0 : i == rs[j].i0 + rs[j].n - 1;
            out_row[i] = want ? n_out++ : -1;
        }
    if (n_out && !logits) {
        rc = st_seterr(r->ctx, ST_E_INVAL, "%d tokens want logits but no logits buffer was given", n_out);
        goto done;
    }
    r->prog_done = r->prog_total = 0;
    for (int j = 0; j < nr; j++)
        if (rs[j].prefill) r->prog_total += (int64_t)rs[j].n * r->m->hp.n_layer;
    /* Chunks of up to n_batch tokens: the decode tokens first (one batched attention call),
     * then the prompt runs in batch order, a run cut wherever a chunk fills up. Every token's
     * rows are computed alike in any chunk (see model.h), so the cut changes no bit. */
    int jd = 0, jp = 0;  /* next decode run; next prompt run */
    int32_t done_p = 0, done_d = 0;  /* tokens of run jp / jd already run */
    for (;;) {
        int n_sp = 0, n_dec = 0;
        int32_t n = 0;
        while (jd < nr && n < r->n_batch) {
            if (rs[jd].prefill) {
                jd++;
                continue;
            }
            int32_t k = rs[jd].n - done_d, room = r->n_batch - n;
            if (k > room) k = room;
            sp[n_sp++] = (span){.seq = rs[jd].seq, .i0 = n, .n = k, .verify = rs[jd].verify,
                                .budget = rs[jd].verify ? 0 : rs[jd].budget,
                                .eps = rs[jd].verify ? -1 : rs[jd].eps};
            memcpy(tok + n, b->tokens + rs[jd].i0 + done_d, (size_t)k * sizeof *tok);
            memcpy(orow + n, out_row + rs[jd].i0 + done_d, (size_t)k * sizeof *orow);
            n += k;
            done_d += k;
            if (done_d == rs[jd].n) jd++, done_d = 0;
        }
        n_dec = n_sp;
        while (jp < nr && n < r->n_batch) {
            if (!rs[jp].prefill) {
                jp++;
                continue;
            }
            int32_t k = rs[jp].n - done_p, room = r->n_batch - n;
            if (k > room) k = room;
            sp[n_sp++] = (span){.seq = rs[jp].seq, .i0 = n, .n = k, .prefill = 1, .budget = -1, .eps = -1};
            memcpy(tok + n, b->tokens + rs[jp].i0 + done_p, (size_t)k * sizeof *tok);
            memcpy(orow + n, out_row + rs[jp].i0 + done_p, (size_t)k * sizeof *orow);
            n += k;
            done_p += k;
            if (done_p == rs[jp].n) jp++, done_p = 0;
        }
        if (!n) break;
        if ((rc = run_chunk(r, tok, sp, n_sp, n_dec, n, orow, logits))) break;
    }
done:
    if (rc)
        for (int j = 0; j < nr; j++) {
            int64_t len;
            if (st_kv_seq_len(r->kv, rs[j].seq, &len) == 0 && len > rs[j].len0)
                st_kv_seq_truncate(r->kv, rs[j].seq, rs[j].len0);
        }
    free(rs);
    free(out_row);
    free(sp);
    free(tok);
    free(orow);
    r->last_s = st_time_now() - t0;
    return rc;
}
