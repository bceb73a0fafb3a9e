/*
 * strata run --chat: a multi-turn chat whose KV sequence lives as long as the conversation.
 *
 * The conversation is a list of messages; each turn appends the user's line, renders the
 * whole list with the chat template (tok.h: rendering messages [0, k) is a prefix of
 * rendering [0, n)), and must get the KV sequence to hold the tokens of that rendering
 * before sampling the reply. Two ways to get there:
 *
 *   suffix mode   the KV accounts for a known prefix `acct` of the rendering (the text of
 *                 everything prefilled plus the replies as generated). The new part,
 *                 rendering[len(acct):], is tokenized alone (BOS only for the very first
 *                 turn) and prefilled: only the new turn's tokens are computed, and the
 *                 reply tokens stay exactly as sampled.
 *   retok mode    the whole rendering is tokenized; the KV is truncated to the longest
 *                 common prefix of those ids and the ids the KV holds, and the rest is
 *                 prefilled. Always correct (the KV then equals a fresh tokenization of the
 *                 conversation), possibly recomputing part of the last reply.
 *
 * Retok mode is used for the [INST] families (llama2 / mistral: SPM vocabularies, where a
 * piece tokenized alone gets a space prefix the whole text would not have, and templates
 * that strip content), and whenever `acct` is not a prefix of the new rendering (a reply
 * the template trims, a reply with a NUL byte, a failed forward): suffix mode only applies
 * when the text it assumes is provably the text rendered.
 *
 * Known limit of suffix mode (llama-cli has it too): the new text is tokenized apart from
 * what precedes it, so a tokenizer that treats the start of a text specially (SPM's space
 * prefix) or merges across the boundary may differ from a whole-text tokenization. With
 * the templates a GGUF ships this does not arise: the KV never holds the end-of-generation
 * token, so every new part starts with the template's closing marker, a special token.
 *
 * Invariants, checked every turn: ids[0, n_ids) are the tokens the KV sequence holds
 * (st_kv_prefix_covers), n_ids == its length, n_ids <= n_ctx. An end-of-generation token is
 * never put in the KV: the template's closing marker is part of the next turn's text, so
 * the KV always ends on a boundary the template can continue from.
 */
#include "cli/chat.h"
#include "cli/commands.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct chat {
    st_cli_session *s;
    const st_cli_chat_opts *o;
    st_chat_tmpl tmpl;
    bool retok_family;
    st_kv_seq_id seq;       /* the conversation's: lent to each turn's engine request */
    st_chat_msg *msgs;      /* [n_msgs] roles are literals; contents malloc'd, owned */
    size_t n_msgs, cap_msgs;
    int32_t *ids;           /* [n_ids] the tokens the KV sequence holds, cap n_ctx */
    int n_ids;
    char *acct;             /* [acct_len] rendered text the KV accounts for; NULL: unknown */
    size_t acct_len;
    char *reply;            /* [reply_len] bytes of the reply being generated */
    size_t reply_len, reply_cap;
} chat;

static int msg_push(chat *c, const char *role, const char *content, size_t len) {
    if (c->n_msgs == c->cap_msgs) {
        size_t cap = c->cap_msgs ? c->cap_msgs * 2 : 8;
        st_chat_msg *m = realloc(c->msgs, cap * sizeof *m);
        if (!m) return ST_E_NOMEM;
        c->msgs = m, c->cap_msgs = cap;
    }
    char *p = malloc(len + 1);
    if (!p) return ST_E_NOMEM;
    memcpy(p, content, len);
    p[len] = 0;
    c->msgs[c->n_msgs++] = (st_chat_msg){.role = role, .content = p};
    return 0;
}

static void msg_pop(chat *c) {
    ST_ASSERT(c->n_msgs > 0);
    free((char *)c->msgs[--c->n_msgs].content);
}

static void acct_clear(chat *c) {
    free(c->acct);
    c->acct = NULL, c->acct_len = 0;
}

/* The ids follow what the KV sequence holds (it records every token it was given). */
static int sync_ids(chat *c) {
    int64_t len = 0;
    int rc = st_kv_seq_len(c->s->kv, c->seq, &len);
    if (!rc && len > c->s->n_ctx) rc = ST_E_STATE;
    if (!rc && len) rc = st_kv_seq_tokens(c->s->kv, c->seq, 0, len, c->ids);
    c->n_ids = rc ? 0 : (int)len;
    return rc;
}

/* After a failed request the sequence was rolled back to some length; the ids up to it are
 * still right, the text accounting is not. */
static void resync(chat *c) {
    sync_ids(c);
    acct_clear(c);
}

