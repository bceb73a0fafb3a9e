/* AVX2 + FMA + F16C attention kernels (head_dim a multiple of 8): run() folds a decode run
 * whole (the "decode runs" section), blocks() folds blocks one at a time with the online
 * softmax (prefill). Same structure as the AVX-512 kernels with 8-lane vectors: each row's
 * 16 scores of a block are two 8-slot vectors of broadcast-q FMAs. In blocks() the
 * dim-major K block is converted into an f32 tile [D][16] and V once into an f32 tile, then
 * accumulated for 4 rows x 16 dims in 8 registers (AVX2 has 16). */
#include "attn_int.h"
#include "core/simd_exp.h"

#include <immintrin.h>
#include <math.h>

/* exp(x) for x <= 0 (and -inf): exp(0) == 1 exactly (simd_exp.h). */
AI __m256 exp256(__m256 x) { return st_exp256(_mm256_max_ps(x, _mm256_set1_ps(-87.0f))); }

AI __m256 load8(st_type T, const void *base, size_t i) {
    switch (T) {
    case ST_TYPE_F16:
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)base + i)));
    case ST_TYPE_BF16:
        return _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)base + i))), 16));
    case ST_TYPE_Q8_0:
        return _mm256_cvtepi32_ps(
            _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)((const int8_t *)base + i))));
    default:
        return _mm256_loadu_ps((const float *)base + i);
    }
}

/* Lanes whose bit is set in the low 8 bits of m: all ones. */
AI __m256 lane_mask(uint32_t m) {
    const __m256i bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    __m256i x = _mm256_and_si256(_mm256_set1_epi32((int)m), bits);
    return _mm256_castsi256_ps(_mm256_cmpeq_epi32(x, bits));
}

AI float hmax8(__m256 v) {
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    x = _mm_max_ss(x, _mm_shuffle_ps(x, x, 1));
    return _mm_cvtss_f32(x);
}

AI float hmin8(__m256 v) {
    __m128 x = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_min_ps(x, _mm_movehl_ps(x, x));
    x = _mm_min_ss(x, _mm_shuffle_ps(x, x, 1));
    return _mm_cvtss_f32(x);
}

AI float hsum8(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_shuffle_ps(x, x, 1));
    return _mm_cvtss_f32(x);
}

/* Row r's 16 scores from the f32 K tile kf [D][16] (dim-major, like the page's K^T):
 * broadcast q[d] times a vector of 8 slots, two partial sums per half for FMA latency. */
AI float row_scores(const attn_tile *t, const float *kf, int r, uint32_t rm, float ks) {
    const int D = t->D;
    const float *q = t->q + (size_t)r * D;
    float *p = t->p + (size_t)r * ATTN_BLK;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, b0 = a0, b1 = a0;
    for (int d = 0; d < D; d += 2) {
        __m256 q0 = _mm256_broadcast_ss(q + d), q1 = _mm256_broadcast_ss(q + d + 1);
        a0 = _mm256_fmadd_ps(q0, _mm256_load_ps(kf + (size_t)d * 16), a0);
        b0 = _mm256_fmadd_ps(q0, _mm256_load_ps(kf + (size_t)d * 16 + 8), b0);
        a1 = _mm256_fmadd_ps(q1, _mm256_load_ps(kf + (size_t)d * 16 + 16), a1);
        b1 = _mm256_fmadd_ps(q1, _mm256_load_ps(kf + (size_t)d * 16 + 24), b1);
    }
    __m256 mx = _mm256_set1_ps(-INFINITY);
    __m256 h[2] = {_mm256_add_ps(a0, a1), _mm256_add_ps(b0, b1)};
    for (int i = 0; i < 2; i++) {
        __m256 s = _mm256_mul_ps(h[i], _mm256_set1_ps(ks));
        s = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), s, lane_mask(rm >> (8 * i)));
        _mm256_store_ps(p + 8 * i, s);
        mx = _mm256_max_ps(mx, s);
    }
    return hmax8(mx);
}

