/* The quad kernels (st_tile4_fn, and Q8_0's wide tile st_tilew_fn) of the layouts with an
 * arithmetic of their own: Q4_K, Q5_K, Q6_K and Q8_0 on AVX-512, Q4_K on AVX2 (quant.h:
 * ST_WLAYOUT_QUADS). Each build
 * against the scalar reference and at the ends of its integer ranges, and the same bits
 * whatever the tile shape and the quad's alignment. STRATA_ISA=scalar|avx2 limits the
 * builds tested. test_matmul holds the products over quads to the row layout's. */
#include "../test.h"
#include "quant/kquants.h"
#include "quant/quant_int.h"
#include "quant_test_util.h"
#include "strata/core.h"
#include "strata/quant.h"

#include <stddef.h>
#include <string.h>

/* |quad kernel - scalar dot| relative to sum |x_i * y_i| of the dequantized rows: only the
 * float accumulation order differs (test_kquants' bound for the row dots). */
#define QUAD_REL_TOL 2e-6

typedef void (*quant_fn)(const float *, void *, int64_t);
typedef void (*dequant_fn)(const void *, float *, int64_t);
typedef void (*dot_fn)(int, float *, const void *, const void *);

/* The K-quant quad kernels (AVX-512 with GFNI and without for Q4_K, Q5_K, Q6_K; AVX2 with
 * AVX-VNNI and without for Q4_K) over 4 rows packed by st_pack_quads: every element of every
 * tile shape against the scalar dot of its row, with random blocks and one of every quant,
 * scale and min at its maximum against -128 activations (where a vpackssdw of the 8-product
 * sums would saturate if they did not fit); in each build an element the same bits whatever
 * nr and nc and whatever the quad's alignment (64, 32 or 16 bytes past a cache line: the
 * AVX-512 kernels' three load paths), the two AVX-512 builds the same bits; and each ISA's
 * table carries the build this CPU runs best. */
typedef void (*tile4_fn)(int, float *, size_t, const void *, const void *, size_t, int, int);
typedef struct {
    const char *name;
    tile4_fn fn[3]; /* q4_K, q5_K, q6_K; NULL where the build has none */
    int isa, needs;  /* needs: 1 GFNI, 2 AVX-VNNI */
} quad_build;
static const quad_build k_quad_builds[] = {
    {"avx512", {st_tile4_q4_K_q8_K_avx512, st_tile4_q5_K_q8_K_avx512, st_tile4_q6_K_q8_K_avx512}, ST_ISA_AVX512, 0},
    {"avx512gfni", {st_tile4_q4_K_q8_K_avx512gfni, st_tile4_q5_K_q8_K_avx512gfni, st_tile4_q6_K_q8_K_avx512gfni}, ST_ISA_AVX512, 1},
    {"avx2", {st_tile4_q4_K_q8_K_avx2, NULL, NULL}, ST_ISA_AVX2, 0},
    {"avx2vnni", {st_tile4_q4_K_q8_K_avx2vnni, NULL, NULL}, ST_ISA_AVX2, 2},
};
enum { N_QUAD_BUILDS = sizeof k_quad_builds / sizeof k_quad_builds[0] };

