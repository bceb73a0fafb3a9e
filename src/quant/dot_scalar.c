/* Scalar reference dot products: weight row . activation row.
 *
 * As ggml's reference: the integer products of a block are summed exactly in int, then
 * scaled by the two block scales and added to a float sum in block order. The SIMD
 * kernels keep the integer part exact too and differ only in float summation order. */
#include "quant_int.h"

void st_vec_dot_f32_f32_scalar(int n, float *s, const void *vx, const void *vy) {
    const float *x = vx, *y = vy;
    double sum = 0.0; /* the reference is the accurate one; SIMD is compared against it */
    for (int i = 0; i < n; i++) sum += (double)x[i] * (double)y[i];
    *s = (float)sum;
}

/* F16 weights . F16 activations (what matvec uses for f16 weights: half the activation
 * bytes; products of two f16 are exact in f64, so this is the exact dot of the rounded
 * inputs up to the f64 sum). */
void st_vec_dot_f16_f16_scalar(int n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx, *y = vy;
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (double)st_fp16_to_fp32(x[i]) * (double)st_fp16_to_fp32(y[i]);
    *s = (float)sum;
}

void st_vec_dot_bf16_f32_scalar(int n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx;
    const float *y = vy;
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (double)st_bf16_to_fp32(x[i]) * (double)y[i];
    *s = (float)sum;
}

void st_vec_dot_q4_0_q8_0_scalar(int n, float *s, const void *vx, const void *vy) {
    const st_block_q4_0 *x = vx;
    const st_block_q8_0 *y = vy;
    float sumf = 0.0f;
    for (int i = 0; i < n / ST_QK8_0; i++) {
        int sumi = 0;
        for (int j = 0; j < ST_QK4_0 / 2; j++) {
            sumi += ((x[i].qs[j] & 0x0F) - 8) * y[i].qs[j];
            sumi += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + ST_QK4_0 / 2];
        }
        sumf += (float)sumi * (st_fp16_to_fp32(x[i].d) * st_fp16_to_fp32(y[i].d));
    }
    *s = sumf;
}

void st_vec_dot_q4_1_q8_1_scalar(int n, float *s, const void *vx, const void *vy) {
    const st_block_q4_1 *x = vx;
    const st_block_q8_1 *y = vy;
    float sumf = 0.0f;
    for (int i = 0; i < n / ST_QK8_1; i++) {
        int sumi = 0;
        for (int j = 0; j < ST_QK4_1 / 2; j++) {
            sumi += (x[i].qs[j] & 0x0F) * y[i].qs[j];
            sumi += (x[i].qs[j] >> 4) * y[i].qs[j + ST_QK4_1 / 2];
        }
        sumf += (st_fp16_to_fp32(x[i].d) * st_fp16_to_fp32(y[i].d)) * (float)sumi +
                st_fp16_to_fp32(x[i].m) * st_fp16_to_fp32(y[i].s);
    }
    *s = sumf;
}

void st_vec_dot_q5_0_q8_0_scalar(int n, float *s, const void *vx, const void *vy) {
    const st_block_q5_0 *x = vx;
    const st_block_q8_0 *y = vy;
    float sumf = 0.0f;
    for (int i = 0; i < n / ST_QK8_0; i++) {
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        int sumi = 0;
        for (int j = 0; j < ST_QK5_0 / 2; j++) {
            const int h0 = (int)((qh >> j) << 4) & 0x10;
            const int h1 = (int)(qh >> (j + 12)) & 0x10;
            sumi += (((x[i].qs[j] & 0x0F) | h0) - 16) * y[i].qs[j];
            sumi += (((x[i].qs[j] >> 4) | h1) - 16) * y[i].qs[j + ST_QK5_0 / 2];
        }
        sumf += (float)sumi * (st_fp16_to_fp32(x[i].d) * st_fp16_to_fp32(y[i].d));
    }
    *s = sumf;
}

void st_vec_dot_q5_1_q8_1_scalar(int n, float *s, const void *vx, const void *vy) {
    const st_block_q5_1 *x = vx;
    const st_block_q8_1 *y = vy;
    float sumf = 0.0f;
    for (int i = 0; i < n / ST_QK8_1; i++) {
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        int sumi = 0;
        for (int j = 0; j < ST_QK5_1 / 2; j++) {
            const int h0 = (int)((qh >> j) << 4) & 0x10;
            const int h1 = (int)(qh >> (j + 12)) & 0x10;
            sumi += ((x[i].qs[j] & 0x0F) | h0) * y[i].qs[j];
            sumi += ((x[i].qs[j] >> 4) | h1) * y[i].qs[j + ST_QK5_1 / 2];
        }
        sumf += (st_fp16_to_fp32(x[i].d) * st_fp16_to_fp32(y[i].d)) * (float)sumi +
                st_fp16_to_fp32(x[i].m) * st_fp16_to_fp32(y[i].s);
    }
    *s = sumf;
}

void st_vec_dot_q8_0_q8_0_scalar(int n, float *s, const void *vx, const void *vy) {
    const st_block_q8_0 *x = vx;
    const st_block_q8_0 *y = vy;
    float sumf = 0.0f;
    for (int i = 0; i < n / ST_QK8_0; i++) {
        int sumi = 0;
        for (int j = 0; j < ST_QK8_0; j++) sumi += x[i].qs[j] * y[i].qs[j];
        sumf += (float)sumi * (st_fp16_to_fp32(x[i].d) * st_fp16_to_fp32(y[i].d));
    }
    *s = sumf;
}
