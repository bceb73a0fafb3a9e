/* Engine internals shared by engine.c (opening, admission, the step) and engine_req.c (a
 * request's own state: sampling, streaming text, stop strings). */
#ifndef STRATA_ENGINE_INT_H
#define STRATA_ENGINE_INT_H

#include "strata/engine.h"

#define EN_MAX_STOP 16
#define EN_MAX_STOP_LEN 255

typedef struct en_req {
    st_req_id id;
    void *user;
    st_req_state state;
    int cancel;             /* st_engine_cancel asked; handled at the next step */
    int32_t *prompt;        /* [n_prompt], owned */
    int32_t n_prompt;
    int32_t max_gen;        /* tokens to generate at most (context-capped at admission) */
    int max_is_ctx;         /* max_gen is the context's cap, not the request's max_tokens */
    st_kv_seq_id seq;       /* -1 until admitted */
    int32_t n_done;         /* prompt tokens in the KV (cached ones included) */
    int64_t len0;           /* tokens the given sequence held before the prompt */
    int keep_seq;
    int32_t last;           /* the sampled token the next decode step feeds */
    int64_t budget;         /* Quest budget of its decode tokens (-1: the engine's) */
    double eps;             /* certified-mode epsilon of its decode tokens (< 0: the engine's) */
    st_sampler *smp;
    st_detok *dt;
    char *stop[EN_MAX_STOP];
    int n_stop;
    size_t stop_max;        /* longest stop string */
    st_engine_bias *bias;
    int n_bias;
    int ignore_eos;
    int32_t n_logprobs;     /* < 0: none */
    float logprob;          /* the last drawn token's, and its alternatives (when n_logprobs >= 0) */
    int32_t n_top;
    st_engine_logprob top[ST_ENGINE_MAX_LOGPROBS];
    char *held;             /* decoded text not yet released (could begin a stop string) */
    size_t n_held, cap_held;
    st_engine_req_stats st;
    double t_submit;
    /* speculative decoding (prompt lookup) */
    int32_t spec_ngram;     /* N of the n-gram lookup; 0: no drafting */
    int32_t draft_max;      /* drafted tokens per round at most */
    int32_t *gen;           /* [n_gen] generated tokens (the lookup's history after the prompt) */
    int32_t n_gen, cap_gen;
    int32_t *draft;         /* [draft_max] this step's draft */
    int32_t spec_len;       /* this round's draft length at most: doubles after a round that
                               took its whole draft, falls to one past what a round took */
    int32_t spec_miss;      /* rounds in a row that accepted nothing (capped) */
    int32_t spec_cool;      /* steps left without drafting */
    int64_t kv_keep;        /* during a round: the KV length its emitted tokens justify; -1 */
    /* speculative decoding with the draft model (engine_draft.c) */
    int use_dm;             /* drafts with the draft model */
    st_kv_seq_id dseq;      /* its sequence in the draft KV, -1 while it has none */
    int64_t dm_len;         /* tokens of its history (prompt + generated) the draft KV holds;
                               any after them are a draft's, rewound at the next use */
    int32_t dm_want;        /* this step: the draft model may draft this many tokens (0: not) */
    int step_src;           /* this step's draft came from the draft model (else lookup) */
    int32_t dm_fails;       /* draft-model attempts in a row that yielded no accepted token */
    double dm_cost;         /* seconds of draft-model forwards spent on its drafts, and the */
    double dm_gain;         /* target steps' seconds its accepted tokens saved (the throttle) */
    /* step scratch: what this step's batch holds of it */
    int32_t step_n;         /* tokens in the batch (0: not in it) */
    int32_t step_row;       /* its logits row, or -1 */
    int32_t step_draft;     /* drafted tokens after its last token in the batch */
    int64_t step_len0;      /* its KV length before the step */
} en_req;

/* The engine-wide cost check of drafting (engine_spec.c). The per-request throttle sees
 * only acceptance; whether a verify round pays also depends on what a forward of 1 + k tokens
 * costs against one of 1 on this machine and model (little more where the weights' read
 * bounds a step, nearly k times more where the matmul's arithmetic does). So the engine
 * compares the seconds per emitted token of recent decode-only steps with a verify round
 * against those without, and while verify steps cost more per token, no request drafts for
 * 8, 16, 32, then 64 steps before it tries again. */
