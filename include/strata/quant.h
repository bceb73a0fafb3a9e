/*
 * strata quant: tensor element types bit-compatible with ggml's block layouts, their
 * reference quantize/dequantize, dot-product kernels per ISA, and threaded
 * matrix-vector / matrix-matrix products.
 *
 * Types with kernels: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K
 * (weights), and Q8_0, Q8_1, Q8_K, F16, F32 (activations). st_type_has_kernels() says
 * which ones this build supports.
 *
 * How a product runs. A weight row of type W is multiplied with an activation row of
 * W's "vec_dot type" (st_type_vec_dot_type(W)):
 *     weight type        activation (vec_dot) type
 *     F32, BF16          F32   (full precision)
 *     F16                F16   (as ggml: converted once per product; an f32 activation
 *                              row doubled the bytes next to the weight stream and
 *                              slowed f16 matvec, docs/PERFORMANCE.md)
 *     Q8_0, Q4_0, Q5_0   Q8_0  (as ggml)
 *     Q4_1, Q5_1         Q8_1  (as ggml: the block sum lets the weight's min fold in)
 *     Q2_K-Q6_K          Q8_K  (as ggml)
 * The caller quantizes the activation row once (st_quantize_act) and reuses it for
 * every weight matrix of the same type and width (Wq, Wk, Wv; W1, W3).
 *
 * Determinism. Every output element y[r] (or Y[t][r]) is computed by the same kernel
 * with the same operation order whatever the thread count, the row split, the tile
 * position, and whether it came from st_matvec or st_matmul: results are bit-identical
 * for any number of threads and for a token alone or in a batch (same ISA).
 * Different ISAs give results that differ by float rounding only.
 *
 * Threads: the kernel tables are immutable; every function here may be called from any
 * thread. st_matvec/st_matmul use the given pool and follow its rules (one caller at a
 * time per pool).
 */
#ifndef STRATA_QUANT_H
#define STRATA_QUANT_H

#include "strata/core.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- block layouts (ggml-common.h, byte for byte; little-endian) ----------------- */
#define ST_QK4_0 32
#define ST_QK4_1 32
#define ST_QK5_0 32
#define ST_QK5_1 32
#define ST_QK8_0 32
#define ST_QK8_1 32

/* 4.5 bits per weight: x = d * (q - 8), q in 0..15.
 * qs[j] low nibble holds element j, high nibble element j + 16. */
typedef struct __attribute__((packed)) st_block_q4_0 {
    uint16_t d;               /* fp16 scale */
    uint8_t qs[ST_QK4_0 / 2]; /* [16] nibbles */
} st_block_q4_0;

/* 5 bits per weight: x = d * q + m, q in 0..15. Nibble order as q4_0. */
typedef struct __attribute__((packed)) st_block_q4_1 {
    uint16_t d;               /* fp16 scale */
    uint16_t m;               /* fp16 min */
    uint8_t qs[ST_QK4_1 / 2]; /* [16] nibbles */
} st_block_q4_1;

/* 5.5 bits per weight: x = d * (q - 16), q in 0..31; bit 4 of element j is bit j of
 * qh (read as a little-endian uint32), the low 4 bits are nibbles as in q4_0. */
typedef struct __attribute__((packed)) st_block_q5_0 {
    uint16_t d;               /* fp16 scale */
    uint8_t qh[4];            /* high bits, element j -> bit j */
    uint8_t qs[ST_QK5_0 / 2]; /* [16] low nibbles */
} st_block_q5_0;

/* 6 bits per weight: x = d * q + m, q in 0..31, bits as q5_0. */
typedef struct __attribute__((packed)) st_block_q5_1 {
    uint16_t d;               /* fp16 scale */
    uint16_t m;               /* fp16 min */
    uint8_t qh[4];            /* high bits */
    uint8_t qs[ST_QK5_1 / 2]; /* [16] low nibbles */
} st_block_q5_1;

/* 8.5 bits per weight: x = d * q, q in -127..127. */
typedef struct __attribute__((packed)) st_block_q8_0 {
    uint16_t d;             /* fp16 scale */
    int8_t qs[ST_QK8_0];    /* [32] */
} st_block_q8_0;

/* 9 bits per weight (activation type): x = d * q; s = d * sum(qs) (fp16). */
typedef struct __attribute__((packed)) st_block_q8_1 {
    uint16_t d;             /* fp16 scale */
    uint16_t s;             /* fp16 d * sum(qs) */
    int8_t qs[ST_QK8_1];    /* [32] */
} st_block_q8_1;

