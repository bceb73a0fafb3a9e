/*
 * Pre-tokenizers of byte-level BPE vocabularies: tokenizer.ggml.pre -> a list of split
 * regexes, as llama.cpp's llm_tokenizer_bpe defines them, run with PCRE2 (UTF, Unicode
 * properties, JIT).
 *
 * Semantics copied from llama.cpp's unicode_regex_split: the regexes apply one after the
 * other; each splits every piece the previous ones made, and the text between two matches
 * is a piece too (nothing is dropped). A match never looks outside its piece (the subject
 * handed to PCRE2 is the piece alone), and '$' means the piece's end (DOLLAR_ENDONLY).
 *
 * llama.cpp runs \s through std::regex over a "collapsed" text where every non-ASCII
 * white-space code point became \v; so \s means ASCII white space plus Unicode White_Space.
 * PCRE2's own \s differs (U+0085), so \s and \S are rewritten into that explicit class.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tok/tok_int.h"

#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RX_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RX_CONTR "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RX_LLAMA3 RX_CONTR "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RX_QWEN2 RX_CONTR "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RX_QWEN35 RX_CONTR "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RX_CJK "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"
#define RX_PORO " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+"
#define RX_TEKKEN_WORD "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+"
#define RX_TEKKEN_WORD2 "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*"

/* deepseek-llm's letter class, spelled out in llama.cpp */
#define RX_DSLLM_LETTERS \
    "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}" \
    "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}" \
    "\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}" \
    "\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}" \
    "\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}" \
    "\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}" \
    "\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}" \
    "\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}" \
    "\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}" \
    "\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}" \
    "\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}" \
    "\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}" \
    "\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}" \
    "\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}" \
    "\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}" \
    "\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+"
/* \s?[!-/:-~！-／：-～‘-‟　-。]+ */
#define RX_DSLLM_PUNCT "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+"

typedef struct pre_def {
    const char *names; /* '|'-separated tokenizer.ggml.pre values; the first is canonical */
    bool ignore_merges, clean_spaces, add_bos;
    const char *rx[ST_PRE_MAX_REGEX];
} pre_def;

