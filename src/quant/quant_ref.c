/* Scalar reference quantizers and dequantizers of the 32-element block types.
 *
 * These follow ggml's quantize_row_*_ref arithmetic step by step (same scale formulas,
 * same float expressions, same rounding and clamping), so a row quantized here has the
 * same bytes as llama.cpp's reference quantizer produces, and GGUF tensors written by
 * llama.cpp dequantize to the same floats. */
#include "quant_int.h"

#include <math.h>

void st_quantize_row_f32_ref(const float *x, void *y, int64_t k) { memcpy(y, x, (size_t)k * 4); }

void st_quantize_row_f16_ref(const float *x, void *y, int64_t k) {
    uint16_t *o = y;
    for (int64_t i = 0; i < k; i++) o[i] = st_fp32_to_fp16(x[i]);
}

void st_quantize_row_bf16_ref(const float *x, void *y, int64_t k) {
    uint16_t *o = y;
    for (int64_t i = 0; i < k; i++) o[i] = st_fp32_to_bf16(x[i]);
}

void st_dequantize_row_f32(const void *x, float *y, int64_t k) { memcpy(y, x, (size_t)k * 4); }

void st_dequantize_row_f16(const void *x, float *y, int64_t k) {
    const uint16_t *h = x;
    for (int64_t i = 0; i < k; i++) y[i] = st_fp16_to_fp32(h[i]);
}

void st_dequantize_row_bf16(const void *x, float *y, int64_t k) {
    const uint16_t *h = x;
    for (int64_t i = 0; i < k; i++) y[i] = st_bf16_to_fp32(h[i]);
}

/* Value of largest magnitude in the block, with its sign (the q4_0/q5_0 scale maps it
 * exactly onto the most negative level, as ggml does). */
static float absmax_signed(const float *x, int n, float *amax_out) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    *amax_out = amax;
    return max;
}

void st_quantize_row_q4_0_ref(const float *x, void *vy, int64_t k) {
    st_block_q4_0 *y = vy;
    for (int64_t i = 0; i < k / ST_QK4_0; i++, x += ST_QK4_0) {
        float amax;
        const float max = absmax_signed(x, ST_QK4_0, &amax);
        const float d = max / -8;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = st_fp32_to_fp16(d);
        for (int j = 0; j < ST_QK4_0 / 2; j++) {
            const uint8_t x0 = (uint8_t)(int8_t)(x[j] * id + 8.5f);
            const uint8_t x1 = (uint8_t)(int8_t)(x[ST_QK4_0 / 2 + j] * id + 8.5f);
            y[i].qs[j] = (uint8_t)((x0 < 15 ? x0 : 15) | ((x1 < 15 ? x1 : 15) << 4));
        }
    }
}

