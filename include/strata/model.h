/*
 * Model runtime: llama-family models (llama, qwen2, qwen3) loaded from GGUF and run
 * through the paged KV cache.
 *
 *   st_model   the weights (borrowed from a mapped GGUF) and hyper-parameters; read-only
 *              after load, shareable by any number of runners and threads.
 *   st_runner  scratch buffers for one forward at a time over a KV cache (kv.h); runs the
 *              layers on the context's thread pool. One thread at a time per runner.
 *
 * Forward semantics: every token of a batch is appended to its sequence at the sequence's
 * next position (its current length in the KV cache), in batch order; its K/V are written
 * to the cache, and attention sees the sequence's past plus the batch tokens before it.
 * Long batches run in chunks of n_batch tokens. Results are deterministic: identical for
 * any thread count and for a sequence alone or batched with others (every output element
 * is computed by the same kernel over the same data in the same order).
 *
 * Errors: ST_E_UNSUPPORTED (architecture, tensor type, rope scaling), ST_E_NOT_FOUND
 * (missing tensor or key), ST_E_FORMAT (mis-shaped tensor, inconsistent hyper-parameters),
 * ST_E_LIMIT (context over the model's or memory's limit), ST_E_NOMEM; each with a message in
 * the st_ctx naming the tensor / key / value.
 */
#ifndef STRATA_MODEL_H
#define STRATA_MODEL_H

#include "strata/core.h"
#include "strata/gguf.h"
#include "strata/kv.h"
#include "strata/quest.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum st_arch { ST_ARCH_LLAMA = 0, ST_ARCH_QWEN2 = 1, ST_ARCH_QWEN3 = 2, ST_ARCH_COUNT_ } st_arch;

typedef enum st_rope_scaling {
    ST_ROPE_SCALING_NONE = 0,
    ST_ROPE_SCALING_LINEAR = 1,
    ST_ROPE_SCALING_YARN = 2,
    ST_ROPE_SCALING_LLAMA3 = 3, /* per-dimension factors from the rope_freqs tensor */
} st_rope_scaling;

/* "llama" / "qwen2" / "qwen3"; NULL for an unknown value. */
const char *st_arch_name(st_arch a);
/* Parses an architecture name; -1 when unsupported. */
int st_arch_parse(const char *name);

typedef struct st_model_hparams {
    st_arch arch;
    int32_t n_layer;
    int32_t n_embd;      /* model width */
    int32_t n_head;      /* query heads */
    int32_t n_head_kv;   /* key/value heads (GQA: n_head % n_head_kv == 0) */
    int32_t head_dim;    /* per-head K and V width */
    int32_t n_ff;        /* feed-forward width */
    int32_t n_vocab;
    int32_t n_ctx_train; /* context length the model was trained for */
    int32_t n_rot;       /* rotated dims per head (<= head_dim, even) */
    int rope_neox;       /* 0: rotate pairs (2i, 2i+1) (llama); 1: (i, i + n_rot/2) (qwen) */
    float rope_base;
    float rms_eps;
    st_rope_scaling rope_scaling;
    float rope_freq_scale;   /* 1 / scaling factor (linear, yarn); 1 otherwise */
    int32_t rope_n_ctx_orig; /* yarn: original context */
    float yarn_ext_factor, yarn_attn_factor, yarn_beta_fast, yarn_beta_slow;
    int has_qkv_bias;        /* qwen2 (and optional for llama) */
    int has_qk_norm;         /* qwen3 */
    int tied_output;         /* output projection is token_embd */
} st_model_hparams;

typedef struct st_model st_model;

/* Where the product weights sit after a load. */
typedef enum st_weight_layout {
    ST_WEIGHT_LAYOUT_AUTO = 0, /* rearranged where the ctx's kernels run a better layout */
    ST_WEIGHT_LAYOUT_ROWS = 1, /* every matrix in the file's row layout (for comparisons) */
} st_weight_layout;

typedef struct st_model_load_params {
    int use_mmap;            /* nonzero: map the file (less RAM when several processes share
                                it, but the row layout: a mapping is not rearranged); 0: read
                                it into huge-page memory */
    st_weight_layout layout;
} st_model_load_params;

