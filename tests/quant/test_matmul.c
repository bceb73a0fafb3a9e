/* Threaded products: st_matvec / st_matvec_multi / st_matmul are bit-identical for 1, 2
 * and 3 threads and to each other, and equal a double-precision reference over the
 * dequantized operands; argument errors are reported. */
#include "strata/quant.h"
#include "../test.h"
#include "quant_test_util.h"
#include "quant/quant_int.h"

/* f64 reference over dequantized operands: only the kernel's float summation order
 * and the products' f32 rounding differ from it. */
#define MATVEC_REF_REL_TOL 2e-5
/* q4_1 / q5_1 pair with q8_1, whose block sum s = d * sum(q) is stored in fp16 (as in
 * ggml): the min term m * s carries s's 2^-11 relative rounding. */
#define MATVEC_REF_REL_TOL_Q8_1 2e-4
/* The panel layout against the row layout: the same products summed in another order (a
 * panel's sum, then the panels), relative to the largest |y|. */
#define PANELS_VS_ROWS_REL_TOL 2e-4

enum { ROWS = 67, COLS = 768, NTOK = 13, LDY = ROWS + 5 };

struct fixture {
    st_type t;
    size_t rb, ab;
    uint8_t *W;  /* [ROWS] rows of rb bytes */
    uint8_t *Xq; /* [NTOK] activation rows of ab bytes */
    float *Wd;   /* [ROWS][COLS] dequantized */
    float *Xd;   /* [NTOK][COLS] dequantized */
};

static int fixture_make(struct fixture *f, const st_kernels *k, st_type t, uint64_t seed) {
    memset(f, 0, sizeof *f);
    f->t = t;
    f->rb = st_row_bytes(t, COLS);
    f->ab = st_act_bytes(t, COLS);
    float *tmp = malloc(sizeof(float) * COLS * (ROWS > NTOK ? ROWS : NTOK));
    f->W = malloc(f->rb * ROWS);
    f->Xq = malloc(f->ab * NTOK);
    f->Wd = malloc(sizeof(float) * COLS * ROWS);
    f->Xd = malloc(sizeof(float) * COLS * NTOK);
    if (!tmp || !f->W || !f->Xq || !f->Wd || !f->Xd) return -1;
    qt_rng r = {seed};
    qt_fill(&r, tmp, (int64_t)COLS * ROWS, 0.1f);
    for (int i = 0; i < ROWS; i++)
        if (st_quantize_row(t, tmp + i * COLS, f->W + i * f->rb, COLS) ||
            st_dequantize_row(t, f->W + i * f->rb, f->Wd + i * COLS, COLS))
            return -1;
    qt_fill(&r, tmp, (int64_t)COLS * NTOK, 2.0f);
    if (st_quantize_act_rows(NULL, k, t, tmp, COLS, NTOK, COLS, f->Xq)) return -1;
    const st_type at = st_type_vec_dot_type(t);
    for (int i = 0; i < NTOK; i++)
        if (st_dequantize_row(at, f->Xq + i * f->ab, f->Xd + i * COLS, COLS)) return -1;
    free(tmp);
    return 0;
}

static void fixture_free(struct fixture *f) {
    free(f->W), free(f->Xq), free(f->Wd), free(f->Xd);
}

