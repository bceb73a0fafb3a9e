/* Private to src/attn: the per-ISA block kernel interface shared by attn.c (driver) and the
 * scalar / AVX2 / AVX-512 kernels. */
#ifndef STRATA_ATTN_INT_H
#define STRATA_ATTN_INT_H

#include "strata/attn.h"

/* AI: the SIMD kernels' helpers. Forced inlining turns the per-type, per-shape kernels into
 * straight-line code. Sanitizer builds (make test-asan, the fuzz targets) instrument every
 * inlined copy, which took clang over five minutes on attn_avx512.c: there the compiler
 * chooses what to inline. */
#if defined(__SANITIZE_ADDRESS__)
#define ATTN_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ATTN_SANITIZED 1
#endif
#endif
#ifdef ATTN_SANITIZED
#define AI static inline
#else
#define AI static inline __attribute__((always_inline))
#endif

/* Largest page size a geometry may declare (a contiguous cache is one big page). */
#define ATTN_MAX_PAGE_SIZE_ANY (1 << 26)

/* Tokens per kernel call: one AVX-512 vector of scores. */
#define ATTN_BLK 16

/* The online-softmax state of R query rows that share one KV head (a GQA group, times the
 * queries of a chunk tile), plus the scratch one kernel call needs. Row r is query
 * r / n_group, head r % n_group of the group. All float arrays are 64-byte aligned. */
typedef struct attn_tile {
    st_type type;       /* KV element type */
    int R;              /* rows */
    int D;              /* head_dim */
    const float *q;     /* [R][D] queries, already multiplied by the score scale */
    const int64_t *lim; /* [R] last position row r may attend, or NULL (decode: no limit) */
    int64_t lim_min;    /* with lim: the smallest lim[r]; a block wholly at or before it is
                           seen whole by every row (the bulk of a long prefill) */
    float *m;           /* [R] running max of the scores (-inf before any token) */
    float *l;           /* [R][ATTN_BLK] running sum of exp(score - m), spread over lanes so
                           SIMD kernels need no horizontal sum per block; the row's sum is
                           attn_lane_sum (scalar kernel: lane 0 only) */
    float *acc;         /* [R][D] running sum of exp(score - m) * v */
    /* scratch, contents undefined between calls; p, bm and kf hold two sets, so a kernel
     * may compute block i+1's scores (set (i+1)&1) before block i's V (set i&1) */
    float *p;       /* [2][R][ATTN_BLK] scores, then probabilities */
    float *bm;      /* [2][R + 16] block max per row, then alpha */
    uint32_t *rm;   /* [R] row masks */
    float *kf;      /* [2][D][ATTN_BLK] K block converted to f32 (when the kernel wants it) */
    float *vf;      /* [ATTN_BLK][D] V block converted to f32 */
    float *s;       /* decode runs: [n_blk][R][ATTN_BLK] a run's scores, then probabilities */
    const float *q4; /* decode runs: [ceil(R / 4)][D][4] q in groups of 4 rows, transposed
                        (row r0 + i, dimension d at q4[(r0 / 4 * D + d) * 4 + i]; 0 past R) */
} attn_tile;

/* One block of <= ATTN_BLK consecutive slots of one KV head of one page, and the tile
 * (rows of that KV head) it is folded into. */
typedef struct attn_blk {
    const attn_tile *t;
    const void *k;  /* K^T: element (slot j, dim d) at k[d * kstride + j] (the page stores
                       keys dim-major per head; k points at the block's first slot of d 0) */
    size_t kstride; /* elements between dimensions: the page size */
    const void *v;  /* [n][D] */
    float ks, vs;   /* q8_0 page-head scales; 1 for the float types */
    uint32_t mask;  /* bit j: slot j is valid (bits >= n are 0); nonzero */
    int n;          /* slots in the block, 1..ATTN_BLK */
    int32_t slot;   /* the block's first slot within its page (a multiple of ATTN_BLK) */
    int64_t pos0;   /* position of slot 0 */
} attn_blk;