/* use_mmap 0, layout ST_WEIGHT_LAYOUT_AUTO. */
st_model_load_params st_model_load_default_params(void);

/* Opens path (read into huge-page memory, or mapped with p->use_mmap), reads the
 * hyper-parameters and checks every tensor's presence, type and shape. With
 * ST_WEIGHT_LAYOUT_AUTO, product weights of the types and shapes the ctx's kernels run in the
 * quad layout (quant.h) are rearranged into it after the fingerprint is taken (not in a
 * mapping, nor by st_model_load_memory, whose bytes are borrowed). p NULL: the defaults; p is
 * read during the call only. Reads no environment variable (the CLI maps STRATA_MMAP and
 * STRATA_WLAYOUT onto p). *out owned by the caller: st_model_destroy. Returns 0, ST_E_INVAL
 * (NULL path or out, a layout out of range), the errors at the top of this header, or the
 * file's (gguf.h). */
int st_model_load(st_ctx *ctx, const char *path, const st_model_load_params *p, st_model **out);
void st_model_destroy(st_model *m); /* NULL is a no-op */

const st_model_hparams *st_model_get_hparams(const st_model *m);
/* The open GGUF (for the tokenizer: tok.h reads its vocabulary). Borrowed: valid while m lives. */
st_gguf *st_model_gguf(const st_model *m);
/* 128-bit fingerprint: XXH3-128 over the architecture, hyper-parameters, tokenizer metadata,
 * every tensor's name/type/shape and an XXH3 of all tensor data. Keys the KV prefix cache, so
 * KV computed by one model is never served to another. Computed once at load. */
void st_model_fingerprint(const st_model *m, uint8_t out[16]);
/* Bytes of weights one decode step streams (all matrices + one embedding row). */
uint64_t st_model_weight_bytes(const st_model *m);
/* Total parameter count. */
uint64_t st_model_n_params(const st_model *m);
/* A one-line description: "llama 16L 2048d 32/8h ff 8192 vocab 32000 q8_0 ...". Borrowed. */
const char *st_model_desc(const st_model *m);
/* How many weight matrices load rearranged into the quad layout. */
int st_model_n_quad_matrices(const st_model *m);
/* Matrices rearranged into the panel layout at load (quant.h: rows longer than
 * ST_PANEL_MAX_COLS, e.g. the 1B shape's ffn_down), for tests and benchmarks. */
int st_model_n_panel_matrices(const st_model *m);

/* Same as st_model_load with the default params over a GGUF image in memory (buf borrowed:
 * it must outlive the model, so weights keep the row layout: it takes no load params); name
 * is used in messages. */
int st_model_load_memory(st_ctx *ctx, const void *buf, size_t size, const char *name, st_model **out);

/* ---- synthetic models ------------------------------------------------------------------
 * A llama-family GGUF with random N(0, 0.02) weights (norm weights 1), deterministic from the
 * seed whatever the thread count: row r of tensor i is drawn from its own RNG stream keyed by
 * (seed, i, r). The tokenizer is copied from another GGUF (every tokenizer.* key) or is a
 * built-in byte-level SPM vocabulary: <unk> <s> </s>, the 256 byte tokens <0x00>..<0xFF>,
 * then <unused_N> up to n_vocab (so n_vocab >= 259). */
typedef struct st_synth_params {
    st_arch arch;
    int32_t n_layer, n_embd, n_head, n_head_kv, n_ff, n_vocab, n_ctx;
    float rope_base, rms_eps;
    st_type type;           /* weight type of every matrix */
    int q4_k_m;             /* nonzero: llama.cpp's Q4_K_M mix instead of `type` (Q6_K for output
                               and for attn_v / ffn_down of the layers llama.cpp's use_more_bits
                               picks, about half; Q4_K elsewhere) */
    int tied_output;        /* no output.weight: logits use token_embd */
    int32_t embd_type;      /* -1: token_embd as llama.cpp quantizes it (the weight type; Q4_K in
                               the Q4_K_M mix); else this st_type */
    const char *vocab_from; /* GGUF path whose tokenizer is copied, or NULL (byte-level) */
    uint64_t seed;
} st_synth_params;

