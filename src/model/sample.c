/* Sampler: a candidate list cut down by each filter in llama.cpp's order, then one draw.
 *
 * Work per token is O(n_vocab) for the penalty, min-p and the top-k selection (a bounded
 * min-heap), plus O(k log k) to sort the survivors; a full sort happens only when top-k is
 * off and top-p is on. Candidates are always ordered by (logit desc, id asc), so the result
 * never depends on the sort algorithm's stability. */
#include "strata/sample.h"

#include <math.h>
#include <stdlib.h>

typedef struct cand {
    float logit;
    int32_t id;
} cand;

struct st_sampler {
    st_sampler_params p;
    int32_t n_vocab;
    uint64_t rng[4];   /* xoshiro256** state */
    cand *cands;       /* [n_vocab] scratch */
    float *work;       /* [n_vocab] penalized logits */
    int32_t *hist;     /* [repeat_last_n] ring of recent tokens */
    int32_t n_hist, hist_pos;
    uint16_t *seen;    /* [n_vocab] occurrence counts of tokens in the window */
};

st_sampler_params st_sampler_default_params(void) {
    st_sampler_params p = {.temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
                           .repeat_penalty = 1.0f, .repeat_last_n = 64, .seed = 0xC0FFEEu};
    return p;
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(uint64_t *s) {
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

/* uniform in [0, 1) with 53 random bits */
static double rng_uniform(uint64_t *s) { return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0); }

static void seed_rng(st_sampler *s) {
    uint64_t x = s->p.seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
}

int st_sampler_create(const st_sampler_params *p, int32_t n_vocab, st_sampler **out) {
    if (!out) return ST_E_INVAL;
    *out = NULL;
    st_sampler_params q = p ? *p : st_sampler_default_params();
    if (n_vocab < 1 || !(q.temp == q.temp) || q.top_p < 0 || q.min_p < 0 || !(q.repeat_penalty > 0) ||
        q.repeat_last_n < 0 || !isfinite(q.freq_penalty) || !isfinite(q.presence_penalty))
        return ST_E_INVAL;
    st_sampler *s = calloc(1, sizeof *s);
    if (!s) return ST_E_NOMEM;
    s->p = q;
    s->n_vocab = n_vocab;
    s->cands = malloc((size_t)n_vocab * sizeof *s->cands);
    s->work = malloc((size_t)n_vocab * sizeof *s->work);
    s->seen = calloc((size_t)n_vocab, sizeof *s->seen);
    s->hist = malloc((size_t)(q.repeat_last_n ? q.repeat_last_n : 1) * sizeof *s->hist);
    if (!s->cands || !s->work || !s->seen || !s->hist) {
        st_sampler_destroy(s);
        return ST_E_NOMEM;
    }
    seed_rng(s);
    *out = s;
    return 0;
}

void st_sampler_destroy(st_sampler *s) {
    if (!s) return;
    free(s->cands);
    free(s->work);
    free(s->seen);
    free(s->hist);
    free(s);
}

void st_sampler_reset(st_sampler *s) {
    memset(s->seen, 0, (size_t)s->n_vocab * sizeof *s->seen);
    s->n_hist = s->hist_pos = 0;
    seed_rng(s);
}

void st_sampler_accept(st_sampler *s, int32_t token) {
    if (token < 0 || token >= s->n_vocab || s->p.repeat_last_n == 0) return;
    if (s->n_hist == s->p.repeat_last_n) {
        int32_t old = s->hist[s->hist_pos];
        s->seen[old]--;
    } else {
        s->n_hist++;
    }
    s->hist[s->hist_pos] = token;
    s->seen[token]++;
    s->hist_pos = (s->hist_pos + 1) % s->p.repeat_last_n;
}

/* a before b in candidate order: logit descending, then id ascending */
static int cand_before(const cand *a, const cand *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cand_cmp(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    return cand_before(a, b) ? -1 : cand_before(b, a) ? 1 : 0;
}

/* heap[0] is the worst kept candidate */
static void heap_sift_down(cand *h, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && cand_before(&h[w], &h[l])) w = l;
        if (r < n && cand_before(&h[w], &h[r])) w = r;
        if (w == i) return;
        cand t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* Keeps the best k (1 <= k <= n_vocab) of w in s->cands[0..k), sorted. Returns k.
 * A min-heap of the k best so far; a later logit displaces the worst kept only when it is
 * strictly larger, because on a tie the kept one has the smaller id. So the scan is one
 * compare per logit against the worst kept value, eight at a time (a test the compiler
 * turns into packed compares), and the heap is touched only for the few that pass, where a
 * per-logit candidate compare cost several times as much (docs/PERFORMANCE.md, end to end). */
static int32_t select_top_k(st_sampler *s, const float *w, int32_t k) {
    cand *h = s->cands;
    const int32_t nv = s->n_vocab;
    for (int32_t i = 0; i < k; i++) h[i] = (cand){w[i], i};
    for (int j = k / 2 - 1; j >= 0; j--) heap_sift_down(h, k, j);
    float thr = h[0].logit;
    int32_t i = k;
    for (; i < nv; i++) {
        if (i % 8 == 0 && i + 8 <= nv) {
            int any = 0;
            for (int j = 0; j < 8; j++) any |= w[i + j] > thr;
            if (!any) {
                i += 7;
                continue;
            }
        }
        if (!(w[i] > thr)) continue;
        h[0] = (cand){w[i], i};
        heap_sift_down(h, k, 0);
        thr = h[0].logit;
    }
    qsort(h, (size_t)k, sizeof *h, cand_cmp);
    return k;
}


/* Logit l of a token seen `count` (> 0) times in the window, as llama.cpp's penalties stage
 * computes it. */
static float penalized(const st_sampler *s, float l, int count) {
    l = l <= 0 ? l * s->p.repeat_penalty : l / s->p.repeat_penalty;
    return l - (float)count * s->p.freq_penalty - s->p.presence_penalty;
}

static int any_penalty(const st_sampler *s) {
    return s->n_hist && (s->p.repeat_penalty != 1.0f || s->p.freq_penalty != 0.0f || s->p.presence_penalty != 0.0f);
}

/* The first index of the largest value; NaNs never win (all NaN: 0). Two passes: the
 * largest value over 16 independent lanes (a compare-select the compiler turns into packed
 * max, where one scalar chain waits on each compare; docs/PERFORMANCE.md, end to end), then
 * the first index holding it. */
static int32_t argmax_first(const float *x, int32_t n) {
    float m[16];
    for (int k = 0; k < 16; k++) m[k] = -INFINITY;
    int32_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 16; k++) m[k] = x[i + k] > m[k] ? x[i + k] : m[k];
    float best = -INFINITY;
    for (int k = 0; k < 16; k++) best = m[k] > best ? m[k] : best;
    for (; i < n; i++) best = x[i] > best ? x[i] : best;
    for (i = 0; i < n; i++)
        if (x[i] == best) return i;
    return 0;
}

/* Greedy without copying the logits: the penalties are applied on the fly to tokens in the window. */
static int32_t greedy(const st_sampler *s, const float *logits) {
    if (!any_penalty(s)) return argmax_first(logits, s->n_vocab);
    int32_t best = 0;
    float bv = s->seen[0] ? penalized(s, logits[0], s->seen[0]) : logits[0];
    for (int32_t i = 1; i < s->n_vocab; i++) {
        float v = logits[i];
        if (s->seen[i]) v = penalized(s, v, s->seen[i]);
        if (v > bv) bv = v, best = i;
    }
    return best;
}

/* The candidates the plain draw picks from (penalties, top-k, top-p, min-p applied) in
 * s->cands; returns their count, *mx the largest logit among them. temp > 0 only. */
static int32_t candidates(st_sampler *s, const float *logits, float *mx_out) {
    const st_sampler_params *p = &s->p;
    const int32_t nv = s->n_vocab;
    const float *w = logits; /* the logits, or their penalized copy */
    if (any_penalty(s)) {
        memcpy(s->work, logits, (size_t)nv * sizeof *s->work);
        w = s->work;
        for (int32_t i = 0; i < s->n_hist; i++) {
            int32_t t = s->hist[i];
            if (s->seen[t] == 0) continue;
            /* once per distinct token: the first ring slot holding it applies the penalty */
            int first = 1;
            for (int32_t j = 0; j < i; j++)
                if (s->hist[j] == t) first = 0;
            if (!first) continue;
            s->work[t] = penalized(s, s->work[t], s->seen[t]);
        }
    }

    int32_t n;
    if (p->top_k > 0 && p->top_k < nv) {
        n = select_top_k(s, w, p->top_k);
    } else {
        for (int32_t i = 0; i < nv; i++) s->cands[i] = (cand){w[i], i};
        n = nv;
        if (p->top_p < 1.0f) qsort(s->cands, (size_t)n, sizeof *s->cands, cand_cmp);
    }
    cand *c = s->cands;
    float mx = c[0].logit;
    for (int32_t i = 1; i < n; i++)
        if (c[i].logit > mx) mx = c[i].logit;

    if (p->top_p < 1.0f && n > 1) { /* c is sorted here */
        double sum = 0, cum = 0;
        for (int32_t i = 0; i < n; i++) sum += exp((double)c[i].logit - mx);
        for (int32_t i = 0; i < n; i++) {
            cum += exp((double)c[i].logit - mx) / sum;
            if (cum >= p->top_p) {
                n = i + 1;
                break;
            }
        }
    }
    if (p->min_p > 0 && n > 1) { /* keep logits within log(min_p) of the best */
        float thr = mx + logf(p->min_p);
        int32_t m = 0;
        for (int32_t i = 0; i < n; i++)
            if (c[i].logit >= thr) c[m++] = c[i];
        n = m ? m : 1;
    }
    *mx_out = mx;
    return n;
}

/* One draw from the candidates' softmax at the temperature, skipping token `skip` (-1: none). */
static int32_t draw(st_sampler *s, int32_t n, float mx, int32_t skip) {
    const cand *c = s->cands;
    const double temp = s->p.temp;
    double sum = 0;
    int32_t last = -1;
    for (int32_t i = 0; i < n; i++)
        if (c[i].id != skip) sum += exp(((double)c[i].logit - mx) / temp), last = i;
    double r = rng_uniform(s->rng) * sum, acc = 0;
    for (int32_t i = 0; i < n; i++) {
        if (c[i].id == skip) continue;
        acc += exp(((double)c[i].logit - mx) / temp);
        if (r < acc) return c[i].id;
    }
    return c[last].id;
}

int32_t st_sampler_sample(st_sampler *s, const float *logits) {
    if (s->p.temp <= 0) return greedy(s, logits);
    float mx;
    const int32_t n = candidates(s, logits, &mx);
    return draw(s, n, mx, -1);
}

int32_t st_sampler_sample_draft(st_sampler *s, const float *logits, int32_t draft, int *accepted) {
    *accepted = 0;
    if (s->p.temp <= 0) {
        const int32_t t = greedy(s, logits);
        *accepted = t == draft;
        return t;
    }
    float mx;
    const int32_t n = candidates(s, logits, &mx);
    const cand *c = s->cands;
    double sum = 0, px = 0;
    for (int32_t i = 0; i < n; i++) {
        const double w = exp(((double)c[i].logit - mx) / s->p.temp);
        sum += w;
        if (c[i].id == draft) px = w;
    }
    /* accept with probability p(draft); n == 1 means p(draft) is 1 or 0 exactly */
    if (px > 0 && (px >= sum || rng_uniform(s->rng) * sum < px)) {
        *accepted = 1;
        return draft;
    }
    /* rejected: the residual max(p - q, 0) normalized is p without the draft */
    return px > 0 ? draw(s, n, mx, draft) : draw(s, n, mx, -1);
}
