/* The quad kernels (st_tile4_fn, and Q8_0's group tile st_tilex_fn) of the layouts with an
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

/* The Q8_0 group tiles' paths (st_tilex_fn): the scalar twin that defines their bits, the
 * AVX-512 VNNI kernel and the AMX one (each where the CPU runs it). */
typedef void (*tilex_fn)(int, float *, size_t, const void *, int, const void *, size_t, int);
enum { N_X_PATHS = 3 };
static const char *const x_path_name[N_X_PATHS] = {"scalar", "vnni", "amx"};
static tilex_fn x_path(int i) {
    if (i == 0) return st_tilex_q8_0_q8_0_scalar;
    if (qt_max_isa() < ST_ISA_AVX512 || st_kernels_get_ex(ST_ISA_AVX512, false)->isa != ST_ISA_AVX512) return NULL;
    if (i == 1) return st_tilex_q8_0_q8_0_avx512;
    return st_cpu_amx_enable() ? st_tilex_q8_0_q8_0_amx : NULL;
}

/* The Q8_0 group tiles at the ends of the ranges: quants -128 and 127 against activations
 * -128 and 127 (the VNNI kernel adds 128 to each quant and takes 128 * sum(a) back out, the
 * AMX one adds -128 * sum(a) in a second tile product), 20 tokens (a whole AMX tile and a
 * part one), the three alignments of the matrix (64, 32, 16 past a cache line), every path
 * against the exact sum of the dequantized products and bit for bit against the scalar twin. */
TEST(test_q8_0_group_extremes) {
    enum { C = 512, NBK = C / 32, NA = 20, R = ST_QUAD_GROUP_ROWS };
    static st_block_q8_0 w[R][NBK], a[NA][NBK];
    for (int r = 0; r < R; r++)
        for (int b = 0; b < NBK; b++) {
            w[r][b].d = st_fp32_to_fp16(r == 3 ? 0.5f : 1.0f / (1 + b + r));
            for (int e = 0; e < 32; e++)
                w[r][b].qs[e] = (int8_t)(r % 4 == 0 ? -128 : r % 4 == 1 ? 127 : r % 4 == 2 ? ((e + b) & 1 ? 127 : -128) : e - 16 + r);
        }
    for (int c = 0; c < NA; c++)
        for (int b = 0; b < NBK; b++) {
            a[c][b].d = st_fp32_to_fp16(0.25f);
            for (int e = 0; e < 32; e++)
                a[c][b].qs[e] = (int8_t)(c % 4 == 0 ? -128 : c % 4 == 1 ? 127 : c % 4 == 2 ? (e & 1 ? -128 : 127) : 3 * e - 50 + c);
        }
    uint8_t *buf = malloc(sizeof w + 128);
    REQUIRE(buf);
    float ref[NA * R], s[NA * R];
    int bad = 0, n = 0, paths = 0;
    for (int al = 0; al < 3; al++) {
        uint8_t *grp = (uint8_t *)(((uintptr_t)buf + 63) & ~(uintptr_t)63) + (al == 0 ? 0 : al == 1 ? 32 : 16);
        memcpy(grp, w, sizeof w);
        CHECK_OK(st_pack_quads(ST_TYPE_Q8_0, grp, R, C));
        for (int pi = 0; pi < N_X_PATHS; pi++) {
            const tilex_fn fn = x_path(pi);
            if (!fn) continue;
            paths += al == 0;
            fn(C, pi ? s : ref, R, grp, 1, a, sizeof a[0], NA);
            for (int r = 0; r < R; r++)
                for (int c = 0; c < NA; c++) {
                    double exact = 0, mag = 0;
                    for (int b = 0; b < NBK; b++)
                        for (int e = 0; e < 32; e++) {
                            const double p = (double)st_fp16_to_fp32(w[r][b].d) * w[r][b].qs[e] * st_fp16_to_fp32(a[c][b].d) * a[c][b].qs[e];
                            exact += p, mag += fabs(p);
                        }
                    const float got = (pi ? s : ref)[c * R + r];
                    if (fabs(got - exact) > 1e-6 * mag || (pi && memcmp(&got, &ref[c * R + r], sizeof got))) {
                        if (bad < 10)
                            fprintf(stderr, "  q8_0 group %s row %d act %d (align %d): %.9g vs exact %.9g, twin %.9g\n",
                                    x_path_name[pi], r, c, al, got, exact, ref[c * R + r]);
                        bad++;
                    }
                    n++;
                }
        }
    }
    if (paths < N_X_PATHS) test_untested("the Q8_0 group tile's VNNI or AMX path does not run on this CPU");
    CHECK_INT(bad, 0);
    CHECK_INT(n, 3 * paths * R * NA);
    free(buf);
}

/* The Q8_0 group tiles against their scalar twin, bit for bit: 7 groups of rows 64 and 2304
 * columns wide (one span; 36 spans, past the kernels' 64-block chunks of prepared
 * activations) against 37 tokens (two whole AMX tiles and a part one), random quants with
 * every row's first block at -128 / 127 and one token's at -128 / 127; every ng from every
 * group that leaves room, token counts 1..37 ending at the last, the three alignments of the
 * matrix, and nothing written outside the tile. The scalar twin itself against the exact sum
 * of the dequantized products. The scalar checks run on any CPU. */