TEST(test_products_deterministic_and_exact) {
    st_threadpool *tps[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) CHECK_OK(st_threadpool_create(i + 1, &tps[i]));
    REQUIRE(tps[0] && tps[1] && tps[2]);
    int n_checked = 0;
    for (int isa = ST_ISA_SCALAR; isa <= ST_ISA_AVX512; isa++) {
        const st_kernels *k = st_kernels_get((st_isa)isa);
        if ((int)k->isa != isa) {
            test_untested(isa == ST_ISA_AVX2 ? "AVX2 products: CPU lacks AVX2" : "AVX-512 products: CPU lacks AVX-512+VNNI");
            continue;
        }
        for (int ti = 0; ti < QT_N_TYPES; ti++) {
            struct fixture f;
            REQUIRE(fixture_make(&f, k, QT_TYPES[ti].t, 1000 + ti) == 0);
            float y[3][NTOK][ROWS], Y[3][NTOK][LDY];
            for (int th = 0; th < 3; th++) {
                for (int tok = 0; tok < NTOK; tok++)
                    CHECK_OK(st_matvec(tps[th], k, f.t, f.W, ROWS, COLS, f.Xq + tok * f.ab, y[th][tok]));
                for (int i = 0; i < NTOK; i++)
                    for (int j = 0; j < LDY; j++) Y[th][i][j] = -12345.0f;
                CHECK_OK(st_matmul(tps[th], k, f.t, f.W, ROWS, COLS, NTOK, f.Xq, &Y[th][0][0], LDY));
            }
            int same_threads = 1, same_mm = 1, pad_kept = 1, worst_ok = 1;
            double worst = 0;
            const double tol = st_type_vec_dot_type(f.t) == ST_TYPE_Q8_1 ? MATVEC_REF_REL_TOL_Q8_1 : MATVEC_REF_REL_TOL;
            for (int tok = 0; tok < NTOK; tok++) {
                for (int th = 1; th < 3; th++) {
                    same_threads &= memcmp(y[0][tok], y[th][tok], sizeof y[0][tok]) == 0;
                    same_threads &= memcmp(Y[0][tok], Y[th][tok], sizeof(float) * ROWS) == 0;
                }
                same_mm &= memcmp(y[0][tok], Y[0][tok], sizeof y[0][tok]) == 0;
                for (int j = ROWS; j < LDY; j++) pad_kept &= Y[1][tok][j] == -12345.0f;
                for (int r = 0; r < ROWS; r++) {
                    double abs_sum;
                    const double ref = qt_dot64(f.Wd + r * COLS, f.Xd + tok * COLS, COLS, &abs_sum);
                    const double e = fabs(y[0][tok][r] - ref) / (abs_sum + 1e-30);
                    if (e > worst) worst = e;
                    worst_ok &= e <= tol;
                }
            }
            if (!worst_ok)
                fprintf(stderr, "  %s %s: error vs f64 reference %.3g > %.3g\n", st_isa_name(k->isa),
                        st_type_name(f.t), worst, tol);
            if (!same_threads || !same_mm)
                fprintf(stderr, "  %s %s: threads identical %d, matvec == matmul %d\n", st_isa_name(k->isa),
                        st_type_name(f.t), same_threads, same_mm);
            CHECK(same_threads);
            CHECK(same_mm);
            CHECK(pad_kept);
            CHECK(worst_ok);

            /* multi: three matrices (rows 67, 1, 40 of W) in one dispatch */
            const void *Ws[3] = {f.W, f.W + 5 * f.rb, f.W + 20 * f.rb};
            const int64_t rows[3] = {ROWS, 1, 40};
            float m0[ROWS], m1[1], m2[40];
            float *ys[3] = {m0, m1, m2};
            CHECK_OK(st_matvec_multi(tps[2], k, f.t, 3, Ws, rows, COLS, f.Xq, ys));
            CHECK(memcmp(m0, y[0][0], sizeof m0) == 0);
            CHECK(memcmp(m1, &y[0][0][5], sizeof m1) == 0);
            CHECK(memcmp(m2, &y[0][0][20], sizeof m2) == 0);
            n_checked++;
            fixture_free(&f);
        }
    }
    CHECK(n_checked >= QT_N_TYPES);
    for (int i = 0; i < 3; i++) st_threadpool_destroy(tps[i]);
}

/* The matvec rows kernels (activation expanded once) give vec_dot's bits for every row, at
 * one block, an odd block count (a half pair at the end) and long rows; so does st_matvec,
 * which uses them up to 2048 columns (4128 checks its vec_dot path). */
