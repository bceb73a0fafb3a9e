/* bench/matvec: matrix-vector products per weight type against the read-bandwidth probe,
 * and prefill-like matrix-matrix products.
 *
 *   matvec [--threads N] [--quick] [--rounds N] [--type NAME]... [--shape RxC]... [--no-matmul]
 *   matvec --tiles [--rounds N] [--shape RxC]   (Q8_0 quad tiles in cache: bench_tiles)
 *
 * For each weight type and shape (rows x cols: 4096x4096 and 2048x8192) the matrix is
 * replicated into enough distinct copies that one measured pass streams >= 256 MiB
 * (past the Zen 5 VM's 32 MiB of L3; the present Xeon reports 300 MiB, shared with other
 * tenants), and each pass runs st_matvec over every copy in turn.
 * Methodology (bench_paired_run): this VM's read bandwidth drifts by a third from minute
 * to minute, so each measurement alternates a streaming-read probe pass (256 MiB, same
 * threads, huge pages like the weights) with a matvec pass, --rounds times (default 15),
 * and rates every matvec pass against the mean of the two probes around it. Printed per
 * shape: median matvec GB/s of weight bytes, median probe GB/s, and the median ratio with
 * its min and max. A 1 GiB probe (best of 3) is printed first for reference. Types the
 * kernels run in the quad layout (st_wlayout: q4_0/q4_1/q5_0/q5_1 on AVX2/AVX-512, which the
 * model loader picks) get two lines, rows and quads, measured in alternating passes
 * (probe, rows, probe, quads, ...), and quads/rows is the median over rounds of the ratio
 * of a round's two passes. On a shared
 * machine low figures are usually others' load; rerun rather than trust one line.
 * Then st_matmul with 512 tokens (activations quantized beforehand, not timed; printed
 * separately) in GFLOP/s. Honors STRATA_ISA to force a kernel path.
 *
 * --shape replaces the two default shapes, e.g. a row-length sweep at equal bytes:
 *   --shape 8192x2048 --shape 4096x4096 --shape 2048x8192 --shape 1024x16384
 * (measured here with the probe at 57-74 GB/s: the longer the rows, the lower the ratio;
 * probably because the activation vector, read once per row, no longer stays in L1 next
 * to the streaming weights: a scratch run that reused a 4K-element window of it reached
 * 94%. See docs/PERFORMANCE.md, "Quantized matrix-vector products"). */
#include "bench_common.h"
#include "bench_peer.h"
#include "strata/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN_PASS_BYTES ((size_t)256 << 20)
#define PROBE_BYTES ((size_t)256 << 20)
#define SEED_ROWS 64 /* distinct quantized rows; the matrix repeats them */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* xorshift64*, uniform in [-1, 1) */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (float)((rng_state * 2685821657736338717ull) >> 40) / (float)(1 << 23) - 1.0f;
}

/* A rows x cols matrix of type t (rows repeating SEED_ROWS quantized random rows). */
static uint8_t *make_matrix(st_type t, int64_t rows, int64_t cols, size_t copies) {
    const size_t rb = st_row_bytes(t, cols), mb = rb * (size_t)rows;
    uint8_t *m = st_alloc_huge(mb * copies); /* huge pages, as the model's weights */
    float *f = malloc((size_t)cols * sizeof(float));
    if (!m || !f) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (int r = 0; r < SEED_ROWS && r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) f[c] = 0.02f * frand();
        if (st_quantize_row(t, f, m + (size_t)r * rb, cols)) exit(1);
    }
    for (int64_t r = SEED_ROWS; r < rows; r++) memcpy(m + (size_t)r * rb, m + (size_t)(r % SEED_ROWS) * rb, rb);
    for (size_t c = 1; c < copies; c++) memcpy(m + c * mb, m, mb);
    free(f);
    return m;
}

struct mv_pass {
    st_threadpool *tp;
    const st_kernels *k;
    st_type t;
    st_wlayout layout;
    int64_t rows, cols;
    const uint8_t *m;
    size_t mb, copies;
    const void *xq;
    float *y;
};

