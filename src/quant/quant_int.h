/* Private to src/quant: the per-ISA kernels the dispatch tables point at.
 *
 * Naming: st_<op>_<type>[_<acttype>]_<isa>. Every SIMD kernel has a scalar twin with
 * the same contract; tests/quant compare them at awkward lengths. The _avx2 / _avx512
 * functions live in *_avx2.c / *_avx512.c (compiled with that ISA's flags) and may only
 * be called when the CPU has the ISA: st_kernels_get guarantees that. */
#ifndef STRATA_QUANT_INT_H
#define STRATA_QUANT_INT_H

#include "strata/quant.h"

/* ---- scalar reference quantizers (ggml quantize_row_*_ref semantics) ---- */
void st_quantize_row_f32_ref(const float *x, void *y, int64_t k);
void st_quantize_row_f16_ref(const float *x, void *y, int64_t k);
void st_quantize_row_bf16_ref(const float *x, void *y, int64_t k);
void st_quantize_row_q4_0_ref(const float *x, void *y, int64_t k);
void st_quantize_row_q4_1_ref(const float *x, void *y, int64_t k);
void st_quantize_row_q5_0_ref(const float *x, void *y, int64_t k);
void st_quantize_row_q5_1_ref(const float *x, void *y, int64_t k);
void st_quantize_row_q8_0_ref(const float *x, void *y, int64_t k);
void st_quantize_row_q8_1_ref(const float *x, void *y, int64_t k);

void st_dequantize_row_f32(const void *x, float *y, int64_t k);
void st_dequantize_row_f16(const void *x, float *y, int64_t k);
void st_dequantize_row_bf16(const void *x, float *y, int64_t k);
void st_dequantize_row_q4_0(const void *x, float *y, int64_t k);
void st_dequantize_row_q4_1(const void *x, float *y, int64_t k);
void st_dequantize_row_q5_0(const void *x, float *y, int64_t k);
void st_dequantize_row_q5_1(const void *x, float *y, int64_t k);
void st_dequantize_row_q8_0(const void *x, float *y, int64_t k);
void st_dequantize_row_q8_1(const void *x, float *y, int64_t k);

/* ---- dots: weight . activation ---- */
#define ST_DECL_DOTS_(isa)                                                               \
    void st_vec_dot_f32_f32_##isa(int n, float *s, const void *x, const void *y);         \
    void st_vec_dot_f16_f16_##isa(int n, float *s, const void *x, const void *y);         \
    void st_vec_dot_bf16_f32_##isa(int n, float *s, const void *x, const void *y);        \
    void st_vec_dot_q4_0_q8_0_##isa(int n, float *s, const void *x, const void *y);       \
    void st_vec_dot_q4_1_q8_1_##isa(int n, float *s, const void *x, const void *y);       \
    void st_vec_dot_q5_0_q8_0_##isa(int n, float *s, const void *x, const void *y);       \
    void st_vec_dot_q5_1_q8_1_##isa(int n, float *s, const void *x, const void *y);       \
    void st_vec_dot_q8_0_q8_0_##isa(int n, float *s, const void *x, const void *y);
ST_DECL_DOTS_(scalar)
ST_DECL_DOTS_(avx2)
ST_DECL_DOTS_(avx512)

/* ---- SIMD activation quantizers (may round exact ties to even where the reference
 * rounds away from zero, as ggml's SIMD quantizers do) ---- */
void st_quantize_row_q8_0_avx2(const float *x, void *y, int64_t k);
void st_quantize_row_q8_1_avx2(const float *x, void *y, int64_t k);
void st_quantize_row_q8_0_avx512(const float *x, void *y, int64_t k);
void st_quantize_row_q8_1_avx512(const float *x, void *y, int64_t k);
void st_dequantize_row_f16_avx2(const void *x, float *y, int64_t k);
/* f32 -> f16 with F16C, round to nearest even: bit-identical to the reference for every
 * non-NaN input (a NaN stays a NaN, its payload may differ). */
void st_quantize_row_f16_avx2(const float *x, void *y, int64_t k);

/* ---- f32 element-wise ops (st_vec_ops), vec_ops*.c ---- */
#define ST_DECL_VEC_OPS_(isa)                                                            \
    void st_silu_mul_##isa(int64_t n, float *g, const float *u);                         \
    void st_rms_norm_##isa(int64_t n, float *y, const float *x, const float *w, float eps);
ST_DECL_VEC_OPS_(scalar)
ST_DECL_VEC_OPS_(avx2)
ST_DECL_VEC_OPS_(avx512)
#define ST_VEC_OPS_(isa) {.silu_mul = st_silu_mul_##isa, .rms_norm = st_rms_norm_##isa}

/* ---- helpers of the SIMD dot templates for the 32-element block types ---- */
enum st_wkind { W_Q4_0, W_Q4_1, W_Q5_0, W_Q5_1, W_Q8_0 };

static inline size_t wk_bytes(int kind) {
    switch (kind) {
    case W_Q4_0: return sizeof(st_block_q4_0);
    case W_Q4_1: return sizeof(st_block_q4_1);
    case W_Q5_0: return sizeof(st_block_q5_0);
    case W_Q5_1: return sizeof(st_block_q5_1);
    default: return sizeof(st_block_q8_0);
    }
}
/* the _1 kinds: unsigned quants with a min, paired with q8_1 activations */
static inline int wk_has_min(int kind) { return kind == W_Q4_1 || kind == W_Q5_1; }
static inline uint16_t ld16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline uint32_t ld32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

