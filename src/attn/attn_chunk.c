/* Chunk (prefill) attention: n queries with a causal mask. Items are (KV head, tile of T
 * queries) over the whole list: their partials would be too large to keep per run (n_q x
 * n_head x head_dim), and with 32 rows per tile each K/V element is reused enough that the
 * walk order hardly matters. The streaming form (st_attn_chunk_begin / fold / end) keeps
 * the online state in a caller buffer across windows of the list.
 */
#include "attn_drv.h"

/* ---- chunk --------------------------------------------------------------------------------- */

/* Thread ith's tile for query rows [q0, q0 + tn) of KV head kvh's group: scaled queries
 * (row j * G + gi) and each row's causal limit (its position). */
static attn_tile chunk_query_tile(st_attn_ws *ws, int ith, int32_t kvh, int32_t q0, int32_t tn) {
    const st_attn_geom *g = ws->g;
    const int G = ws->G, D = g->head_dim;
    const int R = G * tn;
    attn_tile t = attn_tile_at(ws, ith, R);
    float *qs = (float *)t.q;
    int64_t *lim = (int64_t *)(void *)(ws->thr + (size_t)ith * ws->thr_stride +
                                       attn_layout_for((size_t)R, (size_t)D, 0).lim);
    for (int32_t j = 0; j < tn; j++)
        for (int gi = 0; gi < G; gi++) {
            const float *qr = ws->q + ((size_t)(q0 + j) * g->n_head + (size_t)kvh * G + gi) * D;
            float *dst = qs + (size_t)(j * G + gi) * D;
            for (int d = 0; d < D; d++) dst[d] = qr[d] * ws->scale;
            lim[j * G + gi] = ws->pos0_q + q0 + j;
        }
    t.lim = lim;
    t.lim_min = ws->pos0_q + q0; /* row j's limit is pos0_q + q0 + j */
    return t;
}

/* Folds KV head kvh's list, up to position max_pos, into tile t. */
static void chunk_walk(st_attn_ws *ws, const attn_tile *t, int32_t kvh, int64_t max_pos) {
    const st_attn_geom *g = ws->g;
    const st_attn_seq *s = ws->seqs;
    const int32_t n = list_len(s, kvh);
    attn_batch bt;
    bt.k = ws->k, bt.n = 0;
    for (int32_t i = 0; i < n; i++) {
        if (i + ATTN_PF_PAGES < n) attn_prefetch_page(g, list_page(s, kvh, i + ATTN_PF_PAGES), kvh);
        attn_walk_page(&bt, t, g, list_page(s, kvh, i), kvh, 0, g->page_size, max_pos);
    }
    attn_batch_flush(&bt, 1);
}

/* Queries per tile for tiles of `rows` rows (queries x G group heads), at most n_q. */
static int32_t chunk_tile_queries(int rows, int32_t G, int32_t n_q) {
    int32_t T = rows / G > 1 ? rows / G : 1;
    return T > n_q ? (n_q > 0 ? n_q : 1) : T;
}

/* The items of a chunk call after attn_begin_call: (KV head, tile) pairs, and the call's
 * fields. 0 or ST_E_NOMEM. */
static int chunk_plan_items(st_ctx *ctx, st_attn_ws *ws, const st_attn_seq *seq, const float *q,
                            int32_t n_q, int64_t pos0_q, float *out, int32_t T, int32_t n_tiles) {
    const size_t n_items = (size_t)ws->g->n_kv_head * (size_t)n_tiles;
    if (attn_grow_items(ws, n_items, 0))
        return st_seterr(ctx, ST_E_NOMEM, "attn: chunk workspace for %zu tiles", n_items);
    size_t ni = 0;
    for (int32_t h = 0; h < ws->g->n_kv_head; h++)
        for (int32_t c = 0; c < n_tiles; c++) ws->items[ni++] = (attn_item){h, c};
    attn_items_begin(ws, ni);
    ws->seqs = seq;
    ws->q = q;
    ws->out = out;
    ws->T = T;
    ws->n_q = n_q;
    ws->pos0_q = pos0_q;
    return 0;
}