TEST(test_rows_kernels_match_vec_dot) {
    static const int lens[] = {32, 96, 768, 4128};
    enum { NR = 5 };
    int n_checked = 0;
    for (int isa = ST_ISA_SCALAR; isa <= ST_ISA_AVX512; isa++) {
        const st_kernels *k = st_kernels_get((st_isa)isa);
        if ((int)k->isa != isa) continue;
        for (int ti = 0; ti < QT_N_TYPES; ti++) {
            const st_type t = QT_TYPES[ti].t;
            const st_type_kernels *tk = &k->type[t];
            CHECK((tk->rows == NULL) == (tk->act_expand == NULL));
            if (!tk->rows) continue;
            for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
                const int n = lens[li];
                const size_t rb = st_row_bytes(t, n), ab = st_act_bytes(t, n);
                float *tmp = malloc(sizeof(float) * n * NR);
                uint8_t *W = malloc(rb * NR), *xq = malloc(ab);
                void *xe = st_alloc_aligned(st_act_x_bytes(n), 64);
                REQUIRE(tmp && W && xq && xe);
                qt_rng r = {77 + (uint64_t)n};
                qt_fill(&r, tmp, (int64_t)n * NR, 0.1f);
                for (int i = 0; i < NR; i++) REQUIRE(st_quantize_row(t, tmp + i * n, W + i * rb, n) == 0);
                qt_fill(&r, tmp, n, 2.0f);
                REQUIRE(st_quantize_act(k, t, tmp, xq, n) == 0);
                float want[NR], got[NR], mv[NR];
                for (int i = 0; i < NR; i++) tk->vec_dot(n, &want[i], W + i * rb, xq);
                tk->act_expand(n, xq, xe);
                tk->rows(n, NR, got, W, rb, xe);
                CHECK_OK(st_matvec(NULL, k, t, W, NR, n, xq, mv));
                if (memcmp(want, got, sizeof want) || memcmp(want, mv, sizeof want))
                    fprintf(stderr, "  %s %s n=%d: rows %g / matvec %g vs vec_dot %g\n", st_isa_name(k->isa),
                            st_type_name(t), n, got[0], mv[0], want[0]);
                CHECK(memcmp(want, got, sizeof want) == 0);
                CHECK(memcmp(want, mv, sizeof want) == 0);
                CHECK(want[0] != 0.0f);
                free(tmp), free(W), free(xq), st_free_aligned(xe);
                n_checked++;
            }
        }
    }
    if (!n_checked) test_skip("matvec rows kernels: none on this CPU (AVX-512 VNNI only)");
}

TEST(test_product_errors) {
    const st_kernels *k = st_kernels_get(ST_ISA_SCALAR);
    uint8_t w[64 * 34] = {0}, xq[64 * 34] = {0};
    float y[64];
    CHECK_INT(st_matvec(NULL, k, ST_TYPE_Q8_0, w, 2, 33, xq, y), ST_E_INVAL);
    CHECK_INT(st_matvec(NULL, k, ST_TYPE_Q8_0, w, 2, 0, xq, y), ST_E_INVAL);
    CHECK_INT(st_matvec(NULL, k, ST_TYPE_Q8_0, w, -1, 32, xq, y), ST_E_INVAL);
    CHECK_INT(st_matvec(NULL, k, ST_TYPE_Q8_0, NULL, 2, 32, xq, y), ST_E_INVAL);
    CHECK_INT(st_matvec(NULL, k, ST_TYPE_Q8_1, w, 2, 32, xq, y), ST_E_UNSUPPORTED);
    CHECK_INT(st_matvec(NULL, k, ST_TYPE_IQ4_NL, w, 2, 32, xq, y), ST_E_UNSUPPORTED);
    CHECK_INT(st_matvec(NULL, NULL, ST_TYPE_Q8_0, w, 2, 32, xq, y), ST_E_INVAL);
    CHECK_INT(st_matmul(NULL, k, ST_TYPE_Q8_0, w, 4, 32, 2, xq, y, 3), ST_E_INVAL); /* ldy < rows */
    CHECK_INT(st_matmul(NULL, k, ST_TYPE_Q8_0, w, 4, 32, -1, xq, y, 4), ST_E_INVAL);
    CHECK_OK(st_matmul(NULL, k, ST_TYPE_Q8_0, w, 4, 32, 0, xq, y, 4)); /* nothing to do */
    CHECK_INT(st_quantize_act_rows(NULL, k, ST_TYPE_Q8_0, y, 16, 2, 32, xq), ST_E_INVAL); /* ldx < cols */
    CHECK_INT(st_matvec_multi(NULL, k, ST_TYPE_Q8_0, -1, NULL, NULL, 32, xq, NULL), ST_E_INVAL);
    /* an all-zero q8_0 block has d = 0: the product is exactly 0 */
    CHECK_OK(st_matvec(NULL, k, ST_TYPE_Q8_0, w, 2, 64, xq, y));
    CHECK_NEAR(y[0], 0.0, 0);
}