_Static_assert(sizeof(st_block_q4_0) == 18, "q4_0 block size");
_Static_assert(sizeof(st_block_q4_1) == 20, "q4_1 block size");
_Static_assert(sizeof(st_block_q5_0) == 22, "q5_0 block size");
_Static_assert(sizeof(st_block_q5_1) == 24, "q5_1 block size");
_Static_assert(sizeof(st_block_q8_0) == 34, "q8_0 block size");
_Static_assert(sizeof(st_block_q8_1) == 36, "q8_1 block size");
/* The K-quant blocks (q2_K 84, q3_K 110, q4_K 144, q5_K 176, q6_K 210, q8_K 292 bytes per 256) are
 * declared privately in src/quant/kquants.h. */

/* ---- type traits ------------------------------------------------------------------ */
/* True when t is a block-quantized type (q4_0 ... q8_K); false for f32/f16/bf16/unknown. */
bool st_type_is_quantized(st_type t);
/* True when this build has quantize/dequantize and dot kernels for t as a weight type
 * (or, for q8_1 and q8_K, as an activation type). */
bool st_type_has_kernels(st_type t);
/* Activation type a weight row of type t is multiplied with (table above);
 * ST_TYPE_COUNT_ when t has no kernels. */
st_type st_type_vec_dot_type(st_type t);
/* Elements per block and bytes per block: st_type_block_size / st_type_size (core.h). */

/* ---- reference conversions (scalar) ----------------------------------------------- */
/* What matches ggml exactly and what does not:
 *   - block layouts (the structs above, src/quant/kquants.h) are ggml's byte for byte;
 *   - dequantization of every type is ggml's formula, so a llama.cpp file decodes to the
 *     same floats;
 *   - F16 / BF16 conversion, and the Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1 and Q8_K quantizers
 *     (the weights' legacy types and the activation types), follow ggml's
 *     quantize_row_*_ref step by step: same bytes as ggml's reference where its build
 *     does not contract the multiply-adds into FMAs (ours never does);
 *   - the Q2_K, Q3_K, Q4_K, Q5_K and Q6_K quantizers are NOT ggml's: a weighted least-squares search
 *     for the sub-block scales in the spirit of ggml's make_qkx / make_qx (kquants.c), so
 *     their bytes can differ from llama-quantize's (same layout, similar error).
 * Quantizes n floats of x into y (st_row_bytes(t, n) bytes, caller-owned) with the
 * scalar reference quantizer. Returns 0; ST_E_UNSUPPORTED when t has no kernels;
 * ST_E_INVAL when n < 0, n is not a multiple of the block size, or a pointer is NULL. */
int st_quantize_row(st_type t, const float *x, void *y, int64_t n);
/* Dequantizes n elements of x (type t) into y[n]. Same errors as st_quantize_row. */
int st_dequantize_row(st_type t, const void *x, float *y, int64_t n);

/* ---- kernel tables ---------------------------------------------------------------- */
/* s = dot(x, y) over n elements: x a row of the weight type, y a row of its vec_dot
 * type. n is a multiple of the block size (not checked in the hot path). */
typedef void (*st_vec_dot_fn)(int n, float *s, const void *x, const void *y);
/* Row conversion of k elements (k a multiple of the block size). */
typedef void (*st_from_float_fn)(const float *x, void *y, int64_t k);
typedef void (*st_to_float_fn)(const void *x, float *y, int64_t k);
/* Tile of dot products: s[c * bs + r] = dot(x + r * bx, y + c * by) for r < nr and
 * c < nc (nr, nc in 1..ST_TILE_MAX; bx, by in bytes; bs in floats). Each element is
 * bit-identical to what the same table's vec_dot returns for that pair. */
typedef void (*st_tile_fn)(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                           size_t by, int nr, int nc);
#define ST_TILE_MAX 4
/* The same over a quad of a matrix in the quad layout (st_wlayout): x is the quad, rows
 * 0..nr-1 of it. Bit-identical per element to the table's vec_dot of the plain rows. */
typedef void (*st_tile4_fn)(int n, float *s, size_t bs, const void *x, const void *y, size_t by,
                            int nr, int nc);
/* A group tile, for a type whose quad layout holds rows in groups of 16 (Q8_0): x the first
 * of ng consecutive groups, s[c * bs + 16 * g + r] = row r of group g . activation row c
 * (y + c * by) for g < ng, r < 16 and any nc >= 1. Each element's arithmetic is fixed by the
 * layout (one exact int32 per block, scaled and added in block order: src/quant/quads.c), so
 * it is the same bits whatever ng and nc, and on every path (AVX-512 VNNI, AMX, the scalar
 * twin): matvec of one token and any tile of a batch agree. */
