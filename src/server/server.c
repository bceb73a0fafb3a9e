/* The HTTP side: libmicrohttpd with a thread per connection, routing, authentication, body
 * limits, and the scheduler thread that owns the engine.
 *
 * Locking: one mutex guards the engine and every channel. The scheduler holds it for a step
 * (so submissions wait at most one step) and wakes each channel whose request produced
 * the connections (one condition variable: each rechecks its own channel). A channel is
 * freed by whichever of its two holders (the connection, the engine's request) lets go last,
 * so a client that disconnects mid-stream leaves nothing dangling: its request is cancelled
 * and the engine's finish event drops the last reference. */
#include "server/server_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <xxhash.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- channels ----------------------------------------------------------------------------- */

srv_chan *srv_chan_new(st_server *s, int chat, int stream, int include_usage, int logprobs) {
    srv_chan *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->refs = 1;
    c->fd = -1;
    c->logprobs = logprobs;
    c->tok = s->tok;
    c->chat = chat, c->stream = stream, c->include_usage = include_usage;
    c->created = (long long)time(NULL);
    c->model_id = s->model_id;
    return c;
}

/* Under the lock. */
static void chan_link(st_server *s, srv_chan *c) {
    c->next = s->chans;
    if (s->chans) s->chans->prev = c;
    s->chans = c;
}

void srv_chan_unref(st_server *s, srv_chan *c) {
    if (--c->refs > 0) return;
    pthread_cond_broadcast(&s->progress); /* st_server_drain counts the channels */
    if (c->prev) c->prev->next = c->next;
    else if (s->chans == c) s->chans = c->next;
    if (c->next) c->next->prev = c->prev;
    json_decref(c->lp);
    free(c->prompt);
    free(c->snap);
    free(c->text);
    free(c->out);
    free(c);
}

static int buf_add(char **b, size_t *n, size_t *cap, const char *s, size_t k) {
    if (*n + k + 1 > *cap) {
        size_t nc = *cap ? *cap * 2 : 1024;
        while (nc < *n + k + 1) nc *= 2;
        char *nb = realloc(*b, nc);
        if (!nb) return -1;
        *b = nb, *cap = nc;
    }
    memcpy(*b + *n, s, k);
    *n += k;
    (*b)[*n] = 0;
    return 0;
}

/* One SSE event "data: JSON\n\n" (o consumed). */
static void sse(srv_chan *c, json_t *o) {
    char *j = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!j) return;
    buf_add(&c->out, &c->n_out, &c->cap_out, "data: ", 6);
    buf_add(&c->out, &c->n_out, &c->cap_out, j, strlen(j));
    buf_add(&c->out, &c->n_out, &c->cap_out, "\n\n", 2);
    free(j);
}

/* The scheduler hands an event to its channel (under the lock). */
static void deliver(st_server *s, srv_chan *c, const st_engine_event *ev) {
    if (ev->token >= 0 && ev->finish != ST_FINISH_EOS) c->n_gen++;
    if (c->stream) {
        /* a chunk per generated token, as llama-server streams (its text may be empty: held
         * back for a stop string or an unfinished character, or a token that writes none) */
        if (ev->text_len || (ev->token >= 0 && ev->finish != ST_FINISH_EOS)) {
            json_t *ch = srv_chunk(c, ev->text, ev->text_len, NULL);
            if (ev->has_logprob && ch) {
                json_t *lp = NULL;
                srv_logprobs_add(c, &lp, ev);
                json_object_set_new(json_array_get(json_object_get(ch, "choices"), 0), "logprobs", lp);
            }
            sse(c, ch);
            c->sent_role = 1;
        }
        if (!ev->finish && !c->overrun && c->n_out - c->off_out > s->max_stream_buffer) {
            /* the client stopped reading: buffering on would grow without bound. The stream's
             * context is alive (its free takes this lock), so its socket is still this
             * connection's, and shutting it ends the connection's blocked send now. */
            c->overrun = 1;
            s->overruns++;
            st_engine_cancel(s->e, c->id);
            if (c->fd >= 0) shutdown(c->fd, SHUT_RDWR);
        }
    } else {
        buf_add(&c->text, &c->n_text, &c->cap_text, ev->text, ev->text_len);
        if (ev->has_logprob && ev->finish != ST_FINISH_EOS) srv_logprobs_add(c, &c->lp, ev);
    }
    if (!ev->finish) return;
    c->fin = *ev;
    c->fin.text = NULL, c->fin.error_msg = NULL;
    snprintf(c->err, sizeof c->err, "%s", ev->error_msg);
    if (c->stream) {
        if (ev->finish == ST_FINISH_ERROR) {
            sse(c, srv_error(500, c->err));
        } else if (ev->finish != ST_FINISH_CANCELLED) {
            sse(c, srv_chunk(c, "", 0, srv_finish_reason(ev->finish)));
            if (c->include_usage) sse(c, srv_usage_chunk(c));
        }
        buf_add(&c->out, &c->n_out, &c->cap_out, "data: [DONE]\n\n", 14);
    }
    c->done = 1;
}

