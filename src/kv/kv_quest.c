/*
 * Quest page selection: the key boxes kept per sealed page, and the per-(sequence,
 * layer, KV head) choice of pages a decode query attends to.
 *
 * Boxes
 * -----
 * kv->qbox holds, per layer, KV head and physical page, kmin[D] then kmax[D] in f16, rounded
 * outward (half the RAM of f32, and half the bytes ranking reads per page); laid out
 * [layer][head][page] so that for one (layer, head) the boxes of a run of consecutive
 * physical pages (what a fresh pool hands a growing sequence) are one strided array and one
 * st_attn_quest_bounds call scores the whole run.
 *
 *   Q1. box(page) valid  <=>  qbox_ok[page], which implies pages[page].sealed. Sealing
 *       goes through kv_seal_page -> kv_quest_seal or through a snapshot restore
 *       (kv_quest_set_box); every path that makes a page writable or free unseals it with
 *       kv_unseal (I5), which clears qbox_ok too, so a stale box is never read (kv_check
 *       verifies qbox_ok => sealed).
 *   Q2. A valid box contains every key of its page, valid or not: it spans all P slots of
 *       the (full) page, which is immutable while sealed (I5). It cannot span only the
 *       sealing entry's valid slots: a fork shares the page with its own mask, and the
 *       other sequence may remove slots before it seals (test_kv_fsm found this), so the
 *       sealing entry's mask says nothing about the others'. Unwritten slots hold zeros
 *       (pages are zeroed at allocation), removed ones stale keys: a looser box, never a
 *       wrong one. Hence the bound holds for every entry, masked or not, and masked pages
 *       are ranked like the others.
 *   Q3. Selection never reads a page's slab: only page tables and boxes (all in RAM).
 *
 * Selection
 * ---------
 * forced = sinks ∪ recent ∪ pages without a box; ranked = the rest; per KV head the
 * k = max(0, budget/P - |forced|) ranked pages with the highest bound (ties: the earlier
 * page) join the forced ones, and the union is emitted in increasing view order.
 */
#include "kv_int.h"
#include "kv_quest_int.h"

#include "strata/quest.h"

#include <math.h>
#include <stdlib.h>

/* ---- boxes ---------------------------------------------------------------------------- */

int kv_quest_alloc(st_kv *kv) {
    uint64_t n;
    if (st_mul_overflow_u64((uint64_t)kv->p.n_layer * (uint64_t)kv->p.n_kv_head,
                            (uint64_t)kv->n_pages * 2u * (uint64_t)kv->p.head_dim, &n) ||
        n > SIZE_MAX / sizeof(uint16_t))
        return ST_E_NOMEM;
    kv->qbox = st_alloc_aligned((size_t)n * sizeof(uint16_t), 64);
    kv->qbox_ok = calloc((size_t)kv->n_pages, 1);
    /* every ISA computes the same boxes; this only picks the speed */
    if (st_attn_ws_create(kv->ctx ? st_ctx_isa(kv->ctx) : ST_ISA_SCALAR, &kv->qbox_ws))
        return ST_E_NOMEM;
    kv->qgroup = kv->p.quest_group;
    if (!kv->qbox || !kv->qbox_ok) return ST_E_NOMEM;
    return kv_quest_tree_alloc(kv);
}

void kv_quest_free(st_kv *kv) {
    kv_quest_tree_free(kv);
    st_attn_ws_destroy(kv->qbox_ws);
    kv->qbox_ws = NULL;
    st_free_aligned(kv->qbox);
    free(kv->qbox_ok);
    kv->qbox = NULL;
    kv->qbox_ok = NULL;
}

/* The attention view of one layer block, as st_attn_key_minmax reads it. */
static st_attn_page block_view(const st_kv *kv, const uint8_t *blk, const uint64_t *valid,
                               int32_t n_tokens) {
    st_attn_page v;
    memset(&v, 0, sizeof v);
    v.k = blk;
    v.v = blk + kv->g.v_offset;
    if (kv->p.type == ST_TYPE_Q8_0) {
        v.k_scale = (const float *)(blk + kv->g.scale_offset);
        v.v_scale = v.k_scale + kv->p.n_kv_head;
    }
    v.valid = valid;
    v.n_tokens = n_tokens;
    return v;
}