/* Decides what to keep of the KV and what to prefill for rendering r[0, r_len): *keep ids
 * stay, (*toks)[0, *n_toks) follow (malloc'd). Reads nothing but c; changes nothing. */
static int plan(const chat *c, const char *r, size_t r_len, int *keep, int32_t **toks, int *n_toks, bool *suffix) {
    const st_tok *tok = c->s->tok;
    size_t done = c->n_ids == 0 ? 0 : c->acct_len; /* an empty KV accounts for "" */
    *suffix = !c->retok_family && (c->n_ids == 0 || (c->acct && r_len >= done && !memcmp(r, c->acct, done)));
    if (*suffix) {
        int rc = st_tok_encode_alloc(tok, r + done, r_len - done, c->n_ids == 0, true, toks, n_toks);
        if (rc) return rc;
        *keep = c->n_ids;
    } else {
        int32_t *all = NULL;
        int n_all = 0, lcp = 0;
        int rc = st_tok_encode_alloc(tok, r, r_len, true, true, &all, &n_all);
        if (rc) return rc;
        while (lcp < n_all && lcp < c->n_ids && all[lcp] == c->ids[lcp]) lcp++;
        memmove(all, all + lcp, (size_t)(n_all - lcp) * sizeof *all);
        *toks = all, *n_toks = n_all - lcp, *keep = lcp;
    }
    /* the last token must be computed again to get logits to sample from */
    if (*n_toks == 0 && *keep > 0) {
        int32_t *one = realloc(*toks, sizeof **toks);
        if (!one) return ST_E_NOMEM;
        *keep -= 1;
        one[0] = c->ids[*keep];
        *toks = one, *n_toks = 1;
    }
    return 0;
}

static int reply_put(chat *c, const char *p, size_t n) {
    if (!n) return 0;
    fwrite(p, 1, n, stdout);
    fflush(stdout);
    if (c->reply_len + n > c->reply_cap) {
        size_t cap = (c->reply_len + n) * 2;
        char *q = realloc(c->reply, cap);
        if (!q) return ST_E_NOMEM;
        c->reply = q, c->reply_cap = cap;
    }
    memcpy(c->reply + c->reply_len, p, n);
    c->reply_len += n;
    return 0;
}

/* One engine request continuing the conversation's sequence with toks[n]: at most max new
 * tokens (< 0: until the context is full; 0: only read toks), the reply streamed to stdout.
 * The sequence comes back to the chat at the finish, *fin says how it ended. */
static int request(chat *c, const int32_t *toks, int n, long long max, int turn_no, st_engine_event *fin,
                   double *t_first) {
    st_engine *e = c->o->engine;
    st_engine_req_params rp = st_engine_req_default_params();
    rp.tokens = toks, rp.n_tokens = n, rp.seq = c->seq, rp.keep_seq = 1;
    rp.max_tokens = max < 0 || max >= N_PREDICT_UNTIL_FULL ? -1 : (int32_t)max;
    rp.sampling = c->o->sp;
    rp.sampling.seed = c->o->sp.seed + (uint64_t)(turn_no - 1); /* each reply draws anew */
    st_req_id id;
    int rc = st_engine_submit(e, &rp, &id);
    if (rc) return rc;
    c->seq = -1; /* the engine's until the finish */
    st_cli_progress pb;
    st_cli_progress_begin(&pb, "prefill");
    st_cli_progress_attach(&pb, c->s->runner, n);
    const int32_t n_batch = st_engine_get_params(e)->n_batch;
    memset(fin, 0, sizeof *fin);
    *t_first = 0;
    while (!fin->finish) {
        st_engine_req_info info;
        if (st_engine_req_get_info(e, id, &info) == 0 && info.seq >= 0)
            st_cli_progress_step(&pb, info.n_tokens - (c->n_ids), n_batch);
        const st_engine_event *ev;
        int nev;
        if ((rc = st_engine_step(e, &ev, &nev)) && !nev) break;
        for (int k = 0; k < nev && !rc; k++) {
            if (ev[k].token >= 0 && !*t_first) {
                *t_first = st_time_now();
                st_cli_progress_end(&pb);
            }
            rc = reply_put(c, ev[k].text, ev[k].text_len);
            if (ev[k].finish) *fin = ev[k];
        }
        if (rc && !fin->finish) st_engine_cancel(e, id);
    }
    st_cli_progress_end(&pb);
    if (fin->seq >= 0) c->seq = fin->seq;
    return rc;
}

/* Prefills toks and samples until end of generation, -n tokens or a full context; every
 * emitted token ends in the KV, so the KV holds the whole reply. *why says why it stopped. */
