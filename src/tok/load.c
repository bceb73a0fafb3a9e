/* st_tok_load: reads the tokenizer.* metadata of a GGUF file into an st_tok_vocab_desc
 * and builds the tokenizer from it (vocab.c). Every array is checked against the token
 * count and named limits before use. */
#include "tok/tok_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A metadata key that cannot be read as `want`: the message, in ctx, names the file, the key
 * and the type it has (the GGUF getters write theirs to the file's own ctx). */
static int key_err(st_ctx *ctx, st_gguf *g, const char *key, int rc, const char *want) {
    if (rc == ST_E_NOMEM) return rc;
    if (rc == ST_E_NOT_FOUND) return st_seterr(ctx, rc, "%s: missing metadata key %s", st_gguf_path(g), key);
    const int64_t i = st_gguf_find_key(g, key);
    return st_seterr(ctx, rc, "%s: metadata key %s (%s) is not %s", st_gguf_path(g), key,
                     i >= 0 ? st_gguf_vtype_name(st_gguf_key_type(g, i)) : "?", want);
}

/* Optional int key: -1 when absent; other errors returned. */
static int opt_id(st_ctx *ctx, st_gguf *g, const char *key, int32_t *out) {
    uint32_t v = 0;
    *out = -1;
    int rc = st_gguf_get_u32(g, key, &v);
    if (rc == ST_E_NOT_FOUND) return 0;
    if (rc == ST_E_TYPE) { /* some converters write int32 */
        int32_t s = 0;
        rc = st_gguf_get_i32(g, key, &s);
        if (rc) return key_err(ctx, g, key, rc, "a uint32 or int32 token id");
        *out = s;
        return 0;
    }
    if (rc) return key_err(ctx, g, key, rc, "a uint32 or int32 token id");
    /* 0xFFFFFFFF and other out-of-range values mean "none"; vocab.c checks the range */
    *out = v > (uint32_t)INT32_MAX ? -1 : (int32_t)v;
    return 0;
}

static int opt_bool(st_ctx *ctx, st_gguf *g, const char *key, int *out) {
    bool b = false;
    *out = -1;
    int rc = st_gguf_get_bool(g, key, &b);
    if (rc == ST_E_NOT_FOUND) return 0;
    if (rc) return key_err(ctx, g, key, rc, "a bool");
    *out = b ? 1 : 0;
    return 0;
}

static int opt_str(st_ctx *ctx, st_gguf *g, const char *key, char **out) {
    *out = NULL;
    int rc = st_gguf_get_str_dup(g, key, out);
    return rc == ST_E_NOT_FOUND ? 0 : rc ? key_err(ctx, g, key, rc, "a string") : 0;
}

typedef struct load_tmp {
    const char **tokens;
    size_t *lens;
    float *scores;
    int32_t *types;
    char **merges;
    char *merge_arena;
    char *model, *pre, *name, *tmpl;
} load_tmp;

static void tmp_free(load_tmp *t) {
    free(t->tokens);
    free(t->lens);
    free(t->scores);
    free(t->types);
    free(t->merges);
    free(t->merge_arena);
    free(t->model);
    free(t->pre);
    free(t->name);
    free(t->tmpl);
}

static int read_tokens(st_ctx *ctx, st_gguf *g, st_tok_vocab_desc *d, load_tmp *t) {
    st_gguf_vtype et;
    uint64_t n = 0;
    const void *data = NULL;
    int rc = st_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &data);
    if (rc) return key_err(ctx, g, "tokenizer.ggml.tokens", rc, "an array of strings");
    if (et != ST_GGUF_STRING) return st_seterr(ctx, ST_E_TYPE, "%s: tokenizer.ggml.tokens is not an array of strings",
                                               st_gguf_path(g));
    if (n == 0 || n > ST_TOK_MAX_VOCAB)
        return st_seterr(ctx, ST_E_LIMIT, "%s: tokenizer.ggml.tokens has %llu entries (limit 1..%d)", st_gguf_path(g),
                         (unsigned long long)n, ST_TOK_MAX_VOCAB);
    t->tokens = malloc(n * sizeof *t->tokens);
    t->lens = malloc(n * sizeof *t->lens);
    if (!t->tokens || !t->lens) return ST_E_NOMEM;
    for (uint64_t i = 0; i < n; i++)
        if ((rc = st_gguf_get_arr_str(g, "tokenizer.ggml.tokens", i, &t->tokens[i], &t->lens[i])))
            return key_err(ctx, g, "tokenizer.ggml.tokens", rc, "an array of strings");
    d->n_tokens = (int32_t)n;
    d->tokens = t->tokens;
    d->token_lens = t->lens;

    rc = st_gguf_get_arr(g, "tokenizer.ggml.scores", &et, &n, &data);
    if (rc == 0) {
        if (et != ST_GGUF_FLOAT32 && et != ST_GGUF_INT32)
            return st_seterr(ctx, ST_E_TYPE, "%s: tokenizer.ggml.scores must be float32 or int32", st_gguf_path(g));
        if (n < (uint64_t)d->n_tokens)
            return st_seterr(ctx, ST_E_FORMAT, "%s: tokenizer.ggml.scores has %llu entries for %d tokens",
                             st_gguf_path(g), (unsigned long long)n, d->n_tokens);
        if (!(t->scores = malloc((size_t)d->n_tokens * sizeof *t->scores))) return ST_E_NOMEM;
        for (int32_t i = 0; i < d->n_tokens; i++) {
            if (et == ST_GGUF_FLOAT32) {
                memcpy(&t->scores[i], (const char *)data + 4 * (size_t)i, 4);
            } else {
                int32_t v;
                memcpy(&v, (const char *)data + 4 * (size_t)i, 4);
                t->scores[i] = (float)v;
            }
        }
        d->scores = t->scores;
    } else if (rc != ST_E_NOT_FOUND) {
        return key_err(ctx, g, "tokenizer.ggml.scores", rc, "an array");
    }
    rc = st_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &n, &data);
    if (rc == 0) {
        if (et != ST_GGUF_INT32)
            return st_seterr(ctx, ST_E_TYPE, "%s: tokenizer.ggml.token_type must be int32", st_gguf_path(g));
        if (n < (uint64_t)d->n_tokens)
            return st_seterr(ctx, ST_E_FORMAT, "%s: tokenizer.ggml.token_type has %llu entries for %d tokens",
                             st_gguf_path(g), (unsigned long long)n, d->n_tokens);
        if (!(t->types = malloc((size_t)d->n_tokens * sizeof *t->types))) return ST_E_NOMEM;
        memcpy(t->types, data, (size_t)d->n_tokens * 4);
        d->types = t->types;
    } else if (rc != ST_E_NOT_FOUND) {
        return key_err(ctx, g, "tokenizer.ggml.token_type", rc, "an array");
    }
    return 0;
}

