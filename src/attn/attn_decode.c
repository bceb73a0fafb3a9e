/* Decode attention: the split of each sequence into runs over threads, and the merge.
 *
 * Decode work items. Each sequence's page list is cut into runs (ST_ATTN_SPLIT_TOKENS
 * tokens' worth of whole pages, at least one; a page larger than ST_ATTN_MAX_PAGE_SIZE, i.e.
 * a contiguous cache passed as one page, is cut into slices of ST_ATTN_SPLIT_TOKENS slots).
 * One item is one run of one sequence for ALL its KV heads, walked head after head: the KV
 * library stores a page's heads next to each other (K^T [n_kv_head][D][P], then V), so an
 * item reads the same page slabs throughout, and the kernel prefetches the next head's
 * blocks while it computes. A kernel with run() (AVX-512, AVX2) folds each head's run whole:
 * scores, one max, exponentials, then V (no online rescaling inside a run); the others get
 * the run's blocks in order through blocks(). With a per-head selection (Quest) head h
 * walks its own list; run c of head h is positions [c*pps, (c+1)*pps) of that list, so a
 * selection listing every page in order gives exactly the runs of dense.
 *
 * Reduction order. An item leaves a partial (m, l, acc) per KV head and query head in its
 * slot; after all items are done (end of the first dispatch), a second dispatch merges the
 * runs of each (sequence, KV head) in run order with a fixed formula. Threads take items
 * from an atomic counter, so who computes an item varies, but what it computes never
 * depends on who or when: results are bit-identical for any thread count, for a sequence
 * alone or in a batch, and for dense vs an all-pages selection.
 */
#include "attn_drv.h"

/* ---- decode ------------------------------------------------------------------------------ */

/* The merges' row updates, four lanes at a time with GCC vector types. Each element gets the
 * scalar formula's operations (a product and a sum, or a product, each rounded: this file is
 * built without FMA), so the vector form changes no bit; as plain loops they were a visible
 * share of a hot decode call (a run is ST_ATTN_SPLIT_TOKENS tokens, and every run costs
 * n_head x head_dim updates; docs/PERFORMANCE.md, decode attention). */
static inline void row_axpy(float *o, const float *a, float w, int D) { /* o += a * w */
    const attn_v4 wv = {w, w, w, w};
    int d = 0;
    for (; d + 4 <= D; d += 4) v4_store(o + d, v4_load(o + d) + v4_load(a + d) * wv);
    for (; d < D; d++) o[d] += a[d] * w;
}

static inline void row_scale(float *o, float s, int D) { /* o *= s */
    const attn_v4 sv = {s, s, s, s};
    int d = 0;
    for (; d + 4 <= D; d += 4) v4_store(o + d, v4_load(o + d) * sv);
    for (; d < D; d++) o[d] *= s;
}

static int32_t max_list_len(const st_attn_seq *s, int32_t H) {
    if (!s->sel) return s->n_pages;
    int32_t n = 0;
    for (int32_t h = 0; h < H; h++)
        if (s->n_sel[h] > n) n = s->n_sel[h];
    return n;
}

static attn_runs runs_for(const st_attn_geom *g, const st_attn_seq *s) {
    attn_runs r = {.pps = 1, .nsub = 1};
    int32_t n = max_list_len(s, g->n_kv_head);
    if (g->page_size > ST_ATTN_MAX_PAGE_SIZE) { /* a contiguous cache: slices of a page */
        r.nsub = (g->page_size + ST_ATTN_SPLIT_TOKENS - 1) / ST_ATTN_SPLIT_TOKENS;
        r.n_runs = n * r.nsub;
    } else {
        r.pps = s->run_pages > 0 ? s->run_pages : st_attn_pages_per_run(g->page_size, n);
        r.n_runs = (n + r.pps - 1) / r.pps;
    }
    if (r.n_runs < 1) r.n_runs = 1;
    return r;
}

