/* The quad weight layout (st_wlayout): 4 rows of 32-element blocks interleaved block by
 * block, or (Q4_K, Q5_K, Q6_K) rearranged into quad blocks of their own (kquants.h), so a
 * 4-row tile reads one sequential stream; Q8_0 in groups of 16 rows (quant_int.h: ST_Q8X_*).
 * Packing runs once per matrix at model load, in place, one unit (quad or group) at a time
 * through a scratch buffer of that many rows. */
#include "quant_int.h"

#include "quant/kquants.h"

#include <math.h>
#include <stdlib.h>

bool st_quads_shape(st_type t, int64_t rows, int64_t cols) {
    const bool type_ok = t == ST_TYPE_Q4_0 || t == ST_TYPE_Q4_1 || t == ST_TYPE_Q5_0 || t == ST_TYPE_Q5_1;
    const bool own = t == ST_TYPE_Q4_K || t == ST_TYPE_Q5_K || t == ST_TYPE_Q6_K || t == ST_TYPE_Q8_0; /* layouts of their own */
    const int64_t col_step = t == ST_TYPE_Q8_0 ? 32 * ST_Q8X_SPAN : own ? QK_K : 64;
    return (type_ok || own) && rows >= 0 && rows % st_quads_unit(t) == 0 && cols > 0 && cols % col_step == 0 &&
           cols <= INT32_MAX;
}

bool st_quads_fit(const st_kernels *k, st_type t, int64_t rows, int64_t cols) {
    return k && st_quads_shape(t, rows, cols) && (t == ST_TYPE_Q8_0 ? k->type[t].tilex != NULL : k->type[t].tile4 != NULL);
}

/* n bytes from the row layout into the quad, or back (unpack): every converter below moves
 * its pieces through this, so packing and unpacking are the same code read both ways. */
static inline void quad_move(uint8_t *quad, void *row, size_t n, int unpack) {
    if (unpack) memcpy(row, quad, n);
    else memcpy(quad, row, n);
}

/* A quad (4 rows interleaved) from 4 rows in the row layout, or back (unpack), for blocks of
 * BB bytes: a constant, so each block moves as a few register copies rather than a memcpy
 * call (a 1B-shape model packs ~600 MB at load). */
static inline void quad_convert_bb(uint8_t *quad, uint8_t *rows4, size_t rb, const size_t BB, int unpack) {
    const size_t nb = rb / BB;
    for (int r = 0; r < 4; r++) {
        uint8_t *p = rows4 + (size_t)r * rb, *q = quad + (size_t)r * BB;
        for (size_t b = 0; b < nb; b++, p += BB, q += 4 * BB) quad_move(q, p, BB, unpack);
    }
}

_Static_assert(sizeof(st_block_q4_0) == 18 && sizeof(st_block_q4_1) == 20 && sizeof(st_block_q5_0) == 22 &&
                   sizeof(st_block_q5_1) == 24,
               "quad_convert's block sizes");

/* The quad block of the 4 blocks r[0..3] (st_block_q4_K, or st_block_q5_K when q5;
 * kquants.h: KQ_QUAD_*), or the blocks back from it. */
static void q45k_quad_convert(int q5, uint8_t *quad, uint8_t *const r[4], int unpack) {
    for (int j = 0; j < 4; j++) {
        /* both block types start with d, dmin and the scales */
        quad_move(quad + 2 * j, r[j], 2, unpack);
        quad_move(quad + KQ_QUAD_DMIN + 2 * j, r[j] + 2, 2, unpack);
        quad_move(quad + KQ_QUAD_SCALES + K_SCALE_SIZE * j, r[j] + 4, K_SCALE_SIZE, unpack);
        uint8_t *qs = q5 ? ((st_block_q5_K *)r[j])->qs : ((st_block_q4_K *)r[j])->qs;
        for (int h = 0; q5 && h < 2; h++)
            quad_move(quad + KQ_QUAD_QH + 64 * h + 16 * j, ((st_block_q5_K *)r[j])->qh + 16 * h, 16, unpack);
        for (int k = 0; k < 8; k++) quad_move(quad + KQ_QUAD_QS(q5) + 64 * k + 16 * j, qs + 16 * k, 16, unpack);
    }
}

