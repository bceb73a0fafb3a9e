/*
 * Attention over the paged KV layout.
 *
 * The kernels know nothing of the page pool: they read a list of page views, each the
 * K and V of one layer of one page. The KV page library (kv.h) produces the views; the
 * sparse decoder passes a subset of them. Dense and sparse therefore share one code path.
 */
#ifndef STRATA_ATTN_H
#define STRATA_ATTN_H

#include "strata/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ST_ATTN_MAX_PAGE_SIZE 256

/* One page of one layer, as attention reads it. All pointers are borrowed. */
typedef struct st_attn_page {
    const void *k;         /* [n_kv_head][head_dim][page_size] elements of the KV type: keys
                              are stored dim-major (K^T) per head, so one vector load holds
                              one dimension of 16 slots and scoring needs no horizontal sums */
    const void *v;         /* [n_kv_head][page_size][head_dim] */
    const float *k_scale;  /* q8_0 KV only: [n_kv_head] one scale per page per head; else NULL */
    const float *v_scale;  /* q8_0 KV only: [n_kv_head]; else NULL */
    const uint64_t *valid; /* NULL: slots [0, n_tokens) are all valid; else a bitmask of
                              page_size bits (bit s of word s/64), slots >= n_tokens ignored */
    int32_t n_tokens;      /* slots [0, n_tokens) have been written */
    int64_t pos0;          /* sequence position of slot 0 (logical page index * page_size) */
} st_attn_page;

/* ---- attention over page views --------------------------------------------------------
 *
 * Shapes: a query row is head_dim f32; q and out are [n_q][n_head][head_dim] f32 (n_q = 1 for
 * decode). Query head h belongs to KV head h / (n_head / n_kv_head) (GQA group); the
 * kernels process the whole group per page, so each K/V element is read once per call.
 *
 * Softmax is computed online with f32 accumulators: scores are q.k * scale, tokens that are
 * invalid (slot >= n_tokens, a cleared validity bit, or, for chunk queries, a position after
 * the query's) are masked. A query that sees no token at all gets an all-zero output.
 * Masked slots are never read as V, so a page may hold garbage (even NaN) in them.
 *
 * Determinism: every sequence's page list (per KV head) is cut into fixed runs of pages
 * (ST_ATTN_SPLIT_TOKENS tokens' worth, independent of the thread count); each run yields a
 * partial (max, sum, acc) and the runs are merged in list order. Results are therefore
 * bit-identical for any number of threads, for a sequence alone or inside a batch, and for a
 * sparse selection that happens to list every page (Quest's exactness gate).
 * They differ (within the thresholds of tests/attn) between ISAs.
 *
 * Threads: one st_attn_ws per calling thread; the kernels run on the st_ctx's thread pool
 * (ctx NULL: on the calling thread). Page memory is only read.
 */

/* Tokens per partial of decode (whole pages, at least one): small enough that a short
 * context still gives every thread work (512 left one of two threads idle below 512 tokens),
 * large enough that the per-run costs (the merge, the tile set-up, the kernel pipeline
 * draining at the end of an item) stay small, against 128 both for dense decode and for a
 * Quest selection (docs/PERFORMANCE.md, decode attention). A list of ST_ATTN_LONG_LIST_TOKENS
 * or more, which gives every thread many runs anyway, is cut into runs of twice as many
 * tokens, which cuts the per-run costs further where no thread can go idle. */
#define ST_ATTN_SPLIT_TOKENS 256
#define ST_ATTN_LONG_LIST_TOKENS 4096
#define ST_ATTN_MAX_HEAD_DIM 1024
#define ST_ATTN_MAX_HEADS 4096

/* What the kernels need to know about one layer. */
typedef struct st_attn_geom {
    int32_t n_head;    /* query heads; a multiple of n_kv_head */
    int32_t n_kv_head;
    int32_t head_dim;  /* in [1, ST_ATTN_MAX_HEAD_DIM]; SIMD paths need a multiple of 16
                          (AVX-512) or 8 (AVX2), otherwise the scalar kernel runs */
    int32_t page_size; /* slots per page, >= 1 (the KV library uses 8..256; a contiguous
                          cache is one page of any size with valid == NULL) */
    st_type type;      /* ST_TYPE_F32, _F16, _BF16 or _Q8_0 (int8 + one scale per page-head) */
    float scale;       /* score scale; 0 = 1/sqrt(head_dim) */
} st_attn_geom;

/* The pages one sequence attends to. Page order is the reduction order; positions come
 * from each page's pos0, so the list needs no particular order, but the KV library gives
 * logical order. Holes are simply pages not listed. */