static int generate(chat *c, const int32_t *toks, int n, int turn_no, int *n_gen, const char **why,
                    double *t_pre, double *t_gen) {
    c->reply_len = 0;
    *n_gen = 0, *why = "limit -n";
    st_engine_event fin;
    double t0 = st_time_now(), t_first = 0;
    int rc = request(c, toks, n, c->o->n_predict, turn_no, &fin, &t_first);
    const double t1 = st_time_now();
    *t_pre = (t_first ? t_first : t1) - t0;
    *t_gen = t_first ? t1 - t_first : 0;
    if (!rc && fin.finish == ST_FINISH_ERROR) rc = fin.error ? fin.error : ST_E_STATE;
    if (fin.finish) *n_gen = fin.stats.n_generated - (fin.finish == ST_FINISH_EOS);
    if (fin.finish == ST_FINISH_EOS) *why = "end of turn";
    if (fin.finish == ST_FINISH_CONTEXT) *why = "context full";
    if (rc && fin.finish == ST_FINISH_ERROR)
        fprintf(stderr, "strata chat: %s: %s\n", *n_gen ? "generation" : "prefill", fin.error_msg);
    if (rc) {
        fputc('\n', stdout);
        fflush(stdout);
        resync(c);
        return rc;
    }
    /* the last token drawn was not fed back: read it into the KV, as the reply's end */
    int32_t last = fin.token;
    if ((fin.finish == ST_FINISH_LENGTH || fin.finish == ST_FINISH_CONTEXT) && last >= 0 && !(rc = sync_ids(c)) &&
        c->n_ids < c->s->n_ctx) {
        rc = request(c, &last, 1, 0, turn_no, &fin, &t_first);
        if (!rc && fin.finish == ST_FINISH_ERROR) {
            rc = fin.error ? fin.error : ST_E_STATE;
            fprintf(stderr, "strata chat: generation: %s\n", fin.error_msg);
        }
    }
    fputc('\n', stdout);
    fflush(stdout);
    int src = sync_ids(c);
    if (rc) acct_clear(c);
    return rc ? rc : src;
}

/* After the reply: the KV holds acct + the reply's tokens. Suffix mode may continue only if
 * the rendering with the reply shows exactly those bytes after acct. */
static int account_reply(chat *c) {
    char *r = NULL;
    size_t r_len = 0;
    int rc = st_chat_render(c->tmpl, c->msgs, c->n_msgs, false, &r, &r_len);
    if (rc) return rc;
    size_t want = c->acct_len + c->reply_len;
    if (c->acct && r_len >= want && !memcmp(r, c->acct, c->acct_len) &&
        !memcmp(r + c->acct_len, c->reply, c->reply_len)) {
        free(c->acct);
        c->acct = r, c->acct_len = want;
    } else {
        free(r);
        acct_clear(c);
    }
    return 0;
}

static void report(int rc, chat *c, const char *what) {
    const char *e = st_ctx_error(c->s->ctx);
    fprintf(stderr, "strata chat: %s: %s\n", what, e && *e ? e : st_strerror(rc));
}

/* One user turn. Returns 0 (also when the turn was refused) or ST_E_NOMEM. */
static int turn(chat *c, const char *line, size_t len, int turn_no) {
    int rc = msg_push(c, "user", line, len);
    if (rc) return rc;
    char *r = NULL;
    size_t r_len = 0;
    int32_t *toks = NULL;
    int n_toks = 0, keep = 0, n_gen = 0;
    bool suffix = false;
    if ((rc = st_chat_render(c->tmpl, c->msgs, c->n_msgs, true, &r, &r_len)) ||
        (rc = plan(c, r, r_len, &keep, &toks, &n_toks, &suffix)))
        goto refuse;
    if ((int64_t)keep + n_toks + 1 > c->s->n_ctx) {
        fprintf(stderr, "strata chat: this turn needs %d more tokens after the %d kept, and the context holds %d "
                        "(at least one must be left to reply); /reset starts over\n",
                n_toks, keep, c->s->n_ctx);
        rc = 0;
        goto refuse;
    }
    if (keep < c->n_ids) {
        if ((rc = st_kv_seq_truncate(c->s->kv, c->seq, keep))) goto refuse;
        c->n_ids = keep;
    }
    int cov = 0;
    int64_t kv_len = -1;
    ST_ASSERT(st_kv_seq_len(c->s->kv, c->seq, &kv_len) == 0 && kv_len == c->n_ids);
    ST_ASSERT(st_kv_prefix_covers(c->s->kv, c->seq, c->ids, c->n_ids, &cov) == 0 && cov);
    const char *why;
    double t_pre = 0, t_gen = 0;
    const int n_before = c->n_ids;
    rc = generate(c, toks, n_toks, turn_no, &n_gen, &why, &t_pre, &t_gen);
    if (rc == ST_E_NOMEM) {
        free(toks);
        free(r);
        return rc;
    }
    if (rc && c->n_ids <= n_before) { /* the prompt was not read: the turn is refused */
        rc = 0;
        goto refuse;
    }
    if (!rc) {
        free(c->acct);
        c->acct = r, c->acct_len = r_len;
        r = NULL;
    }
    free(r);
    r = NULL;
    /* the reply (possibly cut short) is part of the conversation: its tokens are in the KV */
    if ((rc = msg_push(c, "assistant", c->reply ? c->reply : "", c->reply_len)) || (rc = account_reply(c))) {
        free(toks);
        return rc;
    }
    fprintf(stderr,
            "[turn %d: prefill %d new tokens (%d reused from KV, %s) %.1f tok/s; generated %d tokens %.1f tok/s "
            "(%s); context %d/%d]\n",
            turn_no, n_toks, keep, suffix ? "suffix" : "retokenized", t_pre > 0 ? n_toks / t_pre : 0.0, n_gen,
            t_gen > 0 ? n_gen / t_gen : 0.0, why, c->n_ids, c->s->n_ctx);
    free(toks);
    return 0;
refuse:
    free(r);
    free(toks);
    msg_pop(c);
    if (rc && rc != ST_E_NOMEM) report(rc, c, "turn refused");
    return rc == ST_E_NOMEM ? rc : 0;
}

