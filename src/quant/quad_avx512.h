/*
 * What the AVX-512 quad kernels share (kquants_avx512.h for the K-quants, quads_avx512.c for
 * Q8_0): a kernel holds one row of its quad per 128-bit lane, loads the quad's bytes 64 at a
 * time and ends with each row's 4 lanes summed.
 */
#ifndef STRATA_QUANT_QUAD_AVX512_H
#define STRATA_QUANT_QUAD_AVX512_H

#include "quant/kquants.h"
#include "strata/quant.h"

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

/* 64 bytes of a quad: one aligned load when they start on a cache line (ALIGN 64), two
 * aligned 32-byte loads when 32 past one (a 64-byte load would cross a line every time, the
 * slowest of the three: docs/PERFORMANCE.md, quantized matvec), else unaligned. The same bytes
 * whichever, so the results do not depend on the matrix's alignment. */
static inline __attribute__((always_inline)) __m512i st_quad_load(const int ALIGN, const uint8_t *p) {
    if (ALIGN == 64) return _mm512_load_si512(p);
    if (ALIGN == 32)
        return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_load_si256((const __m256i *)p)),
                                  _mm256_load_si256((const __m256i *)(p + 32)), 1);
    return _mm512_loadu_si512(p);
}

/* 16 activation bytes in every 128-bit lane (one per row of the quad). */
static inline __attribute__((always_inline)) __m512i st_quad_bcast16(const int8_t *p) {
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)p));
}

/* s[c * bs + r] for rows r < nr of the NC accumulators: row r's 4 lanes, summed in a fixed
 * order. */
static inline __attribute__((always_inline)) void st_quad_store(const int NC, const __m512 *acc, float *s, size_t bs,
                                                                int nr) {
    for (int c = 0; c < NC; c++) {
        float t[16];
        _mm512_storeu_ps(t, acc[c]);
        for (int r = 0; r < nr; r++) s[(size_t)c * bs + r] = (t[4 * r] + t[4 * r + 1]) + (t[4 * r + 2] + t[4 * r + 3]);
    }
}

/* The body of a tile4 (st_tile4_fn: x, y, by, s, bs, nr, nc in scope) over a kernel
 * ROWS(ALIGN, NC, n_units, x, y, by, s, bs, nr), instanced for the nc given and for where
 * the quad's first 64-byte loads fall (x + lead). */
#define ST_QUAD_NC_(ROWS, A, n_units)                                  \
    switch (nc) {                                                      \
    case 1: ROWS(A, 1, n_units, x, y, by, s, bs, nr); break;           \
    case 2: ROWS(A, 2, n_units, x, y, by, s, bs, nr); break;           \
    case 3: ROWS(A, 3, n_units, x, y, by, s, bs, nr); break;           \
    default: ROWS(A, 4, n_units, x, y, by, s, bs, nr); break;          \
    }
#define ST_QUAD_DISPATCH_(ROWS, lead, n_units)                         \
    switch ((int)(((uintptr_t)x + (lead)) & 63)) {                     \
    case 0: ST_QUAD_NC_(ROWS, 64, n_units) break;                      \
    case 32: ST_QUAD_NC_(ROWS, 32, n_units) break;                     \
    default: ST_QUAD_NC_(ROWS, 1, n_units) break;                      \
    }

#endif /* STRATA_QUANT_QUAD_AVX512_H */
