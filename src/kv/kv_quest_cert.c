/*
 * Quest certificates: a rigorous upper bound on the softmax mass a selection leaves out,
 * and the growth of a selection until that bound meets a target (quest.h, "certificates",
 * has the math and the rounding margins).
 *
 *   C1. S only falls and U only rises under rounding: every exponent, exp result, product
 *       and sum is pushed by its margin in the direction that loosens the bound, so
 *       bound_g >= the exact skipped mass whatever the rounding did.
 *   C2. One reference m_g per query head for S and U: the largest of the selected scores
 *       and the skipped pages' bound exponents. Every later term has an exponent <= ~0, so
 *       nothing overflows; S is rescaled to m_g once (a rounding operation counted like the
 *       others), and a page moved from U to S adds its exact (lowered) scores.
 *   C3. Growth is per KV head in decreasing group bound (ties: the earlier view), one page
 *       at a time, so the result is the shortest prefix of that order meeting epsilon; U of
 *       the pages still skipped is a suffix sum of the fixed order, never a difference.
 *   C4. The grown lists are rebuilt ascending, so attention reads them as any selection,
 *       and one that lists every page for every head is marked dense (the exactness gate).
 *   C5. Certification reads keys only through the views (pages in RAM) and boxes only for
 *       pages that have one; a skipped page without a box (the selection never leaves one
 *       out) would be ranked first with an infinite bound, so it can only be added.
 *   C6. Work: S for a prefix of the order is known only by scoring its keys, but the pages
 *       added raise S by at most their U terms, so the first prefix that could pass is
 *       found from the boxes (first_feasible, then a binary search after each check) and
 *       the checks before it are skipped. A head that would list more than dense_frac of
 *       the pages goes dense at once: scoring keys (scalar double) costs several times
 *       reading them, so a nearly dense selection saves nothing.
 */
#include "kv_int.h"
#include "kv_quest_int.h"

#include <math.h>
#include <stdlib.h>

#define CERT_EXP 0x1p-50   /* exponent and exp margins */
#define CERT_SUM 0x1p-51   /* per-operation margin of sums and dot products */
#define CERT_TINY 0x1p-1060 /* per-term absolute margin: underflow, subnormal rounding */
#define CERT_RATIO 0x1p-48 /* final ratio */

void kv_cert_free(st_kv_select *s) {
    free(s->c_in);
    free(s->c_ord);
    free(s->c_y);
    free(s->c_suf);
    free(s->c_s);
    free(s->c_m);
    free(s->c_ops);
    free(s->c_kd);
    free(s->c_acc);
    free(s->c_box);
}

#define CGROW(ptr, n)                                                \
    do {                                                             \
        void *np_ = realloc((ptr), (size_t)(n) * sizeof *(ptr) + 8); \
        if (!np_) return ST_E_NOMEM;                                 \
        (ptr) = np_;                                                 \
    } while (0)

static int cert_grow(st_kv_select *s, int32_t nv, int32_t H, int32_t n_head, int D) {
    if (nv > s->c_cap_views || n_head > s->c_cap_head) {
        int64_t c = nv > s->c_cap_views ? nv : s->c_cap_views;
        int64_t g = n_head > s->c_cap_head ? n_head : s->c_cap_head;
        CGROW(s->c_in, c * g);
        CGROW(s->c_ord, c);
        CGROW(s->c_y, c * g);
        CGROW(s->c_suf, (c + 1) * g);
        CGROW(s->c_s, g);
        CGROW(s->c_m, g);
        CGROW(s->c_ops, g);
        s->c_cap_views = c;
        s->c_cap_head = g;
    }
    const int64_t P = s->page_size;
    if ((int64_t)D * P > s->c_cap_k) {
        CGROW(s->c_kd, (int64_t)D * P);
        CGROW(s->c_acc, 3 * P);
        CGROW(s->c_box, 2 * D);
        s->c_cap_k = (int64_t)D * P;
    }
    return 0;
}

/* sum_d max(q_d * kmin_d, q_d * kmax_d) raised by its worst-case rounding: the products are
 * exact in double, and the (D - 1) * 2^-53 * sum |t| bound on a sum's error holds for any
 * order of the additions, so four interleaved partial sums are as safe. */
