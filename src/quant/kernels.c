/* Kernel dispatch tables (one static const table per ISA), type traits and the
 * reference conversion entry points.
 *
 * The K-quant kernels come from src/quant/kquants*.c (helper-owned). ST_KQ_SIMD says
 * whether their AVX2 / AVX-512 dots and Q8_K quantizers are linked in; without them
 * the SIMD tables use the scalar K-quant kernels. */
#include "quant_int.h"

#include "quant/kquants.h"

#define ST_KQ_SIMD 1

/* with a quad-layout tile (the legacy 32-blocks on AVX2 and AVX-512, faster than their rows;
 * Q8_0 interleaved that way was slower, so on AVX2 it keeps rows: docs/PERFORMANCE.md;
 * Q4_K, Q5_K, Q6_K and Q8_0 in their own quad blocks on AVX-512, Q4_K on AVX2) */
#define ROWX_(vdt, from, to, dot, tl, t4, ex, rw) {.vec_dot_type = (vdt), .from_float = (from), .to_float = (to), .vec_dot = (dot), .tile = (tl), .tile4 = (t4), .act_expand = (ex), .rows = (rw)}
#define ROW4_(vdt, from, to, dot, tl, t4) ROWX_(vdt, from, to, dot, tl, t4, NULL, NULL)
#define ROW_(vdt, from, to, dot, tl) ROW4_(vdt, from, to, dot, tl, NULL)
#define NOT_ ST_TYPE_COUNT_

/* Rows every table shares apart from the ISA-specific entries. */
#define KQ_ROWS_T_(q8k_from, dot2, dot3, dot4, dot5, dot6, tl2, tl3, tl4, tl5, tl6, q4q, q5q, q6q)      \
    [ST_TYPE_Q2_K] = ROW_(ST_TYPE_Q8_K, st_quantize_row_q2_K_ref, st_dequantize_row_q2_K, dot2, tl2), \
    [ST_TYPE_Q3_K] = ROW_(ST_TYPE_Q8_K, st_quantize_row_q3_K_ref, st_dequantize_row_q3_K, dot3, tl3), \
    [ST_TYPE_Q4_K] = ROW4_(ST_TYPE_Q8_K, st_quantize_row_q4_K_ref, st_dequantize_row_q4_K, dot4, tl4, q4q), \
    [ST_TYPE_Q5_K] = ROW4_(ST_TYPE_Q8_K, st_quantize_row_q5_K_ref, st_dequantize_row_q5_K, dot5, tl5, q5q), \
    [ST_TYPE_Q6_K] = ROW4_(ST_TYPE_Q8_K, st_quantize_row_q6_K_ref, st_dequantize_row_q6_K, dot6, tl6, q6q), \
    [ST_TYPE_Q8_K] = ROW_(NOT_, q8k_from, st_dequantize_row_q8_K, NULL, NULL)
/* (Q2_K and Q3_K dots and tiles: kquants_q23_avx2.c, kquants_q23_avx512.c) */
#define KQ_ROWS_(q8k_from, dot2, dot3, dot4, dot5, dot6) \
    KQ_ROWS_T_(q8k_from, dot2, dot3, dot4, dot5, dot6, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)

static const st_kernels kernels_scalar = {
    .isa = ST_ISA_SCALAR,
    .ops = ST_VEC_OPS_(scalar),
    .vnni = false,
    .type = {
        [ST_TYPE_F32] = ROW_(ST_TYPE_F32, st_quantize_row_f32_ref, st_dequantize_row_f32, st_vec_dot_f32_f32_scalar, NULL),
        [ST_TYPE_F16] = ROW_(ST_TYPE_F16, st_quantize_row_f16_ref, st_dequantize_row_f16, st_vec_dot_f16_f16_scalar, NULL),
        [ST_TYPE_BF16] = ROW_(ST_TYPE_F32, st_quantize_row_bf16_ref, st_dequantize_row_bf16, st_vec_dot_bf16_f32_scalar, NULL),
        [ST_TYPE_Q4_0] = ROW_(ST_TYPE_Q8_0, st_quantize_row_q4_0_ref, st_dequantize_row_q4_0, st_vec_dot_q4_0_q8_0_scalar, NULL),
        [ST_TYPE_Q4_1] = ROW_(ST_TYPE_Q8_1, st_quantize_row_q4_1_ref, st_dequantize_row_q4_1, st_vec_dot_q4_1_q8_1_scalar, NULL),
        [ST_TYPE_Q5_0] = ROW_(ST_TYPE_Q8_0, st_quantize_row_q5_0_ref, st_dequantize_row_q5_0, st_vec_dot_q5_0_q8_0_scalar, NULL),
        [ST_TYPE_Q5_1] = ROW_(ST_TYPE_Q8_1, st_quantize_row_q5_1_ref, st_dequantize_row_q5_1, st_vec_dot_q5_1_q8_1_scalar, NULL),
        [ST_TYPE_Q8_0] = ROW_(ST_TYPE_Q8_0, st_quantize_row_q8_0_ref, st_dequantize_row_q8_0, st_vec_dot_q8_0_q8_0_scalar, NULL),
        [ST_TYPE_Q8_1] = ROW_(NOT_, st_quantize_row_q8_1_ref, st_dequantize_row_q8_1, NULL, NULL),
        KQ_ROWS_(st_quantize_row_q8_K_ref, st_vec_dot_q2_K_q8_K_scalar, st_vec_dot_q3_K_q8_K_scalar, st_vec_dot_q4_K_q8_K_scalar,
                 st_vec_dot_q5_K_q8_K_scalar, st_vec_dot_q6_K_q8_K_scalar),
    },
};