static double mv_pass(void *arg) { /* one matvec over every copy: GB/s of weights */
    const struct mv_pass *a = arg;
    const double t0 = st_time_now();
    for (size_t c = 0; c < a->copies; c++) {
        const void *w = a->m + c * a->mb;
        float *y = a->y;
        if (st_matvec_multi_l(a->tp, a->k, a->t, a->layout, 1, &w, &a->rows, a->cols, a->xq, &y)) exit(1);
    }
    return (double)(a->mb * a->copies) / (st_time_now() - t0) / 1e9;
}

/* A set of copies of a rows x cols matrix of type t in `layout`, with its activation. */
static struct mv_pass mv_setup(st_threadpool *tp, const st_kernels *k, st_type t, st_wlayout layout, int64_t rows,
                               int64_t cols) {
    const size_t mb = st_row_bytes(t, cols) * (size_t)rows;
    const size_t copies = (MIN_PASS_BYTES + mb - 1) / mb;
    uint8_t *m = make_matrix(t, rows, cols, copies);
    for (size_t c = 0; layout != ST_WLAYOUT_ROWS && c < copies; c++)
        if ((layout == ST_WLAYOUT_QUADS ? st_pack_quads : st_pack_panels)(t, m + c * mb, rows, cols)) exit(1);
    float *x = malloc((size_t)cols * sizeof(float)), *y = malloc((size_t)rows * sizeof(float));
    void *xq = malloc(st_act_bytes(t, cols));
    if (!x || !y || !xq) exit(1);
    for (int64_t c = 0; c < cols; c++) x[c] = frand();
    if (st_quantize_act(k, t, x, xq, cols)) exit(1);
    free(x);
    return (struct mv_pass){tp, k, t, layout, rows, cols, m, mb, copies, xq, y};
}

static void mv_free(struct mv_pass *a) {
    st_free_huge((void *)a->m, a->mb * a->copies);
    free(a->y);
    free((void *)a->xq);
}

static const char *layout_name(st_wlayout l) {
    return l == ST_WLAYOUT_QUADS ? "quads" : l == ST_WLAYOUT_PANELS ? "panel" : "rows";
}

/* One result line (no newline): median GB/s and probe, ratio median (min..max). */
static void print_line(const struct mv_pass *a, double gb, double probe, double med, double rmin, double rmax) {
    char shape[32];
    snprintf(shape, sizeof shape, "%lldx%lld", (long long)a->rows, (long long)a->cols);
    printf("%-6s %-10s %-5s %7.1f %6zu  %8.2f %8.2f  %5.1f%% (%5.1f..%5.1f%%)", st_type_name(a->t), shape,
           layout_name(a->layout), (double)a->mb / (1 << 20), a->copies, gb, probe,
           100 * med, 100 * rmin, 100 * rmax);
}

static void bench_matvec(st_threadpool *tp, const st_kernels *k, st_membw_probe *probe, int rounds, st_type t,
                         int64_t rows, int64_t cols) {
    struct mv_pass a = mv_setup(tp, k, t, ST_WLAYOUT_ROWS, rows, cols);
    const bench_paired p = bench_paired_run(tp, probe, rounds, mv_pass, &a);
    print_line(&a, p.work_med, p.probe_med, p.ratio_med, p.ratio_min, p.ratio_max);
    printf("\n");
    mv_free(&a);
}

/* Rows and the layout loading picks (quads or panels) side by side: rounds of (probe, rows
 * pass, probe, layout pass), each pass rated against its adjacent probes, and layout / rows
 * taken from the two passes of a round (adjacent in time, so the VM's bandwidth drift
 * cancels). Prints both lines. */
