/* Tokenizer unit tests on tiny vocabularies built in memory (no ../shared needed). */
#include "strata/tok.h"
#include "test.h"

#include <stdbool.h>

/* ---- a tiny SPM vocabulary ---- */
static st_tok *make_spm(st_ctx *ctx) {
    static char bytes[256][8];
    const char *tok[300];
    float score[300];
    int32_t type[300];
    int n = 0;
    tok[n] = "<unk>", score[n] = 0, type[n++] = ST_TOK_TYPE_UNKNOWN;
    tok[n] = "<s>", score[n] = 0, type[n++] = ST_TOK_TYPE_CONTROL;
    tok[n] = "</s>", score[n] = 0, type[n++] = ST_TOK_TYPE_CONTROL;
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        tok[n] = bytes[b], score[n] = 0, type[n++] = ST_TOK_TYPE_BYTE;
    }
    /* ids 259.. */
    const char *words[] = {"\xe2\x96\x81", "a", "b", "c", "\xe2\x96\x81" "a", "ab", "\xe2\x96\x81" "ab", "bc", "abc"};
    const float sc[] = {-1, -2, -2, -2, -3, -1.5f, -4, -0.5f, -0.1f};
    for (int i = 0; i < 9; i++) tok[n] = words[i], score[n] = sc[i], type[n++] = ST_TOK_TYPE_NORMAL;
    st_tok_vocab_desc d = st_tok_vocab_desc_init();
    d.model = "llama";
    d.n_tokens = n;
    d.tokens = tok;
    d.scores = score;
    d.types = type;
    st_tok *t = NULL;
    int rc = st_tok_create(ctx, &d, NULL, &t);
    if (rc) fprintf(stderr, "  spm create: %s %s\n", st_errname(rc), st_ctx_error(ctx));
    return t;
}

TEST(test_spm_merges_by_score) {
    st_ctx *ctx = NULL;
    CHECK_OK(st_ctx_create(NULL, &ctx));
    st_tok *t = make_spm(ctx);
    REQUIRE(t);
    int32_t ids[32];
    int n = 0;
    /* "▁abc": pairs ▁a(-3) ab(-1.5) bc(-0.5): bc first, then abc? no: a+bc is not a token
     * ("abc" needs "a"+"bc"... "abc" is "a"+"bc" = "abc": a token of score -0.1) -> ▁ + abc */
    CHECK_OK(st_tok_encode(t, "abc", 3, false, false, ids, 32, &n));
    CHECK_INT(n, 2);
    CHECK_INT(ids[0], 259);     /* ▁ */
    CHECK_INT(ids[1], 259 + 8); /* abc */
    /* add_special: BOS first (SPM default add_bos) */
    CHECK_OK(st_tok_encode(t, "ab", 2, true, false, ids, 32, &n));
    CHECK_INT(n, 2);
    CHECK_INT(ids[0], 1);
    CHECK_INT(ids[1], 259 + 6); /* ▁ab: ▁a(-3) vs ab(-1.5): ab first, then ▁+ab */
    /* byte fallback: 'é' is not in the vocabulary */
    CHECK_OK(st_tok_encode(t, "\xc3\xa9", 2, false, false, ids, 32, &n));
    CHECK_INT(n, 3);
    CHECK_INT(ids[1], 3 + 0xC3);
    CHECK_INT(ids[2], 3 + 0xA9);
    /* control tokens only with parse_special */
    CHECK_OK(st_tok_encode(t, "<s>a", 4, false, true, ids, 32, &n));
    CHECK_INT(n, 2);
    CHECK_INT(ids[0], 1);
    CHECK_INT(ids[1], 259 + 4); /* "▁a": a space is put in front of text after a special token */
    CHECK_OK(st_tok_encode(t, "<s>", 3, false, false, ids, 32, &n));
    CHECK(n > 1);
    /* too small an output: ST_E_LIMIT with the count needed, ids untouched */
    ids[0] = -7;
    int rc = st_tok_encode(t, "\xc3\xa9", 2, false, false, ids, 1, &n);
    CHECK_INT(rc, ST_E_LIMIT);
    CHECK_INT(n, 3);
    CHECK_INT(ids[0], -7);
    st_tok_destroy(t);
    st_ctx_destroy(ctx);
}