typedef struct en_spec_cost {
    double s[2];    /* forward seconds (the draft model's included) of recent decode-only
                       steps without [0] and with [1] a verify round */
    int64_t tok[2]; /* tokens they emitted */
    int32_t n[2];   /* how many steps; a window halves past EN_SPEC_COST_WINDOW */
    int32_t pause;  /* decode steps left in which no request drafts */
    int32_t exp;    /* the next pause lasts 8 << exp steps */
} en_spec_cost;

/* One decode-only step's cost: the seconds of its forwards, the tokens it emitted, whether
 * a request verified a draft in it. Counts a pause down, and starts one when verify steps
 * have cost more per emitted token (after 4 of each), or, with 16 verify steps and fewer
 * than 4 plain ones to compare with, a pause of 4 steps to measure plain decode. Returns 1
 * when it started a pause. */
int en_spec_cost_record(en_spec_cost *c, double seconds, int64_t emitted, int verify);

/* Creates a request's sampler, detokenizer and copies of its stop strings and biases.
 * Returns 0, ST_E_INVAL (named in ctx), ST_E_NOMEM. */
int en_req_init(en_req *q, st_ctx *ctx, const st_tok *tok, int32_t n_vocab, const st_engine_req_params *p);
void en_req_free(en_req *q);

/* Samples the next token from logits (biases applied in place; with ignore_eos the n_eog
 * end-of-generation ids eog[] banned) and records it in the sampler's history. draft >= 0:
 * a drafted position, drawn by st_sampler_sample_draft (*accepted set); -1: a plain draw
 * (accepted may be NULL). */
int32_t en_req_sample(en_req *q, const int32_t *eog, int32_t n_eog, float *logits, int32_t n_vocab, int32_t draft,
                      int *accepted);

/* Feeds a generated (non end-of-generation) token's text: bytes that can be released go to
 * out (appended; *stopped = 1 when a stop string matched: the text before it is released and
 * the rest dropped). Returns 0 or ST_E_NOMEM. */
int en_req_text(en_req *q, int32_t token, char **out, size_t *n_out, size_t *cap_out, int *stopped);
/* The request ends without a stop match: everything held is released. */
int en_req_text_flush(en_req *q, char **out, size_t *n_out, size_t *cap_out);

/* Records a generated token in the drafting history. 0 or ST_E_NOMEM. */
int en_spec_push(en_req *q, int32_t t);
/* The lookup's draft for q's next round into q->draft (at most max tokens): its count, 0 for
 * none (no match). */
int32_t en_spec_draft(en_req *q, int32_t max);
/* Tokens q may draft at KV length len with room batch slots left (engine_spec.c: a page at
 * most, what it may still emit, the Quest exactness gate with the effective budget). */
int32_t en_spec_room(const en_req *q, int page, int64_t quest_budget, int64_t len, int32_t room);
/* The throttle's bookkeeping after a round. */
void en_spec_after(en_req *q, int32_t drafted, int32_t accepted);
/* A round that took nothing, or a draft model that proposed nothing (draft_p_min): drafting
 * pauses for 1, 2, 4 .. 32 steps, as the draft costs a forward of its own. */
void en_spec_miss(en_req *q);

/* Token i of q's history: the prompt, then the generated tokens. */
static inline int32_t en_hist_at(const en_req *q, int64_t i) {
    return i < q->n_prompt ? q->prompt[i] : q->gen[i - q->n_prompt];
}

/* The draft model (engine_draft.c). en_draft_open loads it (params' draft_model_path or
 * draft_synth), checks its vocabulary against e->tok and opens its KV and runner; nothing
 * to do without one. Returns 0 or an error with the message in why (as st_engine_create). */
