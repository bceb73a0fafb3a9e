/* Attention driver: validation, workspace, the split of work over threads, and the merge.
 *
 * Decode work items. Each sequence's page list is cut into runs (ST_ATTN_SPLIT_TOKENS
 * tokens' worth of whole pages, at least one; a page larger than ST_ATTN_MAX_PAGE_SIZE, i.e.
 * a contiguous cache passed as one page, is cut into slices of ST_ATTN_SPLIT_TOKENS slots). One item is one run of one sequence
 * for ALL its KV heads, walked page by page and head by head inside a page: the KV library
 * stores a page's heads next to each other (K^T [n_kv_head][D][P], then V), so an item reads
 * each page slab front to back, and it prefetches the next pages' slabs while it computes.
 * With a per-head selection (Quest) head h walks its own list; run c of head h is
 * positions [c*pps, (c+1)*pps) of that list, so a selection listing every page in order
 * gives exactly the runs of dense.
 *
 * Reduction order. An item leaves a partial (m, l, acc) per KV head and query head in its
 * slot; after all items are done (end of the first dispatch), a second dispatch merges the
 * runs of each (sequence, KV head) in run order with a fixed formula. Threads take items
 * from an atomic counter, so who computes an item varies, but what it computes never
 * depends on who or when: results are bit-identical for any thread count, for a sequence
 * alone or in a batch, and for dense vs an all-pages selection.
 *
 * Chunk (prefill) items are (KV head, tile of T queries) over the whole list instead: their
 * partials would be too large to keep (n_q x n_head x head_dim per run), and with 32 rows
 * per tile each K/V element is reused enough that the walk order hardly matters.
 */
#include "attn_int.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

#define ATTN_CHUNK_ROWS 32 /* rows (queries x group heads) per chunk tile */
#define ATTN_PF_PAGES 1    /* software prefetch distance, in pages of the list */
#define ATTN_PF_MAX_BYTES (64 << 10) /* larger "pages" (contiguous caches): leave it to HW */
/* Row updates (runs x query heads x head_dim) below which the decode merge runs on the
 * calling thread: ~2-3 us of work, about what a dispatch and its wait cost on this VM.
 * With 256-token runs the small model (8 heads, head_dim 64) merges serially below an 8k
 * context, a 1B layer (32 heads) below 2k. */
#define ATTN_MERGE_MIN_PARALLEL (16 * 1024)

typedef struct attn_item {
    int32_t seq; /* decode: sequence; chunk: KV head */
    int32_t c;   /* decode: run; chunk: query tile */
} attn_item;

/* How a decode sequence is cut into runs. */
typedef struct attn_runs {
    int32_t n_runs;
    int32_t pps;   /* whole pages per run (nsub == 1) */
    int32_t nsub;  /* > 1: each page is cut into nsub slices of ST_ATTN_SPLIT_TOKENS slots */
    int64_t slot0; /* partial slot of run 0, KV head 0; run c head h: slot0 + c*H + h */
} attn_runs;

struct st_attn_ws {
    const st_attn_kernels *kern;
    float *thr;          /* [n_thr][thr_stride] per-thread tiles */
    size_t thr_cap;      /* floats allocated */
    size_t thr_stride;   /* floats per thread (multiple of 16) */
    float *part;         /* [n_slots][slot_stride] decode partials */
    size_t part_cap;
    size_t slot_stride;  /* acc [G][D], m [G] (each padded to 16 floats), l [G][ATTN_BLK] */
    float *qs;           /* [n_seq][n_head][D] decode queries times the scale */
    size_t qs_cap;
    attn_item *items;
    size_t items_cap;
    attn_runs *runs;     /* [n_seq] */
    size_t runs_cap;
    _Atomic int64_t next; /* next item to take */
    int64_t n_items;
    /* the call in flight */
    const st_attn_kernels *k; /* kern, or scalar when head_dim does not suit it */
    const st_attn_geom *g;
    const st_attn_seq *seqs;
    int32_t n_seq;
    const float *q;
    float *out;
    float scale;
    int32_t G, T, n_q;
    int64_t pos0_q;
};

