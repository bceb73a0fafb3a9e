/* OpenAI's request and response shapes: a JSON body into an engine request (every field's
 * type checked and named when wrong), and the engine's results into completion objects,
 * stream chunks and errors, with llama-server's `timings` beside OpenAI's `usage`. */
#include "server/server_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void srv_req_free(srv_req *q) {
    free(q->tokens);
    free(q->sess_file);
    for (int i = 0; i < q->n_stop; i++) free(q->stop[i]);
    memset(q, 0, sizeof *q);
}

#define BAD(...) (snprintf(msg, cap, __VA_ARGS__), 400)

/* A number field: absent leaves *out as it is. */
static int num_field(json_t *o, const char *key, double lo, double hi, double *out, char *msg, size_t cap) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return BAD("'%s' must be a number", key);
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi)) return BAD("'%s' is %g, outside [%g, %g]", key, d, lo, hi);
    *out = d;
    return 0;
}

static int int_field(json_t *o, const char *key, long long lo, long long hi, long long *out, char *msg, size_t cap) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) return BAD("'%s' must be an integer", key);
    long long n = json_integer_value(v);
    if (n < lo || n > hi) return BAD("'%s' is %lld, outside [%lld, %lld]", key, n, lo, hi);
    *out = n;
    return 0;
}

static int bool_field(json_t *o, const char *key, int *out, char *msg, size_t cap) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return BAD("'%s' must be true or false", key);
    *out = json_is_true(v);
    return 0;
}

static int tokenize(const st_tok *tok, const char *text, size_t len, int add_special, srv_req *q, char *msg,
                    size_t cap) {
    int n = 0;
    int rc = st_tok_encode_alloc(tok, text, len, add_special, true, &q->tokens, &n);
    if (rc) return BAD("the prompt cannot be tokenized: %s", st_strerror(rc));
    q->n_tokens = n;
    return 0;
}

static int prompt_field(json_t *o, const st_tok *tok, int32_t n_vocab, srv_req *q, char *msg, size_t cap) {
    json_t *v = json_object_get(o, "prompt");
    if (!v) return BAD("'prompt' is required");
    if (json_is_string(v)) return tokenize(tok, json_string_value(v), json_string_length(v), 1, q, msg, cap);
    if (!json_is_array(v)) return BAD("'prompt' must be a string or an array of token ids");
    const size_t n = json_array_size(v);
    if (!n) return BAD("'prompt' is empty");
    if (n > (1u << 24)) return BAD("'prompt' has %zu tokens", n);
    if (!(q->tokens = malloc(n * sizeof *q->tokens))) return BAD("out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(v, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= n_vocab)
            return BAD("'prompt[%zu]' must be a token id in [0, %d)", i, n_vocab);
        q->tokens[i] = (int32_t)json_integer_value(t);
    }
    q->n_tokens = (int32_t)n;
    return 0;
}

int srv_render_messages(json_t *o, st_chat_tmpl tmpl, char **text, size_t *len, char *msg, size_t cap) {
    *text = NULL, *len = 0;
    json_t *v = json_object_get(o, "messages");
    if (!v) return BAD("'messages' is required");
    if (!json_is_array(v) || !json_array_size(v)) return BAD("'messages' must be a non-empty array");
    const size_t n = json_array_size(v);
    st_chat_msg *m = calloc(n, sizeof *m);
    if (!m) return BAD("out of memory");
    int st = 0;
    for (size_t i = 0; i < n && !st; i++) {
        json_t *e = json_array_get(v, i), *role = json_object_get(e, "role"), *content = json_object_get(e, "content");
        if (!json_is_object(e)) st = BAD("'messages[%zu]' must be an object", i);
        else if (!json_is_string(role)) st = BAD("'messages[%zu].role' must be a string", i);
        else if (strcmp(json_string_value(role), "system") && strcmp(json_string_value(role), "user") &&
                 strcmp(json_string_value(role), "assistant"))
            st = BAD("'messages[%zu].role' is '%s', not system, user or assistant", i, json_string_value(role));
        else if (!json_is_string(content)) st = BAD("'messages[%zu].content' must be a string", i);
        else if (strlen(json_string_value(content)) != json_string_length(content))
            st = BAD("'messages[%zu].content' holds a NUL character", i);
        else m[i] = (st_chat_msg){.role = json_string_value(role), .content = json_string_value(content)};
    }
    /* llama-server's add_generation_prompt: a session saves a conversation without it, so
     * that its tokens begin the next turn's */
    json_t *ag = json_object_get(o, "add_generation_prompt");
    if (!st && ag && !json_is_boolean(ag)) st = BAD("'add_generation_prompt' must be a boolean");
    if (!st && st_chat_render(tmpl, m, n, !ag || json_is_true(ag), text, len)) st = BAD("'messages' cannot be rendered");
    free(m);
    return st;
}

