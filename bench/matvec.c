/* bench/matvec: matrix-vector products per weight type against the read-bandwidth probe,
 * and prefill-like matrix-matrix products.
 *
 *   matvec [--threads N] [--quick] [--type NAME]... [--no-matmul]
 *
 * For each weight type and shape (rows x cols: 4096x4096 and 2048x8192) the matrix is
 * replicated into enough distinct copies that one measured pass streams >= 512 MiB
 * (this CPU's L3 is 32 MiB), and each pass runs st_matvec over every copy in turn.
 * Printed: GB/s of weight bytes streamed (best of the passes) and the ratio to
 * bench_read_bandwidth measured in the same run (probed before and after the
 * products; the ratio uses the larger, i.e. the conservative, figure). On a shared
 * machine run it alone, e.g. `chrt -f 10 build/bench/matvec`, or the figures are noise. Then st_matmul with 512 tokens
 * (activations quantized beforehand, not timed; printed separately) in GFLOP/s.
 * Honors STRATA_ISA to force a kernel path. */
#include "bench_common.h"
#include "strata/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN_PASS_BYTES ((size_t)512 << 20)
#define PASSES 5
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

struct mv_result {
    st_type t;
    int64_t rows, cols;
    size_t mb, copies;
    double gbs;
};

static struct mv_result bench_matvec(st_threadpool *tp, const st_kernels *k, st_type t, int64_t rows,
                                     int64_t cols) {
    const size_t mb = st_row_bytes(t, cols) * (size_t)rows;
    const size_t copies = (MIN_PASS_BYTES + mb - 1) / mb;
    uint8_t *m = make_matrix(t, rows, cols, copies);
    float *x = malloc((size_t)cols * sizeof(float)), *y = malloc((size_t)rows * sizeof(float));
    void *xq = malloc(st_act_bytes(t, cols));
    for (int64_t c = 0; c < cols; c++) x[c] = frand();
    if (st_quantize_act(k, t, x, xq, cols)) exit(1);
    double best = 0;
    for (int p = 0; p <= PASSES; p++) { /* pass 0 warms up */
        const double t0 = st_time_now();
        for (size_t c = 0; c < copies; c++)
            if (st_matvec(tp, k, t, m + c * mb, rows, cols, xq, y)) exit(1);
        const double gbs = (double)(mb * copies) / (st_time_now() - t0) / 1e9;
        if (p && gbs > best) best = gbs;
    }
    st_free_huge(m, st_row_bytes(t, cols) * (size_t)rows * copies);
    free(x);
    free(y);
    free(xq);
    return (struct mv_result){t, rows, cols, mb, copies, best};
}

static void bench_matmul(st_threadpool *tp, const st_kernels *k, st_type t, int64_t rows, int64_t cols,
                         int64_t n_tok) {
    uint8_t *m = make_matrix(t, rows, cols, 1);
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
        if (st_matmul(tp, k, t, m, rows, cols, n_tok, Xq, Y, rows)) exit(1);
        double t2 = st_time_now();
        const double fl = 2.0 * (double)rows * (double)cols * (double)n_tok;
        if (p && fl / (t2 - t1) > best) best = fl / (t2 - t1);
        if (p && fl / (t2 - t0) > best_q) best_q = fl / (t2 - t0);
    }
    printf("matmul %-5s %5lldx%-5lld x %lld tokens: %7.1f GFLOP/s (%.1f with activation quantization)\n",
           st_type_name(t), (long long)rows, (long long)cols, (long long)n_tok, best / 1e9, best_q / 1e9);
    st_free_huge(m, st_row_bytes(t, cols) * (size_t)rows * 1);
    free(X);
    free(Y);
    free(Xq);
}

int main(int argc, char **argv) {
    int quick = 0, no_matmul = 0, n_only = 0;
    const char *only[16];
    st_ctx_params prm = st_ctx_default_params();
    prm.n_threads = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--no-matmul"))
            no_matmul = 1;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            prm.n_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--type") && i + 1 < argc && n_only < 16)
            only[n_only++] = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--threads N] [--quick] [--type NAME]... [--no-matmul]\n", argv[0]);
            return 2;
        }
    }
    st_ctx *ctx = NULL;
    int rc = st_ctx_create(&prm, &ctx);
    if (rc) {
        fprintf(stderr, "st_ctx_create: %s\n", st_strerror(rc));
        return 1;
    }
    st_threadpool *tp = st_ctx_threadpool(ctx);
    const st_kernels *k = st_kernels_get(st_ctx_isa(ctx));
    printf("kernels: %s%s, threads: %d\n", st_isa_name(k->isa), k->vnni ? " (VNNI)" : "",
           st_threadpool_n_threads(tp));
    const double probe1 = bench_read_bandwidth(tp, (size_t)1 << 30, 3);
    struct mv_result res[32];
    int n_res = 0;

    static const st_type types[] = {ST_TYPE_Q8_0, ST_TYPE_Q4_K, ST_TYPE_Q6_K, ST_TYPE_F16,
                                    ST_TYPE_Q4_0, ST_TYPE_Q4_1, ST_TYPE_Q5_0, ST_TYPE_Q5_1,
                                    ST_TYPE_Q5_K, ST_TYPE_BF16, ST_TYPE_F32};
    const int n_types = quick && !n_only ? 4 : (int)(sizeof types / sizeof types[0]);
    for (int i = 0; i < n_types; i++) {
        if (st_type_vec_dot_type(types[i]) == ST_TYPE_COUNT_) continue;
        int wanted = !n_only;
        for (int j = 0; j < n_only; j++) wanted |= !strcmp(only[j], st_type_name(types[i]));
        if (!wanted) continue;
        res[n_res++] = bench_matvec(tp, k, types[i], 4096, 4096);
        res[n_res++] = bench_matvec(tp, k, types[i], 2048, 8192);
    }
    const double probe2 = bench_read_bandwidth(tp, (size_t)1 << 30, 3);
    const double probe = probe1 > probe2 ? probe1 : probe2;
    printf("read-bandwidth probe (1 GiB, best of 3): %.2f GB/s before, %.2f GB/s after; ratios use %.2f\n",
           probe1, probe2, probe);
    for (int i = 0; i < n_res; i++)
        printf("matvec %-5s %5lldx%-5lld %6.1f MiB x%-3zu %7.2f GB/s  %5.1f%% of probe\n", st_type_name(res[i].t),
               (long long)res[i].rows, (long long)res[i].cols, (double)res[i].mb / (1 << 20), res[i].copies,
               res[i].gbs, 100.0 * res[i].gbs / probe);

    if (no_matmul) {
        st_ctx_destroy(ctx);
        return 0;
    }
    bench_matmul(tp, k, ST_TYPE_Q8_0, 2048, 2048, 512);
    bench_matmul(tp, k, ST_TYPE_Q8_0, 8192, 2048, 512);
    bench_matmul(tp, k, ST_TYPE_Q4_K, 2048, 2048, 512);
    bench_matmul(tp, k, ST_TYPE_Q4_K, 8192, 2048, 512);
    printf("(llama.cpp 1B Q8_0 pp512 82 t/s ~ 2.1 GFLOP/token of matmul ~ 170 GFLOP/s overall)\n");
    st_ctx_destroy(ctx);
    return 0;
}
