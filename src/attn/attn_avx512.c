/* AVX-512 attention kernels (head_dim a multiple of 16): run() folds a decode run whole
 * (see the "decode runs" section), blocks() folds blocks one at a time with the online
 * softmax (chunk tiles, i.e. prefill).
 *
 * Keys are dim-major in a page (K^T per head), so one vector holds one dimension of 16 slots
 * and a block's scores are broadcast-q FMAs with no horizontal sums. The online-softmax
 * update of up to 4 rows that see a block whole runs as one branch-free vector step
 * (rows_update_vec). V is accumulated for 4 rows x 64 dims in 16 registers, converting each
 * V element once when R <= 4 and from an f32 tile otherwise.
 *
 * Memory: the blocks ATTN_PF_BLOCKS ahead are prefetched a line or two at a time from
 * inside the K and V loops of the current block (one request per line of work), not in a
 * burst per block: a burst of 64 requests overflows the core's L1 miss buffers and the
 * rest wait, so memory and compute took turns instead of overlapping (docs/PERFORMANCE.md,
 * decode attention). */
#include "attn_int.h"
#include "core/simd_exp.h"

#include <immintrin.h>
#include <math.h>

/* exp(x) for x <= 0 (and -inf): exp(0) == 1 exactly (simd_exp.h). */
AI __m512 exp512(__m512 x) { return st_exp512(_mm512_max_ps(x, _mm512_set1_ps(-87.0f))); }

/* 16 consecutive elements of type T at element index i, as f32 (q8_0 unscaled). */
AI __m512 load16(st_type T, const void *base, size_t i) {
    switch (T) {
    case ST_TYPE_F16:
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)base + i)));
    case ST_TYPE_BF16:
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)base + i))), 16));
    case ST_TYPE_Q8_0:
        return _mm512_cvtepi32_ps(
            _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)((const int8_t *)base + i))));
    default:
        return _mm512_loadu_ps((const float *)base + i);
    }
}

/* 16 slots of dimension d of a K^T block (lanes >= n zero), as f32 (q8_0 unscaled). */
AI __m512 loadk(st_type T, const void *k, size_t i, __mmask16 lm, const int FULL) {
    if (FULL) return load16(T, k, i);
    switch (T) {
    case ST_TYPE_F16:
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(lm, (const uint16_t *)k + i));
    case ST_TYPE_BF16:
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lm, (const uint16_t *)k + i)), 16));
    case ST_TYPE_Q8_0:
        return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(lm, (const int8_t *)k + i)));
    default:
        return _mm512_maskz_loadu_ps(lm, (const float *)k + i);
    }
}

/* Scores of rows [r0, r0 + RB) (RB <= 4) over the 16 slots of a K^T block whose dimension d
 * starts at element d * ks: s[i] = sum_d q[r0 + i][d] * K[d][slot]. The keys are dim-major,
 * so a vector holds one dimension of 16 slots and every FMA is a useful one: no horizontal
 * sums. Two partial sums per row (even and odd d) keep 8 FMA chains in flight. */
AI void scores(const attn_tile *t, st_type T, const void *k, size_t ks, __mmask16 lm, int r0,
               const int RB, const int FULL, __m512 *s, const char *pk) {
    const int D = t->D;
    const float *q = t->q + (size_t)r0 * D;
    __m512 a[4][2];
#pragma GCC unroll 4
    for (int i = 0; i < RB; i++) a[i][0] = a[i][1] = _mm512_setzero_ps();
    for (int d = 0; d < D; d += 2) {
        if (pk) attn_pf_span(pk, (size_t)d * ATTN_BLK * attn_elem_size(T), 2 * ATTN_BLK * attn_elem_size(T));
        __m512 k0 = loadk(T, k, (size_t)d * ks, lm, FULL);
        __m512 k1 = loadk(T, k, (size_t)(d + 1) * ks, lm, FULL);
#pragma GCC unroll 4
        for (int i = 0; i < RB; i++) {
            a[i][0] = _mm512_fmadd_ps(_mm512_set1_ps(q[(size_t)i * D + d]), k0, a[i][0]);
            a[i][1] = _mm512_fmadd_ps(_mm512_set1_ps(q[(size_t)i * D + d + 1]), k1, a[i][1]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < RB; i++) s[i] = _mm512_add_ps(a[i][0], a[i][1]);
}

/* Row r's online-softmax update from its 16 raw scores s, all in registers: p[r] gets
 * exp(score - m_new) * vs (0 where masked), bm[r] gets alpha = exp(m_old - m_new), m and
 * l are updated. Going through memory between rows would stall on store forwarding
 * (scalar stores, vector reload). */
AI void row_update(const attn_tile *t, __m512 s, float *p, float *bm, int r, uint32_t rm,
                   float ks, float vs) {
    s = _mm512_mul_ps(s, _mm512_set1_ps(ks));
    s = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), (__mmask16)rm, s);
    const float m_old = t->m[r];
    float alpha = 1.0f, m_new = m_old;
    /* a new max is rare after the first blocks: test lanes, reduce only then */
    if (_mm512_cmp_ps_mask(s, _mm512_set1_ps(m_old), _CMP_GT_OQ)) {
        m_new = _mm512_reduce_max_ps(s);
        alpha = m_old == -INFINITY ? 0.0f : _mm_cvtss_f32(_mm512_castps512_ps128(
                                                exp512(_mm512_set1_ps(m_old - m_new))));
        t->m[r] = m_new;
    }
    __m512 e = _mm512_maskz_mov_ps((__mmask16)rm, exp512(_mm512_sub_ps(s, _mm512_set1_ps(m_new))));
    float *l = t->l + (size_t)r * ATTN_BLK;
    _mm512_store_ps(l, _mm512_fmadd_ps(_mm512_load_ps(l), _mm512_set1_ps(alpha), e));
    bm[r] = alpha;
    _mm512_store_ps(p + (size_t)r * ATTN_BLK, _mm512_mul_ps(e, _mm512_set1_ps(vs)));
}