/* acc[r0..r0+RB) [d0, d0+16) = acc * alpha + sum over slots j in u of p[r][j] * vf[j]. */
AI void v_accum(const attn_tile *t, const float *vf, int r0, int d0, uint32_t u, const int RB) {
    const int D = t->D;
    __m256 acc[4][2];
#pragma GCC unroll 4
    for (int i = 0; i < RB; i++) {
        __m256 al = _mm256_set1_ps(t->bm[r0 + i]);
        acc[i][0] = _mm256_mul_ps(_mm256_load_ps(t->acc + (size_t)(r0 + i) * D + d0), al);
        acc[i][1] = _mm256_mul_ps(_mm256_load_ps(t->acc + (size_t)(r0 + i) * D + d0 + 8), al);
    }
    for (; u; u &= u - 1) {
        int j = __builtin_ctz(u);
        __m256 v0 = _mm256_loadu_ps(vf + (size_t)j * D + d0), v1 = _mm256_loadu_ps(vf + (size_t)j * D + d0 + 8);
#pragma GCC unroll 4
        for (int i = 0; i < RB; i++) {
            __m256 pb = _mm256_broadcast_ss(t->p + (size_t)(r0 + i) * ATTN_BLK + j);
            acc[i][0] = _mm256_fmadd_ps(pb, v0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(pb, v1, acc[i][1]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < RB; i++) {
        _mm256_store_ps(t->acc + (size_t)(r0 + i) * D + d0, acc[i][0]);
        _mm256_store_ps(t->acc + (size_t)(r0 + i) * D + d0 + 8, acc[i][1]);
    }
}

/* Same as v_accum for the 8 dims [d0, d0+8) (head_dim an odd multiple of 8). */
AI void v_accum8(const attn_tile *t, const float *vf, int r, int d0, uint32_t u) {
    const int D = t->D;
    __m256 acc = _mm256_mul_ps(_mm256_load_ps(t->acc + (size_t)r * D + d0), _mm256_set1_ps(t->bm[r]));
    for (; u; u &= u - 1) {
        int j = __builtin_ctz(u);
        acc = _mm256_fmadd_ps(_mm256_broadcast_ss(t->p + (size_t)r * ATTN_BLK + j),
                              _mm256_loadu_ps(vf + (size_t)j * D + d0), acc);
    }
    _mm256_store_ps(t->acc + (size_t)r * D + d0, acc);
}

/* pk, pv (or NULL): K and V of the block ATTN_PF_BLOCKS ahead, a whole small page-head,
 * prefetched a line at a time inside this block's K and V loops (see attn_avx512.c). */
AI void block_impl(const attn_blk *b, const st_type T, const char *pk, const char *pv) {
    const attn_tile *t = b->t;
    const int D = t->D, R = t->R;
    const size_t es = attn_elem_size(T);
    float *kf = t->kf;
    if (b->n == ATTN_BLK) {
        for (int d = 0; d < D; d++) {
            if (pk && ((size_t)d * ATTN_BLK * es) % 64 == 0) ATTN_PF(pk + (size_t)d * ATTN_BLK * es);
            _mm256_store_ps(kf + (size_t)d * 16, load8(T, b->k, (size_t)d * b->kstride));
            _mm256_store_ps(kf + (size_t)d * 16 + 8, load8(T, b->k, (size_t)d * b->kstride + 8));
        }
    } else { /* a short block (small pages, a slice's tail): zero lanes past n */
        for (int d = 0; d < D; d++)
            for (int j = 0; j < ATTN_BLK; j++)
                kf[(size_t)d * 16 + j] = j < b->n ? attn_elem(T, b->k, (size_t)d * b->kstride + j) : 0.0f;
    }
    uint32_t any = 0;
    for (int r = 0; r < R; r++) {
        uint32_t rm = attn_row_mask(t, b, r);
        t->rm[r] = rm;
        any |= rm;
        t->bm[r] = rm ? row_scores(t, kf, r, rm, b->ks) : -INFINITY;
    }
    if (!any) {
        if (pv) attn_pf_span(pv, 0, (size_t)D * ATTN_BLK * es);
        return;
    }
    for (int r0 = 0; r0 < R; r0 += 8) {
        int nr = R - r0 < 8 ? R - r0 : 8;
        float mb[8], bb[8];
        for (int i = 0; i < 8; i++) {
            mb[i] = i < nr ? t->m[r0 + i] : -INFINITY;
            bb[i] = i < nr ? t->bm[r0 + i] : -INFINITY;
        }
        __m256 m = _mm256_loadu_ps(mb), mn = _mm256_max_ps(m, _mm256_loadu_ps(bb));
        __m256 fresh = _mm256_cmp_ps(m, _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ);
        __m256 al = _mm256_andnot_ps(fresh, exp256(_mm256_sub_ps(m, mn)));
        _mm256_storeu_ps(mb, mn);
        _mm256_storeu_ps(bb, al);
        for (int i = 0; i < nr; i++) t->m[r0 + i] = mb[i], t->bm[r0 + i] = bb[i];
    }
    for (int r = 0; r < R; r++) {
        float *p = t->p + (size_t)r * ATTN_BLK;
        __m256 mr = _mm256_set1_ps(t->m[r]), vs = _mm256_set1_ps(b->vs);
        __m256 e0 = _mm256_and_ps(lane_mask(t->rm[r]), exp256(_mm256_sub_ps(_mm256_load_ps(p), mr)));
        __m256 e1 = _mm256_and_ps(lane_mask(t->rm[r] >> 8), exp256(_mm256_sub_ps(_mm256_load_ps(p + 8), mr)));
        float *l = t->l + (size_t)r * ATTN_BLK;
        _mm256_store_ps(l, _mm256_fmadd_ps(_mm256_load_ps(l), _mm256_set1_ps(t->bm[r]), _mm256_add_ps(e0, e1)));
        _mm256_store_ps(p, _mm256_mul_ps(e0, vs));
        _mm256_store_ps(p + 8, _mm256_mul_ps(e1, vs));
    }
    const float *vf = (const float *)b->v;
    const size_t vrow = (size_t)D * es; /* bytes of one slot's V */
    if (pv && (T == ST_TYPE_F32 || any != 0xffff)) { /* no per-slot loop to spread them over */
        attn_pf_span(pv, 0, vrow * ATTN_BLK);
        pv = NULL;
    }
    if (T != ST_TYPE_F32) {
        for (uint32_t u = any; u; u &= u - 1) {
            int j = __builtin_ctz(u);
            if (pv) attn_pf_span(pv, (size_t)j * vrow, vrow);
            for (int d = 0; d < D; d += 8)
                _mm256_store_ps(t->vf + (size_t)j * D + d, load8(T, b->v, (size_t)j * D + d));
        }
        vf = t->vf;
    }
    int r0 = 0;
    for (; r0 + 4 <= R; r0 += 4) {
        int d0 = 0;
        for (; d0 + 16 <= D; d0 += 16) v_accum(t, vf, r0, d0, any, 4);
        for (int i = 0; d0 < D && i < 4; i++) v_accum8(t, vf, r0 + i, d0, any);
    }
    for (; r0 < R; r0++) {
        int d0 = 0;
        for (; d0 + 16 <= D; d0 += 16) v_accum(t, vf, r0, d0, any, 1);
        if (d0 < D) v_accum8(t, vf, r0, d0, any);
    }
}

AI void blocks_impl(const attn_blk *b, int n, int n_ahead, const st_type T) {
    for (int i = 0; i < n; i++) {
        const char *pk = NULL, *pv = NULL;
        if (i + ATTN_PF_BLOCKS < n + n_ahead) {
            const attn_blk *a = &b[i + ATTN_PF_BLOCKS];
            if (a->n == ATTN_BLK && a->kstride == ATTN_BLK) pk = a->k, pv = a->v;
            else attn_prefetch_blk(a);
        }
        block_impl(&b[i], T, pk, pv);
    }
}

static void blocks_avx2(const attn_blk *b, int n, int n_ahead) {
    if (n <= 0) return;
    switch (b->t->type) {
    case ST_TYPE_F16: blocks_impl(b, n, n_ahead, ST_TYPE_F16); break;
    case ST_TYPE_BF16: blocks_impl(b, n, n_ahead, ST_TYPE_BF16); break;
    case ST_TYPE_Q8_0: blocks_impl(b, n, n_ahead, ST_TYPE_Q8_0); break;
    default: blocks_impl(b, n, n_ahead, ST_TYPE_F32); break;
    }
}

/* ---- decode runs (see st_attn_kernels.run and attn_avx512.c) ------------------------------
 * Scores of the whole run into t->s, one max and the exponentials per row, then V with the
 * accumulators of 4 rows x 16 dims in 8 registers across the run. A block's 16 scores are
 * two 8-slot vectors per row: 4 rows x 2 halves are the 8 FMA chains the latency needs. */

/* Scores of rows [r0, r0 + RB) over a full block whose K^T dimension rows are ksb bytes
 * apart, queries transposed (q4[d * 4 + i]); K prefetched from pk (NULL: none). */
AI void run_scores_blk(const float *q4, const int RB, const st_type T, const int D, const char *k,
                       size_t ksb, __m256 (*s)[2], const char *pk) {
    const size_t es = attn_elem_size(T);
    __m256 a[4][2];
#pragma GCC unroll 4
    for (int i = 0; i < RB; i++) a[i][0] = a[i][1] = _mm256_setzero_ps();
    for (int d = 0; d < D; d++) {
        if (pk && ((size_t)d * ATTN_BLK * es) % 64 == 0) ATTN_PF(pk + (size_t)d * ATTN_BLK * es);
        const __m256 k0 = load8(T, k, 0), k1 = load8(T, k, 8);
        k += ksb;
#pragma GCC unroll 4
        for (int i = 0; i < RB; i++) {
            const __m256 q = _mm256_broadcast_ss(q4 + (size_t)d * 4 + i);
            a[i][0] = _mm256_fmadd_ps(q, k0, a[i][0]);
            a[i][1] = _mm256_fmadd_ps(q, k1, a[i][1]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < RB; i++) s[i][0] = a[i][0], s[i][1] = a[i][1];
}

/* Pass 1 for rows [r0, r0 + RB): scaled and masked (-inf) scores into t->s. A short block
 * (small pages, a slice's tail) is first copied into the zero-padded f32 tile t->kf. */
AI void run_scores(const attn_tile *t, const attn_blk *b, int n, const attn_blk *nx, int nn,
                   const st_type T, const int D, int r0, const int RB, int pf) {
    const int R = t->R;
    const float *q4 = t->q4 + (size_t)(r0 / 4) * D * 4;
    for (int x = 0; x < n; x++) {
        const char *pk = pf ? attn_run_pf(b, n, nx, nn, x + ATTN_RUN_PF) : NULL;
        __m256 s[4][2];
        if (b[x].n == ATTN_BLK) {
            run_scores_blk(q4, RB, T, D, b[x].k, b[x].kstride * attn_elem_size(T), s, pk);
        } else {
            float *kf = t->kf;
            for (int d = 0; d < D; d++)
                for (int j = 0; j < ATTN_BLK; j++)
                    kf[(size_t)d * 16 + j] = j < b[x].n ? attn_elem(T, b[x].k, (size_t)d * b[x].kstride + j) : 0.0f;
            run_scores_blk(q4, RB, ST_TYPE_F32, D, (const char *)kf, 16 * sizeof(float), s, NULL);
        }
        float *S = t->s + ((size_t)x * R + r0) * ATTN_BLK;
        const __m256 ks = _mm256_set1_ps(b[x].ks), ninf = _mm256_set1_ps(-INFINITY);
        const __m256 lo = lane_mask(b[x].mask), hi = lane_mask(b[x].mask >> 8);
#pragma GCC unroll 4
        for (int i = 0; i < RB; i++) {
            _mm256_store_ps(S + (size_t)i * ATTN_BLK, _mm256_blendv_ps(ninf, _mm256_mul_ps(s[i][0], ks), lo));
            _mm256_store_ps(S + (size_t)i * ATTN_BLK + 8, _mm256_blendv_ps(ninf, _mm256_mul_ps(s[i][1], ks), hi));
        }
    }
}

/* Pass 2 for rows [r0, r0 + RB), as attn_avx512.c's run_softmax_rows: per row m = the
 * run's max, p = exp(s - m) * vs (0 where masked), l = the sum of exp(s - m) spread over
 * lanes; the rows interleaved, and the next V blocks requested meanwhile (attn_softmax_pf). */
AI void run_softmax_rows(const attn_tile *t, const attn_blk *b, int n, int r0, const int RB,
                         const st_type T) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    float *S = t->s + (size_t)r0 * ATTN_BLK;
    const size_t st = (size_t)t->R * ATTN_BLK;
    __m256 mx[4], mv[4], l0[4], l1[4];
#pragma GCC unroll 4
    for (int i = 0; i < RB; i++) mx[i] = ninf, l0[i] = l1[i] = _mm256_setzero_ps();
    for (int x = 0; x < n; x++)
#pragma GCC unroll 4
        for (int i = 0; i < RB; i++) {
            const float *sx = S + x * st + i * ATTN_BLK;
            mx[i] = _mm256_max_ps(mx[i], _mm256_max_ps(_mm256_load_ps(sx), _mm256_load_ps(sx + 8)));
        }
    float M[4];
    uint32_t dead = 0; /* rows with no valid slot */
#pragma GCC unroll 4
    for (int i = 0; i < RB; i++) {
        M[i] = hmax8(mx[i]);
        mv[i] = _mm256_set1_ps(M[i]);
        if (M[i] == -INFINITY) dead |= 1u << i;
    }
    for (int x = 0; x < n; x++) {
        if (r0 == 0) attn_softmax_pf(t, b, n, x);
        const __m256 vs = _mm256_set1_ps(T == ST_TYPE_Q8_0 ? b[x].vs : 1.0f);
#pragma GCC unroll 4
        for (int i = 0; i < RB; i++) {
            float *sx = S + x * st + i * ATTN_BLK;
            if (dead & (1u << i)) {
                _mm256_store_ps(sx, _mm256_setzero_ps()), _mm256_store_ps(sx + 8, _mm256_setzero_ps());
                continue;
            }
            const __m256 x0 = _mm256_load_ps(sx), x1 = _mm256_load_ps(sx + 8);
            const __m256 e0 = _mm256_and_ps(_mm256_cmp_ps(x0, ninf, _CMP_NEQ_OQ), exp256(_mm256_sub_ps(x0, mv[i])));
            const __m256 e1 = _mm256_and_ps(_mm256_cmp_ps(x1, ninf, _CMP_NEQ_OQ), exp256(_mm256_sub_ps(x1, mv[i])));
            l0[i] = _mm256_add_ps(l0[i], e0), l1[i] = _mm256_add_ps(l1[i], e1);
            _mm256_store_ps(sx, _mm256_mul_ps(e0, vs));
            _mm256_store_ps(sx + 8, _mm256_mul_ps(e1, vs));
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < RB; i++) {
        t->m[r0 + i] = M[i];
        _mm256_store_ps(t->l + (size_t)(r0 + i) * ATTN_BLK, l0[i]);
        _mm256_store_ps(t->l + (size_t)(r0 + i) * ATTN_BLK + 8, l1[i]);
    }
}

/* One slot j of V into RB rows x 8*ND dims: acc[i][k] += p[i * ATTN_BLK + j] * v[j][d0 + 8k]. */
AI void run_v_slot(__m256 (*acc)[2], const float *p, const st_type T, const void *v, int j, int D,
                   int d0, const int RB, const int ND) {
    __m256 vv[2];
#pragma GCC unroll 2
    for (int k = 0; k < ND; k++) vv[k] = load8(T, v, (size_t)j * D + d0 + 8 * k);
#pragma GCC unroll 4
    for (int i = 0; i < RB; i++) {
        const __m256 pb = _mm256_broadcast_ss(p + (size_t)i * ATTN_BLK + j);
#pragma GCC unroll 2
        for (int k = 0; k < ND; k++) acc[i][k] = _mm256_fmadd_ps(pb, vv[k], acc[i][k]);
    }
}

/* Pass 3: acc[r0 .. r0 + RB)[d0, d0 + 8 * ND) = sum over the run's valid slots of p * v. */
AI void run_v(const attn_tile *t, const attn_blk *b, int n, const attn_blk *nx, int nn,
              const st_type T, const int D, int r0, int d0, const int RB, const int ND, int pf) {
    const size_t vrow = (size_t)D * attn_elem_size(T);
    __m256 acc[4][2];
#pragma GCC unroll 4
    for (int i = 0; i < RB; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int x = 0; x < n; x++) {
        const float *p = t->s + ((size_t)x * t->R + r0) * ATTN_BLK;
        const char *pv = pf ? attn_run_pf(b, n, nx, nn, n + x + ATTN_RUN_PF) : NULL;
        uint32_t u = b[x].mask;
        if (u == 0xffff) {
#pragma GCC unroll 16
            for (int j = 0; j < 16; j++) {
                if (pv) attn_pf_span(pv, (size_t)j * vrow, vrow);
                run_v_slot(acc, p, T, b[x].v, j, D, d0, RB, ND);
            }
            continue;
        }
        if (pv) attn_pf_span(pv, 0, vrow * ATTN_BLK);
        for (; u; u &= u - 1) run_v_slot(acc, p, T, b[x].v, __builtin_ctz(u), D, d0, RB, ND);
    }
#pragma GCC unroll 4
    for (int i = 0; i < RB; i++)
#pragma GCC unroll 2
        for (int k = 0; k < ND; k++) _mm256_store_ps(t->acc + (size_t)(r0 + i) * D + d0 + 8 * k, acc[i][k]);
}

#define RUN_LANES 8
#define RUN_ND 2
#include "attn_run.h"

#define QUEST_MAX_QD 2048 /* floats of q+ / q- kept on the stack */

/* Bound of one page for NG heads (NG a constant after inlining, so the accumulators live
 * in registers). max(q*mn, q*mx) = q+ * mx + q- * mn with q+ = max(q, 0), q- = min(q, 0):
 * two FMAs per 8 dims and head instead of two products, a max and an add; each chunk of
 * the box is converted once for the NG heads. */
AI float quest_heads(int D, const int NG, const float *qp, const float *qn, const uint16_t *mn,
                     const uint16_t *mx) {
    __m256 s0[4], s1[4];
#pragma GCC unroll 4
    for (int g = 0; g < NG; g++) s0[g] = s1[g] = _mm256_setzero_ps();
    for (int d = 0; d < D; d += 8) {
        const __m256 vn = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(mn + d)));
        const __m256 vx = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(mx + d)));
#pragma GCC unroll 4
        for (int g = 0; g < NG; g++) {
            s0[g] = _mm256_fmadd_ps(_mm256_load_ps(qp + (size_t)g * D + d), vx, s0[g]);
            s1[g] = _mm256_fmadd_ps(_mm256_load_ps(qn + (size_t)g * D + d), vn, s1[g]);
        }
    }
    float best = -INFINITY;
#pragma GCC unroll 4
    for (int g = 0; g < NG; g++) {
        const float v = hsum8(_mm256_add_ps(s0[g], s1[g]));
        best = attn_quest_max(best, v);
    }
    return best;
}

/* One page at a time, any D and G (shapes the fast path does not take). */
static float quest_one(int D, int G, const float *q, const uint16_t *mn, const uint16_t *mx) {
    float best = -INFINITY;
    for (int g = 0; g < G; g++) {
        const float *qg = q + (size_t)g * D;
        __m256 s = _mm256_setzero_ps();
        int d = 0;
        for (; d + 8 <= D; d += 8) {
            __m256 qv = _mm256_loadu_ps(qg + d);
            __m256 vn = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(mn + d)));
            __m256 vx = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(mx + d)));
            const __m256 qp = _mm256_max_ps(qv, _mm256_setzero_ps()), qn = _mm256_min_ps(qv, _mm256_setzero_ps());
            s = _mm256_add_ps(s, _mm256_add_ps(_mm256_mul_ps(qp, vx), _mm256_mul_ps(qn, vn)));
        }
        float v = hsum8(s);
        for (; d < D; d++) v += attn_quest_term(qg[d], st_fp16_to_fp32(mn[d]), st_fp16_to_fp32(mx[d]));
        best = attn_quest_max(best, v);
    }
    return best;
}