TEST(test_kquant_quad_kernels) {
    int runs[N_QUAD_BUILDS];
    for (int bi = 0; bi < N_QUAD_BUILDS; bi++) {
        const quad_build *qb = &k_quad_builds[bi];
        runs[bi] = qt_max_isa() >= qb->isa && (qb->needs != 1 || st_cpu_has_gfni()) && (qb->needs != 2 || st_cpu_has_avxvnni());
        if (!runs[bi]) {
            char why[128];
            snprintf(why, sizeof why, "the %s quad kernels cannot run on this CPU (or STRATA_ISA): untested", qb->name);
            test_untested(why);
        }
    }
    const quant_fn quant[3] = {st_quantize_row_q4_K_ref, st_quantize_row_q5_K_ref, st_quantize_row_q6_K_ref};
    const dequant_fn deq[3] = {st_dequantize_row_q4_K, st_dequantize_row_q5_K, st_dequantize_row_q6_K};
    const dot_fn ref[3] = {st_vec_dot_q4_K_q8_K_scalar, st_vec_dot_q5_K_q8_K_scalar, st_vec_dot_q6_K_q8_K_scalar};
    const size_t bbytes[3] = {sizeof(st_block_q4_K), sizeof(st_block_q5_K), sizeof(st_block_q6_K)};
    const st_type types[3] = {ST_TYPE_Q4_K, ST_TYPE_Q5_K, ST_TYPE_Q6_K};
    enum { NB = 33, NR = 4, NC = 4 };
    const int n = NB * QK_K;
    float *x = malloc((size_t)n * sizeof *x), *xd = malloc((size_t)n * sizeof *xd), *ad = malloc((size_t)n * sizeof *ad);
    uint8_t *rows = malloc(NR * NB * sizeof(st_block_q6_K)), *buf = malloc(NR * NB * sizeof(st_block_q6_K) + 128);
    st_block_q8_K *qa = malloc((size_t)NC * NB * sizeof *qa);
    REQUIRE(x && xd && ad && rows && buf && qa);
    for (int c = 0; c < NC; c++) {
        qt_rng rng = {900 + (uint64_t)c};
        qt_fill(&rng, x, n, 1.0f);
        st_quantize_row_q8_K_ref(x, qa + (size_t)c * NB, n);
    }
    for (int j = 0; j < QK_K; j++) qa[3 * NB].qs[j] = -128; /* activation 3, block 0 */
    for (int g = 0; g < QK_K / 16; g++) qa[3 * NB].bsums[g] = -128 * 16;
    int n_elems = 0;
    for (int k = 0; k < 3; k++) {
        const size_t bb = bbytes[k], rb = NB * bb;
        for (int r = 0; r < NR; r++) {
            qt_rng rng = {950 + 10 * (uint64_t)k + (uint64_t)r};
            qt_fill(&rng, x, n, 1.0f);
            for (int i = 0; i < n; i++) x[i] *= 1.f + (float)((i / QK_K) % 5);
            quant[k](x, rows + r * rb, n);
        }
        uint8_t *ext = rows + 2 * rb; /* row 2, block 0: all at their maximum, d = dmin = 1 */
        memset(ext, 0xFF, bb);
        if (k == 2) { /* Q6_K: quants 63, scales -128 (the largest magnitude), d = 1 */
            memset(ext + offsetof(st_block_q6_K, scales), 0x80, 16);
            ext[offsetof(st_block_q6_K, d)] = 0x00, ext[offsetof(st_block_q6_K, d) + 1] = 0x3C;
        } else {
            ext[0] = 0x00, ext[1] = 0x3C, ext[2] = 0x00, ext[3] = 0x3C;
        }
        for (int v = 0; v < 2; v++) { /* one block (the extreme one at row 2, activation 3) and all */
            const int nb = v ? NB : 1, m = nb * QK_K;
            /* a quad of m columns: the 4 rows' first nb blocks */
            uint8_t *rows_m = malloc(NR * nb * bb);
            REQUIRE(rows_m);
            for (int r = 0; r < NR; r++) memcpy(rows_m + (size_t)r * nb * bb, rows + r * rb, nb * bb);
            CHECK_OK(st_pack_quads(types[k], rows_m, NR, m));
            float want[NR * NC], mag[NR * NC], avx512[NR * NC];
            for (int r = 0; r < NR; r++)
                for (int c = 0; c < NC; c++) {
                    deq[k](rows + r * rb, xd, m);
                    st_dequantize_row_q8_K(qa + (size_t)c * NB, ad, m);
                    double sum = 0;
                    for (int i = 0; i < m; i++) sum += fabs((double)xd[i] * ad[i]);
                    mag[c * NR + r] = (float)sum;
                    ref[k](m, &want[c * NR + r], rows + r * rb, qa + (size_t)c * NB);
                }
            for (int bi = 0; bi < N_QUAD_BUILDS; bi++) {
                const tile4_fn fn = k_quad_builds[bi].fn[k];
                if (!runs[bi] || !fn) continue;
                float first[NR * NC];
                int near = 1, same = 1;
                for (int al = 0; al < 3; al++) {
                    uint8_t *quad = (uint8_t *)(((uintptr_t)buf + 63) & ~(uintptr_t)63) + (al == 0 ? 0 : al == 1 ? 32 : 16);
                    memcpy(quad, rows_m, NR * nb * bb);
                    for (int nr = NR; nr >= 1; nr--) {
                        for (int nc = NC; nc >= 1; nc--) {
                            float t[NR * NC];
                            fn(m, t, NR, quad, qa, NB * sizeof *qa, nr, nc);
                            for (int r = 0; r < nr; r++) {
                                for (int c = 0; c < nc; c++) {
                                    const int e = c * NR + r;
                                    if (al == 0 && nr == NR && nc == NC) {
                                        first[e] = t[e];
                                        n_elems++;
                                        if (!(fabs(t[e] - want[e]) <= QUAD_REL_TOL * mag[e])) {
                                            fprintf(stderr, "  q%d_K %s quad row %d act %d, %d blocks: %.9g vs scalar %.9g\n",
                                                    4 + k, k_quad_builds[bi].name, r, c, nb, t[e], want[e]);
                                            near = 0;
                                        }
                                    } else {
                                        same &= memcmp(&t[e], &first[e], sizeof t[e]) == 0;
                                    }
                                }
                            }
                        }
                    }
                }
                CHECK(near);
                CHECK(same);
                if (bi == 0) memcpy(avx512, first, sizeof avx512);
                if (bi == 1 && runs[0]) CHECK(memcmp(avx512, first, sizeof avx512) == 0);
            }
            free(rows_m);
        }
        /* dispatch: each ISA's table carries the build this CPU runs best */
        const st_kernels *k5 = st_kernels_get(ST_ISA_AVX512), *k2 = st_kernels_get(ST_ISA_AVX2);
        if (runs[0] && k5->isa == ST_ISA_AVX512) CHECK(k5->type[types[k]].tile4 == k_quad_builds[runs[1] ? 1 : 0].fn[k]);
        if (runs[2] && k2->isa == ST_ISA_AVX2) CHECK(k2->type[types[k]].tile4 == k_quad_builds[runs[3] ? 3 : 2].fn[k]);
    }
    /* every element checked against the reference once per (type, block count, build the CPU
     * runs): counted from the build table, not from the loop that did the checking */
    int want = 0;
    for (int bi = 0; bi < N_QUAD_BUILDS; bi++)
        for (int k = 0; k < 3; k++) want += runs[bi] && k_quad_builds[bi].fn[k] ? 2 * NR * NC : 0;
    CHECK_INT(n_elems, want);
    free(x), free(xd), free(ad), free(rows), free(buf), free(qa);
}