static void bench_layouts(st_threadpool *tp, const st_kernels *k, st_membw_probe *probe, int rounds, st_type t,
                          st_wlayout layout, int64_t rows, int64_t cols) {
    struct mv_pass a[2] = {mv_setup(tp, k, t, ST_WLAYOUT_ROWS, rows, cols), mv_setup(tp, k, t, layout, rows, cols)};
    if (rounds > BENCH_PAIRED_MAX / 2) rounds = BENCH_PAIRED_MAX / 2;
    double pr[BENCH_PAIRED_MAX + 1], gb[BENCH_PAIRED_MAX], ratio[2][BENCH_PAIRED_MAX], speedup[BENCH_PAIRED_MAX];
    (void)mv_pass(&a[0]), (void)mv_pass(&a[1]);
    for (int i = 0; i < 2 * rounds; i++) {
        pr[i] = st_membw_probe_run(tp, probe);
        gb[i] = mv_pass(&a[i % 2]);
    }
    pr[2 * rounds] = st_membw_probe_run(tp, probe);
    double g[2][BENCH_PAIRED_MAX];
    for (int i = 0; i < 2 * rounds; i++) {
        ratio[i % 2][i / 2] = gb[i] / (0.5 * (pr[i] + pr[i + 1]));
        g[i % 2][i / 2] = gb[i];
    }
    for (int r = 0; r < rounds; r++) speedup[r] = gb[2 * r + 1] / gb[2 * r];
    /* the medians sort their arrays: min and max are then the ends */
    const double probe_med = bench_median_(pr, 2 * rounds + 1), sp = bench_median_(speedup, rounds);
    for (int l = 0; l < 2; l++) {
        const double med = bench_median_(ratio[l], rounds);
        print_line(&a[l], bench_median_(g[l], rounds), probe_med, med, ratio[l][0], ratio[l][rounds - 1]);
        if (l) printf("  %s/rows %.2fx (%.2f..%.2f)", layout_name(layout), sp, speedup[0], speedup[rounds - 1]);
        printf("\n");
    }
    mv_free(&a[0]);
    mv_free(&a[1]);
}

static void bench_matmul(st_threadpool *tp, const st_kernels *k, st_type t, st_wlayout layout, int64_t rows,
                         int64_t cols, int64_t n_tok) {
    uint8_t *m = make_matrix(t, rows, cols, 1);
    if (layout == ST_WLAYOUT_QUADS && st_pack_quads(t, m, rows, cols)) exit(1);
    const size_t ab = st_act_bytes(t, cols);
    float *X = malloc((size_t)(n_tok * cols) * sizeof(float));
    float *Y = malloc((size_t)(n_tok * rows) * sizeof(float));
    uint8_t *Xq = malloc(ab * (size_t)n_tok);
    for (int64_t i = 0; i < n_tok * cols; i++) X[i] = frand();
    double best = 0, best_q = 0;
    for (int p = 0; p <= 3; p++) {
        double t0 = st_time_now();
        if (st_quantize_act_rows(tp, k, t, X, cols, n_tok, cols, Xq)) exit(1);
        double t1 = st_time_now();
        if (st_matmul_l(tp, k, t, layout, m, rows, cols, n_tok, Xq, Y, rows)) exit(1);
        double t2 = st_time_now();
        const double fl = 2.0 * (double)rows * (double)cols * (double)n_tok;
        if (p && fl / (t2 - t1) > best) best = fl / (t2 - t1);
        if (p && fl / (t2 - t0) > best_q) best_q = fl / (t2 - t0);
    }
    printf("matmul %-5s %5lldx%-5lld x %lld tokens%s: %7.1f GFLOP/s (%.1f with activation quantization)\n",
           st_type_name(t), (long long)rows, (long long)cols, (long long)n_tok,
           layout == ST_WLAYOUT_QUADS ? " (quads)" : "", best / 1e9, best_q / 1e9);
    st_free_huge(m, st_row_bytes(t, cols) * (size_t)rows * 1);
    free(X);
    free(Y);
    free(Xq);
}

