/* Tokenizer exactness against llama.cpp's own test vectors (../shared/models/vocab):
 * ggml-vocab-X.gguf.inp holds inputs separated by "\n__ggml_vocab_test__\n", .out one
 * line of expected ids per input (llama.cpp's test-tokenizer-0: add_special = false,
 * parse_special = false). Also stories260K (SPM, 512 tokens) and decode round trips. */
#include "strata/gguf.h"
#include "strata/tok.h"
#include "test.h"

#include <stdbool.h>
#include <sys/stat.h>

static bool exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static st_tok *load_tok(st_ctx *ctx, const char *path) {
    st_gguf *g = NULL;
    st_tok *tok = NULL;
    int rc = st_gguf_open(ctx, path, &g);
    if (rc) {
        fprintf(stderr, "  open %s: %s (%s)\n", path, st_errname(rc), st_ctx_error(ctx));
        return NULL;
    }
    rc = st_tok_load(ctx, g, NULL, &tok);
    if (rc) fprintf(stderr, "  load %s: %s (%s)\n", path, st_errname(rc), st_ctx_error(ctx));
    st_gguf_close(g);
    return tok;
}

/* Vocabularies whose decode is not the identity, as in llama.cpp's test-tokenizer-0
 * (clean-up of spaces, SPM's leading space): the round trip is checked where lossless. */
static int run_vocab(st_ctx *ctx, const char *name, int *n_cases, int *n_fail, int *n_rt_fail) {
    char gg[1024], inp[1100], outp[1100];
    snprintf(gg, sizeof gg, "%s/models/vocab/ggml-vocab-%s.gguf", test_shared_dir(), name);
    snprintf(inp, sizeof inp, "%s.inp", gg);
    snprintf(outp, sizeof outp, "%s.out", gg);
    if (!exists(inp)) return -1;
    if (!exists(gg)) {
        char why[1200];
        snprintf(why, sizeof why, "vocab %s: test vectors present but %s is absent", name, gg);
        test_untested(why);
        return -1;
    }
    st_tok *tok = load_tok(ctx, gg);
    if (!tok) return 1;
    size_t ni, no;
    char *in = test_slurp(inp, &ni), *out = test_slurp(outp, &no);
    const char *sep = "\n__ggml_vocab_test__\n";
    char *p = in, *q = out;
    *n_cases = *n_fail = *n_rt_fail = 0;
    for (;;) {
        char *e = strstr(p, sep);
        if (!e) break;
        *e = 0;
        char *qe = strchr(q, '\n');
        if (!qe) break;
        *qe = 0;
        int32_t want[512];
        int nw = 0;
        for (char *s = q; *s;) {
            char *end;
            long v = strtol(s, &end, 10);
            if (end == s) break;
            if (nw < 512) want[nw++] = (int32_t)v;
            s = end;
        }
        int32_t *got = NULL;
        int ng = 0;
        int rc = st_tok_encode_alloc(tok, p, strlen(p), false, false, &got, &ng);
        bool ok = rc == 0 && ng == nw && (nw == 0 || !memcmp(got, want, (size_t)nw * 4));
        (*n_cases)++;
        if (!ok) {
            (*n_fail)++;
            fprintf(stderr, "  %s case %d '%s':\n    want", name, *n_cases - 1, p);
            for (int i = 0; i < nw; i++) fprintf(stderr, " %d", want[i]);
            fprintf(stderr, "\n    got ");
            for (int i = 0; i < ng; i++) fprintf(stderr, " %d", got[i]);
            fprintf(stderr, "\n");
        } else if (ng > 0) {
            char buf[4096];
            size_t nd = 0;
            rc = st_tok_decode(tok, got, ng, 0, buf, sizeof buf, &nd);
            /* SPM drops the leading space it added; so the identity holds exactly */
            bool rt = rc == 0 && nd == strlen(p) && !memcmp(buf, p, nd);
            if (!rt) (*n_rt_fail)++;
        }
        free(got);
        p = e + strlen(sep);
        q = qe + 1;
    }
    free(in);
    free(out);
    st_tok_destroy(tok);
    return 0;
}