int en_draft_open(st_engine *e, const st_engine_params *params, char *why, size_t why_len);
void en_draft_close(st_engine *e);
/* The step's draft-model phase, before the target's batch is laid out: every decoding
 * request with dm_want > 0 catches up on its history and drafts up to dm_want tokens into
 * q->draft (q->step_draft, q->step_src set). A failed forward turns the draft model off for
 * the requests of that forward. Returns 0 or ST_E_NOMEM. */
int en_draft_run(st_engine *e);
/* The end of a step: every running request's draft sequence reads the prompt tokens the
 * target has read (one draft forward for all). Returns 0 or ST_E_NOMEM. */
int en_draft_follow(st_engine *e);
/* After a round of q drafted by the draft model with `accepted` tokens taken: its draft
 * sequence keeps its history and the accepted tokens. */
void en_draft_after(st_engine *e, en_req *q, int32_t accepted);
/* Whether q's draft model has cost more than it saved: then drafting with it pauses (a miss:
 * longer each time in a row) and the debt is forgiven, so it is tried again after the pause. */
int en_draft_in_debt(en_req *q);
/* A draft-model attempt of q yielded accepted tokens (ok) or none: after
 * EN_DRAFT_MAX_FAILS in a row the draft model is off for q (its sequence freed), since the
 * draft reads every token of the sequence whether or not its drafts are taken. */
#define EN_DRAFT_MAX_FAILS 8
void en_draft_record(st_engine *e, en_req *q, int ok);
/* Frees q's draft sequence (a finish, a preemption); it is rebuilt when q drafts again. */
void en_draft_release(st_engine *e, en_req *q);

/* Appends n bytes to a growing buffer. 0 or ST_E_NOMEM. */
int en_buf_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n);

/* The engine (engine.h's opaque handle): engine_open.c opens and frees it, engine.c runs its
 * requests, engine_prefix.c saves and loads its prefix cache. */
struct st_engine {
    st_engine_params p;
    char *model_path, *spill_dir, *instance_id, *draft_path; /* copies of the params' strings */
    st_ctx *ctx;
    void *synth_buf;
    st_model *model;
    st_tok *tok;
    st_kv *kv;
    st_runner *runner;
    int32_t n_ctx, n_vocab, page;
    int64_t cap_pages;      /* pages admission may hand out (logical pool, RAM + disk) */
    int64_t ram_pages;      /* hot pool (== the pool without a tier) */
    int tier;
    st_req_id next_id;
    en_req **reqs;          /* active requests in id order */
    int n_reqs, cap_reqs;
    /* step scratch */
    int32_t *b_tok;
    st_kv_seq_id *b_seq;
    uint8_t *b_want, *b_prefill, *b_verify;
    int64_t *b_budget;
    double *b_eps;          /* [n_batch + n_parallel] per token quest_epsilon */
    float *logits;          /* [rows][n_vocab]: a row per decoding request, and per drafted token */
    int32_t cap_rows;
    int32_t *eog, n_eog;    /* the vocabulary's end-of-generation ids (ignore_eos bans them) */
    st_engine_event *ev;
    int n_ev, cap_ev;
    char *text;             /* the step's released bytes (events point into it) */
    size_t n_text, cap_text;
    st_engine_stats st;
    /* the draft model (engine_draft.c; all NULL without one) */
    void *dsynth_buf;
    st_model *dmodel;
    st_kv *dkv;             /* all in RAM, f16: a sequence per running request that drafts */
    st_runner *drunner;
    int32_t dn_ctx;         /* the draft sequences' length at most */
    int32_t *db_tok;        /* [cap_db] the draft forward's batch */
    st_kv_seq_id *db_seq;
    uint8_t *db_want;
    int32_t cap_db;
    float *dlogits;         /* [n_parallel][n_vocab] */
    en_req **drows;         /* [n_parallel] the request of each logits row */
    double t_step;          /* seconds of a target forward without prompt tokens (moving mean) */
    double t_dstep;         /* seconds of draft-model forwards in this step */
    en_spec_cost spec_cost;
    int step_held;          /* this step's batch: the cost check's pause held a draft back */
};

/* Pages holding tokens positions. */
static inline int64_t pages_for(const st_engine *e, int64_t tokens) { return (tokens + e->page - 1) / e->page; }

#endif
