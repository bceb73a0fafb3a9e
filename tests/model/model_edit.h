/* Edits of a model GGUF for the loader's malformed-input corpus (test_model_corpus) and its
 * fuzz target (fuzz/model_fuzz.c): a list of changes (set or remove a metadata key, drop,
 * reshape, retype or add a tensor) applied while a source GGUF is copied through the
 * writer, and the load that `strata run` does on a file (model, tokenizer, KV cache and
 * runner, with the model's geometry), which either refuses the file with an error or gives
 * a session that can compute.
 *
 * A header of static functions so the fuzz build (clang, its own CMake target) and the unit
 * tests share it without a library of test code. */
#ifndef STRATA_TESTS_MODEL_EDIT_H
#define STRATA_TESTS_MODEL_EDIT_H

#include "strata/gguf.h"
#include "strata/kv.h"
#include "strata/model.h"
#include "strata/tok.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum me_op {
    ME_SET_SCALAR, /* key = one value of type vt from val (little-endian) */
    ME_SET_STR,    /* key = str */
    ME_SET_ARR,    /* key = n elements of type et (numbers from val; strings "s<i>") */
    ME_DEL,        /* key removed */
    ME_DROP,       /* tensor `key` left out */
    ME_SHAPE,      /* tensor `key` given n_dims / ne (data: zeros) */
    ME_TYPE,       /* tensor `key` given type (zeros; ne0 rounded up to the type's block) */
    ME_ADD,        /* tensor `key` added with type, n_dims, ne (values: fill) */
} me_op;

#define ME_MAX_TENSOR_BYTES ((size_t)16 << 20)

typedef struct model_edit {
    me_op op;
    char key[96]; /* a metadata key or a tensor name ("@arch.x": "<architecture>.x") */
    st_gguf_vtype vt, et;
    uint8_t val[8];
    const char *str;
    uint64_t n;
    st_type type;
    int n_dims;
    int64_t ne[4];
    float fill;
} model_edit;

/* e's key with "@" replaced by the source file's architecture. */
static void me_key(const model_edit *e, const char *arch, char *out, size_t cap) {
    if (e->key[0] == '@') snprintf(out, cap, "%s%s", arch, e->key + 1);
    else snprintf(out, cap, "%s", e->key);
}

static int me_set_arr(st_gguf_writer *w, const char *key, const model_edit *e) {
    const uint64_t n = e->n > 4096 ? 4096 : e->n;
    if (e->et == ST_GGUF_STRING) {
        char **s = calloc(n ? n : 1, sizeof *s);
        int rc = s ? 0 : ST_E_NOMEM;
        for (uint64_t i = 0; !rc && i < n; i++) {
            s[i] = malloc(24);
            if (!s[i]) rc = ST_E_NOMEM;
            else snprintf(s[i], 24, "s%llu", (unsigned long long)i);
        }
        if (!rc) rc = st_gguf_writer_set_arr_str(w, key, (const char *const *)s, n);
        for (uint64_t i = 0; s && i < n; i++) free(s[i]);
        free(s);
        return rc;
    }
    const size_t es = st_gguf_vtype_size(e->et);
    if (!es) return ST_E_INVAL; /* nested arrays: not made here */
    uint8_t *d = malloc(n * es + 1);
    if (!d) return ST_E_NOMEM;
    for (uint64_t i = 0; i < n * es; i++) d[i] = e->val[i % 8];
    int rc = st_gguf_writer_set_arr(w, key, e->et, d, n);
    free(d);
    return rc;
}

/* zero-filled tensor data of `bytes` (NULL over the cap: the edit is skipped) */
static void *me_zeros(size_t bytes, float fill) {
    if (!bytes || bytes > ME_MAX_TENSOR_BYTES) return NULL;
    uint8_t *p = calloc(1, bytes);
    if (p && fill != 0.0f)
        for (size_t i = 0; i + 4 <= bytes; i += 4) memcpy(p + i, &fill, 4);
    return p;
}

static size_t me_tensor_bytes(st_type type, int n_dims, const int64_t *ne) {
    uint64_t rows = 1;
    for (int i = 1; i < n_dims; i++) rows *= (uint64_t)(ne[i] > 0 ? ne[i] : 1);
    const size_t rb = st_row_bytes(type, ne[0]);
    return rb && rows < (1u << 24) ? rb * (size_t)rows : 0;
}

