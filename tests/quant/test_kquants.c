/* K-quants: layouts proven by hand-built blocks, quantization error, SIMD dots and
 * activation quantization against the scalar reference at awkward lengths.
 * STRATA_ISA=scalar|avx2 limits the SIMD paths tested (e.g. under valgrind). */
#include "../test.h"
#include "quant/kquants.h"
#include "quant_test_util.h"
#include "strata/core.h"
#include "strata/quant.h"

#include <stddef.h>

/* Quantize -> dequantize RMSE, relative to the RMS of the data (fixed seeds, so the
 * values are deterministic). Measured: q4_K 0.0554 / 0.0710, q5_K 0.0279 / 0.0362, q6_K
 * 0.0133 / 0.0180, q8_K 0.0039 / 0.0069 on uniform / Gaussian data. The thresholds sit
 * ~5% above: the same quantizers without the stretched-grid search measure q4_K 0.0606 /
 * 0.0779 and q5_K 0.0294 / 0.0380, and fail them. */
#define RMSE_Q4_K_UNIFORM 0.0585
#define RMSE_Q4_K_GAUSS 0.0750
#define RMSE_Q5_K_UNIFORM 0.0290
#define RMSE_Q5_K_GAUSS 0.0375
#define RMSE_Q6_K_UNIFORM 0.0140
#define RMSE_Q6_K_GAUSS 0.0189
#define RMSE_Q8_K_UNIFORM 0.0041
#define RMSE_Q8_K_GAUSS 0.0072
/* |SIMD dot - scalar dot| and |scalar dot - double dot of the dequantized rows|, relative
 * to sum |x_i * y_i| of the dequantized rows: only float accumulation order differs. */
#define DOT_SIMD_REL_TOL 2e-6
#define DOT_DEQ_REL_TOL 2e-6

typedef void (*quant_fn)(const float *, void *, int64_t);
typedef void (*dequant_fn)(const void *, float *, int64_t);
typedef void (*dot_fn)(int, float *, const void *, const void *);

static const int k_block_counts[] = {1, 3, 7, 15, 17, 31, 33, 127, 1023};
#define N_COUNTS ((int)(sizeof k_block_counts / sizeof k_block_counts[0]))

