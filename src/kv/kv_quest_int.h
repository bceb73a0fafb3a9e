/* Private to the Quest selection (kv_quest.c) and its certificates (kv_quest_cert.c): the
 * layout of a selection. */
#ifndef STRATA_KV_QUEST_INT_H
#define STRATA_KV_QUEST_INT_H

#include "kv_int.h"
#include "strata/quest.h"

/* A skipped page in the certificate's growth order. */
typedef struct kv_cert_ord {
    double key;    /* the page's bound exponent, max over the group (NaN -> +inf) */
    int32_t view;  /* index into the view list */
    int32_t pos;   /* position before sorting (the column of c_y) */
} kv_cert_ord;

struct st_kv_select {
    int32_t n_kv_head, n_views, dense;
    int32_t layer;    /* the layer it was made for (the boxes certification reads) */
    int32_t *idx;     /* [n_kv_head][n_views] chosen view indices, ascending */
    int32_t *n_sel;   /* [n_kv_head] */
    int32_t *phys;    /* [n_views] physical page of each view */
    int32_t *ent;     /* [n_views] page-table entry of each view (views skip holes) */
    int64_t n_ent;    /* the sequence's entries when the selection was made */
    int32_t *fidx;    /* [n_views] view indices of the forced pages, ascending */
    int32_t *cand;    /* [n_views] view indices of ranked pages, ascending */
    float *scr, *scr2;/* [n_kv_head][n_views] scratch: each head's bounds, partitioned */
    int32_t *top;     /* [n_kv_head][n_views] scratch: the chosen candidates */
    float *bound;     /* [n_kv_head][n_views] bound of cand[c] at c, per KV head */
    kv_qtree_ws *tree;/* two-level ranking's scratch (kv_quest_tree.c), made on first use */
    int32_t n_scored_h[ST_KV_MAX_HEADS]; /* boxes the two-level ranking scored, per head */
    int64_t cap_views, cap_idx;
    int32_t cap_head;
    st_kv_select_stats st;
    /* certificate scratch (kv_quest_cert.c), grown on demand */
    uint8_t *c_in;      /* [n_kv_head][n_views] page selected for the head */
    kv_cert_ord *c_ord; /* [n_views] one head's skipped pages, growth order */
    double *c_y;        /* [G][n_views] per query head of the group: bound exponents of the
                           skipped pages, by position in c_ord */
    double *c_suf;      /* [G][n_views + 1] suffix sums of the U terms in growth order */
    double *c_s, *c_m;  /* [n_head] S (rounded down) and its reference m */
    int64_t *c_ops;     /* [n_head] rounding operations that went into S */
    float *c_kd;        /* [head_dim][page_size] one page's keys of one head, dequantized */
    double *c_acc;      /* [3][page_size] score sums, |term| sums, scores */
    int32_t page_size;  /* the pool's, for the scratch above */
    double dense_frac;  /* cert_dense_frac of the params the selection was made with */
    float *c_box;       /* [2 * head_dim] one box in f32 */
    int64_t c_cap_views, c_cap_head, c_cap_k;
};

void kv_cert_free(st_kv_select *s);

#endif
