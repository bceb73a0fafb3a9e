/*
 * K-quants, scalar reference: quantization (with a weighted least-squares search for
 * the sub-block scales, in the spirit of ggml's make_qkx / make_qx searches),
 * dequantization (ggml's formula exactly, so llama.cpp files decode identically) and
 * the reference dot products that the SIMD kernels are tested against.
 */
#include "quant/kquants.h"

#include "strata/core.h"

#include <math.h>
#include <string.h>

/* Round to nearest, ties to even, for |f| < 2^22: adding 1.5 * 2^23 leaves the rounded
 * integer in the low mantissa bits. Same result as cvtps2dq under the default MXCSR,
 * which the SIMD activation quantizers rely on. */
static inline int kq_round(float f) {
    float v = f + 12582912.f;
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

static inline int kq_clamp(int v, int lo, int hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

/* ---- scale searches -------------------------------------------------------------- */

/* Fits x[i] ~ scale * L[i] - mn with L[i] in [0, nmax] and mn >= 0, minimising the
 * weighted squared error. Starts from the grid that maps [min(x, 0), max(x)] onto
 * [0, nmax] and tries nstep + 1 slightly stretched grids (nmax + rmin + rdelta * is),
 * refitting scale and offset by least squares for each rounding. Returns scale, stores
 * mn; n <= 32. */
static float kq_fit_affine(int n, int nmax, const float *x, const float *w, float *mn, float rmin,
                           float rdelta, int nstep) {
    float lo = x[0], hi = x[0], sw = 0, swx = 0;
    for (int i = 0; i < n; i++) {
        if (x[i] < lo)
            lo = x[i];
        if (x[i] > hi)
            hi = x[i];
        sw += w[i];
        swx += w[i] * x[i];
    }
    if (lo > 0)
        lo = 0; /* the offset only ever subtracts */
    if (hi == lo) {
        *mn = -lo;
        return 0.f;
    }
    float scale = (hi - lo) / nmax, off = lo; /* model: x ~ scale * L + off, off <= 0 */
    float best = 0;
    for (int i = 0; i < n; i++) {
        int l = kq_clamp(kq_round((x[i] - lo) / scale), 0, nmax);
        float e = scale * l + off - x[i];
        best += w[i] * e * e;
    }
    for (int is = 0; is <= nstep; is++) {
        float iscale = (nmax + rmin + rdelta * is) / (hi - lo);
        float sl = 0, sl2 = 0, sxl = 0;
        uint8_t L[32];
        for (int i = 0; i < n; i++) {
            int l = kq_clamp(kq_round(iscale * (x[i] - lo)), 0, nmax);
            L[i] = (uint8_t)l;
            sl += w[i] * l;
            sl2 += w[i] * l * l;
            sxl += w[i] * l * x[i];
        }
        float det = sw * sl2 - sl * sl;
        if (det <= 0)
            continue;
        float a = (sw * sxl - swx * sl) / det;
        float b = (sl2 * swx - sl * sxl) / det;
        if (b > 0) { /* offset must not add: refit the scale alone */
            b = 0;
            a = sxl / sl2;
        }
        float err = 0;
        for (int i = 0; i < n; i++) {
            float e = a * L[i] + b - x[i];
            err += w[i] * e * e;
        }
        if (err < best) {
            best = err;
            scale = a;
            off = b;
        }
    }
    *mn = -off;
    return scale;
}

/* Fits x[i] ~ scale * l[i] with l[i] in [-nmax, nmax - 1], weighting each value by
 * x^2 (large weights matter most). The sign of the scale is chosen so the largest
 * magnitude lands on -nmax, using the asymmetric range fully. Tries 19 grids around
 * nmax / amax and keeps the one with the best least-squares fit. Returns the scale. */
static float kq_fit_symmetric(int n, int nmax, const float *x) {
    float amax = 0, max = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < 1e-15f)
        return 0.f;
    float best = 0, scale = 0;
    for (int is = -9; is <= 9; is++) {
        float iscale = -(nmax + 0.1f * is) / max;
        float slx = 0, sl2 = 0;
        for (int i = 0; i < n; i++) {
            int l = kq_clamp(kq_round(iscale * x[i]), -nmax, nmax - 1);
            float w = x[i] * x[i];
            slx += w * x[i] * l;
            sl2 += w * l * l;
        }
        if (sl2 > 0 && slx * slx > best * sl2) {
            scale = slx / sl2;
            best = scale * slx;
        }
    }
    return scale;
}

/* The 16 sub-block scales of a 16 x 16 super-block (kq_fit_symmetric with levels -nmax ..
 * nmax - 1) into scales[]; returns the one of largest magnitude, 0 when all are ~0. */
static float kq_fit_sub16(const float *x, int nmax, float scales[16]) {
    float max_scale = 0, max_abs = 0;
    for (int j = 0; j < 16; j++) {
        scales[j] = kq_fit_symmetric(16, nmax, x + 16 * j);
        if (fabsf(scales[j]) > max_abs) {
            max_abs = fabsf(scales[j]);
            max_scale = scales[j];
        }
    }
    return max_abs < 1e-15f ? 0.f : max_scale;
}

/* ---- Q4_K / Q5_K shared part ---------------------------------------------------------- */

/* Packs 8 six-bit scales and mins into ggml's 12-byte layout (inverse of
 * st_kq_get_scale_min). */
static void kq_pack_scales(const uint8_t ls[8], const uint8_t lm[8], uint8_t out[K_SCALE_SIZE]) {
    for (int j = 0; j < 4; j++) {
        out[j] = (uint8_t)((ls[j] & 63) | ((ls[j + 4] >> 4) << 6));
        out[j + 4] = (uint8_t)((lm[j] & 63) | ((lm[j + 4] >> 4) << 6));
        out[j + 8] = (uint8_t)((ls[j + 4] & 0xF) | ((lm[j + 4] & 0xF) << 4));
    }
}

/* Quantizes one super-block to levels L[256] in [0, nmax] with 6-bit sub-block scales
 * and mins; fills d, dmin, scales. */
static void kq_quantize_affine_block(const float *x, int nmax, float rmin, float rdelta, int nstep,
                                     uint16_t *d_out, uint16_t *dmin_out, uint8_t *scales_out,
                                     uint8_t L[QK_K]) {
    float scales[8], mins[8], w[32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        float s2 = 0;
        for (int l = 0; l < 32; l++)
            s2 += xs[l] * xs[l];
        const float av = sqrtf(s2 / 32);
        /* weight large values more, but never ignore the small ones */
        for (int l = 0; l < 32; l++)
            w[l] = av + fabsf(xs[l]);
        scales[j] = kq_fit_affine(32, nmax, xs, w, &mins[j], rmin, rdelta, nstep);
        if (scales[j] > max_scale)
            max_scale = scales[j];
        if (mins[j] > max_min)
            max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; j++) {
        ls[j] = (uint8_t)kq_clamp(kq_round(inv_scale * scales[j]), 0, 63);
        lm[j] = (uint8_t)kq_clamp(kq_round(inv_min * mins[j]), 0, 63);
    }
    kq_pack_scales(ls, lm, scales_out);
    *d_out = st_fp32_to_fp16(max_scale / 63.f);
    *dmin_out = st_fp32_to_fp16(max_min / 63.f);

    /* requantize against the scales as stored, so rounding of d and dmin is absorbed */
    const float d = st_fp16_to_fp32(*d_out), dmin = st_fp16_to_fp32(*dmin_out);
    for (int j = 0; j < 8; j++) {
        const float ds = d * ls[j], dm = dmin * lm[j];
        for (int l = 0; l < 32; l++)
            L[32 * j + l] = ds == 0 ? 0 : (uint8_t)kq_clamp(kq_round((x[32 * j + l] + dm) / ds), 0, nmax);
    }
}

void st_quantize_row_q4_K_ref(const float *x, void *vy, int64_t k) {
    ST_ASSERT(k % QK_K == 0);
    st_block_q4_K *y = vy;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < k / QK_K; i++, x += QK_K) {
        kq_quantize_affine_block(x, 15, -1.f, 0.1f, 20, &y[i].d, &y[i].dmin, y[i].scales, L);
        for (int g = 0; g < 4; g++)
            for (int l = 0; l < 32; l++)
                y[i].qs[32 * g + l] = (uint8_t)(L[64 * g + l] | (L[64 * g + 32 + l] << 4));
    }
}

