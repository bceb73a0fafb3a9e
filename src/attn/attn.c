/* Attention driver, the part every call shares: the workspace, per-thread tiles, the walk
 * that turns a page into kernel blocks, and the set-up of a call. Decode (attn_decode.c)
 * and chunk (attn_chunk.c) split their work into items over these. */
#include "attn_drv.h"

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
    st_free_aligned(ws->q4);
    free(ws->items);
    free(ws->runs);
    free(ws->blk);
    free(ws);
}

st_isa st_attn_ws_isa(const st_attn_ws *ws) { return ws ? ws->kern->isa : ST_ISA_SCALAR; }

const st_attn_kernels *attn_ws_kernels(const st_attn_ws *ws) { return ws->kern; }

int attn_grow_floats(float **buf, size_t *cap, size_t n) {
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

int attn_grow_items(st_attn_ws *ws, size_t n_items, size_t n_runs) {
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

tile_layout attn_layout_for(size_t R, size_t D, size_t n_blk) {
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
    L.s = o, o += n_blk * R * ATTN_BLK;
    L.total = o;
    return L;
}

attn_tile attn_tile_at(st_attn_ws *ws, int ith, int R) {
    const int D = ws->g->head_dim;
    tile_layout L = attn_layout_for((size_t)R, (size_t)D, ws->n_blk);
    float *b = ws->thr + (size_t)ith * ws->thr_stride;
    attn_tile t = {
        .type = ws->g->type, .R = R, .D = D,
        .q = b + L.q, .lim = NULL, .m = b + L.m, .l = b + L.l, .acc = b + L.acc,
        .p = b + L.p, .bm = b + L.bm, .rm = (uint32_t *)(b + L.rm), .kf = b + L.kf, .vf = b + L.vf, .s = b + L.s,
    };
    return t;
}

void attn_tile_reset(const attn_tile *t) {
    for (int r = 0; r < t->R; r++) t->m[r] = -INFINITY;
    memset(t->l, 0, sizeof(float) * (size_t)t->R * ATTN_BLK);
    memset(t->acc, 0, sizeof(float) * (size_t)t->R * (size_t)t->D);
}

void attn_write_row(float *out, const float *acc, float m, const float *l_lanes, int D) {
    const float l = attn_lane_sum(l_lanes);
    if (m == -INFINITY || !(l > 0)) {
        memset(out, 0, sizeof(float) * (size_t)D);
        return;
    }
    float inv = 1.0f / l;
    for (int d = 0; d < D; d++) out[d] = acc[d] * inv;
}

/* Blocks of the longest decode run: ST_ATTN_SPLIT_TOKENS slots of a sliced page, or the
 * pages of a long list's run, ceil(P / ATTN_BLK) blocks each. */
static size_t run_blocks_max(const st_attn_geom *g) {
    if (g->page_size > ST_ATTN_MAX_PAGE_SIZE) return ST_ATTN_SPLIT_TOKENS / ATTN_BLK;
    return (size_t)st_attn_pages_per_run(g->page_size, INT64_MAX) *
           (size_t)((g->page_size + ATTN_BLK - 1) / ATTN_BLK);
}

/* The kernels for a head dimension: the workspace's, else (a dimension its vector width does
 * not divide) the widest table whose width does: AVX-512's falls back to AVX2's for head
 * dims of 8, 24, 40 ... (stories260K's is 8) rather than straight to the scalar one. */
static const st_attn_kernels *kernels_for(const st_attn_kernels *k, int head_dim) {
    if (head_dim % k->d_mult == 0) return k;
    if (k->isa == ST_ISA_AVX512 && head_dim % st_attn_kernels_avx2_.d_mult == 0) return &st_attn_kernels_avx2_;
    return &st_attn_kernels_scalar_;
}

int attn_begin_call(st_ctx *ctx, st_attn_ws *ws, const st_attn_geom *g, int R, int decode,
                      int *nth, st_threadpool **tp) {
    *tp = ctx ? st_ctx_threadpool(ctx) : NULL;
    *nth = *tp ? st_threadpool_n_threads(*tp) : 1;
    ws->k = kernels_for(ws->kern, g->head_dim);
    ws->g = g;
    ws->scale = g->scale > 0 ? g->scale : 1.0f / sqrtf((float)g->head_dim);
    ws->G = g->n_head / g->n_kv_head;
    ws->n_blk = decode && ws->k->run ? run_blocks_max(g) : 0;
    size_t stride = attn_layout_for((size_t)R, (size_t)g->head_dim, ws->n_blk).total;
    size_t need;
    if (__builtin_mul_overflow(stride, (size_t)*nth, &need) ||
        attn_grow_floats(&ws->thr, &ws->thr_cap, need))
        return st_seterr(ctx, ST_E_NOMEM, "attn: workspace of %zu floats x %d threads", stride, *nth);
    ws->thr_stride = stride;
    const size_t n_blk = ws->n_blk * 2 * (size_t)*nth;
    if (n_blk > ws->blk_cap) {
        attn_blk *b = malloc(n_blk * sizeof *b);
        if (!b) return st_seterr(ctx, ST_E_NOMEM, "attn: workspace of %zu blocks", n_blk);
        free(ws->blk);
        ws->blk = b;
        ws->blk_cap = n_blk;
    }
    return 0;
}