static size_t r16(size_t n) { return (n + 15) & ~(size_t)15; }

/* ---- workspace ------------------------------------------------------------------------ */

int st_attn_ws_create(st_isa isa, st_attn_ws **out) {
    if (!out) return ST_E_INVAL;
    *out = NULL;
    const st_attn_kernels *k;
    switch (isa) {
    case ST_ISA_SCALAR: k = &st_attn_kernels_scalar_; break;
    case ST_ISA_AVX2: k = &st_attn_kernels_avx2_; break;
    case ST_ISA_AVX512: k = &st_attn_kernels_avx512_; break;
    default: return ST_E_INVAL;
    }
    if ((int)isa > (int)st_cpu_best_isa()) return ST_E_UNSUPPORTED;
    st_attn_ws *ws = calloc(1, sizeof *ws);
    if (!ws) return ST_E_NOMEM;
    ws->kern = k;
    *out = ws;
    return 0;
}

void st_attn_ws_destroy(st_attn_ws *ws) {
    if (!ws) return;
    st_free_aligned(ws->thr);
    st_free_aligned(ws->part);
    st_free_aligned(ws->qs);
    free(ws->items);
    free(ws->runs);
    free(ws);
}

st_isa st_attn_ws_isa(const st_attn_ws *ws) { return ws ? ws->kern->isa : ST_ISA_SCALAR; }

const st_attn_kernels *attn_ws_kernels(const st_attn_ws *ws) { return ws->kern; }

/* Grows an aligned float buffer to n floats (zeroed, so scratch never holds uninitialized
 * bytes). Old contents are not kept. */
static int grow_floats(float **buf, size_t *cap, size_t n) {
    if (n <= *cap) return 0;
    size_t bytes;
    if (__builtin_mul_overflow(n, sizeof(float), &bytes)) return ST_E_NOMEM;
    float *nb = st_alloc_aligned(bytes, 64);
    if (!nb) return ST_E_NOMEM;
    memset(nb, 0, bytes);
    st_free_aligned(*buf);
    *buf = nb;
    *cap = n;
    return 0;
}

static int grow_items(st_attn_ws *ws, size_t n_items, size_t n_runs) {
    if (n_items > ws->items_cap) {
        attn_item *p = malloc(n_items * sizeof *p);
        if (!p) return ST_E_NOMEM;
        free(ws->items);
        ws->items = p;
        ws->items_cap = n_items;
    }
    if (n_runs > ws->runs_cap) {
        attn_runs *p = malloc(n_runs * sizeof *p);
        if (!p) return ST_E_NOMEM;
        free(ws->runs);
        ws->runs = p;
        ws->runs_cap = n_runs;
    }
    return 0;
}

/* Per-thread tile layout for R rows of dimension D, in floats from the thread's base. */
typedef struct tile_layout {
    size_t q, lim, m, l, acc, p, bm, rm, kf, vf, total;
} tile_layout;

static tile_layout layout_for(size_t R, size_t D) {
    tile_layout L;
    size_t o = 0;
    L.q = o, o += r16(R * D);
    L.lim = o, o += r16(2 * R);
    L.m = o, o += r16(R);
    L.l = o, o += R * ATTN_BLK;
    L.acc = o, o += r16(R * D);
    L.p = o, o += r16(2 * R * ATTN_BLK);
    L.bm = o, o += r16(2 * (R + 16));
    L.rm = o, o += r16(R);
    L.kf = o, o += r16(2 * ATTN_BLK * D);
    L.vf = o, o += r16(ATTN_BLK * D);
    L.total = o;
    return L;
}

static attn_tile tile_at(st_attn_ws *ws, int ith, int R) {
    const int D = ws->g->head_dim;
    tile_layout L = layout_for((size_t)R, (size_t)D);
    float *b = ws->thr + (size_t)ith * ws->thr_stride;
    attn_tile t = {
        .type = ws->g->type, .R = R, .D = D,
        .q = b + L.q, .lim = NULL, .m = b + L.m, .l = b + L.l, .acc = b + L.acc,
        .p = b + L.p, .bm = b + L.bm, .rm = (uint32_t *)(b + L.rm), .kf = b + L.kf, .vf = b + L.vf,
    };
    return t;
}

