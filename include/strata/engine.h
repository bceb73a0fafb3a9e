/*
 * strata engine: many generation requests through one model at once.
 *
 * An st_engine owns everything a generation needs: the context (threads, ISA), the model,
 * its tokenizer, the paged KV cache (with its SSD tier when a spill directory is given) and
 * a runner. Clients submit requests (a prompt, sampling settings, stop strings, limits) and
 * call st_engine_step, which advances every active request by one forward step and returns
 * what happened as events: a generated token with the text it released, and a last event
 * per request saying why it finished.
 *
 * One step is one st_runner_forward call (continuous batching): it holds one token of every
 * decoding request and pieces of the prompts still being read (chunked prefill), at most
 * n_batch tokens in all, so a long prompt never stalls the running streams for its whole
 * prefill. Prompt pieces are cut as the step's budget allows; the runner's determinism rule
 * (model.h) makes a request's tokens identical whether it runs alone or among others, at any
 * thread count, however its prompt was cut, and whether its prefix was computed by itself or
 * attached from the prefix cache.
 *
 * Lifecycle of a request:
 *
 *     submit -> WAITING --admitted--> PREFILL --prompt read--> DECODE --> finished (event)
 *                  ^                      |                       |
 *                  +------- preempted ----+-----------------------+
 *
 * Admission is FIFO: the oldest waiting request is admitted when a running slot is free
 * (n_parallel) and the pages it may need (prompt + max tokens, less the pages its cached
 * prefix shares) fit beside what the running requests may still claim, counted against the
 * KV pool (with a spill directory: RAM plus the disk budget). A newer request never starts
 * before an older one. A request attaches the longest cached prefix of its prompt
 * (st_kv_prefix_attach: verified tokens, the model's fingerprint) and prefills the rest.
 * With a spill directory, when the hot pool cannot hold the running requests' pages for the
 * next step, the newest running request is preempted: it stops being scheduled and its pages
 * spill to disk as others need RAM (never recomputed); it resumes, with identical output,
 * before any newer request starts.
 *
 * Speculative decoding (prompt lookup, llama.cpp's --spec-ngram). A decoding request with
 * spec_ngram N > 0 looks up the last N tokens of its prompt + generated text at their most
 * recent earlier occurrence and drafts the tokens that followed (up to draft_max); its step
 * then feeds its last token and the draft as one verify run (st_batch.verify: one read of
 * the weights for all of them, each token attended as the decode token it would have
 * been), draws its tokens from the run's logits in order as plain decode would, emits them
 * while they equal the draft plus the first that does not (the bonus token), and rewinds
 * the rejected ones out of the KV (st_kv_seq_rewind). The output is token for token the
 * output of plain decode, at any thread count and batch. A request that samples (temp > 0)
 * takes a drafted token by the speculative rule (st_sampler_sample_draft: with its
 * probability, else a token from the rest of the distribution), so its output has plain
 * decode's distribution, though not the same tokens for a seed. Drafting is off with a q8_0
 * KV cache (its pages rescale for later tokens); with a Quest budget a request drafts only
 * while the budget still covers every page of its sequence (plus one position), so that
 * plain decode's selection would be dense too, and decodes plain tokens past that. The draft
 * length starts at 2 and follows the acceptance (doubling after a whole draft taken, up to
 * draft_max; one past what a partial round took), and a round that accepts nothing pauses
 * drafting for 1, 2, 4 .. 32 steps.
 * Engine-wide, decode steps with a verify round are timed against those without: while
 * they cost more seconds per emitted token (a verify forward of 1 + k tokens can cost
 * nearly k + 1 plain ones where a step is bound by arithmetic, not by the weights' read),
 * no request drafts for 8, 16, 32, then 64 steps before drafting is tried again
 * (spec_paused_steps counts the steps held back). Drafting then depends on timing, which
 * changes which tokens are verified, never which are emitted under greedy decode, nor the
 * distribution under sampling.
 *
 * Speculative decoding with a draft model (llama.cpp's -md). With a draft model loaded (its
 * vocabulary checked equal to the target's at the open), a request with spec_draft on keeps
 * a sequence of its own in the draft model's KV cache, following the target's: it reads the
 * prompt a step behind the target's prefill (batched with the other requests' pieces), and
 * before a round it catches up on what was accepted since (the last round's bonus token),
 * then drafts greedily, one draft-model decode step per token, batched across the requests
 * that draft: the draft model's argmax, while its probability is at least draft_p_min, up to
 * the round's length. The round then runs as a lookup round does, and the draft sequence is
 * rewound to the accepted tokens. The source, per request: prompt lookup first (when
 * spec_ngram is on and the lookup finds a match), else the draft model (when spec_draft is
 * on); a draft shorter than draft_min is dropped. The draft model's tokens are deterministic
 * drafts (its greedy argmax), so for a request that samples the same acceptance rule applies
 * unchanged (st_sampler_sample_draft), and the output keeps plain decode's distribution. The
 * draft model drafts only while its sequence fits its context (min(n_ctx, the draft model's
 * training context)) and not for a request that continues a given sequence (its earlier
 * tokens are not known to the draft). A step where the draft model proposes nothing pauses
 * it as a round that accepts nothing does; a request whose draft forwards have cost more
 * seconds than the target steps its accepted tokens saved pauses too; 8 attempts in a row
 * without an accepted token turn the draft model off for the request (it reads every token
 * whether or not its drafts are taken). A preempted request frees its draft sequence and
 * rebuilds it on resumption; a failed draft-model forward turns the draft model off for the
 * requests it held (they decode on, by lookup or plain).
 *
 * Errors of one request (its pages, its context, an I/O error on its pages) finish that
 * request with ST_FINISH_ERROR and the error; the other requests go on.
 *
 * Threads: an st_engine is used by one thread at a time (a server's scheduler thread owns it;
 * other threads hand it requests under their own lock). The forward runs on the engine's
 * thread pool.
 */