/* The quad layout: for every table (the scalar one has no quad kernels and unpacks each unit),
 * st_matvec_multi_l and st_matmul_l over a packed matrix give the row layout's bits for
 * 1 and 2 threads; st_quads_row returns the original rows; shapes and types that cannot
 * take the layout are refused and left as they were. The Q4_K, Q5_K, Q6_K quad kernels and
 * Q8_0's group tile (AVX-512; Q4_K on AVX2 too) have their own arithmetic: there matvec and matmul over quads must agree bit for
 * bit, for 1 and 2 threads, and the row layout's products within the kernels' rounding; a
 * table without them unpacks the quads and gives the rows' bits. */
TEST(test_quad_layout) {
    enum { QR = 48, QC_MAX = 1280, QT = 7 }; /* 12 quads, 3 groups of 16 */
    st_threadpool *tp2 = NULL;
    CHECK_OK(st_threadpool_create(2, &tp2));
    const st_type types[] = {ST_TYPE_Q4_0, ST_TYPE_Q4_1, ST_TYPE_Q5_0, ST_TYPE_Q5_1, ST_TYPE_Q4_K, ST_TYPE_Q5_K, ST_TYPE_Q6_K, ST_TYPE_Q8_0};
    int n_checked = 0, n_own = 0;
    for (int isa = ST_ISA_SCALAR; isa <= ST_ISA_AVX512; isa++) {
        const st_kernels *k = st_kernels_get((st_isa)isa);
        if ((int)k->isa != isa) continue;
        for (int ti = 0; ti < 8; ti++) {
            const st_type t = types[ti];
            /* the K-quants, Q8_0: 5 spans of 256 columns a row (an odd count); the others 12 blocks of 32 */
            const bool own_layout = t == ST_TYPE_Q4_K || t == ST_TYPE_Q5_K || t == ST_TYPE_Q6_K || t == ST_TYPE_Q8_0;
            const int QC = own_layout ? QC_MAX : 384;
            const bool own_bits = own_layout && (k->type[t].tile4 || k->type[t].tilex);
            const size_t rb = st_row_bytes(t, QC), ab = st_act_bytes(t, QC);
            uint8_t *W = malloc(rb * QR), *P = malloc(rb * QR), *row = malloc(rb), *Xq = malloc(ab * QT);
            float *tmp = malloc(sizeof(float) * QC * QR);
            REQUIRE(W && P && row && Xq && tmp);
            qt_rng r = {77 + (uint64_t)ti};
            qt_fill(&r, tmp, (int64_t)QC * QR, 0.1f);
            for (int i = 0; i < QR; i++) CHECK_OK(st_quantize_row(t, tmp + i * QC, W + i * rb, QC));
            qt_fill(&r, tmp, (int64_t)QC * QT, 2.0f);
            CHECK_OK(st_quantize_act_rows(NULL, k, t, tmp, QC, QT, QC, Xq));
            memcpy(P, W, rb * QR);
            /* the tables with tile4: every SIMD table for the 32-blocks and Q4_K, AVX-512 for the others */
            CHECK_INT(st_quads_fit(k, t, QR, QC), own_layout && t != ST_TYPE_Q4_K ? isa == ST_ISA_AVX512 : isa != ST_ISA_SCALAR);
            CHECK_OK(st_pack_quads(t, P, QR, QC));
            CHECK(memcmp(P, W, rb * QR) != 0); /* really rearranged */
            int rows_same = 1;
            for (int i = 0; i < QR; i++) {
                CHECK_OK(st_quads_row(t, P, QR, QC, i, row));
                rows_same &= memcmp(row, W + i * rb, rb) == 0;
            }
            CHECK(rows_same);
            float y_rows[QR], y_quads[QR], Y_rows[QT][QR], Y_quads[QT][QR], Y_mv[2][QT][QR];
            int same = 1;
            double max_diff = 0, max_y = 0;
            for (int th = 0; th < 2; th++) {
                st_threadpool *tp = th ? tp2 : NULL;
                for (int tok = 0; tok < QT; tok++) {
                    const void *Wr = W, *Wq = P;
                    const int64_t rows = QR;
                    float *yr = y_rows, *yq = Y_mv[th][tok];
                    CHECK_OK(st_matvec_multi_l(tp, k, t, ST_WLAYOUT_ROWS, 1, &Wr, &rows, QC, Xq + tok * ab, &yr));
                    CHECK_OK(st_matvec_multi_l(tp, k, t, ST_WLAYOUT_QUADS, 1, &Wq, &rows, QC, Xq + tok * ab, &yq));
                    memcpy(y_quads, yq, sizeof y_quads);
                    if (!own_bits) same &= memcmp(y_rows, y_quads, sizeof y_rows) == 0;
                    for (int i = 0; i < QR; i++) {
                        max_diff = fmax(max_diff, fabs((double)y_quads[i] - y_rows[i]));
                        max_y = fmax(max_y, fabs((double)y_rows[i]));
                    }
                }
                CHECK_OK(st_matmul_l(tp, k, t, ST_WLAYOUT_ROWS, W, QR, QC, QT, Xq, &Y_rows[0][0], QR));
                CHECK_OK(st_matmul_l(tp, k, t, ST_WLAYOUT_QUADS, P, QR, QC, QT, Xq, &Y_quads[0][0], QR));
                if (own_bits) same &= memcmp(Y_quads, Y_mv[th], sizeof Y_quads) == 0; /* matmul == matvec */
                else same &= memcmp(Y_rows, Y_quads, sizeof Y_rows) == 0;
            }
            if (own_bits) same &= memcmp(Y_mv[0], Y_mv[1], sizeof Y_mv[0]) == 0; /* 1 and 2 threads */
            if (!same) fprintf(stderr, "  %s %s: quad products differ\n", st_isa_name(k->isa), st_type_name(t));
            CHECK(same);
            /* rows and quads round differently only in the f32 sums of a row's products: a
             * difference in the last bits of the largest product */
            const double rel = max_diff / max_y;
            CHECK(own_bits ? rel < 1e-6 && rel > 0 : rel == 0);
            if (own_bits)
                fprintf(stderr, "  %s %s quads vs rows: max difference %.2g of max |y| %.3g (%.2g)\n",
                        st_isa_name(k->isa), st_type_name(t), max_diff, max_y, rel);
            n_checked++, n_own += own_bits;
            free(W), free(P), free(row), free(Xq), free(tmp);
        }
    }
    CHECK(n_checked >= 8);
    /* refusals: not a packable type, rows not a multiple of 4 (Q8_0: of 16), cols not of 64
     * (K-quants: of 256) */
    uint8_t buf[8 * 34 * 2] = {0}, before[sizeof buf];
    memcpy(before, buf, sizeof buf);
    CHECK_INT(st_pack_quads(ST_TYPE_Q8_0, buf, 4, 64), ST_E_INVAL);
    CHECK_INT(st_pack_quads(ST_TYPE_Q8_0, buf, 16, 32), ST_E_INVAL);
    CHECK_INT(st_pack_quads(ST_TYPE_Q3_K, buf, 4, 256), ST_E_INVAL);
    CHECK_INT(st_pack_quads(ST_TYPE_Q4_0, buf, 6, 64), ST_E_INVAL);
    CHECK_INT(st_pack_quads(ST_TYPE_Q4_0, buf, 4, 96), ST_E_INVAL);
    CHECK_INT(st_pack_quads(ST_TYPE_Q4_K, buf, 4, 128), ST_E_INVAL);
    CHECK(memcmp(buf, before, sizeof buf) == 0);
    CHECK(!st_quads_fit(st_kernels_get(ST_ISA_AVX512), ST_TYPE_Q2_K, 4, 256));
    CHECK(!st_quads_fit(st_kernels_get(ST_ISA_AVX2), ST_TYPE_Q5_K, 4, 256));
    float y[8];
    const void *Wb = buf;
    const int64_t six = 6;
    float *yp = y;
    CHECK_INT(st_matvec_multi_l(NULL, st_kernels_get(ST_ISA_SCALAR), ST_TYPE_Q4_0, ST_WLAYOUT_QUADS, 1, &Wb, &six,
                                64, buf, &yp),
              ST_E_INVAL);
    CHECK_INT(st_quads_row(ST_TYPE_Q4_0, buf, 4, 64, 4, buf), ST_E_INVAL);
    st_threadpool_destroy(tp2);
}


