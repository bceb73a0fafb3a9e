/* Private layout of the tokenizer (include/strata/tok.h). */
#ifndef STRATA_TOK_INT_H
#define STRATA_TOK_INT_H

#include "strata/tok.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* String -> id hash map, open addressing over a power-of-two table. Keys are (ptr, len)
 * into memory the owner keeps alive. */
typedef struct st_tok_map {
    uint32_t *slots;        /* (cap) id + 1, 0 = empty */
    uint32_t cap;           /* power of two, >= 2 * count */
    uint32_t count;
    const char *const *keys; /* owner's key pointers, indexed by id */
    const uint32_t *lens;    /* owner's key lengths, indexed by id */
} st_tok_map;

/* Merge table for byte-level BPE: (left sym, right sym) -> (rank, result sym). Symbols are
 * interned strings: ids < n_vocab are tokens, ids >= n_vocab strings that only occur as
 * merge operands or results (kept so merging follows llama.cpp's string semantics). */
typedef struct st_bpe_merge_slot {
    uint64_t key;    /* (left << 32) | right, ~0 = empty */
    int32_t rank;
    int32_t result;
} st_bpe_merge_slot;

enum { ST_PRE_MAX_REGEX = 6 };

typedef struct st_pretok {
    const char *name;      /* canonical name */
    int n_regex;
    void *code[ST_PRE_MAX_REGEX];  /* pcre2_code_8 *, owned */
} st_pretok;

/* attribute bits (llama.cpp's llama_token_attr subset we need) */
enum {
    ST_ATTR_NORMAL = 1 << 0,
    ST_ATTR_UNKNOWN = 1 << 1,
    ST_ATTR_CONTROL = 1 << 2,
    ST_ATTR_USER_DEFINED = 1 << 3,
    ST_ATTR_UNUSED = 1 << 4,
    ST_ATTR_BYTE = 1 << 5,
    ST_ATTR_LSTRIP = 1 << 6,
    ST_ATTR_RSTRIP = 1 << 7,
};

struct st_tok {
    st_tok_kind kind;
    int32_t n_vocab;
    /* token texts: one arena, NUL-terminated copies */
    char *arena;
    const char **text;     /* (n_sym) token text, then interned merge-only strings */
    uint32_t *text_len;    /* (n_sym) */
    int32_t n_sym;         /* n_vocab + interned extras */
    float *score;          /* (n_vocab) */
    uint8_t *type;         /* (n_vocab) st_tok_type as read */
    uint16_t *attr;        /* (n_vocab) ST_ATTR_* */
    uint8_t *is_eog;       /* (n_vocab) */
    /* rendered pieces (st_tok_piece): one arena */
    char *piece_arena;
    uint32_t *piece_off;   /* (n_vocab + 1) */
    st_tok_map map;        /* text -> id over [0, n_sym) */
    int32_t byte_tok[256]; /* token for each byte (SPM <0xXX> / BPE byte char), -1 if none */
    /* special tokens (control, user-defined, unknown), longest text first */
    int32_t *special;      /* (n_special) */
    int32_t n_special;
    /* BPE */
    st_bpe_merge_slot *merges; /* (merge_cap) */
    uint32_t merge_cap;
    int32_t n_merges;
    st_pretok pre;
    bool ignore_merges;
    bool clean_spaces;
    /* flags and special ids */
    bool add_bos, add_eos, add_space_prefix;
    int32_t bos, eos, eot, eom, unk, pad, sep;
    char *chat_template;   /* owned, NUL-terminated, or NULL */
    char pre_name[64];
};

/* ---- vocab.c ---- */
int st_tok_map_build(st_tok_map *m, const char *const *keys, const uint32_t *lens, uint32_t n);
/* Adds id (keys[id] must not be present yet); keys/lens may have moved since build. */
int st_tok_map_insert(st_tok_map *m, const char *const *keys, const uint32_t *lens, uint32_t id);
void st_tok_map_free(st_tok_map *m);
int32_t st_tok_map_get(const st_tok_map *m, const char *s, size_t len);

/* ---- utf8 helpers (unicode.c) ---- */
/* Length of the UTF-8 sequence that lead byte c starts, as llama.cpp counts it (1..4). */
static inline int st_utf8_len(uint8_t c) {
    static const uint8_t lut[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lut[c >> 4];
}
/* Rewrites s[0, n) into valid UTF-8 (malformed bytes become U+FFFD, as llama.cpp's
 * decoder reads them). *out malloc'd, NUL-terminated. Returns 0 or ST_E_NOMEM. */
int st_utf8_sanitize(const char *s, size_t n, char **out, size_t *out_len);
/* GPT-2 bytes_to_unicode: the UTF-8 (1-2 bytes) of byte b's printable stand-in. */
int st_bpe_byte_char(uint8_t b, char out[2]);
/* Inverse for one code point: the byte, or -1. */
int st_bpe_char_byte(uint32_t cp);

/* ---- pretok.c ---- */
/* Compiles the regexes of a pre-tokenizer by name. ST_E_UNSUPPORTED for an unknown one. */
int st_pretok_init(st_ctx *ctx, st_pretok *p, const char *name);
void st_pretok_free(st_pretok *p);
/* Splits valid UTF-8 text[0, n) into words: their byte offsets go to a growing array
 * (*ends holds each word's end offset; words are contiguous from 0). */
typedef struct st_spans {
    uint32_t *end;
    size_t n, cap;
} st_spans;
int st_pretok_split(const st_pretok *p, const char *text, size_t n, st_spans *out);
/* Canonical pre-tokenizer for a tokenizer.ggml.pre value and its vocabulary flags; NULL
 * when unknown. */
const char *st_pretok_canonical(const char *pre, bool *ignore_merges, bool *clean_spaces, bool *add_bos);

/* ---- output vector ---- */
typedef struct st_ids {
    int32_t *v;
    size_t n, cap;
} st_ids;
int st_ids_push(st_ids *o, int32_t id);

/* ---- spm.c / bpe.c: tokenize one raw fragment (no special tokens inside) ---- */
int st_spm_encode(const st_tok *tok, const char *text, size_t n, st_ids *out);
int st_bpe_encode(const st_tok *tok, const char *text, size_t n, st_ids *out);
int st_bpe_build_merges(st_ctx *ctx, st_tok *tok, const char *const *merges, int32_t n_merges);

#endif