static double box_hi(const float *q, const float *box, int D) {
    double s[4] = {0, 0, 0, 0}, a[4] = {0, 0, 0, 0};
    int d = 0;
    for (; d + 4 <= D; d += 4)
        for (int i = 0; i < 4; i++) {
            const double lo = (double)q[d + i] * box[d + i], hi = (double)q[d + i] * box[D + d + i];
            const double t = lo > hi ? lo : hi;
            s[i] += t;
            a[i] += fabs(t);
        }
    for (; d < D; d++) {
        const double lo = (double)q[d] * box[d], hi = (double)q[d] * box[D + d];
        const double t = lo > hi ? lo : hi;
        s[0] += t;
        a[0] += fabs(t);
    }
    return ((s[0] + s[1]) + (s[2] + s[3])) + D * CERT_SUM * ((a[0] + a[1]) + (a[2] + a[3]));
}

/* exp(y - m), rounded down / up (C1). */
static double exp_lo(double y, double m) {
    return exp(y - m - CERT_EXP * (fabs(y) + fabs(m) + 1)) * (1 - CERT_EXP);
}
static double exp_hi(double y, double m) {
    return exp(y - m + CERT_EXP * (fabs(y) + fabs(m) + 1)) * (1 + CERT_EXP);
}

static int slot_valid(const st_attn_page *v, int32_t t) {
    return !v->valid || ((v->valid[t >> 6] >> (t & 63)) & 1);
}

static int32_t n_valid(const st_attn_page *v) {
    int32_t n = 0;
    for (int32_t t = 0; t < v->n_tokens; t++) n += slot_valid(v, t);
    return n;
}

/* KV head h's keys of page view v, dequantized exactly as kv_load_token does, into
 * c_kd[D][P] (the page's own dim-major layout: K^T [H][D][P]). */
static void load_head(const st_kv *kv, st_kv_select *s, const st_attn_page *v, int32_t h) {
    const int P = kv->p.page_size, D = kv->p.head_dim;
    const size_t off = (size_t)h * P * D, n = (size_t)P * D;
    float *o = s->c_kd;
    switch (kv->p.type) {
    case ST_TYPE_F32:
        memcpy(o, (const float *)v->k + off, n * sizeof *o);
        break;
    case ST_TYPE_F16: {
        const uint16_t *k = (const uint16_t *)v->k + off;
        for (size_t i = 0; i < n; i++) o[i] = st_fp16_to_fp32(k[i]);
        break;
    }
    case ST_TYPE_BF16: {
        const uint16_t *k = (const uint16_t *)v->k + off;
        for (size_t i = 0; i < n; i++) o[i] = st_bf16_to_fp32(k[i]);
        break;
    }
    case ST_TYPE_Q8_0: {
        const int8_t *k = (const int8_t *)v->k + off;
        const float sc = v->k_scale[h];
        for (size_t i = 0; i < n; i++) o[i] = (float)k[i] * sc;
        break;
    }
    default: ST_ASSERT(0);
    }
}

/* y[t] = scale * (q . k_t lowered by its worst-case rounding) for the n_tokens slots of the
 * page in c_kd. Each slot's sum runs over d in order (the lanes are the slots), so the
 * (D - 1) * 2^-53 * sum |t| error bound of a sequential sum holds lane by lane. */
static void score_head(const st_kv *kv, st_kv_select *s, const float *q, float scale, int32_t n_tok,
                       double *y) {
    const int P = kv->p.page_size, D = kv->p.head_dim;
    double *acc = s->c_acc, *abs_ = s->c_acc + P;
    for (int32_t t = 0; t < n_tok; t++) acc[t] = abs_[t] = 0;
    for (int d = 0; d < D; d++) {
        const double qd = q[d];
        const float *kd = s->c_kd + (size_t)d * P;
        for (int32_t t = 0; t < n_tok; t++) {
            const double x = qd * kd[t];
            acc[t] += x;
            abs_[t] += fabs(x);
        }
    }
    for (int32_t t = 0; t < n_tok; t++) y[t] = (double)scale * (acc[t] - D * CERT_SUM * abs_[t]);
}

/* Adds the scores of view v's valid tokens for KV head h's query heads to S (online max
 * while m is still the running selected maximum, fixed = 0; else against the fixed m_g). */
static void add_page(const st_kv *kv, st_kv_select *s, const st_attn_page *v,
                     const float *q, int32_t h, int32_t G, float scale, int fixed) {
    const int D = kv->p.head_dim;
    double *y = s->c_acc + 2 * kv->p.page_size;
    load_head(kv, s, v, h);
    for (int32_t g = h * G; g < (h + 1) * G; g++) {
        score_head(kv, s, q + (size_t)g * D, scale, v->n_tokens, y);
        for (int32_t t = 0; t < v->n_tokens; t++) {
            if (!slot_valid(v, t)) continue;
            if (!fixed && !(y[t] <= s->c_m[g])) { /* a new running max (or a NaN: poisons S) */
                if (s->c_s[g] > 0) s->c_s[g] *= exp_lo(s->c_m[g], y[t]), s->c_ops[g]++;
                s->c_m[g] = y[t];
            }
            s->c_s[g] += exp_lo(y[t], s->c_m[g]);
            s->c_ops[g]++;
        }
    }
}

