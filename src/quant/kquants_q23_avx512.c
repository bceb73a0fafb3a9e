/*
 * The Q3_K and Q2_K dots for AVX-512 (F, BW, VL, DQ + VNNI): 64 weights (four sub-blocks) per
 * vpdpbusd. Weights e = 128 h + 32 j + l of a chunk c (h = c / 2, j = 2 (c % 2) and
 * 2 (c % 2) + 1) come from one broadcast of qs[32 h ..] and one of hmask, shifted per
 * 256-bit half by variable word shifts (each byte keeps its own bits: shifts < 8), giving
 * unsigned quants 0..7 in element order; the dword lanes 4 k .. 4 k + 3 of the product hold
 * sub-block 4 c + k, multiplied by its scale (vpermd picks it, vpmulld, exact). The -4
 * offset goes through the Q8_K bsums as in the AVX2 dot (kquants_q23_avx2.c). Needs
 * AVX512-VNNI at run time, as the other AVX-512 K-quant dots.
 */
#include "quant/kquants.h"

#include "strata/core.h"

#include <immintrin.h>

/* 16-bit lanes 0-15 shift by a, lanes 16-31 by b (one count per 256-bit half). */
static inline __m512i halves16(int a, int b) {
    return _mm512_inserti64x4(_mm512_set1_epi16((short)a), _mm256_set1_epi16((short)b), 1);
}

/* The 16 scales of a block (-32..31) as dwords (as q3_scales16 in the AVX2 file). */
static inline __m512i q3_scales32(const uint8_t q[K_SCALE_SIZE]) {
    uint32_t w[4];
    st_kq_q3_scale_words(q, w);
    /* from registers: a 16-byte load of the words just stored would stall on store forwarding */
    const __m128i b = _mm_setr_epi32((int)w[0], (int)w[1], (int)w[2], (int)w[3]);
    return _mm512_cvtepi8_epi32(_mm_sub_epi8(b, _mm_set1_epi8(32)));
}

void st_vec_dot_q3_K_q8_K_avx512(int n, float *s, const void *vx, const void *vy) {
    ST_ASSERT(n % QK_K == 0);
    const st_block_q3_K *x = vx;
    const st_block_q8_K *y = vy;
    const __m512i m3 = _mm512_set1_epi8(3), m4 = _mm512_set1_epi8(4);
    /* chunk c: low bits of groups j0 = 2 (c % 2) and j0 + 1; high bits g = 4 h + j moved to
     * bit 2: right by g - 2 (left by 2 - g for g < 2; c = 0 only) */
    const __m512i lo_shift[2] = {halves16(0, 2), halves16(4, 6)};
    const __m512i hi_r[4] = {halves16(0, 0), halves16(0, 1), halves16(2, 3), halves16(4, 5)};
    const __m512i hi_l0 = halves16(2, 1);
    __m512i pick[4];
    for (int c = 0; c < 4; c++) /* lanes 4 k .. 4 k + 3: the scale of sub-block 4 c + k */
        pick[c] = _mm512_setr_epi32(4 * c, 4 * c, 4 * c, 4 * c, 4 * c + 1, 4 * c + 1, 4 * c + 1, 4 * c + 1,
                                    4 * c + 2, 4 * c + 2, 4 * c + 2, 4 * c + 2, 4 * c + 3, 4 * c + 3, 4 * c + 3,
                                    4 * c + 3);
    __m512 acc = _mm512_setzero_ps();
    for (int i = 0; i < n / QK_K; i++) {
        const __m512i sc32 = q3_scales32(x[i].scales);
        const __m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x[i].hmask));
        __m512i sumi = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * (c / 2))));
            const __m512i lo = _mm512_and_si512(_mm512_srlv_epi16(q, lo_shift[c % 2]), m3);
            const __m512i hs = c == 0 ? _mm512_sllv_epi16(hm, hi_l0) : _mm512_srlv_epi16(hm, hi_r[c]);
            const __m512i w = _mm512_or_si512(lo, _mm512_and_si512(hs, m4));
            const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w,
                                                  _mm512_loadu_si512((const void *)(y[i].qs + 64 * c)));
            sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(p, _mm512_permutexvar_epi32(pick[c], sc32)));
        }
        /* - 4 * sum_s scale_s * bsum_s */
        const __m512i bs = _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)y[i].bsums));
        sumi = _mm512_sub_epi32(sumi, _mm512_slli_epi32(_mm512_mullo_epi32(bs, sc32), 2));
        const float d = y[i].d * st_fp16_to_fp32(x[i].d);
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
    }
    *s = _mm512_reduce_add_ps(acc);
}

/* Q2_K: Q3_K's low bits alone; 4-bit scales (low nibbles) and mins (high), the mins applied
 * through the bsums. */
void st_vec_dot_q2_K_q8_K_avx512(int n, float *s, const void *vx, const void *vy) {
    ST_ASSERT(n % QK_K == 0);
    const st_block_q2_K *x = vx;
    const st_block_q8_K *y = vy;
    const __m512i m3 = _mm512_set1_epi8(3);
    const __m512i lo_shift[2] = {halves16(0, 2), halves16(4, 6)};
    __m512i pick[4];
    for (int c = 0; c < 4; c++)
        pick[c] = _mm512_setr_epi32(4 * c, 4 * c, 4 * c, 4 * c, 4 * c + 1, 4 * c + 1, 4 * c + 1, 4 * c + 1,
                                    4 * c + 2, 4 * c + 2, 4 * c + 2, 4 * c + 2, 4 * c + 3, 4 * c + 3, 4 * c + 3,
                                    4 * c + 3);
    __m512 acc = _mm512_setzero_ps();
    for (int i = 0; i < n / QK_K; i++) {
        const __m512i sm = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)x[i].scales));
        const __m512i sc32 = _mm512_and_si512(sm, _mm512_set1_epi32(0xF)), mn32 = _mm512_srli_epi32(sm, 4);
        __m512i sumi = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * (c / 2))));
            const __m512i w = _mm512_and_si512(_mm512_srlv_epi16(q, lo_shift[c % 2]), m3);
            const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w,
                                                  _mm512_loadu_si512((const void *)(y[i].qs + 64 * c)));
            sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(p, _mm512_permutexvar_epi32(pick[c], sc32)));
        }
        const __m512i bs = _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)y[i].bsums));
        const __m512i summ = _mm512_mullo_epi32(bs, mn32);
        const float d = y[i].d * st_fp16_to_fp32(x[i].d), dm = y[i].d * st_fp16_to_fp32(x[i].dmin);
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
        acc = _mm512_fnmadd_ps(_mm512_set1_ps(dm), _mm512_cvtepi32_ps(summ), acc);
    }
    *s = _mm512_reduce_add_ps(acc);
}