/* The connections' submissions and cancellations, into the engine (under the lock). */
static void collect(st_server *s) {
    for (srv_chan *c = s->chans; c; c = c->next) {
        if (c->submit) {
            srv_req *q = c->submit;
            c->submit_rc = srv_session_restore(s, q, c->err, sizeof c->err);
            if (!c->submit_rc) {
                c->submit_rc = st_engine_submit(s->e, &q->rp, &c->id);
                if (c->submit_rc) snprintf(c->err, sizeof c->err, "%s", st_ctx_error(st_engine_ctx(s->e)));
                /* a restored sequence passes to the engine only when the submit succeeds */
                if (c->submit_rc && q->rp.seq >= 0) st_kv_seq_free(st_engine_kv(s->e), q->rp.seq);
                if (!c->submit_rc)
                    c->refs++, c->engine_ref = 1, c->n_resumed = q->n_resumed, c->t_submit = st_time_now();
            }
            c->submit = NULL, c->submitted = 1;
        }
        if (c->cancel && c->engine_ref) st_engine_cancel(s->e, c->id);
        c->cancel = 0;
    }
    srv_ops_collect(s);
    s->pending = 0;
    st_engine_get_stats(s->e, &s->est);
    pthread_cond_broadcast(&s->progress);
}

/* One step, outside the lock, then its events to their channels (under it). */
static void step(st_server *s) {
    const st_engine_event *ev;
    int n = 0;
    pthread_mutex_unlock(&s->mu);
    st_engine_step(s->e, &ev, &n); /* an error of the step finishes its requests: events */
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < n; i++) {
        srv_chan *c = ev[i].user;
        if (ev[i].seq >= 0) srv_session_capture(s, c, &ev[i]);
        deliver(s, c, &ev[i]);
        srv_ops_event(s, c, &ev[i]);
        if (ev[i].finish) c->engine_ref = 0, srv_chan_unref(s, c);
    }
    const st_kv_stats before = s->kst;
    st_engine_get_stats(s->e, &s->est);
    st_kv_get_stats(st_engine_kv(s->e), &s->kst);
    srv_ops_step(s, &before);
    if (n) pthread_cond_broadcast(&s->progress);
}

/* Requests still waiting for admission: the admitted ones are told (a stream answers once
 * its request runs), and one past the queue timeout is cancelled with the reason it waited
 * for: every slot busy, or a slot free but not the pages its prompt and max_tokens may need
 * (under the lock). Returns whether a channel changed. */
static int watch_waiting(st_server *s) {
    const double now = st_time_now();
    int changed = 0;
    for (srv_chan *c = s->chans; c; c = c->next) {
        if (!c->engine_ref || c->admitted || c->reject) continue;
        st_engine_req_info info;
        if (st_engine_req_get_info(s->e, c->id, &info)) continue;
        if (info.state != ST_REQ_WAITING) {
            c->admitted = changed = 1;
        } else if (s->queue_timeout > 0 && now - c->t_submit > s->queue_timeout) {
            const srv_reject r = s->est.running < st_engine_get_params(s->e)->n_parallel ? SRV_REJECT_KV_BUDGET
                                                                                         : SRV_REJECT_QUEUE_TIMEOUT;
            c->reject = (int)r + 1;
            s->rejected[r]++;
            st_engine_cancel(s->e, c->id);
        }
    }
    return changed;
}

