/* Private layout of st_model: tensors borrowed from the mapped GGUF. */
#ifndef STRATA_MODEL_INT_H
#define STRATA_MODEL_INT_H

#include "strata/model.h"
#include "strata/quant.h"

/* A weight as the forward reads it: ne0 is the input (innermost, contiguous) dimension. */
typedef struct st_wt {
    const char *name;   /* borrowed from the GGUF */
    st_type type;
    int64_t ne0, ne1;   /* [ne1 rows][ne0 elements]; vectors have ne1 == 1 */
    size_t row_bytes;   /* bytes per row of ne0 elements */
    const void *data;   /* borrowed: inside the mapping; NULL when the tensor is absent */
    st_wlayout layout;  /* ROWS as in the file, QUADS after st_pack_quads or PANELS after
                         * st_pack_panels at load */
} st_wt;

typedef struct st_layer {
    st_wt attn_norm;          /* [n_embd] f32 */
    st_wt wq, wk, wv, wo;     /* [n_head*hd][n_embd], [n_kv*hd][n_embd] x2, [n_embd][n_head*hd] */
    st_wt bq, bk, bv, bo;     /* biases, f32; data NULL when absent */
    st_wt q_norm, k_norm;     /* [hd] f32 (qwen3); data NULL when absent */
    st_wt ffn_norm;           /* [n_embd] f32 */
    st_wt w_gate, w_up;       /* [n_ff][n_embd] */
    st_wt w_down;             /* [n_embd][n_ff] */
} st_layer;

struct st_model {
    st_gguf *g;               /* owned */
    st_model_hparams hp;
    st_wt tok_embd;           /* [n_vocab][n_embd] */
    st_wt output_norm;        /* [n_embd] f32 */
    st_wt output;             /* [n_vocab][n_embd]; == tok_embd when tied */
    st_wt rope_freqs;         /* [n_rot/2] f32 divisors of theta; data NULL when absent */
    st_layer *layers;         /* [n_layer] */
    uint8_t fingerprint[16];
    uint64_t weight_bytes, n_params;
    char desc[256];
    int n_quads; /* matrices rearranged into the quad layout at load */
    int n_panels; /* matrices rearranged into the panel layout at load */
};

/* True when the matmul kernels take weights of this type. */
int st_model_type_supported(st_type t);

/* Rotary cache for one position, as ggml builds it: cs[2i] = cos, cs[2i+1] = sin of the angle
 * of pair i (n_rot/2 pairs), yarn / linear scaling and per-dimension factors applied. */
void st_rope_cache(const st_model_hparams *hp, const float *freq_factors, int64_t pos, float *cs);
/* Rotates the first n_rot dims of each of n_heads heads of x[n_heads][head_dim] in place. */
void st_rope_apply(const st_model_hparams *hp, const float *cs, float *x, int n_heads);

/* Where a quantized activation enters the products of a layer (test hook, below). */
typedef enum st_act_site {
    ST_ACT_ATTN_IN,  /* normed x into wq, wk, wv */
    ST_ACT_ATTN_OUT, /* attention output into wo */
    ST_ACT_FFN_IN,   /* normed x into w_gate, w_up */
    ST_ACT_FFN_MID,  /* silu(gate) * up into w_down */
    ST_ACT_OUTPUT,   /* normed x into the output matrix (layer = n_layer) */
} st_act_site;

/* Called by the forward pass with each activation row it quantized (row: `bytes` bytes of
 * act_type, borrowed for the call) for the token of sequence seq at position pos. For tests:
 * the reference adopts the engine's rounding where its own value sits on a rounding boundary. */
typedef void (*st_act_tap_fn)(void *user, int layer, st_act_site site, st_kv_seq_id seq, int64_t pos,
                              st_type act_type, const void *row, size_t bytes);
/* Installs (fn non-NULL) or removes the hook. 0 or ST_E_NOMEM. */
int st_runner_set_act_tap(st_runner *r, st_act_tap_fn fn, void *user);

/* Reference forward (ref.c): logits[n][n_vocab] of tokens[0..n) as one sequence from position
 * 0, computed naively in f64 (see ref.c for what is rounded). Returns 0, ST_E_NOMEM, or a
 * quant error for a type without kernels. For tests. */
typedef struct st_ref_opts {
    st_type kv_type;  /* K/V rounded to this type (f16 / bf16; anything else: f32) */
    int emulate_act;  /* round activations through the weight's activation format */
    st_isa isa;       /* whose activation quantizer */
    /* Optional, with emulate_act: the engine's quantized row for (layer, site, pos, type)
     * (st_act_tap_fn's record, NULL when none). Where it differs from the reference's own
     * rounding only in elements (or a block scale) whose exact value lies within tie_tol
     * (relative to the block's largest magnitude) of a rounding boundary, the reference takes
     * the engine's block: either rounding is right there, and the one chosen propagates. */
    const void *(*engine_act)(void *user, int layer, st_act_site site, int64_t pos, st_type act_type);
    void *engine_user;
    double tie_tol;
    int64_t *n_adopted; /* if set: += blocks taken from the engine */
    int64_t *n_blocks;  /* if set: += blocks compared with the engine's */
} st_ref_opts;
int st_model_ref_forward(const st_model *m, const st_ref_opts *o, const int32_t *tokens, int n, float *logits);

#endif
