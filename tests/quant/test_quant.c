/* Tensor types and kernels: ggml bit-compatibility on hand-built blocks, round-trip
 * error per type, every SIMD path against its scalar reference at awkward lengths,
 * tiles against vec_dot (bit-identical), quantized dots against exact f64 dots. */
#include "strata/quant.h"
#include "quant/quant_int.h"
#include "quant/kquants.h"
#include "../test.h"
#include "quant_test_util.h"

static const int BLOCK_COUNTS[] = {1, 3, 7, 15, 17, 31, 33, 127, 1023};

/* ISAs to compare with scalar: those the CPU (and STRATA_ISA) allows, noting
 * the others as untested. */
static int simd_isas(st_isa out[2]) {
    int n = 0;
    const char *env = getenv("STRATA_ISA");
    int cap = env ? st_isa_parse(env) : (int)ST_ISA_AVX512;
    if (cap < 0) cap = ST_ISA_AVX512;
    if (cap >= ST_ISA_AVX2 && st_kernels_get(ST_ISA_AVX2)->isa == ST_ISA_AVX2)
        out[n++] = ST_ISA_AVX2;
    else
        test_untested("AVX2 kernels: CPU lacks AVX2+FMA+F16C+BMI2 (or STRATA_ISA=scalar)");
    if (cap >= ST_ISA_AVX512 && st_kernels_get(ST_ISA_AVX512)->isa == ST_ISA_AVX512)
        out[n++] = ST_ISA_AVX512;
    else
        test_untested("AVX-512 kernels: CPU lacks AVX-512 F/BW/VL/DQ + VNNI (or STRATA_ISA forbids)");
    return n;
}

TEST(test_block_geometry) {
    CHECK_INT(st_type_size(ST_TYPE_Q4_0), sizeof(st_block_q4_0));
    CHECK_INT(st_type_size(ST_TYPE_Q4_1), sizeof(st_block_q4_1));
    CHECK_INT(st_type_size(ST_TYPE_Q5_0), sizeof(st_block_q5_0));
    CHECK_INT(st_type_size(ST_TYPE_Q5_1), sizeof(st_block_q5_1));
    CHECK_INT(st_type_size(ST_TYPE_Q8_0), sizeof(st_block_q8_0));
    CHECK_INT(st_type_size(ST_TYPE_Q8_1), sizeof(st_block_q8_1));
    CHECK_INT(st_type_size(ST_TYPE_Q4_K), sizeof(st_block_q4_K));
    CHECK_INT(st_type_size(ST_TYPE_Q5_K), sizeof(st_block_q5_K));
    CHECK_INT(st_type_size(ST_TYPE_Q6_K), sizeof(st_block_q6_K));
    CHECK_INT(st_type_size(ST_TYPE_Q8_K), sizeof(st_block_q8_K));
    CHECK_INT(st_type_vec_dot_type(ST_TYPE_Q4_0), ST_TYPE_Q8_0);
    CHECK_INT(st_type_vec_dot_type(ST_TYPE_Q5_1), ST_TYPE_Q8_1);
    CHECK_INT(st_type_vec_dot_type(ST_TYPE_Q6_K), ST_TYPE_Q8_K);
    CHECK_INT(st_type_vec_dot_type(ST_TYPE_F16), ST_TYPE_F16);
    CHECK_INT(st_type_vec_dot_type(ST_TYPE_BF16), ST_TYPE_F32);
    CHECK_INT(st_type_vec_dot_type(ST_TYPE_Q2_K), ST_TYPE_Q8_K);
    CHECK_INT(st_type_size(ST_TYPE_Q2_K), sizeof(st_block_q2_K));
    CHECK_INT(st_type_size(ST_TYPE_Q3_K), sizeof(st_block_q3_K));
    CHECK_INT(st_type_vec_dot_type(ST_TYPE_IQ4_XS), ST_TYPE_COUNT_);
    CHECK_INT(st_type_vec_dot_type(ST_TYPE_Q8_1), ST_TYPE_COUNT_); /* activation only */
    CHECK(st_type_has_kernels(ST_TYPE_Q8_K));
    CHECK(!st_type_has_kernels(ST_TYPE_IQ4_NL));
    CHECK(st_type_is_quantized(ST_TYPE_Q4_1));
    CHECK(!st_type_is_quantized(ST_TYPE_BF16));
    CHECK_INT(st_act_bytes(ST_TYPE_Q4_0, 64), 2 * 34);
    CHECK_INT(st_act_bytes(ST_TYPE_Q4_1, 64), 2 * 36);
    CHECK_INT(st_act_bytes(ST_TYPE_Q4_K, 512), 2 * 292);
    CHECK_INT(st_act_bytes(ST_TYPE_F16, 10), 20); /* f16 activations */
    CHECK_INT(st_act_bytes(ST_TYPE_F32, 10), 40);
    CHECK_INT(st_act_bytes(ST_TYPE_Q4_K, 32), 0);
    CHECK_INT(st_kernels_get(ST_ISA_SCALAR)->isa, ST_ISA_SCALAR);
}