/* Waits on the work condition for at most ms milliseconds (under the lock). */
static void wait_work(st_server *s, int ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&s->work, &s->mu, &ts);
}

static void *scheduler(void *arg) {
    st_server *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        if (s->pending) {
            collect(s);
        } else if (st_engine_n_active(s->e)) {
            const int64_t steps = s->est.steps;
            step(s);
            /* a step with nothing to run (every request waiting on pages others hold) must not
             * spin; the waiting ones still time out */
            if (s->est.steps == steps && !s->pending) wait_work(s, 20);
        } else {
            pthread_cond_wait(&s->work, &s->mu);
        }
        if (watch_waiting(s)) pthread_cond_broadcast(&s->progress);
    }
    /* stopping: every request is cancelled, and its finish releases the engine's references */
    collect(s);
    for (srv_chan *c = s->chans; c; c = c->next)
        if (c->engine_ref) st_engine_cancel(s->e, c->id);
    while (st_engine_n_active(s->e)) step(s);
    pthread_cond_broadcast(&s->progress);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* A connection asks for its request to be cancelled (under the lock). */
static void ask_cancel(st_server *s, srv_chan *c) {
    if (!c->engine_ref) return;
    c->cancel = 1;
    s->pending = 1;
    pthread_cond_signal(&s->work);
}

/* ---- responses ------------------------------------------------------------------------------ */

enum MHD_Result srv_send_json(struct MHD_Connection *con, int status, json_t *o) {
    char *j = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!j) return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(j), j, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", "application/json");
    if (status == 503) MHD_add_response_header(r, "Retry-After", "1");
    enum MHD_Result ok = MHD_queue_response(con, (unsigned)status, r);
    MHD_destroy_response(r);
    return ok;
}

enum MHD_Result srv_send_error(struct MHD_Connection *con, int status, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return srv_send_json(con, status, srv_error(status, msg));
}

/* The stream's body: blocks until its request has something to say (a thread per
 * connection may block here). */
typedef struct stream_ctx {
    st_server *s;
    srv_chan *c;
    int fd; /* the connection's socket, to see the client hang up */
} stream_ctx;

/* The client closed its side (a read would see the end, or the socket failed). libmicrohttpd
 * notices only when a send fails and frees the response later still, so the stream looks for
 * itself each time it wakes, and a request whose client left stops at the next step. */
static int client_gone(int fd) {
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return fd >= 0 && poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream_ctx *x = cls;
    srv_chan *c = x->c;
    pthread_mutex_lock(&x->s->mu);
    while (c->off_out == c->n_out && !c->done && !x->s->stop && !client_gone(x->fd))
        pthread_cond_wait(&x->s->progress, &x->s->mu);
    ssize_t n;
    if (c->off_out < c->n_out) {
        n = (ssize_t)(c->n_out - c->off_out < max ? c->n_out - c->off_out : max);
        memcpy(buf, c->out + c->off_out, (size_t)n);
        c->off_out += (size_t)n;
        if (c->off_out == c->n_out) c->off_out = c->n_out = 0; /* the buffer holds only what is unread */
    } else if (c->done) {
        n = MHD_CONTENT_READER_END_OF_STREAM;
    } else { /* the client left, or the server stops */
        ask_cancel(x->s, c);
        n = MHD_CONTENT_READER_END_WITH_ERROR;
    }
    pthread_mutex_unlock(&x->s->mu);
    return n;
}

/* The connection let go of the stream (finished, or the client went away: then its request
 * is cancelled and stops at the next step). */
static void stream_free(void *cls) {
    stream_ctx *x = cls;
    pthread_mutex_lock(&x->s->mu);
    x->c->fd = -1; /* the connection may close its socket from now on */
    ask_cancel(x->s, x->c);
    srv_chan_unref(x->s, x->c);
    pthread_mutex_unlock(&x->s->mu);
    free(x);
}