#if ST_KQ_SIMD
/* kq: the K-quant dots' suffix, avx2 or avx2vnni (kquants_avx2vnni.c) */
#define KQ_AVX2_(kq)                                                                               \
    KQ_ROWS_T_(st_quantize_row_q8_K_avx2, st_vec_dot_q2_K_q8_K_avx2, st_vec_dot_q3_K_q8_K_avx2, st_vec_dot_q4_K_q8_K_##kq, st_vec_dot_q5_K_q8_K_##kq,     \
               st_vec_dot_q6_K_q8_K_##kq, st_tile_q2_K_q8_K_avx2, st_tile_q3_K_q8_K_avx2, st_tile_q4_K_q8_K_##kq, st_tile_q5_K_q8_K_##kq,           \
               st_tile_q6_K_q8_K_##kq, st_tile4_q4_K_q8_K_##kq, NULL, NULL)
/* nib: the K-quant dots' suffix, avx512 or avx512gfni (kquants_avx512gfni.c) */
#define KQ_AVX512_(nib)                                                                                \
    KQ_ROWS_T_(st_quantize_row_q8_K_avx512, st_vec_dot_q2_K_q8_K_avx512, st_vec_dot_q3_K_q8_K_avx512, st_vec_dot_q4_K_q8_K_##nib, st_vec_dot_q5_K_q8_K_##nib,    \
               st_vec_dot_q6_K_q8_K_##nib, st_tile_q2_K_q8_K_avx512, st_tile_q3_K_q8_K_avx512, st_tile_q4_K_q8_K_##nib, st_tile_q5_K_q8_K_##nib,           \
               st_tile_q6_K_q8_K_##nib, st_tile4_q4_K_q8_K_##nib, st_tile4_q5_K_q8_K_##nib, \
               st_tile4_q6_K_q8_K_##nib)
#else
#define KQ_AVX2_(kq) KQ_ROWS_(st_quantize_row_q8_K_ref, st_vec_dot_q2_K_q8_K_scalar, st_vec_dot_q3_K_q8_K_scalar, st_vec_dot_q4_K_q8_K_scalar, st_vec_dot_q5_K_q8_K_scalar, st_vec_dot_q6_K_q8_K_scalar)
#define KQ_AVX512_(nib) KQ_AVX2_(avx2)
#endif

/* The AVX2 table; kq as in KQ_AVX2_. */
#define KERNELS_AVX2_(kq, use_vnni) { \
    .isa = ST_ISA_AVX2, \
    .ops = ST_VEC_OPS_(avx2), \
    .vnni = (use_vnni), \
    .type = { \
        [ST_TYPE_F32] = ROW_(ST_TYPE_F32, st_quantize_row_f32_ref, st_dequantize_row_f32, st_vec_dot_f32_f32_avx2, st_tile_f32_f32_avx2), \
        [ST_TYPE_F16] = ROW_(ST_TYPE_F16, st_quantize_row_f16_avx2, st_dequantize_row_f16_avx2, st_vec_dot_f16_f16_avx2, st_tile_f16_f16_avx2), \
        [ST_TYPE_BF16] = ROW_(ST_TYPE_F32, st_quantize_row_bf16_ref, st_dequantize_row_bf16, st_vec_dot_bf16_f32_avx2, st_tile_bf16_f32_avx2), \
        [ST_TYPE_Q4_0] = ROW4_(ST_TYPE_Q8_0, st_quantize_row_q4_0_ref, st_dequantize_row_q4_0, st_vec_dot_q4_0_q8_0_avx2, st_tile_q4_0_q8_0_avx2, st_tile4_q4_0_q8_0_avx2), \
        [ST_TYPE_Q4_1] = ROW4_(ST_TYPE_Q8_1, st_quantize_row_q4_1_ref, st_dequantize_row_q4_1, st_vec_dot_q4_1_q8_1_avx2, st_tile_q4_1_q8_1_avx2, st_tile4_q4_1_q8_1_avx2), \
        [ST_TYPE_Q5_0] = ROW4_(ST_TYPE_Q8_0, st_quantize_row_q5_0_ref, st_dequantize_row_q5_0, st_vec_dot_q5_0_q8_0_avx2, st_tile_q5_0_q8_0_avx2, st_tile4_q5_0_q8_0_avx2), \
        [ST_TYPE_Q5_1] = ROW4_(ST_TYPE_Q8_1, st_quantize_row_q5_1_ref, st_dequantize_row_q5_1, st_vec_dot_q5_1_q8_1_avx2, st_tile_q5_1_q8_1_avx2, st_tile4_q5_1_q8_1_avx2), \
        [ST_TYPE_Q8_0] = ROW_(ST_TYPE_Q8_0, st_quantize_row_q8_0_avx2, st_dequantize_row_q8_0, st_vec_dot_q8_0_q8_0_avx2, st_tile_q8_0_q8_0_avx2), \
        [ST_TYPE_Q8_1] = ROW_(NOT_, st_quantize_row_q8_1_avx2, st_dequantize_row_q8_1, NULL, NULL), \
        KQ_AVX2_(kq), \
    }, \
}

static const st_kernels kernels_avx2 = KERNELS_AVX2_(avx2, false);
/* Alder Lake and newer, Zen 5 with AVX2 forced: the K-quant dots with AVX-VNNI */
static const st_kernels kernels_avx2vnni = KERNELS_AVX2_(avx2vnni, true);

/* The AVX-512 table; nib as in KQ_AVX512_. */
#define KERNELS_AVX512_(nib, use_gfni, use_amx, q8x) { \
    .isa = ST_ISA_AVX512, \
    .ops = ST_VEC_OPS_(avx512), \
    .vnni = true, \
    .gfni = (use_gfni), \
    .amx = (use_amx), \
    .type = { \
        [ST_TYPE_F32] = ROW_(ST_TYPE_F32, st_quantize_row_f32_ref, st_dequantize_row_f32, st_vec_dot_f32_f32_avx512, st_tile_f32_f32_avx512), \
        [ST_TYPE_F16] = ROW_(ST_TYPE_F16, st_quantize_row_f16_avx2, st_dequantize_row_f16_avx2, st_vec_dot_f16_f16_avx512, st_tile_f16_f16_avx512), \
        [ST_TYPE_BF16] = ROW_(ST_TYPE_F32, st_quantize_row_bf16_ref, st_dequantize_row_bf16, st_vec_dot_bf16_f32_avx512, st_tile_bf16_f32_avx512), \
        [ST_TYPE_Q4_0] = ROWX_(ST_TYPE_Q8_0, st_quantize_row_q4_0_ref, st_dequantize_row_q4_0, st_vec_dot_q4_0_q8_0_avx512, st_tile_q4_0_q8_0_avx512, st_tile4_q4_0_q8_0_avx512, st_act_expand_q4_0_q8_0_avx512, st_rows_q4_0_q8_0_avx512), \
        [ST_TYPE_Q4_1] = ROWX_(ST_TYPE_Q8_1, st_quantize_row_q4_1_ref, st_dequantize_row_q4_1, st_vec_dot_q4_1_q8_1_avx512, st_tile_q4_1_q8_1_avx512, st_tile4_q4_1_q8_1_avx512, st_act_expand_q4_1_q8_1_avx512, st_rows_q4_1_q8_1_avx512), \
        [ST_TYPE_Q5_0] = ROWX_(ST_TYPE_Q8_0, st_quantize_row_q5_0_ref, st_dequantize_row_q5_0, st_vec_dot_q5_0_q8_0_avx512, st_tile_q5_0_q8_0_avx512, st_tile4_q5_0_q8_0_avx512, st_act_expand_q5_0_q8_0_avx512, st_rows_q5_0_q8_0_avx512), \
        [ST_TYPE_Q5_1] = ROWX_(ST_TYPE_Q8_1, st_quantize_row_q5_1_ref, st_dequantize_row_q5_1, st_vec_dot_q5_1_q8_1_avx512, st_tile_q5_1_q8_1_avx512, st_tile4_q5_1_q8_1_avx512, st_act_expand_q5_1_q8_1_avx512, st_rows_q5_1_q8_1_avx512), \
        [ST_TYPE_Q8_0] = {.vec_dot_type = ST_TYPE_Q8_0, .from_float = st_quantize_row_q8_0_avx512, .to_float = st_dequantize_row_q8_0, .vec_dot = st_vec_dot_q8_0_q8_0_avx512, .tile = st_tile_q8_0_q8_0_avx512, .tilex = (q8x), .act_expand = st_act_expand_q8_0_q8_0_avx512, .rows = st_rows_q8_0_q8_0_avx512}, \
        [ST_TYPE_Q8_1] = ROW_(NOT_, st_quantize_row_q8_1_avx512, st_dequantize_row_q8_1, NULL, NULL), \
        KQ_AVX512_(nib), \
    }, \
}

