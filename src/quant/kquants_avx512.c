/*
 * K-quant kernels for AVX-512 (F, BW, VL, DQ) plus AVX512-VNNI.
 *
 * Requires AVX512-VNNI at run time as well (vpdpwssd): dispatch must only pick these
 * when st_cpu_has_vnni() (every Zen 4/5 and Ice Lake or newer has it).
 *
 * Shape of the dots: per 64 weights one maddubs (u8 weights x s8 activations -> pairs
 * summed into int16) and one vpdpwssd that multiplies by the sub-block scale and adds
 * into 16 int32 lanes; one int->float convert and FMA per 256-weight block. The mins
 * (Q4_K, Q5_K) and the -32 offset (Q6_K) are applied through the Q8_K bsums, so the
 * weights are touched once. Elements are never reordered: a 64-weight group is built
 * from a 32-byte broadcast load, shifted by 0 in the low half and by 4 in the high half.
 */
#include "quant/kquants.h"

#include "strata/core.h"
#include "strata/quant.h"

#include <immintrin.h>
#include <math.h>

/* 16-bit lanes 0-15 (the low 32 bytes) shift by lo, lanes 16-31 by hi. */
static inline __m512i kq_halves16(uint64_t lo, uint64_t hi) {
    const long long l = (long long)(lo * 0x0001000100010001ull), h = (long long)(hi * 0x0001000100010001ull);
    return _mm512_set_epi64(h, h, h, h, l, l, l, l);
}

/* Bytes [b, 0x80] repeated in the low 256 bits, [c, 0x80] in the high: a vpshufb control
 * that turns a broadcast 8-byte scale vector into int16 words s_b | s_c. */
static inline __m512i kq_word_pick(int b, int c) {
    return kq_halves16((uint64_t)(0x8000 | b), (uint64_t)(0x8000 | c));
}

/* 64 weights from 32 quant bytes: the low nibbles (sub-block 2k) in the low 256 bits,
 * the high nibbles (sub-block 2k + 1) in the high 256 bits; element order is kept, so
 * the matching activations are one contiguous 64-byte load. shr = kq_halves16(0, 4). */
static inline __m512i kq_nibbles64(const uint8_t *q32, __m512i shr, __m512i m4) {
    const __m512i b = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)q32));
    return _mm512_and_si512(_mm512_srlv_epi16(b, shr), m4);
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
    const __m512i m4 = _mm512_set1_epi8(0x0F), b16 = _mm512_set1_epi8(16);
    const __m512i shr = kq_halves16(0, 4);
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
        __m512i w[4], sp[4];
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
            w[g] = kq_nibbles64(q + 32 * g, shr, m4);
            sp[g] = _mm512_shuffle_epi8(S, kq_word_pick(2 * g, 2 * g + 1));
        }
        if (Q5) { /* a set qh bit adds 16 (the quant's 5th bit) to the nibble below it */
            const __m512i QH = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x5->qh));
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) w[g] = _mm512_mask_add_epi8(w[g], _mm512_test_epi8_mask(QH, hb[g]), w[g], b16);
        }
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++) {
            const st_block_q8_K *yc = kq_act(y, by, c, i);
            const __m128 dm = _mm_mul_ps(dmx, _mm_set1_ps(yc->d));
            const int8_t *a = yc->qs;
            __m512i sumi = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++)
                sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(w[g], _mm512_loadu_si512(a + 64 * g)), sp[g]);
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

KQ_AI void q6k_row(const int NC, int nb, const st_block_q6_K *x, const void *y, size_t by, float *s,
                   size_t bs) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const __m512i low16 = _mm512_set1_epi32(0xFFFF);
    /* In a half (128 weights): ql byte l low nibble = element l (l < 64), high nibble =
     * element 64 + l; qh byte l holds bits 4-5 of elements l, 32 + l, 64 + l, 96 + l in
     * its bit pairs 0-1, 2-3, 4-5, 6-7. These shifts move each pair to bits 4-5. */
    const __m512i shl_a = kq_halves16(4, 2), shr_b = kq_halves16(0, 2);
    /* int32 lane 4i..4i+3 of group v belongs to sub-block 4v + i */
    const __m512i sidx0 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    __m512 acc[ST_TILE_MAX];
