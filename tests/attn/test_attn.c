/* Attention kernels (src/attn) against a contiguous double-precision reference, across
 * geometries, KV types, ISAs and thread counts.
 *
 * Error measure and the f32 / f16 thresholds: attn_ref.h (shared with tests/kv). */
#include "strata/attn.h"
#include "../test.h"
#include "attn_ref.h"
#include "attn_seq.h"

#include <math.h>

/* More named thresholds (relative, as in attn_ref.h). The reference is computed from the
 * dequantized KV, so every type differs from it only by f32 rounding of the kernels'
 * arithmetic. */
#define TOL_Q8 2e-5   /* q8_0: the scale multiplies the int8 dot product after the sum */
#define TOL_SIMD 1e-5 /* SIMD path vs scalar path */

/* Double-precision attention of one query [n_head][D] over the reference tokens with
 * position <= lim (and, when page_ok is given, logical page allowed for the KV head:
 * page_ok[h * n_log + page]). out, den: [n_head][D]; den as in the header comment. */
static void ref_attn(const tseq *s, const float *q, int64_t lim, const uint8_t *page_ok,
                     double *out, double *den) {
    const int H = s->g.n_kv_head, D = s->g.head_dim, G = s->g.n_head / H;
    const double scale = 1.0 / sqrt((double)D);
    double *sc = malloc(((size_t)s->n_ref + 1) * sizeof(double));
    for (int hq = 0; hq < s->g.n_head; hq++) {
        int h = hq / G;
        double m = -INFINITY;
        for (int t = 0; t < s->n_ref; t++) {
            sc[t] = -INFINITY;
            if (s->ref_pos[t] > lim || (page_ok && !page_ok[h * s->n_log + s->ref_page[t]])) continue;
            double x = 0;
            for (int d = 0; d < D; d++) x += (double)q[hq * D + d] * s->ref_k[((size_t)t * H + h) * D + d];
            sc[t] = x * scale;
            if (sc[t] > m) m = sc[t];
        }
        double *o = out + (size_t)hq * D, *dn = den + (size_t)hq * D;
        for (int d = 0; d < D; d++) o[d] = dn[d] = 0;
        if (m == -INFINITY) continue;
        double l = 0;
        for (int t = 0; t < s->n_ref; t++) {
            if (sc[t] == -INFINITY) continue;
            double p = exp(sc[t] - m);
            l += p;
            for (int d = 0; d < D; d++) {
                double v = s->ref_v[((size_t)t * H + h) * D + d];
                o[d] += p * v;
                dn[d] += p * fabs(v);
            }
        }
        for (int d = 0; d < D; d++) o[d] /= l, dn[d] /= l;
    }
    free(sc);
}

static st_attn_seq seq_of(const tseq *s) {
    return (st_attn_seq){.pages = s->pages, .n_pages = s->n_pages};
}

static double tol_for(st_type t) {
    return t == ST_TYPE_F32 ? TOL_F32 : t == ST_TYPE_Q8_0 ? TOL_Q8 : TOL_F16;
}

static st_ctx *ctx_threads(int n) {
    st_ctx_params p = st_ctx_default_params();
    p.n_threads = n;
    st_ctx *ctx = NULL;
    if (st_ctx_create(&p, &ctx)) return NULL;
    return ctx;
}

static const int k_dims[] = {32, 64, 128};
static const int k_groups[] = {1, 2, 4, 8};
static const int k_pages[] = {8, 16, 64};

/* Decode of the sequence against the double reference; with ctx1 (NULL: no), also the same
 * bits from ctx1's thread count. */
