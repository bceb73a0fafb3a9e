/* One request's own state: its sampler with biases, its streaming detokenizer, and the stop
 * strings, matched on the decoded text so a stop sequence split over several tokens is
 * caught too. Text that could still be the start of a stop string is held back, so a partial
 * stop sequence never reaches the stream. */
#include "engine/engine_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int en_buf_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n) {
    if (!n) return 0;
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + n + 1) c *= 2;
        char *nb = realloc(*buf, c);
        if (!nb) return ST_E_NOMEM;
        *buf = nb;
        *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
    return 0;
}

int en_req_init(en_req *q, st_ctx *ctx, const st_tok *tok, int32_t n_vocab, const st_engine_req_params *p) {
    if (p->n_stop < 0 || p->n_stop > EN_MAX_STOP || (p->n_stop && !p->stop))
        return st_seterr(ctx, ST_E_INVAL, "stop: %d strings (at most %d)", p->n_stop, EN_MAX_STOP);
    for (int i = 0; i < p->n_stop; i++) {
        size_t n = p->stop[i] ? strlen(p->stop[i]) : 0;
        if (n < 1 || n > EN_MAX_STOP_LEN)
            return st_seterr(ctx, ST_E_INVAL, "stop string %d: %zu bytes (1 to %d)", i, n, EN_MAX_STOP_LEN);
        if (!(q->stop[i] = strdup(p->stop[i]))) return ST_E_NOMEM;
        q->n_stop = i + 1;
        if (n > q->stop_max) q->stop_max = n;
    }
    if (p->n_bias < 0 || (p->n_bias && !p->bias)) return st_seterr(ctx, ST_E_INVAL, "logit bias: %d entries", p->n_bias);
    for (int i = 0; i < p->n_bias; i++)
        if (p->bias[i].token < 0 || p->bias[i].token >= n_vocab || isnan(p->bias[i].bias))
            return st_seterr(ctx, ST_E_INVAL, "logit bias %d: token %d (vocabulary %d) bias %g", i, p->bias[i].token,
                             n_vocab, (double)p->bias[i].bias);
    if (p->n_bias) {
        if (!(q->bias = malloc((size_t)p->n_bias * sizeof *q->bias))) return ST_E_NOMEM;
        memcpy(q->bias, p->bias, (size_t)p->n_bias * sizeof *q->bias);
        q->n_bias = p->n_bias;
    }
    q->ignore_eos = p->ignore_eos;
    if (p->n_logprobs > ST_ENGINE_MAX_LOGPROBS)
        return st_seterr(ctx, ST_E_INVAL, "n_logprobs %d (at most %d)", p->n_logprobs, ST_ENGINE_MAX_LOGPROBS);
    q->n_logprobs = p->n_logprobs;
    int rc = st_sampler_create(&p->sampling, n_vocab, &q->smp);
    if (rc) return st_seterr(ctx, rc, "sampling parameters: %s", st_strerror(rc));
    if ((rc = st_detok_create(tok, 0, &q->dt))) return rc;
    return 0;
}

void en_req_free(en_req *q) {
    for (int i = 0; i < q->n_stop; i++) free(q->stop[i]);
    free(q->bias);
    free(q->held);
    free(q->prompt);
    free(q->gen);
    free(q->draft);
    st_sampler_destroy(q->smp);
    st_detok_destroy(q->dt);
    memset(q, 0, sizeof *q);
}

/* Log-softmax of the token t and of the n most likely tokens (descending, ties to the lower
 * id), in double so a row of 10^5 logits sums without losing the small ones. */
static void logprobs(en_req *q, const float *l, int32_t n_vocab, int32_t t) {
    float mx = -INFINITY;
    for (int32_t i = 0; i < n_vocab; i++)
        if (l[i] > mx) mx = l[i];
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; i++) sum += exp((double)l[i] - mx);
    const double lse = mx + log(sum);
    q->logprob = (float)(l[t] - lse);
    int32_t n = 0;
    for (int32_t i = 0; i < n_vocab && q->n_logprobs > 0; i++) {
        if (n == q->n_logprobs && !(l[i] > l[q->top[n - 1].token])) continue;
        int32_t k = n < q->n_logprobs ? n++ : n - 1;
        while (k > 0 && l[q->top[k - 1].token] < l[i]) q->top[k] = q->top[k - 1], k--;
        q->top[k].token = i;
    }
    for (int32_t k = 0; k < n; k++) q->top[k].logprob = (float)(l[q->top[k].token] - lse);
    q->n_top = n;
}

int32_t en_req_sample(en_req *q, const int32_t *eog, int32_t n_eog, float *logits, int32_t n_vocab, int32_t draft,
                      int *accepted) {
    for (int i = 0; i < q->n_bias; i++) logits[q->bias[i].token] += q->bias[i].bias;
    for (int32_t i = 0; q->ignore_eos && i < n_eog; i++) logits[eog[i]] = -INFINITY;
    int32_t t = draft >= 0 ? st_sampler_sample_draft(q->smp, logits, draft, accepted) : st_sampler_sample(q->smp, logits);
    st_sampler_accept(q->smp, t);
    if (q->n_logprobs >= 0) logprobs(q, logits, n_vocab, t);
    return t;
}

/* Length of the longest suffix of s[n] that is a proper prefix of some stop string. */
static size_t partial_stop(const en_req *q, const char *s, size_t n) {
    size_t best = 0;
    for (int i = 0; i < q->n_stop; i++) {
        const size_t ls = strlen(q->stop[i]);
        for (size_t k = ls - 1 < n ? ls - 1 : n; k > best; k--)
            if (!memcmp(s + n - k, q->stop[i], k)) {
                best = k;
                break;
            }
    }
    return best;
}

int en_req_text(en_req *q, int32_t token, char **out, size_t *n_out, size_t *cap_out, int *stopped) {
    const char *piece;
    size_t np;
    *stopped = 0;
    int rc = st_detok_feed(q->dt, token, &piece, &np);
    if (rc) return rc;
    if (!q->n_stop) return en_buf_append(out, n_out, cap_out, piece, np);
    if ((rc = en_buf_append(&q->held, &q->n_held, &q->cap_held, piece, np))) return rc;
    /* the earliest match wins; a match can only start in the held bytes (everything
     * released before was checked to begin no stop string) */
    size_t at = (size_t)-1;
    for (int i = 0; i < q->n_stop; i++) {
        const char *m = q->n_held ? memmem(q->held, q->n_held, q->stop[i], strlen(q->stop[i])) : NULL;
        if (m && (size_t)(m - q->held) < at) at = (size_t)(m - q->held);
    }
    if (at != (size_t)-1) {
        *stopped = 1;
        rc = en_buf_append(out, n_out, cap_out, q->held, at);
        q->n_held = 0;
        return rc;
    }
    const size_t keep = partial_stop(q, q->held, q->n_held), give = q->n_held - keep;
    if ((rc = en_buf_append(out, n_out, cap_out, q->held, give))) return rc;
    memmove(q->held, q->held + give, keep);
    q->n_held = keep;
    return 0;
}

int en_req_text_flush(en_req *q, char **out, size_t *n_out, size_t *cap_out) {
    const char *tail;
    size_t nt;
    int rc = en_buf_append(out, n_out, cap_out, q->held, q->n_held);
    q->n_held = 0;
    if (!rc && st_detok_flush(q->dt, &tail, &nt) == 0) rc = en_buf_append(out, n_out, cap_out, tail, nt);
    return rc;
}