static int messages_field(json_t *o, const st_tok *tok, st_chat_tmpl tmpl, srv_req *q, char *msg, size_t cap) {
    char *text = NULL;
    size_t len = 0;
    int st = srv_render_messages(o, tmpl, &text, &len, msg, cap);
    /* the rendered text holds no BOS: tokenized with it and with special tokens (tok.h) */
    if (!st) st = tokenize(tok, text, len, 1, q, msg, cap);
    free(text);
    return st;
}

static int stop_field(json_t *o, srv_req *q, char *msg, size_t cap) {
    json_t *v = json_object_get(o, "stop");
    if (!v || json_is_null(v)) return 0;
    json_t *one[1] = {v};
    const size_t n = json_is_array(v) ? json_array_size(v) : 1;
    if (!json_is_array(v) && !json_is_string(v)) return BAD("'stop' must be a string or an array of strings");
    if (n > 16) return BAD("'stop' has %zu strings (at most 16)", n);
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_array(v) ? json_array_get(v, i) : one[0];
        if (!json_is_string(s) || !json_string_length(s) || json_string_length(s) > 255)
            return BAD("'stop[%zu]' must be a string of 1 to 255 bytes", i);
        if (!(q->stop[q->n_stop] = strdup(json_string_value(s)))) return BAD("out of memory");
        q->n_stop++;
    }
    return 0;
}

static int bias_field(json_t *o, int32_t n_vocab, srv_req *q, char *msg, size_t cap) {
    json_t *v = json_object_get(o, "logit_bias");
    if (!v || json_is_null(v)) return 0;
    if (!json_is_object(v)) return BAD("'logit_bias' must be an object of token id to bias");
    const char *key;
    json_t *b;
    json_object_foreach(v, key, b) {
        char *end;
        long id = strtol(key, &end, 10);
        if (!*key || *end || id < 0 || id >= n_vocab) return BAD("'logit_bias' key '%s' is not a token id", key);
        if (!json_is_number(b)) return BAD("'logit_bias[%s]' must be a number", key);
        if (q->n_bias == (int)(sizeof q->bias / sizeof q->bias[0])) return BAD("'logit_bias' has over 256 entries");
        /* OpenAI's range is [-100, 100]; -100 bans the token as llama-server takes it */
        double d = json_number_value(b);
        q->bias[q->n_bias++] = (st_engine_bias){(int32_t)id, d <= -100 ? -INFINITY : (float)d};
    }
    return 0;
}

