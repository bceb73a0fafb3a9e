/*
 * The AVX-512 (F, BW, VL, DQ + VNNI) K-quant row kernels, included by two files:
 * kquants_avx512.c compiles them as they are, kquants_avx512gfni.c with GFNI, where one
 * affine instruction per 64 weights replaces a shift and a mask (kq_nibbles64). Both
 * give the same bytes to the same arithmetic, so a GFNI and a non-GFNI CPU compute the
 * same bits. Dispatch must only pick them when st_cpu_has_vnni() (and, for the GFNI
 * build, st_cpu_has_gfni()).
 *
 * Shape of the Q4_K / Q5_K dots: per 64 weights one vpdpbusd (u8 weights x s8
 * activations, 4 products per int32 lane), two such results packed into int16 words
 * (vpackssdw, exact: see kq_pack_scale_pick) and per 128 weights one vpmaddwd / vpdpwssd
 * that multiplies by the sub-block scales into 16 int32 lanes; one int->float convert
 * and FMA per 256-weight block. Q6_K the same with its 16 sub-blocks of 16 (scale words
 * from kq6_pack_scale_idx). The mins (Q4_K, Q5_K) and the -32 offset (Q6_K) are applied
 * through the Q8_K bsums, so the weights are touched once. Elements are never reordered:
 * a Q4_K / Q5_K 64-weight group is built from a 32-byte broadcast load, its low nibbles in
 * the low half and its high nibbles in the high half. This form replaced maddubs + vpdpwssd
 * per 64 weights, which took more vector ops per block (docs/PERFORMANCE.md, quantized
 * matvec).
 */
#ifndef STRATA_QUANT_KQUANTS_AVX512_H
#define STRATA_QUANT_KQUANTS_AVX512_H

#include "quant/kquants.h"
#include "quant/quad_avx512.h"

#include "strata/core.h"
#include "strata/quant.h"

#include <immintrin.h>

/* 16-bit lanes 0-15 (the low 32 bytes) shift by lo, lanes 16-31 by hi. */
static inline __m512i kq_halves16(uint64_t lo, uint64_t hi) {
    const long long l = kq_words4(lo), h = kq_words4(hi);
    return _mm512_set_epi64(h, h, h, h, l, l, l, l);
}

/* 64 weights from 32 quant bytes: the low nibbles (sub-block 2k) in the low 256 bits,
 * the high nibbles (sub-block 2k + 1) in the high 256 bits; element order is kept, so
 * the matching activations are one contiguous 64-byte load. With GFNI one affine
 * transform per byte does it (a bit matrix per qword: the low qwords keep bits 0-3, the
 * high ones move bits 4-7 down); without it a shift by 0 / 4 and a mask. Both give the
 * same bytes. */
KQ_AI __m512i kq_nibbles64(const uint8_t *q32) {
    const __m512i b = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)q32));
#ifdef __GFNI__
    const long long lo = 0x0102040800000000ll, hi = 0x1020408000000000ll;
    return _mm512_gf2p8affine_epi64_epi8(b, _mm512_set_epi64(hi, hi, hi, hi, lo, lo, lo, lo), 0);
#else
    return _mm512_and_si512(_mm512_srlv_epi16(b, kq_halves16(0, 4)), _mm512_set1_epi8(0x0F));
#endif
}

/* vpdpbusd of group g (64 weights x 64 activations) leaves sub-block 2g's 4-product sums
 * in dword lanes 0-7 and 2g + 1's in lanes 8-15, each within +-4 * 31 * 128 (Q5_K), so
 * vpackssdw of groups 2p and 2p + 1 packs them into words exactly (no saturation): in
 * 128-bit lane k, words 0-3 come from group 2p, words 4-7 from group 2p + 1, of
 * sub-blocks 4p + k/2 and 4p + 2 + k/2. This vpshufb control turns the broadcast 8-byte
 * scale vector into the matching int16 scale words, for one vpmaddwd / vpdpwssd. */
