/* Private to the library: the polynomial exp(x) of the SIMD kernels (the attention softmax
 * in src/attn, SiLU in src/quant), one definition for both. Cody-Waite reduction by ln 2
 * (ln 2 split in two parts) and a degree-6 polynomial on the remainder: relative error
 * about 2e-7, and exp(0) == 1 exactly. Each caller clamps x to the range it needs first;
 * each function states the range it accepts. Include from *_avx2.c / *_avx512.c only. */
#ifndef STRATA_SIMD_EXP_H
#define STRATA_SIMD_EXP_H

#include <immintrin.h>

/* n = round(x / ln 2) and p ~ exp(x - n ln 2), so that exp(x) = p * 2^n, in vector type V
 * with that width's intrinsics. */
#define ST_EXP_POLY_(V, set1, fmadd, fnmadd, mul, round_n, x, n, p)                         \
    do {                                                                                     \
        n = round_n(mul(x, set1(1.44269504088896341f)));                                     \
        V r_ = fnmadd(n, set1(0.693359375f), x);                                             \
        r_ = fnmadd(n, set1(-2.12194440e-4f), r_);                                           \
        p = set1(1.0f / 720);                                                                \
        p = fmadd(p, r_, set1(1.0f / 120));                                                  \
        p = fmadd(p, r_, set1(1.0f / 24));                                                   \
        p = fmadd(p, r_, set1(1.0f / 6));                                                    \
        p = fmadd(p, r_, set1(0.5f));                                                        \
        p = fmadd(p, r_, set1(1.0f));                                                        \
        p = fmadd(p, r_, set1(1.0f));                                                        \
    } while (0)

#if defined(__AVX512F__)
#define ST_ROUND512_(v) _mm512_roundscale_ps((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
/* x in [-104, 89] (not -inf: clamp first): the result overflows to inf and underflows to 0
 * as exp does. */
static inline __m512 st_exp512(__m512 x) {
    __m512 n, p;
    ST_EXP_POLY_(__m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_fnmadd_ps, _mm512_mul_ps,
                 ST_ROUND512_, x, n, p);
    return _mm512_scalef_ps(p, n);
}
#endif

#if defined(__AVX2__) && defined(__FMA__)
#define ST_ROUND256_(v) _mm256_round_ps((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
/* x in [-87.3, 88]: 2^n is then a normal float, built in its exponent field. */
static inline __m256 st_exp256(__m256 x) {
    __m256 n, p;
    ST_EXP_POLY_(__m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_fnmadd_ps, _mm256_mul_ps,
                 ST_ROUND256_, x, n, p);
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}
#endif

#endif
