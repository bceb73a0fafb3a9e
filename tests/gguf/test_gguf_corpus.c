/* Replays the malformed-GGUF corpus (gguf_corpus.h): every case must be rejected with
 * its error code and a message naming the file, the entry, the field and the byte
 * offset; from memory and from a file (the mmap path).
 *
 *   test_gguf_corpus [FILTER]        run the tests
 *   test_gguf_corpus --write DIR     write the corpus as DIR/<case>.gguf (fuzz seeds) */
#include "strata/gguf.h"
#include "../test.h"
#include "gguf_corpus.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

static int write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = n ? fwrite(p, 1, n, f) : 0;
    return (fclose(f) == 0 && w == n) ? 0 : -1;
}

/* Checks one rejection; returns 1 when it is as the case expects. */
static int check_rejection(const corpus_case *c, const gb *b, int rc, st_gguf *g, st_ctx *ctx, const char *name) {
    const char *msg = st_ctx_error(ctx);
    char at[64];
    snprintf(at, sizeof at, "at byte %zu:", b->mark);
    int ok = rc == c->code && g == NULL && strstr(msg, name) && strstr(msg, c->where) && strstr(msg, c->field) &&
             strstr(msg, at) && !strchr(msg, '\n');
    if (!ok)
        fprintf(stderr, "  case %s: rc %s (want %s), message: %s\n    want: '%s', '%s', '%s', '%s'\n", c->name,
                st_errname(rc), st_errname(c->code), msg, name, c->where, c->field, at);
    return ok;
}

TEST(test_corpus_replay_memory) {
    st_ctx *ctx = NULL;
    CHECK_OK(st_ctx_create(NULL, &ctx));
    REQUIRE(ctx);
    CHECK(N_CORPUS_CASES >= 30);
    int distinct = 0;
    gb prev[N_CORPUS_CASES];
    for (int i = 0; i < N_CORPUS_CASES; i++) {
        const corpus_case *c = &corpus_cases[i];
        gb b = {0};
        c->build(&b);
        char name[128];
        snprintf(name, sizeof name, "corpus/%s.gguf", c->name);
        st_ctx_clear_error(ctx);
        st_gguf *g = (st_gguf *)&b; /* must be cleared on entry */
        int rc = st_gguf_open_memory(ctx, b.p, b.len, name, &g);
        CHECK(check_rejection(c, &b, rc, g, ctx, name));
        st_gguf_close(g);
        int dup = 0;
        for (int j = 0; j < i; j++)
            if (prev[j].len == b.len && (b.len == 0 || memcmp(prev[j].p, b.p, b.len) == 0)) dup = 1;
        distinct += !dup;
        prev[i] = b;
    }
    CHECK_INT(distinct, N_CORPUS_CASES);
    for (int i = 0; i < N_CORPUS_CASES; i++) gb_free(&prev[i]);
    for (int i = 0; i < N_CORPUS_SEEDS; i++) { /* the fuzz seeds are valid files */
        gb b = {0};
        corpus_seeds[i].build(&b);
        st_gguf *g = NULL;
        CHECK_OK(st_gguf_open_memory(ctx, b.p, b.len, corpus_seeds[i].name, &g));
        if (!g) fprintf(stderr, "  %s\n", st_ctx_error(ctx));
        st_gguf_close(g);
        gb_free(&b);
    }
    st_ctx_destroy(ctx);
}

TEST(test_corpus_replay_files) {
    st_ctx *ctx = NULL;
    CHECK_OK(st_ctx_create(NULL, &ctx));
    REQUIRE(ctx);
    char dir[] = "/tmp/strata-gguf-corpus-XXXXXX";
    REQUIRE(mkdtemp(dir));
    for (int i = 0; i < N_CORPUS_CASES; i++) {
        const corpus_case *c = &corpus_cases[i];
        gb b = {0};
        c->build(&b);
        char path[256];
        snprintf(path, sizeof path, "%s/%s.gguf", dir, c->name);
        CHECK_INT(write_file(path, b.p, b.len), 0);
        st_gguf *g = NULL;
        int rc = st_gguf_open(ctx, path, &g);
        CHECK(check_rejection(c, &b, rc, g, ctx, path));
        st_gguf_close(g);
        unlink(path);
        gb_free(&b);
    }
    rmdir(dir);
    st_ctx_destroy(ctx);
}

static int write_corpus(const char *dir) {
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "test_gguf_corpus: cannot create %s: %s\n", dir, strerror(errno));
        return 1;
    }
    for (int i = 0; i < N_CORPUS_CASES + N_CORPUS_SEEDS; i++) {
        gb b = {0};
        int seed = i >= N_CORPUS_CASES;
        (seed ? corpus_seeds[i - N_CORPUS_CASES].build : corpus_cases[i].build)(&b);
        char path[1024];
        snprintf(path, sizeof path, "%s/%s.gguf", dir, seed ? corpus_seeds[i - N_CORPUS_CASES].name : corpus_cases[i].name);
        int rc = write_file(path, b.p, b.len);
        gb_free(&b);
        if (rc) {
            fprintf(stderr, "test_gguf_corpus: cannot write %s\n", path);
            return 1;
        }
    }
    printf("wrote %d malformed and %d valid GGUF files to %s\n", N_CORPUS_CASES, N_CORPUS_SEEDS, dir);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "--write")) {
        if (argc != 3) {
            fprintf(stderr, "usage: test_gguf_corpus --write DIR\n");
            return 2;
        }
        return write_corpus(argv[2]);
    }
    test_fn_ fns[] = {test_corpus_replay_memory, test_corpus_replay_files};
    return test_run_all_("test_corpus_replay_memory, test_corpus_replay_files", fns, 2, argc, argv);
}