/* --tiles: the Q8_0 group products in cache, one thread (pin it: taskset -c 0), ns per 256
 * weights per token over a ROWSxCOLS matrix in the group layout (default 1536x512, the small
 * model's FFN, 835 KiB: in L2) for batches of 1, 2, 4, 8, 16 and 64 tokens: the table as it is
 * (AMX where the CPU has it and grants it) against the VNNI-only table, alternating within
 * every round, and matvec (one token) beside them. Prints the fastest of the rounds (each
 * pass is about a millisecond: on a machine shared with other builds a pass that lost the
 * core for a time slice reads several times slower, so the median measures the neighbours)
 * and checks the three give the same bits. */
static double tiles_pass(const st_kernels *k, int which, const uint8_t *m, int64_t rows, int64_t cols, int64_t n_tok,
                         const uint8_t *Xq, float *Y) {
    const size_t ab = st_act_bytes(ST_TYPE_Q8_0, cols);
    int reps = (int)(64 * 1024 * 1024 / ((double)rows * (double)cols * (double)n_tok)) + 1;
    const double t0 = st_time_now();
    for (int i = 0; i < reps; i++) {
        if (which == 2) {
            for (int64_t t = 0; t < n_tok; t++) {
                const void *W = m;
                float *y = Y + t * rows;
                if (st_matvec_multi_l(NULL, k, ST_TYPE_Q8_0, ST_WLAYOUT_QUADS, 1, &W, &rows, cols, Xq + t * ab, &y)) exit(1);
            }
        } else if (st_matmul_l(NULL, k, ST_TYPE_Q8_0, ST_WLAYOUT_QUADS, m, rows, cols, n_tok, Xq, Y, rows)) {
            exit(1);
        }
    }
    return (st_time_now() - t0) * 1e9 / ((double)reps * (double)rows * (double)cols * (double)n_tok / 256.0);
}

static int bench_tiles(const st_kernels *k, int rounds, int64_t rows, int64_t cols) {
    if (!st_quads_fit(k, ST_TYPE_Q8_0, rows, cols)) {
        printf("tiles: this table has no Q8_0 group tile (AVX-512 VNNI only), or %lldx%lld cannot take it\n",
               (long long)rows, (long long)cols);
        return 0;
    }
    const st_kernels *old = st_kernels_get_ex(k->isa, false); /* the same table without AMX */
    enum { MAX_TOK = 64 };
    uint8_t *m = make_matrix(ST_TYPE_Q8_0, rows, cols, 1);
    const size_t ab = st_act_bytes(ST_TYPE_Q8_0, cols);
    float *X = malloc((size_t)(MAX_TOK * cols) * sizeof(float));
    float *Y[3] = {malloc((size_t)(MAX_TOK * rows) * sizeof(float)), malloc((size_t)(MAX_TOK * rows) * sizeof(float)),
                   malloc((size_t)(MAX_TOK * rows) * sizeof(float))};
    uint8_t *Xq = malloc(ab * MAX_TOK);
    double *v = malloc(3 * (size_t)rounds * sizeof(double));
    if (!m || !X || !Y[0] || !Y[1] || !Y[2] || !Xq || !v || st_pack_quads(ST_TYPE_Q8_0, m, rows, cols)) exit(1);
    for (int64_t i = 0; i < MAX_TOK * cols; i++) X[i] = frand();
    if (st_quantize_act_rows(NULL, k, ST_TYPE_Q8_0, X, cols, MAX_TOK, cols, Xq)) exit(1);
    printf("Q8_0 groups %lldx%lld in cache, 1 thread, ns per 256 weights per token (best of %d rounds)%s:\n",
           (long long)rows, (long long)cols, rounds, k->amx ? "" : "; no AMX here: the VNNI table twice");
    printf("%6s %10s %10s %10s %9s %6s\n", "tokens", "matvec", "vnni", k->amx ? "amx" : "vnni", "ratio", "bits");
    static const int64_t toks[] = {1, 2, 4, 8, 16, 64};
    int all_same = 1;
    for (int ti = 0; ti < 6; ti++) {
        const int64_t n = toks[ti];
        for (int r = 0; r < rounds; r++) /* old, new, matvec in turn, each round */
            for (int w = 0; w < 3; w++) v[w * rounds + r] = tiles_pass(w == 1 ? k : old, w, m, rows, cols, n, Xq, Y[w]);
        const size_t yb = (size_t)(n * rows) * sizeof(float);
        const int same = !memcmp(Y[0], Y[1], yb) && !memcmp(Y[0], Y[2], yb);
        all_same &= same;
        double o = v[0], nw = v[rounds], mv = v[2 * rounds];
        for (int r = 1; r < rounds; r++) {
            o = v[r] < o ? v[r] : o;
            nw = v[rounds + r] < nw ? v[rounds + r] : nw;
            mv = v[2 * rounds + r] < mv ? v[2 * rounds + r] : mv;
        }
        printf("%6lld %10.2f %10.2f %10.2f %8.2fx %6s\n", (long long)n, mv, o, nw, o / nw, same ? "same" : "DIFFER");
    }
    st_free_huge(m, st_row_bytes(ST_TYPE_Q8_0, cols) * (size_t)rows);
    free(X), free(Y[0]), free(Y[1]), free(Y[2]), free(Xq), free(v);
    return all_same ? 0 : 1;
}