/* *out (malloc'd GGUF image, caller frees) = src with the edits applied in order. Edits the
 * writer refuses (a bad alignment, a shape its block size forbids) are skipped: the result
 * is still a well-formed file. 0, or the error of opening src / writing. */
static int model_edit_apply(st_ctx *ctx, const void *src, size_t n, const model_edit *e, int n_e, void **out,
                            size_t *out_n) {
    st_gguf *g = NULL;
    st_gguf_writer *w = NULL;
    void *bufs[64];
    int n_bufs = 0;
    int rc = st_gguf_open_memory(ctx, src, n, "src", &g);
    if (!rc) rc = st_gguf_writer_create(ctx, &w);
    if (rc) {
        st_gguf_close(g);
        return rc;
    }
    char *arch = NULL;
    if (st_gguf_get_str_dup(g, "general.architecture", &arch)) arch = NULL;
    const char *a = arch ? arch : "llama";
    char key[128];
    for (int64_t i = 0; !rc && i < st_gguf_n_kv(g); i++) {
        const char *k = st_gguf_key_name(g, i);
        int del = 0;
        for (int j = 0; j < n_e; j++) {
            me_key(&e[j], a, key, sizeof key);
            if (e[j].op == ME_DEL && !strcmp(key, k)) del = 1;
        }
        if (!del) rc = st_gguf_writer_copy_kv(w, g, i);
    }
    for (int j = 0; !rc && j < n_e; j++) {
        me_key(&e[j], a, key, sizeof key);
        if (e[j].op == ME_SET_SCALAR && st_gguf_vtype_size(e[j].vt)) /* 0 for strings and arrays */
            (void)st_gguf_writer_set_scalar(w, key, e[j].vt, e[j].val);
        else if (e[j].op == ME_SET_STR)
            (void)st_gguf_writer_set_strn(w, key, e[j].str ? e[j].str : "", e[j].str ? strlen(e[j].str) : 0);
        else if (e[j].op == ME_SET_ARR && me_set_arr(w, key, &e[j]) == ST_E_NOMEM)
            rc = ST_E_NOMEM;
    }
    for (int64_t i = 0; !rc && i < st_gguf_n_tensors(g); i++) {
        const st_gguf_tensor *t = st_gguf_tensor_at(g, i);
        st_type type = t->type;
        int nd = t->n_dims, drop = 0, changed = 0;
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        float fill = 0.0f;
        for (int j = 0; j < n_e; j++) {
            if (strcmp(e[j].key, t->name)) continue;
            if (e[j].op == ME_DROP) drop = 1;
            if (e[j].op == ME_SHAPE && e[j].n_dims >= 1 && e[j].n_dims <= 4) {
                nd = e[j].n_dims;
                for (int d = 0; d < 4; d++) ne[d] = d < nd ? e[j].ne[d] : 1;
                changed = 1, fill = e[j].fill;
            }
            if (e[j].op == ME_TYPE && st_type_name(e[j].type) && st_type_block_size(e[j].type) > 0) {
                const int64_t bs = st_type_block_size(e[j].type);
                type = e[j].type;
                ne[0] = (ne[0] + bs - 1) / bs * bs;
                changed = 1, fill = e[j].fill;
            }
        }
        if (drop) continue;
        void *data = NULL;
        if (changed && n_bufs < 64 && (data = me_zeros(me_tensor_bytes(type, nd, ne), fill))) bufs[n_bufs++] = data;
        int arc = data ? st_gguf_writer_add_tensor(w, t->name, type, nd, ne, data) : ST_E_INVAL;
        /* an edit that cannot be made (too large, a shape the type's blocks forbid) is
         * skipped: the tensor stays as it was */
        if (arc == ST_E_INVAL) arc = st_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data);
        if (arc == ST_E_NOMEM) rc = ST_E_NOMEM;
    }
    for (int j = 0; !rc && j < n_e; j++) {
        if (e[j].op != ME_ADD || e[j].n_dims < 1 || e[j].n_dims > 4 || n_bufs == 64) continue;
        void *d = me_zeros(me_tensor_bytes(e[j].type, e[j].n_dims, e[j].ne), e[j].fill);
        if (!d) continue;
        bufs[n_bufs++] = d;
        if (st_gguf_writer_add_tensor(w, e[j].key, e[j].type, e[j].n_dims, e[j].ne, d) == ST_E_NOMEM)
            rc = ST_E_NOMEM;
    }
    if (!rc) rc = st_gguf_writer_write_memory(w, out, out_n);
    for (int i = 0; i < n_bufs; i++) free(bufs[i]);
    free(arch);
    st_gguf_writer_destroy(w);
    st_gguf_close(g);
    return rc;
}