static void chunk_item(st_attn_ws *ws, int ith, const attn_item *it) {
    const st_attn_geom *g = ws->g;
    const int G = ws->G, D = g->head_dim;
    const int32_t kvh = it->seq, q0 = it->c * ws->T;
    const int32_t tn = ws->n_q - q0 < ws->T ? ws->n_q - q0 : ws->T;
    attn_tile t = chunk_query_tile(ws, ith, kvh, q0, tn);
    attn_tile_reset(&t);
    chunk_walk(ws, &t, kvh, ws->pos0_q + q0 + tn - 1);
    for (int32_t j = 0; j < tn; j++)
        for (int gi = 0; gi < G; gi++) {
            int r = j * G + gi;
            float *o = ws->out + ((size_t)(q0 + j) * g->n_head + (size_t)kvh * G + gi) * D;
            attn_write_row(o, t.acc + (size_t)r * D, t.m[r], t.l + (size_t)r * ATTN_BLK, D);
        }
}

static void chunk_task(void *arg, int ith, int nth) {
    st_attn_ws *ws = arg;
    for (const attn_item *it; (it = attn_next_item(ws));) chunk_item(ws, ith, it);
}

int st_attn_chunk(st_ctx *ctx, st_attn_ws *ws, const st_attn_geom *g, const st_attn_seq *seq,
                  const float *q, int32_t n_q, int64_t pos0_q, float *out) {
    if (!ws || !seq || n_q < 0 || (n_q > 0 && (!q || !out)))
        return st_seterr(ctx, ST_E_INVAL, "attn: chunk: NULL argument or n_q %d < 0", n_q);
    if (pos0_q < 0 || pos0_q > INT64_MAX / 4)
        return st_seterr(ctx, ST_E_INVAL, "attn: chunk: pos0_q %lld out of range", (long long)pos0_q);
    int rc = attn_check_geom(ctx, g);
    if (!rc) rc = attn_check_seq(ctx, g, seq, 0);
    if (rc || n_q == 0) return rc;
    const int32_t G = g->n_head / g->n_kv_head;
    const int32_t T = chunk_tile_queries(attn_ws_kernels(ws)->chunk_rows, G, n_q);
    int nth;
    st_threadpool *tp;
    if ((rc = attn_begin_call(ctx, ws, g, G * T, 0, &nth, &tp)) ||
        (rc = chunk_plan_items(ctx, ws, seq, q, n_q, pos0_q, out, T, (n_q + T - 1) / T)))
        return rc;
    if (tp && nth > 1 && ws->n_items > 1)
        st_threadpool_run(tp, chunk_task, ws);
    else
        chunk_task(ws, 0, 1);
    return 0;
}

/* ---- streaming entry points ------------------------------------------------------------
 * The per-(KV head, tile) online state lives in a caller buffer across windows; the kernels
 * fold blocks strictly in order and a block's result does not depend on which batch it was
 * queued in, so folding window after window equals one walk over the whole list. */

/* Chunk tiling, as st_attn_chunk chooses it. */
typedef struct chunk_plan {
    int32_t G, T, n_tiles;
    size_t block; /* floats per (KV head, tile) state block: m, l lanes, acc */
} chunk_plan;

static chunk_plan chunk_plan_for(const st_attn_geom *g, int32_t n_q) {
    chunk_plan c;
    c.G = g->n_head / g->n_kv_head;
    c.T = chunk_tile_queries(ATTN_CHUNK_ROWS, c.G, n_q);
    c.n_tiles = (n_q + c.T - 1) / c.T;
    const size_t R = (size_t)c.G * (size_t)c.T;
    c.block = r16(R) + R * ATTN_BLK + r16(R * (size_t)g->head_dim);
    return c;
}

static void chunk_state_rows(const chunk_plan *c, float *b, float **m, float **l, float **acc) {
    const size_t R = (size_t)c->G * (size_t)c->T;
    *m = b;
    *l = b + r16(R);
    *acc = *l + R * ATTN_BLK;
}

size_t st_attn_chunk_state_floats(const st_attn_geom *g, int32_t n_q) {
    if (attn_check_geom(NULL, g) || n_q < 1) return 0;
    chunk_plan c = chunk_plan_for(g, n_q);
    return c.block * (size_t)g->n_kv_head * (size_t)c.n_tiles;
}