/* ---- deterministic data ---------------------------------------------------------- */
typedef struct {
    uint64_t s;
} rng_t;
static uint64_t rng_next(rng_t *r) {
    r->s += 0x9E3779B97F4A7C15ull;
    uint64_t z = r->s;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static float rng_uniform(rng_t *r) {
    return (float)((rng_next(r) >> 40) * (1.0 / 16777216.0)) * 2.f - 1.f;
}
static float rng_gauss(rng_t *r) {
    double u1 = ((rng_next(r) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
static void fill(float *x, int64_t n, int gauss, uint64_t seed) {
    rng_t r = {seed};
    for (int64_t i = 0; i < n; i++)
        x[i] = gauss ? rng_gauss(&r) : rng_uniform(&r);
}

/* Which SIMD levels to test (quant_test_util.h): what the CPU has, capped by STRATA_ISA. */
#define allowed_isa qt_allowed_isa
#define max_isa qt_max_isa

/* ---- layouts: hand-built blocks with hand-computed values ------------------------------ */

TEST(test_block_layouts) {
    CHECK_INT(sizeof(st_block_q4_K), 144);
    CHECK_INT(sizeof(st_block_q5_K), 176);
    CHECK_INT(sizeof(st_block_q6_K), 210);
    CHECK_INT(sizeof(st_block_q8_K), 292);
    CHECK_INT(offsetof(st_block_q4_K, scales), 4);
    CHECK_INT(offsetof(st_block_q4_K, qs), 16);
    CHECK_INT(offsetof(st_block_q5_K, qh), 16);
    CHECK_INT(offsetof(st_block_q5_K, qs), 48);
    CHECK_INT(offsetof(st_block_q6_K, qh), 128);
    CHECK_INT(offsetof(st_block_q6_K, scales), 192);
    CHECK_INT(offsetof(st_block_q6_K, d), 208);
    CHECK_INT(offsetof(st_block_q8_K, qs), 4);
    CHECK_INT(offsetof(st_block_q8_K, bsums), 260);
}

/* scales {1,2,3,4,33,45,63,17}, mins {0,5,10,15,20,40,62,31}, packed by hand */
static const uint8_t k_scales12[12] = {0x81, 0x82, 0xC3, 0x44, 0x40, 0x85,
                                       0xCA, 0x4F, 0x41, 0x8D, 0xEF, 0xF1};
static const int k_sc[8] = {1, 2, 3, 4, 33, 45, 63, 17}, k_mn[8] = {0, 5, 10, 15, 20, 40, 62, 31};

TEST(test_scale_min_unpack) {
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        st_kq_get_scale_min(j, k_scales12, &sc, &m);
        CHECK_INT(sc, k_sc[j]);
        CHECK_INT(m, k_mn[j]);
    }
    uint64_t sc, mn;
    st_kq_unpack_scales_mins(k_scales12, &sc, &mn);
    for (int j = 0; j < 8; j++) {
        CHECK_INT((sc >> (8 * j)) & 0xFF, k_sc[j]);
        CHECK_INT((mn >> (8 * j)) & 0xFF, k_mn[j]);
    }
}

TEST(test_q4_K_known_block) {
    st_block_q4_K b;
    memset(&b, 0, sizeof b);
    b.d = 0x3800;    /* 0.5 */
    b.dmin = 0x3400; /* 0.25 */
    memcpy(b.scales, k_scales12, 12);
    b.qs[0] = 0x3A;   /* element 0: 10, element 32: 3 */
    b.qs[127] = 0xF2; /* element 223: 2, element 255: 15 */
    float y[QK_K];
    st_dequantize_row_q4_K(&b, y, QK_K);
    CHECK_NEAR(y[0], 0.5 * 1 * 10 - 0.0, 0);
    CHECK_NEAR(y[32], 0.5 * 2 * 3 - 0.25 * 5, 0);
    CHECK_NEAR(y[223], 0.5 * 63 * 2 - 0.25 * 62, 0);
    CHECK_NEAR(y[255], 0.5 * 17 * 15 - 0.25 * 31, 0);
    CHECK_NEAR(y[1], -0.0, 0);
    CHECK_NEAR(y[100], -0.25 * 15, 0); /* sub-block 3, quant 0 */
}

TEST(test_q5_K_known_block) {
    st_block_q5_K b;
    memset(&b, 0, sizeof b);
    b.d = 0x3800;
    b.dmin = 0x3400;
    memcpy(b.scales, k_scales12, 12);
    b.qs[0] = 0x3A;
    b.qs[127] = 0xF2;
    b.qh[0] = 0x01;  /* 5th bit of element 0 */
    b.qh[31] = 0x80; /* 5th bit of element 255 (sub-block 7, l = 31) */
    b.qh[5] = 0x10;  /* 5th bit of element 32 * 4 + 5 = 133 */
    float y[QK_K];
    st_dequantize_row_q5_K(&b, y, QK_K);
    CHECK_NEAR(y[0], 0.5 * 1 * 26, 0);
    CHECK_NEAR(y[32], 0.5 * 2 * 3 - 0.25 * 5, 0);
    CHECK_NEAR(y[223], 0.5 * 63 * 2 - 0.25 * 62, 0);
    CHECK_NEAR(y[255], 0.5 * 17 * 31 - 0.25 * 31, 0);
    CHECK_NEAR(y[133], 0.5 * 33 * 16 - 0.25 * 20, 0);
}

TEST(test_q6_K_known_block) {
    st_block_q6_K b;
    memset(&b, 0, sizeof b);
    b.d = 0x3800; /* 0.5 */
    const int8_t sc[16] = {1, -2, 3, -4, 5, -6, 7, -8, 9, -10, 11, -12, 13, -14, 15, -128};
    memcpy(b.scales, sc, 16);
    b.ql[0] = 0x5A;   /* element 0 low 4 bits 10, element 64 low 4 bits 5 */
    b.ql[32] = 0x0F;  /* element 32: 15, element 96: 0 */
    b.qh[0] = 0xE4;   /* bit pairs: element 0: 0, 32: 1, 64: 2, 96: 3 */
    b.ql[127] = 0xF0; /* element 255 (half 1, l = 31, +96): low 4 bits 15 */
    b.qh[63] = 0xC0;  /* element 255 high bits 3 */
    float y[QK_K];
    st_dequantize_row_q6_K(&b, y, QK_K);
    CHECK_NEAR(y[0], 0.5 * 1 * (10 - 32), 0);
    CHECK_NEAR(y[32], 0.5 * 3 * (31 - 32), 0);
    CHECK_NEAR(y[64], 0.5 * 5 * (37 - 32), 0);
    CHECK_NEAR(y[96], 0.5 * 7 * (48 - 32), 0);
    CHECK_NEAR(y[255], 0.5 * -128 * (63 - 32), 0);
    CHECK_NEAR(y[1], 0.5 * 1 * -32, 0);
    CHECK_NEAR(y[16], 0.5 * -2 * -32, 0);
}

/* Q3_K as ggml lays it out (ggml-common.h block_q3_K, dequantize_row_q3_K), spelled out
 * bit by bit here rather than through the library's own unpacking: element e = 128 h +
 * 32 j + l has its 2 low bits at bits 2 j of qs[32 h + l] and its high bit at bit 4 h + j
 * of hmask[l] (a clear high bit means -4); scale s has its low nibble in scales[s] (s < 8)
 * or the high nibble of scales[s - 8], its top 2 bits at bits 2 (s / 4) of scales[8 +
 * s % 4], and is stored + 32. */
TEST(test_q3_K_known_block) {
    st_block_q3_K b;
    memset(&b, 0, sizeof b);
    b.d = 0x3800; /* 0.5 */
    int sc[16], v[QK_K];
    for (int s = 0; s < 16; s++) {
        sc[s] = s % 2 ? -(s + 3) : s + 2; /* 2, -4, 4, -6, ... within -32..31 */
        const int u = sc[s] + 32;
        if (s < 8) b.scales[s] |= (uint8_t)(u & 0xF);
        else b.scales[s - 8] |= (uint8_t)((u & 0xF) << 4);
        b.scales[8 + s % 4] |= (uint8_t)((u >> 4) << (2 * (s / 4)));
    }
    for (int e = 0; e < QK_K; e++) {
        v[e] = (e * 5 + e / 7) % 8 - 4; /* every value -4..3, in no simple pattern */
        const int h = e / 128, j = (e % 128) / 32, l = e % 32, u = v[e] + 4;
        b.qs[32 * h + l] |= (uint8_t)((u & 3) << (2 * j));
        if (u & 4) b.hmask[l] |= (uint8_t)(1 << (4 * h + j));
    }
    /* two cells checked against bytes written out by hand: element 0 (v = -4: low bits 0,
     * high bit clear) and scale 15 (-18 + 32 = 14: nibble 0xE in scales[7] high, top bits
     * 0 at bits 6-7 of scales[11]) */
    CHECK_INT(b.qs[0] & 3, 0);
    CHECK_INT(b.hmask[0] & 1, 0);
    CHECK_INT(b.scales[7] >> 4, 0xE);
    CHECK_INT(b.scales[11] >> 6, 0);
    float y[QK_K];
    st_dequantize_row_q3_K(&b, y, QK_K);
    int bad = 0;
    for (int e = 0; e < QK_K; e++) bad += y[e] != 0.5f * (float)sc[e / 16] * (float)v[e];
    CHECK_INT(bad, 0);
    /* a dot with all-ones activations is the exact integer sum: every table's kernel */
    st_block_q8_K a;
    memset(&a, 0, sizeof a);
    a.d = 1.0f;
    for (int e = 0; e < QK_K; e++) a.qs[e] = 1;
    for (int g = 0; g < 16; g++) a.bsums[g] = 16;
    long exact = 0;
    for (int e = 0; e < QK_K; e++) exact += (long)sc[e / 16] * v[e];
    for (int isa = ST_ISA_SCALAR; isa <= max_isa(); isa++) {
        float got = NAN;
        st_kernels_get((st_isa)isa)->type[ST_TYPE_Q3_K].vec_dot(QK_K, &got, &b, &a);
        CHECK_NEAR(got, 0.5 * (double)exact, 0);
    }
}

/* Q2_K as ggml lays it out (block_q2_K, dequantize_row_q2_K): scales[s] holds sub-block s's
 * scale (low nibble) and min (high nibble), then qs (element e = 128 h + 32 j + l at bits
 * 2 j of qs[32 h + l]), then d and dmin. */
TEST(test_q2_K_known_block) {
    uint8_t raw[84] = {0};
    int sc[16], mn[16], v[QK_K];
    for (int s = 0; s < 16; s++) {
        sc[s] = (s * 7) % 16, mn[s] = (s * 5 + 3) % 16;
        raw[s] = (uint8_t)(sc[s] | mn[s] << 4);
    }
    for (int e = 0; e < QK_K; e++) {
        v[e] = (e * 3 + e / 5) % 4;
        raw[16 + 32 * (e / 128) + e % 32] |= (uint8_t)(v[e] << (2 * ((e % 128) / 32)));
    }
    raw[80] = 0x00, raw[81] = 0x38; /* d = 0.5 */
    raw[82] = 0x00, raw[83] = 0x34; /* dmin = 0.25 */
    float y[QK_K];
    st_dequantize_row_q2_K(raw, y, QK_K);
    int bad = 0;
    for (int e = 0; e < QK_K; e++) bad += y[e] != 0.5f * sc[e / 16] * v[e] - 0.25f * mn[e / 16];
    CHECK_INT(bad, 0);
    st_block_q8_K a;
    memset(&a, 0, sizeof a);
    a.d = 1.0f;
    for (int e = 0; e < QK_K; e++) a.qs[e] = (int8_t)(e % 2 ? -1 : 2);
    for (int g = 0; g < 16; g++) a.bsums[g] = 8; /* 8 * 2 + 8 * -1 */
    double exact = 0;
    for (int e = 0; e < QK_K; e++) exact += (0.5 * sc[e / 16] * v[e] - 0.25 * mn[e / 16]) * a.qs[e];
    for (int isa = ST_ISA_SCALAR; isa <= max_isa(); isa++) {
        float got = NAN;
        st_kernels_get((st_isa)isa)->type[ST_TYPE_Q2_K].vec_dot(QK_K, &got, raw, &a);
        CHECK_NEAR(got, exact, 0);
    }
}

TEST(test_q8_K_known_block_and_rounding) {
    st_block_q8_K b;
    memset(&b, 0, sizeof b);
    b.d = 0.25f;
    for (int j = 0; j < QK_K; j++)
        b.qs[j] = (int8_t)(j - 128);
    float y[QK_K];
    st_dequantize_row_q8_K(&b, y, QK_K);
    CHECK_NEAR(y[0], -32.0, 0);
    CHECK_NEAR(y[255], 0.25 * 127, 0);

    /* max magnitude -127 gives iscale 1: x.5 values show ties-to-even rounding */
    float x[QK_K];
    for (int j = 0; j < QK_K; j++)
        x[j] = (float)(j % 100) - 49.5f;
    x[7] = -127.f;
    x[8] = 127.f; /* same magnitude later: the first one (negative) decides the sign */
    st_block_q8_K q;
    st_quantize_row_q8_K_ref(x, &q, QK_K);
    CHECK_NEAR(q.d, 1.0, 0); /* iscale = -127 / max = 1 */
    CHECK_INT(q.qs[7], -127);
    CHECK_INT(q.qs[8], 127);
    CHECK_INT(q.qs[0], -50); /* -49.5 -> -50 (even) */
    CHECK_INT(q.qs[1], -48); /* -48.5 -> -48 */
    CHECK_INT(q.qs[99], 50); /* 49.5 -> 50 */
    CHECK_INT(q.qs[98], 48); /* 48.5 -> 48 */
    int s0 = 0;
    for (int l = 0; l < 16; l++)
        s0 += q.qs[l];
    CHECK_INT(q.bsums[0], s0);
}

/* ---- quantization error ---------------------------------------------------------------- */

static double rel_rmse(quant_fn qf, dequant_fn df, size_t block_bytes, int gauss, uint64_t seed) {
    const int64_t n = 64 * QK_K;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    void *q = malloc((size_t)(n / QK_K) * block_bytes);
    fill(x, n, gauss, seed);
    qf(x, q, n);
    df(q, y, n);
    double se = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) {
        se += (double)(x[i] - y[i]) * (x[i] - y[i]);
        s2 += (double)x[i] * x[i];
    }
    free(x);
    free(y);
    free(q);
    return sqrt(se / s2);
}

TEST(test_quantize_rmse) {
    struct {
        const char *name;
        quant_fn q;
        dequant_fn d;
        size_t bs;
        double tu, tg;
    } t[] = {
        {"q4_K", st_quantize_row_q4_K_ref, st_dequantize_row_q4_K, sizeof(st_block_q4_K), RMSE_Q4_K_UNIFORM,
         RMSE_Q4_K_GAUSS},
        {"q5_K", st_quantize_row_q5_K_ref, st_dequantize_row_q5_K, sizeof(st_block_q5_K), RMSE_Q5_K_UNIFORM,
         RMSE_Q5_K_GAUSS},
        {"q6_K", st_quantize_row_q6_K_ref, st_dequantize_row_q6_K, sizeof(st_block_q6_K), RMSE_Q6_K_UNIFORM,
         RMSE_Q6_K_GAUSS},
        {"q8_K", st_quantize_row_q8_K_ref, st_dequantize_row_q8_K, sizeof(st_block_q8_K), RMSE_Q8_K_UNIFORM,
         RMSE_Q8_K_GAUSS},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        double ru = rel_rmse(t[i].q, t[i].d, t[i].bs, 0, 11 + i);
        double rg = rel_rmse(t[i].q, t[i].d, t[i].bs, 1, 23 + i);
        fprintf(stderr, "  %s relative RMSE: uniform %.5f (max %.4f), gaussian %.5f (max %.4f)\n", t[i].name,
                ru, t[i].tu, rg, t[i].tg);
        CHECK(ru <= t[i].tu);
        CHECK(rg <= t[i].tg);
    }
}

/* The scale/min search must beat plain min-max rounding per 32-weight sub-block, even
 * when that baseline keeps its scales and mins as exact floats (q4_K's are 6-bit). */
TEST(test_q4_K_search_beats_minmax) {
    const int64_t n = 64 * QK_K;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    st_block_q4_K *q = malloc((size_t)(n / QK_K) * sizeof *q);
    REQUIRE(x && y && q);
    fill(x, n, 1, 77);
    double se_naive = 0, se = 0;
    for (int64_t s = 0; s < n; s += 32) {
        float lo = x[s], hi = x[s];
        for (int l = 1; l < 32; l++) {
            lo = fminf(lo, x[s + l]);
            hi = fmaxf(hi, x[s + l]);
        }
        const float step = (hi - lo) / 15;
        for (int l = 0; l < 32; l++) {
            const float v = lo + step * nearbyintf((x[s + l] - lo) / step);
            se_naive += (double)(v - x[s + l]) * (v - x[s + l]);
        }
    }
    st_quantize_row_q4_K_ref(x, q, n);
    st_dequantize_row_q4_K(q, y, n);
    for (int64_t i = 0; i < n; i++)
        se += (double)(y[i] - x[i]) * (y[i] - x[i]);
    fprintf(stderr, "  q4_K squared error %.4g vs float-scale min-max %.4g\n", se, se_naive);
    CHECK(se < 0.95 * se_naive);
    free(x);
    free(y);
    free(q);
}

/* Degenerate blocks: zeros, constants, a lone spike, tiny values. Finite output, zeros
 * exact, and the spike reproduced within the type's step. */
TEST(test_quantize_degenerate_blocks) {
    quant_fn qf[3] = {st_quantize_row_q4_K_ref, st_quantize_row_q5_K_ref, st_quantize_row_q6_K_ref};
    dequant_fn df[3] = {st_dequantize_row_q4_K, st_dequantize_row_q5_K, st_dequantize_row_q6_K};
    const double step[3] = {1.0 / 15, 1.0 / 31, 1.0 / 32};
    uint8_t buf[sizeof(st_block_q6_K)]; /* the largest weight block */
    float x[QK_K], y[QK_K];
    for (int t = 0; t < 3; t++) {
        for (int kind = 0; kind < 4; kind++) {
            for (int j = 0; j < QK_K; j++)
                x[j] = kind == 0 ? 0.f : kind == 1 ? 0.75f : kind == 2 ? 0.f : 1e-6f * (j % 7);
            if (kind == 2)
                x[77] = -3.f;
            qf[t](x, buf, QK_K);
            df[t](buf, y, QK_K);
            int finite = 1;
            double maxerr = 0;
            for (int j = 0; j < QK_K; j++) {
                if (!isfinite(y[j]))
                    finite = 0;
                if (fabs(y[j] - x[j]) > maxerr)
                    maxerr = fabs(y[j] - x[j]);
            }
            CHECK(finite);
            if (kind == 0)
                CHECK_NEAR(maxerr, 0, 0);
            if (kind == 1)
                CHECK_NEAR(maxerr, 0, 0.75 * 0.02);
            if (kind == 2)
                CHECK_NEAR(y[77], -3.0, 3.0 * step[t]);
            if (kind == 2)
                CHECK_NEAR(y[0], 0, 3.0 * step[t]);
            /* 1e-6-sized values underflow the fp16 super-block scale (as in ggml): they
             * may all become 0, but never anything larger than the input range */
            if (kind == 3)
                CHECK(maxerr <= 6.001e-6);
        }
    }
}

/* ---- dot products ------------------------------------------------------------------ */

typedef struct {
    const char *name;
    quant_fn quant;
    dequant_fn dequant;
    size_t block_bytes;
    dot_fn dot[3]; /* scalar, avx2, avx512 */
} dot_case;

static const dot_case k_dots[] = {
    {"q4_K",
     st_quantize_row_q4_K_ref,
     st_dequantize_row_q4_K,
     sizeof(st_block_q4_K),
     {st_vec_dot_q4_K_q8_K_scalar, st_vec_dot_q4_K_q8_K_avx2, st_vec_dot_q4_K_q8_K_avx512}},
    {"q5_K",
     st_quantize_row_q5_K_ref,
     st_dequantize_row_q5_K,
     sizeof(st_block_q5_K),
     {st_vec_dot_q5_K_q8_K_scalar, st_vec_dot_q5_K_q8_K_avx2, st_vec_dot_q5_K_q8_K_avx512}},
    {"q6_K",
     st_quantize_row_q6_K_ref,
     st_dequantize_row_q6_K,
     sizeof(st_block_q6_K),
     {st_vec_dot_q6_K_q8_K_scalar, st_vec_dot_q6_K_q8_K_avx2, st_vec_dot_q6_K_q8_K_avx512}},
    {"q3_K",
     st_quantize_row_q3_K_ref,
     st_dequantize_row_q3_K,
     sizeof(st_block_q3_K),
     {st_vec_dot_q3_K_q8_K_scalar, st_vec_dot_q3_K_q8_K_avx2, st_vec_dot_q3_K_q8_K_avx512}},
    {"q2_K",
     st_quantize_row_q2_K_ref,
     st_dequantize_row_q2_K,
     sizeof(st_block_q2_K),
     {st_vec_dot_q2_K_q8_K_scalar, st_vec_dot_q2_K_q8_K_avx2, st_vec_dot_q2_K_q8_K_avx512}},
};

/* Runs every dot case at every block count; for each checks scalar against the double
 * dot of the dequantized rows and every available SIMD path against scalar. Data of
 * varied magnitude per block exercises the per-block scales. */
TEST(test_dots_against_reference) {
    const int top = max_isa();
    if (top < ST_ISA_AVX2)
        test_untested("no AVX2+FMA+F16C+BMI2 on this CPU (or STRATA_ISA=scalar): SIMD K-quant dots untested");
    else if (top < ST_ISA_AVX512)
        test_untested("no AVX-512 with VNNI on this CPU (or STRATA_ISA=avx2): AVX-512 K-quant dots untested");
    const int64_t nmax = (int64_t)1023 * QK_K;
    float *x = malloc(nmax * sizeof *x), *a = malloc(nmax * sizeof *a);
    float *xd = malloc(nmax * sizeof *xd), *ad = malloc(nmax * sizeof *ad);
    void *qx = malloc(1023 * sizeof(st_block_q8_K)), *qa = malloc(1023 * sizeof(st_block_q8_K));
    REQUIRE(x && a && xd && ad && qx && qa);
    for (size_t c = 0; c < sizeof k_dots / sizeof k_dots[0]; c++) {
        const dot_case *dc = &k_dots[c];
        for (int ci = 0; ci < N_COUNTS; ci++) {
            const int nb = k_block_counts[ci], n = nb * QK_K;
            fill(x, n, (ci & 1), 100 + 7 * c + ci);
            fill(a, n, !(ci & 1), 200 + 7 * c + ci);
            for (int i = 0; i < n; i++)
                x[i] *= 1.f + (float)((i / QK_K) % 5); /* per-block range */
            if (ci == 0)
                for (int i = 0; i < QK_K; i++)
                    a[i] = fabsf(a[i]) + 0.5f; /* biased: mins matter */
            dc->quant(x, qx, n);
            st_quantize_row_q8_K_ref(a, qa, n);
            dc->dequant(qx, xd, n);
            st_dequantize_row_q8_K(qa, ad, n);
            double exact = 0, mag = 0;
            for (int i = 0; i < n; i++) {
                exact += (double)xd[i] * ad[i];
                mag += fabs((double)xd[i] * ad[i]);
            }
            float ref = NAN;
            dc->dot[0](n, &ref, qx, qa);
            if (fabs(ref - exact) > DOT_DEQ_REL_TOL * mag)
                fprintf(stderr, "  %s scalar, %d blocks: %.9g vs exact %.9g\n", dc->name, nb, ref, exact);
            CHECK_NEAR(ref, exact, DOT_DEQ_REL_TOL * mag);
            for (int isa = ST_ISA_AVX2; isa <= top; isa++) {
                float got = NAN;
                dc->dot[isa](n, &got, qx, qa);
                if (fabs(got - ref) > DOT_SIMD_REL_TOL * mag)
                    fprintf(stderr, "  %s %s, %d blocks: %.9g vs scalar %.9g\n", dc->name, st_isa_name(isa),
                            nb, got, ref);
                CHECK_NEAR(got, ref, DOT_SIMD_REL_TOL * mag);
            }
        }
    }
    free(x);
    free(a);
    free(xd);
    free(ad);
    free(qx);
    free(qa);
}

/* Extreme blocks: every quant at its maximum and activations at +-127 / -128 must not
 * overflow the int16 / int32 intermediates of any path. */
TEST(test_dots_extreme_values) {
    const int top = max_isa();
    st_block_q8_K qa[2];
    memset(qa, 0, sizeof qa);
    for (int b = 0; b < 2; b++) {
        qa[b].d = 1.f / 127;
        for (int j = 0; j < QK_K; j++)
            qa[b].qs[j] = b ? -128 : 127;
        for (int g = 0; g < 16; g++)
            qa[b].bsums[g] = (int16_t)(16 * qa[b].qs[0]);
    }
    uint8_t qx[2 * sizeof(st_block_q6_K)]; /* the largest weight block */
    for (size_t c = 0; c < sizeof k_dots / sizeof k_dots[0]; c++) {
        memset(qx, 0xFF, sizeof qx); /* all quants, scales and mins at their maximum */
        const size_t bs = k_dots[c].block_bytes;
        for (int b = 0; b < 2; b++) {
            uint8_t *blk = qx + b * bs;
            if (c == 2) {
                memset(blk + 192, 0x80, 16); /* q6_K scales -128 */
                blk[208] = 0x00;
                blk[209] = 0x3C; /* d = 1 */
            } else if (c == 3) { /* q3_K: quants 3, scales 31 */
                blk[108] = 0x00;
                blk[109] = 0x3C; /* d = 1 */
            } else if (c == 4) { /* q2_K: quants 3, scales and mins 15 */
                blk[80] = 0x00;
                blk[81] = 0x3C; /* d = 1 */
                blk[82] = 0x00;
                blk[83] = 0x3C; /* dmin = 1 */
            } else {
                blk[0] = 0x00;
                blk[1] = 0x3C; /* d = 1 */
                blk[2] = 0x00;
                blk[3] = 0x3C; /* dmin = 1 */
            }
        }
        float xd[2 * QK_K], ad[2 * QK_K];
        k_dots[c].dequant(qx, xd, 2 * QK_K);
        st_dequantize_row_q8_K(qa, ad, 2 * QK_K);
        double exact = 0, mag = 0;
        for (int i = 0; i < 2 * QK_K; i++) {
            exact += (double)xd[i] * ad[i];
            mag += fabs((double)xd[i] * ad[i]);
        }
        for (int isa = ST_ISA_SCALAR; isa <= top; isa++) {
            float got = NAN;
            k_dots[c].dot[isa](2 * QK_K, &got, qx, qa);
            if (fabs(got - exact) > DOT_DEQ_REL_TOL * mag)
                fprintf(stderr, "  %s %s extreme: %.9g vs %.9g\n", k_dots[c].name, st_isa_name(isa), got,
                        exact);
            CHECK_NEAR(got, exact, DOT_DEQ_REL_TOL * mag);
        }
    }
}

/* ---- activation quantization: SIMD bytes equal the reference bytes --------------------- */

TEST(test_q8_K_simd_bytes_equal_ref) {
    /* the AVX-512 quantizer needs no VNNI */
    const int top_q = allowed_isa(0);
    if (top_q < ST_ISA_AVX2) {
        test_skip("no AVX2 on this CPU (or STRATA_ISA=scalar): SIMD q8_K quantization untested");
        return;
    }
    quant_fn simd[3] = {NULL, st_quantize_row_q8_K_avx2, st_quantize_row_q8_K_avx512};
    const int64_t nmax = (int64_t)1023 * QK_K;
    float *x = malloc(nmax * sizeof *x);
    st_block_q8_K *r = malloc(1023 * sizeof *r), *s = malloc(1023 * sizeof *s);
    REQUIRE(x && r && s);
    for (int ci = 0; ci < N_COUNTS; ci++) {
        const int nb = k_block_counts[ci];
        const int64_t n = (int64_t)nb * QK_K;
        fill(x, n, ci & 1, 300 + ci);
        for (int b = 0; b < nb; b++) {
            float *xb = x + (int64_t)b * QK_K;
            switch (b % 6) {
            case 1:
                memset(xb, 0, QK_K * sizeof *xb);
                break; /* all zero */
            case 2:
                xb[3] = 5.f;
                xb[200] = -5.f;
                break; /* tie: + first */
            case 3:
                xb[3] = -5.f;
                xb[200] = 5.f;
                break; /* tie: - first */
            case 4:
                for (int j = 0; j < QK_K; j++)
                    xb[j] = (float)(j % 255) - 127.f + 0.5f * (j & 1);
                break;
            case 5:
                for (int j = 0; j < QK_K; j++)
                    xb[j] *= 1e-30f;
                break; /* tiny */
            }
        }
        st_quantize_row_q8_K_ref(x, r, n);
        for (int isa = ST_ISA_AVX2; isa <= top_q; isa++) {
            memset(s, 0xAB, (size_t)nb * sizeof *s);
            simd[isa](x, s, n);
            int same = memcmp(r, s, (size_t)nb * sizeof *s) == 0;
            if (!same)
                fprintf(stderr, "  q8_K %s differs from ref at %d blocks\n", st_isa_name(isa), nb);
            CHECK(same);
        }
    }
    free(x);
    free(r);
    free(s);
}

/* ---- the SIMD builds of each ISA: AVX-512 with GFNI and without, AVX2 with AVX-VNNI and without */

typedef void (*tile_fn)(int, float *, size_t, const void *, size_t, const void *, size_t, int, int);

typedef struct {
    const char *name;
    dot_fn dot[3];   /* q4_K, q5_K, q6_K */
    tile_fn tile[3];
} kq_build;

static const kq_build k_builds[] = {
    {"avx2",
     {st_vec_dot_q4_K_q8_K_avx2, st_vec_dot_q5_K_q8_K_avx2, st_vec_dot_q6_K_q8_K_avx2},
     {st_tile_q4_K_q8_K_avx2, st_tile_q5_K_q8_K_avx2, st_tile_q6_K_q8_K_avx2}},
    {"avx2vnni",
     {st_vec_dot_q4_K_q8_K_avx2vnni, st_vec_dot_q5_K_q8_K_avx2vnni, st_vec_dot_q6_K_q8_K_avx2vnni},
     {st_tile_q4_K_q8_K_avx2vnni, st_tile_q5_K_q8_K_avx2vnni, st_tile_q6_K_q8_K_avx2vnni}},
    {"avx512",
     {st_vec_dot_q4_K_q8_K_avx512, st_vec_dot_q5_K_q8_K_avx512, st_vec_dot_q6_K_q8_K_avx512},
     {st_tile_q4_K_q8_K_avx512, st_tile_q5_K_q8_K_avx512, st_tile_q6_K_q8_K_avx512}},
    {"avx512gfni",
     {st_vec_dot_q4_K_q8_K_avx512gfni, st_vec_dot_q5_K_q8_K_avx512gfni, st_vec_dot_q6_K_q8_K_avx512gfni},
     {st_tile_q4_K_q8_K_avx512gfni, st_tile_q5_K_q8_K_avx512gfni, st_tile_q6_K_q8_K_avx512gfni}},
};

/* Whether this CPU (and STRATA_ISA) lets build bi run; noted as untested when not. */
static int build_runs(int bi) {
    const int isa = bi < 2 ? ST_ISA_AVX2 : ST_ISA_AVX512;
    const int extra = bi == 1 ? st_cpu_has_avxvnni() : bi == 3 ? st_cpu_has_gfni() : 1;
    if (max_isa() >= isa && extra) return 1;
    char why[128];
    snprintf(why, sizeof why, "the %s K-quant build cannot run on this CPU (or STRATA_ISA): untested", k_builds[bi].name);
    test_untested(why);
    return 0;
}

/* Every build against the scalar reference (random rows, and blocks with every quant,
 * scale and min at its maximum against -128 activations, where a vpackssdw would saturate
 * if a sum did not fit in int16), each build's tiles against its own dot bit for bit, the
 * two AVX-512 builds against each other bit for bit (same arithmetic), and the dispatch:
 * each ISA's table carries the build this CPU can run best. The builds the CPU's tables do
 * not pick (plain AVX2 beside AVX-VNNI, plain AVX-512 beside GFNI) are only reached here. */
TEST(test_kquant_simd_builds) {
    const quant_fn quant[3] = {st_quantize_row_q4_K_ref, st_quantize_row_q5_K_ref, st_quantize_row_q6_K_ref};
    const dot_fn ref[3] = {st_vec_dot_q4_K_q8_K_scalar, st_vec_dot_q5_K_q8_K_scalar, st_vec_dot_q6_K_q8_K_scalar};
    const dequant_fn deq[3] = {st_dequantize_row_q4_K, st_dequantize_row_q5_K, st_dequantize_row_q6_K};
    const size_t bbytes[3] = {sizeof(st_block_q4_K), sizeof(st_block_q5_K), sizeof(st_block_q6_K)};
    const st_type types[3] = {ST_TYPE_Q4_K, ST_TYPE_Q5_K, ST_TYPE_Q6_K};
    enum { NB = 33, NR = 4, NC = 4 };
    const int n = NB * QK_K;
    float *x = malloc((size_t)n * sizeof *x), *xd = malloc((size_t)n * sizeof *xd), *ad = malloc((size_t)n * sizeof *ad);
    uint8_t *qx = malloc((size_t)NR * NB * sizeof(st_block_q6_K));
    st_block_q8_K *qa = malloc((size_t)NC * NB * sizeof *qa);
    REQUIRE(x && xd && ad && qx && qa);
    for (int c = 0; c < NC; c++) {
        fill(x, n, c & 1, 700 + c);
        st_quantize_row_q8_K_ref(x, qa + (size_t)c * NB, n);
    }
    /* activation row 3, block 0: all -128 (the largest magnitude a Q8_K byte holds) */
    for (int j = 0; j < QK_K; j++)
        qa[3 * NB].qs[j] = -128;
    for (int g = 0; g < QK_K / 16; g++)
        qa[3 * NB].bsums[g] = -128 * 16;
    int runs[4];
    for (int bi = 0; bi < 4; bi++)
        runs[bi] = build_runs(bi);
    for (int k = 0; k < 3; k++) {
        const size_t rb = (size_t)NB * bbytes[k];
        for (int r = 0; r < NR; r++) {
            fill(x, n, r & 1, 800 + 10 * k + r);
            quant[k](x, qx + r * rb, n);
        }
        /* row 2, block 0: every quant, scale and min at its maximum, d (and dmin) 1 */
        uint8_t *ext = qx + 2 * rb;
        memset(ext, 0xFF, bbytes[k]);
        const uint8_t one[2] = {0x00, 0x3C};
        if (k == 2) {
            memcpy(ext + offsetof(st_block_q6_K, d), one, 2);
        } else {
            memcpy(ext, one, 2);
            memcpy(ext + 2, one, 2);
        }
        for (int r = 0; r < NR; r++) {
            for (int c = 0; c < NC; c++) {
                const int nbs[2] = {1, NB}; /* one block (the extreme ones where r = 2, c = 3) and all */
                for (int v = 0; v < 2; v++) {
                    const int m = nbs[v] * QK_K;
                    deq[k](qx + r * rb, xd, m);
                    st_dequantize_row_q8_K(qa + (size_t)c * NB, ad, m);
                    double mag = 0;
                    for (int i = 0; i < m; i++)
                        mag += fabs((double)xd[i] * ad[i]);
                    float want = NAN, got[4];
                    ref[k](m, &want, qx + r * rb, qa + (size_t)c * NB);
                    for (int bi = 0; bi < 4; bi++) {
                        if (!runs[bi]) continue;
                        got[bi] = NAN;
                        k_builds[bi].dot[k](m, &got[bi], qx + r * rb, qa + (size_t)c * NB);
                        if (!(fabs(got[bi] - want) <= DOT_SIMD_REL_TOL * mag))
                            fprintf(stderr, "  q%d_K %s row %d act %d, %d blocks: %.9g vs scalar %.9g\n", 4 + k,
                                    k_builds[bi].name, r, c, nbs[v], got[bi], want);
                        CHECK_NEAR(got[bi], want, DOT_SIMD_REL_TOL * mag);
                    }
                    if (runs[2] && runs[3]) CHECK(memcmp(&got[2], &got[3], sizeof got[2]) == 0);
                }
            }
        }
        /* every tile shape of each build equals that build's dot, element by element */
        for (int bi = 0; bi < 4; bi++) {
            if (!runs[bi]) continue;
            for (int nr = 1; nr <= NR; nr++) {
                for (int nc = 1; nc <= NC; nc++) {
                    float t[NR * NC];
                    k_builds[bi].tile[k](n, t, NR, qx, rb, qa, NB * sizeof *qa, nr, nc);
                    for (int r = 0; r < nr; r++) {
                        for (int c = 0; c < nc; c++) {
                            float d = NAN;
                            k_builds[bi].dot[k](n, &d, qx + r * rb, qa + (size_t)c * NB);
                            CHECK(memcmp(&d, &t[c * NR + r], sizeof d) == 0);
                        }
                    }
                }
            }
        }
        /* dispatch: the best build this CPU runs, in each ISA's table */
        const st_kernels *k2 = st_kernels_get(ST_ISA_AVX2), *k5 = st_kernels_get(ST_ISA_AVX512);
        if (runs[0] && k2->isa == ST_ISA_AVX2)
            CHECK(k2->type[types[k]].vec_dot == k_builds[runs[1] ? 1 : 0].dot[k] &&
                  k2->type[types[k]].tile == k_builds[runs[1] ? 1 : 0].tile[k]);
        if (runs[2] && k5->isa == ST_ISA_AVX512)
            CHECK(k5->type[types[k]].vec_dot == k_builds[runs[3] ? 3 : 2].dot[k] &&
                  k5->type[types[k]].tile == k_builds[runs[3] ? 3 : 2].tile[k]);
    }
    free(x);
    free(xd);
    free(ad);
    free(qx);
    free(qa);
}

TEST_MAIN(test_block_layouts, test_scale_min_unpack, test_q4_K_known_block, test_q5_K_known_block,
          test_q6_K_known_block, test_q3_K_known_block, test_q2_K_known_block,
          test_q8_K_known_block_and_rounding, test_quantize_rmse,
          test_q4_K_search_beats_minmax, test_quantize_degenerate_blocks, test_dots_against_reference,
          test_dots_extreme_values, test_q8_K_simd_bytes_equal_ref, test_kquant_simd_builds)
