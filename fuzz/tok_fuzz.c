/* libFuzzer target: the first bytes pick the vocabulary kind and flags, the rest is text.
 * Encodes (with and without special parsing), decodes, and streams the ids back out,
 * checking the invariants every input must keep: ids in range, the byte-level BPE round
 * trip exact on valid UTF-8 (qwen2 pre-tokenizer: no space clean-up), the stream's output
 * equal to the batch decode. */
#include "strata/tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static st_tok *g_tok[2];

static st_tok *make(int bpe) {
    static char bytes[256][8];
    const char *tok[300];
    int32_t type[300];
    int n = 0;
    if (!bpe) tok[n] = "<unk>", type[n++] = 2, tok[n] = "<s>", type[n++] = 3, tok[n] = "</s>", type[n++] = 3;
    for (int b = 0; b < 256; b++) {
        if (bpe) {
            unsigned cp = b <= 0x20 ? 256 + b : (b >= 0x7F && b <= 0xA0) ? 256 + 33 + (b - 0x7F) : b == 0xAD ? 256 + 67 : b;
            if (cp < 0x80) bytes[b][0] = (char)cp, bytes[b][1] = 0;
            else bytes[b][0] = (char)(0xC0 | (cp >> 6)), bytes[b][1] = (char)(0x80 | (cp & 0x3F)), bytes[b][2] = 0;
        } else {
            snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        }
        tok[n] = bytes[b], type[n++] = bpe ? 1 : 6;
    }
    const char *extra[] = {"he", "the", "\xe2\x96\x81t", "<|im_end|>", "<u>"};
    const int32_t et[] = {1, 1, 1, 3, 4};
    for (int i = 0; i < 5; i++) tok[n] = extra[i], type[n++] = et[i];
    const char *merges[] = {"h e", "t he"};
    st_tok_vocab_desc d = st_tok_vocab_desc_init();
    d.model = bpe ? "gpt2" : "llama";
    d.pre = "qwen2";
    d.n_tokens = n;
    d.tokens = tok;
    d.types = type;
    d.merges = merges;
    d.n_merges = 2;
    st_tok *t = NULL;
    if (st_tok_create(NULL, &d, NULL, &t)) abort();
    return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (!g_tok[0]) g_tok[0] = make(0), g_tok[1] = make(1);
    const st_tok *t = g_tok[data[0] & 1];
    bool special = data[0] & 2;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int32_t *ids = NULL;
    int n = 0;
    if (st_tok_encode_alloc(t, text, len, data[0] & 4, special, &ids, &n)) abort();
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= st_tok_n_vocab(t)) abort();
    size_t cap = len * 4 + 64, nd = 0;
    char *out = malloc(cap);
    if (st_tok_decode(t, ids, n, ST_DETOK_RENDER_SPECIAL, out, cap, &nd)) abort();
    /* the stream gives the same bytes as the batch decode (no SPM space removal) */
    st_detok *d = NULL;
    if (st_detok_create(t, ST_DETOK_RENDER_SPECIAL | (st_tok_get_kind(t) == ST_TOK_SPM ? ST_DETOK_STRIP_LEADING_SPACE : 0), &d))
        abort();
    char *s = malloc(cap);
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        const char *o;
        size_t l;
        if (st_detok_feed(d, ids[i], &o, &l) || k + l > cap) abort();
        memcpy(s + k, o, l), k += l;
    }
    const char *o;
    size_t l;
    if (st_detok_flush(d, &o, &l)) abort();
    memcpy(s + k, o, l), k += l;
    if (k != nd || memcmp(s, out, k)) abort();
    st_detok_destroy(d);
    free(s);
    free(out);
    free(ids);
    return 0;
}