/* One slot j of V into RB rows x 16*ND dims of accumulators:
 * acc[i][k] += p[i * ATTN_BLK + j] * v[j][d0 + 16 k]. */
AI void v_slot(__m512 (*acc)[4], const float *p, const st_type T, const void *v, int j, int D,
               int d0, const int RB, const int ND) {
    __m512 vv[4];
#pragma GCC unroll 4
    for (int k = 0; k < ND; k++) vv[k] = load16(T, v, (size_t)j * D + d0 + 16 * k);
#pragma GCC unroll 4
    for (int i = 0; i < RB; i++) {
        const __m512 pb = _mm512_set1_ps(p[(size_t)i * ATTN_BLK + j]);
#pragma GCC unroll 4
        for (int k = 0; k < ND; k++) acc[i][k] = _mm512_fmadd_ps(pb, vv[k], acc[i][k]);
    }
}

/* acc[r0..r0+RB) [d0, d0 + 16*ND) = acc * alpha + sum over slots j in u of p[r][j] * v[j]. */
AI void v_accum(const attn_tile *t, const float *p, const float *bm, st_type VT, const void *v,
                int r0, int d0, uint32_t u, const int RB, const int ND, const char *pv) {
    const int D = t->D;
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int i = 0; i < RB; i++) {
        __m512 al = _mm512_set1_ps(bm[r0 + i]);
#pragma GCC unroll 4
        for (int k = 0; k < ND; k++)
            acc[i][k] = _mm512_mul_ps(_mm512_load_ps(t->acc + (size_t)(r0 + i) * D + d0 + 16 * k), al);
    }
    if (u == 0xffff) { /* full block: straight-line, no bit scanning */
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++) {
            if (pv) attn_pf_span(pv, (size_t)j * D * attn_elem_size(VT), (size_t)D * attn_elem_size(VT));
            v_slot(acc, p + (size_t)r0 * ATTN_BLK, VT, v, j, D, d0, RB, ND);
        }
        u = 0;
    }
    for (; u; u &= u - 1) v_slot(acc, p + (size_t)r0 * ATTN_BLK, VT, v, __builtin_ctz(u), D, d0, RB, ND);
#pragma GCC unroll 4
    for (int i = 0; i < RB; i++)
#pragma GCC unroll 4
        for (int k = 0; k < ND; k++) _mm512_store_ps(t->acc + (size_t)(r0 + i) * D + d0 + 16 * k, acc[i][k]);
}

AI void v_all(const attn_tile *t, const float *p, const float *bm, st_type VT, const void *v,
              uint32_t u, const char *pv) {
    const int D = t->D, R = t->R;
    int r0 = 0;
    for (; r0 + 4 <= R; r0 += 4) {
        int d0 = 0;
        for (; d0 + 64 <= D; d0 += 64) v_accum(t, p, bm, VT, v, r0, d0, u, 4, 4, pv), pv = NULL;
        for (; d0 < D; d0 += 16) v_accum(t, p, bm, VT, v, r0, d0, u, 4, 1, pv), pv = NULL;
    }
    for (; r0 < R; r0++) {
        int d0 = 0;
        for (; d0 + 64 <= D; d0 += 64) v_accum(t, p, bm, VT, v, r0, d0, u, 1, 4, pv), pv = NULL;
        for (; d0 < D; d0 += 16) v_accum(t, p, bm, VT, v, r0, d0, u, 1, 1, pv), pv = NULL;
    }
}

/* The 4 row maxima of s[0..3] in lanes 0..3 of every 128-bit lane (a 10-op tree instead of
 * four reductions). */