int srv_chan_submit(st_server *s, srv_chan *c, srv_req *q, char *msg, size_t cap) {
    q->rp.user = c;
    pthread_mutex_lock(&s->mu);
    /* a full queue is answered here, not after the step the scheduler may be in (a long
     * prefill step would hold the refusal as long): the requests handed over or not yet
     * admitted are counted, which is at least the engine's queue (admissions of the running
     * step are seen after it), so this refuses no later and at most one step earlier */
    const int max_queue = st_engine_get_params(s->e)->max_queue;
    int queued = 0;
    for (const srv_chan *k = s->chans; k; k = k->next)
        queued += k->submit != NULL || (k->engine_ref && !k->admitted && !k->reject);
    if (queued >= max_queue) {
        srv_chan_unref(s, c);
        pthread_mutex_unlock(&s->mu);
        snprintf(msg, cap, "%d requests are waiting already (the queue's limit)", max_queue);
        return ST_E_QUEUE_FULL;
    }
    c->submit = q;
    chan_link(s, c);
    s->pending = 1;
    pthread_cond_signal(&s->work);
    while (!c->submitted && !s->stop) pthread_cond_wait(&s->progress, &s->mu);
    const int rc = c->submitted ? c->submit_rc : ST_E_STATE;
    if (rc) snprintf(msg, cap, "%s", c->submitted ? c->err : "the server is stopping");
    c->submit = NULL;
    if (rc) srv_chan_unref(s, c);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* ---- endpoints ------------------------------------------------------------------------------ */

/* The refusal of a request the scheduler gave up on while it waited (c->reject). */
static enum MHD_Result send_reject(struct MHD_Connection *con, const st_server *s, const srv_chan *c) {
    const srv_reject r = (srv_reject)(c->reject - 1);
    char msg[256];
    if (r == SRV_REJECT_KV_BUDGET)
        snprintf(msg, sizeof msg, "the KV cache could not hold this request's pages within %.0f s; retry later",
                 s->queue_timeout);
    else
        snprintf(msg, sizeof msg, "every slot stayed busy for %.0f s; retry later", s->queue_timeout);
    return srv_send_json(con, 503, srv_error_reason(503, srv_reject_name(r), msg));
}

/* Waits for c under the lock until done(c) or the stop, every quarter second looking whether
 * the client left (then its request is cancelled: nobody would read the answer). */
static void wait_chan(st_server *s, srv_chan *c, int fd, int (*done)(const srv_chan *)) {
    while (!done(c) && !s->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 250L * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&s->progress, &s->mu, &ts);
        if (!done(c) && client_gone(fd)) ask_cancel(s, c);
    }
}

static int chan_started(const srv_chan *c) { return c->admitted || c->done; }
static int chan_done(const srv_chan *c) { return c->done; }

