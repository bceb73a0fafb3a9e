/* The quad weight layout (st_wlayout): 4 rows of 32-element blocks interleaved block by
 * block, or (Q4_K, Q5_K, Q6_K, Q8_0) rearranged into quad blocks of their own
 * (kquants.h), so a 4-row tile reads one sequential stream (see quant.h). Packing runs once
 * per matrix at model load, in place, one quad at a time through a 4-row scratch buffer. */
#include "quant_int.h"

#include "quant/kquants.h"

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

/* A quad (4 rows interleaved) from 4 rows in the row layout, or back (unpack), for blocks of
 * BB bytes: a constant, so each block moves as a few register copies rather than a memcpy
 * call (a 1B-shape model packs ~600 MB at load). */
static inline void quad_convert_bb(uint8_t *quad, uint8_t *rows4, size_t rb, const size_t BB, int unpack) {
    const size_t nb = rb / BB;
    for (int r = 0; r < 4; r++) {
        uint8_t *p = rows4 + (size_t)r * rb, *q = quad + (size_t)r * BB;
        for (size_t b = 0; b < nb; b++, p += BB, q += 4 * BB) {
            if (unpack) memcpy(p, q, BB);
            else memcpy(q, p, BB);
        }
    }
}

_Static_assert(sizeof(st_block_q4_0) == 18 && sizeof(st_block_q4_1) == 20 && sizeof(st_block_q5_0) == 22 &&
                   sizeof(st_block_q5_1) == 24,
               "quad_convert's block sizes");

/* Q4_K, Q5_K: super-block b of the 4 rows <-> quad block b */
static void quad_convert_q45k(int q5, uint8_t *quad, uint8_t *rows4, size_t rb, int unpack) {
    const size_t bb = q5 ? sizeof(st_block_q5_K) : sizeof(st_block_q4_K);
    for (size_t b = 0; b < rb / bb; b++) {
        void *r[4];
        for (int j = 0; j < 4; j++) r[j] = rows4 + (size_t)j * rb + b * bb;
        st_kq_q45k_quad_convert(q5, quad + b * KQ_QUAD_BYTES(q5), r, unpack);
    }
}

void st_q8q_convert(uint8_t *quad, st_block_q8_0 *const r[4], int unpack) {
    for (int b = 0; b < ST_Q8Q_SPAN; b++) {
        for (int j = 0; j < 4; j++) {
            st_block_q8_0 *blk = r[j] + b;
            uint8_t *d = quad + 2 * (4 * b + j);
            if (unpack) memcpy(&blk->d, d, 2);
            else memcpy(d, &blk->d, 2);
            for (int h = 0; h < 2; h++) {
                uint8_t *q = quad + ST_Q8Q_QS + 128 * b + 64 * h + 16 * j;
                for (int e = 0; e < 16; e++) {
                    if (unpack) blk->qs[16 * h + e] = (int8_t)(q[e] ^ 0x80);
                    else q[e] = (uint8_t)blk->qs[16 * h + e] ^ 0x80;
                }
            }
        }
    }
}

/* Q8_0: span s of the 4 rows <-> quad block s */
static void quad_convert_q8(uint8_t *quad, uint8_t *rows4, size_t rb, int unpack) {
    for (size_t sp = 0; sp < rb / (ST_Q8Q_SPAN * sizeof(st_block_q8_0)); sp++) {
        st_block_q8_0 *r[4];
        for (int j = 0; j < 4; j++) r[j] = (st_block_q8_0 *)(rows4 + (size_t)j * rb) + ST_Q8Q_SPAN * sp;
        st_q8q_convert(quad + sp * ST_Q8Q_BLOCK_BYTES, r, unpack);
    }
}

/* Q6_K: super-block b of the 4 rows <-> body b and the d's */
static void quad_convert_q6k(uint8_t *quad, uint8_t *rows4, size_t rb, int unpack) {
    const size_t nb = rb / sizeof(st_block_q6_K);
    for (size_t b = 0; b < nb; b++) {
        st_block_q6_K *r[4];
        for (int j = 0; j < 4; j++) r[j] = (st_block_q6_K *)(rows4 + (size_t)j * rb) + b;
        st_kq_q6k_quad_convert(quad, nb, b, r, unpack);
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