AI __m512 max4x16(const __m512 *s) {
    __m512 a = _mm512_max_ps(_mm512_unpacklo_ps(s[0], s[1]), _mm512_unpackhi_ps(s[0], s[1]));
    __m512 c = _mm512_max_ps(_mm512_unpacklo_ps(s[2], s[3]), _mm512_unpackhi_ps(s[2], s[3]));
    __m512d ad = _mm512_castps_pd(a), cd = _mm512_castps_pd(c);
    __m512 m = _mm512_max_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(ad, cd)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(ad, cd)));
    m = _mm512_max_ps(m, _mm512_shuffle_f32x4(m, m, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm512_max_ps(m, _mm512_shuffle_f32x4(m, m, _MM_SHUFFLE(2, 3, 0, 1)));
}

/* Lane i of every 128-bit lane of x, broadcast. */
AI __m512 lane_bcast(__m512 x, const int i) {
    switch (i) {
    case 0: return _mm512_permute_ps(x, 0x00);
    case 1: return _mm512_permute_ps(x, 0x55);
    case 2: return _mm512_permute_ps(x, 0xAA);
    default: return _mm512_permute_ps(x, 0xFF);
    }
}

/* rows_update for rows that all see the block's mask (decode: no causal limit): the RB rows
 * are updated together and without branches. m_new = max(m_old, row max) and alpha =
 * exp(m_old - m_new) for all rows in one exp; when the max does not move, alpha is exp(0),
 * exactly 1, so the values are row_update's bit for bit, minus its unpredictable branch and
 * its four serial reductions, which cost more than the V half of a block. */
AI void rows_update_vec(const attn_blk *b, const __m512 *sc, float *p, float *bm, int r0,
                        const int RB) {
    const attn_tile *t = b->t;
    const __mmask16 rows = (__mmask16)((1u << RB) - 1);
    const __mmask16 valid = (__mmask16)b->mask;
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 s[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        s[i] = i < RB ? _mm512_mask_mov_ps(ninf, valid, _mm512_mul_ps(sc[i], _mm512_set1_ps(b->ks))) : ninf;
    /* whole 4-float loads (m is padded to 16 floats) and, for a full group, whole stores:
     * masked stores do not forward to loads, and the next block reads these at once. A
     * partial group followed by live rows (R % 4 rows after the last full group, e.g.
     * G = 6 or 7) stores only its own: the rows after it are still to be updated. */
    const __m512 m_old = _mm512_broadcast_f32x4(_mm_mask_mov_ps(_mm_set1_ps(-INFINITY), rows, _mm_loadu_ps(t->m + r0)));
    const __m512 m_new = _mm512_max_ps(m_old, max4x16(s));
    /* a row's first tokens: alpha = 0 (m_old - m_new = -inf; exp512 clamps it otherwise) */
    const __mmask16 seen = _mm512_cmp_ps_mask(m_old, ninf, _CMP_NEQ_OQ);
    const __m512 alpha = _mm512_maskz_mov_ps(seen, exp512(_mm512_sub_ps(m_old, m_new)));
    /* rows r0 + RB .. r0 + 3 dead: past R, inside m's padding (R rounded up to 16) */
    const int tail = r0 + RB >= t->R && r0 + 4 <= ((t->R + 15) & ~15);
    if (RB == 4 || tail) {
        _mm_storeu_ps(t->m + r0, _mm512_castps512_ps128(m_new));
        _mm_storeu_ps(bm + r0, _mm512_castps512_ps128(alpha));
    } else {
        _mm_mask_storeu_ps(t->m + r0, rows, _mm512_castps512_ps128(m_new));
        _mm_mask_storeu_ps(bm + r0, rows, _mm512_castps512_ps128(alpha));
    }
#pragma GCC unroll 4
    for (int i = 0; i < RB; i++) {
        const int r = r0 + i;
        __m512 e = _mm512_maskz_mov_ps(valid, exp512(_mm512_sub_ps(s[i], lane_bcast(m_new, i))));
        float *l = t->l + (size_t)r * ATTN_BLK;
        _mm512_store_ps(l, _mm512_fmadd_ps(_mm512_load_ps(l), lane_bcast(alpha, i), e));
        _mm512_store_ps(p + (size_t)r * ATTN_BLK, _mm512_mul_ps(e, _mm512_set1_ps(b->vs)));
    }
}

AI void rows_update(const attn_blk *b, const __m512 *sc, float *p, float *bm, int r0,
                    const int RB, uint32_t *any) {
    const attn_tile *t = b->t;
    /* every row's mask is the block's (nonzero): decode, or a prefill block that every
     * query of the tile sees whole */
    if (!t->lim || b->pos0 + b->n - 1 <= t->lim_min) {
        *any |= b->mask;
        rows_update_vec(b, sc, p, bm, r0, RB);
        return;
    }
#pragma GCC unroll 4
    for (int i = 0; i < RB; i++) {
        const int r = r0 + i;
        uint32_t rm = attn_row_mask(t, b, r);
        *any |= rm;
        if (rm) {
            row_update(t, sc[i], p, bm, r, rm, b->ks, b->vs);
        } else { /* nothing for this row: p = 0, alpha = 1, state unchanged */
            bm[r] = 1.0f;
            _mm512_store_ps(p + (size_t)r * ATTN_BLK, _mm512_setzero_ps());
        }
    }
}

/* rows_update of a group of R <= 4 rows whose scores are in sc, into scratch set `set`. */
AI uint32_t front_from(const attn_blk *b, int set, const __m512 *sc) {
    const attn_tile *t = b->t;
    float *p = t->p + (size_t)set * t->R * ATTN_BLK, *bm = t->bm + (size_t)set * (t->R + 16);
    uint32_t any = 0;
    switch (t->R) {
    case 1: rows_update(b, sc, p, bm, 0, 1, &any); break;
    case 2: rows_update(b, sc, p, bm, 0, 2, &any); break;
    case 3: rows_update(b, sc, p, bm, 0, 3, &any); break;
    default: rows_update(b, sc, p, bm, 0, 4, &any); break;
    }
    return any;
}

/* First half of a block, into scratch set `set`: scores and softmax update (m, l).
 * A decode group (R <= 4 rows) reads K^T straight from the page, converting each element
 * once; more rows (chunk tiles, wide GQA) first convert the block into an f32 tile
 * [D][16] that every 4 rows then reuse. Returns the union of the row masks. */
AI uint32_t block_front(const attn_blk *b, int set, const st_type T, const int FULL, const char *pk) {
    const attn_tile *t = b->t;
    const int D = t->D, R = t->R;
    float *p = t->p + (size_t)set * R * ATTN_BLK, *bm = t->bm + (size_t)set * (R + 16);
    const __mmask16 lm = (__mmask16)((1u << b->n) - 1);
    uint32_t any = 0;
    __m512 sc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                    _mm512_setzero_ps()}; /* rows >= R unused */
    if (R <= 4) {
        switch (R) {
        case 1: scores(t, T, b->k, b->kstride, lm, 0, 1, FULL, sc, pk); break;
        case 2: scores(t, T, b->k, b->kstride, lm, 0, 2, FULL, sc, pk); break;
        case 3: scores(t, T, b->k, b->kstride, lm, 0, 3, FULL, sc, pk); break;
        default: scores(t, T, b->k, b->kstride, lm, 0, 4, FULL, sc, pk); break;
        }
        return front_from(b, set, sc);
    }
    float *restrict kt = t->kf + (size_t)set * ATTN_BLK * D;
    for (int d = 0; d < D; d++)
        _mm512_store_ps(kt + (size_t)d * 16, loadk(T, b->k, (size_t)d * b->kstride, lm, FULL));
    int r0 = 0;
    for (; r0 + 4 <= R; r0 += 4) {
        scores(t, ST_TYPE_F32, kt, 16, 0xffff, r0, 4, 1, sc, NULL);
        rows_update(b, sc, p, bm, r0, 4, &any);
    }
    for (; r0 < R; r0++) {
        scores(t, ST_TYPE_F32, kt, 16, 0xffff, r0, 1, 1, sc, NULL);
        rows_update(b, sc, p, bm, r0, 1, &any);
    }
    return any;
}

/* Second half: acc = acc * alpha + p . V over the slots in `any`. */
AI void block_back(const attn_blk *b, int set, uint32_t any, const st_type T, const char *pv) {
    const attn_tile *t = b->t;
    const int D = t->D, R = t->R;
    const float *p = t->p + (size_t)set * R * ATTN_BLK, *bm = t->bm + (size_t)set * (R + 16);
    if (T == ST_TYPE_F32 || R <= 4) {
        v_all(t, p, bm, T, b->v, any, any == 0xffff ? pv : NULL);
        if (any != 0xffff && pv) attn_pf_span(pv, 0, (size_t)D * ATTN_BLK * attn_elem_size(T));
    } else {
        if (pv) attn_pf_span(pv, 0, (size_t)D * ATTN_BLK * attn_elem_size(T));
        for (uint32_t u = any; u; u &= u - 1) {
            int j = __builtin_ctz(u);
            for (int d = 0; d < D; d += 16)
                _mm512_store_ps(t->vf + (size_t)j * D + d, load16(T, b->v, (size_t)j * D + d));
        }
        v_all(t, p, bm, ST_TYPE_F32, t->vf, any, NULL);
    }
}

/* block_back of b[i] when it has slots to add; the V lines pv of a block ahead, which
 * that back half would have requested along the way, are requested either way. */
AI void back_or_prefetch(const attn_blk *b, int i, uint32_t any, const st_type T, const char *pv,
                         size_t v_bytes) {
    if (any) block_back(&b[i], i & 1, any, T, pv);
    else if (pv) attn_pf_span(pv, 0, v_bytes);
}

/* Software pipeline: block i's scores and softmax are issued before block i-1's V, so the
 * latency chains of one (softmax, exp) overlap the FMA stream of the other. Block i-1's V
 * only needs its own set; block i's front never touches acc. */
AI void blocks_impl(const attn_blk *b, int n, int n_ahead, const st_type T) {
    const size_t v_bytes = (size_t)b->t->D * ATTN_BLK * attn_elem_size(T);
    uint32_t prev = 0;
    /* pk, pv[1]: where block i + ATTN_PF_BLOCKS's K and V are prefetched a line or two at a
     * time inside block i's loops (NULL: none, or burst-prefetched here); pv[0] is the
     * previous block's, consumed by its back half below */
    const char *pk = NULL, *pv[2] = {NULL, NULL};
    for (int i = 0; i < n; i++) {
        pk = NULL, pv[1] = NULL;
        if (i + ATTN_PF_BLOCKS < n + n_ahead) {
            const attn_blk *a = &b[i + ATTN_PF_BLOCKS];
            if (a->n == ATTN_BLK && a->kstride == ATTN_BLK && a->t->R <= 4)
                pk = a->k, pv[1] = a->v;
            else
                attn_prefetch_blk(a);
        }
        uint32_t cur = b[i].n == ATTN_BLK ? block_front(&b[i], i & 1, T, 1, pk)
                                           : block_front(&b[i], i & 1, T, 0, pk);
        back_or_prefetch(b, i - 1, prev, T, pv[0], v_bytes);
        prev = cur;
        pv[0] = pv[1];
    }
    back_or_prefetch(b, n - 1, prev, T, pv[0], v_bytes);
}

static void blocks_avx512(const attn_blk *b, int n, int n_ahead) {
    if (n <= 0) return;
    switch (b->t->type) {
    case ST_TYPE_F16: blocks_impl(b, n, n_ahead, ST_TYPE_F16); break;
    case ST_TYPE_BF16: blocks_impl(b, n, n_ahead, ST_TYPE_BF16); break;
    case ST_TYPE_Q8_0: blocks_impl(b, n, n_ahead, ST_TYPE_Q8_0); break;
    default: blocks_impl(b, n, n_ahead, ST_TYPE_F32); break;
    }
}

/* ---- decode runs ------------------------------------------------------------------------
 * A run is folded in three passes (see st_attn_kernels.run): scores of every block into
 * t->s, one max and the exponentials per row, then V. The passes are throughput-bound
 * loops; the online update's chain per block (max, exp of alpha, rescale, store, reload)
 * is gone. Memory is read in the order K of the run's blocks, their V, then the next run's
 * K; ATTN_RUN_PF blocks ahead along that order are prefetched a line or two at a time from the
 * inner loops, as blocks_impl does. */


/* The scores of rows [r0, r0 + RB) over block b, scaled and masked (-inf), stored at S. */
AI void run_store_scores(const attn_blk *b, const __m512 *sc, float *S, int r0, const int RB) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
#pragma GCC unroll 4
    for (int i = 0; i < RB; i++) {
        __m512 x = b->ks == 1.0f ? sc[i] : _mm512_mul_ps(sc[i], _mm512_set1_ps(b->ks));
        _mm512_store_ps(S + (size_t)(r0 + i) * ATTN_BLK, _mm512_mask_mov_ps(ninf, (__mmask16)b->mask, x));
    }
}