static enum MHD_Result completion(st_server *s, struct MHD_Connection *con, const char *tenant, const char *body,
                                  size_t len, int chat) {
    srv_req q;
    char msg[1024];
    int st = srv_parse_request(body, len, chat, s->tok, s->n_vocab, s->tmpl, s->tmpl_ok, &q, msg, sizeof msg);
    if (st == 400) srv_reject_add(s, SRV_REJECT_INVALID);
    if (st) return srv_send_error(con, st, "%s", msg);
    if (q.n_tokens >= s->n_ctx) {
        srv_reject_add(s, SRV_REJECT_INVALID);
        json_t *e = srv_error(400, "the prompt is longer than the context");
        json_object_set_new(json_object_get(e, "error"), "n_prompt_tokens", json_integer(q.n_tokens));
        json_object_set_new(json_object_get(e, "error"), "n_ctx", json_integer(s->n_ctx));
        srv_req_free(&q);
        return srv_send_json(con, 400, e);
    }
    if ((st = srv_session_prepare(s, tenant, body, len, &q, msg, sizeof msg))) {
        srv_req_free(&q);
        return srv_send_error(con, st, "%s", msg);
    }
    srv_chan *c = srv_chan_new(s, chat, q.stream, q.include_usage, q.logprobs);
    if (!c) {
        srv_req_free(&q);
        return srv_send_error(con, 500, "out of memory");
    }
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(con, MHD_CONNECTION_INFO_CONNECTION_FD);
    const int fd = ci ? ci->connect_fd : -1;
    if (s->slots_text && (c->prompt = malloc((size_t)q.n_tokens * sizeof *c->prompt)))
        memcpy(c->prompt, q.tokens, (size_t)q.n_tokens * sizeof *c->prompt), c->n_prompt = q.n_tokens;
    const int rc = srv_chan_submit(s, c, &q, msg, sizeof msg);
    const int sess_failed = q.sess_failed;
    srv_req_free(&q);
    if (rc == ST_E_QUEUE_FULL || (rc && rc != ST_E_NOMEM && rc != ST_E_STATE && rc != ST_E_POOL_FULL && !sess_failed))
        srv_reject_add(s, rc == ST_E_QUEUE_FULL ? SRV_REJECT_QUEUE_FULL : SRV_REJECT_INVALID);
    if (rc == ST_E_QUEUE_FULL) return srv_send_json(con, 503, srv_error_reason(503, "queue_full", msg));
    if (rc == ST_E_POOL_FULL) return srv_send_json(con, 503, srv_error_reason(503, "kv_budget", msg));
    if (rc == ST_E_STATE) return srv_send_json(con, 503, srv_error_reason(503, "stopping", msg));
    if (rc) return srv_send_error(con, rc == ST_E_NOMEM ? 500 : sess_failed ? 409 : 400, "%s", msg);
    if (c->stream) {
        /* the status line waits for the admission: a request refused while it waited gets a
         * 503, not a 200 stream that breaks */
        pthread_mutex_lock(&s->mu);
        wait_chan(s, c, fd, chan_started);
        if (c->reject || !chan_started(c)) {
            enum MHD_Result ok = c->reject ? send_reject(con, s, c)
                                           : srv_send_json(con, 503, srv_error_reason(503, "stopping", "the server is stopping"));
            ask_cancel(s, c);
            srv_chan_unref(s, c);
            pthread_mutex_unlock(&s->mu);
            return ok;
        }
        pthread_mutex_unlock(&s->mu);
        stream_ctx *x = malloc(sizeof *x);
        struct MHD_Response *r = x ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, x,
                                                                       stream_free)
                                   : NULL;
        if (!r) {
            free(x);
            pthread_mutex_lock(&s->mu);
            ask_cancel(s, c);
            srv_chan_unref(s, c);
            pthread_mutex_unlock(&s->mu);
            return MHD_NO;
        }
        x->s = s, x->c = c, x->fd = fd;
        pthread_mutex_lock(&s->mu);
        c->fd = fd;
        pthread_mutex_unlock(&s->mu);
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        enum MHD_Result ok = MHD_queue_response(con, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        return ok;
    }
    pthread_mutex_lock(&s->mu);
    wait_chan(s, c, fd, chan_done);
    enum MHD_Result ok;
    if (c->reject) {
        ok = send_reject(con, s, c);
    } else {
        json_t *o = !c->done ? srv_error_reason(503, "stopping", "the server is stopping")
                    : c->fin.finish == ST_FINISH_ERROR ? srv_error(500, c->err)
                                                        : srv_response(c);
        const int status = !c->done ? 503 : c->fin.finish == ST_FINISH_ERROR ? 500 : 200;
        ok = srv_send_json(con, status, o);
    }
    ask_cancel(s, c);
    srv_chan_unref(s, c);
    pthread_mutex_unlock(&s->mu);
    return ok;
}

/* ---- the access handler ------------------------------------------------------------------------ */

typedef struct conn_ctx {
    char *body;
    size_t n, cap;
    int too_big;
} conn_ctx;

static void request_done(void *cls, struct MHD_Connection *con, void **con_cls, enum MHD_RequestTerminationCode t) {
    (void)t;
    srv_conn_reading(cls, con, 1);
    conn_ctx *x = *con_cls;
    if (x) free(x->body);
    free(x);
    *con_cls = NULL;
}

/* The tenant of the request's key ("" without keys), or NULL when the key is missing or wrong.
 * Every key is compared in full whatever the first difference, and all of them whichever
 * matches, so the timing reveals neither a key nor which one matched. */