static int read_merges(st_ctx *ctx, st_gguf *g, st_tok_vocab_desc *d, load_tmp *t) {
    st_gguf_vtype et;
    uint64_t n = 0;
    const void *data = NULL;
    int rc = st_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n, &data);
    if (rc == ST_E_NOT_FOUND)
        return st_seterr(ctx, rc, "%s: BPE vocabulary without tokenizer.ggml.merges", st_gguf_path(g));
    if (rc) return key_err(ctx, g, "tokenizer.ggml.merges", rc, "an array of strings");
    if (et != ST_GGUF_STRING)
        return st_seterr(ctx, ST_E_TYPE, "%s: tokenizer.ggml.merges is not an array of strings", st_gguf_path(g));
    if (n > ST_TOK_MAX_MERGES)
        return st_seterr(ctx, ST_E_LIMIT, "%s: %llu merges (limit ST_TOK_MAX_MERGES %d)", st_gguf_path(g),
                         (unsigned long long)n, ST_TOK_MAX_MERGES);
    size_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        size_t l;
        if ((rc = st_gguf_get_arr_str(g, "tokenizer.ggml.merges", i, &s, &l)))
            return key_err(ctx, g, "tokenizer.ggml.merges", rc, "an array of strings");
        total += l + 1;
    }
    t->merges = malloc((n ? n : 1) * sizeof *t->merges);
    t->merge_arena = malloc(total ? total : 1);
    if (!t->merges || !t->merge_arena) return ST_E_NOMEM;
    char *p = t->merge_arena;
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        size_t l;
        st_gguf_get_arr_str(g, "tokenizer.ggml.merges", i, &s, &l);
        memcpy(p, s, l);
        p[l] = 0;
        /* an embedded NUL would cut the merge short: llama.cpp reads it the same way */
        t->merges[i] = p;
        p += l + 1;
    }
    d->merges = (const char *const *)t->merges;
    d->n_merges = (int32_t)n;
    return 0;
}

