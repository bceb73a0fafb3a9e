/* AVX-512 f32 element-wise ops (st_vec_ops); contracts in quant_int.h / quant.h. */
#include "quant_int.h"
#include "core/simd_exp.h"

#include <immintrin.h>
#include <math.h>

/* exp(x) over the whole float range: overflow to inf, underflow to 0 (simd_exp.h) */
static inline __m512 exp_ps(__m512 x) {
    return st_exp512(_mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(89.0f)));
}

static inline __m512 silu_mul16(__m512 g, __m512 u) {
    const __m512 e = exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), g));
    return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), u);
}

void st_silu_mul_avx512(int64_t n, float *g, const float *u) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(g + i, silu_mul16(_mm512_loadu_ps(g + i), _mm512_loadu_ps(u + i)));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(g + i, m, silu_mul16(_mm512_maskz_loadu_ps(m, g + i), _mm512_maskz_loadu_ps(m, u + i)));
    }
}

/* x[i]^2 in f32, summed in f64 over two accumulators (fixed order, so a row's norm never
 * depends on anything but the row) */
void st_rms_norm_avx512(int64_t n, float *y, const float *x, const float *w, float eps) {
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    int64_t i = 0;
    for (; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        const __m512 v = _mm512_maskz_loadu_ps(m, x + i), sq = _mm512_mul_ps(v, v);
        s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(sq)));
        s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sq), 1))));
    }
    const double sum = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
    const __m512 scale = _mm512_set1_ps(1.0f / sqrtf((float)(sum / (double)n) + eps));
    for (i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        const __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), scale),
                                       _mm512_maskz_loadu_ps(m, w + i));
        _mm512_mask_storeu_ps(y + i, m, v);
    }
}
