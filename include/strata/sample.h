/*
 * Token sampling: greedy, temperature, top-k, top-p, min-p, repetition, frequency and
 * presence penalties.
 *
 * The chain follows llama.cpp's default order, so a given seed and settings pick from the
 * same candidate set llama.cpp would:
 *     penalties -> top-k -> top-p -> min-p -> temperature -> draw
 * The penalties look at the last repeat_last_n accepted tokens, as llama.cpp's penalties
 * stage: a token seen c > 0 times there has its logit divided by repeat_penalty (multiplied
 * when <= 0), then c * freq_penalty + presence_penalty subtracted.
 * temp <= 0 is greedy (argmax after the penalty; ties go to the lowest id).
 *
 * Reproducible: the RNG (xoshiro256**) lives in the sampler object, seeded from params.seed;
 * no global state. The same seed, settings and logits give the same tokens on every machine
 * (candidate order is fully determined: logit descending, then id ascending).
 *
 * Thread rules: a sampler is used by one thread at a time; different samplers are independent.
 */
#ifndef STRATA_SAMPLE_H
#define STRATA_SAMPLE_H

#include "strata/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct st_sampler_params {
    float temp;            /* <= 0: greedy. default 0.8 */
    int32_t top_k;         /* <= 0: off. default 40 */
    float top_p;           /* >= 1: off. default 0.95 */
    float min_p;           /* <= 0: off. default 0.05 */
    float repeat_penalty;  /* 1: off. default 1.0 (as llama.cpp today) */
    int32_t repeat_last_n; /* tokens of history the penalties look at; default 64 */
    uint64_t seed;         /* RNG seed; default 0xC0FFEE */
    float freq_penalty;    /* per occurrence in the window; 0: off (default) */
    float presence_penalty; /* once for any occurrence in the window; 0: off (default) */
} st_sampler_params;

typedef struct st_sampler st_sampler;

st_sampler_params st_sampler_default_params(void);

/* Creates a sampler for a vocabulary of n_vocab tokens. Returns 0, ST_E_INVAL (n_vocab < 1,
 * negative temp/top-p/min-p, repeat penalty <= 0, a frequency or presence penalty that is not
 * finite, repeat_last_n < 0) or ST_E_NOMEM. *out owned by
 * the caller: st_sampler_destroy. */
int st_sampler_create(const st_sampler_params *p, int32_t n_vocab, st_sampler **out);
void st_sampler_destroy(st_sampler *s); /* NULL is a no-op */

/* Picks a token from logits[n_vocab] (borrowed; not modified). Returns the token id (>= 0).
 * Does not record it in the history: call st_sampler_accept for the token actually used. */
int32_t st_sampler_sample(st_sampler *s, const float *logits);

/* Picks a token at a position where a draft proposed `draft`, by the speculative sampling
 * rule for a deterministic draft (a point mass on `draft`), so the token has exactly the
 * distribution st_sampler_sample draws from: with p that distribution (the same penalties
 * and truncations), the draft is taken with probability p(draft) (one uniform from the
 * sampler's RNG); otherwise the token comes from p without the draft, renormalized (the
 * residual max(p - q, 0)). *accepted says whether the draft was taken (the result equals
 * `draft` only then). Greedy (temp <= 0): the argmax, accepted when it equals the draft.
 * The same seed gives a different stream than st_sampler_sample's (more draws are used):
 * equal in distribution, not token for token. No history change: st_sampler_accept. */
int32_t st_sampler_sample_draft(st_sampler *s, const float *logits, int32_t draft, int *accepted);

/* Appends a token to the repetition-penalty history (prompt tokens too, as llama.cpp does). */
void st_sampler_accept(st_sampler *s, int32_t token);

/* Clears the history and reseeds the RNG from the original seed. */
void st_sampler_reset(st_sampler *s);

#ifdef __cplusplus
}
#endif
#endif
