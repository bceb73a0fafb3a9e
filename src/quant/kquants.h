/*
 * K-quants: super-blocks of QK_K = 256 weights, bit-compatible with ggml's block
 * layouts (ggml-common.h), so GGUF tensors quantized by llama.cpp decode identically.
 *
 * Each super-block holds 8 (Q4_K, Q5_K) or 16 (Q2_K, Q3_K, Q6_K) sub-blocks with their own small
 * integer scales, themselves scaled by fp16 super-block factors. Dequantization:
 *   Q2_K:        w = d * sc[j] * q - dmin * m[j]     (q in 0..3, 4-bit sc, m)
 *   Q3_K:        w = d * sc[j] * q                   (q in -4..3, 6-bit signed sc)
 *   Q4_K / Q5_K: w = d * sc[j] * q - dmin * m[j]     (q in 0..15 / 0..31, 6-bit sc, m)
 *   Q6_K:        w = d * scales[j] * (q - 32)        (q in 0..63, int8 scales)
 *   Q8_K:        w = d * qs                          (activation format, float d)
 * Q8_K also carries bsums[i] = sum of qs[16 i .. 16 i + 15], which the Q4_K / Q5_K dots
 * use to apply the mins (and the Q3_K dot its -4 offset) without touching the weights twice.
 *
 * Halves are stored as uint16_t (st_fp16_to_fp32 / st_fp32_to_fp16 from core.h).
 * Rows passed to these functions hold whole super-blocks: k (or n) must be a
 * multiple of QK_K (ST_ASSERT; a caller bug, never input).
 *
 * Inputs to the quantizers must be finite (NaN / inf give unspecified blocks, and the
 * SIMD and reference Q8_K quantizers may then differ).
 * All functions are pure and thread-safe; pointers are borrowed for the call only.
 * The _avx2 variants need AVX2 + FMA + F16C. The _avx512 dots need AVX-512 F/BW/VL/DQ
 * *and* AVX512-VNNI (st_cpu_has_vnni()); st_quantize_row_q8_K_avx512 needs no VNNI.
 * The dispatch table in the quant context must check this before picking them.
 */
#ifndef STRATA_QUANT_KQUANTS_H
#define STRATA_QUANT_KQUANTS_H

#include <stddef.h>
#include <stdint.h>

#define QK_K 256
#define K_SCALE_SIZE 12

/* 2.625 bits per weight: 16 sub-blocks of 16, each with a 4-bit scale (low nibble of
 * scales[s]) and a 4-bit min (high nibble); w = d * sc * q - dmin * m, q in 0..3 at bits
 * 2 j of qs[32 h + l] for element e = 128 h + 32 j + l (as Q3_K's low bits). */
typedef struct {
    uint8_t scales[QK_K / 16];
    uint8_t qs[QK_K / 4];
    uint16_t d;    /* fp16 super-block scale of the scales */
    uint16_t dmin; /* fp16 super-block scale of the mins */
} st_block_q2_K;
_Static_assert(sizeof(st_block_q2_K) == QK_K / 16 + QK_K / 4 + 4, "q2_K block size");

/* 3.4375 bits per weight: 16 sub-blocks of 16 with 6-bit signed scales (stored + 32);
 * a quant is 2 low bits in qs and a high bit in hmask, its value (low | high << 2) - 4.
 * Element e = 128 h + 32 j + l (h < 2, j < 4, l < 32): low bits (qs[32 h + l] >> 2 j) & 3,
 * high bit bit (4 h + j) of hmask[l], sub-block e / 16. Scale s (0..15): low nibble
 * scales[s] (s < 8) or scales[s - 8] >> 4, high 2 bits (scales[8 + s % 4] >> 2 (s / 4)) & 3. */
typedef struct {
    uint8_t hmask[QK_K / 8]; /* high bits of the quants */
    uint8_t qs[QK_K / 4];    /* low 2 bits of the quants */
    uint8_t scales[K_SCALE_SIZE];
    uint16_t d;              /* fp16 super-block scale */
} st_block_q3_K;
_Static_assert(sizeof(st_block_q3_K) == QK_K / 8 + QK_K / 4 + K_SCALE_SIZE + 2, "q3_K block size");