TEST(test_spm_roundtrip_random_bytes) {
    st_ctx *ctx = NULL;
    CHECK_OK(st_ctx_create(NULL, &ctx));
    st_tok *t = make_spm(ctx);
    REQUIRE(t);
    uint64_t s = 42;
    int bad = 0;
    for (int it = 0; it < 300; it++) {
        /* valid UTF-8 only: a lead byte swallowing the escaped space of a malformed
         * sequence is lossy in llama.cpp too */
        char in[256], out[1024];
        int len = 0;
        for (int i = 0; i < 1 + it % 60; i++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            uint8_t c = (uint8_t)(s >> 56);
            static const char *mb[] = {"\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xd0\xaf"}; /* not U+2581: SPM reads it as a space */
            if (it & 1) in[len++] = "abc  x"[c % 6];
            else if (c < 0xE0) in[len++] = (char)(c & 0x7F);
            else memcpy(in + len, mb[c & 3], strlen(mb[c & 3])), len += (int)strlen(mb[c & 3]);
        }
        int32_t *ids = NULL;
        int n = 0;
        size_t nd = 0;
        CHECK_OK(st_tok_encode_alloc(t, in, (size_t)len, false, false, &ids, &n));
        CHECK_OK(st_tok_decode(t, ids, n, 0, out, sizeof out, &nd));
        if (nd != (size_t)len || memcmp(in, out, nd)) bad++;
        free(ids);
    }
    CHECK_INT(bad, 0);
    st_tok_destroy(t);
    st_ctx_destroy(ctx);
}

/* ---- a tiny byte-level BPE vocabulary ---- */
static int byte_char(int b, char *o) { /* GPT-2 bytes_to_unicode */
    uint32_t cp = b;
    if (b <= 0x20) cp = 256 + b;
    else if (b >= 0x7F && b <= 0xA0) cp = 256 + 33 + (b - 0x7F);
    else if (b == 0xAD) cp = 256 + 67;
    if (cp < 0x80) {
        o[0] = (char)cp, o[1] = 0;
        return 1;
    }
    o[0] = (char)(0xC0 | (cp >> 6)), o[1] = (char)(0x80 | (cp & 0x3F)), o[2] = 0;
    return 2;
}

static st_tok *make_bpe(st_ctx *ctx, const char *pre, const st_tok_params *p, int *rc_out) {
    static char bytes[256][4];
    const char *tok[300];
    int32_t type[300];
    int n = 0;
    for (int b = 0; b < 256; b++) {
        byte_char(b, bytes[b]);
        tok[n] = bytes[b], type[n++] = ST_TOK_TYPE_NORMAL;
    }
    const char *extra[] = {"he", "the", "\xc4\xa0the", "<|endoftext|>", "<|im_start|>", "\xc4\xa0\xc4\xa0", "aa",
                           "aaaa", "<user>"};
    const int32_t et[] = {1, 1, 1, 3, 3, 1, 1, 1, 4};
    for (int i = 0; i < 9; i++) tok[n] = extra[i], type[n++] = et[i];
    const char *merges[] = {"h e", "t he", "\xc4\xa0 the", "\xc4\xa0 \xc4\xa0", "a a", "aa aa"};
    st_tok_vocab_desc d = st_tok_vocab_desc_init();
    d.model = "gpt2";
    d.pre = pre;
    d.n_tokens = n;
    d.tokens = tok;
    d.types = type;
    d.merges = merges;
    d.n_merges = 6;
    d.eos_id = 259;
    d.chat_template = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{% endfor %}";
    st_tok *t = NULL;
    int rc = st_tok_create(ctx, &d, p, &t);
    if (rc_out) *rc_out = rc;
    return t;
}