static st_attn_geom kv_geom(const st_kv *kv) {
    st_attn_geom g = {.n_head = kv->p.n_kv_head, .n_kv_head = kv->p.n_kv_head,
                      .head_dim = kv->p.head_dim, .page_size = kv->p.page_size,
                      .type = kv->p.type, .scale = 0};
    return g;
}

int kv_quest_seal(st_kv *kv, int32_t page) {
    const st_attn_geom g = kv_geom(kv);
    const int D = kv->p.head_dim;
    float mm[2 * ST_ATTN_MAX_HEAD_DIM];
    for (int l = 0; l < kv->p.n_layer; l++) {
        const uint8_t *blk; /* a cold block is read, not fetched: sealing moves nothing */
        int rc = kv_block_bytes(kv, page, l, kv->rd_blk, &blk);
        if (rc) return rc;
        st_attn_page v = block_view(kv, blk, NULL, kv->p.page_size);
        for (int h = 0; h < kv->p.n_kv_head; h++) {
            int n = st_attn_key_minmax(kv->qbox_ws, &g, &v, h, mm, mm + D);
            ST_ASSERT(n == kv->p.page_size);
            st_attn_box_to_f16(kv->qbox_ws, D, mm, mm + D, kv_qbox(kv, l, h, page));
        }
    }
    const int had = kv->qbox_ok[page];
    kv->qbox_ok[page] = 1;
    kv_quest_tree_add(kv, page, had);
    return 0;
}

static int has_box(const st_kv *kv, int32_t page) {
    return kv->qbox_ok[page]; /* implies sealed (kv_unseal) */
}

int st_kv_page_box(const st_kv *kv, st_kv_page_id page, int layer, int kv_head, float *kmin,
                   float *kmax) {
    if (!kv || !kmin || !kmax || page < 0 || page >= kv->n_pages || layer < 0 ||
        layer >= kv->p.n_layer || kv_head < 0 || kv_head >= kv->p.n_kv_head)
        return kv ? st_seterr(kv->ctx, ST_E_INVAL, "kv: page_box: page %d layer %d head %d",
                              page, layer, kv_head)
                  : ST_E_INVAL;
    if (!has_box(kv, page)) return ST_E_NOT_FOUND;
    const uint16_t *b = kv_qbox(kv, layer, kv_head, page);
    for (int d = 0; d < kv->p.head_dim; d++) {
        kmin[d] = st_fp16_to_fp32(b[d]);
        kmax[d] = st_fp16_to_fp32(b[kv->p.head_dim + d]);
    }
    return 0;
}

/* ---- snapshot support ----------------------------------------------------------------- */

size_t kv_quest_box_bytes(const st_kv *kv) {
    return (size_t)kv->p.n_layer * kv->p.n_kv_head * 2u * kv->p.head_dim * sizeof(float);
}

int kv_quest_get_box(const st_kv *kv, int32_t page, uint8_t *dst) {
    const size_t n = 2u * kv->p.head_dim;
    if (!has_box(kv, page)) {
        memset(dst, 0, kv_quest_box_bytes(kv));
        return 0;
    }
    for (int l = 0; l < kv->p.n_layer; l++)
        for (int h = 0; h < kv->p.n_kv_head; h++) {
            const uint16_t *b = kv_qbox(kv, l, h, page);
            for (size_t i = 0; i < n; i++, dst += sizeof(float)) {
                float x = st_fp16_to_fp32(b[i]); /* exact: f16 -> f32 */
                memcpy(dst, &x, sizeof x);
            }
        }
    return 1;
}