/* The 16 scales of a Q3_K block as stored (0..63, the value + 32), byte s of w[0..3] for
 * scale s, from its 12 packed bytes: four 32-bit words as ggml's reference builds them. The
 * SIMD dots load these words into a vector. */
static inline void st_kq_q3_scale_words(const uint8_t q[K_SCALE_SIZE], uint32_t w[4]) {
    const uint32_t a0 = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
    const uint32_t a1 = (uint32_t)q[4] | (uint32_t)q[5] << 8 | (uint32_t)q[6] << 16 | (uint32_t)q[7] << 24;
    const uint32_t a2 = (uint32_t)q[8] | (uint32_t)q[9] << 8 | (uint32_t)q[10] << 16 | (uint32_t)q[11] << 24;
    const uint32_t lo4 = 0x0f0f0f0f, hi2 = 0x03030303;
    w[0] = (a0 & lo4) | ((a2 & hi2) << 4);
    w[1] = (a1 & lo4) | (((a2 >> 2) & hi2) << 4);
    w[2] = ((a0 >> 4) & lo4) | (((a2 >> 4) & hi2) << 4);
    w[3] = ((a1 >> 4) & lo4) | (((a2 >> 6) & hi2) << 4);
}

/* The 16 signed scales of a Q3_K block (-32..31). */
static inline void st_kq_q3_scales(const uint8_t q[K_SCALE_SIZE], int8_t sc[16]) {
    uint32_t w[4];
    st_kq_q3_scale_words(q, w);
    for (int s = 0; s < 16; s++) sc[s] = (int8_t)((int)((w[s / 4] >> (8 * (s % 4))) & 0xFF) - 32);
}

/* 4.5 bits per weight: 8 sub-blocks of 32; 6-bit scale and min per sub-block,
 * packed 12 bytes for 16 values (see st_kq_get_scale_min). */
typedef struct {
    uint16_t d;                   /* fp16 super-block scale of the sub-block scales */
    uint16_t dmin;                /* fp16 super-block scale of the sub-block mins */
    uint8_t scales[K_SCALE_SIZE]; /* 8 x 6-bit scales + 8 x 6-bit mins */
    uint8_t qs[QK_K / 2];         /* 4-bit quants: byte 32 g + l holds element 64 g + l
                                     (low nibble) and 64 g + 32 + l (high nibble) */
} st_block_q4_K;
_Static_assert(sizeof(st_block_q4_K) == 2 * 2 + K_SCALE_SIZE + QK_K / 2, "q4_K block size");

/* 5.5 bits per weight: as Q4_K plus one high bit per weight. */
typedef struct {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8]; /* bit j of qh[l] is the 5th bit of element 32 j + l */
    uint8_t qs[QK_K / 2]; /* low 4 bits, laid out as in Q4_K */
} st_block_q5_K;
_Static_assert(sizeof(st_block_q5_K) == 2 * 2 + K_SCALE_SIZE + QK_K / 8 + QK_K / 2, "q5_K block size");

/* 6.5625 bits per weight: 16 sub-blocks of 16 with int8 scales. */
typedef struct {
    uint8_t ql[QK_K / 2];     /* low 4 bits of the quants */
    uint8_t qh[QK_K / 4];     /* high 2 bits of the quants */
    int8_t scales[QK_K / 16]; /* sub-block scales */
    uint16_t d;               /* fp16 super-block scale */
} st_block_q6_K;
_Static_assert(sizeof(st_block_q6_K) == QK_K / 2 + QK_K / 4 + QK_K / 16 + 2, "q6_K block size");

/* 9.125 bits per weight: the activation format the K-quant dots consume. */
typedef struct {
    float d;                  /* scale */
    int8_t qs[QK_K];          /* quants in -127..127 (-128 only for the extreme value) */
    int16_t bsums[QK_K / 16]; /* sums of groups of 16 quants */
} st_block_q8_K;
_Static_assert(sizeof(st_block_q8_K) == 4 + QK_K + QK_K / 16 * 2, "q8_K block size");

/* Unpacks the 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K block. */
static inline void st_kq_get_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* All 8 scales (*sc, byte j = scale j) and mins (*mn) of a Q4_K / Q5_K block at once:
 * the SIMD kernels' form of st_kq_get_scale_min. */
