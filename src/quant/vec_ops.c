/* Scalar reference of the f32 element-wise ops (st_vec_ops): libm expf, and the rms_norm
 * order of ggml (f32 squares summed in f64, one pass). */
#include "quant_int.h"

#include <math.h>

void st_silu_mul_scalar(int64_t n, float *g, const float *u) {
    for (int64_t i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

void st_rms_norm_scalar(int64_t n, float *y, const float *x, const float *w, float eps) {
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float scale = 1.0f / sqrtf((float)(sum / (double)n) + eps);
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] * scale) * w[i];
}