static void check_decode(st_ctx *ctx, st_ctx *ctx1, st_attn_ws *ws, st_isa isa, const tparams *tp, rng *r) {
    tseq s;
    tseq_make(&s, tp, r);
    const int NH = s.g.n_head, D = tp->D;
    float *q = rand_q(r, (size_t)NH * D), *o = malloc(sizeof(float) * NH * D);
    float *o1 = malloc(sizeof(float) * NH * D);
    double *ref = malloc(sizeof(double) * NH * D), *den = malloc(sizeof(double) * NH * D);
    st_attn_seq sq = seq_of(&s);
    CHECK_OK(st_attn_decode(ctx, ws, &s.g, &sq, q, o));
    if (ctx1) {
        CHECK_OK(st_attn_decode(ctx1, ws, &s.g, &sq, q, o1));
        CHECK(memcmp(o, o1, sizeof(float) * NH * D) == 0);
    }
    ref_attn(&s, q, INT64_MAX, NULL, ref, den);
    double e = rel_err(o, ref, den, NH, D);
    if (!(e <= tol_for(tp->type)))
        fprintf(stderr, "  isa %s type %s H %d G %d D %d P %d len %lld: err %.3g\n", st_isa_name(isa),
                st_type_name(tp->type), tp->n_kv_head, tp->G, D, tp->P, (long long)tp->len, e);
    CHECK(e <= tol_for(tp->type));
    free(q), free(o), free(o1), free(ref), free(den);
    tseq_free(&s);
}

/* Decode over random geometry for every type and ISA, against the double reference. */
TEST(test_decode_vs_reference) {
    rng r = {1};
    st_ctx *ctx = ctx_threads(2);
    REQUIRE(ctx);
    const st_type types[] = {ST_TYPE_F32, ST_TYPE_F16, ST_TYPE_BF16, ST_TYPE_Q8_0};
    for (int isa = 0; isa <= max_isa(); isa++) {
        st_attn_ws *ws = NULL;
        CHECK_OK(st_attn_ws_create((st_isa)isa, &ws));
        REQUIRE(ws);
        for (int it = 0; it < 24; it++) {
            tparams tp = {.n_kv_head = 1 + rint_(&r, 3), .G = k_groups[it % 4],
                          .D = k_dims[(it / 4) % 3], .P = k_pages[rint_(&r, 3)],
                          .type = types[(it + it / 12) % 4], .len = 1 + rint_(&r, 700),
                          .hole_pct = 20, .mask_pct = 30};
            check_decode(ctx, NULL, ws, (st_isa)isa, &tp, &r);
        }
        st_attn_ws_destroy(ws);
    }
    st_ctx_destroy(ctx);
}

/* Chunk of the sequence's last n_q positions (tp->len >= n_q) against the double
 * reference, every query row within the type's tolerance. */
static void check_chunk(st_ctx *ctx, st_attn_ws *ws, st_isa isa, const tparams *tp, int n_q, rng *r) {
    tseq s;
    tseq_make(&s, tp, r);
    const int NH = s.g.n_head, D = tp->D;
    const int64_t pos0 = tp->len - n_q;
    float *q = rand_q(r, (size_t)n_q * NH * D), *o = malloc(sizeof(float) * n_q * NH * D);
    double *ref = malloc(sizeof(double) * NH * D), *den = malloc(sizeof(double) * NH * D);
    st_attn_seq sq = seq_of(&s);
    CHECK_OK(st_attn_chunk(ctx, ws, &s.g, &sq, q, n_q, pos0, o));
    double worst = 0;
    for (int i = 0; i < n_q; i++) {
        ref_attn(&s, q + (size_t)i * NH * D, pos0 + i, NULL, ref, den);
        double e = rel_err(o + (size_t)i * NH * D, ref, den, NH, D);
        if (!(e <= worst)) worst = e;
    }
    if (!(worst <= tol_for(tp->type)))
        fprintf(stderr, "  isa %s type %s G %d D %d P %d len %lld n_q %d: err %.3g\n",
                st_isa_name(isa), st_type_name(tp->type), tp->G, D, tp->P, (long long)tp->len, n_q,
                worst);
    CHECK(worst <= tol_for(tp->type));
    free(q), free(o), free(ref), free(den);
    tseq_free(&s);
}

