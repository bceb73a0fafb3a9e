/* Argument validation shared by every attention entry point, and the Quest page metadata
 * (key boxes and their bounds), which need the kernels but none of the decode driver. */
#include "attn_int.h"

#include <math.h>

/* ---- validation ----------------------------------------------------------------------- */

int attn_check_geom(st_ctx *ctx, const st_attn_geom *g) {
    if (!g) return st_seterr(ctx, ST_E_INVAL, "attn: geometry is NULL");
    if (g->n_head < 1 || g->n_head > ST_ATTN_MAX_HEADS || g->n_kv_head < 1 ||
        g->n_kv_head > g->n_head || g->n_head % g->n_kv_head)
        return st_seterr(ctx, ST_E_INVAL, "attn: n_head %d / n_kv_head %d (need 1 <= n_kv_head "
                         "dividing n_head <= %d)", g->n_head, g->n_kv_head, ST_ATTN_MAX_HEADS);
    if (g->head_dim < 1 || g->head_dim > ST_ATTN_MAX_HEAD_DIM)
        return st_seterr(ctx, ST_E_INVAL, "attn: head_dim %d not in [1, %d]", g->head_dim,
                         ST_ATTN_MAX_HEAD_DIM);
    if (g->page_size < 1 || g->page_size > ATTN_MAX_PAGE_SIZE_ANY)
        return st_seterr(ctx, ST_E_INVAL, "attn: page_size %d not in [1, %d]", g->page_size,
                         ATTN_MAX_PAGE_SIZE_ANY);
    if (g->type != ST_TYPE_F32 && g->type != ST_TYPE_F16 && g->type != ST_TYPE_BF16 &&
        g->type != ST_TYPE_Q8_0)
        return st_seterr(ctx, ST_E_INVAL, "attn: KV type %d is not f32, f16, bf16 or q8_0",
                         (int)g->type);
    if (!(g->scale >= 0 && g->scale < INFINITY))
        return st_seterr(ctx, ST_E_INVAL, "attn: scale %g is not a finite value >= 0",
                         (double)g->scale);
    return 0;
}

int attn_check_seq(st_ctx *ctx, const st_attn_geom *g, const st_attn_seq *s, int32_t si) {
    if (s->n_pages < 0 || (s->n_pages > 0 && !s->pages))
        return st_seterr(ctx, ST_E_INVAL, "attn: seq %d: n_pages %d with pages %p", si,
                         s->n_pages, (const void *)s->pages);
    for (int32_t i = 0; i < s->n_pages; i++) {
        const st_attn_page *p = &s->pages[i];
        if (p->n_tokens < 0 || p->n_tokens > g->page_size)
            return st_seterr(ctx, ST_E_INVAL, "attn: seq %d page %d: n_tokens %d not in [0, %d]",
                             si, i, p->n_tokens, g->page_size);
        if (p->n_tokens == 0) continue;
        if (!p->k || !p->v)
            return st_seterr(ctx, ST_E_INVAL, "attn: seq %d page %d: NULL K or V", si, i);
        if (g->type == ST_TYPE_Q8_0 && (!p->k_scale || !p->v_scale))
            return st_seterr(ctx, ST_E_INVAL, "attn: seq %d page %d: q8_0 without scales", si, i);
        if (p->pos0 < 0 || p->pos0 > INT64_MAX / 4)
            return st_seterr(ctx, ST_E_INVAL, "attn: seq %d page %d: pos0 %lld out of range", si,
                             i, (long long)p->pos0);
    }
    if (!s->sel) return 0;
    if (!s->n_sel || s->sel_stride < 0)
        return st_seterr(ctx, ST_E_INVAL, "attn: seq %d: sel without n_sel or stride %d < 0",
                         si, s->sel_stride);
    for (int32_t h = 0; h < g->n_kv_head; h++) {
        int32_t n = s->n_sel[h];
        if (n < 0 || n > s->sel_stride)
            return st_seterr(ctx, ST_E_INVAL, "attn: seq %d: n_sel[%d] = %d not in [0, %d]", si,
                             h, n, s->sel_stride);
        for (int32_t i = 0; i < n; i++) {
            int32_t ix = s->sel[(int64_t)h * s->sel_stride + i];
            if (ix < 0 || ix >= s->n_pages)
                return st_seterr(ctx, ST_E_INVAL, "attn: seq %d: sel[%d][%d] = %d not in [0, %d)",
                                 si, h, i, ix, s->n_pages);
        }
    }
    return 0;
}


/* ---- Quest metadata ------------------------------------------------------------------------ */

/* One f16 step toward -inf / +inf from h (not NaN, not already the infinity that way). */
static uint16_t f16_next_down(uint16_t h) {
    if (h == 0x0000) return 0x8001;        /* +0 -> the smallest negative subnormal */
    return (h & 0x8000) ? (uint16_t)(h + 1) : (uint16_t)(h - 1);
}
static uint16_t f16_next_up(uint16_t h) {
    if (h == 0x8000) return 0x0001;        /* -0 -> the smallest positive subnormal */
    return (h & 0x8000) ? (uint16_t)(h - 1) : (uint16_t)(h + 1);
}

