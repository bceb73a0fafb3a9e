/* Cold compression of spilled pages: blocks of 32 elements with an f16 scale, in ggml's
 * q8_0 and q4_0 block layouts (so a later kernel could attend over them directly).
 * A trailing partial block is zero-padded on encode and truncated on decode. */
#include "strata/tier.h"

#include <math.h>
#include <string.h>
#include <strings.h>

#define ST_COLD_QK 32

typedef struct {
    uint16_t d;            /* f16 scale */
    int8_t qs[ST_COLD_QK]; /* x = d * q */
} st_cold_q8;              /* 34 bytes / 32 elements: 8.5 bits per element */
_Static_assert(sizeof(st_cold_q8) == 34, "q8 block layout");

typedef struct {
    uint16_t d;                /* f16 scale */
    uint8_t qs[ST_COLD_QK / 2]; /* x = d * (q - 8); element j in low nibble of qs[j], */
} st_cold_q4;                  /* element j+16 in the high nibble: 4.5 bits per element */
_Static_assert(sizeof(st_cold_q4) == 18, "q4 block layout");

int st_cold_parse(const char *s) {
    if (!s) return -1;
    if (!strcasecmp(s, "none") || !strcasecmp(s, "off")) return ST_COLD_NONE;
    if (!strcasecmp(s, "q8") || !strcasecmp(s, "q8_0")) return ST_COLD_Q8;
    if (!strcasecmp(s, "q4") || !strcasecmp(s, "q4_0")) return ST_COLD_Q4;
    return -1;
}

const char *st_cold_name(st_cold_type t) {
    return t == ST_COLD_Q8 ? "q8" : t == ST_COLD_Q4 ? "q4" : "none";
}

static size_t elem_size(st_type t) {
    return t == ST_TYPE_F32 ? 4 : (t == ST_TYPE_F16 || t == ST_TYPE_BF16) ? 2 : 0;
}

static size_t block_bytes(st_cold_type t) {
    return t == ST_COLD_Q8 ? sizeof(st_cold_q8) : t == ST_COLD_Q4 ? sizeof(st_cold_q4) : 0;
}

size_t st_cold_bytes(st_cold_type t, st_type src, size_t src_bytes) {
    size_t es = elem_size(src), bb = block_bytes(t);
    if (!es || !bb) return src_bytes;
    if (src_bytes % es) return 0;
    size_t ne = src_bytes / es;
    return (ne + ST_COLD_QK - 1) / ST_COLD_QK * bb;
}

static float load(st_type t, const void *p, size_t i) {
    if (t == ST_TYPE_F32) {
        float f;
        memcpy(&f, (const uint8_t *)p + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, (const uint8_t *)p + 2 * i, 2);
    return t == ST_TYPE_F16 ? st_fp16_to_fp32(h) : st_bf16_to_fp32(h);
}

static void store(st_type t, void *p, size_t i, float v) {
    if (t == ST_TYPE_F32) {
        memcpy((uint8_t *)p + 4 * i, &v, 4);
        return;
    }
    uint16_t h = t == ST_TYPE_F16 ? st_fp32_to_fp16(v) : st_fp32_to_bf16(v);
    memcpy((uint8_t *)p + 2 * i, &h, 2);
}

/* One block of up to 32 values (x zero-padded by the caller). */
static void enc_q8(const float *x, st_cold_q8 *b) {
    float amax = 0;
    for (int j = 0; j < ST_COLD_QK; j++) amax = fmaxf(amax, fabsf(x[j]));
    float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
    b->d = st_fp32_to_fp16(d);
    for (int j = 0; j < ST_COLD_QK; j++) b->qs[j] = (int8_t)lrintf(x[j] * id);
}

static void enc_q4(const float *x, st_cold_q4 *b) {
    /* As ggml q4_0: the scale maps the value of largest magnitude to -8 exactly. */
    float amax = 0, max = 0;
    for (int j = 0; j < ST_COLD_QK; j++)
        if (fabsf(x[j]) > amax) amax = fabsf(x[j]), max = x[j];
    float d = max / -8.0f, id = d ? 1.0f / d : 0.0f;
    b->d = st_fp32_to_fp16(d);
    for (int j = 0; j < ST_COLD_QK / 2; j++) {
        int q0 = (int)(x[j] * id + 8.5f), q1 = (int)(x[j + 16] * id + 8.5f);
        q0 = q0 < 0 ? 0 : q0 > 15 ? 15 : q0;
        q1 = q1 < 0 ? 0 : q1 > 15 ? 15 : q1;
        b->qs[j] = (uint8_t)(q0 | (q1 << 4));
    }
}

int st_cold_encode(st_cold_type t, st_type src, const void *in, size_t in_bytes, void *out,
                   size_t out_cap, size_t *out_len) {
    if (out_len) *out_len = 0;
    size_t es = elem_size(src), bb = block_bytes(t);
    if (!in || !out || !out_len || !es || !bb || in_bytes % es) return ST_E_INVAL;
    size_t need = st_cold_bytes(t, src, in_bytes), ne = in_bytes / es;
    if (out_cap < need) return ST_E_LIMIT;
    float x[ST_COLD_QK];
    for (size_t b = 0; b * ST_COLD_QK < ne; b++) {
        for (size_t j = 0; j < ST_COLD_QK; j++) {
            size_t i = b * ST_COLD_QK + j;
            x[j] = i < ne ? load(src, in, i) : 0.0f;
            if (!isfinite(x[j])) x[j] = 0.0f; /* a NaN/inf would poison the block's scale */
        }
        uint8_t *dst = (uint8_t *)out + b * bb;
        if (t == ST_COLD_Q8) {
            st_cold_q8 blk;
            enc_q8(x, &blk);
            memcpy(dst, &blk, sizeof blk);
        } else {
            st_cold_q4 blk;
            enc_q4(x, &blk);
            memcpy(dst, &blk, sizeof blk);
        }
    }
    *out_len = need;
    return 0;
}

int st_cold_decode(st_cold_type t, st_type dst, const void *in, size_t in_len, void *out,
                   size_t out_bytes) {
    size_t es = elem_size(dst), bb = block_bytes(t);
    if (!in || !out || !es || !bb || out_bytes % es) return ST_E_INVAL;
    if (in_len != st_cold_bytes(t, dst, out_bytes)) return ST_E_INVAL;
    size_t ne = out_bytes / es;
    for (size_t b = 0; b * ST_COLD_QK < ne; b++) {
        const uint8_t *src = (const uint8_t *)in + b * bb;
        float y[ST_COLD_QK];
        if (t == ST_COLD_Q8) {
            st_cold_q8 blk;
            memcpy(&blk, src, sizeof blk);
            float d = st_fp16_to_fp32(blk.d);
            for (int j = 0; j < ST_COLD_QK; j++) y[j] = d * (float)blk.qs[j];
        } else {
            st_cold_q4 blk;
            memcpy(&blk, src, sizeof blk);
            float d = st_fp16_to_fp32(blk.d);
            for (int j = 0; j < ST_COLD_QK / 2; j++) {
                y[j] = d * (float)((blk.qs[j] & 15) - 8);
                y[j + 16] = d * (float)((blk.qs[j] >> 4) - 8);
            }
        }
        for (size_t j = 0; j < ST_COLD_QK && b * ST_COLD_QK + j < ne; j++)
            store(dst, out, b * ST_COLD_QK + j, y[j]);
    }
    return 0;
}
