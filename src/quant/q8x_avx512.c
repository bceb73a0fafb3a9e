/*
 * Q8_0 over its group layout (quant_int.h: ST_Q8X_*), AVX-512 VNNI: the matvec of every Q8_0
 * matrix in that layout, and batches where AMX does not run.
 *
 * One int32 lane per row of the group: a 64-byte load holds 4 quants of each of the 16 rows
 * (stored q + 128, vpdpbusd's unsigned side) against 4 activation bytes broadcast to every
 * lane, so a block is 8 vpdpbusd into one accumulator that holds the block's exact sums of the
 * 16 rows, then a convert, a multiply by the 16 scales and an FMA: 11 vector ops per 512
 * weights, and no lane sums at the end. The 128 * sum(a) that the unsigned side adds depends
 * on the token and the block only: it is worked out once per call and block, negated, as the
 * start value of the vpdpbusd chain (the same integer as subtracting it after).
 *
 * The bits are the scalar twin's (quads.c): the same exact integer per (row, block), the same
 * float product and FMA in block order, whatever ng and nc, and whatever the matrix's
 * alignment (loads are unaligned; the bytes are the same).
 */
#include "quant_int.h"
#include "quant/kquants.h"

#include <immintrin.h>

#define AI static inline __attribute__((always_inline))

/* Blocks of the token side prepared at once: 64 blocks (2048 columns) of 4 tokens, 2 KiB. A
 * row longer than that runs in chunks whose accumulators wait in s between them (a float
 * stored and loaded back is the same float). */
#define Q8X_CHUNK 64
#define Q8X_NC 4 /* tokens a pass holds: 8 weight vectors, 4 accumulators, 4 chains */

AI void q8x_pass(const int NC, int nb, const uint8_t *x, int ng, const void *y, size_t by, float *s, size_t bs) {
    const __m512i k80 = _mm512_set1_epi8((char)0x80);
    const size_t gb = (size_t)nb * ST_QUAD_GROUP_ROWS * sizeof(st_block_q8_0);
    int32_t noff[Q8X_NC][Q8X_CHUNK];
    float da[Q8X_NC][Q8X_CHUNK];
    for (int b0 = 0; b0 < nb; b0 += Q8X_CHUNK) {
        const int b1 = b0 + Q8X_CHUNK < nb ? b0 + Q8X_CHUNK : nb;
        for (int c = 0; c < NC; c++) {
            const st_block_q8_0 *a = (const st_block_q8_0 *)((const uint8_t *)y + (size_t)c * by);
            for (int b = b0; b < b1; b++) {
                const __m256i av = _mm256_loadu_si256((const __m256i *)a[b].qs);
                const __m256i o = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm512_castsi512_si256(k80), av);
                const __m128i h = _mm_add_epi32(_mm256_castsi256_si128(o), _mm256_extracti128_si256(o, 1));
                const __m128i h2 = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
                noff[c][b - b0] = -_mm_cvtsi128_si32(_mm_add_epi32(h2, _mm_shuffle_epi32(h2, 0xb1)));
                da[c][b - b0] = _cvtsh_ss(a[b].d);
            }
        }
        for (int g = 0; g < ng; g++) {
            const uint8_t *xg = x + (size_t)g * gb;
            __m512 acc[Q8X_NC];
#pragma GCC unroll 4
            for (int c = 0; c < NC; c++)
                acc[c] = b0 ? _mm512_loadu_ps(s + (size_t)c * bs + ST_QUAD_GROUP_ROWS * (size_t)g) : _mm512_setzero_ps();
            for (int b = b0; b < b1; b++) {
                const uint8_t *sp = xg + (size_t)(b / ST_Q8X_SPAN) * ST_Q8X_SPAN_BYTES;
                const int j = b % ST_Q8X_SPAN;
                const uint8_t *q = sp + ST_Q8X_QS + 512 * j;
                _mm_prefetch((const char *)q + 1024, _MM_HINT_T0);
                const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(sp + 32 * j)));
                __m512i w[8];
#pragma GCC unroll 8
                for (int i = 0; i < 8; i++) w[i] = _mm512_loadu_si512(q + 64 * i);
#pragma GCC unroll 4
                for (int c = 0; c < NC; c++) {
                    const int8_t *aq = ((const st_block_q8_0 *)((const uint8_t *)y + (size_t)c * by))[b].qs;
                    __m512i p = _mm512_set1_epi32(noff[c][b - b0]);
#pragma GCC unroll 8
                    for (int i = 0; i < 8; i++) p = _mm512_dpbusd_epi32(p, w[i], _mm512_set1_epi32((int)ld32((const uint8_t *)aq + 4 * i)));
                    acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(dw, _mm512_set1_ps(da[c][b - b0])), acc[c]);
                }
            }
#pragma GCC unroll 4
            for (int c = 0; c < NC; c++) _mm512_storeu_ps(s + (size_t)c * bs + ST_QUAD_GROUP_ROWS * (size_t)g, acc[c]);
        }
    }
}

void st_tilex_q8_0_q8_0_avx512(int n, float *s, size_t bs, const void *x, int ng, const void *y, size_t by, int nc) {
    ST_ASSERT(n % (32 * ST_Q8X_SPAN) == 0 && ng >= 1 && nc >= 1);
    const int nb = n / 32;
    for (int c0 = 0; c0 < nc; c0 += Q8X_NC) {
        const void *yc = (const uint8_t *)y + (size_t)c0 * by;
        float *sc = s + (size_t)c0 * bs;
        switch (nc - c0 < Q8X_NC ? nc - c0 : Q8X_NC) {
        case 1: q8x_pass(1, nb, x, ng, yc, by, sc, bs); break;
        case 2: q8x_pass(2, nb, x, ng, yc, by, sc, bs); break;
        case 3: q8x_pass(3, nb, x, ng, yc, by, sc, bs); break;
        default: q8x_pass(4, nb, x, ng, yc, by, sc, bs); break;
        }
    }
}