/* scores_two for a run: the rows' queries transposed (q4[d * 4 + i]: row i, dimension d)
 * so that the broadcasts come from one pointer at fixed offsets, and the K rows reached by
 * stepping pointers: with D a constant too, the loop is FMAs, loads and prefetches only
 * (the generic form spent a third of its instructions on addresses and spills). */
AI void run_scores_two(const float *q4, const int RB, const st_type T, const int D, const char *x,
                       const char *y, size_t ksb, __m512 *sx, __m512 *sy, const char *px,
                       const char *py) {
    const size_t es = attn_elem_size(T);
    __m512 a[4][2], c[4][2];
#pragma GCC unroll 4
    for (int i = 0; i < RB; i++) a[i][0] = a[i][1] = c[i][0] = c[i][1] = _mm512_setzero_ps();
    for (int d = 0; d < D; d += 2) {
        if (px) attn_pf_span(px, (size_t)d * ATTN_BLK * es, 2 * ATTN_BLK * es);
        if (py) attn_pf_span(py, (size_t)d * ATTN_BLK * es, 2 * ATTN_BLK * es);
        const __m512 x0 = load16(T, x, 0), x1 = load16(T, x + ksb, 0);
        const __m512 y0 = load16(T, y, 0), y1 = load16(T, y + ksb, 0);
        x += 2 * ksb, y += 2 * ksb;
#pragma GCC unroll 4
        for (int i = 0; i < RB; i++) {
            const __m512 q0 = _mm512_set1_ps(q4[(size_t)d * 4 + i]);
            const __m512 q1 = _mm512_set1_ps(q4[(size_t)d * 4 + 4 + i]);
            a[i][0] = _mm512_fmadd_ps(q0, x0, a[i][0]);
            a[i][1] = _mm512_fmadd_ps(q1, x1, a[i][1]);
            c[i][0] = _mm512_fmadd_ps(q0, y0, c[i][0]);
            c[i][1] = _mm512_fmadd_ps(q1, y1, c[i][1]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < RB; i++) {
        sx[i] = _mm512_add_ps(a[i][0], a[i][1]);
        sy[i] = _mm512_add_ps(c[i][0], c[i][1]);
    }
}

/* Pass 1 for rows [r0, r0 + RB): full blocks two at a time, others alone (scores()). */
AI void run_scores(const attn_tile *t, const attn_blk *b, int n, const attn_blk *nx, int nn,
                   const st_type T, const int D, int r0, const int RB, int pf) {
    const int R = t->R;
    const float *q4 = t->q4 + (size_t)(r0 / 4) * D * 4;
    for (int i = 0; i < n; i++) {
        float *S = t->s + (size_t)i * R * ATTN_BLK;
        const char *p0 = pf ? attn_run_pf(b, n, nx, nn, i + ATTN_RUN_PF) : NULL;
        __m512 sx[4], sy[4];
        if (i + 1 < n && b[i].n == ATTN_BLK && b[i + 1].n == ATTN_BLK) {
            const char *p1 = pf ? attn_run_pf(b, n, nx, nn, i + 1 + ATTN_RUN_PF) : NULL;
            run_scores_two(q4, RB, T, D, b[i].k, b[i + 1].k, b[i].kstride * attn_elem_size(T), sx, sy, p0, p1);
            run_store_scores(&b[i], sx, S, r0, RB);
            run_store_scores(&b[i + 1], sy, S + (size_t)R * ATTN_BLK, r0, RB);
            i++;
            continue;
        }
        const __mmask16 lm = (__mmask16)((1u << b[i].n) - 1);
        if (b[i].n == ATTN_BLK) scores(t, T, b[i].k, b[i].kstride, lm, r0, RB, 1, sx, p0);
        else scores(t, T, b[i].k, b[i].kstride, lm, r0, RB, 0, sx, p0);
        run_store_scores(&b[i], sx, S, r0, RB);
    }
}

/* Pass 2 for rows [r0, r0 + RB): per row m = the run's max, p = exp(s - m) * vs (0 where
 * masked), l = sum p/vs spread over the 16 lanes; a row with no valid slot keeps m = -inf,
 * l = 0 and gets p = 0. The rows are interleaved, so that their max chains and
 * exponentials overlap: one row after another, each row's exponentials waited for its own
 * chain of maxima, and memory sat idle meanwhile (docs/PERFORMANCE.md, decode attention).
 * Each row's operations and their order are the same either way.
 *
 * Memory: the first row group requests the V blocks after the ones the scores pass has
 * (attn_softmax_pf), so the reads do not stop for the softmax. */
AI void run_softmax_rows(const attn_tile *t, const attn_blk *b, int n, int r0, const int RB,
                         const st_type T) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    float *S = t->s + (size_t)r0 * ATTN_BLK;
    const size_t st = (size_t)t->R * ATTN_BLK;
    __m512 mx[4], mv[4], l[4];
#pragma GCC unroll 4
    for (int i = 0; i < RB; i++) mx[i] = ninf, l[i] = _mm512_setzero_ps();
    for (int x = 0; x < n; x++)
#pragma GCC unroll 4
        for (int i = 0; i < RB; i++) mx[i] = _mm512_max_ps(mx[i], _mm512_load_ps(S + x * st + i * ATTN_BLK));
    float M[4];
    uint32_t dead = 0; /* rows with no valid slot */
#pragma GCC unroll 4
    for (int i = 0; i < RB; i++) {
        M[i] = _mm512_reduce_max_ps(mx[i]);
        mv[i] = _mm512_set1_ps(M[i]);
        if (M[i] == -INFINITY) dead |= 1u << i;
    }
    for (int x = 0; x < n; x++) {
        if (r0 == 0) attn_softmax_pf(t, b, n, x);
        const __m512 vs = _mm512_set1_ps(T == ST_TYPE_Q8_0 ? b[x].vs : 1.0f);
#pragma GCC unroll 4
        for (int i = 0; i < RB; i++) {
            float *sx = S + x * st + i * ATTN_BLK;
            if (dead & (1u << i)) {
                _mm512_store_ps(sx, _mm512_setzero_ps());
                continue;
            }
            const __m512 v = _mm512_load_ps(sx);
            const __mmask16 live = _mm512_cmp_ps_mask(v, ninf, _CMP_NEQ_OQ);
            const __m512 e = _mm512_maskz_mov_ps(live, exp512(_mm512_sub_ps(v, mv[i])));
            l[i] = _mm512_add_ps(l[i], e);
            _mm512_store_ps(sx, T == ST_TYPE_Q8_0 ? _mm512_mul_ps(e, vs) : e);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < RB; i++) {
        t->m[r0 + i] = M[i];
        _mm512_store_ps(t->l + (size_t)(r0 + i) * ATTN_BLK, l[i]);
    }
}

/* Pass 3: acc[r0 .. r0 + RB)[d0, d0 + 16 * ND) = sum over the run's valid slots of p * v,
 * in registers across the whole run. */
AI void run_v(const attn_tile *t, const attn_blk *b, int n, const attn_blk *nx, int nn,
              const st_type T, const int D, int r0, int d0, const int RB, const int ND, int pf) {
    const int R = t->R;
    const size_t vrow = (size_t)D * attn_elem_size(T);
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int i = 0; i < RB; i++)
#pragma GCC unroll 4
        for (int k = 0; k < ND; k++) acc[i][k] = _mm512_setzero_ps();
    for (int x = 0; x < n; x++) {
        const float *p = t->s + ((size_t)x * R + r0) * ATTN_BLK;
        const void *v = b[x].v;
        const char *pv = pf ? attn_run_pf(b, n, nx, nn, n + x + ATTN_RUN_PF) : NULL;
        uint32_t u = b[x].mask;
        if (u == 0xffff) {
#pragma GCC unroll 16
            for (int j = 0; j < 16; j++) {
                if (pv) attn_pf_span(pv, (size_t)j * vrow, vrow);
                v_slot(acc, p, T, v, j, D, d0, RB, ND);
            }
            continue;
        }
        /* the block ahead is requested all the same (as attn_avx2.c's run_v) */
        if (pv) attn_pf_span(pv, 0, vrow * ATTN_BLK);
        for (; u; u &= u - 1) v_slot(acc, p, T, v, __builtin_ctz(u), D, d0, RB, ND);
    }
#pragma GCC unroll 4
    for (int i = 0; i < RB; i++)
#pragma GCC unroll 4
        for (int k = 0; k < ND; k++) _mm512_store_ps(t->acc + (size_t)(r0 + i) * D + d0 + 16 * k, acc[i][k]);
}

#define RUN_LANES 16
#define RUN_ND 4
#include "attn_run.h"

/* a[j] holds 16 partial sums of value j; returns the 16 values in order (45 ops). */
AI __m512 hsum16x16(__m512 *a) {
    __m512 x[8], y[4];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        x[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]),
                             _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        __m512d e = _mm512_castps_pd(x[2 * i]), f = _mm512_castps_pd(x[2 * i + 1]);
        y[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(e, f)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(e, f)));
    }
    __m512 u01 = _mm512_add_ps(_mm512_shuffle_f32x4(y[0], y[1], _MM_SHUFFLE(2, 0, 2, 0)),
                               _mm512_shuffle_f32x4(y[0], y[1], _MM_SHUFFLE(3, 1, 3, 1)));
    __m512 u23 = _mm512_add_ps(_mm512_shuffle_f32x4(y[2], y[3], _MM_SHUFFLE(2, 0, 2, 0)),
                               _mm512_shuffle_f32x4(y[2], y[3], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_add_ps(_mm512_shuffle_f32x4(u01, u23, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(u01, u23, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* One page at a time, any D and G (shapes the fast path does not take). */
static void quest_one(int D, int G, const float *q, const uint16_t *mn, const uint16_t *mx,
                      float *bound) {
    float best = -INFINITY;
    for (int g = 0; g < G; g++) {
        const float *qg = q + (size_t)g * D;
        __m512 s = _mm512_setzero_ps();
        for (int d = 0; d < D; d += 16) {
            __mmask16 m = D - d >= 16 ? 0xffff : (__mmask16)((1u << (D - d)) - 1);
            __m512 qv = _mm512_maskz_loadu_ps(m, qg + d);
            __m512 vn = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, mn + d));
            __m512 vx = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, mx + d));
            const __m512 qp = _mm512_max_ps(qv, _mm512_setzero_ps()), qn = _mm512_min_ps(qv, _mm512_setzero_ps());
            s = _mm512_add_ps(s, _mm512_add_ps(_mm512_mul_ps(qp, vx), _mm512_mul_ps(qn, vn)));
        }
        float v = _mm512_reduce_add_ps(s);
        best = attn_quest_max(best, v);
    }
    *bound = best;
}

#define QUEST_MAX_QD 2048 /* floats of q+ / q- kept on the stack by the fast path */

/* Bounds of pages [0, n) in groups of 16/G pages: for each page a dimension chunk of its
 * box is loaded once and feeds all G heads' accumulators. The last, partial group runs the
 * same arithmetic with its missing pages' vectors zero: every output lane of hsum16x16 sums
 * only its own vector, in an order that does not depend on the vector's place, so a page's
 * bound is the same bits whichever group, run or call it falls in (the ranking's chunks and
 * threads never change a selection). */
AI void quest_groups(int D, const int G, const float *qp, const float *qn, const uint16_t *box,
                     int64_t stride, int32_t n_pages, float *bound) {
    const int ppt = 16 / G;
    for (int32_t p = 0; p < n_pages; p += ppt) {
        const int np = n_pages - p < ppt ? (int)(n_pages - p) : ppt;
        __m512 a[16];
        /* unrolled, so that a[] stays in registers (-O2 does not peel this loop by itself,
         * and a[] then lives in memory: docs/PERFORMANCE.md, Quest) */
#pragma GCC unroll 16
        for (int j = 0; j < ppt; j++) {
            if (j >= np) { /* the partial last group */
#pragma GCC unroll 16
                for (int g = 0; g < G; g++) a[j * G + g] = _mm512_setzero_ps();
                continue;
            }
            const uint16_t *mn = box + (p + j) * stride, *mx = mn + D;
            __m512 s0[16], s1[16];
#pragma GCC unroll 16
            for (int g = 0; g < G; g++) s0[g] = s1[g] = _mm512_setzero_ps();
            for (int d = 0; d < D; d += 16) {
                const __m512 vx = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(mx + d)));
                const __m512 vn = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(mn + d)));
#pragma GCC unroll 16
                for (int g = 0; g < G; g++) {
                    s0[g] = _mm512_fmadd_ps(_mm512_load_ps(qp + (size_t)g * D + d), vx, s0[g]);
                    s1[g] = _mm512_fmadd_ps(_mm512_load_ps(qn + (size_t)g * D + d), vn, s1[g]);
                }
            }
