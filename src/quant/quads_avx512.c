/*
 * Q8_0 over its quad layout (quant_int.h: ST_Q8Q_*), AVX-512 + VNNI. One row per 128-bit
 * lane: a 64-byte load holds 16 quants of each of the 4 rows, stored as q + 128 so they are
 * vpdpbusd's unsigned side, against the 16 activations broadcast to the 4 lanes; the 128 *
 * sum(a) this adds is the same for every row, so one vpdpbusd of 0x80 bytes per half
 * removes it for all 4. Each block then costs 4 vpdpbusd, a subtraction, a convert and an
 * FMA for 4 rows (the row dot: about 13 vector ops per 2 blocks of one row, half of them
 * building per-lane scales). The prefetch hints cost a little in cache and pay off from
 * DRAM (quad_avx512.h; figures in docs/PERFORMANCE.md, quantized matvec).
 *
 * Deterministic and the same per element whatever nr and nc, and whatever the matrix's
 * alignment (the three loads give the same bytes); not the row layout's bits (a row's
 * sums run through 4 lanes).
 *
 * The wide tile (st_tilew_fn) runs several quads against up to ST_TILEW_TOKENS tokens with
 * the same arithmetic per lane. The 128 * sum(a) term depends on the token and the block
 * only, so it is worked out once per call (negated, as the start value of the quads'
 * vpdpbusd chain: the same integer as subtracting it after, the sums fit in 18 bits), with
 * each block's activation scale as a float; a quad-token pair then costs 2 vpdpbusd, a
 * convert, a multiply and an FMA per block instead of 4 vpdpbusd, a subtraction, a convert,
 * a multiply and an FMA: 5 vector ops on the two ports that run 512-bit ones, which is what
 * bounds it (docs/PERFORMANCE.md, the engine).
 */
#include "quant_int.h"
#include "quad_avx512.h"

#include <immintrin.h>

#define AI static inline __attribute__((always_inline))

AI void q8q_rows(const int ALIGN, const int NC, int n_span, const uint8_t *x, const void *y, size_t by, float *s,
                 size_t bs, int nr) {
    const __m512i k80 = _mm512_set1_epi8((char)0x80);
    __m512 acc[ST_TILE_MAX];
#pragma GCC unroll 4
    for (int c = 0; c < NC; c++) acc[c] = _mm512_setzero_ps();
    for (int i = 0; i < n_span; i++) {
        const uint8_t *xb = x + (size_t)i * ST_Q8Q_BLOCK_BYTES;
        st_quad_prefetch(xb, (int)ST_Q8Q_BLOCK_BYTES);
        /* d of blocks 0-3 and 4-7 of the 4 rows, lane 4 b + r */
        const __m512 d[2] = {_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)xb)),
                             _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(xb + 32)))};
#pragma GCC unroll 8
        for (int b = 0; b < ST_Q8Q_SPAN; b++) {
            const __m512i w0 = st_quad_load(ALIGN, xb + ST_Q8Q_QS + 128 * b), w1 = st_quad_load(ALIGN, xb + ST_Q8Q_QS + 128 * b + 64);
            const int j = 4 * (b & 3);
            const __m512 dw = _mm512_permutexvar_ps(_mm512_setr_epi32(j, j, j, j, j + 1, j + 1, j + 1, j + 1, j + 2, j + 2, j + 2,
                                                                      j + 2, j + 3, j + 3, j + 3, j + 3),
                                                    d[b >> 2]);
#pragma GCC unroll 4
            for (int c = 0; c < NC; c++) {
                const st_block_q8_0 *a = (const st_block_q8_0 *)((const uint8_t *)y + (size_t)c * by) + ST_Q8Q_SPAN * i + b;
                const __m512i a0 = st_quad_bcast16(a->qs), a1 = st_quad_bcast16(a->qs + 16);
                __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w0, a0);
                p = _mm512_dpbusd_epi32(p, w1, a1);
                __m512i off = _mm512_dpbusd_epi32(_mm512_setzero_si512(), k80, a0);
                off = _mm512_dpbusd_epi32(off, k80, a1);
                const __m512 dwa = _mm512_mul_ps(dw, _mm512_set1_ps(_cvtsh_ss(a->d)));
                acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(p, off)), dwa, acc[c]);
            }
        }
    }
    st_quad_store(NC, acc, s, bs, nr);
}

void st_tile4_q8_0_q8_0_avx512(int n, float *s, size_t bs, const void *x, const void *y, size_t by, int nr,
                               int nc) {
    ST_ASSERT(n % (32 * ST_Q8Q_SPAN) == 0 && nr >= 1 && nr <= 4 && nc >= 1 && nc <= 4);
    const int n_span = n / (32 * ST_Q8Q_SPAN);
    ST_QUAD_DISPATCH_(q8q_rows, 0, n_span)
}

/* Blocks per prepared chunk of the wide tile: the token side of 64 blocks (2048 columns) of
 * ST_TILEW_TOKENS tokens stays in L1 (10 KiB) whatever the row length. */
#define Q8W_CHUNK_BLOCKS (8 * ST_Q8Q_SPAN)