/* A prefill chunk longer than one tile of every ISA (AVX-512 tiles hold 128 rows, the
 * others 32): the tiles' edges fall inside pages and across the causal diagonal. */
TEST(test_chunk_many_tiles) {
    rng r = {12};
    st_ctx *ctx = ctx_threads(2);
    REQUIRE(ctx);
    for (int isa = 0; isa <= max_isa(); isa++) {
        st_attn_ws *ws = NULL;
        CHECK_OK(st_attn_ws_create((st_isa)isa, &ws));
        REQUIRE(ws);
        for (int it = 0; it < 2; it++) {
            tparams tp = {.n_kv_head = 1 + it, .G = 2 + it, .D = 32, .P = 16,
                          .type = it ? ST_TYPE_F16 : ST_TYPE_F32, .len = 380 + rint_(&r, 40),
                          .hole_pct = 10, .mask_pct = 20};
            check_chunk(ctx, ws, (st_isa)isa, &tp, 150 + rint_(&r, 100), &r);
        }
        st_attn_ws_destroy(ws);
    }
    st_ctx_destroy(ctx);
}

/* Decode shapes off the common path: group sizes that leave 1-3 rows after the groups of
 * four (the run kernels' remainders), head dims whose last chunk is 16 or 8 dims, pages
 * smaller than a block (partial blocks only), an odd page size and a page larger than
 * ST_ATTN_MAX_PAGE_SIZE (runs are slices of it); against the reference, every ISA, and the
 * same bits for 1 and 2 threads. */
TEST(test_decode_odd_shapes) {
    rng r = {11};
    st_ctx *ctx1 = ctx_threads(1), *ctx2 = ctx_threads(2);
    REQUIRE(ctx1 && ctx2);
    const st_type types[] = {ST_TYPE_F32, ST_TYPE_F16, ST_TYPE_BF16, ST_TYPE_Q8_0};
    static const int groups[] = {3, 5, 6, 7}, dims[] = {16, 40, 80, 96}, pages[] = {1, 4, 24, 300};
    for (int isa = 0; isa <= max_isa(); isa++) {
        st_attn_ws *ws = NULL;
        CHECK_OK(st_attn_ws_create((st_isa)isa, &ws));
        REQUIRE(ws);
        for (int it = 0; it < 16; it++) {
            tparams tp = {.n_kv_head = 1 + rint_(&r, 2), .G = groups[it % 4], .D = dims[(it / 4) % 4],
                          .P = pages[(it + it / 4) % 4], .type = types[(it + it / 8) % 4],
                          .len = 1 + rint_(&r, 900), .hole_pct = 20, .mask_pct = 30};
            if (tp.P > ST_ATTN_MAX_PAGE_SIZE) tp.hole_pct = 0; /* a contiguous cache */
            check_decode(ctx2, ctx1, ws, (st_isa)isa, &tp, &r);
        }
        st_attn_ws_destroy(ws);
    }
    st_ctx_destroy(ctx1);
    st_ctx_destroy(ctx2);
}

/* Chunk queries with the causal mask: the chunk is the sequence's last n_q positions. */
TEST(test_chunk_vs_reference) {
    rng r = {2};
    st_ctx *ctx = ctx_threads(2);
    REQUIRE(ctx);
    const st_type types[] = {ST_TYPE_F32, ST_TYPE_F16, ST_TYPE_BF16, ST_TYPE_Q8_0};
    for (int isa = 0; isa <= max_isa(); isa++) {
        st_attn_ws *ws = NULL;
        CHECK_OK(st_attn_ws_create((st_isa)isa, &ws));
        REQUIRE(ws);
        for (int it = 0; it < 12; it++) {
            tparams tp = {.n_kv_head = 1 + rint_(&r, 2), .G = k_groups[it % 4],
                          .D = k_dims[rint_(&r, 3)], .P = k_pages[it % 3], .type = types[it % 4],
                          .len = 40 + rint_(&r, 300), .hole_pct = 15, .mask_pct = 30};
            check_chunk(ctx, ws, (st_isa)isa, &tp, 1 + rint_(&r, 40), &r);
        }
        st_attn_ws_destroy(ws);
    }
    st_ctx_destroy(ctx);
}

