/*
 * The AVX2 K-quant row kernels, included by two files: kquants_avx2.c compiles them as
 * they are, kquants_avx2vnni.c with AVX-VNNI (Alder Lake and newer, Zen 5: the AVX2 table
 * then takes vpdpbusd and vpdpwssd, see kq_sum8). The two builds differ in arithmetic
 * order (not in exactness: every integer sum is exact), so each is checked against the
 * scalar reference, and each build's tiles against its own dot.
 *
 * Per 32 weights: one maddubs (u8 weights x s8 activations -> int16 pairs) and one
 * madd with the sub-block scale as int16 words (-> int32), added into 8 int32 lanes;
 * one int->float convert and FMA per 256-weight block. Mins (Q4_K, Q5_K) and the -32
 * offset of Q6_K are applied through the Q8_K bsums. A 32-weight sub-block is exactly
 * one register, so no lane shuffles are needed on the weights.
 */
#ifndef STRATA_QUANT_KQUANTS_AVX2_H
#define STRATA_QUANT_KQUANTS_AVX2_H

#include "quant/kquants.h"

#include "strata/core.h"

#include <immintrin.h>

/* vpshufb control: int16 words holding byte j of a broadcast 8-byte scale vector */
#define KQ_WORD_PICK(j) _mm256_set1_epi16((short)(0x8000 | (j)))
/* the same with words 0-3 of each 128-bit lane holding byte a and words 4-7 byte b */
static inline __m256i kq_pair_pick(int a, int b) {
    return _mm256_set_epi64x(kq_pick4(b), kq_pick4(a), kq_pick4(b), kq_pick4(a));
}

/* ---- row x NC-token dots ------------------------------------------------------------
 * As in the AVX-512 file: a tile of NR weight rows x NC activation rows is NR passes of
 * one weight row against NC activation rows; per super-block the weights and their
 * sub-block scales are unpacked once (into w[8] / sc[8], which spill to the stack when
 * NC > 1: 16 ymm registers do not hold them and NC accumulators) and serve every
 * activation row. vec_dot is the 1 x 1 instance and each (row, activation) pair runs the
 * same operations in the same order whatever NC is, so a tile element equals vec_dot
 * bit for bit. */

/* sum over the 8 registers of 32 weights of scale * (w . a), as 8 int32 lanes. Without
 * AVX-VNNI, sc[j] holds register j's scale words. With it, register j's 4-product sums
 * (vpdpbusd, each within +-4 * 63 * 128) are packed into words two registers at a time
 * (vpackssdw, exact), and sc[k] holds the words of the pair 2k, 2k + 1 in packed order:
 * per 128-bit lane, words 0-3 for register 2k and 4-7 for 2k + 1. */
KQ_AI __m256i kq_sum8(const __m256i *w, const __m256i *sc, const int8_t *a) {
    __m256i sumi = _mm256_setzero_si256();
#ifdef __AVXVNNI__
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        const __m256i p0 = _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), w[2 * k],
                                                   _mm256_loadu_si256((const __m256i *)(a + 64 * k)));
        const __m256i p1 = _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), w[2 * k + 1],
                                                   _mm256_loadu_si256((const __m256i *)(a + 64 * k + 32)));
        sumi = _mm256_dpwssd_avx_epi32(sumi, _mm256_packs_epi32(p0, p1), sc[k]);
    }
#else
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
        sumi = _mm256_add_epi32(
            sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(w[j], _mm256_loadu_si256((const __m256i *)(a + 32 * j))),
                                    sc[j]));
#endif
    return sumi;
}

/* Q4_K (Q5 = 0) and Q5_K (Q5 = 1: vx holds st_block_q5_K, whose qh adds the 5th bit);
 * both blocks start with d, dmin and the packed scales. Byte l of quant group g holds
 * element 64g + l (low nibble) and 64g + 32 + l (high). */
