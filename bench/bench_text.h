/* Shared by the benches that run a trained model on real text (bench/sparse, bench/locality,
 * bench/tiered with -m MODEL): the text, its tokens, and the random-weight twin the trained
 * model is compared with.
 *
 * The text is the project's own tree, read at run time from STRATA_SOURCE_DIR in a fixed
 * order: docs/\*.md, then include/strata/\*.h, then src/<sub>/\*.{c,h} (subdirectories and
 * files in byte order, strcmp), each file preceded by a line "// FILE: <path>" and joined as
 * they are, until the text holds at least the tokens asked for (tokenized with the model's
 * own tokenizer, BOS first). So every run of a given tree reads the same tokens, the trained
 * model and its twin read identical ones, and the mix is what tiny-long was trained on: prose
 * about software and C code.
 *
 * The twin has the trained model's shape (arch, layers, width, heads, feed-forward, vocab
 * copied from the model file, context, rope base, rms eps) and weight type, random weights
 * N(0, 0.02) (seed 1), written by the project's synthetic writer (st_synth_write_memory, the
 * code behind `strata mkmodel`). Its attention is nearly uniform: the contrast a trained
 * model's locality is measured against. */
#ifndef STRATA_BENCH_TEXT_H
#define STRATA_BENCH_TEXT_H

#include "bench_common.h"
#include "strata/gguf.h"
#include "strata/model.h"
#include "strata/tok.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bench_text_buf {
    char *b;
    size_t n, cap;
} bench_text_buf;

static inline int bench_text_put_(bench_text_buf *t, const char *s, size_t n) {
    if (t->n + n + 1 > t->cap) {
        size_t c = t->cap ? t->cap : 1 << 16;
        while (c < t->n + n + 1) c *= 2;
        char *nb = realloc(t->b, c);
        if (!nb) return -1;
        t->b = nb, t->cap = c;
    }
    memcpy(t->b + t->n, s, n);
    t->n += n;
    t->b[t->n] = 0;
    return 0;
}

static inline int bench_text_cmp_(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names in dir (relative to root) ending in one of the suffixes (NULL-terminated list;
 * NULL suffixes = directories only), sorted. Caller frees each name and the array. */
static inline char **bench_text_list_(const char *root, const char *dir, const char *const *sfx, int *n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", root, dir);
    *n = 0;
    DIR *d = opendir(path);
    if (!d) return NULL;
    char **v = NULL;
    int cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        const size_t len = strlen(e->d_name);
        int ok = 0;
        if (!sfx) {
            char sub[4096 + 256];
            snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
            struct stat st;
            ok = stat(sub, &st) == 0 && S_ISDIR(st.st_mode);
        }
        for (int i = 0; sfx && sfx[i] && !ok; i++) {
            const size_t m = strlen(sfx[i]);
            ok = len > m && !strcmp(e->d_name + len - m, sfx[i]);
        }
        if (!ok) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 64;
            char **nv = realloc(v, (size_t)cap * sizeof *nv);
            if (!nv) break;
            v = nv;
        }
        v[(*n)++] = strdup(e->d_name);
    }
    closedir(d);
    if (v) qsort(v, (size_t)*n, sizeof *v, bench_text_cmp_);
    return v;
}

/* The source-tree text (order above) tokenized with tok, at least n_min tokens. *toks (caller
 * frees) and *n_toks; *n_files the files read. 0, or -1 with a message on stderr (the tree
 * holds fewer tokens, or a read failed). */