int srv_parse_request(const char *body, size_t len, int chat, const st_tok *tok, int32_t n_vocab,
                      st_chat_tmpl tmpl, int tmpl_ok, srv_req *q, char *msg, size_t cap) {
    memset(q, 0, sizeof *q);
    q->chat = chat;
    q->rp = st_engine_req_default_params();
    q->rp.max_tokens = -1; /* OpenAI's default: until the end of the text or the context */
    json_error_t je;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    int st = 0;
    double d;
    long long n;
    if (!o) return BAD("malformed JSON at line %d, column %d: %s", je.line, je.column, je.text);
    if (!json_is_object(o)) st = BAD("the body must be a JSON object");
    if (!st && chat && !tmpl_ok) st = BAD("this model has no chat template strata knows: use /v1/completions");
    if (!st) st = chat ? messages_field(o, tok, tmpl, q, msg, cap) : prompt_field(o, tok, n_vocab, q, msg, cap);
    if (!st) st = bool_field(o, "stream", &q->stream, msg, cap);
    if (!st) st = bool_field(o, "ignore_eos", &q->rp.ignore_eos, msg, cap); /* llama-server's */
    json_t *so = json_object_get(o, "stream_options");
    if (!st && so && !json_is_null(so)) {
        if (!json_is_object(so)) st = BAD("'stream_options' must be an object");
        else st = bool_field(so, "include_usage", &q->include_usage, msg, cap);
    }
    n = -1;
    if (!st) st = int_field(o, chat ? "max_completion_tokens" : "max_tokens", -1, 1 << 30, &n, msg, cap);
    if (!st && chat && n < 0) st = int_field(o, "max_tokens", -1, 1 << 30, &n, msg, cap);
    q->rp.max_tokens = (int32_t)n;
    st_sampler_params *sp = &q->rp.sampling;
    /* OpenAI's defaults: temperature 1, top_p 1; llama-server's top-k 40 and min-p 0.05 */
    sp->temp = 1.0f, sp->top_p = 1.0f;
    d = sp->temp;
    if (!st && !(st = num_field(o, "temperature", 0, 100, &d, msg, cap))) sp->temp = (float)d;
    d = sp->top_p;
    if (!st && !(st = num_field(o, "top_p", 0, 1, &d, msg, cap))) sp->top_p = (float)d;
    d = sp->min_p;
    if (!st && !(st = num_field(o, "min_p", 0, 1, &d, msg, cap))) sp->min_p = (float)d;
    n = sp->top_k;
    if (!st && !(st = int_field(o, "top_k", -1, 1 << 30, &n, msg, cap))) sp->top_k = (int32_t)n;
    d = 0;
    if (!st && !(st = num_field(o, "presence_penalty", -2, 2, &d, msg, cap))) sp->presence_penalty = (float)d;
    d = 0;
    if (!st && !(st = num_field(o, "frequency_penalty", -2, 2, &d, msg, cap))) sp->freq_penalty = (float)d;
    n = (long long)sp->seed;
    if (!st && !(st = int_field(o, "seed", 0, (long long)(~0ull >> 1), &n, msg, cap))) sp->seed = (uint64_t)n;
    n = 1;
    if (!st && !(st = int_field(o, "n", 1, 1 << 20, &n, msg, cap)) && n != 1)
        st = BAD("'n' is %lld: only one choice per request is served", n);
    /* speculative decoding: absent means the server's --spec-ngram */
    n = -1;
    if (!st && !(st = int_field(o, "spec_ngram", 0, ST_ENGINE_MAX_NGRAM, &n, msg, cap))) q->rp.spec_ngram = (int32_t)n;
    n = 0;
    if (!st && !(st = int_field(o, "draft_max", 1, ST_ENGINE_MAX_DRAFT, &n, msg, cap))) q->rp.draft_max = (int32_t)n;
    /* drafting with the server's draft model (-md): absent means on when one is loaded */
    int on_draft = -1;
    if (!st && !(st = bool_field(o, "spec_draft", &on_draft, msg, cap)) && on_draft >= 0) q->rp.spec_draft = on_draft;
    q->logprobs = -1;
    json_t *lp = json_object_get(o, "logprobs");
    if (!st && lp && !json_is_null(lp)) {
        if (chat) {
            int on = 0;
            n = 0;
            if (!(st = bool_field(o, "logprobs", &on, msg, cap)) &&
                !(st = int_field(o, "top_logprobs", 0, ST_ENGINE_MAX_LOGPROBS, &n, msg, cap)))
                q->logprobs = on ? (int)n : -1;
        } else {
            n = 0;
            if (!(st = int_field(o, "logprobs", 0, ST_ENGINE_MAX_LOGPROBS, &n, msg, cap))) q->logprobs = (int)n;
        }
    } else if (!st && chat && json_object_get(o, "top_logprobs") && !json_is_null(json_object_get(o, "top_logprobs"))) {
        st = BAD("'top_logprobs' needs 'logprobs': true");
    }
    q->rp.n_logprobs = q->logprobs;
    if (!st) st = stop_field(o, q, msg, cap);
    if (!st) st = bias_field(o, n_vocab, q, msg, cap);
    json_decref(o);
    if (st) {
        srv_req_free(q);
        return st;
    }
    q->rp.tokens = q->tokens, q->rp.n_tokens = q->n_tokens;
    q->rp.stop = (const char *const *)q->stop, q->rp.n_stop = q->n_stop;
    q->rp.bias = q->bias, q->rp.n_bias = q->n_bias;
    return 0;
}

