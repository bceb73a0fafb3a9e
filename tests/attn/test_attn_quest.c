/* Quest's box kernels (st_attn_key_minmax, st_attn_box_to_f16) and page bounds
 * (st_attn_quest_bounds) against scalar and double-precision references, on every ISA. */
#include "strata/attn.h"
#include "../test.h"
#include "attn_seq.h"

#include <math.h>

#define TOL_QUEST 1e-5 /* Quest bound, relative to sum_d |q_d| max(|min_d|, |max_d|) */

/* A value that exercises the box kernels' corners: mostly ordinary, sometimes a NaN, a zero
 * of either sign, an infinity, a subnormal (of f16 and of f32), or past f16's range. */
static float odd_value(rng *r) {
    switch (rint_(r, 24)) {
    case 0: return NAN;
    case 1: return -NAN;
    case 2: return 0.0f;
    case 3: return -0.0f;
    case 4: return INFINITY;
    case 5: return -INFINITY;
    case 6: return runif(r) * 6e-5f;    /* f16 subnormal range */
    case 7: return runif(r) * 1e-39f;   /* f32 subnormal */
    case 8: return runif(r) * 1e5f;     /* past 65504 */
    case 9: return st_fp16_to_fp32(st_fp32_to_fp16(runif(r))); /* exactly an f16 */
    default: return runif(r) * 4.0f;
    }
}

/* st_attn_key_minmax and st_attn_box_to_f16 give the scalar reference's bits on every ISA:
 * NaNs first, last or amid a row, both zeros, masked slots, partial pages, odd page sizes. */
TEST(test_box_kernels_bit_identical) {
    rng r = {11};
    const st_type types[] = {ST_TYPE_F32, ST_TYPE_F16, ST_TYPE_BF16, ST_TYPE_Q8_0};
    const int sizes[] = {8, 16, 24, 64, 256, 5};
    int rows = 0, mismatches = 0;
    for (int isa = 1; isa <= max_isa(); isa++) {
        st_attn_ws *ws = NULL;
        CHECK_OK(st_attn_ws_create((st_isa)isa, &ws));
        REQUIRE(ws);
        for (int it = 0; it < 600; it++) {
            const st_type t = types[it % 4];
            const int P = sizes[(it / 4) % 6], D = 1 + rint_(&r, 80), H = 2, h = rint_(&r, H);
            const int special = it % 3; /* 0: ordinary keys; 1: some odd values; 2: many */
            st_attn_geom g = {.n_head = H, .n_kv_head = H, .head_dim = D, .page_size = P,
                              .type = t, .scale = 1};
            const size_t es = t == ST_TYPE_F32 ? 4 : t == ST_TYPE_Q8_0 ? 1 : 2;
            uint8_t *k = malloc((size_t)H * D * P * es);
            float scale[2] = {rint_(&r, 8) ? runif(&r) + 1.5f : 0.0f, 0.5f};
            for (size_t i = 0; i < (size_t)H * D * P; i++) {
                float x = special && rint_(&r, special == 1 ? 16 : 3) == 0 ? odd_value(&r) : runif(&r);
                if (t == ST_TYPE_F32) memcpy(k + 4 * i, &x, 4);
                else if (t == ST_TYPE_F16) ((uint16_t *)k)[i] = st_fp32_to_fp16(x);
                else if (t == ST_TYPE_BF16) ((uint16_t *)k)[i] = st_fp32_to_bf16(x);
                else ((int8_t *)k)[i] = (int8_t)(x != x || x > 1e30f || x < -1e30f ? 0 : rint_(&r, 256) - 128);
            }
            uint64_t valid[4];
            for (int w = 0; w < 4; w++) valid[w] = rnext(&r) | (it % 5 ? 0 : ~0ull);
            st_attn_page pg = {.k = k, .k_scale = scale, .n_tokens = 1 + rint_(&r, P),
                               .valid = it % 2 ? valid : NULL};
            float a[2 * 80], b[2 * 80];
            memset(a, 0x55, sizeof a), memset(b, 0x55, sizeof b);
            int na = st_attn_key_minmax(NULL, &g, &pg, h, a, a + D);
            int nb = st_attn_key_minmax(ws, &g, &pg, h, b, b + D);
            CHECK_INT(nb, na);
            CHECK(na >= 0);
            rows += D;
            for (int d = 0; d < D; d++)
                mismatches += memcmp(&a[d], &b[d], 4) != 0 || memcmp(&a[D + d], &b[D + d], 4) != 0;
            /* boxes of those bounds, and of arbitrary (even inverted) pairs */
            for (int pass = 0; pass < 2; pass++) {
                if (pass)
                    for (int d = 0; d < 2 * D; d++) a[d] = special ? odd_value(&r) : runif(&r) * 8;
                uint16_t ba[2 * 80], bb[2 * 80];
                st_attn_box_to_f16(NULL, D, a, a + D, ba);
                st_attn_box_to_f16(ws, D, a, a + D, bb);
                mismatches += memcmp(ba, bb, sizeof(uint16_t) * 2 * D) != 0;
                for (int d = 0; d < D && !pass; d++) /* outward: the box holds the bounds */
                    if (a[d] == a[d] && a[D + d] == a[D + d])
                        CHECK(st_fp16_to_fp32(ba[d]) <= a[d] && st_fp16_to_fp32(ba[D + d]) >= a[D + d]);
            }
            free(k);
        }
        st_attn_ws_destroy(ws);
    }
    fprintf(stderr, "  %d rows compared with the scalar reference, %d differ\n", rows, mismatches);
    CHECK_INT(mismatches, 0);
}