/* Blocks written byte by byte as ggml lays them out decode to the values ggml's
 * dequantize_row_* gives (formulas from ggml-common.h / ggml-quants.c). */
TEST(test_ggml_known_blocks) {
    float y[32];
    /* q4_0: d = 0.5 (fp16 0x3800); qs[j] = j | (15 - j) << 4 */
    uint8_t b40[18] = {0x00, 0x38};
    for (int j = 0; j < 16; j++) b40[2 + j] = (uint8_t)(j | (15 - j) << 4);
    CHECK_OK(st_dequantize_row(ST_TYPE_Q4_0, b40, y, 32));
    for (int j = 0; j < 16; j++) {
        CHECK_NEAR(y[j], (j - 8) * 0.5, 0);
        CHECK_NEAR(y[j + 16], (15 - j - 8) * 0.5, 0);
    }
    /* q4_1: d = 1.0 (0x3C00), m = -2.0 (0xC000) */
    uint8_t b41[20] = {0x00, 0x3C, 0x00, 0xC0};
    for (int j = 0; j < 16; j++) b41[4 + j] = (uint8_t)(j | (15 - j) << 4);
    CHECK_OK(st_dequantize_row(ST_TYPE_Q4_1, b41, y, 32));
    for (int j = 0; j < 16; j++) {
        CHECK_NEAR(y[j], j - 2.0, 0);
        CHECK_NEAR(y[j + 16], 15 - j - 2.0, 0);
    }
    /* q5_0: d = 2.0 (0x4000), qh = 0x80000001 (bytes 01 00 00 80): element 0 and 31
     * get bit 4; nibbles all 0x3 (low) / 0x5 (high) */
    uint8_t b50[22] = {0x00, 0x40, 0x01, 0x00, 0x00, 0x80};
    for (int j = 0; j < 16; j++) b50[6 + j] = 0x53;
    CHECK_OK(st_dequantize_row(ST_TYPE_Q5_0, b50, y, 32));
    CHECK_NEAR(y[0], (0x13 - 16) * 2.0, 0);
    CHECK_NEAR(y[1], (0x03 - 16) * 2.0, 0);
    CHECK_NEAR(y[16], (0x05 - 16) * 2.0, 0);
    CHECK_NEAR(y[31], (0x15 - 16) * 2.0, 0);
    /* q5_1: d = 0.25 (0x3400), m = 1.0 (0x3C00), qh = 0x00010000 -> element 16 */
    uint8_t b51[24] = {0x00, 0x34, 0x00, 0x3C, 0x00, 0x00, 0x01, 0x00};
    for (int j = 0; j < 16; j++) b51[8 + j] = 0xF0;
    CHECK_OK(st_dequantize_row(ST_TYPE_Q5_1, b51, y, 32));
    CHECK_NEAR(y[0], 1.0, 0);
    CHECK_NEAR(y[15], 1.0, 0);
    CHECK_NEAR(y[16], 0x1F * 0.25 + 1.0, 0);
    CHECK_NEAR(y[17], 0x0F * 0.25 + 1.0, 0);
    /* q8_0: d = 0.25, qs[j] = j - 16 */
    uint8_t b80[34] = {0x00, 0x34};
    for (int j = 0; j < 32; j++) b80[2 + j] = (uint8_t)(int8_t)(j - 16);
    CHECK_OK(st_dequantize_row(ST_TYPE_Q8_0, b80, y, 32));
    for (int j = 0; j < 32; j++) CHECK_NEAR(y[j], (j - 16) * 0.25, 0);
}

