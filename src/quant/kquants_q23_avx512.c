/*
 * The Q3_K and Q2_K dots for AVX-512 (F, BW, VL, DQ + VNNI): 64 weights (four sub-blocks) per
 * vpdpbusd. Weights e = 128 h + 32 j + l of a chunk c (h = c / 2, j = 2 (c % 2) and
 * 2 (c % 2) + 1) come from one broadcast of qs[32 h ..] and one of hmask, shifted per
 * 256-bit half by variable word shifts (each byte keeps its own bits: shifts < 8), giving
 * unsigned quants 0..7 in element order; the dword lanes 4 k .. 4 k + 3 of the product hold
 * sub-block 4 c + k, multiplied by its scale (vpermd picks it, vpmulld, exact). The -4
 * offset goes through the Q8_K bsums as in the AVX2 dot (kquants_q23_avx2.c). Needs
 * AVX512-VNNI at run time, as the other AVX-512 K-quant dots.
 *
 * Each is a row kernel against NC activation rows (the weights unpacked once per block for
 * all of them), instanced 1 x 1 as vec_dot and as tiles by ST_KQ_DEF_DOT_TILE_: a tile
 * element is vec_dot's arithmetic bit for bit.
 */
#include "quant/kquants.h"

#include "strata/core.h"
#include "strata/quant.h"

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

/* Block-constant index vectors: lanes 4 k .. 4 k + 3 of chunk c take sub-block 4 c + k's
 * scale; chunk c's low bits sit at shifts 2 (c % 2) and 2 (c % 2) + 2 of its two halves. */
typedef struct q23_consts {
    __m512i pick[4], lo_shift[2];
} q23_consts;

KQ_AI q23_consts q23_consts_make(void) {
    q23_consts k;
    for (int c = 0; c < 4; c++)
        k.pick[c] = _mm512_setr_epi32(4 * c, 4 * c, 4 * c, 4 * c, 4 * c + 1, 4 * c + 1, 4 * c + 1, 4 * c + 1,
                                      4 * c + 2, 4 * c + 2, 4 * c + 2, 4 * c + 2, 4 * c + 3, 4 * c + 3, 4 * c + 3,
                                      4 * c + 3);
    k.lo_shift[0] = halves16(0, 2), k.lo_shift[1] = halves16(4, 6);
    return k;
}

/* sum over the 4 chunks of (w[c] . a[c]) times the chunk's scales, 16 dword lanes */
KQ_AI __m512i q23_dot(const __m512i w[4], const __m512i scp[4], const int8_t *a) {
    __m512i sumi = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[c], _mm512_loadu_si512((const void *)(a + 64 * c)));
        sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(p, scp[c]));
    }
    return sumi;
}

KQ_AI void q3k_row(const int NC, int nb, const st_block_q3_K *x, const void *y, size_t by, float *s, size_t bs) {
    const q23_consts k = q23_consts_make();
    const __m512i m3 = _mm512_set1_epi8(3), m4 = _mm512_set1_epi8(4);
    /* high bits g = 4 h + j moved to bit 2: right by g - 2 (left by 2 - g for g < 2; c = 0) */
    const __m512i hi_r[4] = {halves16(0, 0), halves16(0, 1), halves16(2, 3), halves16(4, 5)};
    const __m512i hi_l0 = halves16(2, 1);
    __m512 acc[ST_TILE_MAX];
#pragma GCC unroll 4
    for (int col = 0; col < NC; col++) acc[col] = _mm512_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const __m512i sc32 = q3_scales32(x[i].scales);
        const __m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x[i].hmask));
        __m512i w[4], scp[4];
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * (c / 2))));
            const __m512i lo = _mm512_and_si512(_mm512_srlv_epi16(q, k.lo_shift[c % 2]), m3);
            const __m512i hs = c == 0 ? _mm512_sllv_epi16(hm, hi_l0) : _mm512_srlv_epi16(hm, hi_r[c]);
            w[c] = _mm512_or_si512(lo, _mm512_and_si512(hs, m4));
            scp[c] = _mm512_permutexvar_epi32(k.pick[c], sc32);
        }
        const float dx = st_fp16_to_fp32(x[i].d);
#pragma GCC unroll 4
        for (int col = 0; col < NC; col++) {
            const st_block_q8_K *yc = kq_act(y, by, col, i);
            __m512i sumi = q23_dot(w, scp, yc->qs);
            /* - 4 * sum_s scale_s * bsum_s */
            const __m512i bsum = _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)yc->bsums));
            sumi = _mm512_sub_epi32(sumi, _mm512_slli_epi32(_mm512_mullo_epi32(bsum, sc32), 2));
            acc[col] = _mm512_fmadd_ps(_mm512_set1_ps(yc->d * dx), _mm512_cvtepi32_ps(sumi), acc[col]);
        }
    }
#pragma GCC unroll 4
    for (int col = 0; col < NC; col++) s[(size_t)col * bs] = _mm512_reduce_add_ps(acc[col]);
}

/* Q2_K: Q3_K's low bits alone; 4-bit scales (low nibbles) and mins (high), the mins applied
 * through the bsums. */
KQ_AI void q2k_row(const int NC, int nb, const st_block_q2_K *x, const void *y, size_t by, float *s, size_t bs) {
    const q23_consts k = q23_consts_make();
    const __m512i m3 = _mm512_set1_epi8(3);
    __m512 acc[ST_TILE_MAX];
#pragma GCC unroll 4
    for (int col = 0; col < NC; col++) acc[col] = _mm512_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const __m512i sm = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)x[i].scales));
        const __m512i sc32 = _mm512_and_si512(sm, _mm512_set1_epi32(0xF)), mn32 = _mm512_srli_epi32(sm, 4);
        __m512i w[4], scp[4];
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * (c / 2))));
            w[c] = _mm512_and_si512(_mm512_srlv_epi16(q, k.lo_shift[c % 2]), m3);
            scp[c] = _mm512_permutexvar_epi32(k.pick[c], sc32);
        }
        const float dx = st_fp16_to_fp32(x[i].d), mx = st_fp16_to_fp32(x[i].dmin);
#pragma GCC unroll 4
        for (int col = 0; col < NC; col++) {
            const st_block_q8_K *yc = kq_act(y, by, col, i);
            const __m512i sumi = q23_dot(w, scp, yc->qs);
            const __m512i bsum = _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)yc->bsums));
            const __m512i summ = _mm512_mullo_epi32(bsum, mn32);
            acc[col] = _mm512_fmadd_ps(_mm512_set1_ps(yc->d * dx), _mm512_cvtepi32_ps(sumi), acc[col]);
            acc[col] = _mm512_fnmadd_ps(_mm512_set1_ps(yc->d * mx), _mm512_cvtepi32_ps(summ), acc[col]);
        }
    }
#pragma GCC unroll 4
    for (int col = 0; col < NC; col++) s[(size_t)col * bs] = _mm512_reduce_add_ps(acc[col]);
}

ST_KQ_DEF_DOT_TILE_(q3_K_q8_K, avx512, st_block_q3_K, q3k_row)
ST_KQ_DEF_DOT_TILE_(q2_K_q8_K, avx512, st_block_q2_K, q2k_row)