AI void q8w_tile(const int ALIGN, const int NC, int n_span, const uint8_t *x, const void *y, size_t by, float *s,
                 size_t bs, int nq) {
    const __m128i k80 = _mm_set1_epi8((char)0x80);
    const size_t qb = (size_t)n_span * ST_Q8Q_BLOCK_BYTES; /* bytes per quad: 4 rows */
    __m128i noff[ST_TILEW_TOKENS][Q8W_CHUNK_BLOCKS];       /* -128 * sum(a), lane element k as in q8q_rows */
    float da[ST_TILEW_TOKENS][Q8W_CHUNK_BLOCKS];
    __m512 part[ST_TILEW_QUADS][ST_TILEW_TOKENS];          /* the accumulators between chunks */
    const int n_blk = n_span * ST_Q8Q_SPAN;
    for (int b0 = 0; b0 < n_blk; b0 += Q8W_CHUNK_BLOCKS) {
        const int b1 = b0 + Q8W_CHUNK_BLOCKS < n_blk ? b0 + Q8W_CHUNK_BLOCKS : n_blk;
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++) {
            const st_block_q8_0 *a = (const st_block_q8_0 *)((const uint8_t *)y + (size_t)c * by);
            for (int k = b0; k < b1; k++) {
                const __m128i a0 = _mm_loadu_si128((const __m128i *)a[k].qs), a1 = _mm_loadu_si128((const __m128i *)(a[k].qs + 16));
                const __m128i off = _mm_dpbusd_epi32(_mm_dpbusd_epi32(_mm_setzero_si128(), k80, a0), k80, a1);
                noff[c][k - b0] = _mm_sub_epi32(_mm_setzero_si128(), off);
                da[c][k - b0] = _cvtsh_ss(a[k].d);
            }
        }
        for (int q = 0; q < nq; q++) {
            const uint8_t *xq = x + (size_t)q * qb;
            __m512 acc[ST_TILEW_TOKENS];
#pragma GCC unroll 8
            for (int c = 0; c < NC; c++) acc[c] = b0 ? part[q][c] : _mm512_setzero_ps();
            for (int i = b0 / ST_Q8Q_SPAN; i < b1 / ST_Q8Q_SPAN; i++) {
                const uint8_t *xb = xq + (size_t)i * ST_Q8Q_BLOCK_BYTES;
                st_quad_prefetch(xb, (int)ST_Q8Q_BLOCK_BYTES);
                const __m512 d[2] = {_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)xb)),
                                     _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(xb + 32)))};
#pragma GCC unroll 8
                for (int b = 0; b < ST_Q8Q_SPAN; b++) {
                    const __m512i w0 = st_quad_load(ALIGN, xb + ST_Q8Q_QS + 128 * b),
                                  w1 = st_quad_load(ALIGN, xb + ST_Q8Q_QS + 128 * b + 64);
                    const int j = 4 * (b & 3), kb = ST_Q8Q_SPAN * i + b - b0;
                    const __m512 dw = _mm512_permutexvar_ps(_mm512_setr_epi32(j, j, j, j, j + 1, j + 1, j + 1, j + 1, j + 2,
                                                                              j + 2, j + 2, j + 2, j + 3, j + 3, j + 3, j + 3),
                                                            d[b >> 2]);
#pragma GCC unroll 8
                    for (int c = 0; c < NC; c++) {
                        const st_block_q8_0 *a =
                            (const st_block_q8_0 *)((const uint8_t *)y + (size_t)c * by) + ST_Q8Q_SPAN * i + b;
                        __m512i p = _mm512_dpbusd_epi32(_mm512_broadcast_i32x4(noff[c][kb]), w0, st_quad_bcast16(a->qs));
                        p = _mm512_dpbusd_epi32(p, w1, st_quad_bcast16(a->qs + 16));
                        const __m512 dwa = _mm512_mul_ps(dw, _mm512_set1_ps(da[c][kb]));
                        acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), dwa, acc[c]);
                    }
                }
            }
            if (b1 < n_blk) {
#pragma GCC unroll 8
                for (int c = 0; c < NC; c++) part[q][c] = acc[c];
            } else {
                st_quad_store(NC, acc, s + 4 * (size_t)q, bs, 4);
            }
        }
    }
}

#define Q8W_NC_(A)                                                       \
    switch (nc) {                                                        \
    case 1: q8w_tile(A, 1, n_span, x, y, by, s, bs, nq); break;          \
    case 2: q8w_tile(A, 2, n_span, x, y, by, s, bs, nq); break;          \
    case 3: q8w_tile(A, 3, n_span, x, y, by, s, bs, nq); break;          \
    case 4: q8w_tile(A, 4, n_span, x, y, by, s, bs, nq); break;          \
    case 5: q8w_tile(A, 5, n_span, x, y, by, s, bs, nq); break;          \
    case 6: q8w_tile(A, 6, n_span, x, y, by, s, bs, nq); break;          \
    case 7: q8w_tile(A, 7, n_span, x, y, by, s, bs, nq); break;          \
    default: q8w_tile(A, 8, n_span, x, y, by, s, bs, nq); break;         \
    }

void st_tilew_q8_0_q8_0_avx512(int n, float *s, size_t bs, const void *x, const void *y, size_t by, int nq, int nc) {
    ST_ASSERT(n % (32 * ST_Q8Q_SPAN) == 0 && nq >= 1 && nq <= ST_TILEW_QUADS && nc >= 1 && nc <= ST_TILEW_TOKENS);
    const int n_span = n / (32 * ST_Q8Q_SPAN);
    /* a quad is a whole number of 64-byte lines (ST_Q8Q_BLOCK_BYTES), so every quad of the
     * call falls where the first does */
    _Static_assert(ST_Q8Q_BLOCK_BYTES % 64 == 0, "quad blocks in whole cache lines");
    switch ((int)((uintptr_t)x & 63)) {
    case 0: Q8W_NC_(64) break;
    case 32: Q8W_NC_(32) break;
    default: Q8W_NC_(1) break;
    }
}