typedef void (*st_tilex_fn)(int n, float *s, size_t bs, const void *x, int ng, const void *y, size_t by, int nc);
#define ST_QUAD_GROUP_ROWS 16

/* Matrix-vector rows with the activation side prepared once (a matvec reads one activation
 * row against every weight row, and rebuilding its vectors for each row made a q8_0 matvec
 * slower in cache: docs/PERFORMANCE.md, quantized matvec): act_expand writes y (a row of the vec_dot type, n elements)
 * into xe, st_act_x_bytes(n) bytes at a 64-byte-aligned address that the caller owns;
 * rows computes s[r] = dot(x + r * bx, y) for r < n_rows from xe, each bit-identical to
 * vec_dot. */
typedef void (*st_act_expand_fn)(int n, const void *y, void *xe);
typedef void (*st_rows_fn)(int n, int64_t n_rows, float *s, const void *x, size_t bx, const void *xe);
size_t st_act_x_bytes(int64_t n);

typedef struct st_type_kernels {
    st_type vec_dot_type;    /* activation type; ST_TYPE_COUNT_ when unsupported */
    st_from_float_fn from_float; /* f32 -> this type (SIMD where it exists; used for
                                  * activations; may round ties differently from
                                  * the reference quantizer) */
    st_to_float_fn to_float;     /* this type -> f32: the same bits as st_dequantize_row
                                  * in every table (f16: SIMD on AVX2/AVX-512) */
    st_vec_dot_fn vec_dot;       /* weight row of this type . row of vec_dot_type */
    st_tile_fn tile;             /* NULL: products loop over vec_dot */
    st_tile4_fn tile4;           /* quad layout; NULL: this table does not pack the type
                                  * (products over a quad matrix unpack each quad) */
    st_tilex_fn tilex;           /* quad layout in groups of 16 rows (set instead of tile4);
                                  * NULL: the type's quads are 4 rows (or unpacked) */
    st_act_expand_fn act_expand; /* matvec rows over an expanded activation: both set, */
    st_rows_fn rows;             /* or both NULL (a matvec loops over vec_dot) */
} st_type_kernels;

/* f32 element-wise steps of a forward pass. In decode they run on one thread between the
 * threaded products (one token's rows are too short to split), so a scalar libm expf per
 * element of the FFN showed in small-model decode (docs/PERFORMANCE.md, end to end); the
 * SIMD versions use a polynomial
 * exp with a relative error of about 2e-7 (the reference: libm expf). */
typedef struct st_vec_ops {
    /* g[i] = silu(g[i]) * u[i], silu(x) = x / (1 + exp(-x)) (SwiGLU); n >= 0 */
    void (*silu_mul)(int64_t n, float *g, const float *u);
    /* y[i] = (x[i] * s) * w[i], s = 1 / sqrt(mean(x^2) + eps), the squares taken in f32
     * and summed in f64 as ggml's rms_norm does; y may equal x; n >= 1 */
    void (*rms_norm)(int64_t n, float *y, const float *x, const float *w, float eps);
} st_vec_ops;

typedef struct st_kernels {
    st_isa isa;                 /* the ISA this table really uses */
    bool vnni;                  /* VNNI dots in use: AVX512-VNNI, or AVX-VNNI on the AVX2 table */
    bool gfni;                  /* GFNI K-quant dots in use (the same bits as without) */
    bool amx;                   /* AMX-INT8 tiles in use for Q8_0 batches (the same bits as
                                 * without) */
    st_type_kernels type[ST_TYPE_COUNT_]; /* indexed by st_type; unsupported rows NULL */
    st_vec_ops ops;
} st_kernels;

/* The immutable kernel table for isa (pass st_ctx_isa(ctx), which the CPU always runs: the
 * table's ->isa is then isa). Never NULL. An isa the CPU cannot run (st_cpu_isa_missing)
 * falls back to the best one it can; ->isa says which. On a CPU with GFNI
 * the AVX-512 table's K-quant dots use it (->gfni), with the same results as without; on a
 * CPU with AVX-VNNI the AVX2 table's K-quant dots use vpdpbusd (->vnni), in their own order.
 * Valid for the life of the process; shared by all threads. */
const st_kernels *st_kernels_get(st_isa isa);
/* The same, with amx false keeping Q8_0 batches off AMX even where it runs (for comparisons;
 * the bits are the same). With amx true on a CPU with AMX-INT8 (Sapphire Rapids and newer),
 * this asks the kernel for the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, once per call;
 * the grant is the process's, idempotent) and uses AMX only when it is granted (->amx). */