/* ws->qs = q * scale (q_need floats) and, for run kernels, ws->q4: the same transposed in
 * groups of 4 rows per KV head (attn_tile.q4). 0 or ST_E_NOMEM. */
static int scale_queries(st_attn_ws *ws, const float *q, size_t q_need) {
    if (attn_grow_floats(&ws->qs, &ws->qs_cap, q_need)) return ST_E_NOMEM;
    float *restrict qs = ws->qs;
    const float scale = ws->scale;
    const attn_v4 sv = {scale, scale, scale, scale};
    size_t i = 0;
    for (; i + 4 <= q_need; i += 4) v4_store(qs + i, v4_load(q + i) * sv);
    for (; i < q_need; i++) qs[i] = q[i] * scale;
    if (!ws->n_blk) return 0;
    const size_t D = (size_t)ws->g->head_dim, G = (size_t)ws->G, n_grp = (G + 3) / 4;
    const size_t n_kvh = q_need / (G * D);
    if (attn_grow_floats(&ws->q4, &ws->q4_cap, n_kvh * n_grp * D * 4)) return ST_E_NOMEM;
    float *restrict dst = ws->q4;
    for (size_t h = 0; h < n_kvh; h++)
        for (size_t r0 = 0; r0 < G; r0 += 4) {
            const float *src = qs + (h * G + r0) * D;
            const size_t nr = G - r0 < 4 ? G - r0 : 4;
            size_t d = 0;
            if (nr == 4) /* 4x4 transposes */
                for (; d + 4 <= D; d += 4, dst += 16) {
                    const attn_v4 x0 = v4_load(src + d), x1 = v4_load(src + D + d);
                    const attn_v4 x2 = v4_load(src + 2 * D + d), x3 = v4_load(src + 3 * D + d);
                    const attn_v4 t0 = __builtin_shufflevector(x0, x1, 0, 4, 1, 5);
                    const attn_v4 t1 = __builtin_shufflevector(x0, x1, 2, 6, 3, 7);
                    const attn_v4 t2 = __builtin_shufflevector(x2, x3, 0, 4, 1, 5);
                    const attn_v4 t3 = __builtin_shufflevector(x2, x3, 2, 6, 3, 7);
                    v4_store(dst, __builtin_shufflevector(t0, t2, 0, 1, 4, 5));
                    v4_store(dst + 4, __builtin_shufflevector(t0, t2, 2, 3, 6, 7));
                    v4_store(dst + 8, __builtin_shufflevector(t1, t3, 0, 1, 4, 5));
                    v4_store(dst + 12, __builtin_shufflevector(t1, t3, 2, 3, 6, 7));
                }
            for (; d < D; d++, dst += 4)
                for (size_t r = 0; r < 4; r++) dst[r] = r < nr ? src[r * D + d] : 0.0f;
        }
    return 0;
}

/* Blocks of KV head h's run (list positions [i0, i1), slots [s0, s1) of each page) with a
 * valid slot, into out[]; their count. */
static int run_blocks(attn_blk *out, const attn_tile *t, const st_attn_geom *g,
                      const st_attn_seq *s, int32_t h, int32_t i0, int32_t i1, int32_t s0, int32_t s1) {
    int n = 0;
    const int32_t len = list_len(s, h);
    for (int32_t i = i0; i < i1 && i < len; i++) {
        const st_attn_page *p = list_page(s, h, i);
        const int32_t e = s1 < p->n_tokens ? s1 : p->n_tokens;
        for (int32_t x = s0; x < e; x += ATTN_BLK) {
            out[n] = page_blk(t, g, p, h, x, e);
            n += out[n].mask != 0;
        }
    }
    return n;
}

