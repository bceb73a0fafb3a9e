/* `strata run` takes a prompt and llama.cpp's spellings as llama.cpp does, on the built-in
 * synthetic model (greedy): escapes in -p, -f and --chat lines (\n \t \\ \xHH ..., on by
 * default, off with --no-escape), one trailing newline dropped from -f, -ctk/-ctv as
 * --kv-type (refused when they differ), -ngl accepted and ignored, -sys/-cnv as
 * --system/--chat, -l / --logit-bias, --frequency-penalty / --presence-penalty parsed
 * (their effect: test_sample). Each equivalence is checked on the generated text and the prompt's token
 * count, against a spelling of the same bytes that needs no processing. */
#include "../test.h"
#include "chat_test_util.h"

/* The integer after `key` in s, or -1. */
static int field(const char *s, const char *key) {
    const char *p = s ? strstr(s, key) : NULL;
    return p ? atoi(p + strlen(key)) : -1;
}

typedef struct result {
    int rc, n_prompt;
    char *out, *err;
} result;

static result run(const char *args) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "run --temp 0 -n 12 -c 64 %s", args);
    result r;
    r.rc = chat_run(cmd, "", &r.out, &r.err);
    r.n_prompt = field(r.err, "prompt tokens: ");
    return r;
}

static void result_free(result *r) {
    free(r->out);
    free(r->err);
}


/* Runs a and b; both succeed and give the same prompt length and text. */
static void check_same(const char *a, const char *b) {
    result x = run(a), y = run(b);
    CHECK_INT(x.rc, 0);
    CHECK_INT(y.rc, 0);
    CHECK(x.n_prompt > 0);
    CHECK_INT(x.n_prompt, y.n_prompt);
    CHECK(x.out && y.out && strcmp(x.out, y.out) == 0);
    if (x.n_prompt != y.n_prompt) fprintf(stderr, "  ('%s' vs '%s')\n", a, b);
    result_free(&x);
    result_free(&y);
}

TEST(test_escapes) {
    atexit(chat_cleanup);
    char args[1024];
    /* the bytes x TAB y LF given four ways */
    const char *raw = chat_file_with("raw", "x\ty\n\n", 5);        /* -f drops the last LF only */
    const char *esc = chat_file_with("esc", "x\\ty\\n\n", 7);      /* escapes in a file are read too */
    snprintf(args, sizeof args, "--no-escape -f %s", raw);
    check_same("-p 'x\\ty\\n'", args);
    snprintf(args, sizeof args, "-f %s", esc);
    check_same("-p 'x\\ty\\n'", args);
    snprintf(args, sizeof args, "-e -f %s", raw); /* nothing to unescape: -e changes nothing */
    check_same("-p 'x\\ty\\n'", args);
    /* \\ is one backslash, \x41 is A, an unknown escape and a lone \x stay as written */
    const char *mixed = chat_file_with("mixed", "a\\bA\\q\\xZ", 9);
    snprintf(args, sizeof args, "--no-escape -f %s", mixed);
    check_same("-p 'a\\\\b\\x41\\q\\xZ'", args);
    /* --no-escape keeps the backslashes: a longer prompt */
    result on = run("-p 'x\\ty\\n'"), off = run("--no-escape -p 'x\\ty\\n'");
    CHECK_INT(on.rc, 0);
    CHECK_INT(off.rc, 0);
    CHECK(off.n_prompt > on.n_prompt);
    result_free(&on);
    result_free(&off);
}

TEST(test_llama_cpp_spellings) {
    result r = run("-p hi -ctk q8_0 -ctv q8_0");
    CHECK_INT(r.rc, 0);
    CHECK(r.err && strstr(r.err, "tokens, q8_0)"));
    result_free(&r);
    r = run("-p hi -ctk q8_0 -ctv f16");
    CHECK_INT(r.rc, 2);
    CHECK(r.err && strstr(r.err, "-ctk q8_0 and -ctv f16 differ"));
    result_free(&r);
    r = run("-p hi -ctk q4_0");
    CHECK_INT(r.rc, 2);
    CHECK(r.err && strstr(r.err, "bad value 'q4_0' for -ctk"));
    result_free(&r);
    check_same("-p hi --kv-type bf16", "-p hi --cache-type-k bf16 --cache-type-v bf16");

    check_same("-p hi", "-p hi --frequency-penalty 0 --presence-penalty 0");
    r = run("-p hi --presence-penalty nan");
    CHECK_INT(r.rc, 2);
    CHECK(r.err && strstr(r.err, "bad value 'nan' for --presence-penalty"));
    result_free(&r);

    /* -l: the built-in byte-level vocabulary puts byte b at id 3 + b ('A' = 68, 'B' = 69) */
    r = run("-p hi -l 68+1000");
    CHECK_INT(r.rc, 0);
    CHECK_STR(r.out, "AAAAAAAAAAAA\n");
    result_free(&r);
    r = run("-p hi --logit-bias 68+1000 -l 68-inf -l 69+1000"); /* biases add up; -inf bans */
    CHECK_INT(r.rc, 0);
    CHECK_STR(r.out, "BBBBBBBBBBBB\n");
    result_free(&r);
    r = run("-p hi -l 512+1");
    CHECK_INT(r.rc, 2);
    CHECK(r.err && strstr(r.err, "token 512 is outside the vocabulary (512 tokens)"));
    result_free(&r);
    r = run("--chat -l 68+1");
    CHECK_INT(r.rc, 2);
    CHECK(r.err && strstr(r.err, "--chat does not take them"));
    result_free(&r);
    r = run("-p hi -l 68x1");
    CHECK_INT(r.rc, 2);
    CHECK(r.err && strstr(r.err, "bad value '68x1' for -l"));
    result_free(&r);

    r = run("-p hi -ngl 99");
    CHECK_INT(r.rc, 0);
    CHECK(r.err && strstr(r.err, "-ngl 99 ignored"));
    result_free(&r);
    r = run("-p hi --n-gpu-layers many");
    CHECK_INT(r.rc, 2);
    CHECK(r.err && strstr(r.err, "bad value 'many' for --n-gpu-layers"));
    result_free(&r);

    /* -cnv -sys: the same conversation as --chat --system */
    char *o1 = NULL, *e1 = NULL, *o2 = NULL, *e2 = NULL;
    int rc1 = chat_run("run --temp 0 -n 8 -c 256 --chat --chat-template chatml --system 'Be brief'", "hi\\tthere\n",
                       &o1, &e1);
    int rc2 = chat_run("run --temp 0 -n 8 -c 256 -cnv --chat-template chatml -sys 'Be brief'", "hi\tthere\n", &o2,
                       &e2);
    CHECK_INT(rc1, 0);
    CHECK_INT(rc2, 0);
    chat_turn t1[2], t2[2];
    CHECK_INT(chat_parse_turns(e1, t1, 2), 1);
    CHECK_INT(chat_parse_turns(e2, t2, 2), 1);
    CHECK_INT(t1[0].prefill, t2[0].prefill); /* "hi\tthere" escaped in the first equals a real tab */
    CHECK(o1 && o2 && strcmp(o1, o2) == 0);
    free(o1), free(e1), free(o2), free(e2);
}

TEST_MAIN(test_escapes, test_llama_cpp_spellings)