static void quest_avx2(int D, int G, const float *q, const uint16_t *box, int64_t stride,
                       int32_t n_pages, float *bound) {
    if (D % 8 || (size_t)G * D > QUEST_MAX_QD) {
        for (int32_t p = 0; p < n_pages; p++)
            bound[p] = quest_one(D, G, q, box + p * stride, box + p * stride + D);
        return;
    }
    float qp[QUEST_MAX_QD] __attribute__((aligned(32))), qn[QUEST_MAX_QD] __attribute__((aligned(32)));
    for (int i = 0; i < G * D; i += 8) {
        const __m256 v = _mm256_loadu_ps(q + i);
        _mm256_store_ps(qp + i, _mm256_max_ps(v, _mm256_setzero_ps()));
        _mm256_store_ps(qn + i, _mm256_min_ps(v, _mm256_setzero_ps()));
    }
    for (int32_t p = 0; p < n_pages; p++) {
        const uint16_t *mn = box + p * stride, *mx = mn + D;
        float best = -INFINITY;
        for (int g0 = 0; g0 < G; g0 += 4) {
            const float *gp = qp + (size_t)g0 * D, *gn = qn + (size_t)g0 * D;
            float v;
            switch (G - g0 < 4 ? G - g0 : 4) {
            case 1: v = quest_heads(D, 1, gp, gn, mn, mx); break;
            case 2: v = quest_heads(D, 2, gp, gn, mn, mx); break;
            case 3: v = quest_heads(D, 3, gp, gn, mn, mx); break;
            default: v = quest_heads(D, 4, gp, gn, mn, mx); break;
            }
            best = attn_quest_max(best, v);
        }
        bound[p] = best;
    }
}