KQ_AI void q45k_row(const int Q5, const int NC, int nb, const void *vx, const void *y, size_t by,
                    float *s, size_t bs) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), b16 = _mm256_set1_epi8(0x10);
    __m256 acc[4], accm[4];
#pragma GCC unroll 4
    for (int c = 0; c < NC; c++) acc[c] = accm[c] = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const st_block_q4_K *x4 = (const st_block_q4_K *)vx + i;
        const st_block_q5_K *x5 = (const st_block_q5_K *)vx + i;
        __m128 dmx; /* d, dmin */
        __m256i M;
        const uint64_t scm = kq_q45k_head(Q5 ? &x5->d : &x4->d, Q5 ? x5->scales : x4->scales, &dmx, &M);
        const __m256i S = _mm256_set1_epi64x((long long)scm);
        const uint8_t *q = Q5 ? x5->qs : x4->qs;
        /* Q5: bit 2g / 2g+1 of qh byte l is the 5th bit of element 64g + l / 64g + 32 + l;
         * qhs is shifted right by 2 per pair so the wanted bits are always 0 and 1 */
        __m256i qhs = Q5 ? _mm256_loadu_si256((const __m256i *)x5->qh) : _mm256_setzero_si256();
        __m256i w[8], sc[8];
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
            const __m256i qv = _mm256_loadu_si256((const __m256i *)(q + 32 * g));
            w[2 * g] = _mm256_and_si256(qv, m4);
            w[2 * g + 1] = _mm256_and_si256(_mm256_srli_epi16(qv, 4), m4);
            if (Q5) {
                w[2 * g] = _mm256_or_si256(w[2 * g], _mm256_and_si256(_mm256_slli_epi16(qhs, 4), b16));
                w[2 * g + 1] = _mm256_or_si256(w[2 * g + 1], _mm256_and_si256(_mm256_slli_epi16(qhs, 3), b16));
                qhs = _mm256_srli_epi16(qhs, 2);
            }
        }
#ifdef __AVXVNNI__
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) sc[k] = _mm256_shuffle_epi8(S, kq_pair_pick(2 * k, 2 * k + 1));
#else
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) sc[j] = _mm256_shuffle_epi8(S, KQ_WORD_PICK(j));
#endif
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++) {
            const st_block_q8_K *yc = kq_act(y, by, c, i);
            const __m128 dm = _mm_mul_ps(dmx, _mm_set1_ps(yc->d));
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(kq_sum8(w, sc, yc->qs)), _mm256_broadcastss_ps(dm), acc[c]);
            accm[c] = _mm256_fmadd_ps(
                _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)yc->bsums), M)),
                _mm256_permutevar8x32_ps(_mm256_castps128_ps256(dm), _mm256_set1_epi32(1)), accm[c]);
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < NC; c++) s[(size_t)c * bs] = kq_hsum256(acc[c]) - kq_hsum256(accm[c]);
}

KQ_AI void q6k_row(const int NC, int nb, const st_block_q6_K *x, const void *y, size_t by, float *s,
                   size_t bs) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    __m256 acc[4];
#pragma GCC unroll 4
    for (int c = 0; c < NC; c++) acc[c] = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const float dx = _cvtsh_ss(x[i].d);
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)x[i].scales);
        const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
        __m256i w[8], sc[8];
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256i L0 = _mm256_loadu_si256((const __m256i *)(x[i].ql + 64 * h));
            const __m256i L1 = _mm256_loadu_si256((const __m256i *)(x[i].ql + 64 * h + 32));
            const __m256i H = _mm256_loadu_si256((const __m256i *)(x[i].qh + 32 * h));
            __m256i *q = w + 4 * h;
            q[0] = _mm256_or_si256(_mm256_and_si256(L0, m4), _mm256_and_si256(_mm256_slli_epi16(H, 4), m30));
            q[1] = _mm256_or_si256(_mm256_and_si256(L1, m4), _mm256_and_si256(_mm256_slli_epi16(H, 2), m30));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L0, 4), m4), _mm256_and_si256(H, m30));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L1, 4), m4),
                                   _mm256_and_si256(_mm256_srli_epi16(H, 2), m30));
