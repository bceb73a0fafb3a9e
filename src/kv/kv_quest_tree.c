/*
 * Quest's two-level ranking: a box per group of consecutive physical pages, so that a
 * long context's selection scores one box per group and then the pages of the groups that
 * can still win, instead of every page.
 *
 * Group boxes
 * -----------
 * Group g covers physical pages [g*G, (g+1)*G), G = kv->qgroup (st_kv_params.quest_group,
 * a power of two; 1 = no groups, flat ranking only). kv->qgbox holds, per layer, KV head
 * and group, kmin[D] then kmax[D] in f16, laid out like the page boxes ([layer][head]
 * [group]), so a run of consecutive groups is one strided st_attn_quest_bounds call.
 *
 *   T1. For every group with at least one page whose box is valid (qbox_ok), the group box
 *       is the element-wise union (min of kmin, max of kmax) of those pages' boxes, NaN
 *       sticky; a group with none has no meaning and is never read (a candidate page has a
 *       box, so its group has a member). Kept by kv_quest_tree_add at every seal
 *       (kv_quest_seal, kv_quest_set_box) and kv_quest_tree_withdraw at every unseal
 *       (kv_unseal: truncate, rewind, copy-on-write, free), which rebuilds the group from
 *       its remaining members, so a withdrawn page's keys never loosen it. kv_check
 *       verifies T1 (kv_quest_tree_check).
 *   T2. bound(group) >= bound(page) for each member, bit for bit as the kernel computes
 *       them: the union box contains the page box in every dimension, and the bound is a
 *       fixed sequence of roundings of products, sums and maxima, each monotone in its
 *       inputs (q+ * kmax and q- * kmin grow as the box widens); a NaN anywhere in a page's
 *       box is in the union too, and NaN bounds rank as +inf on both levels.
 *
 * Ranking (kv_quest_tree_head)
 * ----------------------------
 * The candidates (view order) are cut into runs of consecutive candidates in one group.
 * Per KV head: score each run's group box; score the pages of the runs with the kr highest
 * group bounds (ties included; kr from k and the mean run length, doubled until they hold at
 * least k pages); then let thr be the k-th largest page bound scored so far and score every
 * further run whose group bound is >= thr, recomputing thr, until no unscored run has a group
 * bound >= thr.
 * (When more than half the unscored runs reach thr, the groups do not separate: the rest is
 * scored at once and the flat ranking's finish runs over every bound, so a layout or keys
 * that defeat the groups cost the group boxes and one k-th search more than flat, no more.)
 * Every unscored page then has bound <= its group's < thr, so thr is the k-th largest bound
 * over all candidates and every page at or above it (ties included) was scored: the scored
 * pages, in candidate order, rank exactly as all candidates would. Hence the selection is
 * identical to the flat ranking for every budget, query and page layout, bit for bit (the
 * page bounds are the kernel's, which gives a page the same bits in any call: see
 * attn_avx512.c, quest_groups). Only the speed depends on the layout and on the keys:
 * pages of one sequence allocated in order fill whole groups, but a union box's bound adds
 * each dimension's widest side, and the page bounds of real keys sit close together, so
 * groups of more than a few pages seldom fall below the k-th page bound; hence the flat
 * default (quest_group 1; docs/PERFORMANCE.md, Quest sparse decode).
 *
 * The first phase scores the kr highest group bounds' runs (ties included) rather than
 * sorting the groups: a sort of a few hundred group bounds per head and layer cost more than
 * the pages it could save.
 */
#include "kv_int.h"

#include <math.h>
#include <stdlib.h>

int kv_quest_tree_alloc(st_kv *kv) {
    kv->n_qgroups = 0;
    kv->qgbox = NULL;
    if (kv->qgroup <= 1) return 0;
    kv->n_qgroups = (int32_t)((kv->n_pages + kv->qgroup - 1) / kv->qgroup);
    uint64_t n;
    if (st_mul_overflow_u64((uint64_t)kv->p.n_layer * (uint64_t)kv->p.n_kv_head,
                            (uint64_t)kv->n_qgroups * 2u * (uint64_t)kv->p.head_dim, &n) ||
        n > SIZE_MAX / sizeof(uint16_t))
        return ST_E_NOMEM;
    kv->qgbox = st_alloc_aligned((size_t)n * sizeof(uint16_t), 64);
    return kv->qgbox ? 0 : ST_E_NOMEM;
}