/* quads.c: whether a matrix can take the quad layout (type and shape); the rows of one unit
 * of it (a quad of 4 rows, or a group of ST_QUAD_GROUP_ROWS for Q8_0: st_quads_unit) into
 * rows (that many rows, row layout). */
bool st_quads_shape(st_type t, int64_t rows, int64_t cols);
static inline int st_quads_unit(st_type t) { return t == ST_TYPE_Q8_0 ? ST_QUAD_GROUP_ROWS : 4; }
void st_quads_unpack(st_type t, const void *unit, int64_t cols, void *rows);

/* The Q8_0 quad layout: rows in groups of 16, a group's blocks in spans of 2 (64 columns),
 * each span 1088 bytes (2 x 16 x 34, 17 cache lines):
 *   bytes  0..63     d of block j (0, 1) of row r (f16) at 2 * (16 j + r)
 *   bytes 64..1087   block j's quants at 64 + 512 j: quant k = 4 i + e (i < 8, e < 4) of
 *                    row r at + 64 i + 4 r + e, stored q XOR 0x80 (q + 128, unsigned)
 * so 64 bytes hold 4 quants of each of the 16 rows: one int32 lane per row for vpdpbusd (the
 * unsigned side), and the 8 x 64 bytes of a block are AMX's B tile in its VNNI order as they
 * lie. Every path sums each (row, block) into one exact int32 (q8x_avx512.c, q8x_amx.c). */
#define ST_Q8X_SPAN 2
#define ST_Q8X_SPAN_BYTES (ST_QUAD_GROUP_ROWS * ST_Q8X_SPAN * sizeof(st_block_q8_0))
#define ST_Q8X_QS 64

/* ---- quad tiles (st_tile4_fn) ---- */
#define ST_DECL_TILE4_(isa)                                                                          \
    void st_tile4_q4_0_q8_0_##isa(int n, float *s, size_t bs, const void *x, const void *y, size_t by, \
                                  int nr, int nc);                                                   \
    void st_tile4_q4_1_q8_1_##isa(int n, float *s, size_t bs, const void *x, const void *y, size_t by, \
                                  int nr, int nc);                                                   \
    void st_tile4_q5_0_q8_0_##isa(int n, float *s, size_t bs, const void *x, const void *y, size_t by, \
                                  int nr, int nc);                                                   \
    void st_tile4_q5_1_q8_1_##isa(int n, float *s, size_t bs, const void *x, const void *y, size_t by, \
                                  int nr, int nc);
ST_DECL_TILE4_(avx2)
ST_DECL_TILE4_(avx512)
/* Q8_0 group tiles (st_tilex_fn): AVX-512 VNNI (q8x_avx512.c), AMX-INT8 (q8x_amx.c: batches
 * of 2 tokens or more, fewer through the VNNI one), and the scalar twin (quads.c) that
 * defines their bits on any CPU */
void st_tilex_q8_0_q8_0_avx512(int n, float *s, size_t bs, const void *x, int ng, const void *y, size_t by, int nc);
void st_tilex_q8_0_q8_0_amx(int n, float *s, size_t bs, const void *x, int ng, const void *y, size_t by, int nc);
void st_tilex_q8_0_q8_0_scalar(int n, float *s, size_t bs, const void *x, int ng, const void *y, size_t by, int nc);

/* ---- AVX2 tiles (bit-identical per element to the matching _avx2 dot) ---- */
void st_tile_q4_0_q8_0_avx2(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                            size_t by, int nr, int nc);
void st_tile_q4_1_q8_1_avx2(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                            size_t by, int nr, int nc);
void st_tile_q5_0_q8_0_avx2(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                            size_t by, int nr, int nc);
void st_tile_q5_1_q8_1_avx2(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                            size_t by, int nr, int nc);
void st_tile_q8_0_q8_0_avx2(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                            size_t by, int nr, int nc);
void st_tile_f32_f32_avx2(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                          size_t by, int nr, int nc);
void st_tile_bf16_f32_avx2(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                           size_t by, int nr, int nc);
void st_tile_f16_f16_avx2(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                          size_t by, int nr, int nc);

/* ---- AVX-512 VNNI tiles (bit-identical per element to the matching _avx512 dot) ---- */
void st_tile_q4_0_q8_0_avx512(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                              size_t by, int nr, int nc);
void st_tile_q4_1_q8_1_avx512(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                              size_t by, int nr, int nc);
void st_tile_q5_0_q8_0_avx512(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                              size_t by, int nr, int nc);
void st_tile_q5_1_q8_1_avx512(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                              size_t by, int nr, int nc);
void st_tile_q8_0_q8_0_avx512(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                              size_t by, int nr, int nc);
void st_tile_f32_f32_avx512(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                            size_t by, int nr, int nc);
void st_tile_bf16_f32_avx512(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                             size_t by, int nr, int nc);
void st_tile_f16_f16_avx512(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                            size_t by, int nr, int nc);

/* ---- AVX-512 VNNI matvec rows over an expanded activation (st_rows_fn) ---- */
#define ST_DECL_ROWS_(name)                                                                  \
    void st_act_expand_##name##_avx512(int n, const void *y, void *xe);                      \
    void st_rows_##name##_avx512(int n, int64_t n_rows, float *s, const void *x, size_t bx,  \
                                 const void *xe);
ST_DECL_ROWS_(q4_0_q8_0)
ST_DECL_ROWS_(q4_1_q8_1)
ST_DECL_ROWS_(q5_0_q8_0)
ST_DECL_ROWS_(q5_1_q8_1)
ST_DECL_ROWS_(q8_0_q8_0)

#endif