/* The reference quantizers produce ggml's exact bytes on data with known answers. */
TEST(test_ggml_known_quantization) {
    float x[32] = {0};
    x[0] = -8.0f, x[1] = 7.0f, x[2] = 0.4f, x[3] = 0.6f, x[16] = -7.6f, x[17] = 3.0f;
    uint8_t q[34];
    /* q4_0: max = -8 -> d = 1.0, q = (int8)(x + 8.5) clamped to 15 */
    CHECK_OK(st_quantize_row(ST_TYPE_Q4_0, x, q, 32));
    CHECK_INT(q[0] | q[1] << 8, 0x3C00);
    CHECK_INT(q[2], 0 | 0 << 4);  /* x0 = -8 -> 0; x16 = -7.6 -> (int)0.9 = 0 */
    CHECK_INT(q[3], 15 | 11 << 4); /* 7 -> 15; 3 -> 11 */
    CHECK_INT(q[4], 8 | 8 << 4);  /* 0.4 -> 8 */
    CHECK_INT(q[5], 9 | 8 << 4);  /* 0.6 -> 9 */
    /* q8_0: amax = 8 -> d = 8/127, q = round(x * 127/8) */
    CHECK_OK(st_quantize_row(ST_TYPE_Q8_0, x, q, 32));
    CHECK_INT(q[0] | q[1] << 8, st_fp32_to_fp16(8.0f / 127));
    CHECK_INT((int8_t)q[2], -127);
    CHECK_INT((int8_t)q[3], 111); /* 7 * 15.875 = 111.125 */
    CHECK_INT((int8_t)q[5], 10);  /* 0.6 * 15.875 = 9.525 */
    CHECK_INT((int8_t)q[18], -121); /* -7.6 * 15.875 = -120.65 */
    /* Errors: unsupported types and bad lengths */
    float y[32];
    CHECK_INT(st_quantize_row(ST_TYPE_IQ4_NL, x, q, 32), ST_E_UNSUPPORTED);
    CHECK_INT(st_dequantize_row(ST_TYPE_IQ2_XS, q, y, 256), ST_E_UNSUPPORTED);
    CHECK_INT(st_quantize_row(ST_TYPE_Q8_0, x, q, 31), ST_E_INVAL);
    CHECK_INT(st_quantize_row(ST_TYPE_Q8_0, x, q, -32), ST_E_INVAL);
    CHECK_INT(st_dequantize_row(ST_TYPE_Q8_0, NULL, y, 32), ST_E_INVAL);
    CHECK_INT(st_quantize_row((st_type)99, x, q, 32), ST_E_UNSUPPORTED);
}

TEST(test_roundtrip_error) {
    const int64_t n = 256 * 64;
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    void *q = malloc(n * 4);
    REQUIRE(x && y && q);
    qt_rng r = {42};
    qt_fill(&r, x, n, 1.0f);
    for (int i = 0; i < QT_N_TYPES; i++) {
        const st_type t = QT_TYPES[i].t;
        CHECK_OK(st_quantize_row(t, x, q, n));
        CHECK_OK(st_dequantize_row(t, q, y, n));
        double se = 0, sx = 0;
        for (int64_t j = 0; j < n; j++) {
            se += (double)(x[j] - y[j]) * (x[j] - y[j]);
            sx += (double)x[j] * x[j];
        }
        const double rel = sqrt(se / sx);
        if (!(rel <= QT_TYPES[i].max_rel_rmse))
            fprintf(stderr, "  %s: relative RMSE %.5f > %.5f\n", st_type_name(t), rel, QT_TYPES[i].max_rel_rmse);
        CHECK(rel <= QT_TYPES[i].max_rel_rmse);
        CHECK(t == ST_TYPE_F32 ? rel == 0 : rel > 0); /* the check can fail */
    }
    free(x), free(y), free(q);
}

/* Every SIMD vec_dot equals the scalar one on the same bytes, at awkward lengths, and
 * every tile element equals the same table's vec_dot bit for bit. */