void kv_quest_tree_free(st_kv *kv) {
    st_free_aligned(kv->qgbox);
    kv->qgbox = NULL;
}

/* one dimension of a union: the wider bound, NaN sticky */
static inline uint16_t wider(uint16_t g, uint16_t p, int is_max) {
    const float a = st_fp16_to_fp32(g), b = st_fp16_to_fp32(p);
    if (isnan(a)) return g;
    if (isnan(b)) return p;
    return (is_max ? b > a : b < a) ? p : g;
}

static void union_into(const st_kv *kv, int32_t group, int32_t page) {
    const int D = kv->p.head_dim;
    for (int l = 0; l < kv->p.n_layer; l++)
        for (int h = 0; h < kv->p.n_kv_head; h++) {
            uint16_t *gb = kv_qgbox(kv, l, h, group);
            const uint16_t *pb = kv_qbox(kv, l, h, page);
            for (int d = 0; d < 2 * D; d++) gb[d] = wider(gb[d], pb[d], d >= D);
        }
}

static void copy_into(const st_kv *kv, int32_t group, int32_t page) {
    const size_t nb = 2u * kv->p.head_dim * sizeof(uint16_t);
    for (int l = 0; l < kv->p.n_layer; l++)
        for (int h = 0; h < kv->p.n_kv_head; h++) memcpy(kv_qgbox(kv, l, h, group), kv_qbox(kv, l, h, page), nb);
}

/* The group box from its members' valid boxes (T1); nothing when it has none. */
static void rebuild(const st_kv *kv, int32_t group) {
    const int64_t p0 = (int64_t)group * kv->qgroup;
    const int64_t p1 = p0 + kv->qgroup < kv->n_pages ? p0 + kv->qgroup : kv->n_pages;
    int any = 0;
    for (int64_t p = p0; p < p1; p++) {
        if (!kv->qbox_ok[p]) continue;
        if (any) union_into(kv, group, (int32_t)p);
        else copy_into(kv, group, (int32_t)p);
        any = 1;
    }
}

void kv_quest_tree_add(st_kv *kv, int32_t page, int had_box) {
    if (!kv->qgbox) return;
    const int32_t group = page / kv->qgroup;
    if (had_box) { /* a box replaced without an unseal: the old one may be wider */
        rebuild(kv, group);
        return;
    }
    const int64_t p0 = (int64_t)group * kv->qgroup;
    const int64_t p1 = p0 + kv->qgroup < kv->n_pages ? p0 + kv->qgroup : kv->n_pages;
    int others = 0;
    for (int64_t p = p0; p < p1 && !others; p++) others = p != page && kv->qbox_ok[p];
    if (others) union_into(kv, group, page);
    else copy_into(kv, group, page);
}

void kv_quest_tree_withdraw(st_kv *kv, int32_t page) {
    kv->qbox_ok[page] = 0;
    if (kv->qgbox) rebuild(kv, page / kv->qgroup);
}

int kv_quest_tree_check(const st_kv *kv, char *msg, size_t cap) {
    if (!kv->qgbox) return 0;
    const int D = kv->p.head_dim;
    for (int32_t g = 0; g < kv->n_qgroups; g++) {
        const int64_t p0 = (int64_t)g * kv->qgroup;
        const int64_t p1 = p0 + kv->qgroup < kv->n_pages ? p0 + kv->qgroup : kv->n_pages;
        for (int l = 0; l < kv->p.n_layer; l++)
            for (int h = 0; h < kv->p.n_kv_head; h++) {
                const uint16_t *gb = kv_qgbox(kv, l, h, g);
                for (int d = 0; d < 2 * D; d++) {
                    int any = 0;
                    float u = 0;
                    for (int64_t p = p0; p < p1; p++) {
                        if (!kv->qbox_ok[p]) continue;
                        const float x = st_fp16_to_fp32(kv_qbox(kv, l, h, (int32_t)p)[d]);
                        if (!any || isnan(x) || (!isnan(u) && (d >= D ? x > u : x < u))) u = x;
                        any = 1;
                    }
                    const float got = st_fp16_to_fp32(gb[d]);
                    if (any && !(got == u || (isnan(got) && isnan(u)))) {
                        snprintf(msg, cap, "Quest group %d layer %d head %d dim %d: box %g, union of its "
                                 "pages' %g", g, l, h, d, (double)got, (double)u);
                        return ST_E_CORRUPT;
                    }
                }
            }
    }
    return 0;
}