/* llama.cpp's prefill as a matmul rate, for scale: its 1B Q8_0 pp512 (llama-bench on bench/e2e's
 * cached model when both are there, else the peers file) times the 1B shape's matmul work per
 * token, 2 flops per weight of its matrices (16 layers of q, o 2048x2048, k, v 512x2048, three
 * 2048x8192 FFN matrices; the 32000x2048 output). */
static void print_peer_matmul_rate(int n_threads) {
    const double flop_tok = 2.0 * (16.0 * (2 * 2048.0 * 2048 + 2 * 512.0 * 2048 + 3 * 2048.0 * 8192) + 32000.0 * 2048);
    const char *model = "/tmp/strata-bench/1b-q8_0.gguf";
    static const char *const row[1] = {"1B Q8_0"};
    bench_peer p;
    bench_peer_get(access(model, R_OK) == 0 ? model : NULL, n_threads, "-p 512 -n 0 -r 3", 512, 0,
                   "| model | pp512", row, 1, "pp512", &p);
    bench_peer_print("1B Q8_0 pp512", &p);
    if (p.tps > 0)
        printf("(that is %.1f GFLOP/token of matmul x %.1f t/s = %.0f GFLOP/s overall)\n", flop_tok / 1e9, p.tps,
               flop_tok * p.tps / 1e9);
}