/* Quest bound: an upper bound of q.k for every key of the page, equal to a double
 * computation of the formula, for each ISA; key_minmax gives the box of the valid keys. */
TEST(test_quest_bounds) {
    rng r = {7};
    for (int isa = 0; isa <= max_isa(); isa++) {
        st_attn_ws *ws = NULL;
        CHECK_OK(st_attn_ws_create((st_isa)isa, &ws));
        REQUIRE(ws);
        for (int it = 0; it < 6; it++) {
            const int dims[] = {7, 16, 33, 64, 80, 128};
            tparams tp = {.n_kv_head = 2, .G = 1 + it % 4, .D = dims[it], .P = 16,
                          .type = it % 2 ? ST_TYPE_F16 : ST_TYPE_Q8_0, .len = 16 * 9 + 5,
                          .hole_pct = 0, .mask_pct = 40};
            tseq s;
            tseq_make(&s, &tp, &r);
            const int D = tp.D, G = tp.G, NP = s.n_pages, stride = D + 3;
            float *mn = malloc(sizeof(float) * NP * stride), *mx = malloc(sizeof(float) * NP * stride);
            float *q = rand_q(&r, (size_t)G * D), *bound = malloc(sizeof(float) * NP);
            const int bstride = 2 * D + 3; /* f16 boxes, not packed */
            uint16_t *box = malloc(sizeof(uint16_t) * NP * bstride);
            for (int h = 0; h < 2; h++) {
                for (int p = 0; p < NP; p++) {
                    int n = st_attn_key_minmax(ws, &s.g, &s.pages[p], h, mn + p * stride, mx + p * stride);
                    CHECK(n >= 0);
                    /* the kernel reads f16 boxes rounded outward: the reference uses them too */
                    st_attn_box_to_f16(ws, D, mn + p * stride, mx + p * stride, box + p * bstride);
                    for (int d = 0; d < D; d++) {
                        float lo = st_fp16_to_fp32(box[p * bstride + d]);
                        float hi = st_fp16_to_fp32(box[p * bstride + D + d]);
                        CHECK(lo <= mn[p * stride + d] && hi >= mx[p * stride + d]);
                        mn[p * stride + d] = lo, mx[p * stride + d] = hi;
                    }
                }
                CHECK_OK(st_attn_quest_bounds(ws, D, G, q, box, bstride, NP, bound));
                /* a page's bound is the same bits whatever call or group it is scored in
                 * (the ranking cuts runs into chunks and threads): one page per call, and
                 * the run cut after 3 pages */
                int same = 1;
                for (int p = 0; p < NP; p++) {
                    float one;
                    CHECK_OK(st_attn_quest_bounds(ws, D, G, q, box + p * bstride, bstride, 1, &one));
                    same &= memcmp(&one, &bound[p], sizeof one) == 0;
                }
                float *cut = malloc(sizeof(float) * NP);
                CHECK_OK(st_attn_quest_bounds(ws, D, G, q, box, bstride, 3, cut));
                CHECK_OK(st_attn_quest_bounds(ws, D, G, q, box + 3 * bstride, bstride, NP - 3, cut + 3));
                same &= memcmp(cut, bound, sizeof(float) * NP) == 0;
                free(cut);
                CHECK(same);
                for (int p = 0; p < NP; p++) {
                    double best = -INFINITY, mag = 0;
                    for (int gi = 0; gi < G; gi++) {
                        double b = 0, m = 0;
                        for (int d = 0; d < D; d++) {
                            double a = (double)q[gi * D + d] * mn[p * stride + d];
                            double c = (double)q[gi * D + d] * mx[p * stride + d];
                            b += a > c ? a : c;
                            m += fabs(a) > fabs(c) ? fabs(a) : fabs(c);
                        }
                        if (b > best) best = b;
                        if (m > mag) mag = m;
                    }
                    CHECK(fabs(bound[p] - best) <= TOL_QUEST * (mag + 1e-30));
                    /* every valid key of the page scores below the bound */
                    for (int t = 0; t < s.n_ref; t++) {
                        if (s.ref_page[t] != s.page_log[p]) continue;
                        for (int gi = 0; gi < G; gi++) {
                            double x = 0;
                            for (int d = 0; d < D; d++)
                                x += (double)q[gi * D + d] * s.ref_k[((size_t)t * 2 + h) * D + d];
                            CHECK(x <= bound[p] + TOL_QUEST * (mag + 1e-30));
                        }
                    }
                }
            }
            free(mn), free(mx), free(q), free(bound), free(box);
            tseq_free(&s);
        }
        CHECK_INT(st_attn_quest_bounds(ws, 0, 1, NULL, NULL, 2, 1, NULL), ST_E_INVAL);
        CHECK_INT(st_attn_quest_bounds(ws, 8, 1, NULL, NULL, 15, 1, NULL), ST_E_INVAL); /* stride < 2D */
        st_attn_ws_destroy(ws);
    }
}