const char *srv_finish_reason(st_finish f) {
    return f == ST_FINISH_LENGTH || f == ST_FINISH_CONTEXT ? "length" : "stop";
}

/* JSON strings must be UTF-8; a model may write any bytes (a byte token, a character cut
 * short at the end of the text): each byte that does not start a valid sequence becomes
 * U+FFFD, as browsers and Python's errors="replace" show it. */
static json_t *utf8_string(const char *s, size_t n) {
    char *o = malloc(3 * n + 1);
    if (!o) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        const unsigned char c = (unsigned char)s[i];
        size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 && c >= 0xC2 ? 2 : (c & 0xF0) == 0xE0 ? 3
                                  : (c & 0xF8) == 0xF0 && c <= 0xF4                          ? 4
                                                                                               : 0;
        int ok = len && i + len <= n;
        for (size_t j = 1; ok && j < len; j++) ok = ((unsigned char)s[i + j] & 0xC0) == 0x80;
        if (ok && len == 3) {
            const unsigned c1 = (unsigned char)s[i + 1];
            ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0); /* overlong, surrogates */
        }
        if (ok && len == 4) {
            const unsigned c1 = (unsigned char)s[i + 1];
            ok = !(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 >= 0x90);
        }
        if (ok && c) {
            memcpy(o + k, s + i, len);
            k += len, i += len;
        } else {
            memcpy(o + k, "\xEF\xBF\xBD", 3);
            k += 3, i++;
        }
    }
    json_t *j = json_stringn(o, k);
    free(o);
    return j;
}

static json_t *piece(const srv_chan *c, int32_t id, json_t **bytes) {
    const char *p = "";
    size_t n = 0;
    st_tok_piece(c->tok, id, &p, &n);
    if (bytes) {
        *bytes = json_array();
        for (size_t i = 0; i < n; i++) json_array_append_new(*bytes, json_integer((unsigned char)p[i]));
    }
    return utf8_string(p, n);
}

void srv_logprobs_add(srv_chan *c, json_t **acc, const st_engine_event *ev) {
    if (c->chat) {
        if (!*acc) *acc = json_pack("{s:[]}", "content");
        json_t *bytes, *top = json_array();
        for (int i = 0; i < ev->n_top; i++) {
            json_t *b;
            json_t *t = piece(c, ev->top[i].token, &b);
            json_array_append_new(top, json_pack("{s:o, s:f, s:o}", "token", t, "logprob", (double)ev->top[i].logprob,
                                                 "bytes", b));
        }
        json_t *t = piece(c, ev->token, &bytes);
        json_array_append_new(json_object_get(*acc, "content"),
                              json_pack("{s:o, s:f, s:o, s:o}", "token", t, "logprob", (double)ev->logprob, "bytes",
                                        bytes, "top_logprobs", top));
        return;
    }
    if (!*acc) *acc = json_pack("{s:[], s:[], s:[], s:[]}", "tokens", "token_logprobs", "top_logprobs", "text_offset");
    json_t *top = json_object();
    for (int i = 0; i < ev->n_top; i++) {
        /* keyed by text: two tokens with one text keep the likelier (listed first) */
        json_t *t = piece(c, ev->top[i].token, NULL);
        if (!json_object_get(top, json_string_value(t)))
            json_object_set_new(top, json_string_value(t), json_real(ev->top[i].logprob));
        json_decref(t);
    }
    json_array_append_new(json_object_get(*acc, "tokens"), piece(c, ev->token, NULL));
    json_array_append_new(json_object_get(*acc, "token_logprobs"), json_real(ev->logprob));
    json_array_append_new(json_object_get(*acc, "top_logprobs"), top);
    json_array_append_new(json_object_get(*acc, "text_offset"), json_integer((json_int_t)c->lp_offset));
    const char *p = "";
    size_t n = 0;
    st_tok_piece(c->tok, ev->token, &p, &n);
    c->lp_offset += n;
}

static json_t *envelope(const srv_chan *c, const char *object) {
    char id[64];
    snprintf(id, sizeof id, "%s-%lld", c->chat ? "chatcmpl" : "cmpl", (long long)c->id);
    return json_pack("{s:s, s:s, s:I, s:s}", "id", id, "object", object, "created", (json_int_t)c->created, "model",
                     c->model_id);
}