static inline __m512i kq_pack_scale_pick(int p) {
    const long long a = kq_pick4(4 * p), b = kq_pick4(4 * p + 1), c = kq_pick4(4 * p + 2), d = kq_pick4(4 * p + 3);
    return _mm512_set_epi64(d, b, d, b, c, a, c, a);
}

/* The scaled integer dot of a super-block: the 4 groups of 64 unsigned weights w against
 * the 256 activations a, the two packed pairs of groups multiplied by their scale words
 * sp0 / sp1 (kq_pack_scale_pick, kq6_pack_scale_idx); 16 int32 lanes. */
KQ_AI __m512i kq_scaled_dot256(const __m512i w[4], const int8_t *a, __m512i sp0, __m512i sp1) {
    __m512i p[4];
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) p[g] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[g], _mm512_loadu_si512(a + 64 * g));
    const __m512i sumi = _mm512_madd_epi16(_mm512_packs_epi32(p[0], p[1]), sp0);
    return _mm512_dpwssd_epi32(sumi, _mm512_packs_epi32(p[2], p[3]), sp1);
}

/* ---- row x NC-token dots ------------------------------------------------------------
 * A tile of NR weight rows x NC activation rows runs NR passes of one weight row against
 * NC activation rows: per super-block the weights are unpacked (nibbles, high bits,
 * scales) once and serve every activation row, which is where a K-quant dot spends most
 * of its µops; the activation rows stay in L1 between passes. vec_dot is the 1 x 1
 * instance, and every (row, activation) pair sees the same operations in the same order
 * whatever NC is, so a tile element equals vec_dot bit for bit. */

/* Q4_K (Q5 = 0) and Q5_K (Q5 = 1: vx holds st_block_q5_K, whose qh adds the 5th bit);
 * both blocks start with d, dmin and the packed scales. */
KQ_AI void q45k_row(const int Q5, const int NC, int nb, const void *vx, const void *y, size_t by,
                    float *s, size_t bs) {
    const __m512i b16 = _mm512_set1_epi8(16);
    const __m512i pick[2] = {kq_pack_scale_pick(0), kq_pack_scale_pick(1)};
    /* qh bit 2k is the 5th bit of sub-block 2k (low half), bit 2k+1 of sub-block 2k+1 */
    const __m512i hb[4] = {kq_halves16(0x0101, 0x0202), kq_halves16(0x0404, 0x0808),
                           kq_halves16(0x1010, 0x2020), kq_halves16(0x4040, 0x8080)};
    __m512 acc[ST_TILE_MAX];
    __m256 accm[ST_TILE_MAX];
#pragma GCC unroll 4
    for (int c = 0; c < NC; c++) acc[c] = _mm512_setzero_ps(), accm[c] = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const st_block_q4_K *x4 = (const st_block_q4_K *)vx + i;
        const st_block_q5_K *x5 = (const st_block_q5_K *)vx + i;
        __m128 dmx; /* d, dmin */
        __m256i M;
        const uint64_t sc = kq_q45k_head(Q5 ? &x5->d : &x4->d, Q5 ? x5->scales : x4->scales, &dmx, &M);
        const __m512i S = _mm512_set1_epi64((long long)sc);
        const uint8_t *q = Q5 ? x5->qs : x4->qs;
        __m512i w[4];
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) w[g] = kq_nibbles64(q + 32 * g);
        const __m512i sp0 = _mm512_shuffle_epi8(S, pick[0]), sp1 = _mm512_shuffle_epi8(S, pick[1]);
        if (Q5) { /* a set qh bit adds 16 (the quant's 5th bit) to the nibble below it */
            const __m512i QH = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x5->qh));
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) w[g] = _mm512_mask_add_epi8(w[g], _mm512_test_epi8_mask(QH, hb[g]), w[g], b16);
        }
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++) {
            const st_block_q8_K *yc = kq_act(y, by, c, i);
            const __m128 dm = _mm_mul_ps(dmx, _mm_set1_ps(yc->d));
            __m512i sumi = kq_scaled_dot256(w, yc->qs, sp0, sp1);
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_broadcastss_ps(dm), acc[c]);
            const __m256i pm = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)yc->bsums), M);
            accm[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(pm),
                                      _mm256_permutexvar_ps(_mm256_set1_epi32(1), _mm256_castps128_ps256(dm)),
                                      accm[c]);
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < NC; c++) s[(size_t)c * bs] = _mm512_reduce_add_ps(acc[c]) - kq_hsum256(accm[c]);
}