/* The part of its list an item covers: positions [*i0, *i1), slots [*s0, *s1) of each. */
static void item_range(const st_attn_ws *ws, const attn_item *it, int32_t *i0, int32_t *i1,
                       int32_t *s0, int32_t *s1) {
    const attn_runs *ru = &ws->runs[it->seq];
    *s0 = 0, *s1 = ws->g->page_size;
    if (ru->nsub > 1) {
        *i0 = it->c / ru->nsub, *i1 = *i0 + 1;
        *s0 = (it->c % ru->nsub) * ST_ATTN_SPLIT_TOKENS;
        *s1 = *s0 + ST_ATTN_SPLIT_TOKENS;
    } else {
        *i0 = it->c * ru->pps, *i1 = *i0 + ru->pps;
    }
}

/* decode_item with the kernel's run(): head after head, each run folded whole, the next
 * head's blocks listed first so the kernel can prefetch them. Before the last head the
 * thread claims its next item and lists that item's first blocks instead, so the reads do
 * not stop between items either (docs/PERFORMANCE.md, decode attention). Returns the claimed item (NULL: none left). */
static const attn_item *decode_item_runs(st_attn_ws *ws, int ith, const attn_item *it,
                                         const attn_tile *t0, float *slots, const float *qs,
                                         int32_t i0, int32_t i1, int32_t s0, int32_t s1) {
    const st_attn_geom *g = ws->g;
    const st_attn_seq *s = &ws->seqs[it->seq];
    const int32_t H = g->n_kv_head, G = ws->G, D = g->head_dim;
    const size_t moff = r16((size_t)G * D);
    attn_blk *buf[2] = {ws->blk + (size_t)ith * 2 * ws->n_blk, ws->blk + ((size_t)ith * 2 + 1) * ws->n_blk};
    attn_tile t[2] = {*t0, *t0};
    const attn_item *nx = NULL;
    int n[2];
    n[0] = run_blocks(buf[0], &t[0], g, s, 0, i0, i1, s0, s1);
    for (int32_t h = 0; h < H; h++) {
        const int c = h & 1;
        float *slot = slots + (size_t)h * ws->slot_stride;
        t[c].q = qs + (size_t)h * G * D;
        t[c].q4 = ws->q4 + ((size_t)it->seq * H + (size_t)h) * (((size_t)G + 3) / 4) * D * 4;
        t[c].acc = slot, t[c].m = slot + moff, t[c].l = t[c].m + r16((size_t)G);
        if (h + 1 < H) {
            n[c ^ 1] = run_blocks(buf[c ^ 1], &t[c ^ 1], g, s, h + 1, i0, i1, s0, s1);
        } else if ((nx = attn_next_item(ws))) { /* the next item's first head, to prefetch */
            int32_t j0, j1, u0, u1;
            item_range(ws, nx, &j0, &j1, &u0, &u1);
            n[c ^ 1] = run_blocks(buf[c ^ 1], &t[c ^ 1], g, &ws->seqs[nx->seq], 0, j0, j1, u0, u1);
        } else {
            n[c ^ 1] = 0;
        }
        if (n[c]) ws->k->run(&t[c], buf[c], n[c], buf[c ^ 1], n[c ^ 1]); /* writes m, l, acc */
        else attn_tile_reset(&t[c]);
    }
    return nx;
}