/* The "small" preset (8 layers, 512 dim, 8/2 heads, ff 1536, vocab 32000, q8_0, seed 1,
 * embd_type -1). Start from this rather than a zeroed struct. */
st_synth_params st_synth_default_params(void);
/* Applies a preset's shape: "1b" (16 layers, 2048 dim, 32/8 heads, ff 8192, vocab 32000, rope
 * base 500000, ctx 4096), "small" (8 layers, 512 dim, 8/2 heads, ff 1536, vocab 32000, rope base
 * 500000, ctx 4096), "tiny" (2 layers, 64 dim, 4/2 heads, ff 128, vocab 259, ctx 256).
 * ST_E_NOT_FOUND for another name. */
int st_synth_preset(const char *name, st_synth_params *p);
/* Sets p->type / p->q4_k_m from "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1",
 * "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "q4_k_m" (case-insensitive). ST_E_NOT_FOUND otherwise. */
int st_synth_parse_type(const char *s, st_synth_params *p);
/* Writes the model to path (atomically). ctx gives the thread pool and error messages.
 * Returns 0, ST_E_INVAL (a shape that does not fit: named), ST_E_NOMEM, -errno, or the
 * vocab file's error. */
int st_synth_write(st_ctx *ctx, const st_synth_params *p, const char *path);
/* Same into a malloc'd GGUF image (*buf owned by the caller: free()). */
int st_synth_write_memory(st_ctx *ctx, const st_synth_params *p, void **buf, size_t *size);
/* 0 when g is what st_synth_write(p) writes, random values aside: the architecture, the shape
 * keys (block_count, embedding_length, head counts, feed_forward_length, context_length,
 * rope.dimension_count), the vocabulary size, and every tensor's name, type and shape. Else
 * ST_E_FORMAT with a message naming the first difference (ST_E_INVAL for parameters
 * st_synth_write would refuse; the vocab file's error). For caches of made models. */
int st_synth_check(st_ctx *ctx, const st_synth_params *p, st_gguf *g);

/* ---- llama2.c checkpoints -------------------------------------------------------------
 * A checkpoint of llama2.c's run.c (legacy format: seven int32 — dim, hidden_dim, n_layers,
 * n_heads, n_kv_heads, vocab_size (negative: the classifier is not the embedding), seq_len —
 * then every weight as float32) with its tokenizer.bin, written as a llama GGUF: RoPE base
 * 10000, RMS epsilon 1e-5 (run.c's), output.weight always present (a copy of the embedding
 * when shared), norms f32, every matrix in `type` (f16 where its rows do not fit the type's
 * blocks). Tokens 0-2 become <unk> <s> </s>, 3-258 the byte tokens when their pieces spell
 * bytes 0x00..0xFF in order, spaces U+2581, scores kept. The layout is described in
 * docs/FORMATS.md. */
typedef struct st_llama2c_params {
    st_type type;     /* matrices: ST_TYPE_F32 (as stored), F16, BF16 or a quantized type with kernels */
    const char *name; /* general.name, or NULL for "llama2.c" */
} st_llama2c_params;

/* Converts the files at model_path and tok_path and writes out_path atomically (the GGUF
 * writer's rule). Returns 0; ST_E_FORMAT naming the file and the problem (a header out of
 * range, a size that does not match the header, a NaN or infinite weight (naming the tensor
 * and row), a tokenizer that is truncated or holds another vocabulary size); ST_E_UNSUPPORTED for llama2.c's versioned exports (magic "ak42");
 * ST_E_INVAL for a type without kernels; ST_E_NOMEM; -errno. Nothing is written on error.
 * Reads both files whole. ctx gives the error message; one thread. */
int st_llama2c_convert(st_ctx *ctx, const char *model_path, const char *tok_path, const st_llama2c_params *p,
                       const char *out_path);
/* Same over images in memory (borrowed), into a malloc'd GGUF image (*out owned by the
 * caller: free()). For the fuzz target and tests. */
int st_llama2c_convert_memory(st_ctx *ctx, const void *model, size_t model_size, const void *tok, size_t tok_size,
                              const st_llama2c_params *p, void **out, size_t *out_size);

/* ---- forward --------------------------------------------------------------------------- */