/* The high nibbles of 64 bytes moved down to bits 0-3 (with GFNI one affine op). */
KQ_AI __m512i kq_high_nibbles(__m512i v) {
#ifdef __GFNI__
    return _mm512_gf2p8affine_epi64_epi8(v, _mm512_set1_epi64(0x1020408000000000ll), 0);
#else
    return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0F));
#endif
}

/* Q6_K: vpdpbusd of group g leaves sub-block 4g + i's sums in dword lanes 4i..4i+3
 * (within +-4 * 63 * 128, so vpackssdw keeps them exact); packing groups 2p and 2p + 1
 * puts sub-blocks 8p + k (words 0-3) and 8p + 4 + k (words 4-7) in 128-bit lane k. This
 * vpermw index picks the matching words of the 16 sign-extended scales. */
static inline __m512i kq6_pack_scale_idx(int p) {
    long long q[8];
    for (int k = 0; k < 4; k++) {
        q[2 * k] = kq_words4((uint64_t)(8 * p + k));
        q[2 * k + 1] = kq_words4((uint64_t)(8 * p + 4 + k));
    }
    return _mm512_set_epi64(q[7], q[6], q[5], q[4], q[3], q[2], q[1], q[0]);
}

KQ_AI void q6k_row(const int NC, int nb, const st_block_q6_K *x, const void *y, size_t by, float *s,
                   size_t bs) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    /* In a half (128 weights): ql byte l low nibble = element l (l < 64), high nibble =
     * element 64 + l; qh byte l holds bits 4-5 of elements l, 32 + l, 64 + l, 96 + l in
     * its bit pairs 0-1, 2-3, 4-5, 6-7. These shifts move each pair to bits 4-5. */
    const __m512i shl_a = kq_halves16(4, 2), shr_b = kq_halves16(0, 2);
    const __m512i pick[2] = {kq6_pack_scale_idx(0), kq6_pack_scale_idx(1)};
    __m512 acc[ST_TILE_MAX];
#pragma GCC unroll 4
    for (int c = 0; c < NC; c++) acc[c] = _mm512_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const float dx = _cvtsh_ss(x[i].d);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].scales));
        const __m512i sp0 = _mm512_permutexvar_epi16(pick[0], _mm512_zextsi256_si512(sc16));
        const __m512i sp1 = _mm512_permutexvar_epi16(pick[1], _mm512_zextsi256_si512(sc16));
        __m512i w[4];
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m512i L = _mm512_loadu_si512(x[i].ql + 64 * h);
            const __m512i H = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x[i].qh + 32 * h)));
            /* A | (B & C) */
            w[2 * h] = _mm512_ternarylogic_epi32(_mm512_and_si512(L, m4), _mm512_sllv_epi16(H, shl_a), m30, 0xF8);
            w[2 * h + 1] = _mm512_ternarylogic_epi32(kq_high_nibbles(L), _mm512_srlv_epi16(H, shr_b), m30, 0xF8);
        }
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++) {
            const st_block_q8_K *yc = kq_act(y, by, c, i);
            const float d = yc->d * dx;
            __m512i sumi = kq_scaled_dot256(w, yc->qs, sp0, sp1);
            /* the stored quants are q + 32: subtract 32 * sum_j scale_j * bsum_j */
            const __m256i corr = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)yc->bsums), sc16);
            sumi = _mm512_sub_epi32(sumi, _mm512_zextsi256_si512(_mm256_slli_epi32(corr, 5)));
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_set1_ps(d), acc[c]);
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < NC; c++) s[(size_t)c * bs] = _mm512_reduce_add_ps(acc[c]);
}

