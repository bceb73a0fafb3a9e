/* Helpers of the `strata run --chat` tests: run the binary with a stdin file, read back its
 * stdout / stderr, parse the per-turn statistics lines, and compute with the library what a
 * turn's prefill should be. */
#ifndef STRATA_TEST_CHAT_UTIL_H
#define STRATA_TEST_CHAT_UTIL_H

#include "strata/model.h"
#include "strata/tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct chat_turn {
    int prefill, reused, generated;
} chat_turn;

static inline const char *chat_bin(void) {
    const char *b = getenv("STRATA_BIN");
    return b && *b ? b : "./strata";
}

/* A fresh directory for this process's files (/tmp/strata-chat-<pid>). */
static inline const char *chat_dir(void) {
    static char dir[64];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/strata-chat-%d", (int)getpid());
        mkdir(dir, 0700);
    }
    return dir;
}

static inline void chat_cleanup(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", chat_dir());
    if (system(cmd)) fprintf(stderr, "  (could not remove %s)\n", chat_dir());
}

/* Runs `strata <args>` with stdin from `input`; *out / *err malloc'd (caller frees). Returns
 * the exit status, or -1 when the process did not exit normally. */
static inline int chat_run(const char *args, const char *input, char **out, char **err) {
    char in[128], o[128], e[128], cmd[8192];
    snprintf(in, sizeof in, "%s/in", chat_dir());
    snprintf(o, sizeof o, "%s/out", chat_dir());
    snprintf(e, sizeof e, "%s/err", chat_dir());
    FILE *f = fopen(in, "wb");
    if (!f) return -1;
    fputs(input, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s %s <%s >%s 2>%s", chat_bin(), args, in, o, e);
    int st = system(cmd);
    *out = test_slurp(o, NULL);
    *err = test_slurp(e, NULL);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ../shared/models/stories260K.gguf into path[cap]: 1 when readable, else the test is marked
 * skipped (test_skip) and 0. */
static inline int chat_stories_model(char *path, size_t cap) {
    snprintf(path, cap, "%s/models/stories260K.gguf", test_shared_dir());
    if (access(path, R_OK) == 0) return 1;
    char why[1200];
    snprintf(why, sizeof why, "%s not found (needs ../shared)", path);
    test_skip(why);
    return 0;
}

/* The tiny model (mkmodel --preset tiny --seed 7: a byte-level vocabulary, a few KiB, made in
 * milliseconds), made once in chat_dir(), which is removed at exit; its path, or NULL when
 * mkmodel failed (said on stderr). */
static inline const char *chat_tiny_model(void) {
    static char path[256];
    if (path[0]) return path;
    snprintf(path, sizeof path, "%s/tiny.gguf", chat_dir());
    char args[512], *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "mkmodel -o %s --preset tiny --seed 7", path);
    int rc = chat_run(args, "", &out, &err);
    if (rc) fprintf(stderr, "  mkmodel failed (%d): %s\n", rc, err ? err : "");
    free(out);
    free(err);
    if (rc) {
        path[0] = 0;
        return NULL;
    }
    atexit(chat_cleanup);
    return path;
}

/* A file NAME in chat_dir() holding exactly s[0, n); its path (in one of 8 buffers, reused in
 * turn). */
static inline const char *chat_file_with(const char *name, const char *s, size_t n) {
    static char path[8][256];
    static int k;
    char *p = path[k++ % 8];
    snprintf(p, 256, "%s/%s", chat_dir(), name);
    FILE *f = fopen(p, "wb");
    if (f) {
        if (fwrite(s, 1, n, f) != n) fprintf(stderr, "  could not write %s\n", p);
        fclose(f);
    }
    return p;
}

/* Parses every "[turn N: prefill A new tokens (B reused ...; generated G tokens" line. */
static inline int chat_parse_turns(const char *err, chat_turn *t, int max) {
    int n = 0;
    for (const char *p = err; p && (p = strstr(p, "[turn ")) && n < max; p++) {
        int no;
        const char *g = strstr(p, "generated ");
        if (sscanf(p, "[turn %d: prefill %d new tokens (%d reused", &no, &t[n].prefill, &t[n].reused) == 3 && g &&
            sscanf(g, "generated %d", &t[n].generated) == 1)
            n++;
    }
    return n;
}

/* Token count of text[0, len) as the chat encodes it. */
static inline int chat_count(const st_tok *tok, const char *text, size_t len, int add_special) {
    int32_t *ids = NULL;
    int n = -1;
    if (st_tok_encode_alloc(tok, text, len, add_special, 1, &ids, &n)) n = -1;
    free(ids);
    return n;
}

/* Tokens of the text turn 2 adds in suffix mode: render(sys?, u1, a1, u2 + generation prompt)
 * minus render(sys?, u1 + generation prompt) minus the reply (a placeholder reply: the
 * bytes between are the template's, whatever the reply). */
static inline int chat_turn2_suffix(const st_tok *tok, st_chat_tmpl t, const char *sys, const char *u1,
                                    const char *u2) {
    const char *reply = "R";
    st_chat_msg m[4];
    size_t k = 0;
    if (sys) m[k++] = (st_chat_msg){"system", sys};
    m[k++] = (st_chat_msg){"user", u1};
    char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    if (st_chat_render(t, m, k, 1, &a, &na)) return -1;
    m[k++] = (st_chat_msg){"assistant", reply};
    m[k++] = (st_chat_msg){"user", u2};
    int n = -1;
    if (!st_chat_render(t, m, k, 1, &b, &nb) && nb > na + 1 && !memcmp(a, b, na) && b[na] == 'R')
        n = chat_count(tok, b + na + 1, nb - na - 1, 0);
    free(a);
    free(b);
    return n;
}

/* Tokens of turn 1: render(sys?, u1 + generation prompt) with BOS. */
static inline int chat_turn1(const st_tok *tok, st_chat_tmpl t, const char *sys, const char *u1) {
    st_chat_msg m[2];
    size_t k = 0;
    if (sys) m[k++] = (st_chat_msg){"system", sys};
    m[k++] = (st_chat_msg){"user", u1};
    char *a = NULL;
    size_t na = 0;
    if (st_chat_render(t, m, k, 1, &a, &na)) return -1;
    int n = chat_count(tok, a, na, 1);
    free(a);
    return n;
}

/* Loads the tokenizer of a GGUF model file (*m and *tok owned by the caller). */
static inline int chat_load_tok(st_ctx *ctx, const char *path, st_model **m, st_tok **tok) {
    int rc = st_model_load(ctx, path, NULL, m);
    if (!rc) rc = st_tok_load(ctx, st_model_gguf(*m), NULL, tok);
    return rc;
}

#endif
