/*
 * strata tokenizers: SentencePiece-style BPE over scores (tokenizer.ggml.model = "llama",
 * "SPM") and byte-level BPE over merges (tokenizer.ggml.model = "gpt2", "BPE"), built from
 * GGUF metadata and matching llama.cpp token for token; streaming detokenization; chat
 * templates.
 *
 * Threads: an st_tok is immutable after st_tok_load / st_tok_create; any number of
 * threads may encode and decode with it at once (every call allocates its own scratch).
 * An st_detok belongs to one thread at a time. Nothing here keeps global mutable state.
 *
 * Token ids are int32_t in [0, n_vocab). "Special" tokens are those of GGUF token type
 * control (3), user-defined (4) or unknown (2); like llama.cpp, user-defined tokens are
 * split out of the text even when parse_special is off, control tokens only when it is on.
 */
#ifndef STRATA_TOK_H
#define STRATA_TOK_H

#include "strata/core.h"
#include "strata/gguf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct st_tok st_tok;

typedef enum st_tok_kind {
    ST_TOK_SPM = 1, /* tokenizer.ggml.model "llama" */
    ST_TOK_BPE = 2, /* tokenizer.ggml.model "gpt2" */
} st_tok_kind;

/* GGUF token types (tokenizer.ggml.token_type), numbering as in GGUF. */
typedef enum st_tok_type {
    ST_TOK_TYPE_NORMAL = 1,
    ST_TOK_TYPE_UNKNOWN = 2,
    ST_TOK_TYPE_CONTROL = 3,
    ST_TOK_TYPE_USER_DEFINED = 4,
    ST_TOK_TYPE_UNUSED = 5,
    ST_TOK_TYPE_BYTE = 6,
} st_tok_type;

/* Limits checked on load (named so that messages can cite them). */
#define ST_TOK_MAX_VOCAB (1 << 24)    /* tokens */
#define ST_TOK_MAX_TOKEN_BYTES 65536  /* bytes of one token's text */
#define ST_TOK_MAX_MERGES (1 << 24)

typedef struct st_tok_params {
    /* Pre-tokenizer name to use instead of tokenizer.ggml.pre (NULL: the file's). */
    const char *pre_override;
    /* An unknown tokenizer.ggml.pre is ST_E_UNSUPPORTED naming it, unless this is set:
     * then llama.cpp's "default" pre-tokenizer is used (and st_tok_pre_name says so). */
    bool force_default_pre;
} st_tok_params;

st_tok_params st_tok_default_params(void);

/* The vocabulary as GGUF metadata describes it; for st_tok_create (tests, tools that
 * build a vocabulary in memory). Every pointer is borrowed only for the call. */
typedef struct st_tok_vocab_desc {
    const char *model;            /* "llama" or "gpt2" */
    const char *pre;              /* tokenizer.ggml.pre, NULL when absent */
    const char *name;             /* general.name, NULL when absent (phi-3 strips spaces) */
    int32_t n_tokens;
    const char *const *tokens;    /* (n_tokens) token texts */
    const size_t *token_lens;     /* (n_tokens) byte lengths, NULL: strlen of each */
    const float *scores;          /* (n_tokens) or NULL: all 0 */
    const int32_t *types;         /* (n_tokens) st_tok_type or NULL: all normal */
    int32_t n_merges;
    const char *const *merges;    /* (n_merges) "left right", NUL-terminated; BPE only */
    /* Special ids; -1 = absent from the metadata (the model's default then applies). */
    int32_t bos_id, eos_id, unk_id, eot_id, eom_id, pad_id, sep_id;
    /* -1 = absent from the metadata (the model's default applies), else 0 / 1. */
    int add_bos, add_eos, add_space_prefix;
    const char *chat_template;    /* tokenizer.chat_template or NULL */
} st_tok_vocab_desc;

/* A desc with every id and flag set to -1 and every pointer NULL. */
st_tok_vocab_desc st_tok_vocab_desc_init(void);

/* Builds a tokenizer from the tokenizer.* metadata of g (the file may be closed
 * afterwards: everything needed is copied). params may be NULL.
 * Errors: ST_E_NOT_FOUND (no tokenizer.ggml.model / tokens / merges), ST_E_TYPE (a key of
 * the wrong type), ST_E_UNSUPPORTED (model other than llama/gpt2, unknown pre-tokenizer),
 * ST_E_FORMAT (duplicate token, id out of range, bad merge), ST_E_LIMIT, ST_E_NOMEM;
 * details in ctx. *out owned by the caller: st_tok_destroy. */