int st_tok_load(st_ctx *ctx, st_gguf *g, const st_tok_params *params, st_tok **out) {
    if (!out) return ST_E_INVAL;
    *out = NULL;
    if (!g) return st_seterr(ctx, ST_E_INVAL, "st_tok_load: no GGUF");
    st_tok_vocab_desc d = st_tok_vocab_desc_init();
    load_tmp t;
    memset(&t, 0, sizeof t);
    int rc = st_gguf_get_str_dup(g, "tokenizer.ggml.model", &t.model);
    if (rc) {
        rc = key_err(ctx, g, "tokenizer.ggml.model", rc, "a string");
        goto done;
    }
    d.model = t.model;
    if ((rc = opt_str(ctx, g, "tokenizer.ggml.pre", &t.pre))) goto done;
    if ((rc = opt_str(ctx, g, "general.name", &t.name))) goto done;
    if ((rc = opt_str(ctx, g, "tokenizer.chat_template", &t.tmpl))) goto done;
    d.pre = t.pre, d.name = t.name, d.chat_template = t.tmpl;
    if ((rc = read_tokens(ctx, g, &d, &t))) goto done;
    if (!strcmp(t.model, "gpt2") && (rc = read_merges(ctx, g, &d, &t))) goto done;
    if ((rc = opt_id(ctx, g, "tokenizer.ggml.bos_token_id", &d.bos_id))) goto done;
    if ((rc = opt_id(ctx, g, "tokenizer.ggml.eos_token_id", &d.eos_id))) goto done;
    if ((rc = opt_id(ctx, g, "tokenizer.ggml.unknown_token_id", &d.unk_id))) goto done;
    if ((rc = opt_id(ctx, g, "tokenizer.ggml.eot_token_id", &d.eot_id))) goto done;
    if ((rc = opt_id(ctx, g, "tokenizer.ggml.eom_token_id", &d.eom_id))) goto done;
    if ((rc = opt_id(ctx, g, "tokenizer.ggml.padding_token_id", &d.pad_id))) goto done;
    if ((rc = opt_id(ctx, g, "tokenizer.ggml.seperator_token_id", &d.sep_id))) goto done;
    if ((rc = opt_bool(ctx, g, "tokenizer.ggml.add_bos_token", &d.add_bos))) goto done;
    if ((rc = opt_bool(ctx, g, "tokenizer.ggml.add_eos_token", &d.add_eos))) goto done;
    if ((rc = opt_bool(ctx, g, "tokenizer.ggml.add_space_prefix", &d.add_space_prefix))) goto done;
    /* llama.cpp warns and keeps the default for an out-of-range special id */
    int32_t *ids[] = {&d.bos_id, &d.eos_id, &d.unk_id, &d.eot_id, &d.eom_id, &d.pad_id, &d.sep_id};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        if (*ids[i] >= d.n_tokens) *ids[i] = -1;
    rc = st_tok_create(ctx, &d, params, out);
done:
    if (rc == ST_E_NOMEM) {
        st_seterr(ctx, rc, "out of memory loading the tokenizer of %s", st_gguf_path(g));
    } else if (rc && ctx) {
        /* st_tok_create knows no file: name it, as every other error here does */
        const char *path = st_gguf_path(g), *msg = st_ctx_error(ctx);
        const size_t pl = strlen(path);
        if (strncmp(msg, path, pl) != 0 || strncmp(msg + pl, ": ", 2) != 0) {
            char copy[512];
            snprintf(copy, sizeof copy, "%s", *msg ? msg : st_strerror(rc));
            st_seterr(ctx, rc, "%s: %s", path, copy);
        }
    }
    tmp_free(&t);
    return rc;
}