#ifndef STRATA_ENGINE_H
#define STRATA_ENGINE_H

#include "strata/core.h"
#include "strata/kv.h"
#include "strata/model.h"
#include "strata/quest.h"
#include "strata/sample.h"
#include "strata/tok.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct st_engine st_engine;
/* A request's id: >= 1, never reused by an engine. */
typedef int64_t st_req_id;

typedef struct st_engine_params {
    const char *model_path;       /* GGUF file; NULL: the built-in synthetic model below */
    const st_synth_params *synth; /* NULL with model_path NULL: st_engine_builtin_model() */
    int use_mmap;                 /* map the file instead of reading it into memory */
    int weight_rows;              /* keep product weights in the file's row layout */
    int n_threads;                /* 0: STRATA_THREADS or the CPUs this process may use */
    int32_t n_ctx;                /* tokens per request at most; 0: min(model's, 4096) */
    int32_t n_batch;              /* tokens per step (prefill budget + decode tokens); 0: 256 */
    int32_t n_batch_busy;         /* prompt tokens per step while some request decodes, so a long
                                     prompt stretches the running streams' inter-token gaps by
                                     less; 0: n_batch / 4 (at least 1) */
    int32_t n_parallel;           /* requests running at once; 0: 4; <= n_batch */
    int32_t max_queue;            /* waiting requests at most; 0: 4 * n_parallel */
    int page_size;                /* KV page tokens; 0: 16 */
    st_type kv_type;              /* f16 (the default), bf16, f32 or q8_0 */
    int64_t kv_pages;             /* logical pool pages; 0: n_parallel full contexts */
    /* SSD tier: spill_dir NULL keeps every page in RAM */
    const char *spill_dir;
    const char *instance_id;      /* NULL: the pid */
    int64_t ram_pages;            /* hot pool pages with spill_dir; 0: ram_bytes, else kv_pages */
    uint64_t ram_bytes;           /* hot pool in bytes (whole pages, at least 2) when ram_pages is 0 */
    uint64_t disk_budget;         /* spill bytes; 0: unlimited */
    st_cold_type cold;
    st_kv_quest_params quest;     /* sparse decode for requests that do not set a budget */
    uint64_t mem_limit;           /* the memory available before the engine opens (the CLI
                                     passes MemAvailable; 0: no check): the weights count
                                     against it, and a hot KV pool larger than what they leave
                                     is refused, naming both sizes */
    int ram_auto;                 /* with spill_dir, mem_limit and neither ram_pages nor
                                     ram_bytes: the hot pool is what mem_limit leaves after the
                                     weights, less a quarter for everything else (at most the
                                     whole pool, at least 2 pages) */
    /* speculative decoding by prompt lookup, for requests that do not set their own */
    int32_t spec_ngram;           /* N: draft what followed the last N tokens' most recent earlier
                                     occurrence in prompt + generated text; 0: off (default) */
    int32_t draft_max;            /* drafted tokens per round at most (0..64); 0: 8 */
    /* speculative decoding with a draft model (llama.cpp's -md): a second, smaller model with
     * the target's vocabulary, its own runner and KV cache (all in RAM, f16), owned here */
    const char *draft_model_path; /* GGUF file; NULL: draft_synth, else none */
    const st_synth_params *draft_synth; /* with draft_model_path NULL: a synthetic draft model
                                     (borrowed for the open; e.g. the target's own params) */
    int32_t spec_draft;           /* requests that do not set their own draft with the draft
                                     model (1) or not (0); -1: 1 when one is loaded */
    int32_t draft_min;            /* a draft shorter than this is not verified (0..64; either
                                     source); 0: any */
    float draft_p_min;            /* the draft model stops drafting when its most likely token's
                                     probability is below this (0..1); st_engine_default_params:
                                     0.75, llama.cpp's */
} st_engine_params;