#ifdef __AVXVNNI__
#pragma GCC unroll 2
            for (int k = 0; k < 2; k++) {
                /* registers 2k, 2k + 1 hold sub-blocks j, j + 1 and j + 2, j + 3 (one per
                 * 128-bit lane); packed, lane 0 has j then j + 2, lane 1 j + 1 then j + 3 */
                const int j = 8 * h + 4 * k;
                const __m128i pick = _mm_set_epi32(0x01010101 * (j + 3), 0x01010101 * (j + 1),
                                                   0x01010101 * (j + 2), 0x01010101 * j);
                sc[2 * h + k] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, pick));
            }
#else
#pragma GCC unroll 4
            for (int v = 0; v < 4; v++) {
                /* register v holds sub-blocks j and j + 1 (one per 128-bit lane) */
                const int j = 8 * h + 2 * v;
                const __m128i pick = _mm_set_epi64x(0x0101010101010101ll * (j + 1), 0x0101010101010101ll * j);
                sc[4 * h + v] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, pick));
            }
#endif
        }
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++) {
            const st_block_q8_K *yc = kq_act(y, by, c, i);
            const float d = yc->d * dx;
            __m256i sumi = kq_sum8(w, sc, yc->qs);
            /* the stored quants are q + 32: subtract 32 * sum_j scale_j * bsum_j */
            const __m256i corr = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)yc->bsums), sc16);
            sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32(corr, 5));
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(d), acc[c]);
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < NC; c++) s[(size_t)c * bs] = kq_hsum256(acc[c]);
}

/* ---- Q4_K over a quad (kquants.h: the quad blocks) ----------------------------------
 * The AVX-512 quad kernel's scheme (kquants_avx512.h) on 256-bit registers: rows 2 hp and
 * 2 hp + 1 of the quad in one register, one per 128-bit lane (q4k_quad_pass takes one half
 * of the quad or both). With AVX-VNNI its integer sums per lane are the
 * AVX-512 kernel's; without, two maddubs per pair of 16-weight chunks and a madd per
 * sub-block. Either way the rows' scale unpacking, mins and d/dmin are shared by 2 rows. */

/* Rows 2 hp and 2 hp + 1's scales (bytes 0-7) and mins (bytes 8-15) as clean bytes, one
 * row per 128-bit lane, from their 24 packed scale bytes (q4k_quad_scales with 256-bit
 * registers: no 16-bit variable shift, so the nibbles of mins 4-7 are taken from a shifted
 * copy). */
KQ_AI __m256i q4k_quad_scales2(const uint8_t *sc24) {
    const __m256i raw = _mm256_loadu_si256((const __m256i *)sc24);
    const __m256i spread = _mm256_permutevar8x32_epi32(raw, _mm256_setr_epi32(0, 1, 2, 0, 3, 4, 5, 0));
    const __m256i A = _mm256_shuffle_epi8(spread, _mm256_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11,
                                                                   0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
    const __m256i H = _mm256_shuffle_epi8(spread, _mm256_setr_epi8(-128, -128, -128, -128, 0, 1, 2, 3, -128, -128, -128,
                                                                   -128, 4, 5, 6, 7, -128, -128, -128, -128, 0, 1, 2, 3,
                                                                   -128, -128, -128, -128, 4, 5, 6, 7));
    const __m256i keep = _mm256_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0, 63, 63, 63, 63, 15,
                                          15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0);
    const __m256i keep_sh = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                             0, 0, 0, 15, 15, 15, 15);
    const __m256i lo = _mm256_or_si256(_mm256_and_si256(A, keep), _mm256_and_si256(_mm256_srli_epi16(A, 4), keep_sh));
    return _mm256_or_si256(lo, _mm256_and_si256(_mm256_srli_epi16(H, 2), _mm256_set1_epi8(0x30)));
}

#define KQ_BCAST16_(p) _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(p)))