void kv_quest_set_box(st_kv *kv, int32_t page, const uint8_t *src) {
    const int D = kv->p.head_dim;
    const int had = kv->qbox_ok[page];
    if (!src) {
        if (had) kv_quest_tree_withdraw(kv, page);
        return;
    }
    float mm[2 * ST_ATTN_MAX_HEAD_DIM];
    for (int l = 0; l < kv->p.n_layer; l++)
        for (int h = 0; h < kv->p.n_kv_head; h++, src += 2u * D * sizeof(float)) {
            memcpy(mm, src, 2u * D * sizeof(float)); /* the stream is not aligned */
            st_attn_box_to_f16(kv->qbox_ws, D, mm, mm + D, kv_qbox(kv, l, h, page));
        }
    kv->qbox_ok[page] = 1;
    kv_quest_tree_add(kv, page, had);
}

int kv_quest_check_box(const st_kv *kv, const uint8_t *data, size_t layer_stride,
                       const uint8_t *box, char *msg, size_t cap) {
    const int D = kv->p.head_dim;
    const st_attn_geom g = kv_geom(kv);
    float mm[2 * ST_ATTN_MAX_HEAD_DIM], bx[2 * ST_ATTN_MAX_HEAD_DIM];
    int rc = 0;
    for (int l = 0; l < kv->p.n_layer && !rc; l++) {
        /* staged layer: K^T [H][D][P] then V [H][P][D] then (q8_0) k_scale[H], v_scale[H] */
        const uint8_t *d = data + (size_t)l * layer_stride;
        st_attn_page v;
        memset(&v, 0, sizeof v);
        v.k = d;
        v.v = d + kv->g.kv_bytes;
        if (kv->p.type == ST_TYPE_Q8_0) {
            v.k_scale = (const float *)(d + 2 * kv->g.kv_bytes);
            v.v_scale = v.k_scale + kv->p.n_kv_head;
        }
        v.n_tokens = kv->p.page_size;
        for (int h = 0; h < kv->p.n_kv_head && !rc; h++) {
            memcpy(bx, box + ((size_t)l * kv->p.n_kv_head + h) * 2u * D * sizeof(float),
                   2u * D * sizeof(float));
            int n = st_attn_key_minmax(kv->qbox_ws, &g, &v, h, mm, mm + D);
            ST_ASSERT(n == kv->p.page_size);
            /* NaN compares false either way: a NaN key (garbage in, garbage bound) passes */
            for (int i = 0; i < D && !rc; i++)
                if (bx[i] > bx[D + i] || mm[i] < bx[i] || mm[D + i] > bx[D + i]) {
                    rc = ST_E_CORRUPT;
                    snprintf(msg, cap, "layer %d head %d dim %d: box [%g, %g] misses keys in "
                             "[%g, %g]", l, h, i, (double)bx[i], (double)bx[D + i],
                             (double)mm[i], (double)mm[D + i]);
                }
        }
    }
    return rc;
}

/* ---- selections ------------------------------------------------------------------------ */


st_kv_quest_params st_kv_quest_default_params(void) {
    st_kv_quest_params p = {.budget = 0, .sinks = -1, .recent = -1, .dense_layers = -1,
                            .certify = 0, .epsilon = 0};
    return p;
}

int st_kv_select_create(st_kv_select **out) {
    if (!out) return ST_E_INVAL;
    *out = calloc(1, sizeof **out);
    if (!*out) return ST_E_NOMEM;
    (*out)->dense = 1;
    return 0;
}

void st_kv_select_destroy(st_kv_select *s) {
    if (!s) return;
    free(s->idx);
    free(s->n_sel);
    free(s->phys);
    free(s->ent);
    free(s->fidx);
    free(s->cand);
    free(s->scr);
    free(s->scr2);
    free(s->top);
    free(s->bound);
    kv_cert_free(s);
    kv_quest_tree_ws_free(s->tree);
    free(s);
}

#define GROW(ptr, n)                                                 \
    do {                                                             \
        void *np_ = realloc((ptr), (size_t)(n) * sizeof *(ptr) + 1); \
        if (!np_) return ST_E_NOMEM;                                 \
        (ptr) = np_;                                                 \
    } while (0)