/* Each SIMD path against the scalar path at awkward lengths, head dims and group sizes
 * (head_dim 8 and 24 make AVX-512 fall back to scalar; 48 and 80 are partial 64-blocks). */
TEST(test_simd_vs_scalar) {
    static const int lens[] = {1, 3, 7, 15, 17, 31, 33, 127, 1023};
    static const int dims[] = {8, 16, 24, 48, 64, 80, 128};
    static const int groups[] = {1, 3, 4, 5, 6, 7, 8};
    static const int psizes[] = {1, 3, 8, 16, 17, 64, 256};
    rng r = {3};
    st_attn_ws *ref_ws = NULL;
    CHECK_OK(st_attn_ws_create(ST_ISA_SCALAR, &ref_ws));
    REQUIRE(ref_ws);
    for (int isa = 1; isa <= max_isa(); isa++) {
        st_attn_ws *ws = NULL;
        CHECK_OK(st_attn_ws_create((st_isa)isa, &ws));
        REQUIRE(ws);
        for (int it = 0; it < 27; it++) {
            tparams tp = {.n_kv_head = 1 + rint_(&r, 2), .G = groups[it % 7], .D = dims[(it / 7 + it) % 7],
                          .P = psizes[rint_(&r, 7)], .type = (st_type[]){ST_TYPE_F32, ST_TYPE_F16,
                          ST_TYPE_BF16, ST_TYPE_Q8_0}[it % 4], .len = lens[it % 9],
                          .hole_pct = 10, .mask_pct = 30};
            tseq s;
            tseq_make(&s, &tp, &r);
            const int NH = s.g.n_head, D = tp.D, n_q = 1 + rint_(&r, 9);
            float *q = rand_q(&r, (size_t)n_q * NH * D);
            float *a = malloc(sizeof(float) * n_q * NH * D), *b = malloc(sizeof(float) * n_q * NH * D);
            double *bd = malloc(sizeof(double) * n_q * NH * D), *den = malloc(sizeof(double) * NH * D);
            st_attn_seq sq = seq_of(&s);
            CHECK_OK(st_attn_decode(NULL, ref_ws, &s.g, &sq, q, b));
            CHECK_OK(st_attn_decode(NULL, ws, &s.g, &sq, q, a));
            ref_attn(&s, q, INT64_MAX, NULL, bd, den); /* den: the row magnitudes */
            for (int i = 0; i < NH * D; i++) bd[i] = b[i];
            double e = rel_err(a, bd, den, NH, D);
            int64_t pos0 = tp.len - n_q < 0 ? 0 : tp.len - n_q;
            CHECK_OK(st_attn_chunk(NULL, ref_ws, &s.g, &sq, q, n_q, pos0, b));
            CHECK_OK(st_attn_chunk(NULL, ws, &s.g, &sq, q, n_q, pos0, a));
            for (int i = 0; i < n_q; i++) {
                ref_attn(&s, q + (size_t)i * NH * D, pos0 + i, NULL, bd, den);
                for (int j = 0; j < NH * D; j++) bd[j] = b[(size_t)i * NH * D + j];
                double ei = rel_err(a + (size_t)i * NH * D, bd, den, NH, D);
                if (!(ei <= e)) e = ei;
            }
            if (!(e <= TOL_SIMD))
                fprintf(stderr, "  %s vs scalar: type %s G %d D %d P %d len %lld: err %.3g\n",
                        st_isa_name((st_isa)isa), st_type_name(tp.type), tp.G, D, tp.P,
                        (long long)tp.len, e);
            CHECK(e <= TOL_SIMD);
            free(q), free(a), free(b), free(bd), free(den);
            tseq_free(&s);
        }
        st_attn_ws_destroy(ws);
    }
    st_attn_ws_destroy(ref_ws);
}

