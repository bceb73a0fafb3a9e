/*
 * Q8_0 batches over the group layout (quant_int.h: ST_Q8X_*) on AMX-INT8: the integer sums of
 * a block for 16 rows x up to 16 tokens in two tile instructions, the float side on AVX-512.
 *
 * A block's 8 x 64 quants in the group layout are AMX's B tile in its VNNI order as they lie
 * (4 bytes of each of the 16 rows per 64), and the tokens' blocks are the A tile read in place
 * from the activation rows (32 bytes at a stride of one activation row). TDPBSUD multiplies
 * the signed activations by the weights stored + 128; TDPBSSD of the same A against a tile of
 * -128 bytes adds -128 * sum(a) into the same int32s, so C holds each (token, row) pair's
 * exact block sum. The float side is what bounds it: per block and token a convert, a
 * multiply by the 16 rows' scales and an FMA, against 4 int32 sums per row per block (and the
 * vpdpbusd chains) on the VNNI path (docs/PERFORMANCE.md, the engine).
 *
 * The bits are the scalar twin's (quads.c), as q8x_avx512.c's: the same integer per (row,
 * block), the same float product and FMA in block order. A call of a few tokens goes to the
 * VNNI kernel (Q8A_MIN_TOKENS; the bits are the same).
 *
 * The tile state needs the kernel's permission (st_cpu_amx_enable, asked when the kernel
 * table is chosen); each call loads its tile configuration and releases the tiles at its end,
 * so no state is left between calls or on a thread that only ran VNNI.
 */
#include "quant_int.h"
#include "quant/kquants.h"

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

/* The tile intrinsics are asm statements that do not tell the compiler what memory they
 * read or write: a barrier keeps the stores of a buffer before a tile load of it, and the
 * loads of a tile store's buffer after it. */
#define Q8A_BARRIER() __asm__ volatile("" ::: "memory")

/* Tiles: 0, 1 the two blocks' C (M x 16 int32); 2, 3 their A (M tokens x 32 bytes); 4, 5
 * their B (8 x 64 bytes of the group layout); 6 the -128 bytes. */
struct q8a_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

static void q8a_config(int m) {
    struct q8a_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 2; t++) cfg.rows[t] = (uint8_t)m, cfg.colsb[t] = 64;
    for (int t = 2; t < 4; t++) cfg.rows[t] = (uint8_t)m, cfg.colsb[t] = 32;
    for (int t = 4; t < 7; t++) cfg.rows[t] = 8, cfg.colsb[t] = 64;
    _tile_loadconfig(&cfg);
}

/* Fewer tokens than this go to the VNNI kernel: a tile's fixed cost (its loads and stores,
 * the two tile products) is paid for however few rows it holds, and VNNI ran as fast at 4
 * tokens and faster at 2 (bench/matvec --tiles; docs/PERFORMANCE.md, the engine). */
#define Q8A_MIN_TOKENS 6

#define Q8A_CHUNK 64 /* blocks of the tokens' scales prepared at once (4 KiB for 16 tokens) */

