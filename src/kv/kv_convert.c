/* Element conversion between f32 rows and a page's layer block (f32, f16, bf16, q8_0).
 *
 * Layout of one head of one layer block (kv.h): V is slot-major [P][D]; K is dim-major
 * (K^T, [D][P]) so that attention reads one dimension of 16 slots as one vector and scores
 * 16 keys with plain FMAs (src/attn). A row here is one token's head_dim values, found at
 * base + slot * slot_stride + d * dim_stride elements.
 *
 * q8_0 (this library's variant, see kv.h): int8 values, one f32 scale per page per KV head
 * for K and one for V. A token whose abs-max does not fit the current scale (absmax > 127 *
 * scale) makes that page-head requantize with scale' = max(absmax / 127, 2 * scale): the
 * doubling bounds the accumulated rounding error of any element by one step of the final
 * scale (the series s0/2 + s1/2 + ... with s_{i+1} >= 2 s_i sums to < s_final). */
#include "kv_int.h"

#include <math.h>

/* Round and clamp to [-127, 127]; NaN (garbage in) becomes 0 rather than undefined. */
static int8_t to_i8(float v) {
    v = roundf(v);
    if (!(v == v)) return 0;
    if (v > 127.0f) v = 127.0f;
    if (v < -127.0f) v = -127.0f;
    return (int8_t)v;
}

/* Element strides of a token's row inside one head: K dim-major, V slot-major. */
typedef struct row_strides {
    size_t slot, dim;
} row_strides;

static row_strides strides_for(const st_kv *kv, int is_k) {
    return is_k ? (row_strides){1, (size_t)kv->p.page_size} : (row_strides){(size_t)kv->p.head_dim, 1};
}

/* Quantize the head's row x[head_dim] into slot `slot` of q (P * head_dim int8 of one head),
 * requantizing the whole head's slab first when its scale is too small. */
static int q8_store(int8_t *q, float *scale, int P, int D, row_strides rs, int slot, const float *x) {
    float amax = 0.0f;
    for (int d = 0; d < D; d++) {
        float a = fabsf(x[d]);
        if (a > amax) amax = a;
    }
    int requant = 0;
    if (amax > *scale * 127.0f) {
        float ns = amax / 127.0f;
        if (ns < 2.0f * *scale) ns = 2.0f * *scale;
        if (*scale > 0.0f) {
            const float r = *scale / ns;
            for (int i = 0; i < P * D; i++) q[i] = to_i8((float)q[i] * r);
            requant = 1;
        }
        *scale = ns;
    }
    const float inv = *scale > 0.0f ? 1.0f / *scale : 0.0f;
    int8_t *row = q + (size_t)slot * rs.slot;
    for (int d = 0; d < D; d++) row[(size_t)d * rs.dim] = to_i8(x[d] * inv);
    return requant;
}

static void store_rows(st_kv *kv, uint8_t *base, float *scales, int is_k, int slot,
                       const float *x) {
    const int H = kv->p.n_kv_head, P = kv->p.page_size, D = kv->p.head_dim;
    const row_strides rs = strides_for(kv, is_k);
    for (int h = 0; h < H; h++) {
        const float *xr = x + (size_t)h * D;
        size_t off = (size_t)h * P * D + (size_t)slot * rs.slot;
        switch (kv->p.type) {
        case ST_TYPE_F32: {
            float *o = (float *)base + off;
            for (int d = 0; d < D; d++) o[(size_t)d * rs.dim] = xr[d];
            break;
        }
        case ST_TYPE_F16: {
            uint16_t *o = (uint16_t *)base + off;
            for (int d = 0; d < D; d++) o[(size_t)d * rs.dim] = st_fp32_to_fp16(xr[d]);
            break;
        }
        case ST_TYPE_BF16: {
            uint16_t *o = (uint16_t *)base + off;
            for (int d = 0; d < D; d++) o[(size_t)d * rs.dim] = st_fp32_to_bf16(xr[d]);
            break;
        }
        case ST_TYPE_Q8_0:
            kv->st.requants +=
                q8_store((int8_t *)base + (size_t)h * P * D, &scales[h], P, D, rs, slot, xr);
            break;
        default: ST_ASSERT(0);
        }
    }
}

static void load_rows(const st_kv *kv, const uint8_t *base, const float *scales, int is_k,
                      int slot, float *x) {
    const int H = kv->p.n_kv_head, P = kv->p.page_size, D = kv->p.head_dim;
    const row_strides rs = strides_for(kv, is_k);
    for (int h = 0; h < H; h++) {
        float *xr = x + (size_t)h * D;
        size_t off = (size_t)h * P * D + (size_t)slot * rs.slot;
        switch (kv->p.type) {
        case ST_TYPE_F32: {
            const float *o = (const float *)base + off;
            for (int d = 0; d < D; d++) xr[d] = o[(size_t)d * rs.dim];
            break;
        }
        case ST_TYPE_F16: {
            const uint16_t *o = (const uint16_t *)base + off;
            for (int d = 0; d < D; d++) xr[d] = st_fp16_to_fp32(o[(size_t)d * rs.dim]);
            break;
        }
        case ST_TYPE_BF16: {
            const uint16_t *o = (const uint16_t *)base + off;
            for (int d = 0; d < D; d++) xr[d] = st_bf16_to_fp32(o[(size_t)d * rs.dim]);
            break;
        }
        case ST_TYPE_Q8_0: {
            const int8_t *o = (const int8_t *)base + off;
            for (int d = 0; d < D; d++) xr[d] = (float)o[(size_t)d * rs.dim] * scales[h];
            break;
        }
        default: ST_ASSERT(0);
        }
    }
}

void kv_store_token(st_kv *kv, uint8_t *blk, int slot, const float *k, const float *v) {
    float *ks = NULL, *vs = NULL;
    if (kv->p.type == ST_TYPE_Q8_0) {
        ks = (float *)(blk + kv->g.scale_offset);
        vs = ks + kv->p.n_kv_head;
    }
    store_rows(kv, blk, ks, 1, slot, k);
    store_rows(kv, blk + kv->g.v_offset, vs, 0, slot, v);
}

void kv_load_token(const st_kv *kv, const uint8_t *blk, int slot, float *k, float *v) {
    const float *ks = NULL, *vs = NULL;
    if (kv->p.type == ST_TYPE_Q8_0) {
        ks = (const float *)(blk + kv->g.scale_offset);
        vs = ks + kv->p.n_kv_head;
    }
    if (k) load_rows(kv, blk, ks, 1, slot, k);
    if (v) load_rows(kv, blk + kv->g.v_offset, vs, 0, slot, v);
}

/* Zeroes slots [s0, s1) of one layer's heads (K and V); scales are kept. */
void kv_zero_slots(st_kv *kv, int32_t page, int layer, int s0, int s1) {
    if (s1 <= s0) return;
    const int H = kv->p.n_kv_head, P = kv->p.page_size, D = kv->p.head_dim;
    const size_t es = kv->g.elem_bytes;
    {
        uint8_t *blk = kv_layer_data(kv, page, layer);
        for (int h = 0; h < H; h++) {
            size_t off = ((size_t)h * P + s0) * D * es, nb = (size_t)(s1 - s0) * D * es;
            memset(blk + kv->g.v_offset + off, 0, nb);
            uint8_t *kh = blk + (size_t)h * P * D * es; /* K^T: slots s0..s1 of each dim */
            for (int d = 0; d < D; d++)
                memset(kh + ((size_t)d * P + s0) * es, 0, (size_t)(s1 - s0) * es);
        }
    }
}