static int rand_q8(qt_rng *r) { /* uniform over -128..127 */
    const int v = (int)((qt_uniform(r) + 1.0f) * 128.0f);
    return (v > 255 ? 255 : v) - 128;
}

TEST(test_q8_0_group_tiles) {
    enum { NG = 7, NA = 37, R = ST_QUAD_GROUP_ROWS * NG };
    static const int cols_list[2] = {64, 2304};
    static const int nc_list[] = {1, 2, 3, 4, 5, 8, 15, 16, 17, 31, 32, 33, 37};
    int bad = 0, n_simd = 0, n_ref = 0, paths = 0;
    for (int ci = 0; ci < 2; ci++) {
        const int C = cols_list[ci], NBK = C / 32;
        const size_t rb = st_row_bytes(ST_TYPE_Q8_0, C), ab = st_act_bytes(ST_TYPE_Q8_0, C);
        st_block_q8_0 *w = malloc(rb * R), *a = malloc(ab * NA);
        uint8_t *buf = malloc(rb * R + 128), *packed = malloc(rb * R);
        float *ref = malloc(sizeof(float) * R * NA), *t = malloc(sizeof(float) * R * NA);
        REQUIRE(w && a && buf && ref && t && packed);
        qt_rng rng = {4242 + (uint64_t)ci};
        for (int r = 0; r < R; r++)
            for (int b = 0; b < NBK; b++) {
                st_block_q8_0 *blk = &w[(size_t)r * NBK + b];
                blk->d = st_fp32_to_fp16((0.75f + 0.25f * qt_uniform(&rng)) / 64);
                for (int e = 0; e < 32; e++) blk->qs[e] = (int8_t)(b == 0 ? ((e + r) & 1 ? 127 : -128) : rand_q8(&rng));
            }
        for (int c = 0; c < NA; c++)
            for (int b = 0; b < NBK; b++) {
                st_block_q8_0 *blk = &a[(size_t)c * NBK + b];
                blk->d = st_fp32_to_fp16((0.75f + 0.25f * qt_uniform(&rng)) / 32);
                for (int e = 0; e < 32; e++) blk->qs[e] = (int8_t)(c == 3 ? (e & 2 ? 127 : -128) : rand_q8(&rng));
            }
        memcpy(packed, w, rb * R);
        CHECK_OK(st_pack_quads(ST_TYPE_Q8_0, packed, R, C));
        st_tilex_q8_0_q8_0_scalar(C, ref, R, packed, NG, a, ab, NA);
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
        for (int pi = 1; pi < N_X_PATHS; pi++) {
            const tilex_fn fn = x_path(pi);
            if (!fn) continue;
            paths += ci == 0;
            for (int al = 0; al < 3; al++) {
                uint8_t *m = (uint8_t *)(((uintptr_t)buf + 63) & ~(uintptr_t)63) + (al == 0 ? 0 : al == 1 ? 32 : 16);
                memcpy(m, packed, rb * R);
                for (int ng = 1; ng <= NG; ng++)
                    for (int g0 = 0; g0 + ng <= NG; g0 += (ng == 1 ? 1 : 3))
                        for (size_t ni = 0; ni < sizeof nc_list / sizeof nc_list[0]; ni++) {
                            const int nc = nc_list[ni], c0 = NA - nc; /* tokens c0 .. NA - 1 */
                            for (size_t i = 0; i < (size_t)R * NA; i++) t[i] = -1.0f;
                            fn(C, t + (size_t)c0 * R + ST_QUAD_GROUP_ROWS * g0, R, m + (size_t)g0 * ST_QUAD_GROUP_ROWS * rb, ng,
                               (const uint8_t *)a + (size_t)c0 * ab, ab, nc);
                            for (int c = 0; c < NA; c++)
                                for (int r = 0; r < R; r++) {
                                    const size_t e = (size_t)c * R + r;
                                    const int in = c >= c0 && r >= ST_QUAD_GROUP_ROWS * g0 && r < ST_QUAD_GROUP_ROWS * (g0 + ng);
                                    if (in ? memcmp(&t[e], &ref[e], sizeof(float)) != 0 : t[e] != -1.0f) {
                                        if (bad < 10)
                                            fprintf(stderr, "  q8_0 group %s ng %d nc %d at group %d, %d cols, align %d: row %d act %d %.9g vs %.9g\n",
                                                    x_path_name[pi], ng, nc, g0, C, al, r, c, t[e], in ? ref[e] : -1.0);
                                        bad++;
                                    }
                                    n_simd += in;
                                }
                        }
            }
        }
        free(w), free(a), free(buf), free(ref), free(t), free(packed);
    }
    if (paths < N_X_PATHS - 1) test_untested("the Q8_0 group tile's VNNI or AMX path does not run on this CPU; the scalar twin tested");
    CHECK_INT(bad, 0);
    CHECK_INT(n_ref, 2 * R * NA);
    if (paths) CHECK(n_simd > paths * 2 * 3 * R * 100);
}

TEST_MAIN(test_kquant_quad_kernels, test_q8_0_group_extremes, test_q8_0_group_tiles)
