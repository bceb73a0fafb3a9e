/* The error measure of the attention tests (tests/attn, tests/kv), shared so that both
 * judge the kernels alike.
 *
 * For each output row, max_d |out - ref| divided by max_d of the reference's
 * sum_t p_t |v_t,d| (the magnitude the output is an average of), so that rows whose
 * average cancels to near zero are not judged against their own tiny value. */
#ifndef STRATA_TEST_ATTN_REF_H
#define STRATA_TEST_ATTN_REF_H

#include <math.h>

/* Named thresholds (relative, as above), for a reference computed in double from the
 * values the KV actually holds (dequantized, or rounded to f16/bf16). */
#define TOL_F32 1e-5 /* f32 KV: the bound */
#define TOL_F16 1e-5 /* f16 / bf16 KV after exact conversion to f32 */

/* Worst relative error over the rows of one query (out and ref/den: [n_head][D]); a row
 * the reference leaves empty (den all zero) must be exactly zero (returns +inf otherwise). */
static inline double rel_err(const float *o, const double *ref, const double *den, int n_head,
                             int D) {
    double worst = 0;
    for (int h = 0; h < n_head; h++) {
        double scale = 0, e = 0;
        for (int d = 0; d < D; d++) {
            if (den[h * D + d] > scale) scale = den[h * D + d];
            double x = fabs((double)o[h * D + d] - ref[h * D + d]);
            if (!(x <= e)) e = x; /* NaN propagates as the worst */
        }
        if (scale == 0) {
            for (int d = 0; d < D; d++)
                if (o[h * D + d] != 0) return INFINITY;
            continue;
        }
        if (!(e / scale <= worst)) worst = e / scale;
    }
    return worst;
}

#endif