/* The Q8_0 quad kernel at the ends of the ranges: quants -128 and 127 against activations
 * -128 and 127 (the kernel adds 128 to each quant and takes 128 * sum(a) back out), every
 * tile shape and the three alignments of the quad (64, 32, 16 past a cache line), against
 * the exact sum of the dequantized products. */
TEST(test_q8_0_quad_extremes) {
    const st_kernels *k = st_kernels_get(ST_ISA_AVX512);
    if (qt_max_isa() < ST_ISA_AVX512 || k->isa != ST_ISA_AVX512 || !k->type[ST_TYPE_Q8_0].tile4) {
        test_skip("no AVX-512 with VNNI: the Q8_0 quad kernel untested");
        return;
    }
    enum { C = 512, NBK = C / 32, NA = 4 };
    st_block_q8_0 w[4][NBK], a[NA][NBK];
    for (int r = 0; r < 4; r++)
        for (int b = 0; b < NBK; b++) {
            w[r][b].d = st_fp32_to_fp16(r == 3 ? 0.5f : 1.0f / (1 + b));
            for (int e = 0; e < 32; e++) w[r][b].qs[e] = (int8_t)(r == 0 ? -128 : r == 1 ? 127 : r == 2 ? ((e + b) & 1 ? 127 : -128) : e - 16);
        }
    for (int c = 0; c < NA; c++)
        for (int b = 0; b < NBK; b++) {
            a[c][b].d = st_fp32_to_fp16(0.25f);
            for (int e = 0; e < 32; e++) a[c][b].qs[e] = (int8_t)(c == 0 ? -128 : c == 1 ? 127 : c == 2 ? (e & 1 ? -128 : 127) : 3 * e - 50);
        }
    uint8_t *buf = malloc(sizeof w + 128);
    REQUIRE(buf);
    int bad = 0, n = 0;
    for (int al = 0; al < 3; al++) {
        uint8_t *quad = (uint8_t *)(((uintptr_t)buf + 63) & ~(uintptr_t)63) + (al == 0 ? 0 : al == 1 ? 32 : 16);
        memcpy(quad, w, sizeof w);
        CHECK_OK(st_pack_quads(ST_TYPE_Q8_0, quad, 4, C));
        for (int nr = 1; nr <= 4; nr++)
            for (int nc = 1; nc <= NA; nc++) {
                float s[NA * 4];
                k->type[ST_TYPE_Q8_0].tile4(C, s, 4, quad, a, sizeof a[0], nr, nc);
                for (int r = 0; r < nr; r++)
                    for (int c = 0; c < nc; c++) {
                        double exact = 0, mag = 0;
                        for (int b = 0; b < NBK; b++)
                            for (int e = 0; e < 32; e++) {
                                const double p = (double)st_fp16_to_fp32(w[r][b].d) * w[r][b].qs[e] *
                                                 st_fp16_to_fp32(a[c][b].d) * a[c][b].qs[e];
                                exact += p, mag += fabs(p);
                            }
                        if (fabs(s[c * 4 + r] - exact) > 1e-6 * mag) {
                            fprintf(stderr, "  q8_0 quad row %d act %d (align %d): %.9g vs %.9g\n", r, c, al, s[c * 4 + r], exact);
                            bad++;
                        }
                        n++;
                    }
            }
    }
    CHECK_INT(bad, 0);
    CHECK_INT(n, 3 * 10 * 10);
    free(buf);
}

