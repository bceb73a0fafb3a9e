/*
 * K-quant kernels for AVX2 + FMA + F16C without AVX-VNNI: the row kernels of
 * kquants_avx2.h, and the Q8_K activation quantizer.
 */
#include "quant/kquants_avx2.h"

#include <math.h>

static inline int kq_hsum256_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

ST_KQ_DEF_DOT_TILE_(q4_K_q8_K, avx2, st_block_q4_K, KQ_Q4K_ROW_)
ST_KQ_DEF_DOT_TILE_(q5_K_q8_K, avx2, st_block_q5_K, KQ_Q5K_ROW_)
ST_KQ_DEF_DOT_TILE_(q6_K_q8_K, avx2, st_block_q6_K, q6k_row)
ST_KQ_DEF_Q4K_QUAD_AVX2_(avx2)

/* Same arithmetic as st_quantize_row_q8_K_ref, 8 floats at a time: the product
 * iscale * x rounded by cvtps2dq (nearest even) equals the reference's rounding. */
void st_quantize_row_q8_K_avx2(const float *x, void *vy, int64_t k) {
    ST_ASSERT(k % QK_K == 0);
    st_block_q8_K *y = vy;
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i v127 = _mm256_set1_epi32(127);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t i = 0; i < k / QK_K; i++, x += QK_K) {
        __m256 vmax = _mm256_setzero_ps();
        for (int j = 0; j < QK_K; j += 8)
            vmax = _mm256_max_ps(vmax, _mm256_and_ps(_mm256_loadu_ps(x + j), absmask));
        __m128 m = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        m = _mm_max_ss(m, _mm_movehdup_ps(m));
        const float amax = _mm_cvtss_f32(m);
        if (amax == 0) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        /* the reference keeps the first element of largest magnitude: its sign matters */
        float max = 0;
        const __m256 vamax = _mm256_set1_ps(amax);
        for (int j = 0; j < QK_K; j += 8) {
            const int mk = _mm256_movemask_ps(
                _mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(x + j), absmask), vamax, _CMP_EQ_OQ));
            if (mk) {
                max = x[j + __builtin_ctz((unsigned)mk)];
                break;
            }
        }
        const float iscale = -127.f / max;
        const __m256 vis = _mm256_set1_ps(iscale);
        for (int j = 0; j < QK_K; j += 32) {
            __m256i v[4];
            for (int u = 0; u < 4; u++)
                v[u] = _mm256_min_epi32(
                    _mm256_cvtps_epi32(_mm256_mul_ps(vis, _mm256_loadu_ps(x + j + 8 * u))), v127);
            y[i].bsums[j / 16] = (int16_t)kq_hsum256_epi32(_mm256_add_epi32(v[0], v[1]));
            y[i].bsums[j / 16 + 1] = (int16_t)kq_hsum256_epi32(_mm256_add_epi32(v[2], v[3]));
            const __m256i b =
                _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
            _mm256_storeu_si256((__m256i *)(y[i].qs + j), _mm256_permutevar8x32_epi32(b, order));
        }
        y[i].d = 1 / iscale;
    }
}