int st_tok_load(st_ctx *ctx, st_gguf *g, const st_tok_params *params, st_tok **out);
/* Same from an in-memory description. */
int st_tok_create(st_ctx *ctx, const st_tok_vocab_desc *desc, const st_tok_params *params, st_tok **out);
void st_tok_destroy(st_tok *tok); /* NULL is a no-op */

/* Tokenizes text[0, len) (any bytes; invalid UTF-8 is read as U+FFFD like llama.cpp).
 * add_special: BOS/EOS as the vocabulary asks (add_bos / add_eos). parse_special: control
 * tokens written in the text ("<|im_start|>") become their ids.
 * Writes at most max ids; when more are needed returns ST_E_LIMIT with *n_out = the count
 * required and ids untouched. Other errors: ST_E_INVAL (NULL pointers), ST_E_NOMEM. */
int st_tok_encode(const st_tok *tok, const char *text, size_t len, bool add_special, bool parse_special,
                  int32_t *ids, int max, int *n_out);

/* Like st_tok_encode into a malloc'd array (*ids owned by the caller, free()). */
int st_tok_encode_alloc(const st_tok *tok, const char *text, size_t len, bool add_special, bool parse_special,
                        int32_t **ids, int *n_out);

/* The bytes id stands for in output text: SPM "▁" unescaped to spaces, byte tokens as
 * their byte, byte-level BPE decoded to raw bytes, special tokens as their text. *p
 * borrowed, valid until st_tok_destroy; not NUL-terminated (a byte token may be 0x00).
 * Errors: ST_E_INVAL (id out of range). */
int st_tok_piece(const st_tok *tok, int32_t id, const char **p, size_t *len);
/* The token's text exactly as in the vocabulary ("▁Hello", "Ġworld", "<0x0A>"). */
int st_tok_text(const st_tok *tok, int32_t id, const char **p, size_t *len);

/* Flags of st_tok_decode. */
#define ST_DETOK_REMOVE_SPECIAL 1u /* drop a leading BOS / trailing EOS the vocab adds */
#define ST_DETOK_RENDER_SPECIAL 2u /* write control tokens' text (else they vanish) */

/* Detokenizes ids[0, n) as llama.cpp's llama_detokenize does (SPM: the leading space of
 * the prefix removed; BPE vocabularies that ask for it: clean-up of " ," " 's" ...).
 * Writes at most cap bytes (no NUL); ST_E_LIMIT with *n_out = bytes required when cap is
 * too small. ST_E_INVAL for an id out of range. */
int st_tok_decode(const st_tok *tok, const int32_t *ids, int n, unsigned flags, char *buf, size_t cap,
                  size_t *n_out);

int32_t st_tok_n_vocab(const st_tok *tok);
st_tok_kind st_tok_get_kind(const st_tok *tok);
/* Pre-tokenizer in use ("llama3", "gpt2", "default", ...; "spm" for SPM vocabularies). */
const char *st_tok_pre_name(const st_tok *tok);
int32_t st_tok_bos(const st_tok *tok); /* -1 when none */
int32_t st_tok_eos(const st_tok *tok); /* -1 when none */
int32_t st_tok_eot(const st_tok *tok); /* -1 when none */
bool st_tok_add_bos(const st_tok *tok);
bool st_tok_add_eos(const st_tok *tok);
/* End of generation: EOS, EOT, EOM and the tokens llama.cpp treats so (<|im_end|>,
 * <|eot_id|>, <end_of_turn>, <|end|>, <|endoftext|>, ...). False for ids out of range. */
bool st_tok_is_eog(const st_tok *tok, int32_t id);
/* st_tok_type of id (0 when out of range). */
int st_tok_type_of(const st_tok *tok, int32_t id);
/* Id of the token whose text is exactly s[0, len), or -1. */
int32_t st_tok_find(const st_tok *tok, const char *s, size_t len);
/* tokenizer.chat_template (NUL-terminated, borrowed) or NULL when the file had none. */
const char *st_tok_chat_template(const st_tok *tok);

/* ---- streaming detokenization ----
 * Feed ids as they are generated; each call hands back only complete UTF-8 characters, so
 * a multi-byte character split over several byte tokens is never printed in halves. */
typedef struct st_detok st_detok;

#define ST_DETOK_STRIP_LEADING_SPACE 4u /* drop one leading space of the first piece (SPM) */