#define ST_ENGINE_MAX_NGRAM 64
#define ST_ENGINE_MAX_DRAFT 64
#define ST_ENGINE_DRAFT_MAX_DEFAULT 8
#define ST_ENGINE_DRAFT_P_MIN_DEFAULT 0.75f

/* n_ctx 0, n_batch 256, n_parallel 4, page 16, f16 KV, spec_draft -1, draft_p_min 0.75,
 * everything else off (dense decode). */
st_engine_params st_engine_default_params(void);
/* The built-in model used without a model path: a small random-weight llama with a byte-level
 * tokenizer (what `strata run` runs without -m). */
st_synth_params st_engine_builtin_model(void);

/* Opens the engine. Returns 0; ST_E_INVAL (a parameter out of range: named; a draft model
 * whose vocabulary is not the target's: the first difference named, token count, a token's
 * text or type, BOS or EOS), the model loader's, tokenizer's, KV pool's or runner's error
 * (model.h, tok.h, kv.h), ST_E_NOMEM; the message is in *why (why_len bytes, may be NULL) as
 * well. On error nothing is left open. *out owned by the caller: st_engine_destroy. */
int st_engine_create(const st_engine_params *p, st_engine **out, char *why, size_t why_len);
/* Finishes nothing: every request is dropped and its pages released. NULL is a no-op. */
void st_engine_destroy(st_engine *e);

/* The parts, borrowed for the engine's life (read-only use; e.g. tokenizing, templates). */
st_ctx *st_engine_ctx(st_engine *e);
const st_model *st_engine_model(const st_engine *e);
const st_tok *st_engine_tok(const st_engine *e);
st_kv *st_engine_kv(st_engine *e);
int32_t st_engine_n_ctx(const st_engine *e);
const st_engine_params *st_engine_get_params(const st_engine *e);

/* The draft model's KV cache (read-only use: statistics), or NULL without a draft model.
 * Borrowed for the engine's life. */
st_kv *st_engine_draft_kv(st_engine *e);

/* The runner, for progress reports (st_runner_set_progress) and Quest statistics; forwarding
 * with it directly would bypass the engine's bookkeeping. Borrowed. */
st_runner *st_engine_runner(st_engine *e);

/* ---- requests ---------------------------------------------------------------------------- */

typedef struct st_engine_bias {
    int32_t token;
    float bias;   /* added to the token's logit before every draw; -INFINITY bans it */
} st_engine_bias;

typedef struct st_engine_req_params {
    const int32_t *tokens;        /* the prompt as token ids, or NULL: text */
    int32_t n_tokens;
    const char *text;             /* with tokens NULL: tokenized with BOS and special tokens */
    size_t text_len;
    st_sampler_params sampling;
    int32_t max_tokens;           /* generated tokens at most; < 0: until the context is full */
    const char *const *stop;      /* n_stop stop strings (copied; each 1..255 bytes) */
    int n_stop;
    const st_engine_bias *bias;   /* n_bias logit biases (copied) */
    int n_bias;
    int ignore_eos;               /* never sample an end-of-generation token */
    int64_t quest_budget;         /* < 0: the engine's quest params; 0: dense; > 0 tokens */
    double quest_epsilon;         /* < 0: the engine's; else certified sparse decode (quest.h,
                                     certificates) with this skipped-mass bound, in [0, 1],
                                     starting from the budget; 0: dense. Such a request does
                                     not draft (its selection may skip pages). */
    void *user;                   /* handed back in events */
    st_kv_seq_id seq;             /* < 0: a new sequence (its prefix attached from the cache);
                                     else a sequence of st_engine_kv(e) the caller owns (kept
                                     from an earlier request, restored from a snapshot): the
                                     prompt continues it, and it passes to the engine when the
                                     submit succeeds */
    int keep_seq;                 /* nonzero: at the finish the sequence is handed back (the
                                     finish event's seq) instead of freed */
    int32_t n_logprobs;           /* < 0: none (the default); 0..ST_ENGINE_MAX_LOGPROBS: each
                                     token event carries its log-probability and this many most
                                     likely alternatives */
    int32_t spec_ngram;           /* prompt lookup drafting (see "Speculative decoding"): -1 the
                                     engine's (the default), 0 off, 1..64 the n-gram length */
    int32_t draft_max;            /* drafted tokens per round at most; 0: the engine's */
    int32_t spec_draft;           /* drafting with the engine's draft model: -1 the engine's
                                     (the default), 0 off, 1 on (ignored without one) */
} st_engine_req_params;