json_t *srv_chunk(const srv_chan *c, const char *text, size_t n, const char *finish) {
    json_t *o = envelope(c, c->chat ? "chat.completion.chunk" : "text_completion");
    json_t *ch = c->chat ? json_pack("{s:i, s:{s:o}, s:o}", "index", 0, "delta", "content", utf8_string(text, n),
                                     "finish_reason", finish ? json_string(finish) : json_null())
                         : json_pack("{s:i, s:o, s:n, s:o}", "index", 0, "text", utf8_string(text, n), "logprobs",
                                     "finish_reason", finish ? json_string(finish) : json_null());
    if (c->chat && !c->sent_role) json_object_set_new(json_object_get(ch, "delta"), "role", json_string("assistant"));
    json_object_set_new(o, "choices", json_pack("[o]", ch));
    return o;
}

/* A resumed session's sequence holds the first n_resumed prompt tokens: the engine counts
 * only the rest as its prompt, and those as cached. */
static json_t *usage(const srv_chan *c) {
    const st_engine_req_stats *s = &c->fin.stats;
    const int np = s->n_prompt + c->n_resumed;
    return json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", np, "completion_tokens", c->n_gen,
                     "total_tokens", np + c->n_gen, "prompt_tokens_details", "cached_tokens", s->n_cached);
}

/* llama-server's timings: prompt = submit to first token (the computed part of the prompt),
 * predicted = the tokens after it. */
static json_t *timings(const srv_chan *c) {
    const st_engine_req_stats *s = &c->fin.stats;
    const double pms = s->t_first * 1e3, gms = (s->t_total - s->t_first) * 1e3;
    const int pn = s->n_prompt + c->n_resumed - s->n_cached, gn = c->n_gen > 0 ? c->n_gen - 1 : 0;
    return json_pack("{s:i, s:i, s:f, s:f, s:i, s:f, s:f}", "cache_n", s->n_cached, "prompt_n", pn, "prompt_ms", pms,
                     "prompt_per_second", pms > 0 ? pn / (pms / 1e3) : 0.0, "predicted_n", gn, "predicted_ms", gms,
                     "predicted_per_second", gms > 0 ? gn / (gms / 1e3) : 0.0);
}

json_t *srv_usage_chunk(const srv_chan *c) {
    json_t *o = envelope(c, c->chat ? "chat.completion.chunk" : "text_completion");
    json_object_set_new(o, "choices", json_array());
    json_object_set_new(o, "usage", usage(c));
    json_object_set_new(o, "timings", timings(c));
    return o;
}

json_t *srv_response(const srv_chan *c) {
    json_t *o = envelope(c, c->chat ? "chat.completion" : "text_completion");
    const char *fr = srv_finish_reason(c->fin.finish);
    const char *t = c->text ? c->text : "";
    json_t *ch = c->chat ? json_pack("{s:i, s:{s:s, s:o}, s:s}", "index", 0, "message", "role", "assistant", "content",
                                     utf8_string(t, c->n_text), "finish_reason", fr)
                         : json_pack("{s:i, s:o, s:n, s:s}", "index", 0, "text", utf8_string(t, c->n_text),
                                     "logprobs", "finish_reason", fr);
    if (c->lp) json_object_set(ch, "logprobs", c->lp);
    json_object_set_new(o, "choices", json_pack("[o]", ch));
    json_object_set_new(o, "usage", usage(c));
    json_object_set_new(o, "timings", timings(c));
    return o;
}

json_t *srv_text(const char *s, size_t n) { return utf8_string(s, n); }

json_t *srv_error(int status, const char *msg) {
    const char *type = status == 401   ? "authentication_error"
                       : status == 404 ? "not_found_error"
                       : status == 503 ? "unavailable_error"
                       : status >= 500 ? "server_error"
                                       : "invalid_request_error";
    return json_pack("{s:{s:o, s:s, s:i}}", "error", "message", utf8_string(msg, strlen(msg)), "type", type, "code",
                     status);
}

