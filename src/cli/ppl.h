/* Perplexity accounting as llama.cpp's perplexity tool keeps it: the sum of the scored tokens'
 * negative log-likelihoods and of their squares. Header-only so the unit tests reach it. */
#ifndef STRATA_CLI_PPL_H
#define STRATA_CLI_PPL_H

#include <math.h>

typedef struct st_ppl_acc {
    double nll, nll2; /* sums of -log p and of its square */
    long long count;
} st_ppl_acc;

static inline void st_ppl_add(st_ppl_acc *a, double nll) {
    a->nll += nll;
    a->nll2 += nll * nll;
    a->count++;
}

/* -log p(target) from one row of n logits, in double as llama.cpp computes it. */
static inline double st_ppl_nll(const float *lg, int n, int target) {
    float mx = lg[0];
    for (int i = 1; i < n; i++)
        if (lg[i] > mx) mx = lg[i];
    double sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)lg[i] - mx);
    return -((double)lg[target] - mx - log(sum));
}

/* exp(mean NLL); NAN before any token. */
static inline double st_ppl_value(const st_ppl_acc *a) { return a->count ? exp(a->nll / (double)a->count) : NAN; }

/* llama.cpp's "+/-": the standard error of the mean NLL, sqrt(var / (n - 1)) with var the
 * population variance E[x^2] - E[x]^2, carried to the PPL by its derivative (times PPL).
 * A variance rounded below 0 counts as 0 (llama.cpp then prints no estimate at all); NAN
 * under two tokens. */
static inline double st_ppl_uncertainty(const st_ppl_acc *a) {
    if (a->count < 2) return NAN;
    const double n = (double)a->count, mean = a->nll / n;
    double var = a->nll2 / n - mean * mean;
    if (var < 0) var = 0;
    return sqrt(var / (n - 1)) * exp(mean);
}

#endif