TEST(test_bpe_merges_and_specials) {
    st_ctx *ctx = NULL;
    CHECK_OK(st_ctx_create(NULL, &ctx));
    st_tok *t = make_bpe(ctx, "gpt-2", NULL, NULL);
    REQUIRE(t);
    CHECK_INT(st_tok_get_kind(t), ST_TOK_BPE);
    int32_t ids[64];
    int n = 0;
    CHECK_OK(st_tok_encode(t, "the the", 7, false, false, ids, 64, &n));
    CHECK_INT(n, 2);
    CHECK_INT(ids[0], 257);
    CHECK_INT(ids[1], 258);
    /* aaaaa -> aaaa + a (ranks: "a a" first, leftmost pairs, then "aa aa") */
    CHECK_OK(st_tok_encode(t, "aaaaa", 5, false, false, ids, 64, &n));
    CHECK_INT(n, 2);
    CHECK_INT(ids[0], 263);
    CHECK_INT(ids[1], 'a');
    /* control tokens need parse_special; user-defined ones are always split out */
    CHECK_OK(st_tok_encode(t, "<|endoftext|>", 13, false, true, ids, 64, &n));
    CHECK_INT(n, 1);
    CHECK_INT(ids[0], 259);
    CHECK_OK(st_tok_encode(t, "<|endoftext|>", 13, false, false, ids, 64, &n));
    CHECK(n > 1);
    CHECK_OK(st_tok_encode(t, "x<user>y", 8, false, false, ids, 64, &n));
    CHECK_INT(n, 3);
    CHECK_INT(ids[1], 264);
    CHECK(st_tok_is_eog(t, 259));
    CHECK(!st_tok_is_eog(t, 257));
    /* pieces decode the byte-level alphabet */
    const char *p;
    size_t l;
    CHECK_OK(st_tok_piece(t, 258, &p, &l));
    CHECK_INT(l, 4);
    CHECK(!memcmp(p, " the", 4));
    CHECK_INT(st_tok_piece(t, 999, &p, &l), ST_E_INVAL);
    st_tok_destroy(t);
    st_ctx_destroy(ctx);
}

TEST(test_bpe_unknown_pre_is_named) {
    st_ctx *ctx = NULL;
    CHECK_OK(st_ctx_create(NULL, &ctx));
    int rc = 0;
    st_tok *t = make_bpe(ctx, "no-such-pre", NULL, &rc);
    CHECK(t == NULL);
    CHECK_INT(rc, ST_E_UNSUPPORTED);
    CHECK(strstr(st_ctx_error(ctx), "no-such-pre") != NULL);
    st_tok_params p = st_tok_default_params();
    p.force_default_pre = true;
    t = make_bpe(ctx, "no-such-pre", &p, &rc);
    REQUIRE(t);
    CHECK_STR(st_tok_pre_name(t), "default");
    st_tok_destroy(t);
    /* every pre-tokenizer of the table compiles */
    const char *pres[] = {"llama3", "llama-bpe", "qwen2", "qwen35", "gpt2", "deepseek-llm", "deepseek-coder",
                          "deepseek-v3", "falcon", "starcoder", "refact", "mpt", "smollm", "command-r", "poro-chat",
                          "viking", "tekken", "gpt-4o", "seed-coder", "dbrx", "stablelm2", "default"};
    for (size_t i = 0; i < sizeof pres / sizeof pres[0]; i++) {
        t = make_bpe(ctx, pres[i], NULL, &rc);
        if (!t) fprintf(stderr, "  pre %s: %s %s\n", pres[i], st_errname(rc), st_ctx_error(ctx));
        CHECK(t != NULL);
        st_tok_destroy(t);
    }
    st_ctx_destroy(ctx);
}

TEST(test_bpe_long_word_not_quadratic) {
    st_ctx *ctx = NULL;
    CHECK_OK(st_ctx_create(NULL, &ctx));
    st_tok *t = make_bpe(ctx, "qwen2", NULL, NULL);
    REQUIRE(t);
    size_t len = 400000; /* one 400 KB word: quadratic merging would take minutes */
    char *s = malloc(len);
    memset(s, 'a', len);
    int32_t *ids = NULL;
    int n = 0;
    CHECK_OK(st_tok_encode_alloc(t, s, len, false, false, &ids, &n));
    CHECK_INT(n, (int)(len / 4));
    CHECK_INT(ids[0], 263);
    free(ids);
    free(s);
    st_tok_destroy(t);
    st_ctx_destroy(ctx);
}