static const char *authorized(const st_server *s, struct MHD_Connection *con) {
    if (!s->n_keys) return "";
    const char *h = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "Authorization");
    const char *k = h && !strncmp(h, "Bearer ", 7) ? h + 7 : "";
    const size_t nk = strlen(k);
    int hit = -1;
    for (int j = 0; j < s->n_keys; j++) {
        const char *key = s->keys[j];
        const size_t ns = strlen(key);
        unsigned diff = nk != ns;
        for (size_t i = 0; i < ns; i++) diff |= (unsigned char)((i < nk ? k[i] : 0) ^ key[i]);
        hit = diff ? hit : j;
    }
    return h && hit >= 0 ? s->tenants[hit] : NULL;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *con, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    st_server *s = cls;
    conn_ctx *x = *con_cls;
    if (!x) {
        if (!(x = calloc(1, sizeof *x))) return MHD_NO;
        *con_cls = x;
        return MHD_YES;
    }
    if (*upload_size) {
        if (x->n + *upload_size > s->max_body) x->too_big = 1;
        else if (buf_add(&x->body, &x->n, &x->cap, upload, *upload_size)) return MHD_NO;
        *upload_size = 0;
        return MHD_YES;
    }
    srv_conn_reading(s, con, 0); /* the request is in: what follows is the server's time */
    const int get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (get && !strcmp(url, "/health")) return srv_send_json(con, 200, json_pack("{s:s}", "status", "ok"));
    enum MHD_Result r;
    if ((get || !strcmp(method, "HEAD")) && srv_dashboard(con, url, &r)) return r; /* no key: the page holds no data (server_dash.c) */
    const char *tenant = authorized(s, con);
    if (!tenant) return srv_send_error(con, 401, "invalid or missing API key (Authorization: Bearer KEY)");
    if (x->too_big) return srv_send_error(con, 413, "the request body is over %zu bytes", s->max_body);
    const char *b = x->body ? x->body : "";
    pthread_mutex_lock(&s->mu);
    const int draining = s->draining;
    pthread_mutex_unlock(&s->mu);
    if (draining && post) return srv_send_error(con, 503, "the server is shutting down");
    if (get && !strcmp(url, "/v1/models")) {
        uint8_t fp[16];
        char hex[33];
        st_model_fingerprint(st_engine_model(s->e), fp);
        for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", fp[i]);
        return srv_send_json(con, 200, json_pack("{s:s, s:[{s:s, s:s, s:s, s:i, s:{s:s, s:i}}]}", "object", "list", "data",
                                             "id", s->model_id, "object", "model", "owned_by", "strata", "created", 0,
                                             "meta", "fingerprint", hex, "n_ctx", s->n_ctx));
    }
    if (get && !strcmp(url, "/metrics")) return srv_metrics_ep(s, con);
    if (get && !strcmp(url, "/slots")) return srv_slots_ep(s, con);
    enum MHD_Result ret;
    if (srv_session_route(s, con, tenant, url, method, b, x->n, &ret)) return ret;
    if (post && !strcmp(url, "/v1/completions")) return completion(s, con, tenant, b, x->n, 0);
    if (post && !strcmp(url, "/v1/chat/completions")) return completion(s, con, tenant, b, x->n, 1);
    if (post && !strcmp(url, "/tokenize")) return srv_tokenize_ep(s, con, b, x->n);
    if (post && !strcmp(url, "/detokenize")) return srv_detokenize_ep(s, con, b, x->n);
    if (post && !strcmp(url, "/apply-template")) return srv_apply_template_ep(s, con, b, x->n);
    return srv_send_error(con, 404, "no route for %s %s", method, url);
}

/* ---- start and stop ------------------------------------------------------------------------------ */

int st_server_port(const st_server *s) { return s->port; }

void st_server_get_stats(st_server *s, st_engine_stats *engine, st_kv_stats *kv) {
    pthread_mutex_lock(&s->mu);
    if (engine) *engine = s->est;
    if (kv) *kv = s->kst;
    pthread_mutex_unlock(&s->mu);
}

int st_server_drain(st_server *s, double timeout_s) {
    pthread_mutex_lock(&s->mu);
    s->draining = 1;
    pthread_mutex_unlock(&s->mu);
    const MHD_socket fd = s->d ? MHD_quiesce_daemon(s->d) : MHD_INVALID_SOCKET;
    if (fd != MHD_INVALID_SOCKET) close(fd);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    const double t = until.tv_sec + until.tv_nsec * 1e-9 + (timeout_s > 0 ? timeout_s : 0);
    until.tv_sec = (time_t)t, until.tv_nsec = (long)((t - (double)(time_t)t) * 1e9);
    pthread_mutex_lock(&s->mu);
    int n = 0;
    for (;;) {
        n = 0;
        for (srv_chan *c = s->chans; c; c = c->next) n++;
        if (!n || pthread_cond_timedwait(&s->progress, &s->mu, &until) == ETIMEDOUT) break;
    }
    pthread_mutex_unlock(&s->mu);
    return n;
}