json_t *srv_error_reason(int status, const char *reason, const char *msg) {
    json_t *e = srv_error(status, msg);
    json_object_set_new(json_object_get(e, "error"), "reason", json_string(reason));
    return e;
}

const char *srv_reject_name(srv_reject r) {
    static const char *const names[SRV_REJECT_N] = {"queue_full", "kv_budget", "queue_timeout", "invalid"};
    return r >= 0 && r < SRV_REJECT_N ? names[r] : "";
}

/* ---- llama-server's token endpoints ------------------------------------------------------ */

enum MHD_Result srv_tokenize_ep(st_server *s, struct MHD_Connection *con, const char *body, size_t len) {
    json_error_t je;
    json_t *o = json_loadb(body, len, 0, &je), *content = o ? json_object_get(o, "content") : NULL;
    if (!o) return srv_send_error(con, 400, "malformed JSON at line %d, column %d: %s", je.line, je.column, je.text);
    if (!json_is_string(content)) {
        json_decref(o);
        return srv_send_error(con, 400, "'content' must be a string");
    }
    json_t *as = json_object_get(o, "add_special");
    int32_t *ids = NULL;
    int n = 0;
    int rc = st_tok_encode_alloc(s->tok, json_string_value(content), json_string_length(content),
                                 as && json_is_true(as), true, &ids, &n);
    json_decref(o);
    if (rc) return srv_send_error(con, 400, "the content cannot be tokenized: %s", st_strerror(rc));
    json_t *arr = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(arr, json_integer(ids[i]));
    free(ids);
    return srv_send_json(con, 200, json_pack("{s:o}", "tokens", arr));
}

enum MHD_Result srv_detokenize_ep(st_server *s, struct MHD_Connection *con, const char *body, size_t len) {
    json_error_t je;
    json_t *o = json_loadb(body, len, 0, &je), *toks = o ? json_object_get(o, "tokens") : NULL;
    if (!o) return srv_send_error(con, 400, "malformed JSON at line %d, column %d: %s", je.line, je.column, je.text);
    const size_t n = json_is_array(toks) ? json_array_size(toks) : 0;
    int32_t *ids = n ? malloc(n * sizeof *ids) : NULL;
    int bad = !json_is_array(toks) || (n && !ids);
    for (size_t i = 0; !bad && i < n; i++) {
        json_t *t = json_array_get(toks, i);
        bad = !json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= s->n_vocab;
        if (!bad) ids[i] = (int32_t)json_integer_value(t);
    }
    json_decref(o);
    if (bad) {
        free(ids);
        return srv_send_error(con, 400, "'tokens' must be an array of token ids in [0, %d)", s->n_vocab);
    }
    size_t need = 0;
    char *text = NULL;
    int rc = st_tok_decode(s->tok, ids, (int)n, 0, NULL, 0, &need);
    if (rc == ST_E_LIMIT || (!rc && need)) {
        text = malloc(need + 1);
        rc = text ? st_tok_decode(s->tok, ids, (int)n, 0, text, need, &need) : ST_E_NOMEM;
    }
    free(ids);
    json_t *r = rc ? NULL : json_pack("{s:o}", "content", srv_text(text ? text : "", text ? need : 0));
    free(text);
    return rc ? srv_send_error(con, 500, "%s", st_strerror(rc)) : srv_send_json(con, 200, r);
}

/* llama-server's /apply-template: the prompt a chat request would be given. */
enum MHD_Result srv_apply_template_ep(st_server *s, struct MHD_Connection *con, const char *body, size_t len) {
    if (!s->tmpl_ok) return srv_send_error(con, 400, "this model has no chat template strata knows");
    json_error_t je;
    json_t *o = json_loadb(body, len, 0, &je);
    if (!o) return srv_send_error(con, 400, "malformed JSON at line %d, column %d: %s", je.line, je.column, je.text);
    char msg[1024], *text = NULL;
    size_t n = 0;
    int st = json_is_object(o) ? srv_render_messages(o, s->tmpl, &text, &n, msg, sizeof msg)
                               : (snprintf(msg, sizeof msg, "the body must be a JSON object"), 400);
    json_decref(o);
    if (st) return srv_send_error(con, st, "%s", msg);
    json_t *r = json_pack("{s:o}", "prompt", srv_text(text, n));
    free(text);
    return srv_send_json(con, 200, r);
}