/* The ranking's order: a NaN bound ranks as +inf (the page cannot be bounded). */
static float rank_key(float b) { return isnan(b) ? INFINITY : b; }

/* The two-level ranking's premise on every ISA, non-finite boxes included: a box that
 * contains another (the union of two, each side the wider, a NaN side kept) never bounds
 * lower in the ranking's order. Boxes get infinite and NaN sides and queries zero weights,
 * so heads' sums go NaN: one such head makes the page's bound NaN, so a page whose every
 * head is NaN ranks first instead of last. */
TEST(test_quest_bounds_union_monotone) {
    rng r = {11};
    for (int isa = 0; isa <= max_isa(); isa++) {
        st_attn_ws *ws = NULL;
        CHECK_OK(st_attn_ws_create((st_isa)isa, &ws));
        REQUIRE(ws);
        int bad = 0, nonfinite = 0, trials = 0;
        for (int it = 0; it < 4000; it++) {
            const int dims[] = {7, 16, 64};
            const int D = dims[it % 3], G = 1 + (it / 3) % 4;
            uint16_t box[3][2 * 128];
            for (int b = 0; b < 2; b++)
                for (int d = 0; d < D; d++) {
                    float lo = runif(&r) * 4.0f, hi = lo + (float)rint_(&r, 3) * fabsf(runif(&r));
                    if (rint_(&r, 8 * D) == 0) hi = INFINITY;
                    if (rint_(&r, 8 * D) == 0) lo = -INFINITY;
                    if (rint_(&r, 32 * D) == 0) lo = NAN;
                    box[b][d] = st_fp32_to_fp16(lo), box[b][D + d] = st_fp32_to_fp16(hi);
                }
            for (int d = 0; d < 2 * D; d++) { /* the union, as kv_quest_tree.c keeps it */
                const float a = st_fp16_to_fp32(box[0][d]), c = st_fp16_to_fp32(box[1][d]);
                const int wider_c = isnan(a) ? 0 : isnan(c) ? 1 : d >= D ? c > a : c < a;
                box[2][d] = wider_c ? box[1][d] : box[0][d];
            }
            float q[4 * 128];
            for (int i = 0; i < G * D; i++) q[i] = rint_(&r, 3) == 0 ? 0.0f : runif(&r) * 2.0f;
            float bd[3];
            for (int b = 0; b < 3; b++) CHECK_OK(st_attn_quest_bounds(ws, D, G, q, box[b], 2 * D, 1, &bd[b]));
            for (int b = 0; b < 2; b++) bad += !(rank_key(bd[2]) >= rank_key(bd[b]));
            nonfinite += !isfinite(bd[0]) + !isfinite(bd[1]);
            trials++;
        }
        /* every head NaN: the bound is NaN, not the max over no head (-inf) */
        {
            const int D = 16, G = 2;
            uint16_t box[2 * 16];
            float q[2 * 16];
            for (int d = 0; d < D; d++) box[d] = st_fp32_to_fp16(-1.0f), box[D + d] = st_fp32_to_fp16(1.0f);
            for (int i = 0; i < G * D; i++) q[i] = 0.5f;
            box[D + 3] = st_fp32_to_fp16(INFINITY);
            q[3] = q[D + 3] = 0.0f;
            float b;
            CHECK_OK(st_attn_quest_bounds(ws, D, G, q, box, 2 * D, 1, &b));
            CHECK(isnan(b));
        }
        fprintf(stderr, "  isa %d: %d box pairs, %d non-finite page bounds, %d unions below a member\n", isa,
                trials, nonfinite, bad);
        CHECK(nonfinite > 500 && nonfinite < 2 * trials - 500); /* both kinds met */
        CHECK_INT(bad, 0);
        st_attn_ws_destroy(ws);
    }
}

TEST_MAIN(test_box_kernels_bit_identical, test_quest_bounds, test_quest_bounds_union_monotone)