void attn_box_to_f16_ref(int32_t n, const float *kmin, const float *kmax, uint16_t *lo_out,
                         uint16_t *hi_out) {
    for (int32_t d = 0; d < n; d++) {
        uint16_t lo = st_fp32_to_fp16(kmin[d]), hi = st_fp32_to_fp16(kmax[d]);
        if (st_fp16_to_fp32(lo) > kmin[d]) lo = f16_next_down(lo); /* NaN compares false */
        if (st_fp16_to_fp32(hi) < kmax[d]) hi = f16_next_up(hi);
        lo_out[d] = lo;
        hi_out[d] = hi;
    }
}

void st_attn_box_to_f16(const st_attn_ws *ws, int32_t head_dim, const float *kmin,
                        const float *kmax, uint16_t *box) {
    const st_attn_kernels *k = ws ? attn_ws_kernels(ws) : NULL;
    if (k && k->box_to_f16) k->box_to_f16(head_dim, kmin, kmax, box);
    else attn_box_to_f16_ref(head_dim, kmin, kmax, box, box + head_dim);
}

int st_attn_quest_bounds(const st_attn_ws *ws, int32_t head_dim, int32_t n_group,
                         const float *q, const uint16_t *box, int64_t stride, int32_t n_pages,
                         float *bound) {
    if (!ws || head_dim < 1 || head_dim > ST_ATTN_MAX_HEAD_DIM || n_group < 1 ||
        n_group > ST_ATTN_MAX_HEADS || stride < 2 * (int64_t)head_dim || n_pages < 0)
        return ST_E_INVAL;
    if (n_pages == 0) return 0;
    if (!q || !box || !bound) return ST_E_INVAL;
    attn_ws_kernels(ws)->quest(head_dim, n_group, q, box, stride, n_pages, bound);
    return 0;
}

/* One dimension's row of slots, min and max in slot order, with the element read by EXPR
 * (of kd and s): the type is chosen outside the loop. */
#define MINMAX_ROW(EXPR)                                                                      \
    for (int32_t s = 0; s < r->n_tokens; s++) {                                               \
        if (r->valid && !((r->valid[s / 64] >> (s % 64)) & 1)) continue;                      \
        const float x = (EXPR);                                                               \
        if (first) lo = hi = x, first = 0;                                                    \
        if (x < lo) lo = x;                                                                   \
        if (x > hi) hi = x;                                                                   \
    }

void attn_minmax_row_ref(const attn_minmax_rows *r, int32_t d, float *kmin, float *kmax) {
    const char *kd = (const char *)r->k + (size_t)d * r->P * attn_elem_size(r->type);
    const float sc = r->sc;
    float lo = 0, hi = 0;
    int first = 1;
    switch (r->type) {
    case ST_TYPE_F16: MINMAX_ROW(st_fp16_to_fp32(((const uint16_t *)kd)[s])); break;
    case ST_TYPE_BF16: MINMAX_ROW(st_bf16_to_fp32(((const uint16_t *)kd)[s])); break;
    case ST_TYPE_Q8_0: MINMAX_ROW((float)((const int8_t *)kd)[s] * sc); break;
    default: MINMAX_ROW(((const float *)kd)[s]); break;
    }
    kmin[d] = lo, kmax[d] = hi;
}
#undef MINMAX_ROW

int st_attn_key_minmax(const st_attn_ws *ws, const st_attn_geom *g, const st_attn_page *page,
                       int32_t kv_head, float *kmin, float *kmax) {
    if (attn_check_geom(NULL, g) || !page || !kmin || !kmax || kv_head < 0 ||
        kv_head >= g->n_kv_head || page->n_tokens < 0 || page->n_tokens > g->page_size ||
        (page->n_tokens > 0 && !page->k) ||
        (g->type == ST_TYPE_Q8_0 && page->n_tokens > 0 && !page->k_scale))
        return ST_E_INVAL;
    const size_t D = (size_t)g->head_dim, es = attn_elem_size(g->type), P = (size_t)g->page_size;
    int n = 0;
    for (int32_t s = 0; s < page->n_tokens; s++) n += !page->valid || ((page->valid[s / 64] >> (s % 64)) & 1);
    if (!n) {
        for (size_t d = 0; d < D; d++) kmin[d] = kmax[d] = 0;
        return 0;
    }
    /* Keys are dim-major: dimension d of the page's slots is one contiguous row, walked in
     * slot order (a snapshot restore checks every page's boxes this way) */
    const attn_minmax_rows r = {
        .k = (const char *)page->k + (size_t)kv_head * P * D * es,
        .type = g->type,
        .P = (int32_t)P,
        .n_tokens = page->n_tokens,
        .valid = page->valid,
        .sc = g->type == ST_TYPE_Q8_0 ? page->k_scale[kv_head] : 1.0f,
    };
    const st_attn_kernels *k = ws ? attn_ws_kernels(ws) : NULL;
    if (k && k->key_minmax) {
        k->key_minmax(&r, (int32_t)D, kmin, kmax);
    } else {
        for (int32_t d = 0; d < (int32_t)D; d++) attn_minmax_row_ref(&r, d, kmin, kmax);
    }
    return n;
}