void st_quantize_row_q4_1_ref(const float *x, void *vy, int64_t k) {
    st_block_q4_1 *y = vy;
    for (int64_t i = 0; i < k / ST_QK4_1; i++, x += ST_QK4_1) {
        float min = INFINITY, max = -INFINITY;
        for (int j = 0; j < ST_QK4_1; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / ((1 << 4) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = st_fp32_to_fp16(d);
        y[i].m = st_fp32_to_fp16(min);
        for (int j = 0; j < ST_QK4_1 / 2; j++) {
            const uint8_t x0 = (uint8_t)(int8_t)((x[j] - min) * id + 0.5f);
            const uint8_t x1 = (uint8_t)(int8_t)((x[ST_QK4_1 / 2 + j] - min) * id + 0.5f);
            y[i].qs[j] = (uint8_t)((x0 < 15 ? x0 : 15) | ((x1 < 15 ? x1 : 15) << 4));
        }
    }
}

void st_quantize_row_q5_0_ref(const float *x, void *vy, int64_t k) {
    st_block_q5_0 *y = vy;
    for (int64_t i = 0; i < k / ST_QK5_0; i++, x += ST_QK5_0) {
        float amax;
        const float max = absmax_signed(x, ST_QK5_0, &amax);
        const float d = max / -16;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = st_fp32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < ST_QK5_0 / 2; j++) {
            uint8_t x0 = (uint8_t)(int8_t)(x[j] * id + 16.5f);
            uint8_t x1 = (uint8_t)(int8_t)(x[ST_QK5_0 / 2 + j] * id + 16.5f);
            if (x0 > 31) x0 = 31;
            if (x1 > 31) x1 = 31;
            y[i].qs[j] = (uint8_t)((x0 & 0x0F) | ((x1 & 0x0F) << 4));
            qh |= ((uint32_t)(x0 & 0x10) >> 4) << j;
            qh |= ((uint32_t)(x1 & 0x10) >> 4) << (j + ST_QK5_0 / 2);
        }
        memcpy(y[i].qh, &qh, 4);
    }
}

void st_quantize_row_q5_1_ref(const float *x, void *vy, int64_t k) {
    st_block_q5_1 *y = vy;
    for (int64_t i = 0; i < k / ST_QK5_1; i++, x += ST_QK5_1) {
        float min = INFINITY, max = -INFINITY;
        for (int j = 0; j < ST_QK5_1; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / ((1 << 5) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = st_fp32_to_fp16(d);
        y[i].m = st_fp32_to_fp16(min);
        uint32_t qh = 0;
        for (int j = 0; j < ST_QK5_1 / 2; j++) {
            const uint8_t x0 = (uint8_t)((x[j] - min) * id + 0.5f);
            const uint8_t x1 = (uint8_t)((x[ST_QK5_1 / 2 + j] - min) * id + 0.5f);
            y[i].qs[j] = (uint8_t)((x0 & 0x0F) | ((x1 & 0x0F) << 4));
            qh |= ((uint32_t)(x0 & 0x10) >> 4) << j;
            qh |= ((uint32_t)(x1 & 0x10) >> 4) << (j + ST_QK5_1 / 2);
        }
        memcpy(y[i].qh, &qh, 4);
    }
}

static float q8_scale(const float *x, float *id) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / ((1 << 7) - 1);
    *id = d ? 1.0f / d : 0.0f;
    return d;
}

void st_quantize_row_q8_0_ref(const float *x, void *vy, int64_t k) {
    st_block_q8_0 *y = vy;
    for (int64_t i = 0; i < k / ST_QK8_0; i++, x += ST_QK8_0) {
        float id;
        const float d = q8_scale(x, &id);
        y[i].d = st_fp32_to_fp16(d);
        for (int j = 0; j < ST_QK8_0; j++) y[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

void st_quantize_row_q8_1_ref(const float *x, void *vy, int64_t k) {
    st_block_q8_1 *y = vy;
    for (int64_t i = 0; i < k / ST_QK8_1; i++, x += ST_QK8_1) {
        float id;
        const float d = q8_scale(x, &id);
        int sum = 0;
        for (int j = 0; j < ST_QK8_1; j++) {
            y[i].qs[j] = (int8_t)roundf(x[j] * id);
            sum += y[i].qs[j];
        }
        y[i].d = st_fp32_to_fp16(d);
        y[i].s = st_fp32_to_fp16((float)sum * d);
    }
}

void st_dequantize_row_q4_0(const void *vx, float *y, int64_t k) {
    const st_block_q4_0 *x = vx;
    for (int64_t i = 0; i < k / ST_QK4_0; i++, y += ST_QK4_0) {
        const float d = st_fp16_to_fp32(x[i].d);
        for (int j = 0; j < ST_QK4_0 / 2; j++) {
            y[j] = (float)((x[i].qs[j] & 0x0F) - 8) * d;
            y[j + ST_QK4_0 / 2] = (float)((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void st_dequantize_row_q4_1(const void *vx, float *y, int64_t k) {
    const st_block_q4_1 *x = vx;
    for (int64_t i = 0; i < k / ST_QK4_1; i++, y += ST_QK4_1) {
        const float d = st_fp16_to_fp32(x[i].d), m = st_fp16_to_fp32(x[i].m);
        for (int j = 0; j < ST_QK4_1 / 2; j++) {
            y[j] = (float)(x[i].qs[j] & 0x0F) * d + m;
            y[j + ST_QK4_1 / 2] = (float)(x[i].qs[j] >> 4) * d + m;
        }
    }
}

void st_dequantize_row_q5_0(const void *vx, float *y, int64_t k) {
    const st_block_q5_0 *x = vx;
    for (int64_t i = 0; i < k / ST_QK5_0; i++, y += ST_QK5_0) {
        const float d = st_fp16_to_fp32(x[i].d);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        for (int j = 0; j < ST_QK5_0 / 2; j++) {
            const int h0 = (int)((qh >> j) << 4) & 0x10;
            const int h1 = (int)(qh >> (j + 12)) & 0x10;
            y[j] = (float)(((x[i].qs[j] & 0x0F) | h0) - 16) * d;
            y[j + ST_QK5_0 / 2] = (float)(((x[i].qs[j] >> 4) | h1) - 16) * d;
        }
    }
}

void st_dequantize_row_q5_1(const void *vx, float *y, int64_t k) {
    const st_block_q5_1 *x = vx;
    for (int64_t i = 0; i < k / ST_QK5_1; i++, y += ST_QK5_1) {
        const float d = st_fp16_to_fp32(x[i].d), m = st_fp16_to_fp32(x[i].m);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        for (int j = 0; j < ST_QK5_1 / 2; j++) {
            const int h0 = (int)((qh >> j) << 4) & 0x10;
            const int h1 = (int)(qh >> (j + 12)) & 0x10;
            y[j] = (float)((x[i].qs[j] & 0x0F) | h0) * d + m;
            y[j + ST_QK5_1 / 2] = (float)((x[i].qs[j] >> 4) | h1) * d + m;
        }
    }
}

void st_dequantize_row_q8_0(const void *vx, float *y, int64_t k) {
    const st_block_q8_0 *x = vx;
    for (int64_t i = 0; i < k / ST_QK8_0; i++, y += ST_QK8_0) {
        const float d = st_fp16_to_fp32(x[i].d);
        for (int j = 0; j < ST_QK8_0; j++) y[j] = (float)x[i].qs[j] * d;
    }
}

void st_dequantize_row_q8_1(const void *vx, float *y, int64_t k) {
    const st_block_q8_1 *x = vx;
    for (int64_t i = 0; i < k / ST_QK8_1; i++, y += ST_QK8_1) {
        const float d = st_fp16_to_fp32(x[i].d);
        for (int j = 0; j < ST_QK8_1; j++) y[j] = (float)x[i].qs[j] * d;
    }
}
