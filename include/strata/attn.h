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
    const void *k;         /* [n_kv_head][page_size][head_dim] elements of the KV type */
    const void *v;         /* [n_kv_head][page_size][head_dim] */
    const float *k_scale;  /* q8_0 KV only: [n_kv_head] one scale per page per head; else NULL */
    const float *v_scale;  /* q8_0 KV only: [n_kv_head]; else NULL */
    const uint64_t *valid; /* NULL: slots [0, n_tokens) are all valid; else a bitmask of
                              page_size bits (bit s of word s/64), slots >= n_tokens ignored */
    int32_t n_tokens;      /* slots [0, n_tokens) have been written */
    int64_t pos0;          /* sequence position of slot 0 (logical page index * page_size) */
} st_attn_page;

/* (the attention subsystem's functions follow) */

#ifdef __cplusplus
}
#endif
#endif