/* ---- Quest page metadata ----------------------------------------------------------------- */

/* 8 slots of a key row as f32, exactly as the reference dequantizes them. */
static inline __m256 minmax_load8(const attn_minmax_rows *r, const char *kd, int32_t s) {
    switch (r->type) {
    case ST_TYPE_F16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)kd + s)));
    case ST_TYPE_BF16:
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)kd + s))), 16));
    case ST_TYPE_Q8_0:
        return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(kd + s)))),
                             _mm256_set1_ps(r->sc));
    default: return _mm256_loadu_ps((const float *)kd + s);
    }
}

/* As key_minmax_avx512 (attn_avx512.c), 8 slots at a time. */
static void key_minmax_avx2(const attn_minmax_rows *r, int32_t D, float *kmin, float *kmax) {
    if (r->P % 8 || r->P > ST_ATTN_MAX_PAGE_SIZE) { /* loads stay inside a row */
        for (int32_t d = 0; d < D; d++) attn_minmax_row_ref(r, d, kmin, kmax);
        return;
    }
    const size_t row = (size_t)r->P * attn_elem_size(r->type);
    __m256 use[ST_ATTN_MAX_PAGE_SIZE / 8];
    uint32_t bits[ST_ATTN_MAX_PAGE_SIZE / 8];
    const int32_t nc = (r->n_tokens + 7) / 8;
    for (int32_t c = 0; c < nc; c++) {
        bits[c] = attn_minmax_slots(r, 8 * c, 8);
        use[c] = lane_mask(bits[c]);
    }
    const __m256 pinf = _mm256_set1_ps(INFINITY), ninf = _mm256_set1_ps(-INFINITY);
    for (int32_t d = 0; d < D; d++) {
        const char *kd = (const char *)r->k + (size_t)d * row;
        __m256 lo = pinf, hi = ninf;
        uint32_t odd = 0, pz = 0, nz = 0;
        for (int32_t c = 0; c < nc; c++) {
            const __m256 x = minmax_load8(r, kd, 8 * c);
            const uint32_t m = bits[c];
            odd |= (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) & m;
            const uint32_t z = (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_EQ_OQ)) & m;
            const uint32_t neg = (uint32_t)_mm256_movemask_ps(x);
            pz |= z & ~neg;
            nz |= z & neg;
            lo = _mm256_min_ps(lo, _mm256_blendv_ps(pinf, x, use[c]));
            hi = _mm256_max_ps(hi, _mm256_blendv_ps(ninf, x, use[c]));
        }
        if (odd || (pz && nz)) {
            attn_minmax_row_ref(r, d, kmin, kmax);
            continue;
        }
        kmin[d] = hmin8(lo);
        kmax[d] = hmax8(hi);
    }
}

