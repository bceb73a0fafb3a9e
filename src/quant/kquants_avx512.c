/*
 * K-quant kernels for AVX-512 (F, BW, VL, DQ) plus AVX512-VNNI, without GFNI: the
 * row kernels of kquants_avx512.h, and the Q8_K activation quantizer.
 *
 * The dots require AVX512-VNNI at run time as well (vpdpbusd, vpdpwssd): dispatch must
 * only pick them when st_cpu_has_vnni() (every Zen 4/5 and Ice Lake or newer has it).
 */
#include "quant/kquants_avx512.h"

#include <math.h>

ST_KQ_DEF_DOT_TILE_(q4_K_q8_K, avx512, st_block_q4_K, KQ_Q4K_ROW_)
ST_KQ_DEF_DOT_TILE_(q5_K_q8_K, avx512, st_block_q5_K, KQ_Q5K_ROW_)
ST_KQ_DEF_DOT_TILE_(q6_K_q8_K, avx512, st_block_q6_K, q6k_row)
ST_KQ_DEF_QUAD_(q4_K_q8_K, avx512, KQ_Q4K_QUAD_ROWS_, 0)
ST_KQ_DEF_QUAD_(q5_K_q8_K, avx512, KQ_Q5K_QUAD_ROWS_, 0)
ST_KQ_DEF_QUAD_(q6_K_q8_K, avx512, q6k_quad_rows, 8 * (size_t)nb)

/* Same arithmetic as st_quantize_row_q8_K_ref, 16 floats at a time: the product
 * iscale * x rounded by cvtps2dq (nearest even) equals the reference's rounding. */
void st_quantize_row_q8_K_avx512(const float *x, void *vy, int64_t k) {
    ST_ASSERT(k % QK_K == 0);
    st_block_q8_K *y = vy;
    for (int64_t i = 0; i < k / QK_K; i++, x += QK_K) {
        __m512 vmax = _mm512_setzero_ps();
        for (int j = 0; j < QK_K; j += 16)
            vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_loadu_ps(x + j)));
        const float amax = _mm512_reduce_max_ps(vmax);
        if (amax == 0) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        /* the reference keeps the first element of largest magnitude: its sign matters */
        float max = 0;
        const __m512 vamax = _mm512_set1_ps(amax);
        for (int j = 0; j < QK_K; j += 16) {
            const __mmask16 m = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + j)), vamax, _CMP_EQ_OQ);
            if (m) {
                max = x[j + __builtin_ctz(m)];
                break;
            }
        }
        const float iscale = -127.f / max;
        const __m512 vis = _mm512_set1_ps(iscale);
        const __m512i v127 = _mm512_set1_epi32(127);
        for (int g = 0; g < QK_K / 16; g++) {
            __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(vis, _mm512_loadu_ps(x + 16 * g)));
            v = _mm512_min_epi32(v, v127);
            _mm_storeu_si128((__m128i *)(y[i].qs + 16 * g), _mm512_cvtsepi32_epi8(v));
            y[i].bsums[g] = (int16_t)_mm512_reduce_add_epi32(v);
        }
        y[i].d = 1 / iscale;
    }
}
