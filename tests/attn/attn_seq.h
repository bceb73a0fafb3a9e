/* The attention tests' random page sequences (tests/attn: test_attn.c, test_attn_quest.c):
 * a seeded generator, pages with holes, validity masks and NaN in every slot attention must
 * not read, and their dequantized tokens for the double-precision reference. */
#ifndef STRATA_TEST_ATTN_SEQ_H
#define STRATA_TEST_ATTN_SEQ_H

#include "strata/attn.h"
#include "../test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct rng { uint64_t s; } rng;
static inline uint64_t rnext(rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline float runif(rng *r) { return (float)((rnext(r) >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f; }
static inline int rint_(rng *r, int n) { return (int)(rnext(r) % (uint64_t)n); }

/* A test sequence: logical pages (some left out as holes), validity masks, NaN in every
 * slot attention must not read, and the dequantized valid tokens for the reference. */
typedef struct tseq {
    st_attn_geom g;
    int n_log;            /* logical pages */
    st_attn_page *pages;  /* [n_pages] listed pages, logical order */
    int *page_log;        /* [n_pages] logical index of each listed page */
    int n_pages;
    void **mem;           /* [n_log] page memory (K, V, scales), NULL for holes */
    uint64_t *masks;      /* [n_log][ceil(P / 64)] */
    int n_ref;
    int64_t *ref_pos;     /* [n_ref] */
    int *ref_page;        /* [n_ref] logical page */
    double *ref_k, *ref_v; /* [n_ref][n_kv_head][D] */
} tseq;

typedef struct tparams {
    int n_kv_head, G, D, P;
    st_type type;
    int64_t len;      /* tokens written */
    int hole_pct;     /* chance a page (not the last) is left out */
    int mask_pct;     /* chance a listed page gets a validity mask with cleared bits */
} tparams;

static inline size_t esz(st_type t) { return t == ST_TYPE_F32 ? 4 : t == ST_TYPE_Q8_0 ? 1 : 2; }

static inline void put_elem(st_type t, void *base, size_t i, float x) {
    switch (t) {
    case ST_TYPE_F32: ((float *)base)[i] = x; break;
    case ST_TYPE_F16: ((uint16_t *)base)[i] = st_fp32_to_fp16(x); break;
    case ST_TYPE_BF16: ((uint16_t *)base)[i] = st_fp32_to_bf16(x); break;
    default: ((int8_t *)base)[i] = (int8_t)x; break;
    }
}

static inline double get_elem(st_type t, const void *base, size_t i) {
    switch (t) {
    case ST_TYPE_F32: return ((const float *)base)[i];
    case ST_TYPE_F16: return st_fp16_to_fp32(((const uint16_t *)base)[i]);
    case ST_TYPE_BF16: return st_bf16_to_fp32(((const uint16_t *)base)[i]);
    default: return ((const int8_t *)base)[i];
    }
}

/* Fills one head's slots of one page (K or V). Unread slots get NaN (float types) or
 * random bytes (q8_0). Returns the q8_0 scale (1 otherwise). */
/* One head of a page: V slot-major [P][D], K dim-major [D][P] (kT), as attn.h lays them. */
static inline float fill_head(rng *r, st_type t, void *base, int P, int D, int n_tok,
                              uint64_t *mask, float amp, int kT) {
    float vals[256 * 128];
    float amax = 0;
    for (int s = 0; s < P; s++)
        for (int d = 0; d < D; d++) {
            float x = runif(r) * amp;
            vals[s * D + d] = x;
            int ok = s < n_tok && ((mask[s / 64] >> (s % 64)) & 1);
            if (ok && fabsf(x) > amax) amax = fabsf(x);
        }
    float scale = t == ST_TYPE_Q8_0 ? (amax > 0 ? amax / 127 : 1) : 1;
    for (int s = 0; s < P; s++)
        for (int d = 0; d < D; d++) {
            int ok = s < n_tok && ((mask[s / 64] >> (s % 64)) & 1);
            size_t i = (size_t)s * D + d, o = kT ? (size_t)d * P + s : i;
            if (t == ST_TYPE_Q8_0)
                put_elem(t, base, o, ok ? roundf(vals[i] / scale) : (float)(rint_(r, 255) - 127));
            else
                put_elem(t, base, o, ok ? vals[i] : NAN);
        }
    return scale;
}

static inline void tseq_free(tseq *s) {
    for (int i = 0; i < s->n_log; i++) free(s->mem[i]);
    free(s->mem);
    free(s->pages);
    free(s->page_log);
    free(s->masks);
    free(s->ref_pos);
    free(s->ref_page);
    free(s->ref_k);
    free(s->ref_v);
    memset(s, 0, sizeof *s);
}

static inline void tseq_make(tseq *s, const tparams *tp, rng *r) {
    memset(s, 0, sizeof *s);
    const int H = tp->n_kv_head, D = tp->D, P = tp->P;
    s->g = (st_attn_geom){.n_head = H * tp->G, .n_kv_head = H, .head_dim = D, .page_size = P,
                          .type = tp->type, .scale = 0};
    s->n_log = (int)((tp->len + P - 1) / P);
    s->mem = calloc((size_t)s->n_log + 1, sizeof(void *));
    s->pages = calloc((size_t)s->n_log + 1, sizeof(st_attn_page));
    s->page_log = calloc((size_t)s->n_log + 1, sizeof(int));
    const size_t mw = ((size_t)P + 63) / 64; /* mask words per page */
    s->masks = calloc(((size_t)s->n_log + 1) * mw, sizeof(uint64_t));
    size_t maxref = (size_t)s->n_log * P + 1;
    s->ref_pos = malloc(maxref * sizeof(int64_t));
    s->ref_page = malloc(maxref * sizeof(int));
    s->ref_k = malloc(maxref * H * D * sizeof(double));
    s->ref_v = malloc(maxref * H * D * sizeof(double));
    const size_t hb = (size_t)P * D * esz(tp->type), kvb = (size_t)H * hb;
    for (int i = 0; i < s->n_log; i++) {
        if (i != s->n_log - 1 && rint_(r, 100) < tp->hole_pct) continue; /* hole */
        int n_tok = (int)(tp->len - (int64_t)i * P < P ? tp->len - (int64_t)i * P : P);
        uint64_t *mask = s->masks + (size_t)i * mw;
        int masked = rint_(r, 100) < tp->mask_pct;
        for (int sl = 0; sl < P; sl++)
            if (!masked || rint_(r, 3)) mask[sl / 64] |= 1ull << (sl % 64);
        char *mem = malloc(2 * kvb + 2 * H * sizeof(float));
        s->mem[i] = mem;
        float *ksc = (float *)(mem + 2 * kvb), *vsc = ksc + H;
        for (int h = 0; h < H; h++) {
            ksc[h] = fill_head(r, tp->type, mem + h * hb, P, D, n_tok, mask, 1.0f, 1);
            vsc[h] = fill_head(r, tp->type, mem + kvb + h * hb, P, D, n_tok, mask, 1.0f, 0);
        }
        st_attn_page *pg = &s->pages[s->n_pages];
        s->page_log[s->n_pages++] = i;
        *pg = (st_attn_page){.k = mem, .v = mem + kvb, .n_tokens = n_tok, .pos0 = (int64_t)i * P,
                             .valid = masked ? mask : NULL};
        if (tp->type == ST_TYPE_Q8_0) pg->k_scale = ksc, pg->v_scale = vsc;
        for (int sl = 0; sl < n_tok; sl++) {
            if (!((mask[sl / 64] >> (sl % 64)) & 1)) continue;
            int n = s->n_ref++;
            s->ref_pos[n] = (int64_t)i * P + sl;
            s->ref_page[n] = i;
            for (int h = 0; h < H; h++)
                for (int d = 0; d < D; d++) {
                    size_t e = (size_t)sl * D + d, ek = (size_t)d * P + sl; /* K^T */
                    s->ref_k[((size_t)n * H + h) * D + d] = get_elem(tp->type, mem + h * hb, ek) * ksc[h];
                    s->ref_v[((size_t)n * H + h) * D + d] = get_elem(tp->type, mem + kvb + h * hb, e) * vsc[h];
                }
        }
    }
}

static inline float *rand_q(rng *r, size_t n) {
    float *q = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) q[i] = 3.0f * runif(r);
    return q;
}

/* The ISAs this run may use: up to the CPU's best, capped by STRATA_ISA (valgrind). */
static inline int max_isa(void) {
    st_ctx *ctx = NULL;
    if (st_ctx_create(NULL, &ctx)) return ST_ISA_SCALAR;
    int isa = (int)st_ctx_isa(ctx);
    st_ctx_destroy(ctx);
    return isa;
}

#endif