/* sampling = st_sampler_default_params(), max_tokens 128, quest_budget -1, quest_epsilon -1,
 * seq -1, n_logprobs -1, spec_ngram -1, spec_draft -1, the rest 0. */
st_engine_req_params st_engine_req_default_params(void);

/* Queues a request; *id receives its id. The prompt is tokenized and checked now. Returns 0;
 * ST_E_INVAL (no prompt, an empty one, a seq that is not a live sequence, a token id or bias outside the vocabulary, a bad stop
 * string or sampler setting: named); ST_E_LIMIT (the prompt does not fit the context: the
 * message gives both lengths; or its pages can never fit the pool); ST_E_QUEUE_FULL (max_queue
 * requests are waiting: try later); ST_E_NOMEM. Messages in st_ctx_error(st_engine_ctx(e)). */
int st_engine_submit(st_engine *e, const st_engine_req_params *p, st_req_id *id);

/* Asks a request to stop: at the next step it finishes with ST_FINISH_CANCELLED and its pages
 * are released (whether waiting, prefilling or decoding). Returns 0 or ST_E_NOT_FOUND (no such
 * active request: unknown or already finished). */
int st_engine_cancel(st_engine *e, st_req_id id);

typedef enum st_finish {
    ST_FINISH_NONE = 0,   /* not finished (a token event) */
    ST_FINISH_STOP,       /* a stop string matched (not included in the text) */
    ST_FINISH_LENGTH,     /* max_tokens generated */
    ST_FINISH_EOS,        /* the model ended its text (the token is not in the text) */
    ST_FINISH_CANCELLED,
    ST_FINISH_CONTEXT,    /* the context is full */
    ST_FINISH_ERROR,      /* the request failed: see error */
} st_finish;

/* "stop", "length", "eos", "cancelled", "context", "error"; "" for NONE. */
const char *st_finish_name(st_finish f);

typedef struct st_engine_req_stats {
    int32_t n_prompt;      /* prompt tokens */
    int32_t n_cached;      /* tokens not computed: attached from the prefix cache, or the
                              given sequence's length */
    int32_t n_generated;   /* tokens sampled (an end-of-generation token included) */
    int32_t n_preempted;   /* times preempted */
    double t_queued;       /* seconds from submit to admission (the last one) */
    double t_first;        /* seconds from submit to the first generated token (0: none) */
    double t_total;        /* seconds from submit to now / to the finish */
} st_engine_req_stats;

#define ST_ENGINE_MAX_LOGPROBS 20

/* A token's log-probability under the model's distribution at that step: the softmax of the
 * logits with the request's logit biases applied (and end-of-generation tokens banned with
 * ignore_eos), before the penalties, the temperature and the sampler's truncations, as
 * OpenAI's logprobs describe the model rather than the draw. */
typedef struct st_engine_logprob {
    int32_t token;
    float logprob;
} st_engine_logprob;

typedef struct st_engine_event {
    st_req_id req;
    void *user;
    int32_t token;         /* the generated token, or -1 (an event that only finishes) */
    const char *text;      /* bytes released by this event (may be 0: held back while they
                              could still begin a stop string or a UTF-8 character); borrowed
                              until the next st_engine_step */
    size_t text_len;
    st_finish finish;      /* nonzero: the request's last event */
    int error;             /* ST_FINISH_ERROR: the error code; else 0 */
    const char *error_msg; /* ST_FINISH_ERROR: what failed; else "" (borrowed as text) */
    st_engine_req_stats stats; /* as of this event */
    int has_logprob;       /* a token event of a request with n_logprobs >= 0 */
    float logprob;         /* the token's */
    int32_t n_top;         /* alternatives in top[], most likely first (ties: lower id first) */
    st_engine_logprob top[ST_ENGINE_MAX_LOGPROBS];
    st_kv_seq_id seq;      /* the finish of a keep_seq request: its sequence, now the caller's
                              (st_kv_seq_free, or the seq of a next request); else -1. It
                              holds the prompt and every generated token but the last one
                              drawn (and never an end-of-generation token). */
} st_engine_event;