/* The key rows of one KV head of a page, as st_attn_key_minmax reads them: dimension d's
 * slots are the P elements at k + d * P (keys are dim-major). */
typedef struct attn_minmax_rows {
    const void *k;
    st_type type;
    int32_t P, n_tokens;   /* slots [0, n_tokens) written; at least one valid */
    const uint64_t *valid; /* NULL: all of them valid */
    float sc;              /* q8_0 scale; 1 otherwise */
} attn_minmax_rows;

typedef struct st_attn_kernels {
    st_isa isa;
    int d_mult; /* head_dim must be a multiple of this, else a narrower table is used (attn.c) */
    /* Rows (queries x group heads) per st_attn_chunk tile: more rows reuse each converted
     * K/V block more, as long as the tile's state stays near L1. (The streaming chunk API
     * sizes its caller's state without a workspace, so it keeps ATTN_CHUNK_ROWS.) */
    int chunk_rows;
    /* Folds blocks b[0..n) in order into their tiles' online-softmax states. Tiles may
     * differ from block to block (several KV heads of a page) and share scratch.
     * b[n .. n + n_ahead) are the blocks that come next (not folded now): the kernel may
     * prefetch them, so memory streams in step with compute rather than in bursts. */
    void (*blocks)(const attn_blk *b, int n, int n_ahead);
    /* Decode: one KV head's run, blocks b[0..n) of tile t in list order, into t's state,
     * which it overwrites (m, l, acc: no earlier state). Every score of the run first, then
     * one max per row, the exponentials, and V last: within a run the softmax is exact (one
     * max, no rescaling), so no latency chain runs from block to block as in the online
     * update. nx[0..nn) are the next run's blocks, prefetched, not folded. t->s holds
     * n * R * ATTN_BLK floats. NULL: the driver folds runs with blocks(). */
    void (*run)(const attn_tile *t, const attn_blk *b, int n, const attn_blk *nx, int nn);
    /* st_attn_quest_bounds with validated arguments; d_mult does not apply. */
    void (*quest)(int D, int G, const float *q, const uint16_t *box, int64_t stride,
                  int32_t n_pages, float *bound);
    /* The Quest page metadata: st_attn_key_minmax's rows 0..D into kmin, kmax, and
     * st_attn_box_to_f16. The same bits as the scalar references below on every input:
     * where the order of the scalar loop decides the result (a NaN in a row, or both +0 and
     * -0 in it) or a conversion's NaN payload could differ, the kernel hands that row or
     * chunk to the reference. NULL: the reference. */
    void (*key_minmax)(const attn_minmax_rows *r, int32_t D, float *kmin, float *kmax);
    void (*box_to_f16)(int32_t D, const float *kmin, const float *kmax, uint16_t *box);
} st_attn_kernels;

/* The minmax kernels' slot mask: bit j for slot s0 + j of r written and valid, j < w (w 8 or
 * 16, s0 a multiple of w, so the bits sit in one word of r->valid). */
static inline uint32_t attn_minmax_slots(const attn_minmax_rows *r, int32_t s0, int w) {
    const uint32_t all = (1u << w) - 1u;
    const int32_t left = r->n_tokens - s0;
    uint32_t m = left >= w ? all : (1u << left) - 1u;
    if (r->valid) m &= (uint32_t)(r->valid[s0 / 64] >> (s0 % 64));
    return m & all;
}

/* attn_check.c: the scalar references of the metadata kernels. Row d of r (its valid slots
 * in slot order: the first sets min and max, each later one replaces them when strictly
 * below / above) into kmin[d], kmax[d]; n values of kmin, kmax rounded outward into
 * lo_out, hi_out (st_attn_box_to_f16). */
void attn_minmax_row_ref(const attn_minmax_rows *r, int32_t d, float *kmin, float *kmax);
void attn_box_to_f16_ref(int32_t n, const float *kmin, const float *kmax, uint16_t *lo_out,
                         uint16_t *hi_out);