/* ---- Q4_K and Q5_K over a quad (kquants.h: the quad blocks) ---------------------------
 * One row per 128-bit lane: a chunk load holds 16 quant bytes of each of the 4 rows, its low
 * nibbles are 16 weights of sub-block 2g (g = chunk / 2) and its high nibbles 16 of 2g + 1
 * (Q5_K: plus 16 where the qh chunk's bit 2g / 2g + 1 is set), and the matching 16
 * activations are broadcast to the 4 lanes. The two chunks of a sub-block accumulate in one
 * vpdpbusd chain (8 products a dword lane, within +-8 * 31 * 128, so vpackssdw keeps them), a pair of sub-blocks is packed to words and
 * multiplied by its scale words in one vpdpwssd: a row's integer sums end in the 4 dword
 * lanes of its 128-bit lane. What a row dot spends on its block header (the 6-bit scales
 * unpacked, the mins against the bsums, d and dmin converted and applied) is then done for
 * 4 rows at once (hot figures against the row dots: docs/PERFORMANCE.md, quantized
 * matvec). */

/* The rows' scales and mins as clean bytes, row j in 128-bit lane j: bytes 0-7 the 8
 * sub-block scales, 8-15 the 8 mins (st_kq_unpack_scales_mins, 4 rows at once). The
 * 12-byte groups are moved to their lanes by dword (vpermd), then within the lane: A gets
 * q[0..3] (scales 0-3), q[8..11] (low nibbles: scales 4-7), q[4..7] (mins 0-3), q[8..11]
 * shifted down 4 (mins 4-7); H puts q[0..3] and q[4..7] under scales / mins 4-7, whose top
 * 2 bits they hold. */
KQ_AI __m512i q4k_quad_scales(const uint8_t *sc48) {
    const __m512i raw = _mm512_maskz_loadu_epi32(0x0FFF, sc48);
    const __m512i spread = _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 1, 2, 0, 3, 4, 5, 0, 6, 7, 8, 0, 9, 10, 11, 0), raw);
    const __m512i pickA = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
    const __m512i pickH = _mm512_broadcast_i32x4(_mm_setr_epi8(-128, -128, -128, -128, 0, 1, 2, 3, -128, -128, -128, -128, 4, 5, 6, 7));
    const __m512i A = _mm512_srlv_epi16(_mm512_shuffle_epi8(spread, pickA), _mm512_broadcast_i32x4(_mm_setr_epi16(0, 0, 0, 0, 0, 0, 4, 4)));
    const __m512i H = _mm512_and_si512(_mm512_srli_epi16(_mm512_shuffle_epi8(spread, pickH), 2), _mm512_set1_epi8(0x30));
    const __m512i keep = _mm512_broadcast_i32x4(_mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15));
    return _mm512_ternarylogic_epi32(A, keep, H, 0xEA); /* (A & keep) | H */
}

KQ_AI void q45k_quad_rows(const int Q5, const int ALIGN, const int NC, int nb, const uint8_t *x, const void *y,
                          size_t by, float *s, size_t bs, int nr) {
    const __m512i m0f = _mm512_set1_epi8(0x0F), b16 = _mm512_set1_epi8(16);
    __m512i pick_sw[4]; /* pair g's scale words: 4 of scale 2g, 4 of scale 2g + 1, per lane */
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        const long long a = kq_pick4(2 * g), b = kq_pick4(2 * g + 1);
        pick_sw[g] = _mm512_set_epi64(b, a, b, a, b, a, b, a);
    }
    const __m512i pick_min = _mm512_broadcast_i32x4(_mm_setr_epi8(8, -128, 9, -128, 10, -128, 11, -128, 12, -128, 13, -128, 14, -128, 15, -128));
    const __m512i lane_d = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m512i lane_dmin = _mm512_add_epi32(lane_d, _mm512_set1_epi32(4));
    __m512 acc[ST_TILE_MAX], accm[ST_TILE_MAX];