static int reset(chat *c) {
    while (c->n_msgs > 0) msg_pop(c);
    acct_clear(c);
    int rc = st_kv_seq_truncate(c->s->kv, c->seq, 0);
    c->n_ids = 0;
    if (!rc && c->o->system) rc = msg_push(c, "system", c->o->system, strlen(c->o->system));
    return rc;
}

static void chat_free(chat *c) {
    while (c->n_msgs > 0) msg_pop(c);
    free(c->msgs);
    free(c->ids);
    free(c->acct);
    free(c->reply);
    if (c->seq >= 0) st_kv_seq_free(c->s->kv, c->seq);
}

int st_cli_chat(st_cli_session *s, const st_cli_chat_opts *o) {
    chat c = {.s = s, .o = o, .seq = -1};
    int rc = st_chat_for_tok(s->ctx, s->tok, o->template_name, &c.tmpl);
    if (rc) {
        fprintf(stderr, "strata run: %s\n", st_ctx_error(s->ctx));
        return st_cli_exit_code(rc);
    }
    c.retok_family = c.tmpl >= ST_CHAT_LLAMA2 && c.tmpl <= ST_CHAT_MISTRAL_V7;
    c.ids = malloc((size_t)s->n_ctx * sizeof *c.ids);
    rc = !c.ids ? ST_E_NOMEM : !o->engine ? ST_E_INVAL : 0;
    if (!rc) rc = st_kv_seq_create(s->kv, &c.seq);
    if (!rc) rc = reset(&c);
    if (rc) {
        report(rc, &c, "starting the chat");
        chat_free(&c);
        return st_cli_exit_code(rc);
    }
    bool tty = isatty(fileno(o->in));
    char limit[64];
    if (o->n_predict >= N_PREDICT_UNTIL_FULL) snprintf(limit, sizeof limit, "until the context is full");
    else snprintf(limit, sizeof limit, "up to %lld tokens a reply", o->n_predict);
    fprintf(stderr, "strata chat: template %s (%s), context %d tokens, %s; "
                    "/reset starts over, /exit or end of input (Ctrl-D) ends\n",
            st_chat_name(c.tmpl), c.retok_family ? "re-tokenized each turn" : "only new text prefilled",
            s->n_ctx, limit);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len = 0;
    int n_turn = 0;
    for (;;) {
        if (tty) fputs("> ", stderr);
        if ((len = getline(&line, &cap, o->in)) < 0) break;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (len == 0) continue;
        if (!strcmp(line, "/exit")) break;
        if (!strcmp(line, "/reset")) {
            if ((rc = reset(&c))) break;
            fprintf(stderr, "strata chat: conversation cleared\n");
            continue;
        }
        if (memchr(line, 0, (size_t)len)) {
            fprintf(stderr, "strata chat: the line holds a NUL byte; not sent\n");
            continue;
        }
        /* llama.cpp's conversation mode turns \n, \t, ... of an input line into the bytes */
        if (o->escape) len = (ssize_t)st_cli_prompt_text(line, (size_t)len, 0, 1);
        if ((rc = turn(&c, line, (size_t)len, ++n_turn))) break;
    }
    if (rc) report(rc, &c, "chat");
    if (tty && len < 0) fputc('\n', stderr);
    free(line);
    chat_free(&c);
    return rc ? st_cli_exit_code(rc) : 0;
}