int main(int argc, char **argv) {
    int quick = 0, no_matmul = 0, n_only = 0, rounds = 15, tiles = 0;
    long long shapes[8][2] = {{4096, 4096}, {2048, 8192}};
    int n_shapes = 0;
    const char *only[16];
    st_ctx_params prm = st_ctx_default_params();
    prm.n_threads = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--no-matmul"))
            no_matmul = 1;
        else if (!strcmp(argv[i], "--tiles"))
            tiles = 1;
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            prm.n_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--type") && i + 1 < argc && n_only < 16)
            only[n_only++] = argv[++i];
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc && n_shapes < 8 &&
                 sscanf(argv[i + 1], "%lldx%lld", &shapes[n_shapes][0], &shapes[n_shapes][1]) == 2 &&
                 shapes[n_shapes][0] > 0 && shapes[n_shapes][1] > 0 && shapes[n_shapes][1] % 256 == 0)
            n_shapes++, i++;
        else {
            fprintf(stderr, "usage: %s [--threads N] [--quick] [--rounds N] [--type NAME]... [--shape RxC]... "
                    "[--no-matmul] [--tiles]\n  (--shape: up to 8, cols a multiple of 256)\n", argv[0]);
            return 2;
        }
    }
    const int user_shapes = n_shapes;
    if (!n_shapes) n_shapes = 2;
    st_ctx *ctx = NULL;
    int rc = st_ctx_create(&prm, &ctx);
    if (rc) {
        fprintf(stderr, "st_ctx_create: %s\n", st_strerror(rc));
        return 1;
    }
    st_threadpool *tp = st_ctx_threadpool(ctx);
    const st_kernels *k = st_kernels_get_ex(st_ctx_isa(ctx), st_ctx_amx(ctx));
    char kname[64];
    printf("kernels: %s, threads: %d\n", bench_kernels_name(k, kname, sizeof kname), st_threadpool_n_threads(tp));
    if (tiles) {
        rc = bench_tiles(k, rounds, user_shapes ? shapes[0][0] : 1536, user_shapes ? shapes[0][1] : 512);
        st_ctx_destroy(ctx);
        return rc;
    }
    printf("read-bandwidth probe (1 GiB, best of 3): %.2f GB/s\n", st_membw_read(tp, (size_t)1 << 30, 3));
    printf("each line: %d rounds of (probe %zu MiB, matvec pass >= %zu MiB); ratio = matvec / mean of adjacent probes\n",
           rounds, PROBE_BYTES >> 20, MIN_PASS_BYTES >> 20);
    st_membw_probe probe;
    if (st_membw_probe_init(&probe, PROBE_BYTES)) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }

    static const st_type types[] = {ST_TYPE_Q8_0, ST_TYPE_Q4_K, ST_TYPE_Q6_K, ST_TYPE_F16,
                                    ST_TYPE_Q4_0, ST_TYPE_Q4_1, ST_TYPE_Q5_0, ST_TYPE_Q5_1,
                                    ST_TYPE_Q5_K, ST_TYPE_BF16, ST_TYPE_F32};
    const int n_types = quick && !n_only ? 4 : (int)(sizeof types / sizeof types[0]);
    printf("%-6s %-10s %-5s %7s %6s  %8s %8s  %6s %15s\n", "type", "shape", "wlay", "MiB", "copies", "GB/s",
           "probe", "ratio", "(min..max)");
    for (int i = 0; i < n_types; i++) {
        if (st_type_vec_dot_type(types[i]) == ST_TYPE_COUNT_) continue;
        int wanted = !n_only;
        for (int j = 0; j < n_only; j++) wanted |= !strcmp(only[j], st_type_name(types[i]));
        if (!wanted) continue;
        for (int s = 0; s < n_shapes; s++) {
            if (st_quads_fit(k, types[i], shapes[s][0], shapes[s][1])) /* the layout loading picks */
                bench_layouts(tp, k, &probe, rounds, types[i], ST_WLAYOUT_QUADS, shapes[s][0], shapes[s][1]);
            else if (st_panels_count(types[i], shapes[s][0], shapes[s][1]))
                bench_layouts(tp, k, &probe, rounds, types[i], ST_WLAYOUT_PANELS, shapes[s][0], shapes[s][1]);
            else
                bench_matvec(tp, k, &probe, rounds, types[i], shapes[s][0], shapes[s][1]);
            fflush(stdout);
        }
    }
    st_membw_probe_free(&probe);

    if (no_matmul) {
        st_ctx_destroy(ctx);
        return 0;
    }
    bench_matmul(tp, k, ST_TYPE_Q8_0, ST_WLAYOUT_ROWS, 2048, 2048, 512);
    bench_matmul(tp, k, ST_TYPE_Q8_0, ST_WLAYOUT_ROWS, 8192, 2048, 512);
    bench_matmul(tp, k, ST_TYPE_Q4_K, ST_WLAYOUT_ROWS, 2048, 2048, 512);
    bench_matmul(tp, k, ST_TYPE_Q4_K, ST_WLAYOUT_ROWS, 8192, 2048, 512);
    bench_matmul(tp, k, ST_TYPE_Q4_0, ST_WLAYOUT_ROWS, 8192, 2048, 512);
    if (st_quads_fit(k, ST_TYPE_Q4_0, 8192, 2048)) bench_matmul(tp, k, ST_TYPE_Q4_0, ST_WLAYOUT_QUADS, 8192, 2048, 512);
    print_peer_matmul_rate((int)st_threadpool_n_threads(tp));
    st_ctx_destroy(ctx);
    return 0;
}