const st_kernels *st_kernels_get_ex(st_isa isa, bool amx);

/* ---- activations ------------------------------------------------------------------- */
/* Bytes of one quantized activation row of `cols` elements for weights of type wtype;
 * 0 when wtype has no kernels or cols is not a multiple of its block size. */
size_t st_act_bytes(st_type wtype, int64_t cols);
/* Quantizes x[cols] into xq (st_act_bytes(wtype, cols) bytes, caller-owned) for
 * products with weights of type wtype. Returns 0, ST_E_UNSUPPORTED, ST_E_INVAL. */
int st_quantize_act(const st_kernels *k, st_type wtype, const float *x, void *xq, int64_t cols);
/* Same for n_rows rows: X is [n_rows][cols] f32 (row stride ldx floats), Xq receives
 * n_rows rows of st_act_bytes(wtype, cols) bytes each, packed. Rows are split over
 * the pool's threads (tp may be NULL: calling thread only). Same errors. */
int st_quantize_act_rows(st_threadpool *tp, const st_kernels *k, st_type wtype, const float *X,
                         int64_t ldx, int64_t n_rows, int64_t cols, void *Xq);

/* ---- weight layouts ---------------------------------------------------------------- */
/* ST_WLAYOUT_ROWS: GGUF's, row after row. ST_WLAYOUT_QUADS (32-element block types q4_0,
 * q4_1, q5_0, q5_1; rows a multiple of 4, cols of 64): rows in groups of 4, and within a
 * group block b of row r at byte (4 * b + r) * block bytes, so the 4 rows' blocks are
 * interleaved one by one. A matrix-vector product then reads the 4 rows of a quad as one
 * sequential stream while it loads and converts each activation block once per 4 rows
 * (docs/PERFORMANCE.md, quantized matvec). Q4_K, Q5_K,
 * Q6_K (cols a multiple of 256; tables with their tile4: AVX-512, and AVX2 for Q4_K) take it
 * too, in quad blocks of their own arranged for kernels with a row per 128-bit lane
 * (src/quant/kquants.h). Q8_0 (rows a multiple of 16, cols of 64; the AVX-512 tables, which
 * have its st_tilex_fn) takes groups of ST_QUAD_GROUP_ROWS rows instead, each block's quants
 * arranged as VNNI and AMX read them, 4 bytes of each of the 16 rows in turn (quant_int.h:
 * ST_Q8X_*). These products are deterministic and the same in matvec and matmul, but not the
 * row layout's bits (a row's f32 sums run in another order). In memory only: files keep
 * GGUF's layout. */
/* ST_WLAYOUT_PANELS (rows longer than ST_PANEL_MAX_COLS, any type): the columns cut into
 * st_panels_count() panels of equal width, each a plain row-major rows x width matrix, stored
 * panel after panel. A thread then streams one panel's rows with an activation slice that
 * stays in L1 next to the weights (as one row-major stream, the longer the rows the slower:
 * docs/PERFORMANCE.md, quantized matvec). y[r] is the dot of each panel's row with its slice of the
 * activation, summed in panel order: deterministic for any thread count and the same in
 * matvec and matmul, but not the row layout's bits. */
typedef enum st_wlayout { ST_WLAYOUT_ROWS = 0, ST_WLAYOUT_QUADS = 1, ST_WLAYOUT_PANELS = 2 } st_wlayout;

#define ST_PANEL_MAX_COLS 4096 /* longest panel row; longer rows are cut into panels */
#define ST_PANEL_MIN_COLS 2048 /* shortest panel row: narrower cuts leave the rows layout */
#define ST_PANEL_ALIGN 256     /* panel widths are multiples of every block size */

/* Whether a rows x cols matrix of type t can take the quad layout, and k has a kernel
 * for it (k->type[t].tile4, or .tilex for Q8_0): when false, keep the rows layout. */
bool st_quads_fit(const st_kernels *k, st_type t, int64_t rows, int64_t cols);
/* Rearranges W (rows x cols of type t, writable, row layout) into the quad layout in
 * place. 0, or ST_E_INVAL when the shape or type cannot take it (W unchanged). */
int st_pack_quads(st_type t, void *W, int64_t rows, int64_t cols);
/* Copies row r of W (quad layout) into row (st_row_bytes(t, cols) bytes, caller-owned) in
 * the row layout (through a scratch of one quad or group it allocates). 0, ST_E_INVAL or
 * ST_E_NOMEM. */