/* Computes item it; returns the thread's next item (NULL: none left). */
static const attn_item *decode_item(st_attn_ws *ws, int ith, const attn_item *it) {
    const st_attn_geom *g = ws->g;
    const st_attn_seq *s = &ws->seqs[it->seq];
    const attn_runs *ru = &ws->runs[it->seq];
    const int32_t H = g->n_kv_head, G = ws->G, D = g->head_dim;
    int32_t i0, i1, s0, s1;
    item_range(ws, it, &i0, &i1, &s0, &s1);
    attn_tile t = attn_tile_at(ws, ith, G);
    attn_batch bt;
    bt.k = ws->k, bt.n = 0;
    const size_t moff = r16((size_t)G * D);
    float *slots = ws->part + (size_t)(ru->slot0 + (int64_t)it->c * H) * ws->slot_stride;
    const float *qs = ws->qs + (size_t)it->seq * g->n_head * D;
    if (ws->n_blk) return decode_item_runs(ws, ith, it, &t, slots, qs, i0, i1, s0, s1);
    for (int32_t h = 0; h < H; h++) {
        float *slot = slots + (size_t)h * ws->slot_stride;
        t.acc = slot, t.m = slot + moff, t.l = t.m + r16((size_t)G);
        attn_tile_reset(&t);
    }
    /* head by head within the run (the order within a head, all that matters, is the
     * list's) */
    for (int32_t h = 0; h < H; h++) {
        const int32_t n = list_len(s, h);
        float *slot = slots + (size_t)h * ws->slot_stride;
        t.q = qs + (size_t)h * G * D;
        t.acc = slot, t.m = slot + moff, t.l = t.m + r16((size_t)G);
        for (int32_t i = i0; i < i1 && i < n; i++)
            attn_walk_page(&bt, &t, g, list_page(s, h, i), h, s0, s1, INT64_MAX);
    }
    attn_batch_flush(&bt, 1);
    return attn_next_item(ws);
}

static void decode_task(void *arg, int ith, int nth) {
    st_attn_ws *ws = arg;
    for (const attn_item *it = attn_next_item(ws); it;) it = decode_item(ws, ith, it);
}

/* Merges the runs of (sequence, KV head) pairs [ith-th share of n_seq * H], in run order. */
static void merge_task(void *arg, int ith, int nth) {
    st_attn_ws *ws = arg;
    const st_attn_geom *g = ws->g;
    const int32_t H = g->n_kv_head, G = ws->G, D = g->head_dim;
    const size_t ss = ws->slot_stride, moff = r16((size_t)G * D);
    int64_t p0, p1;
    st_split_range((int64_t)ws->n_seq * H, ith, nth, &p0, &p1);
    for (int64_t pair = p0; pair < p1; pair++) {
        const int32_t si = (int32_t)(pair / H), h = (int32_t)(pair % H);
        const attn_runs *ru = &ws->runs[si];
        for (int gi = 0; gi < G; gi++) {
            float *o = ws->out + ((size_t)si * g->n_head + (size_t)h * G + gi) * D;
            float M = -INFINITY;
            for (int32_t c = 0; c < ru->n_runs; c++) {
                float mc = ws->part[(size_t)(ru->slot0 + (int64_t)c * H + h) * ss + moff + gi];
                if (mc > M) M = mc;
            }
            memset(o, 0, sizeof(float) * (size_t)D);
            if (M == -INFINITY) continue;
            float L = 0;
            for (int32_t c = 0; c < ru->n_runs; c++) {
                const float *slot = ws->part + (size_t)(ru->slot0 + (int64_t)c * H + h) * ss;
                float mc = slot[moff + gi];
                if (mc == -INFINITY) continue;
                float w = expf(mc - M);
                L += attn_lane_sum(slot + moff + r16((size_t)G) + (size_t)gi * ATTN_BLK) * w;
                row_axpy(o, slot + (size_t)gi * D, w, D);
            }
            row_scale(o, 1.0f / L, D);
        }
    }
}

/* Plans a decode call after attn_begin_call: each sequence's runs and partial slots, the
 * scaled queries, the work items (run c of sequence i), and the call's fields. out may be
 * NULL (st_attn_decode_runs reads the partials instead). 0 or ST_E_NOMEM. */
