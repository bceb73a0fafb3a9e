/* The quad weight layout (st_wlayout): 4 rows of 32-element blocks interleaved block by
 * block, or (Q4_K, Q5_K, Q6_K, Q8_0) rearranged into quad blocks of their own
 * (kquants.h), so a 4-row tile reads one sequential stream (see quant.h). Packing runs once
 * per matrix at model load, in place, one quad at a time through a 4-row scratch buffer. */
#include "quant_int.h"

#include "quant/kquants.h"

#include <math.h>
#include <stdlib.h>

bool st_quads_shape(st_type t, int64_t rows, int64_t cols) {
    const bool type_ok = t == ST_TYPE_Q4_0 || t == ST_TYPE_Q4_1 || t == ST_TYPE_Q5_0 || t == ST_TYPE_Q5_1;
    const bool own = t == ST_TYPE_Q4_K || t == ST_TYPE_Q5_K || t == ST_TYPE_Q6_K || t == ST_TYPE_Q8_0; /* layouts of their own */
    const int64_t col_step = t == ST_TYPE_Q8_0 ? 32 * ST_Q8Q_SPAN : own ? QK_K : 64;
    return (type_ok || own) && rows >= 0 && rows % 4 == 0 && cols > 0 && cols % col_step == 0 &&
           cols <= INT32_MAX;
}

bool st_quads_fit(const st_kernels *k, st_type t, int64_t rows, int64_t cols) {
    return k && st_quads_shape(t, rows, cols) && k->type[t].tile4;
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

/* Q8_0: span sp of the 4 rows (quant_int.h: ST_Q8Q_*) <-> quad block sp; the quants are
 * stored + 128 (XOR 0x80). */
static void quad_convert_q8(uint8_t *quad, uint8_t *rows4, size_t rb, int unpack) {
    for (size_t sp = 0; sp < rb / (ST_Q8Q_SPAN * sizeof(st_block_q8_0)); sp++) {
        uint8_t *qb = quad + sp * ST_Q8Q_BLOCK_BYTES;
        for (int b = 0; b < ST_Q8Q_SPAN; b++) {
            for (int j = 0; j < 4; j++) {
                st_block_q8_0 *blk = (st_block_q8_0 *)(rows4 + (size_t)j * rb) + ST_Q8Q_SPAN * sp + b;
                quad_move(qb + 2 * (4 * b + j), &blk->d, 2, unpack);
                for (int h = 0; h < 2; h++) {
                    uint8_t *q = qb + ST_Q8Q_QS + 128 * b + 64 * h + 16 * j;
                    for (int e = 0; e < 16; e++) {
                        if (unpack) blk->qs[16 * h + e] = (int8_t)(q[e] ^ 0x80);
                        else q[e] = (uint8_t)blk->qs[16 * h + e] ^ 0x80;
                    }
                }
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
    case sizeof(st_block_q8_0): quad_convert_q8(quad, rows4, rb, unpack); break;
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
    const size_t rb = st_row_bytes(t, cols), bb = st_type_size(t);
    uint8_t *tmp = malloc(4 * rb);
    if (!tmp) return ST_E_NOMEM;
    for (int64_t q = 0; q < rows / 4; q++) {
        uint8_t *quad = (uint8_t *)W + (size_t)q * 4 * rb;
        memcpy(tmp, quad, 4 * rb);
        quad_convert(quad, tmp, rb, bb, 0);
    }
    free(tmp);
    return 0;
}

void st_quads_unpack4(st_type t, const void *quad, int64_t cols, void *rows4) {
    quad_convert((uint8_t *)quad, rows4, st_row_bytes(t, cols), st_type_size(t), 1);
}

int st_quads_row(st_type t, const void *W, int64_t rows, int64_t cols, int64_t r, void *row) {
    if (!W || !row || !st_quads_shape(t, rows, cols) || r < 0 || r >= rows) return ST_E_INVAL;
    const size_t rb = st_row_bytes(t, cols);
    uint8_t *rows4 = malloc(4 * rb);
    if (!rows4) return ST_E_NOMEM;
    st_quads_unpack4(t, (const uint8_t *)W + (size_t)(r / 4) * 4 * rb, cols, rows4);
    memcpy(row, rows4 + (size_t)(r % 4) * rb, rb);
    free(rows4);
    return 0;
}

/* The Q8_0 quad kernels' arithmetic (quads_avx512.c) in plain C, lane by lane: row r's 4
 * lanes k each sum, per block, its 8 products (elements 4k..4k+3 of both halves) exactly in
 * an int, add it times (d_w * d_a) with one rounding (fmaf) in block order, and end as
 * (l0 + l1) + (l2 + l3). The same bits as the AVX-512 tile4 and tilew on every input, so
 * the tests hold both to it on any CPU. */
void st_tilew_q8_0_q8_0_scalar(int n, float *s, size_t bs, const void *x, const void *y, size_t by, int nq, int nc) {
    const int n_span = n / (32 * ST_Q8Q_SPAN);
    for (int q = 0; q < nq; q++) {
        const uint8_t *xq = (const uint8_t *)x + (size_t)q * (size_t)n_span * ST_Q8Q_BLOCK_BYTES;
        for (int c = 0; c < nc; c++) {
            const st_block_q8_0 *a = (const st_block_q8_0 *)((const uint8_t *)y + (size_t)c * by);
            for (int r = 0; r < 4; r++) {
                float l[4] = {0, 0, 0, 0};
                for (int i = 0; i < n_span; i++) {
                    const uint8_t *xb = xq + (size_t)i * ST_Q8Q_BLOCK_BYTES;
                    for (int b = 0; b < ST_Q8Q_SPAN; b++) {
                        const st_block_q8_0 *ab = &a[ST_Q8Q_SPAN * i + b];
                        const float dwa = st_fp16_to_fp32(ld16(xb + 2 * (4 * b + r))) * st_fp16_to_fp32(ab->d);
                        for (int k = 0; k < 4; k++) {
                            int32_t p = 0;
                            for (int h = 0; h < 2; h++)
                                for (int e = 0; e < 4; e++) {
                                    const uint8_t wq = xb[ST_Q8Q_QS + 128 * b + 64 * h + 16 * r + 4 * k + e];
                                    p += (int32_t)(int8_t)(wq ^ 0x80) * ab->qs[16 * h + 4 * k + e];
                                }
                            l[k] = fmaf((float)p, dwa, l[k]);
                        }
                    }
                }
                s[(size_t)c * bs + 4 * (size_t)q + r] = (l[0] + l[1]) + (l[2] + l[3]);
            }
        }
    }
}