/* Runs one step: cancellations, admissions, preemptions, one forward, sampling. *events gets
 * the step's events (borrowed until the next call; *n_events of them, possibly 0). A step
 * with nothing to do returns at once with no events. Returns 0, or an error that is not one
 * request's (ST_E_NOMEM...): then every request of the step finished with that error and the
 * engine can go on. */
int st_engine_step(st_engine *e, const st_engine_event **events, int *n_events);

/* Requests not yet finished (waiting, running or preempted). */
int st_engine_n_active(const st_engine *e);

typedef enum st_req_state {
    ST_REQ_WAITING = 0,  /* queued, never admitted */
    ST_REQ_PREFILL,
    ST_REQ_DECODE,
    ST_REQ_PREEMPTED,    /* admitted before, waiting to resume (its KV kept, spilling) */
} st_req_state;

typedef struct st_engine_req_info {
    st_req_id id;
    st_req_state state;
    st_kv_seq_id seq;      /* -1 while waiting */
    int64_t n_tokens;      /* tokens in its KV sequence */
    int64_t pages_hot, pages_cold;
    st_engine_req_stats stats;
} st_engine_req_info;

/* Read-only: one active request's state. ST_E_NOT_FOUND when it is not active. */
int st_engine_req_get_info(const st_engine *e, st_req_id id, st_engine_req_info *out);

typedef struct st_engine_stats {
    int64_t steps;               /* forward steps run */
    int64_t submitted, finished; /* requests */
    int64_t finished_by[ST_FINISH_ERROR + 1];
    int64_t rejected_queue_full;
    int64_t running, waiting;    /* now */
    int64_t tokens_prompt;       /* prompt tokens of admitted requests */
    int64_t tokens_cached;       /* of them attached from the prefix cache */
    int64_t tokens_prefilled;    /* prompt tokens computed */
    int64_t tokens_generated;
    int64_t preemptions;
    int64_t retries;             /* steps run again without a failed request */
    int64_t spec_drafts;         /* verify rounds run (a request's last token with a draft) */
    int64_t spec_drafted;        /* drafted tokens verified */
    int64_t spec_accepted;       /* of them equal to the token drawn, hence emitted */
    int64_t spec_model_drafts;   /* of the rounds, drafted by the draft model (the rest: lookup) */
    int64_t spec_model_drafted;  /* of the drafted tokens, the draft model's */
    int64_t spec_model_accepted; /* of the accepted tokens, the draft model's */
    int64_t spec_model_steps;    /* draft model forwards run (catch-up and drafting) */
    int64_t spec_paused_steps;   /* steps in which the cost check held drafts back (verify
                                    rounds had cost more per emitted token than plain steps) */
} st_engine_stats;

/* Read-only. */
void st_engine_get_stats(const st_engine *e, st_engine_stats *out);

/* ---- the prefix cache across a restart ------------------------------------------------- */

/* Writes the KV pool's prefix cache to path as a prefix-cache file (st_kv_prefix_export,
 * docs/FORMATS.md): to path.tmp.<pid> in the same directory, fsynced, renamed over path, the
 * directory fsynced; so path holds the old complete file or the new one whatever happens.
 * The pool is left as it was. *out (may be NULL) gets what was written. Only on an idle
 * engine. Returns 0; ST_E_STATE (requests are active); ST_E_INVAL (path); -errno of a file
 * operation (the temporary is removed); st_kv_prefix_export's errors. Messages in
 * st_ctx_error(st_engine_ctx(e)), naming the path. Threads: the engine's thread. */
int st_engine_prefix_save(st_engine *e, const char *path, st_kv_prefix_counts *out);

/* Adds the pages of the prefix-cache file at path to the prefix cache (st_kv_prefix_import:
 * validated against the model's fingerprint, the pool's geometry and the checksums; each
 * part whole before it is used). A missing file is 0 with nothing loaded. A file that does
 * not validate is refused with nothing loaded and a message naming path and the reason (the
 * caller decides whether to remove it). Only on an idle engine. *out (may be NULL) gets
 * what was resumed. Returns 0; ST_E_STATE (requests are active); ST_E_INVAL (path); -errno
 * (cannot open it); st_kv_prefix_import's errors. Threads: the engine's thread. */
int st_engine_prefix_load(st_engine *e, const char *path, st_kv_prefix_counts *out);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_ENGINE_H */