static int select_grow(st_kv_select *s, int32_t n_views, int32_t H) {
    if (n_views > s->cap_views) {
        int64_t c = s->cap_views ? s->cap_views : 64;
        while (c < n_views) c *= 2;
        GROW(s->phys, c);
        GROW(s->ent, c);
        GROW(s->fidx, c);
        GROW(s->cand, c);
        s->cap_views = c;
    }
    if (H > s->cap_head) {
        GROW(s->n_sel, H);
        s->cap_head = H;
    }
    if ((int64_t)n_views * H > s->cap_idx) {
        int64_t c = s->cap_idx ? s->cap_idx : 256;
        while (c < (int64_t)n_views * H) c *= 2;
        GROW(s->idx, c);
        GROW(s->bound, c);
        GROW(s->scr, c);
        GROW(s->scr2, c);
        GROW(s->top, c);
        s->cap_idx = c;
    }
    return 0;
}

/* The k-th largest of v[0, n) (1 <= k <= n), which is only read; w0 and w1 (n floats
 * each) are scratch the partitions alternate between. Quickselect around a
 * median-of-three pivot whose partition has no data-dependent branch: each value is
 * stored at both ends of the output and only the matching end advances. The bounds are close to random, so a branching (Hoare) partition mispredicted
 * about every other comparison (docs/PERFORMANCE.md, Quest). */
float kv_quest_kth_largest(const float *v, float *w0, float *w1, int32_t n, int32_t k) {
    float *w = w0;
    for (;;) {
        float a = v[0], b = v[n / 2], c = v[n - 1];
        if (a < b) { float t = a; a = b; b = t; } /* a >= b */
        const float piv = c > a ? a : c > b ? c : b; /* median of the three: in v */
        int32_t gt = 0, lt = n - 1;
        for (int32_t i = 0; i < n; i++) {
            const float x = v[i];
            w[gt] = x;
            gt += x > piv;
            w[lt] = x;
            lt -= x < piv;
        }
        const int32_t n_lt = n - 1 - lt, n_eq = n - gt - n_lt;
        if (k <= gt) {
            v = w, n = gt;
        } else if (k <= gt + n_eq) {
            return piv;
        } else {
            v = w + lt + 1, n = n_lt, k -= gt + n_eq;
        }
        w = w == w0 ? w1 : w0; /* v now lies in w: partition into the other buffer */
    }
}

static void fill_dense(st_kv_select *s) {
    for (int32_t h = 0; h < s->n_kv_head; h++) {
        int32_t *o = s->idx + (size_t)h * s->n_views;
        for (int32_t j = 0; j < s->n_views; j++) o[j] = j;
        s->n_sel[h] = s->n_views;
    }
    s->st.n_listed = (int64_t)s->n_views * s->n_kv_head;
}

/* Bounds of the ranked candidates [c_lo, c_hi) of KV head h into bound (by candidate
 * position). Runs of consecutive physical pages are one strided kernel call each. */
static void rank_range(const st_kv *kv, const st_kv_select *s, int layer, int h,
                       const st_attn_ws *ws, const float *qg, int32_t G, int32_t c_lo,
                       int32_t c_hi, float *bound, float bonus) {
    const int D = kv->p.head_dim;
    for (int32_t c0 = c_lo; c0 < c_hi;) {
        int32_t c1 = c0 + 1;
        const int32_t p0 = s->phys[s->cand[c0]];
        while (c1 < c_hi && s->phys[s->cand[c1]] == p0 + (c1 - c0)) c1++;
        int rc = st_attn_quest_bounds(ws, D, G, qg, kv_qbox(kv, layer, h, p0), 2 * D, c1 - c0,
                                      bound + c0);
        ST_ASSERT(rc == 0); /* arguments validated by the caller */
        c0 = c1;
    }
    for (int32_t c = c_lo; c < c_hi; c++)
        if (isnan(bound[c])) bound[c] = INFINITY;
    if (bonus > 0)
        for (int32_t c = c_lo; c < c_hi; c++)
            if (kv_blk(kv, s->phys[s->cand[c]], layer)->res == KV_RES_RAM) bound[c] += bonus;
}

/* KV head h's list once its bounds are in: the k best candidates (top-k, then in view
 * order) merged with the forced pages into idx[h], ascending. pos NULL: every candidate was
 * scored (bounds at s->bound); else the n_pos scored ones, at candidate positions pos
 * (ascending) with bounds cb, which hold every candidate the k best can include. */