/* The certified ratio from S (computed, ops operations) and U (suffix sum of n terms). */
static double ratio(double S, int64_t ops, double U, int64_t n) {
    if (n == 0) return 0;
    U = U * (1 + (double)(n + 1) * CERT_SUM) + (double)n * CERT_TINY;
    if (!(U < INFINITY) || isnan(S)) return 1;
    S *= 1 - (double)ops * CERT_SUM;
    if (S < 0) S = 0;
    const double r = U / (S + U) * (1 + CERT_RATIO);
    return r < 1 ? r : 1;
}

static int ord_cmp(const void *a, const void *b) {
    const kv_cert_ord *x = a, *y = b;
    if (x->key != y->key) return x->key > y->key ? -1 : 1;
    return (x->view > y->view) - (x->view < y->view);
}

/* The bound exponents scale * b_g of KV head h's box of physical page `page` into
 * y[g * stride] for the group; 0 when the page has no box (y untouched). */
static int box_exps(const st_kv *kv, st_kv_select *s, int32_t page, const float *q, int32_t h,
                    int32_t G, float scale, double *y, size_t stride) {
    const int D = kv->p.head_dim;
    if (!kv->qbox_ok[page]) return 0;
    const uint16_t *b = kv_qbox(kv, s->layer, h, page);
    for (int d = 0; d < 2 * D; d++) s->c_box[d] = st_fp16_to_fp32(b[d]);
    for (int32_t g = 0; g < G; g++) {
        double v = (double)scale * box_hi(q + (size_t)(h * G + g) * D, s->c_box, D);
        y[g * stride] = isnan(v) ? INFINITY : v;
    }
    return 1;
}

/* The fewest pages of the growth order that could possibly meet eps: S taken at its box
 * upper bound (exact only for the selected pages without a box, the recent tail), so any
 * shorter prefix fails with the exact S too and need not be scored. Reads only boxes and
 * the unboxed selected keys; uses c_suf as scratch. An estimate (plain exp, a 1e-9 slack
 * towards trying earlier): it only decides where checking starts, never the bound. */
static int32_t first_feasible(const st_kv *kv, st_kv_select *s, const st_attn_page *views,
                              const float *q, int32_t h, int32_t G, float scale, double eps,
                              int32_t n_skip) {
    const int D = kv->p.head_dim;
    const int32_t nv = s->n_views;
    const uint8_t *in = s->c_in + (size_t)h * nv;
    double *m = s->c_m + (size_t)h * G, *S = s->c_s + (size_t)h * G; /* reset by the caller after */
    double *yb = s->c_suf, *ys = s->c_acc + 2 * kv->p.page_size;
    for (int32_t g = 0; g < G; g++) m[g] = -INFINITY, S[g] = 0;
    for (int32_t j = 0; j < nv; j++) {
        if (!in[j]) continue;
        const st_attn_page *v = &views[j];
        if (box_exps(kv, s, s->phys[j], q, h, G, scale, yb, 1)) {
            const double n = (double)n_valid(v);
            for (int32_t g = 0; g < G; g++) {
                if (yb[g] > m[g]) S[g] *= exp(m[g] - yb[g]), m[g] = yb[g];
                S[g] += n * exp(yb[g] - m[g]);
            }
            continue;
        }
        load_head(kv, s, v, h);
        for (int32_t g = 0; g < G; g++) {
            score_head(kv, s, q + (size_t)(h * G + g) * D, scale, v->n_tokens, ys);
            for (int32_t t = 0; t < v->n_tokens; t++) {
                if (!slot_valid(v, t)) continue;
                if (ys[t] > m[g]) S[g] *= exp(m[g] - ys[t]), m[g] = ys[t];
                S[g] += exp(ys[t] - m[g]);
            }
        }
    }
    int32_t need = 0;
    for (int32_t g = 0; g < G && need < n_skip; g++) {
        double *t = s->c_suf;
        const double *yrow = s->c_y + (size_t)g * nv;
        for (int32_t i = 0; i < n_skip; i++) {
            const double y = yrow[s->c_ord[i].pos];
            if (y < INFINITY && y > m[g]) S[g] *= exp(m[g] - y), m[g] = y;
        }
        if (!(m[g] > -INFINITY && m[g] < INFINITY) || isnan(S[g])) return 0;
        for (int32_t i = 0; i < n_skip; i++)
            t[i] = (double)n_valid(&views[s->c_ord[i].view]) * exp(yrow[s->c_ord[i].pos] - m[g]);
        t[n_skip] = 0;
        for (int32_t i = n_skip - 1; i >= 0; i--) t[i] += t[i + 1];
        const double thr = eps * (S[g] + t[0]) * (1 + 1e-9);
        int32_t i = need;
        while (i < n_skip && !(t[i] <= thr)) i++;
        need = i;
    }
    return need;
}