typedef struct st_attn_seq {
    const st_attn_page *pages; /* [n_pages], borrowed */
    int32_t n_pages;
    /* Optional per-KV-head subset (Quest): NULL = every KV head reads all pages. Otherwise
     * KV head h reads pages[sel[h * sel_stride + i]] for i < n_sel[h], in that order. */
    const int32_t *sel;   /* [n_kv_head][sel_stride] indices into pages, or NULL */
    const int32_t *n_sel; /* [n_kv_head], each in [0, sel_stride] */
    int32_t sel_stride;
    /* Pages per decode run: 0 = st_attn_pages_per_run of this list. A streaming window of a
     * longer list (st_attn_decode_runs) sets the longer list's, so that its runs are the
     * longer list's runs; in [0, st_attn_pages_per_run(page_size, INT64_MAX)]. */
    int32_t run_pages;
} st_attn_seq;

/* Caller-owned scratch (per-thread tiles, decode partials) plus the kernel table of one ISA.
 * It grows on demand and is reused, so steady-state decode allocates nothing. */
typedef struct st_attn_ws st_attn_ws;

/* Creates a workspace whose kernels are those of isa (normally st_ctx_isa(ctx)).
 * Returns 0, ST_E_INVAL (out NULL, isa unknown), ST_E_UNSUPPORTED (CPU lacks isa),
 * ST_E_NOMEM. *out is owned by the caller: st_attn_ws_destroy. */
int st_attn_ws_create(st_isa isa, st_attn_ws **out);
void st_attn_ws_destroy(st_attn_ws *ws); /* NULL is a no-op */
st_isa st_attn_ws_isa(const st_attn_ws *ws);

/* Decode: one query per sequence. q, out: [n_head][head_dim] f32 (out may not alias q).
 * Returns 0; ST_E_INVAL (NULL pointer, bad geometry, page or selection), ST_E_NOMEM (the
 * workspace could not grow). Details in ctx. On error out is untouched. */
int st_attn_decode(st_ctx *ctx, st_attn_ws *ws, const st_attn_geom *g, const st_attn_seq *seq,
                   const float *q, float *out);

/* Batched decode: sequence i reads seqs[i] with query q[i] -> out[i]; q, out:
 * [n_seq][n_head][head_dim]. Each output is bit-identical to st_attn_decode of that
 * sequence alone. Errors as st_attn_decode (n_seq >= 0; 0 is a no-op). */
int st_attn_decode_batch(st_ctx *ctx, st_attn_ws *ws, const st_attn_geom *g,
                         const st_attn_seq *seqs, int32_t n_seq, const float *q, float *out);

/* Chunk (prefill): n_q queries of one sequence at positions pos0_q .. pos0_q + n_q - 1;
 * query i attends the listed tokens whose position is <= pos0_q + i (the chunk's own K/V
 * must already be in the pages). q, out: [n_q][n_head][head_dim]. Errors as decode. */
int st_attn_chunk(st_ctx *ctx, st_attn_ws *ws, const st_attn_geom *g, const st_attn_seq *seq,
                  const float *q, int32_t n_q, int64_t pos0_q, float *out);

/* Quest key boxes are kept in f16 (half the RAM and half the bytes the ranking reads per
 * page), rounded outward so a box still contains every key it was made from: a box is
 * kmin[head_dim] then kmax[head_dim], f16. Converts an f32 box (kmin, kmax: [head_dim])
 * into box[2 * head_dim]: kmin rounded toward -inf, kmax toward +inf (a NaN stays NaN).
 * ws: whose ISA's kernel to use (NULL: the scalar reference); every ISA gives the same
 * bits. */
void st_attn_box_to_f16(const st_attn_ws *ws, int32_t head_dim, const float *kmin,
                        const float *kmax, uint16_t *box);

/* Quest upper bound for one KV head of a GQA group of n_group query heads:
 *   bound[p] = max over g of  sum_d max(q[g][d] * kmin[p][d], q[g][d] * kmax[p][d])
 * which is >= q[g].k for every key k inside page p's box [kmin, kmax] (unscaled: multiply
 * by the score scale if needed; ranking does not care). q: [n_group][head_dim];
 * box: page p's f16 box (kmin then kmax, as st_attn_box_to_f16) starts at p * stride
 * elements (stride >= 2 * head_dim); bound: [n_pages]. Uses ws's ISA. Each dimension's
 * term is computed as max(q, 0) * kmax + min(q, 0) * kmin (the max above for finite
 * sides), so a NaN side, an infinite side met by a zero weight, or +inf plus -inf makes
 * that head's sum NaN, and a NaN head makes bound[p] NaN whatever the other heads give:
 * such a page has no finite bound, and the caller ranks it as +inf. With that order a box
 * that contains another never bounds lower, on every ISA. Returns 0 or ST_E_INVAL. */
