/* AVX2 f32 element-wise ops (st_vec_ops); contracts in quant_int.h / quant.h. */
#include "quant_int.h"
#include "core/simd_exp.h"

#include <immintrin.h>
#include <math.h>

/* exp(x) (simd_exp.h) with x clamped to [-87.3, 88], where 2^n is a normal float; above 88
 * the result is inf (as libm's from ~88.7: the gap is below silu's resolution), below
 * -87.3 it stays at exp(-87.3) ~ 1e-38, which next to 1 is 0. */
static inline __m256 exp_ps(__m256 x) {
    const __m256 e = st_exp256(_mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.0f)));
    return _mm256_blendv_ps(e, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, _mm256_set1_ps(88.0f), _CMP_GT_OQ));
}

static inline __m256 silu_mul8(__m256 g, __m256 u) {
    const __m256 e = exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), g));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

static inline __m256i tail_mask(int64_t k) { /* lanes < k set, k in 1..7 */
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

void st_silu_mul_avx2(int64_t n, float *g, const float *u) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(g + i, silu_mul8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
    if (i < n) {
        const __m256i m = tail_mask(n - i);
        _mm256_maskstore_ps(g + i, m, silu_mul8(_mm256_maskload_ps(g + i, m), _mm256_maskload_ps(u + i, m)));
    }
}

void st_rms_norm_avx2(int64_t n, float *y, const float *x, const float *w, float eps) {
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i < n; i += 8) {
        const __m256 v = n - i >= 8 ? _mm256_loadu_ps(x + i) : _mm256_maskload_ps(x + i, tail_mask(n - i));
        const __m256 sq = _mm256_mul_ps(v, v);
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(sq, 1)));
    }
    const __m256d s = _mm256_add_pd(s0, s1);
    const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    const double sum = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
    const __m256 scale = _mm256_set1_ps(1.0f / sqrtf((float)(sum / (double)n) + eps));
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), scale), _mm256_loadu_ps(w + i)));
    if (i < n) {
        const __m256i m = tail_mask(n - i);
        _mm256_maskstore_ps(y + i, m, _mm256_mul_ps(_mm256_mul_ps(_mm256_maskload_ps(x + i, m), scale),
                                                    _mm256_maskload_ps(w + i, m)));
    }
}