#pragma GCC unroll 16
            for (int g = 0; g < G; g++) a[j * G + g] = _mm512_add_ps(s0[g], s1[g]);
        }
        float t[16] __attribute__((aligned(64)));
        _mm512_store_ps(t, hsum16x16(a));
        for (int j = 0; j < np; j++) {
            float best = t[j * G];
            for (int g = 1; g < G; g++)
                best = attn_quest_max(best, t[j * G + g]);
            bound[p + j] = best;
        }
    }
}

/* max(q*mn, q*mx) = q+ * mx + q- * mn with q+ = max(q, 0), q- = min(q, 0): two FMAs per 16
 * dims. The 16/G pages x G heads of a group of pages fill 16 vectors whose lane sums one
 * transpose-add tree produces together; the bound is then the max over each page's G. */
static void quest_avx512(int D, int G, const float *q, const uint16_t *box, int64_t stride,
                         int32_t n_pages, float *bound) {
    if (D % 16 == 0 && G <= 16 && 16 % G == 0 && (size_t)G * D <= QUEST_MAX_QD) {
        float qp[QUEST_MAX_QD] __attribute__((aligned(64))), qn[QUEST_MAX_QD] __attribute__((aligned(64)));
        for (int i = 0; i < G * D; i += 16) {
            __m512 v = _mm512_loadu_ps(q + i);
            _mm512_store_ps(qp + i, _mm512_max_ps(v, _mm512_setzero_ps()));
            _mm512_store_ps(qn + i, _mm512_min_ps(v, _mm512_setzero_ps()));
        }
        switch (G) {
        case 1: quest_groups(D, 1, qp, qn, box, stride, n_pages, bound); break;
        case 2: quest_groups(D, 2, qp, qn, box, stride, n_pages, bound); break;
        case 4: quest_groups(D, 4, qp, qn, box, stride, n_pages, bound); break;
        case 8: quest_groups(D, 8, qp, qn, box, stride, n_pages, bound); break;
        default: quest_groups(D, 16, qp, qn, box, stride, n_pages, bound); break;
        }
        return;
    }
    for (int32_t p = 0; p < n_pages; p++)
        quest_one(D, G, q, box + p * stride, box + p * stride + D, &bound[p]);
}