static void finish_head(st_kv_select *s, int32_t h, int32_t n_forced, int32_t n_cand, int64_t k,
                        const int32_t *pos, const float *cb, int32_t n_pos) {
    const int64_t nv = s->n_views;
    int32_t *o = s->idx + (size_t)h * nv, n = 0;
    if (k == n_cand) { /* every page */
        for (int32_t j = 0; j < (int32_t)nv; j++) o[n++] = j;
    } else {
        /* the k best: bounds above the k-th largest value, then ties in page order (the
         * earlier page wins), emitted in candidate order = view order, merged with the
         * forced pages */
        const float *bnd = pos ? cb : s->bound + (size_t)h * nv;
        const int32_t n_sc = pos ? n_pos : n_cand;
        float thr = INFINITY;
        int32_t above = 0, eq_left = 0, n_top = 0;
        int32_t *top = s->top + (size_t)h * nv;
        if (k > 0) {
            thr = kv_quest_kth_largest(bnd, s->scr + (size_t)h * nv, s->scr2 + (size_t)h * nv, n_sc,
                                       (int32_t)k);
            for (int32_t c = 0; c < n_sc; c++) above += bnd[c] > thr;
            eq_left = (int32_t)k - above;
            /* the chosen candidates in view order, without branches on the bounds */
            for (int32_t c = 0; c < n_sc; c++) {
                const int32_t gt = bnd[c] > thr, eq = (bnd[c] == thr) & (eq_left > 0);
                top[n_top] = s->cand[pos ? pos[c] : c];
                n_top += gt | eq;
                eq_left -= eq;
            }
        }
        int32_t i = 0, c = 0; /* merge with the forced pages, both ascending */
        while (i < n_forced && c < n_top) o[n++] = s->fidx[i] < top[c] ? s->fidx[i++] : top[c++];
        while (i < n_forced) o[n++] = s->fidx[i++];
        while (c < n_top) o[n++] = top[c++];
    }
    s->n_sel[h] = n;
}

/* Selection of all KV heads of one layer on the context's threads: at long contexts it
 * reads every candidate's box (2 x head_dim f16 per page and head) and partitions
 * thousands of bounds. With at least as many heads as threads each thread takes whole
 * heads; otherwise the bounds are split over the threads and the heads finished after. */
typedef struct rank_job {
    const st_kv *kv;
    st_kv_select *s;
    const st_attn_ws *ws;
    const float *q;
    int layer;
    int32_t n_cand, n_forced, G, H;
    int64_t k;
    int whole_heads;
    float bonus; /* in bound units; > 0 only with a tier */
} rank_job;

static void rank_task(void *arg, int ith, int nth) {
    const rank_job *j = arg;
    const int64_t nv = j->s->n_views;
    const size_t qh = (size_t)j->G * j->kv->p.head_dim;
    int64_t lo, hi;
    if (j->whole_heads) {
        st_split_range(j->H, ith, nth, &lo, &hi);
        for (int64_t h = lo; h < hi; h++) {
            if (j->k > 0 && j->k < j->n_cand)
                rank_range(j->kv, j->s, j->layer, (int)h, j->ws, j->q + (size_t)h * qh, j->G, 0,
                           j->n_cand, j->s->bound + (size_t)h * nv, j->bonus);
            finish_head(j->s, (int32_t)h, j->n_forced, j->n_cand, j->k, NULL, NULL, 0);
        }
        return;
    }
    st_split_range((int64_t)j->H * j->n_cand, ith, nth, &lo, &hi);
    for (int32_t h = 0; h < j->H; h++) {
        int64_t c0 = lo - (int64_t)h * j->n_cand, c1 = hi - (int64_t)h * j->n_cand;
        if (c0 < 0) c0 = 0;
        if (c1 > j->n_cand) c1 = j->n_cand;
        if (c0 >= c1) continue;
        rank_range(j->kv, j->s, j->layer, h, j->ws, j->q + (size_t)h * qh, j->G, (int32_t)c0,
                   (int32_t)c1, j->s->bound + (size_t)h * nv, j->bonus);
    }
}