TEST(test_bpe_roundtrip_random_utf8) {
    st_ctx *ctx = NULL;
    CHECK_OK(st_ctx_create(NULL, &ctx));
    st_tok *t = make_bpe(ctx, "qwen2", NULL, NULL); /* qwen2: no space clean-up, lossless */
    REQUIRE(t);
    uint64_t s = 7;
    int bad = 0;
    const char *pieces[] = {"a", " ", "the", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\n", "3", "'s", "  "};
    for (int it = 0; it < 500; it++) {
        char in[256], out[1024];
        size_t len = 0;
        for (int i = 0; i < 1 + it % 30; i++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            const char *p = pieces[(s >> 33) % 10];
            memcpy(in + len, p, strlen(p));
            len += strlen(p);
        }
        int32_t *ids = NULL;
        int n = 0;
        size_t nd = 0;
        CHECK_OK(st_tok_encode_alloc(t, in, len, false, false, &ids, &n));
        CHECK_OK(st_tok_decode(t, ids, n, 0, out, sizeof out, &nd));
        if (nd != len || memcmp(in, out, nd)) bad++;
        free(ids);
    }
    CHECK_INT(bad, 0);
    st_tok_destroy(t);
    st_ctx_destroy(ctx);
}

TEST(test_detok_stream_never_splits_utf8) {
    st_ctx *ctx = NULL;
    CHECK_OK(st_ctx_create(NULL, &ctx));
    st_tok *t = make_bpe(ctx, "gpt2", NULL, NULL);
    REQUIRE(t);
    st_detok *d = NULL;
    CHECK_OK(st_detok_create(t, 0, &d));
    REQUIRE(d);
    /* "é€😀" byte by byte: byte tokens are ids 0..255 in byte-char order; find each */
    const uint8_t text[] = {0xC3, 0xA9, 0xE2, 0x82, 0xAC, 0xF0, 0x9F, 0x98, 0x80, 'x', 0xFF, 'y', 0xE2, 0x82};
    const int want_len[] = {0, 2, 0, 0, 3, 0, 0, 0, 4, 1, 1, 1, 0, 0};
    char all[64];
    size_t k = 0;
    for (size_t i = 0; i < sizeof text; i++) {
        char bc[4];
        int l = byte_char(text[i], bc);
        int32_t id = st_tok_find(t, bc, (size_t)l);
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
    CHECK_INT(n, 2); /* the truncated € at the end */
    memcpy(all + k, o, n);
    k += n;
    CHECK_INT(k, sizeof text);
    CHECK(!memcmp(all, text, sizeof text));
    /* control tokens vanish unless rendered */
    CHECK_OK(st_detok_feed(d, 259, &o, &n));
    CHECK_INT(n, 0);
    st_detok_destroy(d);
    CHECK_OK(st_detok_create(t, ST_DETOK_RENDER_SPECIAL, &d));
    CHECK_OK(st_detok_feed(d, 259, &o, &n));
    CHECK_INT(n, 13);
    CHECK_INT(st_detok_feed(d, -1, &o, &n), ST_E_INVAL);
    st_detok_destroy(d);
    st_detok_destroy(NULL);
    st_tok_destroy(t);
    st_ctx_destroy(ctx);
}

TEST(test_chat_detect_and_render) {
    struct {
        const char *tmpl;
        st_chat_tmpl want;
    } cases[] = {
        {"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n'}}{% endfor %}", ST_CHAT_CHATML},
        {"{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}", ST_CHAT_LLAMA3},
        {"{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}", ST_CHAT_LLAMA2_SYS_STRIP},
        {"{{ '[INST] <<SYS>>\\n' + system + '\\n<</SYS>>\\n\\n' }}", ST_CHAT_LLAMA2_SYS},
        {"{{'<|user|>' + '\\n' + message['content'] + '<|end|>' + '\\n' + '<|assistant|>'}}", ST_CHAT_PHI3},
        {"{{ '<start_of_turn>' + role + '\\n' }}", ST_CHAT_GEMMA},
        {"### Instruction:\\n{{ content }}\\n<|EOT|>", ST_CHAT_DEEPSEEK},
        {"{{ 'Assistant: ' + message['content'] + eos_token }}", ST_CHAT_DEEPSEEK2},
        {"<\xef\xbd\x9cUser\xef\xbd\x9c><\xef\xbd\x9c" "Assistant\xef\xbd\x9c><\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
         ST_CHAT_DEEPSEEK3},
        {"chatml", ST_CHAT_CHATML},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        st_chat_tmpl got = ST_CHAT_UNKNOWN;
        CHECK_OK(st_chat_detect(cases[i].tmpl, &got));
        if (got != cases[i].want) fprintf(stderr, "  case %zu: got %s\n", i, st_chat_name(got));
        CHECK_INT(got, cases[i].want);
    }
    st_chat_tmpl got;
    CHECK_INT(st_chat_detect("{{ messages }}", &got), ST_E_UNSUPPORTED);
    CHECK_INT(got, ST_CHAT_UNKNOWN);
    /* phi-4 uses <|im_start|> but is no chatml: refused, not mistaken */
    CHECK_INT(st_chat_detect("<|im_start|>{{role}}<|im_sep|>", &got), ST_E_UNSUPPORTED);
    CHECK_INT(st_chat_from_name("nope", &got), ST_E_NOT_FOUND);

    st_chat_msg msgs[] = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Bye"}};
    char *s = NULL;
    size_t n = 0;
    CHECK_OK(st_chat_render(ST_CHAT_CHATML, msgs, 2, true, &s, &n));
    CHECK_STR(s, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    free(s);
    CHECK_OK(st_chat_render(ST_CHAT_LLAMA3, msgs + 1, 1, true, &s, &n));
    CHECK_STR(s, "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
    free(s);
    CHECK_OK(st_chat_render(ST_CHAT_GEMMA, msgs, 2, true, &s, &n));
    CHECK_STR(s, "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n");
    free(s);
    CHECK_OK(st_chat_render(ST_CHAT_LLAMA2_SYS, msgs, 4, false, &s, &n));
    CHECK_STR(s, "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST]Hello!</s>[INST] Bye [/INST]");
    free(s);
    /* rendering a prefix of the conversation gives a prefix of the text (multi-turn KV reuse) */
    for (int tm = 1; tm < ST_CHAT_COUNT_; tm++) {
        char *full = NULL, *part = NULL;
        size_t nf = 0, np = 0;
        CHECK_OK(st_chat_render((st_chat_tmpl)tm, msgs, 4, false, &full, &nf));
        for (size_t k = 0; k < 4; k++) {
            CHECK_OK(st_chat_render((st_chat_tmpl)tm, msgs, k, false, &part, &np));
            if (np > nf || memcmp(part, full, np)) fprintf(stderr, "  %s: prefix %zu\n", st_chat_name((st_chat_tmpl)tm), k);
            CHECK(np <= nf && !memcmp(part, full, np));
            free(part);
        }
        free(full);
    }
    CHECK_INT(st_chat_render(ST_CHAT_UNKNOWN, msgs, 1, true, &s, &n), ST_E_INVAL);

    st_ctx *ctx = NULL;
    CHECK_OK(st_ctx_create(NULL, &ctx));
    st_tok *t = make_bpe(ctx, "gpt2", NULL, NULL);
    REQUIRE(t);
    CHECK_OK(st_chat_for_tok(ctx, t, NULL, &got));
    CHECK_INT(got, ST_CHAT_CHATML);
    CHECK_OK(st_chat_for_tok(ctx, t, "llama3", &got));
    CHECK_INT(got, ST_CHAT_LLAMA3);
    CHECK_INT(st_chat_for_tok(ctx, t, "bogus", &got), ST_E_NOT_FOUND);
    CHECK(strstr(st_ctx_error(ctx), "bogus") != NULL);
    st_tok_destroy(t);
    st_ctx_destroy(ctx);
}

TEST(test_bad_descriptions) {
    st_ctx *ctx = NULL;
    CHECK_OK(st_ctx_create(NULL, &ctx));
    st_tok *t = (st_tok *)1;
    st_tok_vocab_desc d = st_tok_vocab_desc_init();
    const char *tok[] = {"a", "b", "a"};
    d.model = "llama";
    d.n_tokens = 3;
    d.tokens = tok;
    CHECK_INT(st_tok_create(ctx, &d, NULL, &t), ST_E_FORMAT); /* duplicate */
    CHECK(t == NULL);
    CHECK(strstr(st_ctx_error(ctx), "duplicate") != NULL);
    d.model = "bert";
    CHECK_INT(st_tok_create(ctx, &d, NULL, &t), ST_E_UNSUPPORTED);
    d.model = "gpt2";
    d.n_tokens = 2;
    CHECK_INT(st_tok_create(ctx, &d, NULL, &t), ST_E_NOT_FOUND); /* no merges */
    d.model = "llama";
    d.bos_id = 5;
    CHECK_INT(st_tok_create(ctx, &d, NULL, &t), ST_E_FORMAT); /* id out of range */
    d.n_tokens = 0;
    CHECK_INT(st_tok_create(ctx, &d, NULL, &t), ST_E_LIMIT);
    st_tok_destroy(NULL);
    st_ctx_destroy(ctx);
}

TEST_MAIN(test_spm_merges_by_score, test_spm_roundtrip_random_bytes, test_bpe_merges_and_specials,
          test_bpe_unknown_pre_is_named, test_bpe_long_word_not_quadratic, test_bpe_roundtrip_random_utf8,
          test_detok_stream_never_splits_utf8, test_chat_detect_and_render, test_bad_descriptions)