typedef struct st_batch {
    int32_t n_tokens;
    const int32_t *tokens;      /* [n_tokens] token ids */
    const st_kv_seq_id *seq;    /* [n_tokens] KV sequences; each sequence's tokens form one
                                   contiguous run of the batch. NULL: all are seq_single */
    st_kv_seq_id seq_single;
    const uint8_t *want_logits; /* [n_tokens] nonzero: output this token's logits; NULL: only the
                                   last token of each sequence's run */
    const uint8_t *prefill;     /* [n_tokens] or NULL. A run of several tokens is prompt; a run of
                                   one token is a decode token unless its flag here is nonzero
                                   (the first flag of a run counts). See "Determinism" below. */
    const int64_t *quest_budget; /* [n_tokens] or NULL: per run (its first token's entry) the
                                   Quest budget of a decode token, -1 for the runner's setting
                                   (st_runner_set_quest), 0 dense */
    const double *quest_epsilon; /* [n_tokens] or NULL: per run the certified-mode epsilon of
                                   a decode token (quest.h, certificates; 0 dense), < 0 for
                                   the runner's setting */
    const uint8_t *verify;      /* [n_tokens] or NULL: a run whose first flag here is nonzero is
                                   a verify run (speculative decoding): its tokens go through
                                   the weights together, and each attends as the decode token
                                   of its position would (the decode kernel over the positions
                                   up to its own), always densely. See "Determinism". */
} st_batch;

typedef struct st_runner_params {
    int32_t n_batch; /* tokens per chunk (prefill matrix width); 0 = 256 */
    int32_t n_ctx;   /* longest sequence this runner computes; 0 = the model's n_ctx_train */
} st_runner_params;

typedef struct st_runner st_runner;

st_runner_params st_runner_default_params(void);

/* Creates a runner for model m over kv (both borrowed; they must outlive the runner and the
 * KV geometry must match the model: n_layer, n_head_kv, head_dim). ctx supplies the thread
 * pool and receives error messages; borrowed. Returns 0, ST_E_INVAL (geometry mismatch,
 * named), ST_E_LIMIT (n_ctx over the model's n_ctx_train), ST_E_NOMEM. */
int st_runner_create(st_ctx *ctx, const st_model *m, st_kv *kv, const st_runner_params *p,
                     st_runner **out);
void st_runner_destroy(st_runner *r); /* NULL is a no-op */

/* Runs the batch in chunks of up to n_batch tokens: each chunk holds the batch's decode
 * tokens first (one token per sequence, attended together by the decode kernel), then the
 * prompt runs in batch order, a run cut wherever a chunk fills up; prompt tokens attend by
 * the chunk kernel. All tokens of a chunk go through each weight matrix together, so a step
 * mixing prefill pieces of several sequences and many decode tokens reads the weights once.
 *
 * Determinism (the rule a scheduler must follow): a token's logits and K/V depend only on
 * its sequence's tokens and on whether each of them was attended as a prompt token or as a
 * decode token, never on the chunk it ran in, the thread count, or the other sequences of
 * the batch (products, norms and activations are computed row by row with the same kernels,
 * and a prompt token's chunk attention is the same whatever queries share its chunk). So a
 * prompt may be cut into pieces of any sizes over as many calls as the scheduler likes, as
 * long as every piece is marked prompt (a one-token piece needs its prefill flag: the
 * decode kernel's reduction order differs), and the KV of a prefix computed by one
 * sequence serves another bit for bit. A verify run (st_batch.verify) of n tokens gives
 * each token the logits and K/V that feeding the same tokens one per call as decode tokens
 * would, with dense attention: so drafted tokens verified in one call, the rejected ones
 * rewound (st_kv_seq_rewind), leave exactly what plain decode leaves, as long as plain
 * decode would have attended densely too (no Quest budget, or one that selects every page
 * at those lengths) and the KV type is not q8_0 (a q8_0 page rescales for a later token of
 * the same page, which a verify run writes before the earlier ones attend).
 *
 * logits (may be NULL when no token wants logits) receives one row of n_vocab floats per
 * token that wants logits, in batch order. Returns 0; ST_E_INVAL (token id out of range,
 * a sequence's tokens not contiguous, bad sequence id, empty batch); ST_E_LIMIT (a sequence
 * would exceed n_ctx: "prompt longer than the context"); ST_E_POOL_FULL / other kv.h errors.
 * On error every sequence is truncated back to its length before the call, and
 * st_runner_failed_seq names the sequence the error belongs to when it is one sequence's. */