static const pre_def k_pre[] = {
    {"default", 0, 1, 0,
     {"[\\p{P}\\$\\+<=>\\^~\\|]+", RX_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}},
    {"llama3|llama-v3|llama-bpe|falcon3|falcon-h1|pixtral|midm-2.0|lfm2|jina-v5-nano", 1, 1, 1, {RX_LLAMA3}},
    {"dbrx|smaug-bpe", 0, 1, 0, {RX_LLAMA3}},
    {"deepseek-llm", 0, 0, 0,
     {"[\r\n]", RX_DSLLM_LETTERS, RX_DSLLM_PUNCT, "\\s+$", RX_CJK, "\\p{N}+"}},
    {"deepseek-coder", 0, 0, 0, {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RX_CJK, "\\p{N}"}},
    {"deepseek-v3", 0, 0, 0,
     {"\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
      "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"}},
    {"falcon", 0, 1, 0,
     {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RX_GPT2, "[0-9][0-9][0-9]"}},
    {"gpt2|gpt-2|mpt|olmo|jais|phi-2|jina-es|jina-de|gigachat|jina-v2-es|jina-v2-de|a.x-4.0|mellum|modern-bert|exaone4",
     0, 1, 0, {RX_GPT2}},
    {"trillion|granite-docling", 0, 0, 0, {RX_GPT2}},
    {"starcoder|refact|codeshell|exaone|minerva-7b|mellum2", 0, 1, 0, {"\\p{N}", RX_GPT2}},
    {"smollm|command-r", 0, 0, 0, {"\\p{N}", RX_GPT2}},
    {"qwen2|deepseek-r1-qwen|kormo|f2llmv2|hunyuan|solar-open|grok-2", 0, 0, 0, {RX_QWEN2}},
    {"stablelm2|megrez", 0, 1, 0, {RX_QWEN2}},
    {"qwen35", 0, 0, 0, {RX_QWEN35}},
    {"poro-chat", 0, 0, 0, {RX_PORO}},
    {"bloom|gpt3-finnish", 0, 1, 0, {RX_PORO}},
    {"viking", 0, 0, 0, {RX_PORO, "\\p{N}"}},
    {"tekken", 1, 0, 1,
     {RX_TEKKEN_WORD "|" RX_TEKKEN_WORD2 "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
    {"gpt-4o|llama4|kanana2|talkie", 0, 0, 0,
     {RX_TEKKEN_WORD RX_CONTR "?|" RX_TEKKEN_WORD2 RX_CONTR
      "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
    {"seed-coder", 0, 0, 0,
     {RX_CONTR "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
};

static bool name_in(const char *names, const char *name, size_t *canon_len) {
    size_t nl = strlen(name);
    const char *p = names;
    *canon_len = strcspn(names, "|");
    for (;;) {
        size_t l = strcspn(p, "|");
        if (l == nl && !memcmp(p, name, l)) return true;
        if (!p[l]) return false;
        p += l + 1;
    }
}

static const pre_def *find_pre(const char *name) {
    size_t cl;
    for (size_t i = 0; i < sizeof k_pre / sizeof k_pre[0]; i++)
        if (name_in(k_pre[i].names, name, &cl)) return &k_pre[i];
    return NULL;
}

const char *st_pretok_canonical(const char *pre, bool *ignore_merges, bool *clean_spaces, bool *add_bos) {
    const pre_def *d = find_pre(pre);
    if (!d) return NULL;
    *ignore_merges = d->ignore_merges;
    *clean_spaces = d->clean_spaces;
    *add_bos = d->add_bos;
    return pre; /* the name as given is fine for messages; init looks it up again */
}

#define WS_CLASS "\\t\\n\\v\\f\\r \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"

/* \s -> [WS], \S -> [^WS]; inside a class \s -> WS (llama.cpp never writes \S in one). */
static char *rewrite_ws(const char *rx) {
    size_t n = strlen(rx);
    char *o = malloc(n * 24 + 1);
    if (!o) return NULL;
    size_t k = 0;
    bool in_class = false;
    for (size_t i = 0; i < n; i++) {
        char c = rx[i];
        if (c == '\\' && i + 1 < n) {
            char d = rx[i + 1];
            if (d == 's' || d == 'S') {
                const char *rep = in_class ? WS_CLASS : d == 's' ? "[" WS_CLASS "]" : "[^" WS_CLASS "]";
                size_t l = strlen(rep);
                memcpy(o + k, rep, l);
                k += l;
            } else {
                o[k++] = c;
                o[k++] = d;
            }
            i++;
            continue;
        }
        if (c == '[' && !in_class) in_class = true;
        else if (c == ']' && in_class) in_class = false;
        o[k++] = c;
    }
    o[k] = 0;
    return o;
}

int st_pretok_init(st_ctx *ctx, st_pretok *p, const char *name) {
    memset(p, 0, sizeof *p);
    const pre_def *d = find_pre(name);
    if (!d) return st_seterr(ctx, ST_E_UNSUPPORTED, "unknown pre-tokenizer type: '%s'", name);
    p->name = d->names;
    for (int i = 0; i < ST_PRE_MAX_REGEX && d->rx[i]; i++) {
        char *rx = rewrite_ws(d->rx[i]);
        if (!rx) {
            st_pretok_free(p);
            return ST_E_NOMEM;
        }
        int errc = 0;
        PCRE2_SIZE erroff = 0;
        pcre2_code *code = pcre2_compile((PCRE2_SPTR)rx, PCRE2_ZERO_TERMINATED,
                                         PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &errc, &erroff, NULL);
        free(rx);
        if (!code) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(errc, msg, sizeof msg);
            st_pretok_free(p);
            /* a bug in the table above, but reported rather than aborting */
            return st_seterr(ctx, ST_E_UNSUPPORTED, "pre-tokenizer '%s' regex %d: %s at %zu", name, i, (char *)msg,
                             (size_t)erroff);
        }
        (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE); /* interpreter fallback if JIT is unavailable */
        p->code[p->n_regex++] = code;
    }
    return 0;
}

void st_pretok_free(st_pretok *p) {
    for (int i = 0; i < p->n_regex; i++) pcre2_code_free(p->code[i]);
    p->n_regex = 0;
}

static int spans_push(st_spans *s, size_t end) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 256;
        uint32_t *e = realloc(s->end, cap * sizeof *e);
        if (!e) return ST_E_NOMEM;
        s->end = e;
        s->cap = cap;
    }
    s->end[s->n++] = (uint32_t)end;
    return 0;
}

static size_t utf8_next(const char *t, size_t i, size_t n) {
    i++;
    while (i < n && ((uint8_t)t[i] & 0xC0) == 0x80) i++;
    return i;
}

/* Splits piece [b, e) of text with one regex, appending word ends to out. */
static int split_piece(pcre2_code *code, pcre2_match_data *md, const char *text, size_t b, size_t e, st_spans *out) {
    const PCRE2_SPTR subj = (PCRE2_SPTR)(text + b);
    const size_t len = e - b;
    size_t start = 0, prev = 0;
    int rc;
    while (start < len) {
        int m = pcre2_match(code, subj, len, start, PCRE2_NO_UTF_CHECK, md, NULL);
        if (m == PCRE2_ERROR_NOMATCH) break;
        if (m < 0) return ST_E_LIMIT; /* match limit: pathological input */
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) { /* empty match: step one character */
            start = utf8_next((const char *)subj, ms, len);
            continue;
        }
        if (ms > prev && (rc = spans_push(out, b + ms))) return rc;
        if ((rc = spans_push(out, b + me))) return rc;
        prev = start = me;
    }
    if (prev < len && (rc = spans_push(out, e))) return rc;
    return 0;
}

int st_pretok_split(const st_pretok *p, const char *text, size_t n, st_spans *out) {
    out->n = 0;
    if (n == 0) return 0;
    int rc = spans_push(out, n);
    if (rc) return rc;
    if (p->n_regex == 0) return 0;
    pcre2_match_data *md = pcre2_match_data_create(4, NULL);
    if (!md) return ST_E_NOMEM;
    st_spans tmp = {0};
    for (int r = 0; r < p->n_regex && rc == 0; r++) {
        tmp.n = 0;
        size_t b = 0;
        for (size_t i = 0; i < out->n && rc == 0; i++) {
            rc = split_piece(p->code[r], md, text, b, out->end[i], &tmp);
            b = out->end[i];
        }
        st_spans sw = *out;
        *out = tmp;
        tmp = sw;
    }
    free(tmp.end);
    pcre2_match_data_free(md);
    return rc;
}