/* ---- the page walk ---------------------------------------------------------------------- */

static inline int32_t list_len(const st_attn_seq *s, int32_t h) {
    return s->sel ? s->n_sel[h] : s->n_pages;
}

static inline const st_attn_page *list_page(const st_attn_seq *s, int32_t h, int32_t i) {
    return &s->pages[s->sel ? s->sel[(int64_t)h * s->sel_stride + i] : i];
}

static void prefetch_page(const st_attn_geom *g, const st_attn_page *p, int32_t h) {
    size_t es = attn_elem_size(g->type);
    size_t bytes = (size_t)p->n_tokens * (size_t)g->head_dim * es;
    if (bytes > ATTN_PF_MAX_BYTES || !p->n_tokens) return;
    size_t off = (size_t)h * (size_t)g->page_size * (size_t)g->head_dim * es;
    const char *k = (const char *)p->k + off, *v = (const char *)p->v + off;
    for (size_t o = 0; o < bytes; o += 64) {
        __builtin_prefetch(k + o, 0, 3);
        __builtin_prefetch(v + o, 0, 3);
    }
}

/* Blocks queued for the kernel, so it can overlap consecutive ones (see attn_int.h). */
#define ATTN_BATCH 32
typedef struct attn_batch {
    const st_attn_kernels *k;
    int n;
    attn_tile t[ATTN_BATCH]; /* a copy of each block's tile: cheap, and keeps b[i].t valid */
    attn_blk b[ATTN_BATCH];
} attn_batch;

/* Folds the queued blocks. Unless final, the last ATTN_PF_BLOCKS stay queued (moved to
 * the front) so the kernel can prefetch them while it folds the others. */
static void batch_flush(attn_batch *bt, int final) {
    if (!bt->n) return;
    const int keep = final || bt->n <= ATTN_PF_BLOCKS ? 0 : ATTN_PF_BLOCKS;
    const int run = bt->n - keep;
    bt->k->blocks(bt->b, run, keep);
    for (int i = 0; i < keep; i++) {
        bt->t[i] = bt->t[run + i];
        bt->b[i] = bt->b[run + i];
        bt->b[i].t = &bt->t[i];
    }
    bt->n = keep;
}

/* Queues slots [s0, s1) of KV head h of page p for tile t; slots after max_pos are not
 * visited. s0 is a multiple of ATTN_BLK. */
static void walk_page(attn_batch *bt, const attn_tile *t, const st_attn_geom *g,
                      const st_attn_page *p, int32_t h, int32_t s0, int32_t s1, int64_t max_pos) {
    if (s1 > p->n_tokens) s1 = p->n_tokens;
    if (s0 >= s1 || p->pos0 + s0 > max_pos) return;
    const size_t D = (size_t)g->head_dim, es = attn_elem_size(g->type);
    const size_t off = (size_t)h * (size_t)g->page_size * D * es;
    const float ks = g->type == ST_TYPE_Q8_0 ? p->k_scale[h] : 1.0f;
    const float vs = g->type == ST_TYPE_Q8_0 ? p->v_scale[h] : 1.0f;
    for (int32_t s = s0; s < s1; s += ATTN_BLK) {
        if (p->pos0 + s > max_pos) break;
        int n = s1 - s < ATTN_BLK ? s1 - s : ATTN_BLK;
        uint32_t mask = (uint32_t)((1ull << n) - 1);
        if (p->valid) mask &= (uint32_t)(p->valid[s / 64] >> (s % 64));
        if (!mask) continue;
        if (bt->n == ATTN_BATCH) batch_flush(bt, 0);
        int i = bt->n++;
        bt->t[i] = *t;
        bt->b[i] = (attn_blk){
            .t = &bt->t[i],
            .k = (const char *)p->k + off + (size_t)s * es, .kstride = (size_t)g->page_size,
            .v = (const char *)p->v + off + (size_t)s * D * es,
            .ks = ks, .vs = vs, .mask = mask, .n = n, .pos0 = p->pos0 + s,
        };
    }
}