/* The panel layout: st_panels_count's cuts; packing round-trips every row; matvec and matmul
 * over panels equal, for 1 and 2 threads, the definition (each panel's row dotted with its
 * slice of the activation by the table's vec_dot, summed in panel order) bit for bit, and the
 * row layout's product within the kernels' rounding; matmul's token rows equal matvec's. */
TEST(test_panel_layout) {
    CHECK_INT(st_panels_count(ST_TYPE_Q8_0, 4, 4096), 0);  /* short enough as it is */
    CHECK_INT(st_panels_count(ST_TYPE_Q8_0, 4, 8192), 2);
    CHECK_INT(st_panels_count(ST_TYPE_Q4_K, 4, 5632), 2);  /* TinyLlama's ff: 2 x 2816 */
    CHECK_INT(st_panels_count(ST_TYPE_F16, 4, 12288), 3);
    CHECK_INT(st_panels_count(ST_TYPE_F16, 4, 16384), 4);
    CHECK_INT(st_panels_count(ST_TYPE_Q8_0, 4, 4352), 0);  /* 17 x 256: only narrow cuts */
    CHECK_INT(st_panels_count(ST_TYPE_Q8_0, 0, 8192), 0);
    enum { PR = 37, PT = 6 };
    static const int64_t col_cases[] = {8192, 5632, 12288}; /* 2, 2 and 3 panels */
    st_threadpool *tp2 = NULL;
    CHECK_OK(st_threadpool_create(2, &tp2));
    int n_checked = 0;
    double worst_all = 0;
    for (int isa = ST_ISA_SCALAR; isa <= ST_ISA_AVX512; isa++) {
        const st_kernels *k = st_kernels_get((st_isa)isa);
        if ((int)k->isa != isa) continue;
        for (int t = 0; t < ST_TYPE_COUNT_; t++) {
            if (!k->type[t].vec_dot) continue;
            for (int ci = 0; ci < 3; ci++) {
                const int64_t PC = col_cases[ci];
                const int np = st_panels_count((st_type)t, PR, PC);
                if (!np) continue; /* a block size that does not divide the width */
                const int64_t pc = PC / np;
                const size_t rb = st_row_bytes((st_type)t, PC), ab = st_act_bytes((st_type)t, PC);
                const size_t abp = st_act_bytes((st_type)t, pc), pb = rb / (size_t)np;
                REQUIRE(abp * (size_t)np == ab && pb * (size_t)np == rb);
                uint8_t *W = malloc(rb * PR), *P = malloc(rb * PR), *row = malloc(rb), *Xq = malloc(ab * PT);
                float *tmp = malloc(sizeof(float) * PC * PR);
                REQUIRE(W && P && row && Xq && tmp);
                qt_rng r = {91 + (uint64_t)t + 7 * (uint64_t)ci};
                qt_fill(&r, tmp, PC * PR, 0.1f);
                for (int i = 0; i < PR; i++) CHECK_OK(st_quantize_row((st_type)t, tmp + i * PC, W + i * rb, PC));
                qt_fill(&r, tmp, PC * PT, 2.0f);
                CHECK_OK(st_quantize_act_rows(NULL, k, (st_type)t, tmp, PC, PT, PC, Xq));
                memcpy(P, W, rb * PR);
                CHECK_OK(st_pack_panels((st_type)t, P, PR, PC));
                CHECK(memcmp(P, W, rb * PR) != 0); /* really rearranged */
                int rows_same = 1;
                for (int i = 0; i < PR; i++) {
                    CHECK_OK(st_panels_row((st_type)t, P, PR, PC, i, row));
                    rows_same &= memcmp(row, W + i * rb, rb) == 0;
                }
                CHECK(rows_same);
                float want[PT][PR], y[PR], Y[PT][PR], y_rows[PR];
                for (int tok = 0; tok < PT; tok++)
                    for (int i = 0; i < PR; i++) {
                        float acc = 0;
                        for (int p = 0; p < np; p++) {
                            float d;
                            k->type[t].vec_dot((int)pc, &d, W + i * rb + (size_t)p * pb, Xq + tok * ab + (size_t)p * abp);
                            acc = p ? acc + d : d;
                        }
                        want[tok][i] = acc;
                    }
                int same = 1;
                double worst = 0;
                for (int th = 0; th < 2; th++) {
                    st_threadpool *tp = th ? tp2 : NULL;
                    for (int tok = 0; tok < PT; tok++) {
                        const void *Wp = P, *Wr = W;
                        const int64_t rows = PR;
                        float *yp = y, *yr = y_rows;
                        CHECK_OK(st_matvec_multi_l(tp, k, (st_type)t, ST_WLAYOUT_PANELS, 1, &Wp, &rows, PC, Xq + tok * ab, &yp));
                        CHECK_OK(st_matvec_multi_l(tp, k, (st_type)t, ST_WLAYOUT_ROWS, 1, &Wr, &rows, PC, Xq + tok * ab, &yr));
                        same &= memcmp(y, want[tok], sizeof y) == 0;
                        double scale = 0;
                        for (int i = 0; i < PR; i++) scale = fmax(scale, fabs((double)y_rows[i]));
                        for (int i = 0; i < PR; i++) worst = fmax(worst, fabs((double)y[i] - y_rows[i]) / scale);
                    }
                    CHECK_OK(st_matmul_l(tp, k, (st_type)t, ST_WLAYOUT_PANELS, P, PR, PC, PT, Xq, &Y[0][0], PR));
                    same &= memcmp(Y, want, sizeof Y) == 0;
                }
                if (!same)
                    fprintf(stderr, "  %s %s %lld cols: panel products differ from their definition\n",
                            st_isa_name(k->isa), st_type_name((st_type)t), (long long)PC);
                CHECK(same);
                if (!(worst <= PANELS_VS_ROWS_REL_TOL))
                    fprintf(stderr, "  %s %s: panels vs rows %.3g\n", st_isa_name(k->isa), st_type_name((st_type)t), worst);
                CHECK(worst <= PANELS_VS_ROWS_REL_TOL);
                worst_all = fmax(worst_all, worst);
                n_checked++;
                free(W), free(P), free(row), free(Xq), free(tmp);
            }
        }
    }
    CHECK(n_checked >= 11);
    fprintf(stderr, "  %d type x width x ISA cases in the panel layout; panels vs rows at most %.3g\n", n_checked,
            worst_all);
    /* refusals: a matrix that keeps its rows is not packed, nor multiplied as panels */
    uint8_t buf[4 * 34 * 128] = {0}, before[sizeof buf];
    memcpy(before, buf, sizeof buf);
    CHECK_INT(st_pack_panels(ST_TYPE_Q8_0, buf, 4, 4096), ST_E_INVAL);
    CHECK(memcmp(buf, before, sizeof buf) == 0);
    float yb[4], *ybp = yb;
    const void *Wb = buf;
    const int64_t four = 4;
    CHECK_INT(st_matvec_multi_l(NULL, st_kernels_get(ST_ISA_SCALAR), ST_TYPE_Q8_0, ST_WLAYOUT_PANELS, 1, &Wb, &four,
                                4096, buf, &ybp),
              ST_E_INVAL);
    CHECK_INT(st_panels_row(ST_TYPE_Q8_0, buf, 4, 4096, 0, buf), ST_E_INVAL);
    st_threadpool_destroy(tp2);
}