int st_attn_quest_bounds(const st_attn_ws *ws, int32_t head_dim, int32_t n_group,
                         const float *q, const uint16_t *box, int64_t stride, int32_t n_pages,
                         float *bound);

/* Element-wise min and max over the valid keys of KV head kv_head of one page, dequantized
 * (the Quest page metadata). kmin, kmax: [head_dim]. Returns the number of valid keys
 * (0: kmin = kmax = 0, and the caller should not rank the page), or ST_E_INVAL. Per
 * dimension the valid slots are taken in slot order (the first sets both, each later one
 * replaces min or max when strictly below or above), which decides the bits where a NaN
 * or both zeros occur. ws: whose ISA's kernel to use (NULL: the scalar reference); every
 * ISA gives the same bits. */
int st_attn_key_minmax(const st_attn_ws *ws, const st_attn_geom *g, const st_attn_page *page,
                       int32_t kv_head, float *kmin, float *kmax);


/* ---- streaming entry points (the SSD tier) ---------------------------------------------
 *
 * The KV library streams pages that are not in RAM through small buffers, a window of
 * pages at a time, and must produce exactly what one call over the whole list would.
 * These split the decode and chunk paths at their natural seams without changing the
 * arithmetic: decode = per-run partials merged in run order; chunk = one online-softmax
 * state per (KV head, query tile) folded over the pages in list order.
 */

/* Whole pages per decode run for pages of page_size slots (<= ST_ATTN_MAX_PAGE_SIZE) when
 * the longest per-KV-head list of the sequence holds n_list pages. It depends on the list
 * alone (never on the threads), so dense and an all-pages selection cut alike. */
static inline int32_t st_attn_pages_per_run(int32_t page_size, int64_t n_list) {
    if (page_size <= 0) return 1;
    const int32_t tokens = n_list >= ST_ATTN_LONG_LIST_TOKENS / page_size ? 2 * ST_ATTN_SPLIT_TOKENS
                                                                          : ST_ATTN_SPLIT_TOKENS;
    const int32_t n = tokens / page_size;
    return n < 1 ? 1 : n;
}

/* Floats per query head per decode run: m, l (lane sum), acc[head_dim]. */
#define ST_ATTN_PART_FLOATS(head_dim) ((size_t)(head_dim) + 2)

/* Decode partials of ONE sequence: the runs its page list is cut into (as st_attn_decode
 * cuts them), each run's softmax state written to parts[run][n_head][ST_ATTN_PART_FLOATS].
 * The list must be a suffix-free window of a longer list that starts at a run boundary
 * (for a selection: each head's list starts at a run boundary), so its runs are the
 * longer list's runs. *n_runs (may be NULL) = runs written; parts needs room for
 * st_attn_runs_count(g, seq) runs. Needs page_size <= ST_ATTN_MAX_PAGE_SIZE. Returns 0,
 * ST_E_INVAL, ST_E_NOMEM. Uses ws like st_attn_decode (threads: ctx's pool). */
int32_t st_attn_runs_count(const st_attn_geom *g, const st_attn_seq *seq);
int st_attn_decode_runs(st_ctx *ctx, st_attn_ws *ws, const st_attn_geom *g,
                        const st_attn_seq *seq, const float *q, float *parts, int32_t *n_runs);
/* Merges parts[n_runs] (from st_attn_decode_runs over consecutive windows, in run order)
 * into out[n_head][head_dim] with st_attn_decode's formula and order: bit-identical to
 * st_attn_decode over the whole list. Returns 0 or ST_E_INVAL. */
int st_attn_merge_runs(const st_attn_geom *g, const float *parts, int32_t n_runs, float *out);

/* Chunk state for n_q queries (floats, 64-byte aligned buffer owned by the caller). */
size_t st_attn_chunk_state_floats(const st_attn_geom *g, int32_t n_q);
/* Resets the state (no token seen). Returns 0 or ST_E_INVAL. */
int st_attn_chunk_begin(const st_attn_geom *g, int32_t n_q, float *state);
/* Folds the listed pages (no selection), in order, into the state: calling it over
 * consecutive windows of a list then st_attn_chunk_end gives exactly st_attn_chunk over
 * the whole list. Same arguments and errors as st_attn_chunk. */
int st_attn_chunk_fold(st_ctx *ctx, st_attn_ws *ws, const st_attn_geom *g,
                       const st_attn_seq *seq, const float *q, int32_t n_q, int64_t pos0_q,
                       float *state);
/* out[n_q][n_head][head_dim] from the state. Returns 0 or ST_E_INVAL. */
int st_attn_chunk_end(const st_attn_geom *g, int32_t n_q, const float *state, float *out);

#ifdef __cplusplus
}
#endif
#endif