/* Up to 16 tokens (M) against ng groups; s as st_tilex_fn's. */
AI void q8a_pass(const int M, int nb, const uint8_t *x, int ng, const uint8_t *y, size_t by, float *s, size_t bs) {
    const size_t gb = (size_t)nb * ST_QUAD_GROUP_ROWS * sizeof(st_block_q8_0);
    _Alignas(64) int32_t cbuf[2][16][16];
    float da[16][Q8A_CHUNK];
    for (int b0 = 0; b0 < nb; b0 += Q8A_CHUNK) {
        const int b1 = b0 + Q8A_CHUNK < nb ? b0 + Q8A_CHUNK : nb;
        for (int c = 0; c < M; c++) {
            const st_block_q8_0 *a = (const st_block_q8_0 *)(y + (size_t)c * by);
            for (int b = b0; b < b1; b++) da[c][b - b0] = _cvtsh_ss(a[b].d);
        }
        for (int g = 0; g < ng; g++) {
            const uint8_t *xg = x + (size_t)g * gb;
            __m512 acc[16];
#pragma GCC unroll 16
            for (int c = 0; c < M; c++)
                acc[c] = b0 ? _mm512_loadu_ps(s + (size_t)c * bs + ST_QUAD_GROUP_ROWS * (size_t)g) : _mm512_setzero_ps();
            for (int b = b0; b < b1; b += ST_Q8X_SPAN) {
                const uint8_t *sp = xg + (size_t)(b / ST_Q8X_SPAN) * ST_Q8X_SPAN_BYTES;
                const uint8_t *ab = y + (size_t)b * sizeof(st_block_q8_0) + offsetof(st_block_q8_0, qs);
                _tile_loadd(2, ab, (long)by);
                _tile_loadd(3, ab + sizeof(st_block_q8_0), (long)by);
                _tile_loadd(4, sp + ST_Q8X_QS, 64);
                _tile_loadd(5, sp + ST_Q8X_QS + 512, 64);
                _tile_zero(0);
                _tile_zero(1);
                _tile_dpbsud(0, 2, 4);
                _tile_dpbssd(0, 2, 6);
                _tile_dpbsud(1, 3, 5);
                _tile_dpbssd(1, 3, 6);
                _tile_stored(0, cbuf[0], 64);
                _tile_stored(1, cbuf[1], 64);
                Q8A_BARRIER();
#pragma GCC unroll 2
                for (int j = 0; j < ST_Q8X_SPAN; j++) {
                    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(sp + 32 * j)));
#pragma GCC unroll 16
                    for (int c = 0; c < M; c++)
                        acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(cbuf[j][c])),
                                                 _mm512_mul_ps(dw, _mm512_set1_ps(da[c][b + j - b0])), acc[c]);
                }
            }
#pragma GCC unroll 16
            for (int c = 0; c < M; c++) _mm512_storeu_ps(s + (size_t)c * bs + ST_QUAD_GROUP_ROWS * (size_t)g, acc[c]);
        }
    }
}

void st_tilex_q8_0_q8_0_amx(int n, float *s, size_t bs, const void *x, int ng, const void *y, size_t by, int nc) {
    ST_ASSERT(n % (32 * ST_Q8X_SPAN) == 0 && ng >= 1 && nc >= 1);
    if (nc < Q8A_MIN_TOKENS) {
        st_tilex_q8_0_q8_0_avx512(n, s, bs, x, ng, y, by, nc);
        return;
    }
    const int nb = n / 32;
    _Alignas(64) uint8_t k80[8 * 64];
    memset(k80, 0x80, sizeof k80);
    Q8A_BARRIER();
    int m_cfg = 0;
    for (int c0 = 0; c0 < nc; c0 += 16) {
        const int m = nc - c0 < 16 ? nc - c0 : 16;
        if (m != m_cfg) {
            q8a_config(m);
            _tile_loadd(6, k80, 64);
            m_cfg = m;
        }
        const uint8_t *yc = (const uint8_t *)y + (size_t)c0 * by;
        float *sc = s + (size_t)c0 * bs;
        if (m < Q8A_MIN_TOKENS) { /* the last few: the VNNI kernel, which leaves the tiles be */
            st_tilex_q8_0_q8_0_avx512(n, sc, bs, x, ng, yc, by, m);
            continue;
        }
        switch (m) {
#define Q8A_CASE_(M) \
    case M: q8a_pass(M, nb, (const uint8_t *)x, ng, yc, by, sc, bs); break;
            Q8A_CASE_(6) Q8A_CASE_(7) Q8A_CASE_(8)
            Q8A_CASE_(9) Q8A_CASE_(10) Q8A_CASE_(11) Q8A_CASE_(12) Q8A_CASE_(13) Q8A_CASE_(14) Q8A_CASE_(15)
            default: q8a_pass(16, nb, (const uint8_t *)x, ng, yc, by, sc, bs); break;
#undef Q8A_CASE_
        }
    }
    _tile_release();
}