/* ---- ranking ------------------------------------------------------------------------------ */

struct kv_qtree_ws {
    int32_t *run_c0;  /* [n_runs + 1] first candidate position of each run */
    int32_t *run_g;   /* [n_runs] group of each run */
    int32_t n_runs;
    int64_t cap_runs, cap_cand;
    /* per KV head, [n_kv_head][...] */
    float *gb;        /* [n_runs] group bounds */
    uint8_t *done;    /* [n_runs] run scored */
    float *cb, *w0, *w1; /* [n_cand] bounds of the scored pages (as pos); kth scratch */
    int32_t *pos;     /* [n_cand] candidate positions of the scored pages, ascending */
    int32_t *cphys;   /* [n_cand] (shared) physical page of each candidate */
    int32_t H;
};

void kv_quest_tree_ws_free(kv_qtree_ws *t) {
    if (!t) return;
    free(t->run_c0);
    free(t->run_g);
    free(t->gb);
    free(t->done);
    free(t->cb);
    free(t->pos);
    free(t->cphys);
    free(t->w0);
    free(t->w1);
    free(t);
}

#define TGROW(ptr, n)                                                \
    do {                                                             \
        void *np_ = realloc((ptr), (size_t)(n) * sizeof *(ptr) + 1); \
        if (!np_) return ST_E_NOMEM;                                 \
        (ptr) = np_;                                                 \
    } while (0)

int kv_quest_tree_runs(const st_kv *kv, kv_qtree_ws **tp, const int32_t *phys, const int32_t *cand,
                       int32_t n_cand, int32_t H) {
    if (!kv->qgbox) return 0;
    if (!*tp && !(*tp = calloc(1, sizeof **tp))) return ST_E_NOMEM;
    kv_qtree_ws *t = *tp;
    if ((int64_t)n_cand * H > t->cap_cand || H > t->H) {
        const int64_t c = (int64_t)n_cand * H + 64;
        TGROW(t->cb, c);
        TGROW(t->pos, c);
        TGROW(t->cphys, c);
        TGROW(t->w0, c);
        TGROW(t->w1, c);
        t->cap_cand = c;
    }
    /* at most n_cand runs */
    if ((int64_t)(n_cand + 1) * H > t->cap_runs || H > t->H) {
        const int64_t c = (int64_t)(n_cand + 1) * H + 64;
        TGROW(t->run_c0, c);
        TGROW(t->run_g, c);
        TGROW(t->gb, c);
        TGROW(t->done, c);
        t->cap_runs = c;
    }
    if (H > t->H) t->H = H;
    int32_t n = 0;
    for (int32_t c = 0; c < n_cand; c++) t->cphys[c] = phys[cand[c]];
    const int32_t *cand_phys = t->cphys;
    for (int32_t c = 0; c < n_cand; c++) {
        const int32_t g = cand_phys[c] / kv->qgroup;
        if (!n || t->run_g[n - 1] != g) {
            t->run_c0[n] = c;
            t->run_g[n++] = g;
        }
    }
    t->run_c0[n] = n_cand;
    t->n_runs = n;
    return n;
}

/* Bounds of the pages of run r (candidate positions [c0, c1)) into bound[c]: runs of
 * consecutive physical pages are one kernel call each. */
static void score_run(const st_kv *kv, const st_attn_ws *ws, int layer, int h, const float *qg, int32_t Gq,
                      const int32_t *cand_phys, int32_t c0, int32_t c1, float *bound) {
    const int D = kv->p.head_dim;
    while (c0 < c1) {
        int32_t e = c0 + 1;
        while (e < c1 && cand_phys[e] == cand_phys[c0] + (e - c0)) e++;
        int rc = st_attn_quest_bounds(ws, D, Gq, qg, kv_qbox(kv, layer, h, cand_phys[c0]), 2 * D, e - c0,
                                      bound + c0);
        ST_ASSERT(rc == 0);
        for (int32_t c = c0; c < e; c++)
            if (isnan(bound[c])) bound[c] = INFINITY;
        c0 = e;
    }
}

