/* libFuzzer target: a request body through the server's JSON-to-request mapping
 * (srv_parse_request), as /v1/completions (first byte even) or /v1/chat/completions (odd).
 * Checks what every input must keep: either a 4xx status with a message, or a request whose
 * prompt ids lie in the vocabulary, whose stops and biases are within their limits, and which
 * the response builders turn into JSON. */
#include "server/server_int.h"

#include <stdlib.h>
#include <string.h>

static st_tok *g_tok;

/* A byte-level SPM vocabulary like the built-in model's (<unk> <s> </s>, then 256 bytes). */
static st_tok *make(void) {
    static char bytes[256][8];
    const char *tok[262];
    int32_t type[262];
    int n = 0;
    tok[n] = "<unk>", type[n++] = 2, tok[n] = "<s>", type[n++] = 3, tok[n] = "</s>", type[n++] = 3;
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        tok[n] = bytes[b], type[n++] = 6;
    }
    st_tok_vocab_desc d = st_tok_vocab_desc_init();
    d.model = "llama";
    d.n_tokens = n;
    d.tokens = tok;
    d.types = type;
    st_tok *t = NULL;
    if (st_tok_create(NULL, &d, NULL, &t)) abort();
    return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (!g_tok) g_tok = make();
    const int chat = data[0] & 1;
    srv_req q;
    char msg[512];
    const int32_t n_vocab = st_tok_n_vocab(g_tok);
    int st = srv_parse_request((const char *)data + 1, size - 1, chat, g_tok, n_vocab, ST_CHAT_CHATML, 1, &q, msg,
                               sizeof msg);
    if (st) {
        if (st < 400 || st > 499 || !*msg) abort();
        return 0;
    }
    if (q.n_tokens < 1 || q.rp.n_tokens != q.n_tokens || q.n_stop > 16 || q.n_bias > 256) abort();
    for (int32_t i = 0; i < q.n_tokens; i++)
        if (q.tokens[i] < 0 || q.tokens[i] >= n_vocab) abort();
    for (int i = 0; i < q.n_stop; i++)
        if (!q.stop[i] || !*q.stop[i] || strlen(q.stop[i]) > 255) abort();
    for (int i = 0; i < q.n_bias; i++)
        if (q.bias[i].token < 0 || q.bias[i].token >= n_vocab) abort();
    /* the response builders on a text made of the prompt's bytes (any bytes: invalid UTF-8) */
    srv_chan c;
    memset(&c, 0, sizeof c);
    c.chat = chat, c.model_id = "m", c.id = 1;
    c.text = (char *)data + 1, c.n_text = size - 1;
    c.fin.finish = ST_FINISH_LENGTH;
    json_t *objs[3] = {srv_response(&c), srv_chunk(&c, c.text, c.n_text, NULL), srv_usage_chunk(&c)};
    for (int i = 0; i < 3; i++) {
        char *j = objs[i] ? json_dumps(objs[i], JSON_COMPACT) : NULL;
        if (!j) abort();
        free(j);
        json_decref(objs[i]);
    }
    srv_req_free(&q);
    return 0;
}