static int decode_plan(st_ctx *ctx, st_attn_ws *ws, const st_attn_geom *g, const st_attn_seq *seqs,
                       int32_t n_seq, const float *q, float *out, size_t *n_items_out) {
    const int32_t H = g->n_kv_head;
    if (attn_grow_items(ws, 0, (size_t)n_seq))
        return st_seterr(ctx, ST_E_NOMEM, "attn: decode workspace for %d sequences", n_seq);
    size_t n_items = 0;
    for (int32_t i = 0; i < n_seq; i++) {
        ws->runs[i] = runs_for(g, &seqs[i]);
        ws->runs[i].slot0 = (int64_t)n_items * H;
        n_items += (size_t)ws->runs[i].n_runs;
    }
    ws->slot_stride = r16((size_t)ws->G * (size_t)g->head_dim) + r16((size_t)ws->G) +
                      (size_t)ws->G * ATTN_BLK;
    size_t part_need, q_need = (size_t)n_seq * (size_t)g->n_head * (size_t)g->head_dim;
    if (__builtin_mul_overflow(n_items * (size_t)H, ws->slot_stride, &part_need) ||
        attn_grow_floats(&ws->part, &ws->part_cap, part_need) || attn_grow_items(ws, n_items, 0) ||
        scale_queries(ws, q, q_need))
        return st_seterr(ctx, ST_E_NOMEM, "attn: decode workspace for %zu runs", n_items);
    size_t ni = 0;
    for (int32_t i = 0; i < n_seq; i++)
        for (int32_t c = 0; c < ws->runs[i].n_runs; c++) ws->items[ni++] = (attn_item){i, c};
    attn_items_begin(ws, ni);
    ws->seqs = seqs;
    ws->n_seq = n_seq;
    ws->q = q;
    ws->out = out;
    *n_items_out = ni;
    return 0;
}

int st_attn_decode_batch(st_ctx *ctx, st_attn_ws *ws, const st_attn_geom *g,
                         const st_attn_seq *seqs, int32_t n_seq, const float *q, float *out) {
    if (!ws || (n_seq > 0 && (!seqs || !q || !out)) || n_seq < 0)
        return st_seterr(ctx, ST_E_INVAL, "attn: decode: NULL argument or n_seq %d < 0", n_seq);
    int rc = attn_check_geom(ctx, g);
    if (rc) return rc;
    for (int32_t i = 0; i < n_seq; i++)
        if ((rc = attn_check_seq(ctx, g, &seqs[i], i))) return rc;
    if (n_seq == 0) return 0;
    const int32_t H = g->n_kv_head;
    int nth;
    st_threadpool *tp;
    size_t ni;
    if ((rc = attn_begin_call(ctx, ws, g, g->n_head / H, 1, &nth, &tp)) ||
        (rc = decode_plan(ctx, ws, g, seqs, n_seq, q, out, &ni)))
        return rc;
    if (tp && nth > 1) {
        if (ni > 1) st_threadpool_run(tp, decode_task, ws);
        else decode_task(ws, 0, 1);
        /* a small merge runs on the caller: a dispatch costs more (each pair's result is
         * the same whichever thread merges it) */
        if ((size_t)n_seq * H > 1 && ni * (size_t)g->n_head * (size_t)g->head_dim >= ATTN_MERGE_MIN_PARALLEL)
            st_threadpool_run(tp, merge_task, ws);
        else
            merge_task(ws, 0, 1);
    } else {
        decode_task(ws, 0, 1);
        merge_task(ws, 0, 1);
    }
    return 0;
}

int st_attn_decode(st_ctx *ctx, st_attn_ws *ws, const st_attn_geom *g, const st_attn_seq *seq,
                   const float *q, float *out) {
    if (!seq) return st_seterr(ctx, ST_E_INVAL, "attn: decode: seq is NULL");
    return st_attn_decode_batch(ctx, ws, g, seq, 1, q, out);
}

/* ---- streaming entry points ------------------------------------------------------------
 * The SSD tier computes a list in windows: st_attn_decode_runs leaves each run's partial
 * exactly as decode_item does, and st_attn_merge_runs is merge_task's formula in
 * merge_task's order, so the split is invisible in the bits. */