/* 1, 2 and 3 threads give the same bits, for batched decode and for chunks. */
TEST(test_threads_bit_identical) {
    rng r = {4};
    st_ctx *ctxs[3] = {ctx_threads(1), ctx_threads(2), ctx_threads(3)};
    REQUIRE(ctxs[0] && ctxs[1] && ctxs[2]);
    for (int isa = 0; isa <= max_isa(); isa++) {
        st_attn_ws *ws = NULL;
        CHECK_OK(st_attn_ws_create((st_isa)isa, &ws));
        REQUIRE(ws);
        enum { NS = 3 };
        tseq s[NS];
        st_attn_seq sq[NS];
        for (int i = 0; i < NS; i++) {
            tparams tp = {.n_kv_head = 2, .G = 4, .D = 64, .P = 16, .type = ST_TYPE_F16,
                          .len = 300 + 900 * i + rint_(&r, 50), .hole_pct = 10, .mask_pct = 20};
            tseq_make(&s[i], &tp, &r);
            sq[i] = seq_of(&s[i]);
        }
        const int NH = 8, D = 64, n_q = 21;
        float *q = rand_q(&r, (size_t)n_q * NH * D);
        float *o[3], *c[3];
        for (int t = 0; t < 3; t++) {
            o[t] = malloc(sizeof(float) * NS * NH * D);
            c[t] = malloc(sizeof(float) * n_q * NH * D);
            CHECK_OK(st_attn_decode_batch(ctxs[t], ws, &s[0].g, sq, NS, q, o[t]));
            CHECK_OK(st_attn_chunk(ctxs[t], ws, &s[2].g, &sq[2], q, n_q, 2000, c[t]));
        }
        for (int t = 1; t < 3; t++) {
            CHECK(memcmp(o[0], o[t], sizeof(float) * NS * NH * D) == 0);
            CHECK(memcmp(c[0], c[t], sizeof(float) * n_q * NH * D) == 0);
        }
        for (int t = 0; t < 3; t++) free(o[t]), free(c[t]);
        free(q);
        for (int i = 0; i < NS; i++) tseq_free(&s[i]);
        st_attn_ws_destroy(ws);
    }
    for (int t = 0; t < 3; t++) st_ctx_destroy(ctxs[t]);
}

/* Lists of ST_ATTN_LONG_LIST_TOKENS or more are cut into runs twice as long: 1, 2 and 3
 * threads still give the same bits there, alone and in a batch with a short list, and the
 * result stays within tolerance of the reference (few heads: the lists are what matters). */