static inline void st_kq_unpack_scales_mins(const uint8_t q[K_SCALE_SIZE], uint64_t *sc, uint64_t *mn) {
    const uint32_t u0 = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
    const uint32_t u1 = (uint32_t)q[4] | (uint32_t)q[5] << 8 | (uint32_t)q[6] << 16 | (uint32_t)q[7] << 24;
    const uint32_t u2 = (uint32_t)q[8] | (uint32_t)q[9] << 8 | (uint32_t)q[10] << 16 | (uint32_t)q[11] << 24;
    const uint32_t lo6 = 0x3f3f3f3fu, lo4 = 0x0f0f0f0fu, lo2 = 0x03030303u;
    const uint32_t s_hi = (u2 & lo4) | (((u0 >> 6) & lo2) << 4);
    const uint32_t m_hi = ((u2 >> 4) & lo4) | (((u1 >> 6) & lo2) << 4);
    *sc = (uint64_t)(u0 & lo6) | (uint64_t)s_hi << 32;
    *mn = (uint64_t)(u1 & lo6) | (uint64_t)m_hi << 32;
}

/* ---- scalar reference quantization: x has k floats, y receives k / QK_K blocks ---- */
void st_quantize_row_q2_K_ref(const float *x, void *y, int64_t k);
void st_quantize_row_q3_K_ref(const float *x, void *y, int64_t k);
void st_quantize_row_q4_K_ref(const float *x, void *y, int64_t k);
void st_quantize_row_q5_K_ref(const float *x, void *y, int64_t k);
void st_quantize_row_q6_K_ref(const float *x, void *y, int64_t k);
void st_quantize_row_q8_K_ref(const float *x, void *y, int64_t k);

/* Activation quantization; bytes identical to st_quantize_row_q8_K_ref (incl. bsums). */
void st_quantize_row_q8_K_avx2(const float *x, void *y, int64_t k);
void st_quantize_row_q8_K_avx512(const float *x, void *y, int64_t k);

/* ---- dequantization: x holds k / QK_K blocks, y receives k floats ------------------- */
void st_dequantize_row_q2_K(const void *x, float *y, int64_t k);
void st_dequantize_row_q3_K(const void *x, float *y, int64_t k);
void st_dequantize_row_q4_K(const void *x, float *y, int64_t k);
void st_dequantize_row_q5_K(const void *x, float *y, int64_t k);
void st_dequantize_row_q6_K(const void *x, float *y, int64_t k);
void st_dequantize_row_q8_K(const void *x, float *y, int64_t k);

/* ---- dot products: *s = dot(weight row x, Q8_K activations y), n elements ----------- */
void st_vec_dot_q2_K_q8_K_scalar(int n, float *s, const void *x, const void *y);
void st_vec_dot_q2_K_q8_K_avx2(int n, float *s, const void *x, const void *y);
void st_vec_dot_q2_K_q8_K_avx512(int n, float *s, const void *x, const void *y); /* + VNNI */
void st_tile_q2_K_q8_K_avx2(int n, float *s, size_t bs, const void *x, size_t bx, const void *y, size_t by, int nr,
                            int nc);
void st_tile_q2_K_q8_K_avx512(int n, float *s, size_t bs, const void *x, size_t bx, const void *y, size_t by, int nr,
                              int nc);
void st_tile_q3_K_q8_K_avx2(int n, float *s, size_t bs, const void *x, size_t bx, const void *y, size_t by, int nr,
                            int nc);
void st_tile_q3_K_q8_K_avx512(int n, float *s, size_t bs, const void *x, size_t bx, const void *y, size_t by, int nr,
                              int nc);