/* Certifies and grows KV head h; returns pages added, writes bound[g] of its group. */
static int32_t certify_head(const st_kv *kv, st_kv_select *s, const st_attn_page *views,
                            const float *q, int32_t h, int32_t G, float scale, double eps,
                            double *bound) {
    const int32_t nv = s->n_views;
    uint8_t *in = s->c_in + (size_t)h * nv;
    int32_t n_skip = 0;
    for (int32_t j = 0; j < nv; j++) {
        if (in[j]) continue;
        kv_cert_ord *o = &s->c_ord[n_skip];
        o->view = j;
        o->pos = n_skip;
        o->key = -INFINITY;
        for (int32_t g = 0; g < G; g++) s->c_y[(size_t)g * nv + n_skip] = INFINITY;
        box_exps(kv, s, s->phys[j], q, h, G, scale, s->c_y + n_skip, (size_t)nv);
        for (int32_t g = 0; g < G; g++)
            if (!(s->c_y[(size_t)g * nv + n_skip] <= o->key)) o->key = s->c_y[(size_t)g * nv + n_skip];
        n_skip++;
    }
    qsort(s->c_ord, (size_t)n_skip, sizeof *s->c_ord, ord_cmp);
    const int32_t i0 = n_skip ? first_feasible(kv, s, views, q, h, G, scale, eps, n_skip) : 0;
    /* the most pages a selection may list before going dense is cheaper (C6) */
    const double cap = s->dense_frac * nv;
    if (i0 == n_skip || (double)(nv - n_skip + i0) > cap) { /* dense, without scoring a key */
        for (int32_t g = 0; g < G; g++) bound[h * G + g] = 0;
        int32_t *o = s->idx + (size_t)h * nv;
        for (int32_t j = 0; j < nv; j++) in[j] = 1, o[j] = j;
        s->n_sel[h] = nv;
        return n_skip;
    }
    /* exact S over the selection (online max), then the pages no shorter prefix can spare */
    for (int32_t g = h * G; g < (h + 1) * G; g++) {
        s->c_s[g] = 0;
        s->c_m[g] = -INFINITY;
        s->c_ops[g] = 0;
    }
    for (int32_t j = 0; j < nv; j++)
        if (in[j]) add_page(kv, s, &views[j], q, h, G, scale, 0);
    for (int32_t i = 0; i < i0; i++) {
        const int32_t j = s->c_ord[i].view;
        add_page(kv, s, &views[j], q, h, G, scale, 0);
        in[j] = 1;
    }
    /* reference m_g (C2) */
    for (int32_t g = 0; g < G; g++) {
        const int32_t qg = h * G + g;
        double m = s->c_m[qg];
        for (int32_t i = 0; i < n_skip; i++) {
            const double y = s->c_y[(size_t)g * nv + i];
            if (y < INFINITY && !(y <= m)) m = y;
        }
        if (!(m > -INFINITY)) m = 0;
        if (s->c_s[qg] > 0 && m > s->c_m[qg]) s->c_s[qg] *= exp_lo(s->c_m[qg], m), s->c_ops[qg]++;
        s->c_m[qg] = m;
    }
    /* each query head's U terms in growth order, then their suffix sums (C3) */
    for (int32_t g = 0; g < G; g++) {
        const double *yrow = s->c_y + (size_t)g * nv;
        double *t = s->c_suf + (size_t)g * (nv + 1);
        const double m = s->c_m[h * G + g];
        for (int32_t i = 0; i < n_skip; i++) {
            const double y = yrow[s->c_ord[i].pos];
            t[i] = y < INFINITY ? (double)n_valid(&views[s->c_ord[i].view]) * exp_hi(y, m) : INFINITY;
        }
        t[n_skip] = 0;
        for (int32_t i = n_skip - 1; i >= 0; i--) t[i] += t[i + 1];
    }
    int32_t i = i0;
    for (;;) {
        double worst = 0;
        int32_t need = i + 1;
        for (int32_t g = 0; g < G; g++) {
            const double *t = s->c_suf + (size_t)g * (nv + 1);
            const int32_t qg = h * G + g;
            bound[qg] = ratio(s->c_s[qg], s->c_ops[qg], t[i], n_skip - i);
            if (bound[qg] > worst || isnan(bound[qg])) worst = isnan(bound[qg]) ? 1 : bound[qg];
            if (i == n_skip || bound[qg] <= eps) continue;
            /* pages added from here on raise S by at most their U terms, so no prefix
             * shorter than the first i' with t[i'] <= eps * (S + t[i]) can pass: skip the
             * checks before it (binary search: t does not increase) */
            const double thr = eps * (s->c_s[qg] + t[i]) * (1 + 1e-9);
            int32_t lo = i + 1, hi = n_skip;
            while (lo < hi) {
                const int32_t mid = lo + (hi - lo) / 2;
                if (t[mid] <= thr) hi = mid;
                else lo = mid + 1;
            }
            if (lo > need) need = lo;
        }
        if (worst <= eps || i == n_skip) break;
        if (need == n_skip || (double)(nv - n_skip + need) > cap) { /* dense, the rest unscored */
            for (int32_t g = 0; g < G; g++) bound[h * G + g] = 0;
            for (int32_t k = i; k < n_skip; k++) in[s->c_ord[k].view] = 1;
            i = n_skip;
            break;
        }
        for (; i < need; i++) {
            const int32_t j = s->c_ord[i].view;
            add_page(kv, s, &views[j], q, h, G, scale, 1);
            in[j] = 1;
        }
    }
    /* the list, ascending (C4) */
    int32_t *o = s->idx + (size_t)h * nv, n = 0;
    for (int32_t j = 0; j < nv; j++)
        if (in[j]) o[n++] = j;
    s->n_sel[h] = n;
    return i;
}