static const st_kernels kernels_avx512 = KERNELS_AVX512_(avx512, false, false, st_tilex_q8_0_q8_0_avx512);
/* Ice Lake, Zen 4 and newer: the same table with the GFNI K-quant dots (same bits) */
static const st_kernels kernels_avx512gfni = KERNELS_AVX512_(avx512gfni, true, false, st_tilex_q8_0_q8_0_avx512);
/* Sapphire Rapids and newer (GFNI too): Q8_0 batches on AMX-INT8 (same bits) */
static const st_kernels kernels_avx512amx = KERNELS_AVX512_(avx512gfni, true, true, st_tilex_q8_0_q8_0_amx);

/* st_cpu_best_isa's AVX512 level includes VNNI (core.h), so the table for a level the CPU
 * runs is always that level's own. */
const st_kernels *st_kernels_get_ex(st_isa isa, bool amx) {
    const st_isa best = st_cpu_best_isa();
    if (isa == ST_ISA_AVX512 && best == ST_ISA_AVX512) {
        if (!st_cpu_has_gfni()) return &kernels_avx512;
        return amx && st_cpu_amx_enable() ? &kernels_avx512amx : &kernels_avx512gfni;
    }
    if (isa >= ST_ISA_AVX2 && best >= ST_ISA_AVX2) return st_cpu_has_avxvnni() ? &kernels_avx2vnni : &kernels_avx2;
    return &kernels_scalar;
}

