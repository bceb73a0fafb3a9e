/* Private to the attention driver (attn.c: workspace, tiles, the page walk; attn_decode.c;
 * attn_chunk.c): the workspace, the work items and the helpers they share. The kernels'
 * interface is attn_int.h. */
#ifndef STRATA_ATTN_DRV_H
#define STRATA_ATTN_DRV_H

#include "attn_int.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define ATTN_CHUNK_ROWS 32 /* rows (queries x group heads) per streaming chunk tile */
#define ATTN_PF_PAGES 1    /* software prefetch distance, in pages of the list */
#define ATTN_PF_MAX_BYTES (64 << 10) /* larger "pages" (contiguous caches): leave it to HW */
/* Row updates (runs x query heads x head_dim) below which the decode merge runs on the
 * calling thread: about as much work as a dispatch and its wait cost (docs/PERFORMANCE.md,
 * end to end, thread pool).
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
    float *q4;           /* run kernels: qs per (sequence, KV head) as attn_tile.q4 wants */
    size_t q4_cap;
    attn_item *items;
    size_t items_cap;
    attn_runs *runs;     /* [n_seq] */
    size_t runs_cap;
    attn_blk *blk;       /* [n_thr][2][n_blk] decode runs' blocks (run kernels) */
    size_t blk_cap;
    size_t n_blk;        /* blocks of the call's longest decode run; 0: blocks() folds runs */
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

static inline size_t r16(size_t n) { return (n + 15) & ~(size_t)15; }

/* GCC vector types: SIMD in the portable driver files (built for the baseline ISA). */
typedef float attn_v4 __attribute__((vector_size(16)));

static inline attn_v4 v4_load(const float *p) {
    attn_v4 x;
    memcpy(&x, p, sizeof x);
    return x;
}

static inline void v4_store(float *p, attn_v4 x) { memcpy(p, &x, sizeof x); }

/* Per-thread tile layout for R rows of dimension D, in floats from the thread's base. */
typedef struct tile_layout {
    size_t q, lim, m, l, acc, p, bm, rm, kf, vf, s, total;
} tile_layout;

static inline int32_t list_len(const st_attn_seq *s, int32_t h) {
    return s->sel ? s->n_sel[h] : s->n_pages;
}

static inline const st_attn_page *list_page(const st_attn_seq *s, int32_t h, int32_t i) {
    return &s->pages[s->sel ? s->sel[(int64_t)h * s->sel_stride + i] : i];
}

/* Blocks queued for the kernel, so it can overlap consecutive ones (see attn_int.h). */
#define ATTN_BATCH 32
typedef struct attn_batch {
    const st_attn_kernels *k;
    int n;
    attn_tile t[ATTN_BATCH]; /* a copy of each block's tile: cheap, and keeps b[i].t valid */
    attn_blk b[ATTN_BATCH];
} attn_batch;

/* The block of slots [s, min(s + ATTN_BLK, s1)) of KV head h of page p, for tile t (its
 * mask may be 0: nothing valid there). s is a multiple of ATTN_BLK. */
static inline attn_blk page_blk(const attn_tile *t, const st_attn_geom *g, const st_attn_page *p,
                                int32_t h, int32_t s, int32_t s1) {
    const size_t D = (size_t)g->head_dim, es = attn_elem_size(g->type);
    const size_t off = (size_t)h * (size_t)g->page_size * D * es;
    const int n = s1 - s < ATTN_BLK ? s1 - s : ATTN_BLK;
    uint32_t mask = (uint32_t)((1ull << n) - 1);
    if (p->valid) mask &= (uint32_t)(p->valid[s / 64] >> (s % 64));
    return (attn_blk){
        .t = t,
        .k = (const char *)p->k + off + (size_t)s * es, .kstride = (size_t)g->page_size,
        .v = (const char *)p->v + off + (size_t)s * D * es,
        .ks = g->type == ST_TYPE_Q8_0 ? p->k_scale[h] : 1.0f,
        .vs = g->type == ST_TYPE_Q8_0 ? p->v_scale[h] : 1.0f,
        .mask = mask, .n = n, .slot = s, .pos0 = p->pos0 + s,
    };
}

/* The call's items are ws->items[0..n): hand them out from the first. */
static inline void attn_items_begin(st_attn_ws *ws, size_t n) {
    ws->n_items = (int64_t)n;
    atomic_store_explicit(&ws->next, 0, memory_order_relaxed);
}

/* The next work item of the call in flight, or NULL when all are taken. Threads take items
 * from an atomic counter; what an item computes never depends on who takes it. */
static inline const attn_item *attn_next_item(st_attn_ws *ws) {
    int64_t i = atomic_fetch_add_explicit(&ws->next, 1, memory_order_relaxed);
    return i < ws->n_items ? &ws->items[i] : NULL;
}

/* ---- the page walk: inline, the chunk tiles call it for every page of the list (a call
 * per page slowed long-context prefill; docs/PERFORMANCE.md, decode attention) ---- */

/* Prefetches KV head h of page p (when small enough to be worth it). */
static inline void attn_prefetch_page(const st_attn_geom *g, const st_attn_page *p, int32_t h) {
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

/* Folds the queued blocks. Unless final, the last ATTN_PF_BLOCKS stay queued (moved to
 * the front) so the kernel can prefetch them while it folds the others. */
static inline void attn_batch_flush(attn_batch *bt, int final) {
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
static inline void attn_walk_page(attn_batch *bt, const attn_tile *t, const st_attn_geom *g,
                                  const st_attn_page *p, int32_t h, int32_t s0, int32_t s1, int64_t max_pos) {
    if (s1 > p->n_tokens) s1 = p->n_tokens;
    if (s0 >= s1 || p->pos0 + s0 > max_pos) return;
    for (int32_t s = s0; s < s1; s += ATTN_BLK) {
        if (p->pos0 + s > max_pos) break;
        attn_blk b = page_blk(t, g, p, h, s, s1);
        if (!b.mask) continue;
        if (bt->n == ATTN_BATCH) attn_batch_flush(bt, 0);
        int i = bt->n++;
        bt->t[i] = *t;
        bt->b[i] = b;
        bt->b[i].t = &bt->t[i];
    }
}

/* ---- attn.c ---- */

/* Grows an aligned float buffer to n floats (zeroed, so scratch never holds uninitialized
 * bytes). Old contents are not kept. 0 or ST_E_NOMEM. */
int attn_grow_floats(float **buf, size_t *cap, size_t n);
/* Grows ws->items to n_items and ws->runs to n_runs. 0 or ST_E_NOMEM. */
int attn_grow_items(st_attn_ws *ws, size_t n_items, size_t n_runs);
/* n_blk: blocks of the longest decode run (0 for chunk calls), for the run kernel's scores. */
tile_layout attn_layout_for(size_t R, size_t D, size_t n_blk);
/* Thread ith's tile of R rows in the call in flight (pointers into its scratch). */
attn_tile attn_tile_at(st_attn_ws *ws, int ith, int R);
/* m = -inf, l = 0, acc = 0 */
void attn_tile_reset(const attn_tile *t);
/* out = acc / l, or zeros for a row that saw no token. */
void attn_write_row(float *out, const float *acc, float m, const float *l_lanes, int D);
/* Sets up a call: kernel table, scale, per-thread tiles of R rows. decode: a decode call,
 * whose runs go to the kernel's run() when it has one. 0 or ST_E_NOMEM (with ctx's message). */
int attn_begin_call(st_ctx *ctx, st_attn_ws *ws, const st_attn_geom *g, int R, int decode,
                    int *nth, st_threadpool **tp);

#endif