void st_vec_dot_q3_K_q8_K_scalar(int n, float *s, const void *x, const void *y);
void st_vec_dot_q3_K_q8_K_avx2(int n, float *s, const void *x, const void *y);
void st_vec_dot_q3_K_q8_K_avx512(int n, float *s, const void *x, const void *y); /* + VNNI */
void st_vec_dot_q4_K_q8_K_scalar(int n, float *s, const void *x, const void *y);
void st_vec_dot_q4_K_q8_K_avx2(int n, float *s, const void *x, const void *y);
void st_vec_dot_q4_K_q8_K_avx2vnni(int n, float *s, const void *x, const void *y);
void st_vec_dot_q4_K_q8_K_avx512(int n, float *s, const void *x, const void *y);
void st_vec_dot_q4_K_q8_K_avx512gfni(int n, float *s, const void *x, const void *y);
void st_vec_dot_q5_K_q8_K_scalar(int n, float *s, const void *x, const void *y);
void st_vec_dot_q5_K_q8_K_avx2(int n, float *s, const void *x, const void *y);
void st_vec_dot_q5_K_q8_K_avx2vnni(int n, float *s, const void *x, const void *y);
void st_vec_dot_q5_K_q8_K_avx512(int n, float *s, const void *x, const void *y);
void st_vec_dot_q5_K_q8_K_avx512gfni(int n, float *s, const void *x, const void *y);
void st_vec_dot_q6_K_q8_K_scalar(int n, float *s, const void *x, const void *y);
void st_vec_dot_q6_K_q8_K_avx2(int n, float *s, const void *x, const void *y);
void st_vec_dot_q6_K_q8_K_avx2vnni(int n, float *s, const void *x, const void *y);
void st_vec_dot_q6_K_q8_K_avx512(int n, float *s, const void *x, const void *y);
void st_vec_dot_q6_K_q8_K_avx512gfni(int n, float *s, const void *x, const void *y);
/* Tiles (st_tile_fn in strata/quant.h): each element bit-identical to the same ISA's dot. */
void st_tile_q4_K_q8_K_avx2(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                            size_t by, int nr, int nc);
void st_tile_q5_K_q8_K_avx2(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                            size_t by, int nr, int nc);
void st_tile_q6_K_q8_K_avx2(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                            size_t by, int nr, int nc);
/* The AVX2 dots and tiles built with AVX-VNNI (kquants_avx2vnni.c; need st_cpu_has_avxvnni()):
 * their own arithmetic order, checked against the scalar reference like the others. */
void st_tile_q4_K_q8_K_avx2vnni(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                                size_t by, int nr, int nc);
void st_tile_q5_K_q8_K_avx2vnni(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                                size_t by, int nr, int nc);
void st_tile_q6_K_q8_K_avx2vnni(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                                size_t by, int nr, int nc);
void st_tile_q4_K_q8_K_avx512(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                              size_t by, int nr, int nc);
void st_tile_q5_K_q8_K_avx512(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                              size_t by, int nr, int nc);
void st_tile_q6_K_q8_K_avx512(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                              size_t by, int nr, int nc);
/* The same dots and tiles built with GFNI (kquants_avx512gfni.c): bit-identical to the
 * _avx512 ones; they also need st_cpu_has_gfni(). */
void st_tile_q4_K_q8_K_avx512gfni(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                                  size_t by, int nr, int nc);
void st_tile_q5_K_q8_K_avx512gfni(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                                  size_t by, int nr, int nc);
void st_tile_q6_K_q8_K_avx512gfni(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                                  size_t by, int nr, int nc);

/* The Q4_K and Q5_K quad blocks (ST_WLAYOUT_QUADS, quads.c): super-block b of a quad's 4
 * rows in the same 4 x 144 (Q4_K) or 4 x 176 (Q5_K) bytes, arranged for a kernel that holds
 * one row per 128-bit lane:
 *   bytes   0..7    d of rows 0-3 (f16)
 *   bytes   8..15   dmin of rows 0-3 (f16)
 *   bytes  16..63   the rows' 12 packed scale bytes, row after row
 *   Q5_K only, bytes 64..191: 2 chunks of 64 bytes, chunk h holding qh[16 h .. 16 h + 15]
 *                   of rows 0, 1, 2, 3
 *   then (from byte KQ_QUAD_QS(Q5)) 8 chunks of 64 bytes: chunk k holds qs[16 k .. 16 k + 15]
 *                   of rows 0, 1, 2, 3, so one 64-byte load gives 16 quant bytes of each row.
 * The chunks start 64 or 192 bytes into the block and a block is 9 or 11 cache lines, so in
 * a matrix whose base is 64-byte aligned every chunk load is aligned. */