void st_server_stop(st_server *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->work);
    pthread_cond_broadcast(&s->progress);
    pthread_mutex_unlock(&s->mu);
    if (s->sched_started) pthread_join(s->sched, NULL);
    /* the waiting connections saw stop: they answer or end their streams, and MHD joins them */
    if (s->d) MHD_stop_daemon(s->d);
    if (s->reaper_started) {
        pthread_mutex_lock(&s->conn_mu);
        s->reaper_stop = 1;
        pthread_cond_signal(&s->conn_wake);
        pthread_mutex_unlock(&s->conn_mu);
        pthread_join(s->reaper, NULL);
    }
    pthread_mutex_destroy(&s->conn_mu);
    pthread_cond_destroy(&s->conn_wake);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->work);
    pthread_cond_destroy(&s->progress);
    srv_sessions_close(s->sess);
    if (s->sock_path) unlink(s->sock_path);
    free(s->sock_path);
    free(s->slots_body);
    for (int i = 0; i < s->n_keys; i++) free(s->keys[i]);
    free(s->keys);
    free(s->tenants);
    free(s->model_id);
    free(s);
}

/* The daemon listens: the scheduler starts. */
static int launch(st_server *s, st_server **out) {
    st_engine_get_stats(s->e, &s->est);
    st_kv_get_stats(st_engine_kv(s->e), &s->kst);
    if (pthread_create(&s->sched, NULL, scheduler, s)) {
        st_server_stop(s);
        return ST_E_NOMEM;
    }
    s->sched_started = 1;
    if (pthread_create(&s->reaper, NULL, srv_reaper, s)) {
        st_server_stop(s);
        return ST_E_NOMEM;
    }
    s->reaper_started = 1;
    *out = s;
    return 0;
}