TEST(test_threads_long_lists) {
    rng r = {9};
    st_ctx *ctxs[3] = {ctx_threads(1), ctx_threads(2), ctx_threads(3)};
    REQUIRE(ctxs[0] && ctxs[1] && ctxs[2]);
    for (int isa = 0; isa <= max_isa(); isa++) {
        st_attn_ws *ws = NULL;
        CHECK_OK(st_attn_ws_create((st_isa)isa, &ws));
        REQUIRE(ws);
        enum { NS = 3 };
        /* ~4200 tokens without holes (263 listed pages: just past the 256-page cut), ~9000
         * with holes, and a short list that keeps the short runs inside the same batch */
        const int64_t lens[NS] = {4200 + rint_(&r, 16), 9000 + rint_(&r, 100), 700};
        const int holes[NS] = {0, 10, 10};
        tseq s[NS];
        st_attn_seq sq[NS];
        for (int i = 0; i < NS; i++) {
            tparams tp = {.n_kv_head = 1, .G = 2, .D = 32, .P = 16, .type = ST_TYPE_F32,
                          .len = lens[i], .hole_pct = holes[i], .mask_pct = 20};
            tseq_make(&s[i], &tp, &r);
            sq[i] = seq_of(&s[i]);
        }
        CHECK_INT(st_attn_pages_per_run(16, s[0].n_pages), 2 * ST_ATTN_SPLIT_TOKENS / 16);
        CHECK_INT(st_attn_pages_per_run(16, s[1].n_pages), 2 * ST_ATTN_SPLIT_TOKENS / 16);
        CHECK_INT(st_attn_pages_per_run(16, s[2].n_pages), ST_ATTN_SPLIT_TOKENS / 16);
        const int NH = 2, D = 32, n_q = 5;
        float *q = rand_q(&r, (size_t)n_q * NH * D); /* n_q >= NS rows: decode and chunk */
        float *o[3], *one[3], *c[3];
        double ref[2 * 32], den[2 * 32];
        for (int t = 0; t < 3; t++) {
            o[t] = malloc(sizeof(float) * NS * NH * D);
            one[t] = malloc(sizeof(float) * NS * NH * D);
            c[t] = malloc(sizeof(float) * n_q * NH * D);
            CHECK_OK(st_attn_decode_batch(ctxs[t], ws, &s[0].g, sq, NS, q, o[t]));
            for (int i = 0; i < NS; i++)
                CHECK_OK(st_attn_decode(ctxs[t], ws, &s[i].g, &sq[i], q + (size_t)i * NH * D,
                                        one[t] + (size_t)i * NH * D));
            CHECK_OK(st_attn_chunk(ctxs[t], ws, &s[1].g, &sq[1], q, n_q, lens[1] - n_q, c[t]));
        }
        for (int t = 0; t < 3; t++) {
            CHECK(memcmp(o[0], o[t], sizeof(float) * NS * NH * D) == 0);
            CHECK(memcmp(o[0], one[t], sizeof(float) * NS * NH * D) == 0);
            CHECK(memcmp(c[0], c[t], sizeof(float) * n_q * NH * D) == 0);
        }
        for (int i = 0; i < NS; i++) {
            ref_attn(&s[i], q + (size_t)i * NH * D, INT64_MAX, NULL, ref, den);
            const double e = rel_err(o[0] + (size_t)i * NH * D, ref, den, NH, D);
            if (!(e <= TOL_F32))
                fprintf(stderr, "  isa %s long list %lld: err %.3g\n", st_isa_name((st_isa)isa),
                        (long long)lens[i], e);
            CHECK(e <= TOL_F32);
        }
        for (int t = 0; t < 3; t++) free(o[t]), free(one[t]), free(c[t]);
        free(q);
        for (int i = 0; i < NS; i++) tseq_free(&s[i]);
        st_attn_ws_destroy(ws);
    }
    for (int t = 0; t < 3; t++) st_ctx_destroy(ctxs[t]);
}

/* A sequence decoded inside a batch gets the same bits as decoded alone. */
TEST(test_batch_equals_single) {
    rng r = {5};
    st_ctx *ctx = ctx_threads(2);
    REQUIRE(ctx);
    for (int isa = 0; isa <= max_isa(); isa++) {
        st_attn_ws *ws = NULL;
        CHECK_OK(st_attn_ws_create((st_isa)isa, &ws));
        REQUIRE(ws);
        enum { NS = 5 };
        tseq s[NS];
        st_attn_seq sq[NS];
        for (int i = 0; i < NS; i++) {
            tparams tp = {.n_kv_head = 2, .G = 2, .D = 32, .P = 8, .type = ST_TYPE_BF16,
                          .len = 1 + rint_(&r, 1500), .hole_pct = 20, .mask_pct = 20};
            tseq_make(&s[i], &tp, &r);
            sq[i] = seq_of(&s[i]);
        }
        const int NH = 4, D = 32;
        float *q = rand_q(&r, (size_t)NS * NH * D), *ob = malloc(sizeof(float) * NS * NH * D);
        float *o1 = malloc(sizeof(float) * NH * D);
        CHECK_OK(st_attn_decode_batch(ctx, ws, &s[0].g, sq, NS, q, ob));
        for (int i = 0; i < NS; i++) {
            CHECK_OK(st_attn_decode(ctx, ws, &s[0].g, &sq[i], q + (size_t)i * NH * D, o1));
            CHECK(memcmp(o1, ob + (size_t)i * NH * D, sizeof(float) * NH * D) == 0);
        }
        free(q), free(ob), free(o1);
        for (int i = 0; i < NS; i++) tseq_free(&s[i]);
        st_attn_ws_destroy(ws);
    }
    st_ctx_destroy(ctx);
}