int st_quads_row(st_type t, const void *W, int64_t rows, int64_t cols, int64_t r, void *row);
/* Panels of the panel layout for a rows x cols matrix of type t: the fewest panels of at
 * most ST_PANEL_MAX_COLS columns whose width divides cols, is a multiple of ST_PANEL_ALIGN and
 * is at least ST_PANEL_MIN_COLS; 0 when the matrix keeps the row layout (short rows, no such
 * width, or a type without kernels). */
int st_panels_count(st_type t, int64_t rows, int64_t cols);
/* Rearranges W (rows x cols of type t, writable, row layout) into the panel layout in place,
 * through a copy it allocates. 0, ST_E_INVAL when st_panels_count is 0 (W unchanged), or
 * ST_E_NOMEM. */
int st_pack_panels(st_type t, void *W, int64_t rows, int64_t cols);
/* Copies row r of W (panel layout) into row (st_row_bytes(t, cols) bytes, caller-owned) in
 * the row layout. 0 or ST_E_INVAL. */
int st_panels_row(st_type t, const void *W, int64_t rows, int64_t cols, int64_t r, void *row);

/* ---- products ---------------------------------------------------------------------- */
/* y[r] = dot(W row r, xq) for r < rows. W: [rows][cols] of wtype, rows packed
 * (st_row_bytes(wtype, cols) bytes each, borrowed); xq: one activation row from
 * st_quantize_act(k, wtype, ...); y: [rows] floats, caller-owned. Rows are split
 * statically over the pool's threads (tp NULL: calling thread only).
 * Returns 0; ST_E_UNSUPPORTED when wtype has no kernels; ST_E_INVAL for NULL pointers,
 * rows < 0 or cols not a positive multiple of the block size. */
int st_matvec(st_threadpool *tp, const st_kernels *k, st_type wtype, const void *W, int64_t rows,
              int64_t cols, const void *xq, float *y);

/* Several matrix-vector products with one activation row in a single pool dispatch
 * (e.g. Wq, Wk, Wv of one layer): y[i][r] = dot(W[i] row r, xq) for i < n_mat. All
 * matrices have type wtype and `cols` columns; W[i] has rows[i] rows. The rows of all
 * matrices are split together over the threads. y[i] bit-identical to st_matvec.
 * Returns 0, ST_E_UNSUPPORTED, ST_E_INVAL (as st_matvec, or n_mat < 0). */
int st_matvec_multi(st_threadpool *tp, const st_kernels *k, st_type wtype, int n_mat,
                    const void *const *W, const int64_t *rows, int64_t cols, const void *xq,
                    float *const *y);
/* st_matvec_multi over matrices in `layout` (all the same); bit-identical to the row layout
 * for quads (a quad layout also needs the shape st_pack_quads accepts, else ST_E_INVAL; a table
 * without tile4 unpacks each quad into scratch it allocates: ST_E_NOMEM if it cannot), the
 * panel sums described at ST_WLAYOUT_PANELS for panels (ST_E_INVAL when st_panels_count is 0;
 * ST_E_NOMEM when the partial sums' scratch cannot be allocated). st_matvec,
 * st_matvec_multi and st_matmul take the row layout; the _l forms take a layout. */
int st_matvec_multi_l(st_threadpool *tp, const st_kernels *k, st_type wtype, st_wlayout layout,
                      int n_mat, const void *const *W, const int64_t *rows, int64_t cols,
                      const void *xq, float *const *y);

/* Y[t][r] = dot(W row r, Xq row t) for t < n_tok, r < rows: Xq holds n_tok activation
 * rows (st_act_bytes each, packed, e.g. from st_quantize_act_rows); Y is [n_tok][ldy]
 * floats, ldy >= rows (only the first `rows` of each Y row are written). Weight rows
 * are split over threads; each thread walks token x row tiles so a weight tile is
 * read from memory once per tile of tokens. Y[t] is bit-identical to st_matvec of
 * Xq row t. Same errors as st_matvec, plus ST_E_INVAL for n_tok < 0 or ldy < rows. */
int st_matmul(st_threadpool *tp, const st_kernels *k, st_type wtype, const void *W, int64_t rows,
              int64_t cols, int64_t n_tok, const void *Xq, float *Y, int64_t ldy);
int st_matmul_l(st_threadpool *tp, const st_kernels *k, st_type wtype, st_wlayout layout,
                const void *W, int64_t rows, int64_t cols, int64_t n_tok, const void *Xq, float *Y,
                int64_t ldy);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_QUANT_H */
