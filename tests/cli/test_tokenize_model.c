/* `strata tokenize` against llama.cpp's own ids: every test vector of ../shared/models/vocab
 * (test-tokenizer-0's .inp / .out) holding a newline, tab or carriage return is passed on the
 * command line spelled with escapes (\n \t \r \\), as one would type it for llama-tokenize,
 * and must give the ids llama.cpp gives for the actual bytes. */
#include "../test.h"
#include "chat_test_util.h"

/* s quoted for sh with its control bytes and backslashes as escapes; 0, or -1 when too long. */
static int escaped_arg(const char *s, char *out, size_t cap) {
    size_t o = 0;
    out[o++] = '\'';
    for (; *s; s++) {
        const char *rep = *s == '\n' ? "\\n" : *s == '\t' ? "\\t" : *s == '\r' ? "\\r" : *s == '\\' ? "\\\\"
                          : *s == '\'' ? "'\\''" : NULL;
        size_t n = rep ? strlen(rep) : 1;
        if (o + n + 2 > cap) return -1;
        if (rep) memcpy(out + o, rep, n);
        else out[o] = *s;
        o += n;
    }
    out[o++] = '\'';
    out[o] = 0;
    return 0;
}

/* "[1, 2, 3]" and " 1 2 3" hold the same ids. */
static int same_ids(const char *got, const char *want) {
    if (!got || *got != '[') return 0;
    got++;
    for (;;) {
        char *e1, *e2;
        long a = strtol(got, &e1, 10), b = strtol(want, &e2, 10);
        if (e1 == got || e2 == want) return *e1 == ']' && e2 == want && *want == 0;
        if (a != b) return 0;
        got = *e1 == ',' ? e1 + 1 : e1;
        want = e2;
    }
}

/* Checks the vectors of one vocab; the number checked, or -1 when its files are absent. */
static int check_vocab(const char *name) {
    char gg[1024], inp[1100], outp[1100];
    snprintf(gg, sizeof gg, "%s/models/vocab/ggml-vocab-%s.gguf", test_shared_dir(), name);
    snprintf(inp, sizeof inp, "%s.inp", gg);
    snprintf(outp, sizeof outp, "%s.out", gg);
    if (access(gg, R_OK) || access(inp, R_OK) || access(outp, R_OK)) return -1;
    char *in = test_slurp(inp, NULL), *out = test_slurp(outp, NULL);
    if (!in || !out) {
        free(in), free(out);
        return -1;
    }
    const char *sep = "\n__ggml_vocab_test__\n";
    int n_checked = 0;
    char *p = in, *q = out;
    for (char *e; (e = strstr(p, sep)); p = e + strlen(sep)) {
        *e = 0;
        char *qe = strchr(q, '\n');
        if (!qe) break;
        *qe = 0;
        char arg[4096];
        if (strpbrk(p, "\n\t\r") && !escaped_arg(p, arg, sizeof arg)) {
            char args[6144], *got = NULL, *err = NULL;
            snprintf(args, sizeof args, "tokenize --ids --no-bos --no-parse-special -m %s %s", gg, arg);
            int rc = chat_run(args, "", &got, &err);
            CHECK_INT(rc, 0);
            const int ok = rc == 0 && same_ids(got, q);
            CHECK(ok);
            if (!ok) fprintf(stderr, "  %s: %s gave %s, llama.cpp:%s\n", name, arg, got ? got : "", q);
            free(got), free(err);
            n_checked++;
        }
        q = qe + 1;
    }
    free(in), free(out);
    return n_checked;
}

TEST(test_tokenize_escaped_vectors_match_llama_cpp) {
    static const char *names[] = {"llama-spm", "gpt-2", "phi-3", "deepseek-coder"};
    int n_vocabs = 0, n_cases = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int n = check_vocab(names[i]);
        if (n < 0) continue;
        fprintf(stderr, "  %-16s %d vectors with control bytes\n", names[i], n);
        CHECK(n >= 5);
        n_vocabs++;
        n_cases += n;
    }
    if (!n_vocabs) {
        test_skip("no vocab GGUF with its test vectors under the shared dir (set STRATA_SHARED)");
        return;
    }
    CHECK(n_cases >= 20);
    chat_cleanup();
}

TEST_MAIN(test_tokenize_escaped_vectors_match_llama_cpp)
