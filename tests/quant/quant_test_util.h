/* Shared by the quant tests: deterministic data, the list of weight types with their
 * named error thresholds, and an f64 reference dot over dequantized rows. */
#ifndef STRATA_QUANT_TEST_UTIL_H
#define STRATA_QUANT_TEST_UTIL_H

#include "strata/core.h"
#include "strata/quant.h"

#include <math.h>
#include <stdlib.h>

typedef struct qt_type {
    st_type t;
    /* quantize -> dequantize RMS error / RMS of the data, on uniform [-1, 1) data.
     * Uniform rounding noise gives step / sqrt(12): q4_0 step = amax/8 -> 0.0625,
     * q4_1 2 amax/15 -> 0.067, q5_0 amax/16 -> 0.031, q5_1 -> 0.032, q8_0 amax/127 ->
     * 0.0039, q3_K amax/4 -> 0.125, q2_K 2 amax/3 -> 0.33 (0.22 with the fitted offset and range); the K-quants fit sub-block scales so do at least as well. f16 / bf16:
     * half an ulp of 11 / 8 mantissa bits. The thresholds leave ~35% headroom. */
    double max_rel_rmse;
    /* |quantized dot - exact f64 dot of the original floats| / sum |x_i y_i|: weight
     * and activation rounding errors, mostly cancelling over a long row. */
    double max_dot_rel;
} qt_type;

static const qt_type QT_TYPES[] = {
    {ST_TYPE_F32, 1e-7, 1e-6},     {ST_TYPE_F16, 4e-4, 1e-3},    {ST_TYPE_BF16, 3e-3, 6e-3},
    {ST_TYPE_Q8_0, 0.0055, 0.01},  {ST_TYPE_Q4_0, 0.085, 0.06},  {ST_TYPE_Q4_1, 0.09, 0.06},
    {ST_TYPE_Q5_0, 0.043, 0.03},   {ST_TYPE_Q5_1, 0.045, 0.03},  {ST_TYPE_Q4_K, 0.09, 0.06},
    {ST_TYPE_Q5_K, 0.045, 0.03},   {ST_TYPE_Q6_K, 0.022, 0.015}, {ST_TYPE_Q3_K, 0.17, 0.03},
    {ST_TYPE_Q2_K, 0.30, 0.05},
};
#define QT_N_TYPES ((int)(sizeof QT_TYPES / sizeof QT_TYPES[0]))

/* SIMD dot vs scalar reference on identical inputs: only the float summation order
 * differs, so the difference is a few ulps of sum |w_i x_i| (f32 products summed over
 * up to ~300k terms, both sides in f32). */
#define QT_SIMD_DOT_REL_TOL 2e-5

/* The best ISA the tests may use: the CPU's, capped by STRATA_ISA (scalar | avx2, e.g.
 * under valgrind); with need_vnni, AVX2 when AVX-512 comes without VNNI (the AVX-512
 * K-quant and quad kernels need it). */
static inline int qt_allowed_isa(int need_vnni) {
    int isa = (int)st_cpu_best_isa();
    const char *e = getenv("STRATA_ISA");
    if (e && *e) {
        const int want = st_isa_parse(e);
        if (want >= 0 && want < isa) isa = want;
    }
    if (need_vnni && isa >= ST_ISA_AVX512 && !st_cpu_has_vnni()) isa = ST_ISA_AVX2;
    return isa;
}
static inline int qt_max_isa(void) { return qt_allowed_isa(1); }

typedef struct qt_rng {
    uint64_t s;
} qt_rng;

static inline float qt_uniform(qt_rng *r) { /* [-1, 1) */
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return (float)((r->s * 2685821657736338717ull) >> 40) / (float)(1 << 23) - 1.0f;
}

static inline void qt_fill(qt_rng *r, float *x, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++) x[i] = scale * qt_uniform(r);
}

/* sum |x_i y_i| and sum x_i y_i in f64 */
static inline double qt_dot64(const float *x, const float *y, int64_t n, double *abs_sum) {
    double s = 0, a = 0;
    for (int64_t i = 0; i < n; i++) {
        s += (double)x[i] * (double)y[i];
        a += fabs((double)x[i] * (double)y[i]);
    }
    if (abs_sum) *abs_sum = a;
    return s;
}

#endif