#pragma GCC unroll 4
    for (int c = 0; c < NC; c++) acc[c] = _mm512_setzero_ps(), accm[c] = _mm512_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const uint8_t *qb = x + (size_t)i * KQ_QUAD_BYTES(Q5);
        st_quad_prefetch(qb, (int)KQ_QUAD_BYTES(Q5));
        const __m512i scm = q4k_quad_scales(qb + KQ_QUAD_SCALES);
        __m512i qh[2];
        if (Q5) qh[0] = st_quad_load(ALIGN, qb + KQ_QUAD_QH), qh[1] = st_quad_load(ALIGN, qb + KQ_QUAD_QH + 64);
        const __m512i mins = _mm512_shuffle_epi8(scm, pick_min);
        const __m512 ddm = _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)qb)));
        const __m512 dv = _mm512_permutexvar_ps(lane_d, ddm), mv = _mm512_permutexvar_ps(lane_dmin, ddm);
        __m512i sumi[ST_TILE_MAX];
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
            const __m512i L0 = st_quad_load(ALIGN, qb + KQ_QUAD_QS(Q5) + 128 * g);
            const __m512i L1 = st_quad_load(ALIGN, qb + KQ_QUAD_QS(Q5) + 128 * g + 64);
            __m512i lo0 = _mm512_and_si512(L0, m0f), hi0 = kq_high_nibbles(L0);
            __m512i lo1 = _mm512_and_si512(L1, m0f), hi1 = kq_high_nibbles(L1);
            if (Q5) { /* chunk 2g + h's elements take their 5th bit from qh chunk h */
                const __m512i bl = _mm512_set1_epi8((char)(1 << (2 * g))), bh = _mm512_set1_epi8((char)(2 << (2 * g)));
                lo0 = _mm512_mask_add_epi8(lo0, _mm512_test_epi8_mask(qh[0], bl), lo0, b16);
                hi0 = _mm512_mask_add_epi8(hi0, _mm512_test_epi8_mask(qh[0], bh), hi0, b16);
                lo1 = _mm512_mask_add_epi8(lo1, _mm512_test_epi8_mask(qh[1], bl), lo1, b16);
                hi1 = _mm512_mask_add_epi8(hi1, _mm512_test_epi8_mask(qh[1], bh), hi1, b16);
            }
            const __m512i sw = _mm512_shuffle_epi8(scm, pick_sw[g]);
#pragma GCC unroll 4
            for (int c = 0; c < NC; c++) {
                const int8_t *a = kq_act(y, by, c, i)->qs + 64 * g;
                __m512i p0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo0, st_quad_bcast16(a));
                __m512i p1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi0, st_quad_bcast16(a + 32));
                p0 = _mm512_dpbusd_epi32(p0, lo1, st_quad_bcast16(a + 16));
                p1 = _mm512_dpbusd_epi32(p1, hi1, st_quad_bcast16(a + 48));
                const __m512i pk = _mm512_packs_epi32(p0, p1);
                sumi[c] = g ? _mm512_dpwssd_epi32(sumi[c], pk, sw) : _mm512_madd_epi16(pk, sw);
            }
        }
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++) {
            const st_block_q8_K *yc = kq_act(y, by, c, i);
            /* the 8 sub-block activation sums (pairs of bsums), in every lane */
            const __m256i b8 = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)yc->bsums), _mm256_set1_epi16(1));
            const __m512i bsub = _mm512_broadcast_i32x4(_mm256_cvtepi32_epi16(b8));
            const __m512 dy = _mm512_set1_ps(yc->d);
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi[c]), _mm512_mul_ps(dv, dy), acc[c]);
            accm[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_madd_epi16(mins, bsub)), _mm512_mul_ps(mv, dy), accm[c]);
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < NC; c++) acc[c] = _mm512_sub_ps(acc[c], accm[c]);
    st_quad_store(NC, acc, s, bs, nr);
}