/* ---- Quest page metadata ----------------------------------------------------------------- */

/* 16 slots of a key row as f32, exactly as the reference dequantizes them. */
static inline __m512 minmax_load16(const attn_minmax_rows *r, const char *kd, int32_t s) {
    switch (r->type) {
    case ST_TYPE_F16: return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)kd + s)));
    case ST_TYPE_BF16:
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)kd + s))), 16));
    case ST_TYPE_Q8_0:
        return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(kd + s)))),
                             _mm512_set1_ps(r->sc));
    default: return _mm512_loadu_ps((const float *)kd + s);
    }
}

/* Rows of 16 slots or more: per row a masked vector min and max and one tree reduction,
 * which gives the reference's bits unless the slot order decides them (a NaN, which the
 * reference skips or keeps by position, or both zeros, of which it keeps the first): such
 * rows go to the reference. */
static void key_minmax_avx512(const attn_minmax_rows *r, int32_t D, float *kmin, float *kmax) {
    if (r->P % 16 || r->P > ST_ATTN_MAX_PAGE_SIZE) { /* loads stay inside a row */
        for (int32_t d = 0; d < D; d++) attn_minmax_row_ref(r, d, kmin, kmax);
        return;
    }
    const size_t row = (size_t)r->P * attn_elem_size(r->type);
    __mmask16 use[ST_ATTN_MAX_PAGE_SIZE / 16];
    const int32_t nc = (r->n_tokens + 15) / 16;
    for (int32_t c = 0; c < nc; c++) use[c] = (__mmask16)attn_minmax_slots(r, 16 * c, 16);
    const __m512 pinf = _mm512_set1_ps(INFINITY), ninf = _mm512_set1_ps(-INFINITY);
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    for (int32_t d = 0; d < D; d++) {
        const char *kd = (const char *)r->k + (size_t)d * row;
        __m512 lo = pinf, hi = ninf;
        __mmask16 odd = 0, pz = 0, nz = 0;
        for (int32_t c = 0; c < nc; c++) {
            const __m512 x = minmax_load16(r, kd, 16 * c);
            const __mmask16 m = use[c];
            odd |= _mm512_mask_cmp_ps_mask(m, x, x, _CMP_UNORD_Q);
            const __mmask16 z = _mm512_mask_cmp_ps_mask(m, x, _mm512_setzero_ps(), _CMP_EQ_OQ);
            const __mmask16 neg = _mm512_test_epi32_mask(_mm512_castps_si512(x), sign);
            pz |= z & ~neg;
            nz |= z & neg;
            lo = _mm512_mask_min_ps(lo, m, lo, x);
            hi = _mm512_mask_max_ps(hi, m, hi, x);
        }
        if (odd || (pz && nz)) {
            attn_minmax_row_ref(r, d, kmin, kmax);
            continue;
        }
        kmin[d] = _mm512_reduce_min_ps(lo);
        kmax[d] = _mm512_reduce_max_ps(hi);
    }
}

