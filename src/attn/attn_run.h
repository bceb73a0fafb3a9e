/* Private to the SIMD kernels: the order of a decode run's three passes (st_attn_kernels.run),
 * the same for every ISA. An ISA's kernel file defines, before including this once:
 *   run_scores(t, b, n, nx, nn, T, D, r0, RB, pf)  pass 1 for rows [r0, r0 + RB), RB <= 4
 *   run_softmax_rows(t, b, n, r0, RB, T)            pass 2 for rows [r0, r0 + RB), RB <= 4
 *   run_v(t, b, n, nx, nn, T, D, r0, d0, RB, ND, pf) pass 3: RB rows x ND vectors of dims
 *   RUN_LANES (floats per vector), RUN_ND (vectors of dims per wide V pass)
 * and gets static void run_kernel(t, b, n, nx, nn) for its table. pf: this pass requests
 * the prefetches (the first row group's, so memory is asked for once). */
#ifndef STRATA_ATTN_RUN_H
#define STRATA_ATTN_RUN_H

/* Pass 3 for rows [r0, r0 + RB): RUN_ND vectors of dims at a time, then one. */
AI void run_rows(const attn_tile *t, const attn_blk *b, int n, const attn_blk *nx, int nn,
                 const st_type T, const int D, int r0, const int RB) {
    const int wide = RUN_ND * RUN_LANES;
    for (int d0 = 0; d0 < D;) {
        const int pf = r0 == 0 && d0 == 0;
        if (D - d0 >= wide) run_v(t, b, n, nx, nn, T, D, r0, d0, RB, RUN_ND, pf), d0 += wide;
        else run_v(t, b, n, nx, nn, T, D, r0, d0, RB, 1, pf), d0 += RUN_LANES;
    }
}

AI void run_impl(const attn_tile *t, const attn_blk *b, int n, const attn_blk *nx, int nn,
                 const st_type T, const int D) {
    const int R = t->R;
    for (int r0 = 0; r0 < R; r0 += 4) {
        const int pf = r0 == 0;
        switch (R - r0) {
        case 1: run_scores(t, b, n, nx, nn, T, D, r0, 1, pf); break;
        case 2: run_scores(t, b, n, nx, nn, T, D, r0, 2, pf); break;
        case 3: run_scores(t, b, n, nx, nn, T, D, r0, 3, pf); break;
        default: run_scores(t, b, n, nx, nn, T, D, r0, 4, pf); break;
        }
    }
    for (int r0 = 0; r0 < R; r0 += 4) {
        switch (R - r0) {
        case 1: run_softmax_rows(t, b, n, r0, 1, T); break;
        case 2: run_softmax_rows(t, b, n, r0, 2, T); break;
        case 3: run_softmax_rows(t, b, n, r0, 3, T); break;
        default: run_softmax_rows(t, b, n, r0, 4, T); break;
        }
    }
    for (int r0 = 0; r0 < R; r0 += 4) {
        switch (R - r0) {
        case 1: run_rows(t, b, n, nx, nn, T, D, r0, 1); break;
        case 2: run_rows(t, b, n, nx, nn, T, D, r0, 2); break;
        case 3: run_rows(t, b, n, nx, nn, T, D, r0, 3); break;
        default: run_rows(t, b, n, nx, nn, T, D, r0, 4); break;
        }
    }
}

/* head_dim 64 and 128 (most llama-family models) as constants: every offset an immediate */
AI void run_type(const attn_tile *t, const attn_blk *b, int n, const attn_blk *nx, int nn,
                 const st_type T) {
    switch (t->D) {
    case 64: run_impl(t, b, n, nx, nn, T, 64); break;
    case 128: run_impl(t, b, n, nx, nn, T, 128); break;
    default: run_impl(t, b, n, nx, nn, T, t->D); break;
    }
}

static void run_kernel(const attn_tile *t, const attn_blk *b, int n, const attn_blk *nx, int nn) {
    if (n <= 0) return;
    switch (t->type) {
    case ST_TYPE_F16: run_type(t, b, n, nx, nn, ST_TYPE_F16); break;
    case ST_TYPE_BF16: run_type(t, b, n, nx, nn, ST_TYPE_BF16); break;
    case ST_TYPE_Q8_0: run_type(t, b, n, nx, nn, ST_TYPE_Q8_0); break;
    default: run_type(t, b, n, nx, nn, ST_TYPE_F32); break;
    }
}

#endif