/* Q6_K over a quad (kquants.h: KQ_Q6Q_*), one row per 128-bit lane as for Q4_K. A ql chunk k
 * (k = 4 n + kk) holds, in its low nibbles, 16 weights of sub-block 8 n + kk and, in its high
 * nibbles, 16 of 8 n + 4 + kk; their 2 high bits sit in qh chunk 2 n + (kk & 1) at bits
 * 0-1 / 4-5 (kk < 2) or 2-3 / 6-7. Each 16 weights give one vpdpbusd (4 products a dword
 * lane, within 4 * 63 * 128: vpackssdw keeps them); chunks k, k + 1 give the pairs of
 * sub-blocks (8 n + kk, + 1) and (8 n + 4 + kk, + 1), packed and multiplied by their
 * sign-extended scale words. The -32 offset goes through the bsums as in q6k_row. */
KQ_AI void q6k_quad_rows(const int ALIGN, const int NC, int nb, const uint8_t *x, const void *y, size_t by,
                         float *s, size_t bs, int nr) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    __m512i pick_sw[4]; /* pair p of a 8-scale half: words 2p (x4) and 2p + 1 (x4) */
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++) {
        const long long a = kq_words4((uint64_t)(0x0100 + 0x0202 * 2 * p)), b = kq_words4((uint64_t)(0x0100 + 0x0202 * (2 * p + 1)));
        pick_sw[p] = _mm512_set_epi64(b, a, b, a, b, a, b, a);
    }
    const __m512i lane_d = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const uint8_t *dq = x, *bodies = x + 8 * (size_t)nb;
    __m512 acc[ST_TILE_MAX];
#pragma GCC unroll 4
    for (int c = 0; c < NC; c++) acc[c] = _mm512_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const uint8_t *body = bodies + (size_t)i * KQ_Q6Q_BODY;
        st_quad_prefetch(body, KQ_Q6Q_BODY);
        const __m512i S = st_quad_load(ALIGN, body);
        /* sign-extended scale words, lane r: sub-blocks 0-7 (lo) and 8-15 (hi) of row r */
        const __m512i sc_lo = _mm512_srai_epi16(_mm512_unpacklo_epi8(_mm512_setzero_si512(), S), 8);
        const __m512i sc_hi = _mm512_srai_epi16(_mm512_unpackhi_epi8(_mm512_setzero_si512(), S), 8);
        const __m512 dv = _mm512_permutexvar_ps(lane_d, _mm512_castps128_ps512(_mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)(dq + 8 * (size_t)i)))));
        __m512i sumi[ST_TILE_MAX];