/* The two-level ranking (kv_quest_tree.c), whole heads per thread. */
static void tree_task(void *arg, int ith, int nth) {
    const rank_job *j = arg;
    const int64_t nv = j->s->n_views;
    const size_t qh = (size_t)j->G * j->kv->p.head_dim;
    int64_t lo, hi;
    st_split_range(j->H, ith, nth, &lo, &hi);
    for (int64_t h = lo; h < hi; h++) {
        const int32_t *pos;
        const float *cb;
        const int32_t n = kv_quest_tree_head(j->kv, j->s->tree, j->layer, (int)h, j->ws, j->q + (size_t)h * qh,
                                             j->G, j->n_cand, j->k, j->s->bound + (size_t)h * nv, &pos, &cb);
        finish_head(j->s, (int32_t)h, j->n_forced, j->n_cand, j->k, pos, cb, n);
        j->s->n_scored_h[h] = n;
    }
}

/* The two-level ranking can pay only when the budget is a small part of the candidates and
 * these lie in few groups (a sequence whose pages came in order from the pool). */
static int use_tree(const st_kv *kv, st_kv_select *s, int32_t n_cand, int64_t k, int32_t H, int *rc) {
    *rc = 0;
    if (!kv->qgbox || k <= 0 || k >= n_cand || n_cand < 4 * k) return 0;
    const int n_runs = kv_quest_tree_runs(kv, &s->tree, s->phys, s->cand, n_cand, H);
    if (n_runs < 0) *rc = n_runs;
    return n_runs > 0 && n_runs <= n_cand / 2;
}

#define RANK_MIN_PARALLEL 256 /* (page, head) boxes below which one thread ranks alone */