/* Q8_0 products over the group layout (st_tilex_fn), with rows and tokens that are no
 * multiple of the kernels' steps (7 groups: runs of 3, 3 and 1 per L2-sized call, a 2-thread
 * split of 3 and 4; 1..37 tokens: AMX tiles of 16 and tails, VNNI for the fewest and for short
 * tails, VNNI passes of 4 and tails) and
 * rows of 72 blocks (past the kernels' 64-block chunks of prepared activations): st_matmul_l
 * with the table as it is (AMX where it runs) equals, bit for bit, the VNNI-only table,
 * st_matvec_multi_l of each token alone, and the scalar twin of the group arithmetic, for 1
 * and 2 threads. */
TEST(test_q8_0_group_products) {
    const st_kernels *k = st_kernels_get(ST_ISA_AVX512), *vnni = st_kernels_get_ex(ST_ISA_AVX512, false);
    if (qt_max_isa() < ST_ISA_AVX512 || k->isa != ST_ISA_AVX512 || !k->type[ST_TYPE_Q8_0].tilex) {
        test_skip("no AVX-512 with VNNI: no Q8_0 group tile");
        return;
    }
    if (!k->amx) test_untested("no AMX-INT8 granted here: the VNNI table against itself");
    CHECK(!vnni->amx && vnni->type[ST_TYPE_Q8_0].tilex);
    enum { R = 7 * ST_QUAD_GROUP_ROWS, C = 2304, T = 37 };
    const size_t rb = st_row_bytes(ST_TYPE_Q8_0, C), ab = st_act_bytes(ST_TYPE_Q8_0, C);
    uint8_t *W = malloc(rb * R), *Xq = malloc(ab * T);
    float *tmp = malloc(sizeof(float) * C * R), *Yw = malloc(sizeof(float) * R * T), *Yn = malloc(sizeof(float) * R * T),
          *Yv = malloc(sizeof(float) * R * T), *Yr = malloc(sizeof(float) * R * T);
    REQUIRE(W && Xq && tmp && Yw && Yn && Yv && Yr);
    qt_rng r = {2027};
    qt_fill(&r, tmp, (int64_t)C * R, 0.1f);
    for (int i = 0; i < R; i++) CHECK_OK(st_quantize_row(ST_TYPE_Q8_0, tmp + (size_t)i * C, W + i * rb, C));
    CHECK_OK(st_pack_quads(ST_TYPE_Q8_0, W, R, C));
    qt_fill(&r, tmp, (int64_t)C * T, 2.0f);
    CHECK_OK(st_quantize_act_rows(NULL, k, ST_TYPE_Q8_0, tmp, C, T, C, Xq));
    st_tilex_q8_0_q8_0_scalar(C, Yr, R, W, R / ST_QUAD_GROUP_ROWS, Xq, ab, T);
    st_threadpool *tp2 = NULL;
    CHECK_OK(st_threadpool_create(2, &tp2));
    int same = 1, n = 0;
    for (int th = 0; th < 2; th++) {
        st_threadpool *tp = th ? tp2 : NULL;
        for (int nt = 1; nt <= T; nt += (nt < 17 ? 1 : 4)) { /* 1..17, 21, ..., 37 */
            CHECK_OK(st_matmul_l(tp, k, ST_TYPE_Q8_0, ST_WLAYOUT_QUADS, W, R, C, nt, Xq, Yw, R));
            CHECK_OK(st_matmul_l(tp, vnni, ST_TYPE_Q8_0, ST_WLAYOUT_QUADS, W, R, C, nt, Xq, Yn, R));
            for (int t = 0; t < nt; t++) {
                const void *Wp = W;
                const int64_t rows = R;
                float *y = Yv + (size_t)t * R;
                CHECK_OK(st_matvec_multi_l(tp, k, ST_TYPE_Q8_0, ST_WLAYOUT_QUADS, 1, &Wp, &rows, C, Xq + t * ab, &y));
            }
            const size_t yb = sizeof(float) * R * (size_t)nt;
            const int ok = !memcmp(Yw, Yn, yb) && !memcmp(Yw, Yv, yb) && !memcmp(Yw, Yr, yb);
            if (!ok) fprintf(stderr, "  q8_0 group products differ: %d tokens, %d threads\n", nt, th + 1);
            same &= ok;
            n++;
        }
    }
    CHECK(same);
    CHECK_INT(n, 2 * 22);
    st_threadpool_destroy(tp2);
    free(W), free(Xq), free(tmp), free(Yw), free(Yn), free(Yv), free(Yr);
}

TEST_MAIN(test_products_deterministic_and_exact, test_rows_kernels_match_vec_dot, test_product_errors, test_quad_layout,
          test_panel_layout, test_q8_0_group_products)