int st_runner_forward(st_runner *r, const st_batch *b, float *logits);

/* The sequence whose reservation, KV write, attention (its sticky I/O error), commit or
 * context limit failed the last st_runner_forward call, or -1 when the error was not one
 * sequence's (out of memory, a bad argument, a shared read error no sequence owns). A
 * scheduler fails or preempts that sequence and runs the others again. */
st_kv_seq_id st_runner_failed_seq(const st_runner *r);

/* Prefill progress: after each layer of each multi-token chunk of a st_runner_forward call,
 * fn(user, done, total) with done and total counted in token-layers (tokens x n_layer) of the
 * call's multi-token runs, so done reaches total when the last chunk's last layer is done
 * (decode steps report nothing). On the thread that called st_runner_forward, between two
 * layers; fn must not call into the runner. fn NULL (the default): no reports. */
typedef void (*st_runner_progress_fn)(void *user, int64_t done, int64_t total);
void st_runner_set_progress(st_runner *r, st_runner_progress_fn fn, void *user);

/* Seconds spent in the last forward (for statistics). */
double st_runner_last_seconds(const st_runner *r);

/* ---- Quest sparse decode (quest.h) ------------------------------------------------------------ */

/* Decode tokens attend, per layer >= p->dense_layers and KV head, only the pages
 * st_kv_quest_select picks from the query (a batch's quest_budget overrides the budget per
 * sequence); prompt tokens stay dense. p NULL or
 * budget 0: dense (the default). audit_every > 0: every audit_every-th decode step also
 * measures, per sparse layer and query head, the fraction of the dense softmax mass the
 * selection captured (a dense pass). p->certify (quest.h, certificates): every sparse
 * selection is grown by st_kv_quest_certify until its skipped-mass bound is <= p->epsilon
 * for every query head (a step whose sequence has a page on disk goes dense); the audit then
 * also checks each sample's true skipped mass against its bound (cert_violations).
 * Returns 0 or ST_E_INVAL (negative budget/audit, epsilon outside [0, 1]). */
int st_runner_set_quest(st_runner *r, const st_kv_quest_params *p, int32_t audit_every);

typedef struct st_runner_quest_stats {
    int64_t steps;        /* decode steps run with a budget */
    int64_t selects;      /* (sequence, sparse layer) selections */
    int64_t pages_listed; /* pages attended, summed over selections and KV heads */
    int64_t pages_total;  /* pages a dense pass would have read, same sum */
    int64_t boxes_ranked, boxes_scored; /* st_kv_select_stats n_ranked / n_scored, same sum */
    int64_t audits;       /* (query head, layer, step) samples of the captured mass */
    double mass_mean, mass_min; /* over the samples; 1 / 1 when none */
    /* certified mode (p->certify, or a batch's quest_epsilon): */
    int64_t cert_selects; /* certified (sequence, sparse layer) selections (in selects) */
    int64_t cert_bounds;  /* (query head, sparse layer, step) bounds reported */
    double bound_max, bound_mean; /* of those bounds (0 for a selection that went dense) */
    int64_t pages_grown;  /* pages certification added to the budget's selection */
    int64_t cert_dense;   /* certified selections made dense because a page was on disk */
    int64_t cert_audits;  /* audited (query head, layer, step) samples of the bound */
    int64_t cert_audits_skipping; /* ... of them whose KV head left some page out */
    int64_t cert_violations; /* samples whose true skipped mass exceeded the bound: a bug */
    double skip_max;      /* the largest true skipped mass audited */
    int64_t viol_step;    /* the first violation: decode step, layer, query head, mass, bound */
    int32_t viol_layer, viol_head;
    double viol_skip, viol_bound;
} st_runner_quest_stats;
void st_runner_get_quest_stats(const st_runner *r, st_runner_quest_stats *out);

#ifdef __cplusplus
}
#endif
#endif