int st_kv_quest_select(const st_kv *kv, st_kv_seq_id seq, int layer, const st_attn_ws *ws,
                       const float *q, int32_t n_head, const st_kv_quest_params *p,
                       st_kv_select *s) {
    if (!kv || !s) return ST_E_INVAL;
    const st_kv_quest_params dp = st_kv_quest_default_params();
    if (!p) p = &dp;
    const int32_t H = kv->p.n_kv_head;
    s->n_views = 0;
    s->dense = 1;
    memset(&s->st, 0, sizeof s->st);
    if (!ws || !q || n_head < H || n_head % H || layer < 0 || layer >= kv->p.n_layer ||
        p->budget < 0 || (p->certify && !(p->epsilon >= 0 && p->epsilon <= 1)))
        return st_seterr(kv->ctx, ST_E_INVAL, "quest: select: ws/q NULL, n_head %d for %d KV "
                         "heads, layer %d, budget %lld or epsilon %g", n_head, H, layer,
                         (long long)p->budget, p->certify ? p->epsilon : 0.0);
    kv_seq *sq;
    int rc = kv_seq_get(kv, seq, &sq);
    if (rc) return rc;
    /* one pass over the page table (it is the size of the context, and this runs per
     * layer): the views, their entries and, for a sparse layer, forced vs ranked */
    if (sq->n_ent > INT32_MAX)
        return st_seterr(kv->ctx, ST_E_LIMIT, "quest: %lld pages", (long long)sq->n_ent);
    if (select_grow(s, (int32_t)sq->n_ent, H))
        return st_seterr(kv->ctx, ST_E_NOMEM, "quest: out of memory for %lld views",
                         (long long)sq->n_ent);
    s->n_kv_head = H;
    s->n_ent = sq->n_ent;
    s->layer = layer;
    s->page_size = kv->p.page_size;
    s->dense_frac = p->cert_dense_frac > 0 ? p->cert_dense_frac : 0.5;
    const int P = kv->p.page_size;
    const int32_t dense_layers = p->dense_layers < 0 ? 2 : p->dense_layers;
    /* certified mode: epsilon 0 admits no skipped mass (the exactness gate); otherwise the
     * budget is only the starting point, 0 = the forced pages alone */
    const int dense = layer < dense_layers || (p->certify ? p->epsilon == 0 : p->budget == 0);
    const int64_t sink_pages = p->sinks < 0 ? 1 : (p->sinks + P - 1) / P;
    const int64_t recent_pages = p->recent < 0 ? 2 : (p->recent + P - 1) / P;
    int32_t n_forced = 0, n_cand = 0, j = 0;
    for (int64_t i = 0; i < sq->n_ent; i++) {
        const kv_entry *e = &sq->ent[i];
        if (e->page < 0) continue;
        s->phys[j] = e->page;
        s->ent[j] = (int32_t)i;
        if (!dense) {
            if (i < sink_pages || i >= sq->n_ent - recent_pages || !has_box(kv, e->page))
                s->fidx[n_forced++] = j;
            else
                s->cand[n_cand++] = j;
        }
        j++;
    }
    s->n_views = j;
    if (dense) {
        fill_dense(s);
        return 0;
    }
    s->dense = 0;
    int64_t k = p->budget / P - n_forced;
    if (k < 0) k = 0;
    if (k > n_cand) k = n_cand;
    const int32_t G = n_head / H;
    if (k > 0 && k < n_cand) {
        const int D = kv->p.head_dim;
        float probe;
        if (st_attn_quest_bounds(ws, D, G, q, kv_qbox(kv, layer, 0, 0), 2 * D, 0, &probe))
            return st_seterr(kv->ctx, ST_E_INVAL, "quest: bounds: head_dim %d, group %d", D, G);
    }
    st_threadpool *tp = kv->ctx ? st_ctx_threadpool(kv->ctx) : NULL;
    const int nth = tp ? st_threadpool_n_threads(tp) : 1;
    const double scale = p->score_scale > 0 ? p->score_scale : 1.0 / sqrt((double)kv->p.head_dim);
    const float bonus = kv->blk && p->resident_bonus > 0 ? (float)(p->resident_bonus / scale) : 0;
    rank_job job = {.kv = kv, .s = s, .ws = ws, .q = q, .layer = layer, .n_cand = n_cand,
                    .n_forced = n_forced, .G = G, .H = H, .k = k, .whole_heads = H >= nth,
                    .bonus = bonus};
    const int parallel = tp && nth > 1 && (int64_t)n_cand * H >= RANK_MIN_PARALLEL;
    /* the group boxes bound pages, not pages plus a residency bonus */
    const int tree = bonus == 0 && use_tree(kv, s, n_cand, k, H, &rc);
    if (tree) {
        if (parallel && H > 1) st_threadpool_run(tp, tree_task, &job);
        else tree_task(&job, 0, 1);
    } else if (rc) {
        s->n_views = 0;
        s->dense = 1;
        return st_seterr(kv->ctx, rc, "quest: out of memory for the group ranking");
    } else if (job.whole_heads) {
        if (parallel) st_threadpool_run(tp, rank_task, &job);
        else rank_task(&job, 0, 1);
    } else {
        if (k > 0 && k < n_cand) {
            if (parallel) st_threadpool_run(tp, rank_task, &job);
            else rank_task(&job, 0, 1);
        }
        for (int32_t h = 0; h < H; h++) finish_head(s, h, n_forced, n_cand, k, NULL, NULL, 0);
    }
    for (int32_t h = 0; h < H; h++) s->st.n_listed += s->n_sel[h];
    s->st.n_forced = (int64_t)n_forced * H;
    s->st.n_ranked = (int64_t)n_cand * H;
    for (int32_t h = 0; h < H && (tree || (k > 0 && k < n_cand)); h++)
        s->st.n_scored += tree ? s->n_scored_h[h] : n_cand;
    return 0;
}

int st_kv_select_dense(const st_kv_select *s) { return s->dense; }
int32_t st_kv_select_n_views(const st_kv_select *s) { return s->n_views; }
int32_t st_kv_select_n_kv_head(const st_kv_select *s) { return s->n_kv_head; }

int st_kv_select_head(const st_kv_select *s, int32_t h, const int32_t **idx, int32_t *n) {
    if (idx) *idx = NULL;
    if (n) *n = 0;
    if (!s || !idx || !n || h < 0 || h >= s->n_kv_head) return ST_E_INVAL;
    *idx = s->idx + (size_t)h * s->n_views;
    *n = s->n_sel[h];
    return 0;
}