/* attn_check.c: 0 or ST_E_INVAL with a message naming the field (seq index si). */
int attn_check_geom(st_ctx *ctx, const st_attn_geom *g);
int attn_check_seq(st_ctx *ctx, const st_attn_geom *g, const st_attn_seq *s, int32_t si);
/* attn.c: the kernel table a workspace was created with. */
const st_attn_kernels *attn_ws_kernels(const st_attn_ws *ws);

extern const st_attn_kernels st_attn_kernels_scalar_;
extern const st_attn_kernels st_attn_kernels_avx2_;
extern const st_attn_kernels st_attn_kernels_avx512_;

/* Row r's mask for a block: the block's valid slots whose position is <= lim[r]. */
static inline uint32_t attn_row_mask(const attn_tile *t, const attn_blk *b, int r) {
    if (!t->lim) return b->mask;
    int64_t last = t->lim[r] - b->pos0; /* last slot index allowed */
    if (last < 0) return 0;
    if (last >= ATTN_BLK - 1) return b->mask;
    return b->mask & ((2u << last) - 1u);
}

/* Element i of a row of KV type t, dequantized except for the q8_0 scale. */
static inline float attn_elem(st_type t, const void *base, size_t i) {
    switch (t) {
    case ST_TYPE_F32: return ((const float *)base)[i];
    case ST_TYPE_F16: return st_fp16_to_fp32(((const uint16_t *)base)[i]);
    case ST_TYPE_BF16: return st_bf16_to_fp32(((const uint16_t *)base)[i]);
    case ST_TYPE_Q8_0: return (float)((const int8_t *)base)[i];
    default: ST_ASSERT(0 && "attn: unsupported KV type");
    }
    return 0;
}

/* The row sum of a lane-spread l, in a fixed order. */
static inline float attn_lane_sum(const float *l) {
    float s = 0;
    for (int i = 0; i < ATTN_BLK; i++) s += l[i];
    return s;
}

static inline size_t attn_elem_size(st_type t) {
    return t == ST_TYPE_F32 ? 4 : t == ST_TYPE_Q8_0 ? 1 : 2;
}

/* Blocks a kernel prefetches ahead of the one it folds: 4 blocks of f16 GQA decode are
 * about 16 KiB, i.e. a microsecond at DRAM speed, well past the memory latency. */
#define ATTN_PF_BLOCKS 4

/* A software prefetch into L1. (Prefetching into L2 only, far ahead, measured slower.) */
#define ATTN_PF(p) __builtin_prefetch((p), 0, 3)

/* Prefetches bytes [o, o + n) of p, one request per cache line. */
static inline void attn_pf_span(const char *p, size_t o, size_t n) {
    for (size_t e = o + n; o < e; o += 64) ATTN_PF(p + o);
}

/* Prefetches the K lines of block b into the cache. */
static inline void attn_prefetch_k(const attn_blk *b) {
    const size_t es = attn_elem_size(b->t->type), D = (size_t)b->t->D;
    const char *k = b->k;
    if (b->kstride == (size_t)b->n) { /* a whole small page-head: one contiguous run */
        attn_pf_span(k, 0, D * (size_t)b->n * es);
    } else { /* one short run per dimension (a slice of a large page) */
        for (size_t d = 0; d < D; d++) ATTN_PF(k + d * b->kstride * es);
    }
}

/* Prefetches the V lines of block b into the cache. */
static inline void attn_prefetch_v(const attn_blk *b) {
    attn_pf_span(b->v, 0, (size_t)b->t->D * (size_t)b->n * attn_elem_size(b->t->type));
}

static inline void attn_prefetch_blk(const attn_blk *b) {
    attn_prefetch_k(b);
    attn_prefetch_v(b);
}