/* Quest's exactness gate: a selection listing every page is bit-identical to dense, and a
 * per-head subset equals the reference restricted to those pages. */
TEST(test_selection) {
    rng r = {6};
    st_ctx *ctx = ctx_threads(2);
    REQUIRE(ctx);
    for (int isa = 0; isa <= max_isa(); isa++) {
        st_attn_ws *ws = NULL;
        CHECK_OK(st_attn_ws_create((st_isa)isa, &ws));
        REQUIRE(ws);
        tparams tp = {.n_kv_head = 4, .G = 2, .D = 64, .P = 16, .type = ST_TYPE_F32,
                      .len = 2500, .hole_pct = 5, .mask_pct = 10};
        tseq s;
        tseq_make(&s, &tp, &r);
        const int H = 4, NH = 8, D = 64, NP = s.n_pages;
        float *q = rand_q(&r, (size_t)NH * D), *od = malloc(sizeof(float) * NH * D);
        float *os = malloc(sizeof(float) * NH * D);
        int32_t *sel = malloc(sizeof(int32_t) * H * NP), n_sel[4];
        st_attn_seq dense = seq_of(&s);
        CHECK_OK(st_attn_decode(ctx, ws, &s.g, &dense, q, od));
        for (int h = 0; h < H; h++) {
            n_sel[h] = NP;
            for (int i = 0; i < NP; i++) sel[h * NP + i] = i;
        }
        st_attn_seq sp = dense;
        sp.sel = sel, sp.n_sel = n_sel, sp.sel_stride = NP;
        CHECK_OK(st_attn_decode(ctx, ws, &s.g, &sp, q, os));
        CHECK(memcmp(od, os, sizeof(float) * NH * D) == 0);
        /* per-head subsets: head h keeps every (h+2)-th page plus the last one */
        uint8_t *ok = calloc((size_t)H * s.n_log, 1);
        for (int h = 0; h < H; h++) {
            n_sel[h] = 0;
            for (int i = 0; i < NP; i++)
                if (i % (h + 2) == 0 || i == NP - 1) {
                    sel[h * NP + n_sel[h]++] = i;
                    ok[h * s.n_log + s.page_log[i]] = 1;
                }
        }
        CHECK_OK(st_attn_decode(ctx, ws, &s.g, &sp, q, os));
        double *ref = malloc(sizeof(double) * NH * D), *den = malloc(sizeof(double) * NH * D);
        ref_attn(&s, q, INT64_MAX, ok, ref, den);
        CHECK(rel_err(os, ref, den, NH, D) <= TOL_F32);
        free(q), free(od), free(os), free(sel), free(ok), free(ref), free(den);
        tseq_free(&s);
        st_attn_ws_destroy(ws);
    }
    st_ctx_destroy(ctx);
}