int st_attn_chunk_begin(const st_attn_geom *g, int32_t n_q, float *state) {
    if (attn_check_geom(NULL, g) || n_q < 0 || (n_q > 0 && !state)) return ST_E_INVAL;
    if (n_q == 0) return 0;
    chunk_plan c = chunk_plan_for(g, n_q);
    const size_t n = (size_t)g->n_kv_head * (size_t)c.n_tiles;
    for (size_t i = 0; i < n; i++) {
        float *m, *l, *acc;
        chunk_state_rows(&c, state + i * c.block, &m, &l, &acc);
        memset(state + i * c.block, 0, sizeof(float) * c.block);
        for (size_t r = 0; r < (size_t)c.G * (size_t)c.T; r++) m[r] = -INFINITY;
    }
    return 0;
}

typedef struct chunk_fold_job {
    st_attn_ws *ws;
    chunk_plan plan;
    float *state;
} chunk_fold_job;

static void chunk_fold_item(const chunk_fold_job *job, int ith, const attn_item *it) {
    st_attn_ws *ws = job->ws;
    const int32_t kvh = it->seq, q0 = it->c * ws->T;
    const int32_t tn = ws->n_q - q0 < ws->T ? ws->n_q - q0 : ws->T;
    attn_tile t = chunk_query_tile(ws, ith, kvh, q0, tn);
    chunk_state_rows(&job->plan, job->state + ((size_t)kvh * job->plan.n_tiles + it->c) * job->plan.block,
                     &t.m, &t.l, &t.acc);
    chunk_walk(ws, &t, kvh, ws->pos0_q + q0 + tn - 1);
}

static void chunk_fold_task(void *arg, int ith, int nth) {
    const chunk_fold_job *job = arg;
    for (const attn_item *it; (it = attn_next_item(job->ws));) chunk_fold_item(job, ith, it);
}

int st_attn_chunk_fold(st_ctx *ctx, st_attn_ws *ws, const st_attn_geom *g,
                       const st_attn_seq *seq, const float *q, int32_t n_q, int64_t pos0_q,
                       float *state) {
    if (!ws || !seq || n_q < 0 || (n_q > 0 && (!q || !state)))
        return st_seterr(ctx, ST_E_INVAL, "attn: chunk_fold: NULL argument or n_q %d < 0", n_q);
    if (pos0_q < 0 || pos0_q > INT64_MAX / 4)
        return st_seterr(ctx, ST_E_INVAL, "attn: chunk_fold: pos0_q %lld out of range",
                         (long long)pos0_q);
    int rc = attn_check_geom(ctx, g);
    if (!rc) rc = attn_check_seq(ctx, g, seq, 0);
    if (rc || n_q == 0) return rc;
    if (seq->sel) return st_seterr(ctx, ST_E_INVAL, "attn: chunk_fold: selections not supported");
    chunk_fold_job job = {.ws = ws, .plan = chunk_plan_for(g, n_q), .state = state};
    int nth;
    st_threadpool *tp;
    if ((rc = attn_begin_call(ctx, ws, g, job.plan.G * job.plan.T, 0, &nth, &tp)) ||
        (rc = chunk_plan_items(ctx, ws, seq, q, n_q, pos0_q, NULL, job.plan.T, job.plan.n_tiles)))
        return rc;
    if (tp && nth > 1 && ws->n_items > 1) st_threadpool_run(tp, chunk_fold_task, &job);
    else chunk_fold_task(&job, 0, 1);
    return 0;
}

int st_attn_chunk_end(const st_attn_geom *g, int32_t n_q, const float *state, float *out) {
    if (attn_check_geom(NULL, g) || n_q < 0 || (n_q > 0 && (!state || !out))) return ST_E_INVAL;
    if (n_q == 0) return 0;
    chunk_plan c = chunk_plan_for(g, n_q);
    const int D = g->head_dim;
    for (int32_t h = 0; h < g->n_kv_head; h++)
        for (int32_t ti = 0; ti < c.n_tiles; ti++) {
            float *m, *l, *acc;
            chunk_state_rows(&c, (float *)state + ((size_t)h * c.n_tiles + ti) * c.block, &m, &l,
                             &acc);
            const int32_t q0 = ti * c.T, tn = n_q - q0 < c.T ? n_q - q0 : c.T;
            for (int32_t j = 0; j < tn; j++)
                for (int gi = 0; gi < c.G; gi++) {
                    int r = j * c.G + gi;
                    float *o = out + ((size_t)(q0 + j) * g->n_head + (size_t)h * c.G + gi) * D;
                    attn_write_row(o, acc + (size_t)r * D, m[r], l + (size_t)r * ATTN_BLK, D);
                }
        }
    return 0;
}