/* Directed rounding in the conversion itself: toward -inf for kmin, +inf for kmax, which
 * is what the reference's round-to-nearest plus one outward step computes; chunks with a
 * NaN go to the reference (payloads). */
static void box_to_f16_avx512(int32_t D, const float *kmin, const float *kmax, uint16_t *box) {
    int32_t d = 0;
    for (; d + 16 <= D; d += 16) {
        const __m512 lo = _mm512_loadu_ps(kmin + d), hi = _mm512_loadu_ps(kmax + d);
        if (_mm512_cmp_ps_mask(lo, lo, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(hi, hi, _CMP_UNORD_Q)) {
            attn_box_to_f16_ref(16, kmin + d, kmax + d, box + d, box + D + d);
            continue;
        }
        _mm256_storeu_si256((__m256i *)(box + d), _mm512_cvt_roundps_ph(lo, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
        _mm256_storeu_si256((__m256i *)(box + D + d),
                            _mm512_cvt_roundps_ph(hi, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC));
    }
    attn_box_to_f16_ref(D - d, kmin + d, kmax + d, box + d, box + D + d);
}

const st_attn_kernels st_attn_kernels_avx512_ = {
    .isa = ST_ISA_AVX512,
    .d_mult = 16,
    .chunk_rows = 128,
    .blocks = blocks_avx512,
    .run = run_kernel,
    .quest = quest_avx512,
    .key_minmax = key_minmax_avx512,
    .box_to_f16 = box_to_f16_avx512,
};