TEST(test_llama_cpp_vectors) {
    st_ctx *ctx = NULL;
    CHECK_OK(st_ctx_create(NULL, &ctx));
    static const char *names[] = {"llama-spm", "phi-3", "gpt-2", "deepseek-llm", "deepseek-coder", "falcon", "mpt",
                                  "starcoder", "refact", "llama-bpe", "qwen2", "qwen35", "command-r", "gemma-4",
                                  "bert-bge"};
    char d[1024];
    snprintf(d, sizeof d, "%s/models/vocab", test_shared_dir());
    if (!exists(d)) {
        test_skip("../shared/models/vocab is absent");
        st_ctx_destroy(ctx);
        return;
    }
    int total_fail = 0, vocabs = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int nc = 0, nf = 0, nrt = 0;
        if (!strcmp(names[i], "bert-bge")) {
            test_untested("vocab bert-bge: WordPiece (tokenizer.ggml.model = bert) is not implemented");
            continue;
        }
        int r = run_vocab(ctx, names[i], &nc, &nf, &nrt);
        if (r < 0) continue;
        vocabs++;
        if (r > 0) {
            total_fail++;
            fprintf(stderr, "  vocab %-16s LOAD FAILED\n", names[i]);
            continue;
        }
        fprintf(stderr, "  vocab %-16s %2d/%2d cases exact, %d lossy round trips\n", names[i], nc - nf, nc, nrt);
        total_fail += nf;
        CHECK(nc >= 40);
    }
    CHECK_INT(total_fail, 0);
    CHECK(vocabs >= 9);
    st_ctx_destroy(ctx);
}

TEST(test_stories260k_spm) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", test_shared_dir());
    if (!exists(path)) {
        test_skip("stories260K.gguf is absent");
        return;
    }
    st_ctx *ctx = NULL;
    CHECK_OK(st_ctx_create(NULL, &ctx));
    st_tok *tok = load_tok(ctx, path);
    REQUIRE(tok);
    CHECK_INT(st_tok_n_vocab(tok), 512);
    CHECK_INT(st_tok_get_kind(tok), ST_TOK_SPM);
    CHECK_INT(st_tok_bos(tok), 1);
    CHECK_INT(st_tok_eos(tok), 2);
    CHECK(st_tok_is_eog(tok, 2));
    const char *text = "Once upon a time";
    int32_t ids[64];
    int n = 0;
    CHECK_OK(st_tok_encode(tok, text, strlen(text), true, false, ids, 64, &n));
    REQUIRE(n >= 2);
    CHECK_INT(ids[0], 1);
    /* every id's pieces, concatenated, give back " Once upon a time" */
    char buf[256];
    size_t k = 0;
    for (int i = 1; i < n; i++) {
        const char *p;
        size_t l;
        CHECK_OK(st_tok_piece(tok, ids[i], &p, &l));
        memcpy(buf + k, p, l);
        k += l;
    }
    buf[k] = 0;
    CHECK_STR(buf, " Once upon a time");
    size_t nd = 0;
    CHECK_OK(st_tok_decode(tok, ids + 1, n - 1, 0, buf, sizeof buf - 1, &nd));
    buf[nd] = 0;
    CHECK_STR(buf, text);
    /* llama.cpp keeps the prefix space when it strips the BOS */
    CHECK_OK(st_tok_decode(tok, ids, n, ST_DETOK_REMOVE_SPECIAL, buf, sizeof buf - 1, &nd));
    buf[nd] = 0;
    CHECK_STR(buf, " Once upon a time");
    /* bytes outside the 512-token vocabulary fall back to <0xXX> tokens and come back */
    const char *odd = "Zo\xc3\xab \xe2\x82\xac 7\n\tq";
    int32_t *v = NULL;
    CHECK_OK(st_tok_encode_alloc(tok, odd, strlen(odd), false, false, &v, &n));
    CHECK_OK(st_tok_decode(tok, v, n, 0, buf, sizeof buf - 1, &nd));
    buf[nd] = 0;
    CHECK_STR(buf, odd);
    free(v);
    st_tok_destroy(tok);
    st_ctx_destroy(ctx);
}

/* Bytes of s[0, n) form whole UTF-8 characters (lead byte, then its continuation bytes). */
static bool whole_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = (unsigned char)s[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!len || i + len > n) return false;
        for (size_t j = 1; j < len; j++)
            if (((unsigned char)s[i + j] >> 6) != 2) return false;
        i += len;
    }
    return true;
}