/* What `strata run` builds from a file, in its order. */
typedef struct me_session {
    st_model *model;
    st_tok *tok;
    st_kv *kv;
    st_runner *runner;
    int32_t n_ctx;
} me_session;

static void me_session_close(me_session *s) {
    st_runner_destroy(s->runner);
    st_kv_destroy(s->kv);
    st_tok_destroy(s->tok);
    st_model_destroy(s->model);
    memset(s, 0, sizeof *s);
}

/* Loads the image as `strata run -m FILE -c 64` would: 0 with *s complete, or an error code
 * with nothing left open. */
static int me_session_open(st_ctx *ctx, const void *buf, size_t n, const char *name, me_session *s) {
    memset(s, 0, sizeof *s);
    int rc = st_model_load_memory(ctx, buf, n, name, &s->model);
    if (rc) return rc;
    const st_model_hparams *hp = st_model_get_hparams(s->model);
    s->n_ctx = hp->n_ctx_train < 64 ? hp->n_ctx_train : 64;
    if ((rc = st_tok_load(ctx, st_model_gguf(s->model), NULL, &s->tok))) goto fail;
    st_kv_params kp = st_kv_default_params();
    kp.n_layer = hp->n_layer, kp.n_kv_head = hp->n_head_kv, kp.head_dim = hp->head_dim;
    kp.n_pages = (s->n_ctx + kp.page_size - 1) / kp.page_size + 1;
    st_model_fingerprint(s->model, kp.fingerprint.b);
    if ((rc = st_kv_create(ctx, &kp, &s->kv))) goto fail;
    st_runner_params rp = st_runner_default_params();
    rp.n_ctx = s->n_ctx;
    if ((rc = st_runner_create(ctx, s->model, s->kv, &rp, &s->runner))) goto fail;
    return 0;
fail:
    me_session_close(s);
    return rc;
}

/* A short prompt's prefill, a greedy token and one decode step on sequence 0: 0 or the
 * first error. *first gets the greedy token (in [0, n_vocab)). */
static int me_session_run(me_session *s, int32_t *first) {
    const st_model_hparams *hp = st_model_get_hparams(s->model);
    int32_t *ids = NULL;
    int n = 0;
    st_kv_seq_id seq;
    int rc = st_kv_seq_create(s->kv, &seq);
    if (rc) return rc;
    if ((rc = st_tok_encode_alloc(s->tok, "Hello, world", 12, true, false, &ids, &n))) return rc;
    if (n > s->n_ctx - 1) n = s->n_ctx - 1;
    float *logits = malloc((size_t)hp->n_vocab * sizeof(float));
    if (!logits) rc = ST_E_NOMEM;
    for (int i = 0; !rc && i < n; i++)
        if (ids[i] < 0 || ids[i] >= hp->n_vocab) rc = ST_E_STATE; /* the tokenizer left the vocabulary */
    if (!rc && n > 0) {
        st_batch b = {.n_tokens = n, .tokens = ids, .seq_single = seq};
        rc = st_runner_forward(s->runner, &b, logits);
    }
    int32_t best = 0;
    for (int32_t v = 1; !rc && n > 0 && v < hp->n_vocab; v++)
        if (logits[v] > logits[best]) best = v;
    if (!rc && n > 0 && n + 1 <= s->n_ctx) {
        st_batch d = {.n_tokens = 1, .tokens = &best, .seq_single = seq};
        rc = st_runner_forward(s->runner, &d, logits);
    }
    *first = best;
    free(logits);
    free(ids);
    return rc;
}

#endif
