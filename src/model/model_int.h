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
    st_wlayout layout;  /* ROWS as in the file, or QUADS after st_pack_quads at load */
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
};

/* True when the matmul kernels take weights of this type. */
int st_model_type_supported(st_type t);

/* Rotary cache for one position, as ggml builds it: cs[2i] = cos, cs[2i+1] = sin of the angle
 * of pair i (n_rot/2 pairs), yarn / linear scaling and per-dimension factors applied. */
void st_rope_cache(const st_model_hparams *hp, const float *freq_factors, int64_t pos, float *cs);
/* Rotates the first n_rot dims of each of n_heads heads of x[n_heads][head_dim] in place. */
void st_rope_apply(const st_model_hparams *hp, const float *cs, float *x, int n_heads);

/* Reference forward (ref.c): logits[n][n_vocab] of tokens[0..n) as one sequence from position
 * 0, computed naively in f64 (see ref.c for what is rounded). Returns 0, ST_E_NOMEM, or a
 * quant error for a type without kernels. For tests. */
typedef struct st_ref_opts {
    st_type kv_type;  /* K/V rounded to this type (f16 / bf16; anything else: f32) */
    int emulate_act;  /* round activations through the weight's activation format */
    st_isa isa;       /* whose activation quantizer */
    double perturb;   /* 0, or a relative nudge of every activation (stability probe) */
} st_ref_opts;
int st_model_ref_forward(const st_model *m, const st_ref_opts *o, const int32_t *tokens, int n, float *logits);

#endif