/* Rows 2 hp .. of the quad for hp in [h0, h1) (one or both halves) against NC activation
 * rows. Both halves in one pass keep the weight stream moving forward (a pass per half went
 * back to each quad's start, and decode from DRAM ran slower than with the row kernels);
 * with 3 or 4 activation rows 16 registers hold one half's accumulators only. */
KQ_AI void q4k_quad_pass(const int NC, const int h0, const int h1, int nb, const uint8_t *x, const void *y,
                         size_t by, float *s, size_t bs, int nr) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i pick_min = _mm256_setr_epi8(8, -128, 9, -128, 10, -128, 11, -128, 12, -128, 13, -128, 14, -128, 15,
                                              -128, 8, -128, 9, -128, 10, -128, 11, -128, 12, -128, 13, -128, 14, -128,
                                              15, -128);
    __m256 acc[2][4], accm[2][4];
    for (int hp = h0; hp < h1; hp++)
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++) acc[hp][c] = accm[hp][c] = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const uint8_t *qb = x + (size_t)i * KQ_QUAD_BYTES(0);
        st_quad_prefetch(qb, (int)KQ_QUAD_BYTES(0));
        for (int hp = h0; hp < h1; hp++) {
            const __m256i scm = q4k_quad_scales2(qb + KQ_QUAD_SCALES + 2 * K_SCALE_SIZE * hp);
            const __m256i mins = _mm256_shuffle_epi8(scm, pick_min);
            /* d of the two rows, then their dmin */
            uint32_t dd, dm;
            memcpy(&dd, qb + 4 * hp, 4), memcpy(&dm, qb + KQ_QUAD_DMIN + 4 * hp, 4);
            const __m256 ddm = _mm256_castps128_ps256(_mm_cvtph_ps(_mm_unpacklo_epi32(_mm_cvtsi32_si128((int)dd), _mm_cvtsi32_si128((int)dm))));
            const __m256 dv = _mm256_permutevar8x32_ps(ddm, _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
            const __m256 mv = _mm256_permutevar8x32_ps(ddm, _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3));
            __m256i sumi[4];
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) {
                const uint8_t *ch = qb + KQ_QUAD_QS(0) + 128 * g + 32 * hp;
                const __m256i L0 = _mm256_loadu_si256((const __m256i *)ch), L1 = _mm256_loadu_si256((const __m256i *)(ch + 64));
                const __m256i lo0 = _mm256_and_si256(L0, m4), hi0 = _mm256_and_si256(_mm256_srli_epi16(L0, 4), m4);
                const __m256i lo1 = _mm256_and_si256(L1, m4), hi1 = _mm256_and_si256(_mm256_srli_epi16(L1, 4), m4);
#ifdef __AVXVNNI__
                const __m256i sw = _mm256_shuffle_epi8(scm, kq_pair_pick(2 * g, 2 * g + 1));
#else
                const __m256i swl = _mm256_shuffle_epi8(scm, KQ_WORD_PICK(2 * g)), swh = _mm256_shuffle_epi8(scm, KQ_WORD_PICK(2 * g + 1));
#endif
#pragma GCC unroll 4
                for (int c = 0; c < NC; c++) {
                    const int8_t *a = kq_act(y, by, c, i)->qs + 64 * g;
#ifdef __AVXVNNI__
                    __m256i p0 = _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), lo0, KQ_BCAST16_(a));
                    __m256i p1 = _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), hi0, KQ_BCAST16_(a + 32));
                    p0 = _mm256_dpbusd_avx_epi32(p0, lo1, KQ_BCAST16_(a + 16));
                    p1 = _mm256_dpbusd_avx_epi32(p1, hi1, KQ_BCAST16_(a + 48));
                    const __m256i pk = _mm256_packs_epi32(p0, p1);
                    sumi[c] = g ? _mm256_dpwssd_avx_epi32(sumi[c], pk, sw) : _mm256_madd_epi16(pk, sw);