void st_quantize_row_q5_K_ref(const float *x, void *vy, int64_t k) {
    ST_ASSERT(k % QK_K == 0);
    st_block_q5_K *y = vy;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < k / QK_K; i++, x += QK_K) {
        kq_quantize_affine_block(x, 31, -0.5f, 0.1f, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
        memset(y[i].qh, 0, sizeof y[i].qh);
        for (int g = 0; g < 4; g++) {
            for (int l = 0; l < 32; l++) {
                const int lo = L[64 * g + l], hi = L[64 * g + 32 + l];
                y[i].qs[32 * g + l] = (uint8_t)((lo & 0xF) | ((hi & 0xF) << 4));
                y[i].qh[l] |= (uint8_t)(((lo >> 4) << (2 * g)) | ((hi >> 4) << (2 * g + 1)));
            }
        }
    }
}

/* ---- Q2_K ---------------------------------------------------------------------- */

void st_quantize_row_q2_K_ref(const float *x, void *vy, int64_t k) {
    ST_ASSERT(k % QK_K == 0);
    st_block_q2_K *y = vy;
    float w[16];
    for (int l = 0; l < 16; l++) w[l] = 1.f;
    for (int64_t i = 0; i < k / QK_K; i++, x += QK_K) {
        float scales[16], mins[16], max_scale = 0, max_min = 0;
        for (int j = 0; j < 16; j++) {
            scales[j] = kq_fit_affine(16, 3, x + 16 * j, w, &mins[j], -0.5f, 0.1f, 15);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        memset(&y[i], 0, sizeof y[i]);
        /* scales and mins to 4 bits against their super-block maxima */
        const float is = max_scale > 0 ? 15.f / max_scale : 0.f, im = max_min > 0 ? 15.f / max_min : 0.f;
        y[i].d = st_fp32_to_fp16(max_scale > 0 ? max_scale / 15.f : 0.f);
        y[i].dmin = st_fp32_to_fp16(max_min > 0 ? max_min / 15.f : 0.f);
        const float d = st_fp16_to_fp32(y[i].d), dmin = st_fp16_to_fp32(y[i].dmin);
        for (int j = 0; j < 16; j++) {
            const int ls = kq_clamp(kq_round(is * scales[j]), 0, 15), lm = kq_clamp(kq_round(im * mins[j]), 0, 15);
            y[i].scales[j] = (uint8_t)(ls | lm << 4);
            const float ds = d * ls, dm = dmin * lm;
            for (int l = 0; l < 16; l++) {
                const int e = 16 * j + l, h = e / 128, jj = (e % 128) / 32, ll = e % 32;
                const int q = ds == 0 ? 0 : kq_clamp(kq_round((x[e] + dm) / ds), 0, 3);
                y[i].qs[32 * h + ll] |= (uint8_t)(q << (2 * jj));
            }
        }
    }
}

/* The 256 quants of a Q2_K block (0..3) in element order. */
static void kq_unpack_q2_K(const st_block_q2_K *b, int8_t q[QK_K]) {
    for (int e = 0; e < QK_K; e++) q[e] = (int8_t)((b->qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3);
}

/* sum over the 16 sub-blocks of 16 of scale[j] * (q . a) over the sub-block: the integer part
 * of the Q2_K, Q3_K and Q6_K reference dots */
static int32_t kq_sum_sub16(const int8_t q[QK_K], const int8_t a[QK_K], const int8_t sc[16]) {
    int32_t sum = 0;
    for (int j = 0; j < 16; j++) {
        int32_t sj = 0;
        for (int l = 0; l < 16; l++) sj += q[16 * j + l] * a[16 * j + l];
        sum += sc[j] * sj;
    }
    return sum;
}

/* ---- Q3_K ---------------------------------------------------------------------- */

void st_quantize_row_q3_K_ref(const float *x, void *vy, int64_t k) {
    ST_ASSERT(k % QK_K == 0);
    st_block_q3_K *y = vy;
    for (int64_t i = 0; i < k / QK_K; i++, x += QK_K) {
        float scales[16];
        const float max_scale = kq_fit_sub16(x, 4, scales);
        memset(&y[i], 0, sizeof y[i]);
        if (max_scale == 0)
            continue; /* all-zero block: d = 0 */
        /* the largest scale becomes -32 (the 6-bit range's asymmetric end) */
        const float iscale = -32.f / max_scale;
        y[i].d = st_fp32_to_fp16(1 / iscale);
        int8_t sc[16];
        for (int j = 0; j < 16; j++) {
            sc[j] = (int8_t)kq_clamp(kq_round(iscale * scales[j]), -32, 31);
            const int l = sc[j] + 32;
            if (j < 8) y[i].scales[j] = (uint8_t)(l & 0xF);
            else y[i].scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
            y[i].scales[8 + j % 4] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
        }
        const float d = st_fp16_to_fp32(y[i].d);
        for (int e = 0; e < QK_K; e++) {
            const float ds = d * sc[e / 16];
            const int L = ds == 0 ? 4 : kq_clamp(kq_round(x[e] / ds), -4, 3) + 4; /* 0..7 */
            const int h = e / 128, j = (e % 128) / 32, l = e % 32;
            y[i].qs[32 * h + l] |= (uint8_t)((L & 3) << (2 * j));
            if (L & 4) y[i].hmask[l] |= (uint8_t)(1u << (4 * h + j));
        }
    }
}

/* The 256 quants of a Q3_K block (-4..3) in element order. */
static void kq_unpack_q3_K(const st_block_q3_K *b, int8_t q[QK_K]) {
    for (int e = 0; e < QK_K; e++) {
        const int h = e / 128, j = (e % 128) / 32, l = e % 32;
        const int lo = (b->qs[32 * h + l] >> (2 * j)) & 3, hi = (b->hmask[l] >> (4 * h + j)) & 1;
        q[e] = (int8_t)((lo | hi << 2) - 4);
    }
}

/* ---- Q6_K ---------------------------------------------------------------------- */

void st_quantize_row_q6_K_ref(const float *x, void *vy, int64_t k) {
    ST_ASSERT(k % QK_K == 0);
    st_block_q6_K *y = vy;
    for (int64_t i = 0; i < k / QK_K; i++, x += QK_K) {
        float scales[16];
        const float max_scale = kq_fit_sub16(x, 32, scales);
        memset(&y[i], 0, sizeof y[i]);
        if (max_scale == 0)
            continue; /* all-zero block: d = 0 */
        /* the largest scale becomes -128 (int8's asymmetric end), as for the values */
        const float iscale = -128.f / max_scale;
        y[i].d = st_fp32_to_fp16(1 / iscale);
        for (int j = 0; j < 16; j++)
            y[i].scales[j] = (int8_t)kq_clamp(kq_round(iscale * scales[j]), -128, 127);

        uint8_t L[QK_K];
        const float d = st_fp16_to_fp32(y[i].d);
        for (int j = 0; j < 16; j++) {
            const float ds = d * y[i].scales[j];
            for (int l = 0; l < 16; l++)
                L[16 * j + l] =
                    ds == 0 ? 32 : (uint8_t)(kq_clamp(kq_round(x[16 * j + l] / ds), -32, 31) + 32);
        }
        for (int h = 0; h < 2; h++) {
            uint8_t *ql = y[i].ql + 64 * h, *qh = y[i].qh + 32 * h;
            const uint8_t *Lh = L + 128 * h;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((Lh[l] & 0xF) | ((Lh[l + 64] & 0xF) << 4));
                ql[l + 32] = (uint8_t)((Lh[l + 32] & 0xF) | ((Lh[l + 96] & 0xF) << 4));
                qh[l] = (uint8_t)((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) | ((Lh[l + 64] >> 4) << 4) |
                                  ((Lh[l + 96] >> 4) << 6));
            }
        }
    }
}

/* ---- Q8_K ---------------------------------------------------------------------- */

void st_quantize_row_q8_K_ref(const float *x, void *vy, int64_t k) {
    ST_ASSERT(k % QK_K == 0);
    st_block_q8_K *y = vy;
    for (int64_t i = 0; i < k / QK_K; i++, x += QK_K) {
        float amax = 0, max = 0;
        for (int j = 0; j < QK_K; j++) {
            const float ax = fabsf(x[j]);
            if (ax > amax) { /* first of equal magnitudes wins: the SIMD versions match */
                amax = ax;
                max = x[j];
            }
        }
        if (amax == 0) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; j++) {
            float p = iscale * x[j];
            /* keep the product a separate rounding step (no FMA contraction with the
             * rounding constant), exactly as the SIMD mul + cvtps2dq compute it */
#if defined(__x86_64__) || defined(__i386__)
            __asm__("" : "+x"(p));
#endif
            const int v = kq_round(p);
            y[i].qs[j] = (int8_t)(v > 127 ? 127 : v);
        }
        for (int g = 0; g < QK_K / 16; g++) {
            int sum = 0;
            for (int l = 0; l < 16; l++)
                sum += y[i].qs[16 * g + l];
            y[i].bsums[g] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

/* ---- dequantization ------------------------------------------------------------ */

void st_dequantize_row_q2_K(const void *vx, float *y, int64_t k) {
    ST_ASSERT(k % QK_K == 0);
    const st_block_q2_K *x = vx;
    int8_t q[QK_K];
    for (int64_t i = 0; i < k / QK_K; i++) {
        const float d = st_fp16_to_fp32(x[i].d), dmin = st_fp16_to_fp32(x[i].dmin);
        kq_unpack_q2_K(&x[i], q);
        for (int e = 0; e < QK_K; e++) {
            const uint8_t sc = x[i].scales[e / 16];
            *y++ = d * (float)(sc & 0xF) * (float)q[e] - dmin * (float)(sc >> 4);
        }
    }
}

void st_dequantize_row_q3_K(const void *vx, float *y, int64_t k) {
    ST_ASSERT(k % QK_K == 0);
    const st_block_q3_K *x = vx;
    int8_t q[QK_K], sc[16];
    for (int64_t i = 0; i < k / QK_K; i++) {
        const float d = st_fp16_to_fp32(x[i].d);
        kq_unpack_q3_K(&x[i], q);
        st_kq_q3_scales(x[i].scales, sc);
        for (int e = 0; e < QK_K; e++) *y++ = d * (float)sc[e / 16] * (float)q[e];
    }
}

void st_dequantize_row_q4_K(const void *vx, float *y, int64_t k) {
    ST_ASSERT(k % QK_K == 0);
    const st_block_q4_K *x = vx;
    for (int64_t i = 0; i < k / QK_K; i++) {
        const float d = st_fp16_to_fp32(x[i].d), dmin = st_fp16_to_fp32(x[i].dmin);
        const uint8_t *q = x[i].qs;
        for (int g = 0; g < 4; g++, q += 32) {
            uint8_t sc, m;
            st_kq_get_scale_min(2 * g, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            st_kq_get_scale_min(2 * g + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (q[l] >> 4) - m2;
        }
    }
}

void st_dequantize_row_q5_K(const void *vx, float *y, int64_t k) {
    ST_ASSERT(k % QK_K == 0);
    const st_block_q5_K *x = vx;
    for (int64_t i = 0; i < k / QK_K; i++) {
        const float d = st_fp16_to_fp32(x[i].d), dmin = st_fp16_to_fp32(x[i].dmin);
        const uint8_t *q = x[i].qs, *qh = x[i].qh;
        for (int g = 0; g < 4; g++, q += 32) {
            uint8_t sc, m;
            st_kq_get_scale_min(2 * g, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            st_kq_get_scale_min(2 * g + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            const uint8_t u1 = (uint8_t)(1u << (2 * g)), u2 = (uint8_t)(2u << (2 * g));
            for (int l = 0; l < 32; l++)
                *y++ = d1 * ((q[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * ((q[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

/* Unpacks the 256 six-bit quants of a Q6_K block, minus 32, in element order. */
static void kq_unpack_q6_K(const st_block_q6_K *b, int8_t q[QK_K]) {
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
        int8_t *o = q + 128 * h;
        for (int l = 0; l < 32; l++) {
            o[l] = (int8_t)(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
            o[l + 32] = (int8_t)(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
            o[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            o[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
    }
}

void st_dequantize_row_q6_K(const void *vx, float *y, int64_t k) {
    ST_ASSERT(k % QK_K == 0);
    const st_block_q6_K *x = vx;
    int8_t q[QK_K];
    for (int64_t i = 0; i < k / QK_K; i++) {
        const float d = st_fp16_to_fp32(x[i].d);
        kq_unpack_q6_K(&x[i], q);
        /* (d * scale) * q, grouped as ggml does, so the floats match bit for bit */
        for (int j = 0; j < QK_K; j++)
            *y++ = d * x[i].scales[j / 16] * q[j];
    }
}

void st_dequantize_row_q8_K(const void *vx, float *y, int64_t k) {
    ST_ASSERT(k % QK_K == 0);
    const st_block_q8_K *x = vx;
    for (int64_t i = 0; i < k / QK_K; i++)
        for (int j = 0; j < QK_K; j++)
            *y++ = x[i].d * x[i].qs[j];
}

/* ---- reference dot products -------------------------------------------------------
 * Integer sums per sub-block are exact (|sum| < 2^31 by construction); the block
 * results are accumulated in float, as the SIMD kernels do. */

void st_vec_dot_q4_K_q8_K_scalar(int n, float *s, const void *vx, const void *vy) {
    ST_ASSERT(n % QK_K == 0);
    const st_block_q4_K *x = vx;
    const st_block_q8_K *y = vy;
    float sum = 0;
    for (int i = 0; i < n / QK_K; i++) {
        const uint8_t *q = x[i].qs;
        const int8_t *a = y[i].qs;
        int32_t sumi = 0, summ = 0;
        for (int g = 0; g < 4; g++, q += 32, a += 64) {
            uint8_t sc0, m0, sc1, m1;
            st_kq_get_scale_min(2 * g, x[i].scales, &sc0, &m0);
            st_kq_get_scale_min(2 * g + 1, x[i].scales, &sc1, &m1);
            int32_t s0 = 0, s1 = 0;
            for (int l = 0; l < 32; l++) {
                s0 += (q[l] & 0xF) * a[l];
                s1 += (q[l] >> 4) * a[l + 32];
            }
            sumi += sc0 * s0 + sc1 * s1;
            summ += m0 * (y[i].bsums[4 * g] + y[i].bsums[4 * g + 1]) +
                    m1 * (y[i].bsums[4 * g + 2] + y[i].bsums[4 * g + 3]);
        }
        sum += y[i].d * (st_fp16_to_fp32(x[i].d) * (float)sumi - st_fp16_to_fp32(x[i].dmin) * (float)summ);
    }
    *s = sum;
}

void st_vec_dot_q5_K_q8_K_scalar(int n, float *s, const void *vx, const void *vy) {
    ST_ASSERT(n % QK_K == 0);
    const st_block_q5_K *x = vx;
    const st_block_q8_K *y = vy;
    float sum = 0;
    for (int i = 0; i < n / QK_K; i++) {
        const uint8_t *q = x[i].qs, *qh = x[i].qh;
        const int8_t *a = y[i].qs;
        int32_t sumi = 0, summ = 0;
        for (int g = 0; g < 4; g++, q += 32, a += 64) {
            uint8_t sc0, m0, sc1, m1;
            st_kq_get_scale_min(2 * g, x[i].scales, &sc0, &m0);
            st_kq_get_scale_min(2 * g + 1, x[i].scales, &sc1, &m1);
            int32_t s0 = 0, s1 = 0;
            for (int l = 0; l < 32; l++) {
                s0 += ((q[l] & 0xF) | (((qh[l] >> (2 * g)) & 1) << 4)) * a[l];
                s1 += ((q[l] >> 4) | (((qh[l] >> (2 * g + 1)) & 1) << 4)) * a[l + 32];
            }
            sumi += sc0 * s0 + sc1 * s1;
            summ += m0 * (y[i].bsums[4 * g] + y[i].bsums[4 * g + 1]) +
                    m1 * (y[i].bsums[4 * g + 2] + y[i].bsums[4 * g + 3]);
        }
        sum += y[i].d * (st_fp16_to_fp32(x[i].d) * (float)sumi - st_fp16_to_fp32(x[i].dmin) * (float)summ);
    }
    *s = sum;
}

void st_vec_dot_q2_K_q8_K_scalar(int n, float *s, const void *vx, const void *vy) {
    ST_ASSERT(n % QK_K == 0);
    const st_block_q2_K *x = vx;
    const st_block_q8_K *y = vy;
    int8_t q[QK_K];
    float sum = 0;
    for (int i = 0; i < n / QK_K; i++) {
        kq_unpack_q2_K(&x[i], q);
        int8_t sc[16];
        int32_t summ = 0;
        for (int j = 0; j < 16; j++) {
            sc[j] = (int8_t)(x[i].scales[j] & 0xF);
            summ += (x[i].scales[j] >> 4) * y[i].bsums[j];
        }
        const int32_t sumi = kq_sum_sub16(q, y[i].qs, sc);
        sum += y[i].d * (st_fp16_to_fp32(x[i].d) * (float)sumi - st_fp16_to_fp32(x[i].dmin) * (float)summ);
    }
    *s = sum;
}

void st_vec_dot_q3_K_q8_K_scalar(int n, float *s, const void *vx, const void *vy) {
    ST_ASSERT(n % QK_K == 0);
    const st_block_q3_K *x = vx;
    const st_block_q8_K *y = vy;
    int8_t q[QK_K], sc[16];
    float sum = 0;
    for (int i = 0; i < n / QK_K; i++) {
        kq_unpack_q3_K(&x[i], q);
        st_kq_q3_scales(x[i].scales, sc);
        sum += y[i].d * st_fp16_to_fp32(x[i].d) * (float)kq_sum_sub16(q, y[i].qs, sc);
    }
    *s = sum;
}

void st_vec_dot_q6_K_q8_K_scalar(int n, float *s, const void *vx, const void *vy) {
    ST_ASSERT(n % QK_K == 0);
    const st_block_q6_K *x = vx;
    const st_block_q8_K *y = vy;
    int8_t q[QK_K];
    float sum = 0;
    for (int i = 0; i < n / QK_K; i++) {
        kq_unpack_q6_K(&x[i], q);
        sum += y[i].d * st_fp16_to_fp32(x[i].d) * (float)kq_sum_sub16(q, y[i].qs, x[i].scales);
    }
    *s = sum;
}