#pragma GCC unroll 4
    for (int c = 0; c < NC; c++) acc[c] = _mm512_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const float dx = _cvtsh_ss(x[i].d);
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)x[i].scales);
        const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
        const __m512i S32 = _mm512_cvtepi8_epi32(sc8);
        /* (s, s) as int16 pair in every dword: vpdpwssd multiplies both words by s */
        const __m512i SW = _mm512_ternarylogic_epi32(S32, _mm512_slli_epi32(S32, 16), low16, 0xE4);
        __m512i w[4], sw[4];
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m512i L = _mm512_loadu_si512(x[i].ql + 64 * h);
            const __m512i H = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x[i].qh + 32 * h)));
            /* A | (B & C) */
            w[2 * h] = _mm512_ternarylogic_epi32(_mm512_and_si512(L, m4), _mm512_sllv_epi16(H, shl_a), m30, 0xF8);
            w[2 * h + 1] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(L, 4), m4),
                                                     _mm512_srlv_epi16(H, shr_b), m30, 0xF8);
            sw[2 * h] = _mm512_permutexvar_epi32(_mm512_add_epi32(sidx0, _mm512_set1_epi32(8 * h)), SW);
            sw[2 * h + 1] = _mm512_permutexvar_epi32(_mm512_add_epi32(sidx0, _mm512_set1_epi32(8 * h + 4)), SW);
        }
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++) {
            const st_block_q8_K *yc = kq_act(y, by, c, i);
            const float d = yc->d * dx;
            const int8_t *a = yc->qs;
            __m512i sumi = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++)
                sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(w[g], _mm512_loadu_si512(a + 64 * g)), sw[g]);
            /* the stored quants are q + 32: subtract 32 * sum_j scale_j * bsum_j */
            const __m256i corr = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)yc->bsums), sc16);
            sumi = _mm512_sub_epi32(sumi, _mm512_zextsi256_si512(_mm256_slli_epi32(corr, 5)));
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_set1_ps(d), acc[c]);
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < NC; c++) s[(size_t)c * bs] = _mm512_reduce_add_ps(acc[c]);
}

ST_KQ_DEF_DOT_TILE_(q4_K_q8_K, avx512, st_block_q4_K, KQ_Q4K_ROW_)
ST_KQ_DEF_DOT_TILE_(q5_K_q8_K, avx512, st_block_q5_K, KQ_Q5K_ROW_)
ST_KQ_DEF_DOT_TILE_(q6_K_q8_K, avx512, st_block_q6_K, q6k_row)

/* Same arithmetic as st_quantize_row_q8_K_ref, 16 floats at a time: the product
 * iscale * x rounded by cvtps2dq (nearest even) equals the reference's rounding. */
void st_quantize_row_q8_K_avx512(const float *x, void *vy, int64_t k) {
    ST_ASSERT(k % QK_K == 0);
    st_block_q8_K *y = vy;
    for (int64_t i = 0; i < k / QK_K; i++, x += QK_K) {
        __m512 vmax = _mm512_setzero_ps();
        for (int j = 0; j < QK_K; j += 16)
            vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_loadu_ps(x + j)));
        const float amax = _mm512_reduce_max_ps(vmax);
        if (amax == 0) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        /* the reference keeps the first element of largest magnitude: its sign matters */
        float max = 0;
        const __m512 vamax = _mm512_set1_ps(amax);
        for (int j = 0; j < QK_K; j += 16) {
            const __mmask16 m = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + j)), vamax, _CMP_EQ_OQ);
            if (m) {
                max = x[j + __builtin_ctz(m)];
                break;
            }
        }
        const float iscale = -127.f / max;
        const __m512 vis = _mm512_set1_ps(iscale);
        const __m512i v127 = _mm512_set1_epi32(127);
        for (int g = 0; g < QK_K / 16; g++) {
            __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(vis, _mm512_loadu_ps(x + 16 * g)));
            v = _mm512_min_epi32(v, v127);
            _mm_storeu_si128((__m128i *)(y[i].qs + 16 * g), _mm512_cvtsepi32_epi8(v));
            y[i].bsums[g] = (int16_t)_mm512_reduce_add_epi32(v);
        }
        y[i].d = 1 / iscale;
    }
}