#define KQ_QUAD_DMIN 8
#define KQ_QUAD_SCALES 16
#define KQ_QUAD_QH 64
#define KQ_QUAD_QS(Q5) ((Q5) ? 192 : 64)
#define KQ_QUAD_BYTES(Q5) (4 * ((Q5) ? sizeof(st_block_q5_K) : sizeof(st_block_q4_K)))
_Static_assert(KQ_QUAD_QS(0) + 4 * QK_K / 2 == KQ_QUAD_BYTES(0) && KQ_QUAD_QS(1) + 4 * QK_K / 2 == KQ_QUAD_BYTES(1) &&
                   KQ_QUAD_BYTES(0) % 64 == 0 && KQ_QUAD_BYTES(1) % 64 == 0,
               "q4_K / q5_K quad blocks");

/* The Q6_K quad layout: a quad's 4 rows as the 4 rows' d of every super-block (8 bytes
 * each), then nb bodies of 832 bytes (13 cache lines), in the same 4 x 210 bytes a
 * super-block:
 *   at 8 b: d of rows 0-3 (f16) of super-block b
 *   body b at 8 nb + 832 b:
 *           bytes   0..63    the 16 int8 sub-block scales of rows 0, 1, 2, 3
 *           then for each half n (0, 1) of the super-block, at 64 + 384 n: 2 chunks of 64 bytes,
 *           chunk h holding qh[32 n + 16 h .. + 15] of rows 0-3, then 4 chunks, chunk k
 *           holding ql[64 n + 16 k .. + 15] of rows 0-3.
 * The kernel reads a quad front to back in that order: with the d's after the bodies each
 * quad's first block waited on a line the prefetcher had not reached, and with all qh after
 * all ql the reads went back and forth within a body (slower than the rows from DRAM while
 * faster in cache: docs/PERFORMANCE.md, quantized matvec). The bodies are whole cache lines, line-aligned in every quad
 * when nb is a multiple of 8. */
#define KQ_Q6Q_BODY 832
#define KQ_Q6Q_QH(n, h) (64 + 384 * (n) + 64 * (h))
#define KQ_Q6Q_QL(n, k) (64 + 384 * (n) + 128 + 64 * (k))
_Static_assert(KQ_Q6Q_BODY + 8 == 4 * sizeof(st_block_q6_K) && KQ_Q6Q_QL(1, 4) == KQ_Q6Q_BODY, "q6_K quad block");

/* Q4_K, Q5_K and Q6_K over a quad of those layouts (st_tile4_fn; AVX-512 + VNNI, kquants_avx512*.c):
 * their own arithmetic (a row's sums in one 128-bit lane), so not the row dots' bits;
 * deterministic and the same per element whatever nr and nc. */
#define KQ_DECL_TILE4_(name, isa)                                                                    \
    void st_tile4_##name##_##isa(int n, float *s, size_t bs, const void *x, const void *y, size_t by, int nr, \
                                 int nc);
KQ_DECL_TILE4_(q4_K_q8_K, avx512)
KQ_DECL_TILE4_(q4_K_q8_K, avx512gfni)
KQ_DECL_TILE4_(q5_K_q8_K, avx512)
KQ_DECL_TILE4_(q5_K_q8_K, avx512gfni)
KQ_DECL_TILE4_(q6_K_q8_K, avx512)
KQ_DECL_TILE4_(q6_K_q8_K, avx512gfni)
/* Q4_K over its quad layout on AVX2 (kquants_avx2.c) and AVX2 + AVX-VNNI (kquants_avx2vnni.c). */
KQ_DECL_TILE4_(q4_K_q8_K, avx2)
KQ_DECL_TILE4_(q4_K_q8_K, avx2vnni)

/* ---- for the SIMD files' row kernels ---- */
#define KQ_AI static inline __attribute__((always_inline))

/* A qword of four int16 words w: the SIMD files build their word constants from it. */
static inline long long kq_words4(uint64_t w) { return (long long)(w * 0x0001000100010001ull); }
/* Four words of a vpshufb control picking byte j into the low half of each word (the high
 * byte zeroed by 0x80): byte j of a scale vector as int16 words. */
static inline long long kq_pick4(int j) { return kq_words4(0x8000u | (unsigned)j); }

/* Block i of activation row c of a tile (rows by bytes apart). */
static inline const st_block_q8_K *kq_act(const void *y, size_t by, int c, int i) {
    return (const st_block_q8_K *)((const uint8_t *)y + (size_t)c * by) + i;
}