static void tile_reset(const attn_tile *t) {
    for (int r = 0; r < t->R; r++) t->m[r] = -INFINITY;
    memset(t->l, 0, sizeof(float) * (size_t)t->R * ATTN_BLK);
    memset(t->acc, 0, sizeof(float) * (size_t)t->R * (size_t)t->D);
}

/* out = acc / l, or zeros for a row that saw no token. */
static void write_row(float *out, const float *acc, float m, const float *l_lanes, int D) {
    const float l = attn_lane_sum(l_lanes);
    if (m == -INFINITY || !(l > 0)) {
        memset(out, 0, sizeof(float) * (size_t)D);
        return;
    }
    float inv = 1.0f / l;
    for (int d = 0; d < D; d++) out[d] = acc[d] * inv;
}

/* ---- decode ------------------------------------------------------------------------------ */

/* The merges' row updates, four lanes at a time with GCC vector types. Each element gets the
 * scalar formula's operations (a product and a sum, or a product, each rounded: this file is
 * built without FMA), so the vector form changes no bit; as plain loops they were ~9% of a
 * hot decode call (perf) (a run is ST_ATTN_SPLIT_TOKENS tokens, and every run costs n_head x head_dim
 * updates). */
typedef float attn_v4 __attribute__((vector_size(16)));

static inline void row_axpy(float *o, const float *a, float w, int D) { /* o += a * w */
    const attn_v4 wv = {w, w, w, w};
    int d = 0;
    for (; d + 4 <= D; d += 4) {
        attn_v4 x, y;
        memcpy(&x, o + d, sizeof x);
        memcpy(&y, a + d, sizeof y);
        x += y * wv;
        memcpy(o + d, &x, sizeof x);
    }
    for (; d < D; d++) o[d] += a[d] * w;
}

static inline void row_scale(float *o, float s, int D) { /* o *= s */
    const attn_v4 sv = {s, s, s, s};
    int d = 0;
    for (; d + 4 <= D; d += 4) {
        attn_v4 x;
        memcpy(&x, o + d, sizeof x);
        x *= sv;
        memcpy(o + d, &x, sizeof x);
    }
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
        r.pps = st_attn_pages_per_run(g->page_size);
        r.n_runs = (n + r.pps - 1) / r.pps;
    }
    if (r.n_runs < 1) r.n_runs = 1;
    return r;
}

/* ws->qs = q * scale (q_need floats). 0 or ST_E_NOMEM. */
static int scale_queries(st_attn_ws *ws, const float *q, size_t q_need) {
    if (grow_floats(&ws->qs, &ws->qs_cap, q_need)) return ST_E_NOMEM;
    for (size_t i = 0; i < q_need; i++) ws->qs[i] = q[i] * ws->scale;
    return 0;
}

static void decode_item(st_attn_ws *ws, int ith, const attn_item *it) {
    const st_attn_geom *g = ws->g;
    const st_attn_seq *s = &ws->seqs[it->seq];
    const attn_runs *ru = &ws->runs[it->seq];
    const int32_t H = g->n_kv_head, G = ws->G, D = g->head_dim;
    int32_t i0, i1, s0 = 0, s1 = g->page_size;
    if (ru->nsub > 1) {
        i0 = it->c / ru->nsub, i1 = i0 + 1;
        s0 = (it->c % ru->nsub) * ST_ATTN_SPLIT_TOKENS;
        s1 = s0 + ST_ATTN_SPLIT_TOKENS;
    } else {
        i0 = it->c * ru->pps, i1 = i0 + ru->pps;
    }
    attn_tile t = tile_at(ws, ith, G);
    attn_batch bt;
    bt.k = ws->k, bt.n = 0;
    const size_t moff = r16((size_t)G * D);
    float *slots = ws->part + (size_t)(ru->slot0 + (int64_t)it->c * H) * ws->slot_stride;
    const float *qs = ws->qs + (size_t)it->seq * g->n_head * D;
    for (int32_t h = 0; h < H; h++) {
        float *slot = slots + (size_t)h * ws->slot_stride;
        t.acc = slot, t.m = slot + moff, t.l = t.m + r16((size_t)G);
        tile_reset(&t);
    }
    /* head by head within the run, so consecutive blocks share their rows and the kernel
     * can score them in pairs (the order within a head, all that matters, is the list's) */
    for (int32_t h = 0; h < H; h++) {
        const int32_t n = list_len(s, h);
        float *slot = slots + (size_t)h * ws->slot_stride;
        t.q = qs + (size_t)h * G * D;
        t.acc = slot, t.m = slot + moff, t.l = t.m + r16((size_t)G);
        for (int32_t i = i0; i < i1 && i < n; i++)
            walk_page(&bt, &t, g, list_page(s, h, i), h, s0, s1, INT64_MAX);
    }
    batch_flush(&bt, 1);
}