const st_kernels *st_kernels_get(st_isa isa) { return st_kernels_get_ex(isa, true); }

/* ---- traits ---- */
bool st_type_is_quantized(st_type t) {
    return st_type_block_size(t) > 1;
}

bool st_type_has_kernels(st_type t) {
    return (unsigned)t < ST_TYPE_COUNT_ && kernels_scalar.type[t].to_float != NULL;
}

st_type st_type_vec_dot_type(st_type t) {
    if ((unsigned)t >= ST_TYPE_COUNT_ || !kernels_scalar.type[t].vec_dot) return ST_TYPE_COUNT_;
    return kernels_scalar.type[t].vec_dot_type;
}

static int check_row(st_type t, const void *a, const void *b, int64_t n) {
    if (!st_type_has_kernels(t)) return ST_E_UNSUPPORTED;
    if (!a || !b || n < 0 || n % st_type_block_size(t)) return ST_E_INVAL;
    return 0;
}

int st_quantize_row(st_type t, const float *x, void *y, int64_t n) {
    int rc = check_row(t, x, y, n);
    if (rc) return rc;
    kernels_scalar.type[t].from_float(x, y, n);
    return 0;
}

int st_dequantize_row(st_type t, const void *x, float *y, int64_t n) {
    int rc = check_row(t, x, y, n);
    if (rc) return rc;
    kernels_scalar.type[t].to_float(x, y, n);
    return 0;
}

size_t st_act_bytes(st_type wtype, int64_t cols) {
    const st_type at = st_type_vec_dot_type(wtype);
    if (at == ST_TYPE_COUNT_ || cols <= 0 || cols % st_type_block_size(wtype)) return 0;
    return st_row_bytes(at, cols);
}

size_t st_act_x_bytes(int64_t n) { /* 256 bytes (a struct av of dot_avx512.c) per pair of blocks */
    return n > 0 ? (size_t)((n / 32 + 1) / 2) * 256 : 0;
}

int st_quantize_act(const st_kernels *k, st_type wtype, const float *x, void *xq, int64_t cols) {
    if (!k) return ST_E_INVAL;
    if (st_type_vec_dot_type(wtype) == ST_TYPE_COUNT_) return ST_E_UNSUPPORTED;
    if (!x || !xq || !st_act_bytes(wtype, cols)) return ST_E_INVAL;
    k->type[k->type[wtype].vec_dot_type].from_float(x, xq, cols);
    return 0;
}