int32_t kv_quest_tree_head(const st_kv *kv, kv_qtree_ws *t, int layer, int h, const st_attn_ws *ws,
                           const float *qg, int32_t Gq, int32_t n_cand, int64_t k, float *bound,
                           const int32_t **pos_out, const float **cb_out) {
    const int32_t *cand_phys = t->cphys;
    int32_t *pos = t->pos + (size_t)h * n_cand;
    const int D = kv->p.head_dim;
    const int32_t R = t->n_runs;
    float *gb = t->gb + (size_t)h * (R + 1);
    uint8_t *done = t->done + (size_t)h * (R + 1);
    float *cb = t->cb + (size_t)h * n_cand, *w0 = t->w0 + (size_t)h * n_cand, *w1 = t->w1 + (size_t)h * n_cand;
    /* the group bounds: runs of consecutive groups in one call */
    for (int32_t r0 = 0; r0 < R;) {
        int32_t r1 = r0 + 1;
        while (r1 < R && t->run_g[r1] == t->run_g[r0] + (r1 - r0)) r1++;
        int rc = st_attn_quest_bounds(ws, D, Gq, qg, kv_qgbox(kv, layer, h, t->run_g[r0]), 2 * D, r1 - r0,
                                      gb + r0);
        ST_ASSERT(rc == 0);
        r0 = r1;
    }
    for (int32_t r = 0; r < R; r++) {
        if (isnan(gb[r])) gb[r] = INFINITY;
        done[r] = 0;
    }
    /* first the runs of the kr highest group bounds (ties included), kr doubling until they
     * hold k pages: no sort, a k-th search over the group bounds per round */
    int64_t n_done = 0;
    int32_t n_runs_done = 0, kr = (int32_t)((k * R + n_cand - 1) / n_cand);
    if (kr < 1) kr = 1;
    while (n_done < k) {
        if (kr > R) kr = R;
        const float t1 = kv_quest_kth_largest(gb, w0, w1, R, kr);
        for (int32_t r = 0; r < R; r++)
            if (!done[r] && gb[r] >= t1) {
                score_run(kv, ws, layer, h, qg, Gq, cand_phys, t->run_c0[r], t->run_c0[r + 1], bound);
                done[r] = 1;
                n_runs_done++;
                n_done += t->run_c0[r + 1] - t->run_c0[r];
            }
        kr *= 2;
    }
    for (;;) {
        int32_t m = 0;
        for (int32_t r = 0; r < R; r++)
            if (done[r])
                for (int32_t c = t->run_c0[r]; c < t->run_c0[r + 1]; c++) cb[m++] = bound[c];
        const float thr = kv_quest_kth_largest(cb, w0, w1, m, (int32_t)k);
        int32_t left = 0;
        for (int32_t r = 0; r < R; r++) left += !done[r] && gb[r] >= thr;
        if (2 * left > R - n_runs_done) { /* the groups do not separate: score all, as flat
                                              would (a call per run of consecutive pages) */
            score_run(kv, ws, layer, h, qg, Gq, cand_phys, 0, n_cand, bound);
            *pos_out = NULL;
            *cb_out = NULL;
            return n_cand;
        }
        if (!left) break;
        for (int32_t r = 0; r < R; r++)
            if (!done[r] && gb[r] >= thr) {
                score_run(kv, ws, layer, h, qg, Gq, cand_phys, t->run_c0[r], t->run_c0[r + 1], bound);
                done[r] = 1;
                n_runs_done++;
            }
    }
    int32_t n = 0;
    for (int32_t r = 0; r < R; r++)
        if (done[r])
            for (int32_t c = t->run_c0[r]; c < t->run_c0[r + 1]; c++) pos[n++] = c;
    *pos_out = pos;
    *cb_out = cb; /* the last pass above gathered every scored run, in this order */
    return n;
}