#pragma GCC unroll 2
        for (int n = 0; n < 2; n++) {
            const __m512i H0 = st_quad_load(ALIGN, body + KQ_Q6Q_QH(n, 0));
            const __m512i H1 = st_quad_load(ALIGN, body + KQ_Q6Q_QH(n, 1));
#pragma GCC unroll 2
            for (int p = 0; p < 2; p++) { /* chunks k = 4 n + 2 p and k + 1 */
                const __m512i L0 = st_quad_load(ALIGN, body + KQ_Q6Q_QL(n, 2 * p));
                const __m512i L1 = st_quad_load(ALIGN, body + KQ_Q6Q_QL(n, 2 * p + 1));
                /* A | (B & C): the nibble, and the 2 high bits moved to bits 4-5 */
                const __m512i lo0 = _mm512_ternarylogic_epi32(_mm512_and_si512(L0, m4), p ? _mm512_slli_epi16(H0, 2) : _mm512_slli_epi16(H0, 4), m30, 0xF8);
                const __m512i lo1 = _mm512_ternarylogic_epi32(_mm512_and_si512(L1, m4), p ? _mm512_slli_epi16(H1, 2) : _mm512_slli_epi16(H1, 4), m30, 0xF8);
                const __m512i hi0 = _mm512_ternarylogic_epi32(kq_high_nibbles(L0), p ? _mm512_srli_epi16(H0, 2) : H0, m30, 0xF8);
                const __m512i hi1 = _mm512_ternarylogic_epi32(kq_high_nibbles(L1), p ? _mm512_srli_epi16(H1, 2) : H1, m30, 0xF8);
                /* scale words of the pairs (8 n + 2 p, + 1) and (8 n + 4 + 2 p, + 1) */
                const __m512i sw_lo = _mm512_shuffle_epi8(n ? sc_hi : sc_lo, pick_sw[p]);
                const __m512i sw_hi = _mm512_shuffle_epi8(n ? sc_hi : sc_lo, pick_sw[2 + p]);
#pragma GCC unroll 4
                for (int c = 0; c < NC; c++) {
                    const int8_t *a = kq_act(y, by, c, i)->qs + 128 * n + 32 * p;
                    const __m512i pl0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo0, st_quad_bcast16(a));
                    const __m512i pl1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo1, st_quad_bcast16(a + 16));
                    const __m512i ph0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi0, st_quad_bcast16(a + 64));
                    const __m512i ph1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi1, st_quad_bcast16(a + 80));
                    const __m512i t = _mm512_madd_epi16(_mm512_packs_epi32(pl0, pl1), sw_lo);
                    sumi[c] = (n | p) ? _mm512_add_epi32(sumi[c], t) : t;
                    sumi[c] = _mm512_dpwssd_epi32(sumi[c], _mm512_packs_epi32(ph0, ph1), sw_hi);
                }
            }
        }
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++) {
            const st_block_q8_K *yc = kq_act(y, by, c, i);
            /* the stored quants are q + 32: subtract 32 * sum_j scale_j * bsum_j */
            const __m512i b_lo = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)yc->bsums));
            const __m512i b_hi = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(yc->bsums + 8)));
            const __m512i corr = _mm512_dpwssd_epi32(_mm512_madd_epi16(sc_lo, b_lo), sc_hi, b_hi);
            const __m512i si = _mm512_sub_epi32(sumi[c], _mm512_slli_epi32(corr, 5));
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(si), _mm512_mul_ps(dv, _mm512_set1_ps(yc->d)), acc[c]);
        }
    }
    st_quad_store(NC, acc, s, bs, nr);
}

#define KQ_Q4K_QUAD_ROWS_(...) q45k_quad_rows(0, __VA_ARGS__)
#define KQ_Q5K_QUAD_ROWS_(...) q45k_quad_rows(1, __VA_ARGS__)

/* Defines st_tile4_<name>_<isa> (st_tile4_fn) from a quad kernel; lead: the bytes before a
 * quad's first 64-byte loads (Q6_K: its d's). */
#define ST_KQ_DEF_QUAD_(name, isa, ROWS, lead)                                                         \
    void st_tile4_##name##_##isa(int n, float *s, size_t bs, const void *x, const void *y, size_t by, \
                                 int nr, int nc) {                                                    \
        ST_ASSERT(n % QK_K == 0 && nr >= 1 && nr <= 4 && nc >= 1 && nc <= 4);                        \
        const int nb = n / QK_K;                                                                       \
        ST_QUAD_DISPATCH_(ROWS, lead, nb)                                                              \
    }

#endif /* STRATA_QUANT_KQUANTS_AVX512_H */