/* The Q8_0 wide tile (st_tilew_fn) and the tile4 against the scalar twin of their
 * arithmetic (st_tilew_q8_0_q8_0_scalar), bit for bit: 19 quads of rows 256 and 2304
 * columns wide (one span; 9 spans, past the wide tile's 8-span chunk of prepared
 * activations) against 11 tokens, random quants with every row's first block at -128 /
 * 127 and one token's at -128 / 127; every nq 1..ST_TILEW_QUADS starting at every quad
 * that leaves room, every nc 1..ST_TILEW_TOKENS, the three alignments of the matrix; the
 * tile4 at every nr, nc. The scalar twin itself against the exact sum of the dequantized
 * products. The scalar checks run on any CPU. */
static int rand_q8(qt_rng *r) { /* uniform over -128..127 */
    const int v = (int)((qt_uniform(r) + 1.0f) * 128.0f);
    return (v > 255 ? 255 : v) - 128;
}

TEST(test_q8_0_wide_tiles) {
    const st_kernels *k = st_kernels_get(ST_ISA_AVX512);
    const int simd = qt_max_isa() >= ST_ISA_AVX512 && k->isa == ST_ISA_AVX512 && k->type[ST_TYPE_Q8_0].tilew;
    if (!simd) test_untested("no AVX-512 with VNNI: the Q8_0 wide and quad tiles untested, their scalar twin tested");
    enum { NQ = 19, NA = 11, R = 4 * NQ };
    static const int cols_list[2] = {256, 2304};
    int bad = 0, n_simd = 0, n_ref = 0;
    for (int ci = 0; ci < 2; ci++) {
        const int C = cols_list[ci], NBK = C / 32;
        const size_t rb = st_row_bytes(ST_TYPE_Q8_0, C), ab = st_act_bytes(ST_TYPE_Q8_0, C);
        st_block_q8_0 *w = malloc(rb * R), *a = malloc(ab * NA);
        uint8_t *buf = malloc(rb * R + 128);
        float *ref = malloc(sizeof(float) * R * NA), *t = malloc(sizeof(float) * R * NA);
        REQUIRE(w && a && buf && ref && t);
        qt_rng rng = {4242 + (uint64_t)ci};
        for (int r = 0; r < R; r++)
            for (int b = 0; b < NBK; b++) {
                st_block_q8_0 *blk = &w[(size_t)r * NBK + b];
                blk->d = st_fp32_to_fp16((0.75f + 0.25f * qt_uniform(&rng)) / 64);
                for (int e = 0; e < 32; e++)
                    blk->qs[e] = (int8_t)(b == 0 ? ((e + r) & 1 ? 127 : -128) : rand_q8(&rng));
            }
        for (int c = 0; c < NA; c++)
            for (int b = 0; b < NBK; b++) {
                st_block_q8_0 *blk = &a[(size_t)c * NBK + b];
                blk->d = st_fp32_to_fp16((0.75f + 0.25f * qt_uniform(&rng)) / 32);
                for (int e = 0; e < 32; e++)
                    blk->qs[e] = (int8_t)(c == 3 ? (e & 2 ? 127 : -128) : rand_q8(&rng));
            }
        uint8_t *packed = malloc(rb * R);
        REQUIRE(packed);
        memcpy(packed, w, rb * R);
        CHECK_OK(st_pack_quads(ST_TYPE_Q8_0, packed, R, C));
        st_tilew_q8_0_q8_0_scalar(C, ref, R, packed, a, ab, NQ, NA);
        for (int r = 0; r < R; r++) /* the twin against the exact sum */
            for (int c = 0; c < NA; c++) {
                double exact = 0, mag = 0;
                for (int b = 0; b < NBK; b++)
                    for (int e = 0; e < 32; e++) {
                        const st_block_q8_0 *x = &w[(size_t)r * NBK + b], *y = &a[(size_t)c * NBK + b];
                        const double p = (double)st_fp16_to_fp32(x->d) * x->qs[e] * st_fp16_to_fp32(y->d) * y->qs[e];
                        exact += p, mag += fabs(p);
                    }
                if (!(fabs(ref[(size_t)c * R + r] - exact) <= 1e-6 * mag)) {
                    fprintf(stderr, "  q8_0 scalar twin row %d act %d, %d cols: %.9g vs exact %.9g\n", r, c, C,
                            ref[(size_t)c * R + r], exact);
                    bad++;
                }
                n_ref++;
            }
        for (int al = 0; simd && al < 3; al++) {
            uint8_t *m = (uint8_t *)(((uintptr_t)buf + 63) & ~(uintptr_t)63) + (al == 0 ? 0 : al == 1 ? 32 : 16);
            memcpy(m, packed, rb * R);
            for (int nq = 1; nq <= ST_TILEW_QUADS; nq++)
                for (int q0 = 0; q0 + nq <= NQ; q0 += (nq == 1 ? 1 : 3))
                    for (int nc = 1; nc <= ST_TILEW_TOKENS; nc++) {
                        const int c0 = NA - nc; /* tokens c0.. c0 + nc - 1 */
                        for (size_t i = 0; i < (size_t)R * NA; i++) t[i] = -1.0f;
                        k->type[ST_TYPE_Q8_0].tilew(C, t + (size_t)c0 * R + 4 * q0, R, m + (size_t)q0 * 4 * rb,
                                                    (const uint8_t *)a + (size_t)c0 * ab, ab, nq, nc);
                        for (int c = 0; c < NA; c++)
                            for (int r = 0; r < R; r++) {
                                const size_t e = (size_t)c * R + r;
                                const int in = c >= c0 && r >= 4 * q0 && r < 4 * (q0 + nq);
                                if (in ? memcmp(&t[e], &ref[e], sizeof(float)) != 0 : t[e] != -1.0f) {
                                    if (bad < 10)
                                        fprintf(stderr, "  q8_0 tilew nq %d nc %d at quad %d, %d cols, align %d: row %d act %d %.9g vs %.9g\n",
                                                nq, nc, q0, C, al, r, c, t[e], in ? ref[e] : -1.0);
                                    bad++;
                                }
                                n_simd += in;
                            }
                    }
            for (int q = 0; q < NQ; q++) /* tile4 at every shape: the bits matvec gives */
                for (int nr = 1; nr <= 4; nr++)
                    for (int nc = 1; nc <= 4; nc++) {
                        float s4[16];
                        k->type[ST_TYPE_Q8_0].tile4(C, s4, 4, m + (size_t)q * 4 * rb, (const uint8_t *)a + 7 * ab, ab, nr, nc);
                        for (int c = 0; c < nc; c++)
                            for (int r = 0; r < nr; r++) {
                                if (memcmp(&s4[c * 4 + r], &ref[(size_t)(7 + c) * R + 4 * q + r], sizeof(float))) bad++;
                                n_simd++;
                            }
                    }
        }
        free(w), free(a), free(buf), free(ref), free(t), free(packed);
    }
    CHECK_INT(bad, 0);
    CHECK_INT(n_ref, 2 * R * NA);
    if (simd) CHECK(n_simd > 2 * 3 * NQ * 100);
}

TEST_MAIN(test_kquant_quad_kernels, test_q8_0_quad_extremes, test_q8_0_wide_tiles)