TEST(test_simd_dot_vs_scalar) {
    st_isa isas[2];
    const int n_isa = simd_isas(isas);
    const st_kernels *ks = st_kernels_get(ST_ISA_SCALAR);
    const int64_t nmax = 1023 * 256;
    float *w = malloc(nmax * 4 * sizeof(float)), *x = malloc(nmax * 4 * sizeof(float));
    float *wd = malloc(nmax * sizeof(float)), *xd = malloc(nmax * sizeof(float));
    uint8_t *wq = malloc(nmax * 4 * 4), *xq = malloc(nmax * 4 * 4);
    REQUIRE(w && x && wd && xd && wq && xq);
    qt_rng r = {7};
    qt_fill(&r, w, nmax * 4, 1.0f);
    qt_fill(&r, x, nmax * 4, 3.0f);
    int n_cmp = 0;
    for (int ti = 0; ti < QT_N_TYPES; ti++) {
        const st_type t = QT_TYPES[ti].t, at = st_type_vec_dot_type(t);
        const int64_t blck = st_type_block_size(t) > 1 ? st_type_block_size(t) : 32;
        for (size_t bi = 0; bi <= sizeof BLOCK_COUNTS / sizeof BLOCK_COUNTS[0]; bi++) {
            /* the extra last case: an odd float length (f32/f16/bf16 masked tails) */
            int64_t n = bi < sizeof BLOCK_COUNTS / sizeof BLOCK_COUNTS[0] ? BLOCK_COUNTS[bi] * blck : 1001;
            if (n % st_type_block_size(t)) continue;
            const size_t rb = st_row_bytes(t, n), ab = st_row_bytes(at, n);
            for (int j = 0; j < 4; j++) { /* 4 weight rows and 4 activation rows */
                CHECK_OK(st_quantize_row(t, w + j * n, wq + j * rb, n));
                CHECK_OK(st_quantize_row(at, x + j * n, xq + j * ab, n));
            }
            CHECK_OK(st_dequantize_row(t, wq, wd, n));
            CHECK_OK(st_dequantize_row(at, xq, xd, n));
            double abs_sum;
            qt_dot64(wd, xd, n, &abs_sum);
            float ref;
            ks->type[t].vec_dot((int)n, &ref, wq, xq);
            for (int ii = 0; ii < n_isa; ii++) {
                const st_kernels *k = st_kernels_get(isas[ii]);
                float s;
                k->type[t].vec_dot((int)n, &s, wq, xq);
                n_cmp++;
                if (!(fabs(s - ref) <= QT_SIMD_DOT_REL_TOL * abs_sum))
                    fprintf(stderr, "  %s %s n=%lld: %.9g vs scalar %.9g (sum|wx| %.6g)\n", st_isa_name(isas[ii]),
                            st_type_name(t), (long long)n, s, ref, abs_sum);
                CHECK(fabs(s - ref) <= QT_SIMD_DOT_REL_TOL * abs_sum);
                if (!k->type[t].tile) continue;
                for (int nr = 1; nr <= ST_TILE_MAX; nr++)
                    for (int nc = 1; nc <= ST_TILE_MAX; nc++) {
                        float tile[ST_TILE_MAX * ST_TILE_MAX], one;
                        k->type[t].tile((int)n, tile, ST_TILE_MAX, wq, rb, xq, ab, nr, nc);
                        int same = 1;
                        for (int a = 0; a < nr; a++)
                            for (int c = 0; c < nc; c++) {
                                k->type[t].vec_dot((int)n, &one, wq + a * rb, xq + c * ab);
                                same &= memcmp(&one, &tile[c * ST_TILE_MAX + a], sizeof one) == 0;
                            }
                        if (!same) fprintf(stderr, "  %s tile %dx%d n=%lld differs from vec_dot\n", st_type_name(t), nr, nc, (long long)n);
                        CHECK(same);
                    }
            }
        }
    }
    fprintf(stderr, "  %d SIMD dots compared with scalar\n", n_cmp);
    CHECK(n_cmp >= n_isa * QT_N_TYPES * 9);
    free(w), free(x), free(wd), free(xd), free(wq), free(xq);
}

/* SIMD activation quantizers agree with the reference: same scale, quants within one
 * step (exact ties may round to even), and q8_1's block sum consistent. The f16
 * conversion must be bit-identical (both round to nearest even), also over an odd
 * length that exercises the scalar tail. */
