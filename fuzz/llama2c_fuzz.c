/* libFuzzer target for the llama2.c checkpoint and tokenizer.bin reader
 * (st_llama2c_convert_memory).
 *
 * Whatever the bytes, the converter either refuses them with a message and no output, or
 * writes a GGUF that opens, holds the checkpoint's 3 + 9 * n_layers tensors and its vocabulary,
 * loads as a model, and loads as a tokenizer or is refused by it with a message.
 *
 * Input: byte 0's bit 0 picks the weight type (f32 or q8_0). Bit 1 clear: bytes 1-4 are the
 * checkpoint's length (u32, modulo what is left), then the checkpoint, then the tokenizer.
 * Bit 1 set: the rest patches a valid pair (a 1-layer, dim-32 checkpoint, then its 260-token
 * tokenizer, as one buffer split where the checkpoint ended: fuzz_patch.h's edits, and a cut
 * that shortens the tokenizer, or the checkpoint and leaves no tokenizer). */
#include "strata/model.h"
#include "strata/tok.h"
#include "fuzz_patch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_CHECK(c)                                                                   \
    do {                                                                                \
        if (!(c)) {                                                                     \
            fprintf(stderr, "llama2c_fuzz: check failed: %s (line %d)\n", #c, __LINE__);\
            abort();                                                                    \
        }                                                                               \
    } while (0)

static uint8_t *valid_pair(size_t *model_len, size_t *len) {
    const int32_t h[7] = {32, 32, 1, 2, 2, 260, 4};
    const size_t floats = 260 * 32 + 32 + 4 * 32 * 32 + 32 + 3 * 32 * 32 + 32 + 2 * 4 * 8;
    *model_len = 28 + 4 * floats;
    uint8_t *b = calloc(1, *model_len + 4 + 260 * 16), *o = b + *model_len;
    memcpy(b, h, 28);
    for (size_t i = 0; i < floats; i++) {
        const float v = (float)((int)(i % 17) - 8) / 16.0f;
        memcpy(b + 28 + 4 * i, &v, 4);
    }
    const int32_t max_len = 8;
    memcpy(o, &max_len, 4), o += 4;
    for (int32_t i = 0; i < 260; i++) {
        char piece[8];
        int32_t n = i == 0 ? 5 : i < 3 ? 3 : i < 259 ? 1 : 2;
        if (i == 0) memcpy(piece, "<unk>", 5);
        else if (i < 3) memcpy(piece, i == 1 ? "<s>" : "/s>", 3);
        else if (i < 259) piece[0] = (char)(i - 3);
        else memcpy(piece, " a", 2);
        const float score = (float)-i;
        memcpy(o, &score, 4), memcpy(o + 4, &n, 4), memcpy(o + 8, piece, (size_t)n);
        o += 8 + n;
    }
    *len = (size_t)(o - b);
    return b;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static uint8_t *valid;
    static size_t valid_model, valid_len;
    if (!valid) valid = valid_pair(&valid_model, &valid_len);
    const st_llama2c_params p = {.type = data[0] & 1 ? ST_TYPE_Q8_0 : ST_TYPE_F32};
    uint8_t *buf;
    size_t model_len, len;
    if (data[0] & 2) {
        buf = malloc(valid_len);
        memcpy(buf, valid, valid_len);
        len = fuzz_patch(buf, valid_len, data + 1, size - 1);
        model_len = len < valid_model ? len : valid_model;
    } else {
        if (size < 5) return 0;
        uint32_t ml;
        memcpy(&ml, data + 1, 4);
        len = size - 5;
        model_len = len ? ml % (len + 1) : 0;
        buf = malloc(len ? len : 1);
        memcpy(buf, data + 5, len);
    }
    st_ctx *ctx = NULL;
    FUZZ_CHECK(st_ctx_create(NULL, &ctx) == 0);
    void *out = NULL;
    size_t out_len = 0;
    const int rc = st_llama2c_convert_memory(ctx, buf, model_len, buf + model_len, len - model_len, &p, &out, &out_len);
    if (rc) {
        FUZZ_CHECK(out == NULL && out_len == 0);
        FUZZ_CHECK(rc == ST_E_NOMEM || *st_ctx_error(ctx));
    } else {
        int32_t h[7];
        memcpy(h, buf, 28);
        st_gguf *g = NULL;
        FUZZ_CHECK(st_gguf_open_memory(ctx, out, out_len, "converted", &g) == 0);
        FUZZ_CHECK(st_gguf_n_tensors(g) == 3 + 9 * (int64_t)h[2]);
        st_gguf_vtype et;
        uint64_t n = 0;
        const void *d;
        FUZZ_CHECK(st_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &d) == 0);
        FUZZ_CHECK(n == (uint64_t)(h[5] < 0 ? -(int64_t)h[5] : h[5]));
        st_model *m = NULL;
        if (st_model_load_memory(ctx, out, out_len, "converted", &m)) {
            fprintf(stderr, "llama2c_fuzz: the converted model does not load: %s\n", st_ctx_error(ctx));
            abort();
        }
        st_tok *tok = NULL;
        if (st_tok_load(ctx, g, NULL, &tok) == 0) {
            int32_t ids[64];
            int k = 0;
            FUZZ_CHECK(st_tok_encode(tok, "a ab", 4, true, false, ids, 64, &k) == 0);
            for (int i = 0; i < k; i++) FUZZ_CHECK(ids[i] >= 0 && ids[i] < (int32_t)n);
            st_tok_destroy(tok);
        } else {
            FUZZ_CHECK(*st_ctx_error(ctx));
        }
        st_model_destroy(m);
        st_gguf_close(g);
        free(out);
    }
    free(buf);
    st_ctx_destroy(ctx);
    return 0;
}