/* Q4_K, Q5_K: super-block b of the 4 rows <-> quad block b */
static void quad_convert_q45k(int q5, uint8_t *quad, uint8_t *rows4, size_t rb, int unpack) {
    const size_t bb = q5 ? sizeof(st_block_q5_K) : sizeof(st_block_q4_K);
    for (size_t b = 0; b < rb / bb; b++) {
        uint8_t *r[4];
        for (int j = 0; j < 4; j++) r[j] = rows4 + (size_t)j * rb + b * bb;
        q45k_quad_convert(q5, quad + b * KQ_QUAD_BYTES(q5), r, unpack);
    }
}

/* Q8_0: a group of 16 rows (quant_int.h: ST_Q8X_*) <-> the rows; the quants are stored + 128
 * (XOR 0x80). */
static void group_convert_q8(uint8_t *grp, uint8_t *rows, size_t rb, int unpack) {
    for (size_t b = 0; b < rb / sizeof(st_block_q8_0); b++) {
        uint8_t *sp = grp + (b / ST_Q8X_SPAN) * ST_Q8X_SPAN_BYTES;
        const int j = (int)(b % ST_Q8X_SPAN);
        for (int r = 0; r < ST_QUAD_GROUP_ROWS; r++) {
            st_block_q8_0 *blk = (st_block_q8_0 *)(rows + (size_t)r * rb) + b;
            quad_move(sp + 2 * (ST_QUAD_GROUP_ROWS * j + r), &blk->d, 2, unpack);
            uint8_t *q = sp + ST_Q8X_QS + 512 * j + 4 * r;
            for (int k = 0; k < 32; k++) {
                uint8_t *e = q + 64 * (k / 4) + k % 4;
                if (unpack) blk->qs[k] = (int8_t)(*e ^ 0x80);
                else *e = (uint8_t)blk->qs[k] ^ 0x80;
            }
        }
    }
}

/* Q6_K: super-block b of the 4 rows <-> body b and the d's (kquants.h: KQ_Q6Q_*) */
static void quad_convert_q6k(uint8_t *quad, uint8_t *rows4, size_t rb, int unpack) {
    const size_t nb = rb / sizeof(st_block_q6_K);
    for (size_t b = 0; b < nb; b++) {
        uint8_t *body = quad + 8 * nb + KQ_Q6Q_BODY * b;
        for (int j = 0; j < 4; j++) {
            st_block_q6_K *r = (st_block_q6_K *)(rows4 + (size_t)j * rb) + b;
            quad_move(quad + 8 * b + 2 * j, &r->d, 2, unpack);
            quad_move(body + 16 * j, r->scales, 16, unpack);
            for (int n = 0; n < 2; n++) {
                for (int k = 0; k < 4; k++) quad_move(body + KQ_Q6Q_QL(n, k) + 16 * j, r->ql + 64 * n + 16 * k, 16, unpack);
                for (int h = 0; h < 2; h++) quad_move(body + KQ_Q6Q_QH(n, h) + 16 * j, r->qh + 32 * n + 16 * h, 16, unpack);
            }
        }
    }
}

static void quad_convert(uint8_t *quad, uint8_t *rows4, size_t rb, size_t bb, int unpack) {
    switch (bb) {
    case sizeof(st_block_q6_K): quad_convert_q6k(quad, rows4, rb, unpack); break;
    case sizeof(st_block_q8_0): group_convert_q8(quad, rows4, rb, unpack); break; /* 16 rows */
    case sizeof(st_block_q4_K): quad_convert_q45k(0, quad, rows4, rb, unpack); break;
    case sizeof(st_block_q5_K): quad_convert_q45k(1, quad, rows4, rb, unpack); break;
    case 18: quad_convert_bb(quad, rows4, rb, 18, unpack); break; /* q4_0 */
    case 20: quad_convert_bb(quad, rows4, rb, 20, unpack); break; /* q4_1 */
    case 22: quad_convert_bb(quad, rows4, rb, 22, unpack); break; /* q5_0 */
    default: quad_convert_bb(quad, rows4, rb, 24, unpack); break; /* q5_1 */
    }
}