TEST(test_simd_act_quantize) {
    st_isa isas[2];
    const int n_isa = simd_isas(isas);
    const st_type acts[] = {ST_TYPE_Q8_0, ST_TYPE_Q8_1, ST_TYPE_Q8_K, ST_TYPE_F32, ST_TYPE_F16};
    const int n_acts = (int)(sizeof acts / sizeof acts[0]);
    const int64_t n = 33 * 256;
    float *x = malloc(n * sizeof(float)), *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    uint8_t *qa = malloc(n * 4), *qb = malloc(n * 4);
    REQUIRE(x && a && b && qa && qb);
    qt_rng r = {99};
    qt_fill(&r, x, n, 10.0f);
    for (int i = 0; i < 64; i++) x[i] = (float)(i - 32) * 0.5f; /* exact ties */
    for (int ii = 0; ii < n_isa; ii++) {
        const st_kernels *k = st_kernels_get(isas[ii]);
        for (int ai = 0; ai < n_acts; ai++) {
            const st_type t = acts[ai];
            const int exact = t == ST_TYPE_F32 || t == ST_TYPE_F16;
            const int64_t len = st_type_block_size(t) == 1 ? n - 3 : n; /* odd: tails */
            memset(qa, 0xA5, n * 4), memset(qb, 0x5A, n * 4);
            CHECK_OK(st_quantize_row(t, x, qa, len));
            k->type[t].from_float(x, qb, len);
            int kept = 1; /* the SIMD quantizer writes nothing past the row */
            for (size_t j = st_row_bytes(t, len); j < st_row_bytes(t, len) + 8; j++) kept &= qb[j] == 0x5A;
            CHECK(kept);
            CHECK_OK(st_dequantize_row(t, qa, a, len));
            CHECK_OK(st_dequantize_row(t, qb, b, len));
            int64_t off_by_more = 0, differ = 0;
            for (int64_t j = 0; j < len; j++) {
                const int64_t bl = j / st_type_block_size(t) * st_type_block_size(t);
                float amax = 0; /* one quantization step of this block */
                for (int64_t m = bl; m < bl + st_type_block_size(t); m++) amax = fmaxf(amax, fabsf(x[m]));
                const double step = exact ? 0 : amax / 127.0 * 1.001;
                differ += a[j] != b[j];
                off_by_more += fabs(a[j] - b[j]) > step;
            }
            CHECK_INT(off_by_more, 0);
            CHECK(differ <= (exact ? 0 : n / 100));
            if (exact) CHECK(memcmp(qa, qb, st_row_bytes(t, len)) == 0);
        }
        /* q8_1 block sums: s = d * sum(qs) within fp16 rounding */
        k->type[ST_TYPE_Q8_1].from_float(x, qb, n);
        const st_block_q8_1 *blk = (const st_block_q8_1 *)qb;
        for (int64_t i = 0; i < n / 32; i++) {
            int sum = 0;
            for (int j = 0; j < 32; j++) sum += blk[i].qs[j];
            const double want = sum * (double)st_fp16_to_fp32(blk[i].d);
            CHECK_NEAR(st_fp16_to_fp32(blk[i].s), want, fabs(want) * 1e-3 + 1e-6);
        }
    }
    free(x), free(a), free(b), free(qa), free(qb);
}

/* Quantized dot (weights and activations quantized as the products do it) against the
 * exact f64 dot of the original floats. */