int st_kv_select_apply(const st_kv_select *s, st_attn_seq *a) {
    if (!s || !a || a->n_pages != s->n_views) return ST_E_INVAL;
    if (s->dense) {
        a->sel = a->n_sel = NULL;
        a->sel_stride = 0;
    } else {
        a->sel = s->idx;
        a->n_sel = s->n_sel;
        a->sel_stride = s->n_views;
    }
    return 0;
}

void st_kv_select_get_stats(const st_kv_select *s, st_kv_select_stats *out) { *out = s->st; }

void kv_select_views(const st_kv_select *s, const int32_t **ent, const int32_t **phys,
                     int64_t *n_ent) {
    *ent = s->ent;
    *phys = s->phys;
    *n_ent = s->n_ent;
}

/* ---- audit ------------------------------------------------------------------------------ */

int st_kv_quest_mass(const st_kv *kv, const st_attn_page *views, int32_t n_views,
                     const st_kv_select *s, const float *q, int32_t n_head, float scale,
                     double *frac) {
    return st_kv_quest_mass_skip(kv, views, n_views, s, q, n_head, scale, frac, NULL);
}

int st_kv_quest_mass_skip(const st_kv *kv, const st_attn_page *views, int32_t n_views,
                          const st_kv_select *s, const float *q, int32_t n_head, float scale,
                          double *frac, double *skip) {
    if (!kv || !s || !q || !frac || (n_views > 0 && !views) || n_views != s->n_views ||
        n_head < kv->p.n_kv_head || n_head % kv->p.n_kv_head || s->n_kv_head != kv->p.n_kv_head)
        return ST_E_INVAL;
    const int D = kv->p.head_dim, H = kv->p.n_kv_head, G = n_head / H;
    if (scale == 0) scale = 1.0f / sqrtf((float)D);
    double *m = malloc((size_t)n_head * 4 * sizeof *m);
    float *k = malloc((size_t)H * D * sizeof *k);
    uint8_t *in = calloc((size_t)H * (n_views + 1), 1);
    if (!m || !k || !in) {
        free(m);
        free(k);
        free(in);
        return ST_E_NOMEM;
    }
    double *tot = m + n_head, *sel = m + 2 * n_head, *out = m + 3 * n_head;
    for (int32_t h = 0; h < n_head; h++) {
        m[h] = -INFINITY;
        tot[h] = sel[h] = out[h] = 0;
    }
    for (int32_t h = 0; h < H; h++)
        for (int32_t i = 0; i < s->n_sel[h]; i++) in[(size_t)h * n_views + s->idx[(size_t)h * s->n_views + i]] = 1;
    for (int32_t j = 0; j < n_views; j++) {
        const st_attn_page *v = &views[j];
        for (int32_t t = 0; t < v->n_tokens; t++) {
            if (v->valid && !((v->valid[t >> 6] >> (t & 63)) & 1)) continue;
            kv_load_token(kv, (const uint8_t *)v->k, t, k, NULL);
            for (int32_t h = 0; h < n_head; h++) {
                const float *qh = q + (size_t)h * D, *kh = k + (size_t)(h / G) * D;
                double sc = 0;
                for (int d = 0; d < D; d++) sc += (double)qh[d] * kh[d];
                sc *= scale;
                if (sc > m[h]) {
                    double r = exp(m[h] - sc);
                    tot[h] *= r;
                    sel[h] *= r;
                    out[h] *= r;
                    m[h] = sc;
                }
                double e = exp(sc - m[h]);
                tot[h] += e;
                if (in[(size_t)(h / G) * n_views + j]) sel[h] += e;
                else out[h] += e;
            }
        }
    }
    for (int32_t h = 0; h < n_head; h++) {
        frac[h] = tot[h] > 0 ? sel[h] / tot[h] : (isnan(tot[h]) ? NAN : 0);
        if (skip) skip[h] = tot[h] > 0 ? out[h] / tot[h] : (isnan(tot[h]) ? NAN : 0);
    }
    free(m);
    free(k);
    free(in);
    return 0;
}