int32_t st_attn_runs_count(const st_attn_geom *g, const st_attn_seq *seq) {
    if (!g || !seq || g->n_kv_head < 1 || g->page_size < 1 || g->page_size > ST_ATTN_MAX_PAGE_SIZE)
        return 0;
    return runs_for(g, seq).n_runs;
}

int st_attn_decode_runs(st_ctx *ctx, st_attn_ws *ws, const st_attn_geom *g,
                        const st_attn_seq *seq, const float *q, float *parts, int32_t *n_runs) {
    if (n_runs) *n_runs = 0;
    if (!ws || !seq || !q || !parts)
        return st_seterr(ctx, ST_E_INVAL, "attn: decode_runs: NULL argument");
    int rc = attn_check_geom(ctx, g);
    if (!rc) rc = attn_check_seq(ctx, g, seq, 0);
    if (rc) return rc;
    if (g->page_size > ST_ATTN_MAX_PAGE_SIZE)
        return st_seterr(ctx, ST_E_INVAL, "attn: decode_runs: page_size %d > %d", g->page_size,
                         ST_ATTN_MAX_PAGE_SIZE);
    if (seq->run_pages < 0 || seq->run_pages > st_attn_pages_per_run(g->page_size, INT64_MAX))
        return st_seterr(ctx, ST_E_INVAL, "attn: decode_runs: run_pages %d", seq->run_pages);
    const int32_t H = g->n_kv_head, D = g->head_dim;
    int nth;
    st_threadpool *tp;
    size_t n_items;
    if ((rc = attn_begin_call(ctx, ws, g, g->n_head / H, 1, &nth, &tp)) ||
        (rc = decode_plan(ctx, ws, g, seq, 1, q, NULL, &n_items)))
        return rc;
    const int32_t G = ws->G;
    if (tp && nth > 1 && n_items > 1) st_threadpool_run(tp, decode_task, ws);
    else decode_task(ws, 0, 1);
    const size_t ss = ws->slot_stride, moff = r16((size_t)G * D), PF = ST_ATTN_PART_FLOATS(D);
    for (size_t c = 0; c < n_items; c++)
        for (int32_t h = 0; h < H; h++) {
            const float *slot = ws->part + (c * (size_t)H + (size_t)h) * ss;
            for (int32_t gi = 0; gi < G; gi++) {
                float *dst = parts + (c * (size_t)g->n_head + (size_t)h * G + gi) * PF;
                dst[0] = slot[moff + gi];
                dst[1] = attn_lane_sum(slot + moff + r16((size_t)G) + (size_t)gi * ATTN_BLK);
                memcpy(dst + 2, slot + (size_t)gi * D, sizeof(float) * (size_t)D);
            }
        }
    if (n_runs) *n_runs = (int32_t)n_items;
    return 0;
}

int st_attn_merge_runs(const st_attn_geom *g, const float *parts, int32_t n_runs, float *out) {
    if (attn_check_geom(NULL, g) || n_runs < 0 || !out || (n_runs > 0 && !parts)) return ST_E_INVAL;
    const int32_t NH = g->n_head, D = g->head_dim;
    const size_t PF = ST_ATTN_PART_FLOATS(D);
    for (int32_t hq = 0; hq < NH; hq++) {
        float *o = out + (size_t)hq * D;
        float M = -INFINITY;
        for (int32_t c = 0; c < n_runs; c++) {
            float mc = parts[((size_t)c * NH + hq) * PF];
            if (mc > M) M = mc;
        }
        memset(o, 0, sizeof(float) * (size_t)D);
        if (M == -INFINITY) continue;
        float L = 0;
        for (int32_t c = 0; c < n_runs; c++) {
            const float *pp = parts + ((size_t)c * NH + hq) * PF;
            float mc = pp[0];
            if (mc == -INFINITY) continue;
            float w = expf(mc - M);
            L += pp[1] * w;
            row_axpy(o, pp + 2, w, D);
        }
        row_scale(o, 1.0f / L, D);
    }
    return 0;
}