/* Nothing to attend: no pages, or every slot masked, gives zeros (not NaN). */
TEST(test_empty_and_masked) {
    st_attn_ws *ws = NULL;
    CHECK_OK(st_attn_ws_create((st_isa)max_isa(), &ws));
    REQUIRE(ws);
    st_attn_geom g = {.n_head = 4, .n_kv_head = 2, .head_dim = 16, .page_size = 16,
                      .type = ST_TYPE_F32};
    float q[64], o[64];
    for (int i = 0; i < 64; i++) q[i] = 1, o[i] = NAN;
    st_attn_seq none = {0};
    CHECK_OK(st_attn_decode(NULL, ws, &g, &none, q, o));
    for (int i = 0; i < 64; i++) CHECK(o[i] == 0);
    float kv[2 * 16 * 16];
    for (int i = 0; i < 2 * 16 * 16; i++) kv[i] = NAN;
    uint64_t zero[4] = {0};
    st_attn_page pg = {.k = kv, .v = kv, .valid = zero, .n_tokens = 16, .pos0 = 0};
    st_attn_seq one = {.pages = &pg, .n_pages = 1};
    for (int i = 0; i < 64; i++) o[i] = NAN;
    CHECK_OK(st_attn_decode(NULL, ws, &g, &one, q, o));
    for (int i = 0; i < 64; i++) CHECK(o[i] == 0);
    /* chunk whose queries all come before the page */
    pg.valid = NULL;
    pg.pos0 = 100;
    CHECK_OK(st_attn_chunk(NULL, ws, &g, &one, q, 1, 50, o));
    for (int i = 0; i < 64; i++) CHECK(o[i] == 0);
    st_attn_ws_destroy(ws);
}

TEST(test_bad_input) {
    st_ctx *ctx = ctx_threads(1);
    st_attn_ws *ws = NULL;
    CHECK_INT(st_attn_ws_create((st_isa)7, &ws), ST_E_INVAL);
    CHECK(ws == NULL);
    CHECK_OK(st_attn_ws_create(ST_ISA_SCALAR, &ws));
    REQUIRE(ws && ctx);
    float kv[16 * 16], q[32], o[32];
    memset(kv, 0, sizeof kv);
    for (int i = 0; i < 32; i++) q[i] = 1, o[i] = 7;
    st_attn_geom g = {.n_head = 2, .n_kv_head = 1, .head_dim = 16, .page_size = 16,
                      .type = ST_TYPE_F32};
    st_attn_page pg = {.k = kv, .v = kv, .n_tokens = 17};
    st_attn_seq s = {.pages = &pg, .n_pages = 1};
    CHECK_INT(st_attn_decode(ctx, ws, &g, &s, q, o), ST_E_INVAL); /* n_tokens > page_size */
    CHECK(strstr(st_ctx_error(ctx), "n_tokens") != NULL);
    pg.n_tokens = 16;
    st_attn_geom bad = g;
    bad.n_head = 3; /* not a multiple of n_kv_head = 2 */
    bad.n_kv_head = 2;
    CHECK_INT(st_attn_decode(ctx, ws, &bad, &s, q, o), ST_E_INVAL);
    bad = g;
    bad.type = ST_TYPE_Q4_K;
    CHECK_INT(st_attn_decode(ctx, ws, &bad, &s, q, o), ST_E_INVAL);
    bad = g;
    bad.type = ST_TYPE_Q8_0; /* no scales */
    CHECK_INT(st_attn_decode(ctx, ws, &bad, &s, q, o), ST_E_INVAL);
    int32_t sel[1] = {1}, n_sel[1] = {1};
    st_attn_seq ss = s;
    ss.sel = sel, ss.n_sel = n_sel, ss.sel_stride = 1;
    CHECK_INT(st_attn_decode(ctx, ws, &g, &ss, q, o), ST_E_INVAL); /* index 1 of 1 page */
    CHECK_INT(st_attn_chunk(ctx, ws, &g, &s, q, 1, -1, o), ST_E_INVAL);
    CHECK_INT(st_attn_decode(ctx, ws, &g, NULL, q, o), ST_E_INVAL);
    for (int i = 0; i < 32; i++) CHECK(o[i] == 7); /* untouched on error */
    st_attn_ws_destroy(ws);
    st_attn_ws_destroy(NULL);
    st_ctx_destroy(ctx);
}

TEST_MAIN(test_decode_vs_reference, test_decode_odd_shapes, test_chunk_many_tiles, test_chunk_vs_reference,
          test_simd_vs_scalar, test_threads_bit_identical, test_threads_long_lists,
          test_batch_equals_single, test_selection, test_empty_and_masked, test_bad_input)