int st_server_start(st_engine *e, const st_server_params *p, st_server **out, char *why, size_t why_len) {
    if (why && why_len) *why = 0;
    if (!e || !p || !out) return ST_E_INVAL;
    *out = NULL;
    st_server *s = calloc(1, sizeof *s);
    if (!s) return ST_E_NOMEM;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->progress, NULL);
    pthread_mutex_init(&s->conn_mu, NULL);
    pthread_cond_init(&s->conn_wake, NULL);
    s->e = e;
    s->queue_timeout = p->queue_timeout_s ? p->queue_timeout_s : 60;
    s->request_timeout = p->request_timeout_s > 0 ? p->request_timeout_s : 60;
    s->max_stream_buffer = p->max_stream_buffer ? p->max_stream_buffer : (size_t)1 << 20;
    const unsigned max_conn = (unsigned)(p->max_connections > 0 ? p->max_connections : 256);
    const size_t max_header = p->max_header ? p->max_header : 32 << 10;
    s->tok = st_engine_tok(e);
    s->n_vocab = st_tok_n_vocab(s->tok);
    s->n_ctx = st_engine_n_ctx(e);
    s->max_body = p->max_body ? p->max_body : (size_t)1 << 20;
    s->metrics = p->metrics, s->slots_text = p->slots_show_text, s->verbose = p->verbose;
    int oom = 0;
    const int n_keys = (p->api_key ? 1 : 0) + (p->n_api_keys > 0 ? p->n_api_keys : 0);
    if (n_keys) {
        s->keys = calloc((size_t)n_keys, sizeof *s->keys);
        s->tenants = calloc((size_t)n_keys, sizeof *s->tenants);
        oom = !s->keys || !s->tenants;
    }
    for (int i = 0; !oom && i < n_keys; i++) {
        const char *k = p->api_key ? (i ? p->api_keys[i - 1] : p->api_key) : p->api_keys[i];
        if (!k || !*k) {
            if (why && why_len) snprintf(why, why_len, "API key %d is empty", i + 1);
            st_server_stop(s);
            return ST_E_INVAL;
        }
        if (!(s->keys[i] = strdup(k))) oom = 1;
        else snprintf(s->tenants[i], sizeof s->tenants[i], "k%016llx~", (unsigned long long)XXH3_64bits(k, strlen(k)));
        s->n_keys = i + 1;
    }
    s->model_id = strdup(p->model_id ? p->model_id : "strata");
    s->tmpl_ok = st_chat_for_tok(st_engine_ctx(e), s->tok, p->chat_template, &s->tmpl) == 0;
    if (!s->model_id || oom) {
        st_server_stop(s);
        return ST_E_NOMEM;
    }
    if (p->chat_template && !s->tmpl_ok) {
        if (why && why_len) snprintf(why, why_len, "chat template: %s", st_ctx_error(st_engine_ctx(e)));
        st_server_stop(s);
        return ST_E_NOT_FOUND;
    }
    int rc = p->session_dir ? srv_sessions_open(s, p->session_dir, &s->sess, why, why_len) : 0;
    if (rc) {
        st_server_stop(s);
        return rc;
    }
    const char *host = p->host ? p->host : "127.0.0.1";
    const unsigned timeout = (unsigned)(p->timeout_s ? p->timeout_s : 600);
    /* ITC: MHD_quiesce_daemon (st_server_drain) needs it in this threading mode */
    const unsigned flags =
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG | MHD_USE_ITC;
    if (strchr(host, '/')) {
        /* a unix socket: only processes that may open the path reach it */
        struct sockaddr_un un = {.sun_family = AF_UNIX};
        struct stat st;
        int fd = -1, err = 0;
        if (strlen(host) >= sizeof un.sun_path) err = ENAMETOOLONG;
        else if (lstat(host, &st) == 0 && !S_ISSOCK(st.st_mode)) err = EEXIST; /* never remove a file */
        if (!err) {
            memcpy(un.sun_path, host, strlen(host) + 1);
            unlink(host); /* a stale socket of an earlier run */
            fd = socket(AF_UNIX, SOCK_STREAM, 0);
            if (fd < 0 || bind(fd, (struct sockaddr *)&un, sizeof un) || listen(fd, 64)) err = errno;
        }
        if (!err && !(s->sock_path = strdup(host))) err = ENOMEM;
        if (!err)
            s->d = MHD_start_daemon(flags, 0, NULL, NULL, handle, s, MHD_OPTION_LISTEN_SOCKET, fd,
                                    MHD_OPTION_CONNECTION_TIMEOUT, timeout, MHD_OPTION_NOTIFY_COMPLETED, request_done, s,
                                    MHD_OPTION_NOTIFY_CONNECTION, srv_conn_notify, s, MHD_OPTION_CONNECTION_LIMIT, max_conn,
                                    MHD_OPTION_CONNECTION_MEMORY_LIMIT, max_header, MHD_OPTION_EXTERNAL_LOGGER, srv_http_log, s,
                            MHD_OPTION_END);
        if (!err && !s->d) err = errno ? errno : EINVAL;
        if (err) {
            if (fd >= 0) close(fd);
            if (why && why_len) snprintf(why, why_len, "cannot listen on %s: %s", host, strerror(err));
            st_server_stop(s);
            return -err;
        }
        s->port = 0;
        return launch(s, out);
    }
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)p->port);
    if (p->port < 0 || p->port > 65535 || inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        if (why && why_len) snprintf(why, why_len, "cannot listen on %s:%d: not an IPv4 address and port", host, p->port);
        st_server_stop(s);
        return ST_E_INVAL;
    }
    s->d = MHD_start_daemon(flags, 0, NULL, NULL, handle, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                            MHD_OPTION_CONNECTION_TIMEOUT, timeout, MHD_OPTION_NOTIFY_COMPLETED, request_done, s,
                            MHD_OPTION_NOTIFY_CONNECTION, srv_conn_notify, s, MHD_OPTION_CONNECTION_LIMIT, max_conn,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, max_header, MHD_OPTION_EXTERNAL_LOGGER, srv_http_log, s,
                            MHD_OPTION_END);
    if (!s->d) {
        const int err = errno ? errno : EADDRINUSE;
        if (why && why_len) snprintf(why, why_len, "cannot listen on %s:%d: %s", host, p->port, strerror(err));
        st_server_stop(s);
        return -err;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : p->port;
    return launch(s, out);
}