/* Decode runs: blocks of K or V prefetched ahead along the order "K of the run's blocks,
 * their V, K of the next run's blocks": 16 KiB in f16 with head_dim 64, as ATTN_PF_BLOCKS. */
#define ATTN_RUN_PF 8

/* The softmax pass's share of a decode run's reads (run_softmax_rows): the scores pass has
 * requested the run's V up to block ATTN_RUN_PF - 1 and the V pass requests ATTN_RUN_PF
 * blocks ahead of itself, so step x of the pass's n requests line x (x + n, ...) of each
 * full V block in [ATTN_RUN_PF, 2 ATTN_RUN_PF), and the reads do not stop meanwhile. */
static inline void attn_softmax_pf(const attn_tile *t, const attn_blk *b, int n, int x) {
    const int end = n < 2 * ATTN_RUN_PF ? n : 2 * ATTN_RUN_PF;
    const int lines = (int)((size_t)t->D * ATTN_BLK * attn_elem_size(t->type) / 64);
    for (int j = ATTN_RUN_PF; j < end; j++)
        if (b[j].n == ATTN_BLK)
            for (int ln = x; ln < lines; ln += n) ATTN_PF((const char *)b[j].v + 64 * ln);
}

/* Prefetch target of the element e of the read order "K of b[0..n), V of b[0..n), K of
 * nx[0..nn)": a span of one full block that the loops prefetch piecewise (returned), or
 * NULL after requesting a block of another shape at once (or past the end). */
static inline const char *attn_run_pf(const attn_blk *b, int n, const attn_blk *nx, int nn, int e) {
    const attn_blk *a;
    int is_k;
    if (e < n) a = &b[e], is_k = 1;
    else if (e < 2 * n) a = &b[e - n], is_k = 0;
    else if (e - 2 * n < nn) a = &nx[e - 2 * n], is_k = 1;
    else return NULL;
    if (a->n == ATTN_BLK && !is_k) return a->v;
    if (a->n == ATTN_BLK && a->kstride % ATTN_BLK == 0 && a->kstride <= ST_ATTN_MAX_PAGE_SIZE) {
        /* A page of P > ATTN_BLK slots: its head's K^T [D][P] is one region of P / ATTN_BLK
         * block-sized spans, each dimension's line shared by the page's blocks. Block j of
         * the page prefetches span j, so the page's blocks request the region once, in
         * order, spread over their loops (a burst of one prefetch per dimension and block
         * read large pages slower than pages of 16; docs/PERFORMANCE.md, decode attention). */
        const size_t es = attn_elem_size(a->t->type);
        return (const char *)a->k + (size_t)a->slot * ((size_t)a->t->D - 1) * es;
    }
    if (is_k) attn_prefetch_k(a);
    else attn_prefetch_v(a);
    return NULL;
}

/* One dimension of the Quest bound, max(q * lo, q * hi) written as q+ * hi + q- * lo (q+ =
 * max(q, 0), q- = min(q, 0)) as the SIMD kernels compute it: equal for finite sides, and a
 * NaN side, or an infinite one met by a zero weight, gives NaN on every ISA (the max form
 * would drop a NaN lo), so a box that contains another never bounds lower in the ranking's
 * order (NaN first). */
static inline float attn_quest_term(float q, float lo, float hi) {
    const float qp = q > 0 ? q : 0.0f, qn = q < 0 ? q : 0.0f;
    return qp * hi + qn * lo;
}

/* The Quest bound's max over a GQA group's heads, NaN sticky: a head whose sum is NaN (an
 * infinite box side times a zero weight, or +inf plus -inf) cannot be bounded, so the page's
 * bound is NaN, which the ranking takes as +inf. A plain `v > best` would drop that head and
 * rank the page by the others: a group box holding the page's infinite side then bounds
 * lower than the page itself, and the two-level ranking skips a page the flat one picks. */
static inline float attn_quest_max(float best, float v) {
    return v > best || v != v ? v : best;
}

#endif