#if defined(__AVX2__) /* the AVX2 and AVX-512 files */
#include <immintrin.h>
#include <string.h>

/* A quad kernel (AVX-512: quad_avx512.h; AVX2: kquants_avx2.h) reads one stream front to
 * back; each block's lines are also requested 4 KiB ahead, which streamed faster from DRAM
 * than the hardware prefetcher alone or 2 KiB ahead (docs/PERFORMANCE.md, quantized
 * matvec). Past the end of a matrix the hints touch
 * nothing they may not (a prefetch never faults). */
#define ST_QUAD_PF_AHEAD 4096
static inline __attribute__((always_inline)) void st_quad_prefetch(const uint8_t *block, const int bytes) {
    for (int l = 0; l < bytes / 64; l++) _mm_prefetch((const char *)block + ST_QUAD_PF_AHEAD + 64 * l, _MM_HINT_T0);
}

static inline float kq_hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The header every Q4_K and Q5_K block starts with (d, dmin, the packed scales), unpacked
 * for the row kernels: d and dmin as floats in lanes 0 and 1 of *dm, the 8 sub-block
 * scales as the bytes of the return value, and the 8 mins as dwords [m_j, m_j] of int16
 * pairs in *mins, for a madd against the Q8_K bsums. */
KQ_AI uint64_t kq_q45k_head(const uint16_t *d_dmin, const uint8_t *scales, __m128 *dm, __m256i *mins) {
    uint32_t dbits;
    memcpy(&dbits, d_dmin, sizeof dbits);
    *dm = _mm_cvtph_ps(_mm_cvtsi32_si128((int)dbits));
    uint64_t sc, mn;
    st_kq_unpack_scales_mins(scales, &sc, &mn);
    const __m256i pick = _mm256_setr_epi8(0, -128, 0, -128, 1, -128, 1, -128, 2, -128, 2, -128, 3, -128, 3,
                                          -128, 4, -128, 4, -128, 5, -128, 5, -128, 6, -128, 6, -128, 7,
                                          -128, 7, -128);
    *mins = _mm256_shuffle_epi8(_mm256_set1_epi64x((long long)mn), pick);
    return sc;
}
#endif

/* Defines st_vec_dot_<name>_<isa> and st_tile_<name>_<isa> from an always-inline row kernel
 * row(NC, n_blocks, x, y, by, s, bs) that dots one weight row with NC activation rows (NC a
 * compile-time constant): vec_dot is its 1 x 1 instance and a tile is nr passes of it, so
 * every tile element is vec_dot's arithmetic, bit for bit. For the SIMD files. */
/* The row kernels of Q4_K and Q5_K: the including file's q45k_row(Q5, NC, ...). */
#define KQ_Q4K_ROW_(...) q45k_row(0, __VA_ARGS__)
#define KQ_Q5K_ROW_(...) q45k_row(1, __VA_ARGS__)

#define ST_KQ_DEF_DOT_TILE_(name, isa, blk, row)                                                  \
    void st_vec_dot_##name##_##isa(int n, float *s, const void *x, const void *y) {               \
        ST_ASSERT(n % QK_K == 0);                                                                 \
        row(1, n / QK_K, (const blk *)x, y, 0, s, 1);                                             \
    }                                                                                             \
    void st_tile_##name##_##isa(int n, float *s, size_t bs, const void *x, size_t bx,             \
                                const void *y, size_t by, int nr, int nc) {                       \
        ST_ASSERT(n % QK_K == 0 && nr >= 1 && nr <= 4 && nc >= 1 && nc <= 4);                     \
        for (int r = 0; r < nr; r++) {                                                            \
            const blk *xr = (const blk *)((const uint8_t *)x + (size_t)r * bx);                   \
            switch (nc) {                                                                         \
            case 1: row(1, n / QK_K, xr, y, by, s + r, bs); break;                                \
            case 2: row(2, n / QK_K, xr, y, by, s + r, bs); break;                                \
            case 3: row(3, n / QK_K, xr, y, by, s + r, bs); break;                                \
            default: row(4, n / QK_K, xr, y, by, s + r, bs); break;                               \
            }                                                                                     \
        }                                                                                         \
    }

#endif /* STRATA_QUANT_KQUANTS_H */