static inline int bench_text_tokens(const st_tok *tok, int64_t n_min, int32_t **toks, int *n_toks, int *n_files) {
    static const char *const md[] = {".md", NULL}, *const hdr[] = {".h", NULL}, *const src[] = {".c", ".h", NULL};
    const char *root = STRATA_SOURCE_DIR;
    /* the directories in order: docs, include/strata, then each src/<sub> */
    char dirs[64][256];
    int n_dirs = 0, n_sub = 0;
    snprintf(dirs[n_dirs++], sizeof dirs[0], "docs");
    snprintf(dirs[n_dirs++], sizeof dirs[0], "include/strata");
    char **subs = bench_text_list_(root, "src", NULL, &n_sub);
    for (int i = 0; i < n_sub && n_dirs < 64; i++) snprintf(dirs[n_dirs++], sizeof dirs[0], "src/%s", subs[i]);
    for (int i = 0; i < n_sub; i++) free(subs[i]);
    free(subs);
    bench_text_buf t = {0};
    *toks = NULL, *n_toks = 0, *n_files = 0;
    int rc = 0;
    /* tokenize after each directory: an SPM encode of the whole tree at once costs seconds */
    for (int di = 0; di < n_dirs && !rc && *n_toks < n_min; di++) {
        int n = 0;
        const char *const *sfx = di == 0 ? md : di == 1 ? hdr : src;
        char **names = bench_text_list_(root, dirs[di], sfx, &n);
        for (int i = 0; i < n && !rc; i++) {
            char path[4096 + 512], head[512];
            snprintf(path, sizeof path, "%s/%s/%s", root, dirs[di], names[i]);
            size_t len = 0;
            char *body = bench_read_file(path, &len);
            const int hl = snprintf(head, sizeof head, "// FILE: %s/%s\n", dirs[di], names[i]);
            if (!body || bench_text_put_(&t, head, (size_t)hl) || bench_text_put_(&t, body, len)) {
                fprintf(stderr, "bench text: cannot read %s\n", path);
                rc = -1;
            }
            free(body);
            ++*n_files;
        }
        for (int i = 0; i < n; i++) free(names[i]);
        free(names);
        if (!rc) {
            free(*toks);
            *toks = NULL;
            if (st_tok_encode_alloc(tok, t.b, t.n, true, false, toks, n_toks)) {
                fprintf(stderr, "bench text: tokenizing the tree failed\n");
                rc = -1;
            }
        }
    }
    free(t.b);
    if (!rc && *n_toks < n_min) {
        fprintf(stderr, "bench text: the tree under %s holds %d tokens, fewer than %lld\n", root, *n_toks,
                (long long)n_min);
        rc = -1;
    }
    if (rc) {
        free(*toks);
        *toks = NULL;
        *n_toks = 0;
    }
    return rc;
}

/* The random twin of m (loaded from the GGUF at model_path, whose vocabulary it copies), in
 * memory: *img (caller frees after destroying *twin) backs *twin. 0 or the writer's or
 * loader's error. */
static inline int bench_text_twin(st_ctx *ctx, const st_model *m, const char *model_path, void **img,
                                  size_t *img_size, st_model **twin) {
    const st_model_hparams *hp = st_model_get_hparams(m);
    st_synth_params sp = st_synth_default_params();
    sp.arch = hp->arch;
    sp.n_layer = hp->n_layer, sp.n_embd = hp->n_embd, sp.n_head = hp->n_head;
    sp.n_head_kv = hp->n_head_kv, sp.n_ff = hp->n_ff, sp.n_vocab = hp->n_vocab;
    sp.n_ctx = hp->n_ctx_train, sp.rope_base = hp->rope_base, sp.rms_eps = hp->rms_eps;
    const st_gguf_tensor *wq = st_gguf_find_tensor(st_model_gguf(m), "blk.0.attn_q.weight");
    const st_gguf_tensor *we = st_gguf_find_tensor(st_model_gguf(m), "token_embd.weight");
    sp.type = wq ? wq->type : ST_TYPE_F32;
    sp.embd_type = we ? (int32_t)we->type : -1;
    sp.tied_output = hp->tied_output;
    sp.vocab_from = model_path;
    int rc = st_synth_write_memory(ctx, &sp, img, img_size);
    if (!rc) rc = st_model_load_memory(ctx, *img, *img_size, "random twin", twin);
    return rc;
}

#endif