static void decode_task(void *arg, int ith, int nth) {
    st_attn_ws *ws = arg;
    for (;;) {
        int64_t i = atomic_fetch_add_explicit(&ws->next, 1, memory_order_relaxed);
        if (i >= ws->n_items) break;
        decode_item(ws, ith, &ws->items[i]);
    }
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

static int begin_call(st_ctx *ctx, st_attn_ws *ws, const st_attn_geom *g, int R, int *nth,
                      st_threadpool **tp) {
    *tp = ctx ? st_ctx_threadpool(ctx) : NULL;
    *nth = *tp ? st_threadpool_n_threads(*tp) : 1;
    ws->k = g->head_dim % ws->kern->d_mult ? &st_attn_kernels_scalar_ : ws->kern;
    ws->g = g;
    ws->scale = g->scale > 0 ? g->scale : 1.0f / sqrtf((float)g->head_dim);
    ws->G = g->n_head / g->n_kv_head;
    size_t stride = layout_for((size_t)R, (size_t)g->head_dim).total;
    size_t need;
    if (__builtin_mul_overflow(stride, (size_t)*nth, &need) ||
        grow_floats(&ws->thr, &ws->thr_cap, need))
        return st_seterr(ctx, ST_E_NOMEM, "attn: workspace of %zu floats x %d threads", stride, *nth);
    ws->thr_stride = stride;
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
    if ((rc = begin_call(ctx, ws, g, g->n_head / H, &nth, &tp))) return rc;
    if (grow_items(ws, 0, (size_t)n_seq))
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
        grow_floats(&ws->part, &ws->part_cap, part_need) || grow_items(ws, n_items, 0) ||
        scale_queries(ws, q, q_need))
        return st_seterr(ctx, ST_E_NOMEM, "attn: decode workspace for %zu runs", n_items);
    size_t ni = 0;
    for (int32_t i = 0; i < n_seq; i++)
        for (int32_t c = 0; c < ws->runs[i].n_runs; c++) ws->items[ni++] = (attn_item){i, c};
    ws->n_items = (int64_t)ni;
    atomic_store_explicit(&ws->next, 0, memory_order_relaxed);
    ws->seqs = seqs;
    ws->n_seq = n_seq;
    ws->q = q;
    ws->out = out;
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

/* ---- chunk --------------------------------------------------------------------------------- */

/* Thread ith's tile for query rows [q0, q0 + tn) of KV head kvh's group: scaled queries
 * (row j * G + gi) and each row's causal limit (its position). */
static attn_tile chunk_query_tile(st_attn_ws *ws, int ith, int32_t kvh, int32_t q0, int32_t tn) {
    const st_attn_geom *g = ws->g;
    const int G = ws->G, D = g->head_dim;
    const int R = G * tn;
    attn_tile t = tile_at(ws, ith, R);
    float *qs = (float *)t.q;
    int64_t *lim = (int64_t *)(void *)(ws->thr + (size_t)ith * ws->thr_stride +
                                       layout_for((size_t)R, (size_t)D).lim);
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

static void chunk_item(st_attn_ws *ws, int ith, const attn_item *it) {
    const st_attn_geom *g = ws->g;
    const st_attn_seq *s = ws->seqs;
    const int G = ws->G, D = g->head_dim;
    const int32_t kvh = it->seq, q0 = it->c * ws->T;
    const int32_t tn = ws->n_q - q0 < ws->T ? ws->n_q - q0 : ws->T;
    attn_tile t = chunk_query_tile(ws, ith, kvh, q0, tn);
    tile_reset(&t);
    const int64_t max_pos = ws->pos0_q + q0 + tn - 1;
    const int32_t n = list_len(s, kvh);
    attn_batch bt;
    bt.k = ws->k, bt.n = 0;
    for (int32_t i = 0; i < n; i++) {
        if (i + ATTN_PF_PAGES < n) prefetch_page(g, list_page(s, kvh, i + ATTN_PF_PAGES), kvh);
        walk_page(&bt, &t, g, list_page(s, kvh, i), kvh, 0, g->page_size, max_pos);
    }
    batch_flush(&bt, 1);
    for (int32_t j = 0; j < tn; j++)
        for (int gi = 0; gi < G; gi++) {
            int r = j * G + gi;
            float *o = ws->out + ((size_t)(q0 + j) * g->n_head + (size_t)kvh * G + gi) * D;
            write_row(o, t.acc + (size_t)r * D, t.m[r], t.l + (size_t)r * ATTN_BLK, D);
        }
}

static void chunk_task(void *arg, int ith, int nth) {
    st_attn_ws *ws = arg;
    for (;;) {
        int64_t i = atomic_fetch_add_explicit(&ws->next, 1, memory_order_relaxed);
        if (i >= ws->n_items) break;
        chunk_item(ws, ith, &ws->items[i]);
    }
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
    const int32_t H = g->n_kv_head, G = g->n_head / H;
    int32_t T = ATTN_CHUNK_ROWS / G > 1 ? ATTN_CHUNK_ROWS / G : 1;
    if (T > n_q) T = n_q;
    const int32_t n_tiles = (n_q + T - 1) / T;
    const size_t n_items = (size_t)H * (size_t)n_tiles;
    int nth;
    st_threadpool *tp;
    if ((rc = begin_call(ctx, ws, g, G * T, &nth, &tp))) return rc;
    if (grow_items(ws, n_items, 0))
        return st_seterr(ctx, ST_E_NOMEM, "attn: chunk workspace for %zu tiles", n_items);
    size_t ni = 0;
    for (int32_t h = 0; h < H; h++)
        for (int32_t c = 0; c < n_tiles; c++) {
            ws->items[ni++] = (attn_item){h, c};
        }
    ws->n_items = (int64_t)ni;
    atomic_store_explicit(&ws->next, 0, memory_order_relaxed);
    ws->seqs = seq;
    ws->q = q;
    ws->out = out;
    ws->T = T;
    ws->n_q = n_q;
    ws->pos0_q = pos0_q;
    if (tp && nth > 1 && ni > 1)
        st_threadpool_run(tp, chunk_task, ws);
    else
        chunk_task(ws, 0, 1);
    return 0;
}

/* ---- streaming entry points (issue 6) ---------------------------------------------------
 * The SSD tier computes a list in windows. Decode: st_attn_decode_runs leaves each run's
 * partial exactly as decode_item does, and st_attn_merge_runs is merge_task's formula in
 * merge_task's order, so the split is invisible in the bits. Chunk: the per-(KV head, tile)
 * online state lives in a caller buffer across windows; the kernels fold blocks strictly in
 * order and a block's result does not depend on which batch it was queued in, so folding
 * window after window equals one walk over the whole list. */

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
    const int32_t H = g->n_kv_head, D = g->head_dim;
    int nth;
    st_threadpool *tp;
    if ((rc = begin_call(ctx, ws, g, g->n_head / H, &nth, &tp))) return rc;
    if (grow_items(ws, 0, 1)) return st_seterr(ctx, ST_E_NOMEM, "attn: decode_runs workspace");
    ws->runs[0] = runs_for(g, seq);
    ws->runs[0].slot0 = 0;
    const size_t n_items = (size_t)ws->runs[0].n_runs;
    const int32_t G = ws->G;
    ws->slot_stride = r16((size_t)G * (size_t)D) + r16((size_t)G) + (size_t)G * ATTN_BLK;
    size_t part_need, q_need = (size_t)g->n_head * (size_t)D;
    if (__builtin_mul_overflow(n_items * (size_t)H, ws->slot_stride, &part_need) ||
        grow_floats(&ws->part, &ws->part_cap, part_need) || grow_items(ws, n_items, 0) ||
        scale_queries(ws, q, q_need))
        return st_seterr(ctx, ST_E_NOMEM, "attn: decode_runs workspace for %zu runs", n_items);
    for (size_t c = 0; c < n_items; c++) ws->items[c] = (attn_item){0, (int32_t)c};
    ws->n_items = (int64_t)n_items;
    atomic_store_explicit(&ws->next, 0, memory_order_relaxed);
    ws->seqs = seq;
    ws->n_seq = 1;
    ws->q = q;
    ws->out = NULL;
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

/* Chunk tiling, as st_attn_chunk chooses it. */
typedef struct chunk_plan {
    int32_t G, T, n_tiles;
    size_t block; /* floats per (KV head, tile) state block: m, l lanes, acc */
} chunk_plan;

static chunk_plan chunk_plan_for(const st_attn_geom *g, int32_t n_q) {
    chunk_plan c;
    c.G = g->n_head / g->n_kv_head;
    c.T = ATTN_CHUNK_ROWS / c.G > 1 ? ATTN_CHUNK_ROWS / c.G : 1;
    if (c.T > n_q) c.T = n_q;
    if (c.T < 1) c.T = 1;
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
    const st_attn_geom *g = ws->g;
    const st_attn_seq *s = ws->seqs;
    const int32_t kvh = it->seq, q0 = it->c * ws->T;
    const int32_t tn = ws->n_q - q0 < ws->T ? ws->n_q - q0 : ws->T;
    attn_tile t = chunk_query_tile(ws, ith, kvh, q0, tn);
    chunk_state_rows(&job->plan, job->state + ((size_t)kvh * job->plan.n_tiles + it->c) * job->plan.block,
                     &t.m, &t.l, &t.acc);
    const int64_t max_pos = ws->pos0_q + q0 + tn - 1;
    attn_batch bt;
    bt.k = ws->k, bt.n = 0;
    for (int32_t i = 0; i < s->n_pages; i++) {
        if (i + ATTN_PF_PAGES < s->n_pages) prefetch_page(g, &s->pages[i + ATTN_PF_PAGES], kvh);
        walk_page(&bt, &t, g, &s->pages[i], kvh, 0, g->page_size, max_pos);
    }
    batch_flush(&bt, 1);
}

static void chunk_fold_task(void *arg, int ith, int nth) {
    const chunk_fold_job *job = arg;
    for (;;) {
        int64_t i = atomic_fetch_add_explicit(&job->ws->next, 1, memory_order_relaxed);
        if (i >= job->ws->n_items) break;
        chunk_fold_item(job, ith, &job->ws->items[i]);
    }
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
    const int32_t H = g->n_kv_head;
    const size_t n_items = (size_t)H * (size_t)job.plan.n_tiles;
    int nth;
    st_threadpool *tp;
    if ((rc = begin_call(ctx, ws, g, job.plan.G * job.plan.T, &nth, &tp))) return rc;
    if (grow_items(ws, n_items, 0))
        return st_seterr(ctx, ST_E_NOMEM, "attn: chunk_fold workspace for %zu tiles", n_items);
    size_t ni = 0;
    for (int32_t h = 0; h < H; h++)
        for (int32_t c = 0; c < job.plan.n_tiles; c++) ws->items[ni++] = (attn_item){h, c};
    ws->n_items = (int64_t)ni;
    atomic_store_explicit(&ws->next, 0, memory_order_relaxed);
    ws->seqs = seq;
    ws->q = q;
    ws->out = NULL;
    ws->T = job.plan.T;
    ws->n_q = n_q;
    ws->pos0_q = pos0_q;
    if (tp && nth > 1 && ni > 1) st_threadpool_run(tp, chunk_fold_task, &job);
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
                    write_row(o, acc + (size_t)r * D, m[r], l + (size_t)r * ATTN_BLK, D);
                }
        }
    return 0;
}