#else
                    /* each maddubs word sums 2 products (<= 2 * 15 * 128), two of them 4 */
                    const __m256i m0 = _mm256_add_epi16(_mm256_maddubs_epi16(lo0, KQ_BCAST16_(a)), _mm256_maddubs_epi16(lo1, KQ_BCAST16_(a + 16)));
                    const __m256i m1 = _mm256_add_epi16(_mm256_maddubs_epi16(hi0, KQ_BCAST16_(a + 32)), _mm256_maddubs_epi16(hi1, KQ_BCAST16_(a + 48)));
                    const __m256i t = _mm256_add_epi32(_mm256_madd_epi16(m0, swl), _mm256_madd_epi16(m1, swh));
                    sumi[c] = g ? _mm256_add_epi32(sumi[c], t) : t;
#endif
                }
            }
#pragma GCC unroll 4
            for (int c = 0; c < NC; c++) {
                const st_block_q8_K *yc = kq_act(y, by, c, i);
                /* the 8 sub-block activation sums (pairs of bsums) as words, in both lanes */
                const __m256i b8 = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)yc->bsums), _mm256_set1_epi16(1));
                const __m256i bsub = _mm256_broadcastsi128_si256(_mm_packs_epi32(_mm256_castsi256_si128(b8), _mm256_extracti128_si256(b8, 1)));
                const __m256 dy = _mm256_set1_ps(yc->d);
                acc[hp][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[c]), _mm256_mul_ps(dv, dy), acc[hp][c]);
                accm[hp][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(mins, bsub)), _mm256_mul_ps(mv, dy), accm[hp][c]);
            }
        }
    }
    for (int hp = h0; hp < h1; hp++)
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++) {
            float t[8];
            _mm256_storeu_ps(t, _mm256_sub_ps(acc[hp][c], accm[hp][c]));
            for (int j = 0; j < 2; j++)
                if (2 * hp + j < nr) s[(size_t)c * bs + 2 * hp + j] = (t[4 * j] + t[4 * j + 1]) + (t[4 * j + 2] + t[4 * j + 3]);
        }
}
#undef KQ_BCAST16_

/* Defines st_tile4_q4_K_q8_K_<isa> (st_tile4_fn): both halves of the quad in one pass for 1 or
 * 2 activation rows, a pass a half for 3 or 4; every element the same operations whatever nr
 * and nc. */
#define ST_KQ_DEF_Q4K_QUAD_AVX2_(isa)                                                                    \
    void st_tile4_q4_K_q8_K_##isa(int n, float *s, size_t bs, const void *x, const void *y, size_t by,  \
                                  int nr, int nc) {                                                      \
        ST_ASSERT(n % QK_K == 0 && nr >= 1 && nr <= 4 && nc >= 1 && nc <= 4);                           \
        const int nb = n / QK_K;                                                                         \
        if (nc <= 2) {                                                                                  \
            if (nr > 2) nc == 1 ? q4k_quad_pass(1, 0, 2, nb, x, y, by, s, bs, nr)                        \
                                : q4k_quad_pass(2, 0, 2, nb, x, y, by, s, bs, nr);                       \
            else nc == 1 ? q4k_quad_pass(1, 0, 1, nb, x, y, by, s, bs, nr)                               \
                         : q4k_quad_pass(2, 0, 1, nb, x, y, by, s, bs, nr);                              \
            return;                                                                                     \
        }                                                                                               \
        for (int hp = 0; 2 * hp < nr; hp++) {                                                           \
            if (nc == 3) hp ? q4k_quad_pass(3, 1, 2, nb, x, y, by, s, bs, nr)                            \
                            : q4k_quad_pass(3, 0, 1, nb, x, y, by, s, bs, nr);                           \
            else hp ? q4k_quad_pass(4, 1, 2, nb, x, y, by, s, bs, nr)                                    \
                    : q4k_quad_pass(4, 0, 1, nb, x, y, by, s, bs, nr);                                   \
        }                                                                                               \
    }

#endif /* STRATA_QUANT_KQUANTS_AVX2_H */