TEST(test_dot_vs_exact) {
    const int64_t n = 4096;
    float *w = malloc(n * sizeof(float)), *x = malloc(n * sizeof(float));
    uint8_t *wq = malloc(n * 4), *xq = malloc(n * 4);
    REQUIRE(w && x && wq && xq);
    qt_rng r = {2024};
    for (int isa = ST_ISA_SCALAR; isa <= ST_ISA_AVX512; isa++) {
        const st_kernels *k = st_kernels_get((st_isa)isa);
        if ((int)k->isa != isa) continue;
        for (int ti = 0; ti < QT_N_TYPES; ti++) {
            const st_type t = QT_TYPES[ti].t;
            for (int rep = 0; rep < 4; rep++) {
                qt_fill(&r, w, n, 0.05f);
                for (int64_t i = 0; i < n; i++) x[i] = qt_uniform(&r) + 0.3f; /* biased: dot not ~0 */
                double abs_sum;
                const double exact = qt_dot64(w, x, n, &abs_sum);
                CHECK_OK(st_quantize_row(t, w, wq, n));
                CHECK_OK(st_quantize_act(k, t, x, xq, n));
                float s;
                k->type[t].vec_dot((int)n, &s, wq, xq);
                const double rel = fabs(s - exact) / abs_sum;
                if (!(rel <= QT_TYPES[ti].max_dot_rel))
                    fprintf(stderr, "  %s %s: dot error %.5f > %.5f\n", st_isa_name(k->isa), st_type_name(t), rel,
                            QT_TYPES[ti].max_dot_rel);
                CHECK(rel <= QT_TYPES[ti].max_dot_rel);
            }
        }
    }
    CHECK_INT(st_quantize_act(st_kernels_get(ST_ISA_SCALAR), ST_TYPE_Q8_0, x, xq, 33), ST_E_INVAL);
    CHECK_INT(st_quantize_act(st_kernels_get(ST_ISA_SCALAR), ST_TYPE_Q8_1, x, xq, 32), ST_E_UNSUPPORTED);
    free(w), free(x), free(wq), free(xq);
}

/* st_vec_ops: each SIMD path against the scalar reference (libm expf, f64 sum) at lengths
 * around the vector widths, over inputs from 1e-3 to 120 in magnitude (exp(-g) then spans
 * underflow to overflow). silu_mul: relative error <= 1e-6 (the polynomial exp is within
 * ~2e-7), or an absolute 1e-30 where silu is ~0; rms_norm: <= 1e-6 relative (the f64 sums
 * differ in order only). The rows lie at an odd offset, so no load is aligned. */
TEST(test_simd_vec_ops_vs_scalar) {
    static const int64_t LENS[] = {1, 5, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 1536};
    st_isa isas[2];
    const int n_isa = simd_isas(isas);
    const st_vec_ops *ref = &st_kernels_get(ST_ISA_SCALAR)->ops;
    float *buf = malloc(6 * 1600 * sizeof(float));
    REQUIRE(buf);
    float *x = buf + 1, *w = x + 1600, *u = w + 1600, *g_ref = u + 1600, *g = g_ref + 1600, *y = g + 1600;
    qt_rng r = {77};
    int n_cmp = 0, bad = 0;
    for (int ii = 0; ii < n_isa; ii++) {
        const st_vec_ops *ops = &st_kernels_get(isas[ii])->ops;
        for (size_t li = 0; li < sizeof LENS / sizeof LENS[0]; li++) {
            const int64_t n = LENS[li];
            for (int64_t i = 0; i < n; i++) {
                const float mag = powf(10.0f, (qt_uniform(&r) + 1.0f) / 2.0f * 5.08f - 3.0f); /* 1e-3..120 */
                x[i] = qt_uniform(&r) < 0 ? -mag : mag;
                u[i] = qt_uniform(&r) * 2.0f;
                w[i] = qt_uniform(&r) + 1.0f;
            }
            memcpy(g_ref, x, (size_t)n * sizeof(float));
            memcpy(g, x, (size_t)n * sizeof(float));
            ref->silu_mul(n, g_ref, u);
            ops->silu_mul(n, g, u);
            for (int64_t i = 0; i < n; i++, n_cmp++)
                if (!(fabsf(g[i] - g_ref[i]) <= 1e-6f * fabsf(g_ref[i]) + 1e-30f)) {
                    if (bad++ < 5)
                        fprintf(stderr, "  %s silu_mul n=%lld x=%.9g: %.9g vs scalar %.9g\n",
                                st_isa_name(isas[ii]), (long long)n, x[i], g[i], g_ref[i]);
                }
            ref->rms_norm(n, g_ref, x, w, 1e-5f);
            ops->rms_norm(n, y, x, w, 1e-5f);
            for (int64_t i = 0; i < n; i++, n_cmp++)
                if (!(fabsf(y[i] - g_ref[i]) <= 1e-6f * fabsf(g_ref[i]))) {
                    if (bad++ < 5)
                        fprintf(stderr, "  %s rms_norm n=%lld i=%lld: %.9g vs scalar %.9g\n",
                                st_isa_name(isas[ii]), (long long)n, (long long)i, y[i], g_ref[i]);
                }
            memcpy(g, x, (size_t)n * sizeof(float)); /* in place, as the forward pass calls it */
            ops->rms_norm(n, g, g, w, 1e-5f);
            CHECK(memcmp(g, y, (size_t)n * sizeof(float)) == 0);
        }
    }
    CHECK_INT(bad, 0);
    CHECK(n_cmp >= n_isa * 2 * 1800);
    /* the far ends: silu(-1e30) = -0 (exp(1e30) overflows), silu(1e30) = 1e30,
     * silu(inf) = inf, silu(0) = 0 */
    for (int ii = 0; ii < n_isa; ii++) {
        float gg[4] = {-1e30f, 1e30f, INFINITY, 0.0f}, uu[4] = {1, 1, 1, 1};
        st_kernels_get(isas[ii])->ops.silu_mul(4, gg, uu);
        CHECK(gg[0] == 0.0f && gg[1] == 1e30f && gg[2] == INFINITY && gg[3] == 0.0f);
    }
    free(buf);
}