int st_kv_quest_certify(const st_kv *kv, const st_attn_page *views, int32_t n_views,
                        const float *q, int32_t n_head, float scale, double epsilon,
                        st_kv_select *s, double *bound) {
    if (!kv || !s || !q || (n_views > 0 && !views) || n_views != s->n_views ||
        s->n_kv_head != kv->p.n_kv_head || n_head < kv->p.n_kv_head ||
        n_head % kv->p.n_kv_head || !(epsilon >= 0 && epsilon <= 1))
        return kv ? st_seterr(kv->ctx, ST_E_INVAL, "quest: certify: views %d for a selection "
                              "of %d, n_head %d, epsilon %g", n_views, s ? s->n_views : -1,
                              n_head, epsilon)
                  : ST_E_INVAL;
    const int D = kv->p.head_dim;
    const int32_t H = kv->p.n_kv_head, G = n_head / H, nv = n_views;
    if (scale == 0) scale = 1.0f / sqrtf((float)D);
    if (s->dense) {
        for (int32_t g = 0; bound && g < n_head; g++) bound[g] = 0;
        s->st.n_bound += n_head;
        return 0;
    }
    if (cert_grow(s, nv, H, n_head, D))
        return st_seterr(kv->ctx, ST_E_NOMEM, "quest: certify: out of memory");
    memset(s->c_in, 0, (size_t)H * nv);
    for (int32_t h = 0; h < H; h++)
        for (int32_t i = 0; i < s->n_sel[h]; i++) s->c_in[(size_t)h * nv + s->idx[(size_t)h * nv + i]] = 1;
    double local[64];
    double *b = bound ? bound : (n_head <= 64 ? local : NULL);
    if (!b) return st_seterr(kv->ctx, ST_E_INVAL, "quest: certify: bound NULL with %d heads", n_head);
    int64_t grown = 0, listed = 0;
    int all = 1;
    for (int32_t h = 0; h < H; h++) {
        grown += certify_head(kv, s, views, q, h, G, scale, epsilon, b);
        listed += s->n_sel[h];
        all &= s->n_sel[h] == nv;
    }
    if (all) s->dense = 1;
    s->st.n_grown += grown;
    s->st.n_listed = listed;
    s->st.n_bound += n_head;
    for (int32_t g = 0; g < n_head; g++) {
        if (b[g] > s->st.bound_max) s->st.bound_max = b[g];
        s->st.bound_sum += b[g];
    }
    return 0;
}