/* flags: ST_DETOK_RENDER_SPECIAL, ST_DETOK_STRIP_LEADING_SPACE. tok must outlive it.
 * Errors: ST_E_INVAL, ST_E_NOMEM. *out owned by the caller: st_detok_destroy. */
int st_detok_create(const st_tok *tok, unsigned flags, st_detok **out);
void st_detok_destroy(st_detok *d); /* NULL is a no-op */
/* Appends id's bytes; *out / *n_out are the bytes that are now complete UTF-8 (possibly
 * none). *out is borrowed until the next call on d. A byte sequence that can never become
 * valid UTF-8 is released as it is (never held forever). ST_E_INVAL for a bad id. */
int st_detok_feed(st_detok *d, int32_t id, const char **out, size_t *n_out);
/* Releases whatever is still held (an incomplete character at the end of the stream). */
int st_detok_flush(st_detok *d, const char **out, size_t *n_out);
void st_detok_reset(st_detok *d); /* back to the start of a stream */

/* ---- chat templates ----
 * The families llama.cpp recognizes by distinctive substrings of tokenizer.chat_template
 * (llm_chat_detect_template), rendered natively (no Jinja). The rendered text holds no BOS:
 * encode it with add_special = true and parse_special = true. */
typedef enum st_chat_tmpl {
    ST_CHAT_UNKNOWN = 0,
    ST_CHAT_CHATML,          /* Qwen, SmolLM: <|im_start|>role\n...<|im_end|>\n */
    ST_CHAT_LLAMA2,          /* [INST] ... [/INST] */
    ST_CHAT_LLAMA2_SYS,      /* with <<SYS>> */
    ST_CHAT_LLAMA2_SYS_BOS,  /* <s>[INST] inside the history */
    ST_CHAT_LLAMA2_SYS_STRIP,/* content stripped */
    ST_CHAT_MISTRAL_V1,
    ST_CHAT_MISTRAL_V3,
    ST_CHAT_MISTRAL_V3_TEKKEN,
    ST_CHAT_MISTRAL_V7,
    ST_CHAT_LLAMA3,          /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    ST_CHAT_PHI3,            /* <|role|>\n...<|end|>\n */
    ST_CHAT_GEMMA,           /* <start_of_turn>user\n...<end_of_turn>\n */
    ST_CHAT_DEEPSEEK,        /* deepseek-coder: ### Instruction: / ### Response: */
    ST_CHAT_DEEPSEEK2,       /* User: / Assistant: */
    ST_CHAT_DEEPSEEK3,       /* <｜User｜> / <｜Assistant｜> */
    ST_CHAT_ZEPHYR,          /* <|user|>\n...<|endoftext|>\n */
    ST_CHAT_COUNT_
} st_chat_tmpl;

typedef struct st_chat_msg {
    const char *role;    /* "system", "user", "assistant" */
    const char *content; /* NUL-terminated */
} st_chat_msg;

/* Family of a template text, or of a family name ("chatml", "llama3", ...). Returns 0, or
 * ST_E_UNSUPPORTED when it matches no known family (*out = ST_CHAT_UNKNOWN). */
int st_chat_detect(const char *tmpl_text, st_chat_tmpl *out);
/* Family by name; ST_E_NOT_FOUND for an unknown name. */
int st_chat_from_name(const char *name, st_chat_tmpl *out);
/* Name of a family ("chatml"...), "unknown" for ST_CHAT_UNKNOWN; never NULL. */
const char *st_chat_name(st_chat_tmpl t);
/* The family for tok: force_name when not NULL (ST_E_NOT_FOUND when unknown), else
 * detected from its chat template (ST_E_NOT_FOUND when the file has none,
 * ST_E_UNSUPPORTED when unrecognized); the message in ctx names the problem and lists
 * the names --chat-template accepts. */
int st_chat_for_tok(st_ctx *ctx, const st_tok *tok, const char *force_name, st_chat_tmpl *out);
/* Renders msgs[0, n) (and the assistant prefix when add_generation_prompt) into a
 * malloc'd NUL-terminated string (*out owned by the caller, free()). Rendering messages
 * [0, k) is always a prefix of rendering [0, n) for k < n with add_generation_prompt off,
 * so a multi-turn chat can prefill only the new suffix.
 * Errors: ST_E_INVAL (unknown family, NULL role/content), ST_E_NOMEM. */
int st_chat_render(st_chat_tmpl t, const st_chat_msg *msgs, size_t n, bool add_generation_prompt, char **out,
                   size_t *out_len);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_TOK_H */