/* Every table's to_float (public: a caller may dequantize through a table) gives the same
 * floats as st_dequantize_row, bit for bit, at awkward lengths: the f16 SIMD conversion on
 * every one of the 65536 halves (NaNs included) and on the tails of short rows; the block
 * types on random bytes (their scales may be any half, inf and NaN included). */
TEST(test_to_float_vs_scalar) {
    st_isa isas[3] = {ST_ISA_SCALAR};
    const int n_isa = 1 + simd_isas(isas + 1);
    static const int64_t LENS[] = {1, 3, 7, 15, 17, 31, 33, 127, 1023};
    const int64_t max_n = 65536;
    uint8_t *x = malloc((size_t)max_n * 8);
    float *ref = malloc((size_t)max_n * sizeof(float)), *got = malloc((size_t)max_n * sizeof(float));
    REQUIRE(x && ref && got);
    qt_rng r = {0x70f10a7u};
    int n_checked = 0;
    for (int t = 0; t < ST_TYPE_COUNT_; t++) {
        if (!st_type_has_kernels((st_type)t)) continue;
        const int64_t bs = st_type_block_size((st_type)t);
        for (int li = -1; li < (int)(sizeof LENS / sizeof *LENS); li++) {
            /* li -1: all halves in order (f16), else a long row of random bytes */
            const int64_t n = li < 0 ? (t == ST_TYPE_F16 ? max_n : 0) : LENS[li] * bs;
            if (n == 0 || n > max_n) continue;
            const size_t nb = st_row_bytes((st_type)t, n);
            for (size_t i = 0; i < nb; i++) {
                r.s ^= r.s >> 12, r.s ^= r.s << 25, r.s ^= r.s >> 27;
                x[i] = li < 0 ? (uint8_t)(i & 1 ? (i / 2) >> 8 : i / 2) : (uint8_t)(r.s * 2685821657736338717ull >> 56);
            }
            REQUIRE(st_dequantize_row((st_type)t, x, ref, n) == 0);
            for (int ii = 0; ii < n_isa; ii++) {
                const st_type_kernels *k = &st_kernels_get(isas[ii])->type[t];
                REQUIRE(k->to_float);
                memset(got, 0xA5, (size_t)n * sizeof(float));
                k->to_float(x, got, n);
                int64_t bad = -1;
                for (int64_t i = 0; i < n && bad < 0; i++)
                    if (memcmp(&got[i], &ref[i], sizeof(float))) bad = i;
                if (bad >= 0)
                    fprintf(stderr, "  %s %s n=%" PRId64 ": element %" PRId64 " %08x vs %08x\n",
                            st_isa_name(isas[ii]), st_type_name((st_type)t), n, bad, st_fp32_to_bits(got[bad]),
                            st_fp32_to_bits(ref[bad]));
                CHECK_INT(bad, -1);
                n_checked++;
            }
        }
    }
    CHECK(n_checked >= 12 * 8 * n_isa); /* every type with kernels, at least 8 lengths each */
    free(x), free(ref), free(got);
}

TEST_MAIN(test_block_geometry, test_ggml_known_blocks, test_ggml_known_quantization, test_roundtrip_error,
          test_simd_dot_vs_scalar, test_simd_act_quantize, test_dot_vs_exact, test_simd_vec_ops_vs_scalar,
          test_to_float_vs_scalar)
