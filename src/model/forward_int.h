/* Private to the forward pass (forward.c, forward_quest.c): the runner's state and the spans a
 * chunk is cut into. */
#ifndef STRATA_FORWARD_INT_H
#define STRATA_FORWARD_INT_H

#include "model/model_int.h"
#include "strata/attn.h"

typedef struct span {
    st_kv_seq_id seq;
    int32_t i0, n;  /* tokens [i0, i0+n) of the chunk */
    int64_t pos0;   /* position of token i0 */
    int prefill;    /* chunk attention (prompt tokens); else one decode token */
    int verify;     /* a verify run: each token attends densely as the decode token of its
                       position (the KV views end at it) */
    int64_t budget; /* decode: Quest budget of this sequence (-1: the runner's) */
    double eps;     /* decode: certified-mode epsilon (< 0: the runner's setting) */
} span;

struct st_runner {
    st_ctx *ctx;
    st_threadpool *tp;
    const st_model *m;
    st_kv *kv;
    const st_kernels *kern;
    st_attn_ws *ws;
    st_attn_geom ag;
    int32_t n_batch, n_ctx;
    int32_t E, HQ, HK, F;   /* widths: embd, all query heads, all kv heads, ffn */
    float *x;               /* [n_batch][E] residual stream */
    float *xn;              /* [n_batch][max(E, HQ)] normed input of a projection */
    float *q;               /* [n_batch][HQ] */
    float *k, *v;           /* [n_batch][HK] */
    float *att;             /* [n_batch][HQ] attention output */
    float *tmp;             /* [n_batch][E] projection output */
    float *g, *u;           /* [n_batch][F] */
    uint8_t *actq;          /* [n_batch][act_row_max] quantized activations */
    size_t act_row_max;
    float *rope;            /* [n_batch][n_rot] cos/sin pairs */
    st_attn_page *views;    /* [views_cap] one sequence's pages, for the Quest audit */
    int views_cap;
    double last_s;
    st_runner_progress_fn progress;
    void *progress_user;
    int64_t prog_done, prog_total; /* token-layers of this call's prefill */
    /* Quest sparse decode: budget 0 = dense */
    st_kv_quest_params quest;
    int32_t audit_every;    /* 0: no mass audit */
    st_kv_select **qsel;    /* [n_batch] one selection per decode slot, made on first use */
    st_kv_seq_id failed_seq; /* the sequence the last failed forward's error belongs to, or -1 */
    double *qfrac;          /* [n_head] audit scratch */
    double *qbound, *qskip; /* [n_head] certified bound of the selection in flight, audit */
    double mass_sum, bound_sum;
    st_runner_quest_stats qst;
    /* test hook (st_runner_set_act_tap): where the projection in flight reads its input */
    st_act_tap_fn tap;
    void *tap_user;
    int tap_layer;
    st_act_site tap_site;
    int32_t tap_row0;       /* chunk token of the projection's first row */
    st_kv_seq_id *tap_seq;  /* [n_batch] sequence and position of each chunk token */
    int64_t *tap_pos;
};

/* forward_quest.c: Quest sparse decode. */
/* Makes the per-slot selections and audit scratch on first use. 0 or ST_E_NOMEM. */
int st_fwd_quest_alloc(st_runner *r);
/* True when the decode span sp attends sparsely (a budget or certified mode, not a verify run). */
int st_fwd_span_sparse(const st_runner *r, const span *sp);
/* Selects (and in certified mode certifies) the pages of each of the n_sp decode spans for
 * layer, into r->qsel[s], updating the Quest statistics. 0 or an error set on r->ctx. */
int st_fwd_quest_select(st_runner *r, int layer, const span *sp, int n_sp);

#endif
