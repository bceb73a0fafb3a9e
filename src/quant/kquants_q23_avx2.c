/*
 * The Q3_K and Q2_K dots for AVX2 (AVX2 + FMA + F16C); kquants_q23_avx512.c has the AVX-512
 * ones. Q2_K is Q3_K's low bits alone, with 4-bit scales and mins (the mins through the
 * bsums, as Q4_K's). Each is a row kernel against NC activation rows, instanced as vec_dot
 * and as tiles by ST_KQ_DEF_DOT_TILE_ (a tile element is vec_dot's arithmetic bit for bit).
 *
 * Per group of 32 weights (two sub-blocks) the 2 low bits and the high bit are shifted into
 * place from one 32-byte load of qs and one of hmask (16-bit shifts leave every byte's own
 * bits in its low positions, shifts < 8), giving unsigned quants 0..7; vpmaddubsw against
 * the activations gives 16 words (8 per sub-block, |w| <= 2 * 7 * 128), one vpmaddwd by
 * the two sub-block scales gives dwords. The -4 offset is applied once per block through
 * the Q8_K bsums: - 4 * sum_s scale_s * bsum_s. All integer sums are exact; the float part
 * is one FMA per block into 8 lanes.
 */
#include "quant/kquants.h"

#include "strata/core.h"
#include "strata/quant.h"

#include <immintrin.h>

/* The 16 scales of a block (-32..31) as int16 words, from the 12 packed bytes: four 32-bit
 * words of 6-bit values built as ggml's reference builds them, then one subtract. */
static inline __m256i q3_scales16(const uint8_t q[K_SCALE_SIZE]) {
    uint32_t w[4];
    st_kq_q3_scale_words(q, w);
    /* from registers: a 16-byte load of the words just stored would stall on store forwarding */
    const __m128i b = _mm_setr_epi32((int)w[0], (int)w[1], (int)w[2], (int)w[3]);
    return _mm256_cvtepi8_epi16(_mm_sub_epi8(b, _mm_set1_epi8(32)));
}

/* dword g of the scale words holds sub-blocks 2 g and 2 g + 1: broadcast it, then spread
 * its first word over the low 128 bits and its second over the high */
KQ_AI __m256i q23_scale_pair(__m256i sc16, int g) {
    const __m256i spread = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2,
                                            3, 2, 3, 2, 3, 2, 3);
    return _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(sc16, _mm256_set1_epi32(g)), spread);
}

/* sum over the 8 groups of 32 of (w[g] . a[g]) times the groups' scale words, 8 dwords */
KQ_AI __m256i q23_dot(const __m256i w[8], const __m256i scw[8], const int8_t *a) {
    __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
        const __m256i p = _mm256_maddubs_epi16(w[g], _mm256_loadu_si256((const __m256i *)(a + 32 * g)));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, scw[g]));
    }
    return sumi;
}

KQ_AI void q3k_row(const int NC, int nb, const st_block_q3_K *x, const void *y, size_t by, float *s, size_t bs) {
    const __m256i m3 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(4);
    __m256 acc[ST_TILE_MAX];
#pragma GCC unroll 4
    for (int col = 0; col < NC; col++) acc[col] = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const __m256i sc16 = q3_scales16(x[i].scales);
        const __m256i hm = _mm256_loadu_si256((const __m256i *)x[i].hmask);
        __m256i w[8], scw[8];
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                const int g = 4 * h + j; /* elements 32 g .. 32 g + 31: sub-blocks 2 g, 2 g + 1 */
                const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3);
                /* the high bit (bit g of each hmask byte) moved straight to bit 2 */
                const __m256i hi = _mm256_and_si256(g >= 2 ? _mm256_srli_epi16(hm, g - 2) : _mm256_slli_epi16(hm, 2 - g), m4);
                w[g] = _mm256_or_si256(lo, hi);
                scw[g] = q23_scale_pair(sc16, g);
            }
        }
        const float dx = st_fp16_to_fp32(x[i].d);
#pragma GCC unroll 4
        for (int col = 0; col < NC; col++) {
            const st_block_q8_K *yc = kq_act(y, by, col, i);
            __m256i sumi = q23_dot(w, scw, yc->qs);
            const __m256i corr = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)yc->bsums), sc16);
            sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32(corr, 2));
            acc[col] = _mm256_fmadd_ps(_mm256_set1_ps(yc->d * dx), _mm256_cvtepi32_ps(sumi), acc[col]);
        }
    }
#pragma GCC unroll 4
    for (int col = 0; col < NC; col++) s[(size_t)col * bs] = kq_hsum256(acc[col]);
}

KQ_AI void q2k_row(const int NC, int nb, const st_block_q2_K *x, const void *y, size_t by, float *s, size_t bs) {
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256 acc[ST_TILE_MAX];
#pragma GCC unroll 4
    for (int col = 0; col < NC; col++) acc[col] = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const __m128i sm = _mm_loadu_si128((const __m128i *)x[i].scales);
        const __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(sm, _mm_set1_epi8(0xF)));
        const __m256i mn16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sm, 4), _mm_set1_epi8(0xF)));
        __m256i w[8], scw[8];
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                w[4 * h + j] = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3);
                scw[4 * h + j] = q23_scale_pair(sc16, 4 * h + j);
            }
        }
        const float dx = st_fp16_to_fp32(x[i].d), mx = st_fp16_to_fp32(x[i].dmin);
#pragma GCC unroll 4
        for (int col = 0; col < NC; col++) {
            const st_block_q8_K *yc = kq_act(y, by, col, i);
            const __m256i sumi = q23_dot(w, scw, yc->qs);
            const __m256i summ = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)yc->bsums), mn16);
            acc[col] = _mm256_fmadd_ps(_mm256_set1_ps(yc->d * dx), _mm256_cvtepi32_ps(sumi), acc[col]);
            acc[col] = _mm256_fnmadd_ps(_mm256_set1_ps(yc->d * mx), _mm256_cvtepi32_ps(summ), acc[col]);
        }
    }
#pragma GCC unroll 4
    for (int col = 0; col < NC; col++) s[(size_t)col * bs] = kq_hsum256(acc[col]);
}

ST_KQ_DEF_DOT_TILE_(q3_K_q8_K, avx2, st_block_q3_K, q3k_row)
ST_KQ_DEF_DOT_TILE_(q2_K_q8_K, avx2, st_block_q2_K, q2k_row)