/* Streaming detokenization of an SPM vocabulary's byte-fallback tokens: characters without a
 * piece of their own in stories260K's 512 travel as <0xXX> tokens, one byte each, and the
 * stream holds each character back until its last byte arrives. */
TEST(test_stories260k_detok_stream_byte_fallback) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", test_shared_dir());
    if (!exists(path)) {
        test_skip("stories260K.gguf is absent (needs ../shared)");
        return;
    }
    st_ctx *ctx = NULL;
    CHECK_OK(st_ctx_create(NULL, &ctx));
    st_tok *tok = load_tok(ctx, path);
    REQUIRE(tok);
    REQUIRE(st_tok_get_kind(tok) == ST_TOK_SPM);
    st_detok *d = NULL;
    CHECK_OK(st_detok_create(tok, 0, &d));
    REQUIRE(d);
    /* "é€😀", a lone 0xFF (invalid: passed on at once), then the first two bytes of "€" */
    const uint8_t text[] = {0xC3, 0xA9, 0xE2, 0x82, 0xAC, 0xF0, 0x9F, 0x98, 0x80, 0xFF, 0xE2, 0x82};
    const int want_len[] = {0, 2, 0, 0, 3, 0, 0, 0, 4, 1, 0, 0};
    char all[64];
    size_t k = 0;
    for (size_t i = 0; i < sizeof text; i++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", text[i]);
        int32_t id = st_tok_find(tok, name, strlen(name));
        if (id < 0) fprintf(stderr, "  no token %s\n", name);
        REQUIRE(id >= 0);
        const char *o;
        size_t n;
        CHECK_OK(st_detok_feed(d, id, &o, &n));
        CHECK_INT(n, want_len[i]);
        memcpy(all + k, o, n);
        k += n;
    }
    const char *o;
    size_t n;
    CHECK_OK(st_detok_flush(d, &o, &n));
    CHECK_INT(n, 2); /* the truncated "€" */
    memcpy(all + k, o, n);
    k += n;
    CHECK_INT(k, sizeof text);
    CHECK(!memcmp(all, text, sizeof text));
    st_detok_destroy(d);

    /* the tokens the encoder makes for mixed text: every piece streamed out is whole UTF-8,
     * and together they are the text behind SPM's space prefix */
    const char *mixed = "Zo\xc3\xab paid 5\xe2\x82\xac for a \xf0\x9f\x98\x80 cake";
    int32_t *ids = NULL;
    int n_ids = 0;
    CHECK_OK(st_tok_encode_alloc(tok, mixed, strlen(mixed), false, false, &ids, &n_ids));
    REQUIRE(ids && n_ids > 0);
    /* ë and 😀 go byte by byte (€ has a piece of its own): each of their bytes' <0xXX>
     * tokens is among the ids */
    CHECK(st_tok_find(tok, "\xc3\xab", 2) < 0 && st_tok_find(tok, "\xf0\x9f\x98\x80", 4) < 0);
    const uint8_t multi[] = {0xC3, 0xAB, 0xF0, 0x9F, 0x98, 0x80};
    for (size_t j = 0; j < sizeof multi; j++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", multi[j]);
        int32_t id = st_tok_find(tok, name, strlen(name)), seen = 0;
        for (int i = 0; i < n_ids; i++) seen |= ids[i] == id;
        if (!seen) fprintf(stderr, "  %s not among the encoded ids\n", name);
        CHECK(id >= 0 && seen);
    }
    CHECK_OK(st_detok_create(tok, 0, &d));
    REQUIRE(d);
    char got[256];
    k = 0;
    for (int i = 0; i < n_ids; i++) {
        CHECK_OK(st_detok_feed(d, ids[i], &o, &n));
        if (!whole_utf8(o, n)) fprintf(stderr, "  token %d (id %d) streamed a split character\n", i, ids[i]);
        CHECK(whole_utf8(o, n));
        REQUIRE(k + n < sizeof got);
        memcpy(got + k, o, n);
        k += n;
    }
    CHECK_OK(st_detok_flush(d, &o, &n));
    CHECK_INT(n, 0);
    got[k] = 0;
    CHECK(got[0] == ' ');
    CHECK_STR(got + 1, mixed);
    free(ids);
    st_detok_destroy(d);
    st_tok_destroy(tok);
    st_ctx_destroy(ctx);
}

TEST_MAIN(test_llama_cpp_vectors, test_stories260k_spm, test_stories260k_detok_stream_byte_fallback)