/* As box_to_f16_avx512 (attn_avx512.c), 8 dimensions at a time. */
static void box_to_f16_avx2(int32_t D, const float *kmin, const float *kmax, uint16_t *box) {
    int32_t d = 0;
    for (; d + 8 <= D; d += 8) {
        const __m256 lo = _mm256_loadu_ps(kmin + d), hi = _mm256_loadu_ps(kmax + d);
        if (_mm256_movemask_ps(_mm256_or_ps(_mm256_cmp_ps(lo, lo, _CMP_UNORD_Q), _mm256_cmp_ps(hi, hi, _CMP_UNORD_Q)))) {
            attn_box_to_f16_ref(8, kmin + d, kmax + d, box + d, box + D + d);
            continue;
        }
        _mm_storeu_si128((__m128i *)(box + d), _mm256_cvtps_ph(lo, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
        _mm_storeu_si128((__m128i *)(box + D + d), _mm256_cvtps_ph(hi, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC));
    }
    attn_box_to_f16_ref(D - d, kmin + d, kmax + d, box + d, box + D + d);
}

const st_attn_kernels st_attn_kernels_avx2_ = {
    .isa = ST_ISA_AVX2,
    .d_mult = 8,
    .chunk_rows = 32,
    .blocks = blocks_avx2,
    .run = run_kernel,
    .quest = quest_avx2,
    .key_minmax = key_minmax_avx2,
    .box_to_f16 = box_to_f16_avx2,
};