int st_pack_quads(st_type t, void *W, int64_t rows, int64_t cols) {
    if (!W || !st_quads_shape(t, rows, cols)) return ST_E_INVAL;
    const size_t rb = st_row_bytes(t, cols), bb = st_type_size(t), u = (size_t)st_quads_unit(t);
    uint8_t *tmp = malloc(u * rb);
    if (!tmp) return ST_E_NOMEM;
    for (int64_t q = 0; q < rows / (int64_t)u; q++) {
        uint8_t *unit = (uint8_t *)W + (size_t)q * u * rb;
        memcpy(tmp, unit, u * rb);
        quad_convert(unit, tmp, rb, bb, 0);
    }
    free(tmp);
    return 0;
}

void st_quads_unpack(st_type t, const void *unit, int64_t cols, void *rows) {
    quad_convert((uint8_t *)unit, rows, st_row_bytes(t, cols), st_type_size(t), 1);
}

int st_quads_row(st_type t, const void *W, int64_t rows, int64_t cols, int64_t r, void *row) {
    if (!W || !row || !st_quads_shape(t, rows, cols) || r < 0 || r >= rows) return ST_E_INVAL;
    const size_t rb = st_row_bytes(t, cols);
    const int u = st_quads_unit(t);
    uint8_t *tmp = malloc((size_t)u * rb);
    if (!tmp) return ST_E_NOMEM;
    st_quads_unpack(t, (const uint8_t *)W + (size_t)(r / u) * (size_t)u * rb, cols, tmp);
    memcpy(row, tmp + (size_t)(r % u) * rb, rb);
    free(tmp);
    return 0;
}

/* The Q8_0 group tiles' arithmetic (q8x_avx512.c, q8x_amx.c) in plain C, and so their
 * definition: each (row, block) pair's 32 products summed exactly in an int32, converted to
 * f32 (exact: |sum| <= 2^19) and added times (d_w * d_a), that product rounded once, with one
 * rounding (fmaf), block after block from 0. The SIMD kernels hold the bits to this on every
 * input; the tests hold them to it on any CPU. */
void st_tilex_q8_0_q8_0_scalar(int n, float *s, size_t bs, const void *x, int ng, const void *y, size_t by, int nc) {
    const int nb = n / 32;
    const size_t gb = (size_t)nb * ST_QUAD_GROUP_ROWS * sizeof(st_block_q8_0);
    for (int g = 0; g < ng; g++) {
        const uint8_t *xg = (const uint8_t *)x + (size_t)g * gb;
        for (int c = 0; c < nc; c++) {
            const st_block_q8_0 *a = (const st_block_q8_0 *)((const uint8_t *)y + (size_t)c * by);
            for (int r = 0; r < ST_QUAD_GROUP_ROWS; r++) {
                float acc = 0;
                for (int b = 0; b < nb; b++) {
                    const uint8_t *sp = xg + (size_t)(b / ST_Q8X_SPAN) * ST_Q8X_SPAN_BYTES;
                    const int j = b % ST_Q8X_SPAN;
                    const uint8_t *q = sp + ST_Q8X_QS + 512 * j + 4 * r;
                    int32_t p = 0;
                    for (int k = 0; k < 32; k++) p += (int32_t)(int8_t)(q[64 * (k / 4) + k % 4] ^ 0x80) * a[b].qs[k];
                    const float dwa = st_fp16_to_fp32(ld16(sp + 2 * (ST_QUAD_GROUP_ROWS * j + r))) * st_fp16_to_fp32(a[b].d);
                    acc = fmaf((float)p, dwa, acc);
                }
                s[(size_t)c * bs + ST_QUAD_GROUP_ROWS * (size_t)g + r] = acc;
            }
        }
    }
}
