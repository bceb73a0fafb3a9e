/* Server internals: the channel between a connection thread and the scheduler (server.c), the
 * OpenAI request and response shapes (server_api.c), and the operations endpoints /metrics
 * and /slots with the latency histograms behind them (server_metrics.c), and the dashboard at
 * GET / (server_dash.c). */
#ifndef STRATA_SERVER_INT_H
#define STRATA_SERVER_INT_H

#include "strata/server.h"

#include <jansson.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <pthread.h>

/* Why a request was refused (counted per reason). */
typedef enum srv_reject {
    SRV_REJECT_QUEUE_FULL,
    SRV_REJECT_KV_BUDGET,
    SRV_REJECT_QUEUE_TIMEOUT,
    SRV_REJECT_INVALID,
    SRV_REJECT_N
} srv_reject;
#define SRV_SESSION_NAME_MAX 64

/* A parsed request: what st_engine_submit needs plus what the response says. */
typedef struct srv_req {
    int chat;             /* /v1/chat/completions (else /v1/completions) */
    int stream, include_usage;
    int logprobs;         /* < 0: none; else alternatives per token (completions' logprobs N,
                             chat's logprobs true + top_logprobs N) */
    int32_t *tokens;      /* the prompt, owned */
    int32_t n_tokens;
    st_engine_req_params rp;
    char *stop[16];       /* owned copies */
    int n_stop;
    st_engine_bias bias[256];
    int n_bias;
    /* a session the prompt continues (server_session.c): its file (owned, checked) and the
     * KV snapshot inside it, which the scheduler restores into the sequence rp.seq */
    uint8_t *sess_file;
    const uint8_t *snap;
    size_t n_snap;
    int32_t n_hist;       /* the session's tokens, a prefix of tokens */
    int32_t n_resumed;    /* of them given to the engine as rp.seq (n_hist, or one less when
                             the prompt is the history: the last token is computed) */
    int sess_named;       /* asked for by name: a failure fails the request */
    int sess_failed;      /* the restore failed (the request's error is the session's) */
    char session[SRV_SESSION_NAME_MAX + 1];
} srv_req;

/* Fills q from a request body. Returns 0, or an HTTP status (400) with the message naming the
 * field in msg[cap]. tok and tmpl (chat only; tmpl_ok 0: refuse chat) come from the server. */
int srv_parse_request(const char *body, size_t len, int chat, const st_tok *tok, int32_t n_vocab,
                      st_chat_tmpl tmpl, int tmpl_ok, srv_req *q, char *msg, size_t cap);
void srv_req_free(srv_req *q);
/* The "messages" of a request rendered by the chat template with the generation prompt
 * (*text malloc'd). 0, or 400 with the message naming the field. */
int srv_render_messages(json_t *o, st_chat_tmpl tmpl, char **text, size_t *len, char *msg, size_t cap);

/* One request between its connection and the scheduler; fields under the server's lock. */
typedef struct srv_chan {
    struct srv_chan *prev, *next; /* the server's live channels */
    int refs;             /* the connection's and the engine's: freed at 0 */
    int engine_ref;       /* the engine still runs its request */
    srv_req *submit;      /* handed to the scheduler to submit (NULL once it did) */
    int submitted, submit_rc; /* the scheduler's answer: 0, or the engine's error */
    int cancel;           /* the connection asks the scheduler to cancel the request */
    st_req_id id;
    int chat, stream, include_usage, sent_role;
    int logprobs;         /* as srv_req's */
    const st_tok *tok;    /* for the tokens' text in logprobs */
    json_t *lp;           /* non-streaming: the logprobs object so far (NULL: none asked) */
    size_t lp_offset;     /* completions' text_offset of the next token */
    char *text;           /* non-streaming: the text so far */
    size_t n_text, cap_text;
    char *out;            /* streaming: SSE bytes not yet handed to the socket */
    size_t n_out, cap_out, off_out;
    int32_t n_gen;        /* tokens generated (an end-of-generation token not counted) */
    double t_submit;      /* when the scheduler submitted it (st_time_now) */
    int admitted;         /* the engine started it (its state left WAITING); a stream's answer
                             (200 and events, or 503) waits for this or its finish */
    int reject;           /* a srv_reject + 1: the scheduler gave up on it while it waited */
    int overrun;          /* its client read too slowly: the stream's buffer hit the bound */
    int fd;               /* a stream's socket while its response lives (else -1) */
    int done;
    st_engine_event fin;  /* the finish event (pointers cleared) */
    char err[512];
    long long created;
    const char *model_id;
    double t_last;        /* stats.t_total of its last token event (0: none yet) */
    int32_t *prompt;      /* with slots_text: the prompt's tokens (owned), for /slots */
    int32_t n_prompt;
    int32_t n_resumed;    /* prompt tokens a session's sequence supplied (usage counts them) */
    int save;             /* a session save: the finish's sequence is serialized into snap */
    uint8_t *snap;        /* its KV snapshot (owned), or NULL with snap_rc the error */
    size_t n_snap;
    int snap_rc;
} srv_chan;

/* The OpenAI JSON of one streamed piece, the final chunk, the usage chunk; the whole
 * non-streamed response. Owned by the caller (json_decref). */
json_t *srv_chunk(const srv_chan *c, const char *text, size_t n, const char *finish);
/* A token event's logprobs in the request's shape: chat's {"content":[{token, logprob, bytes,
 * top_logprobs}]}, completions' {tokens, token_logprobs, top_logprobs, text_offset}; appended
 * to *acc (made when NULL). */
void srv_logprobs_add(srv_chan *c, json_t **acc, const st_engine_event *ev);
json_t *srv_usage_chunk(const srv_chan *c);
json_t *srv_response(const srv_chan *c);
/* A JSON string of any bytes: invalid UTF-8 replaced by U+FFFD. */
json_t *srv_text(const char *s, size_t n);
/* {"error": {"message", "type", "code"}} */
json_t *srv_error(int status, const char *msg);
/* A 503's error with its "reason" ("queue_full", "kv_budget", "queue_timeout"). */
json_t *srv_error_reason(int status, const char *reason, const char *msg);
/* "queue_full", "kv_budget", "queue_timeout", "invalid" */
const char *srv_reject_name(srv_reject r);
/* "stop" / "length" as OpenAI says it */
const char *srv_finish_reason(st_finish f);

/* One TCP or unix connection, from libmicrohttpd's start to close notifications: while it is
 * reading a request (or idles between requests) a deadline runs, and the reaper shuts the
 * socket of one past it, so a client that sends slowly or never finishes holds a thread for
 * request_timeout at most. Fields under conn_mu. */
typedef struct srv_conn {
    struct srv_conn *prev, *next;
    int fd;
    int reading;          /* between requests or inside one's headers and body */
    double deadline;      /* st_time_now() past which a reading connection is closed */
} srv_conn;

/* A latency histogram in seconds: counts per bucket of srv_hist_bounds (not cumulative; the
 * last one past every bound), their sum and count. */
#define SRV_HIST_BOUNDS 19
typedef struct srv_hist {
    int64_t n[SRV_HIST_BOUNDS + 1];
    double sum;
    int64_t count;
} srv_hist;
typedef enum srv_hist_id { SRV_H_TTFT, SRV_H_ITL, SRV_H_E2E, SRV_H_QUEUE, SRV_H_N } srv_hist_id;
/* A new channel (one reference: the caller's); NULL when out of memory. */
srv_chan *srv_chan_new(st_server *s, int chat, int stream, int include_usage, int logprobs);
/* Drops a reference (under the lock); the last one frees c. */
void srv_chan_unref(st_server *s, srv_chan *c);
/* Hands q to the scheduler on channel c and waits for its answer (takes the lock). Returns
 * 0 (c now also holds the engine's reference), or the error with its message in msg[cap]
 * (c's reference dropped: c is gone), ST_E_STATE when the server is stopping. */
int srv_chan_submit(st_server *s, srv_chan *c, srv_req *q, char *msg, size_t cap);

/* ---- sessions (server_session.c) ---------------------------------------------------------- */
typedef struct srv_sessions srv_sessions;

/* The session file (docs/FORMATS.md, "Session file"). */
#define SRV_SESSION_MAGIC "STSESSN\0"
#define SRV_SESSION_VERSION 1u
#define SRV_SESSION_HEADER 64
#define SRV_SESSION_MAX_TOKENS (1 << 24)

typedef struct srv_session_info {
    int32_t n_tokens;
    int32_t *tokens;      /* [n_tokens] owned (decode), or borrowed (encode) */
    const uint8_t *snap;  /* the KV snapshot: points into the file's bytes */
    size_t n_snap;
    int64_t created;      /* unix seconds */
} srv_session_info;

/* The bytes of a session file (*out malloc'd, *n_out bytes). 0 or ST_E_NOMEM / ST_E_LIMIT. */
int srv_session_encode(const uint8_t fingerprint[16], const srv_session_info *in, uint8_t **out, size_t *n_out);
/* Checks a session file's bytes: size, magic, version, header, length against the counts
 * (a truncated file), checksum, the model fingerprint (fingerprint NULL: any), token ids in
 * [0, n_vocab) (0: unchecked). 0 with out filled (tokens malloc'd, snap into buf), or
 * ST_E_FORMAT (malformed or truncated), ST_E_VERSION, ST_E_CORRUPT (checksum), ST_E_TYPE
 * (another model), ST_E_LIMIT, ST_E_NOMEM; the reason in msg[cap]. Nothing kept on error. */
int srv_session_decode(const uint8_t *buf, size_t n, const uint8_t fingerprint[16], int32_t n_vocab,
                       srv_session_info *out, char *msg, size_t cap);
/* 0 when name is a session name ([A-Za-z0-9._-], 1..64, not "." or ".."), else 400 with
 * the rule in msg[cap]. */
int srv_session_name_check(const char *name, char *msg, size_t cap);

/* At the start: makes dir if missing, refuses one that is not a writable directory, removes
 * the temporary files of writes a crash interrupted and indexes the valid sessions of this
 * model (others are reported on stderr and left alone). 0, or ST_E_INVAL / -errno with
 * the reason in why. */
int srv_sessions_open(st_server *s, const char *dir, srv_sessions **out, char *why, size_t cap);
void srv_sessions_close(srv_sessions *ss);
/* /v1/sessions routes (connection threads); 0 when url is none of them. */
int srv_session_route(st_server *s, struct MHD_Connection *con, const char *tenant, const char *url,
                      const char *method, const char *body, size_t len, enum MHD_Result *ret);
/* Connection thread, after srv_parse_request: the session q names ("session") or the
 * longest indexed one its prompt begins with, read and checked into q. 0 (also when there
 * is none), or an HTTP status (400, 404, 409) with the message in msg[cap]. */
int srv_session_prepare(st_server *s, const char *tenant, const char *body, size_t len, srv_req *q, char *msg,
                        size_t cap);
/* Scheduler thread, before q is submitted: restores q's snapshot into a new sequence and
 * points rp at it and at the tokens after the history. 0 (also: nothing to restore, or a
 * matched session that the prefix cache covers as well), or an error with msg[cap] (then
 * nothing is left in the KV pool). */
int srv_session_restore(st_server *s, srv_req *q, char *msg, size_t cap);
/* Scheduler thread: a finish event carrying a kept sequence: serialized into c when c is
 * a save whose connection still waits, then freed. */
void srv_session_capture(st_server *s, srv_chan *c, const st_engine_event *ev);

/* The server: the engine it borrows, the daemon, the scheduler and the channels. Fields below
 * `mu` are guarded by it, except those set once at the start. */
struct st_server {
    st_engine *e;
    struct MHD_Daemon *d;
    pthread_t sched;
    int sched_started;
    pthread_mutex_t mu;
    pthread_cond_t work;     /* a request was submitted, or stop */
    pthread_cond_t progress; /* a step delivered events (every waiting connection rechecks) */
    srv_chan *chans;         /* live channels */
    int pending;             /* channels with a submission or a cancellation for the scheduler */
    st_engine_stats est;     /* the engine's counters after the last step (for other threads) */
    st_kv_stats kst;
    int stop;
    int draining;            /* st_server_drain: new requests answer 503 */
    int port;
    char **keys;             /* the API keys (none: no key is asked) */
    int n_keys;
    char (*tenants)[24];     /* per key: "k" and 16 hex digits of its hash, and '~': the
                                prefix of its sessions' names on disk; "" without keys */
    char *model_id;
    char *sock_path;         /* a unix socket's path, removed at the stop */
    size_t max_body;
    st_chat_tmpl tmpl;
    int tmpl_ok;
    const st_tok *tok;
    int32_t n_vocab, n_ctx;
    int64_t rejected[SRV_REJECT_N];
    int64_t slow_closed;     /* connections the reaper closed */
    int64_t overruns;        /* streams cancelled because their client stopped reading */
    double queue_timeout;    /* seconds a request may wait for admission; 0: forever */
    double request_timeout;  /* seconds to receive a request (and to idle between two) */
    size_t max_stream_buffer;/* streamed bytes a client may leave unread */
    /* connections (the reaper's) */
    pthread_mutex_t conn_mu;
    pthread_cond_t conn_wake;
    srv_conn *conns;
    pthread_t reaper;
    int reaper_started, reaper_stop;
    /* operations (server_metrics.c) */
    int metrics, slots_text, verbose; /* st_server_params' */
    srv_hist hist[SRV_H_N];
    st_runner_quest_stats qst;        /* the runner's after the last step */
    int slots_want;                   /* a connection waits for a /slots snapshot */
    uint64_t slots_gen;               /* snapshots made */
    char *slots_body;                 /* the latest snapshot's JSON */
    srv_sessions *sess;      /* NULL: no session directory */
};

/* Operations hooks, all under the lock. After deliver: a token event's inter-token gap, a
 * finish's latencies, the streamed text /slots shows. */
void srv_ops_event(st_server *s, srv_chan *c, const st_engine_event *ev);
/* After a step (s->kst refreshed; before: the KV stats before it): the runner's Quest
 * counters, and with verbose the tier line on stderr when pages moved. */
void srv_ops_step(st_server *s, const st_kv_stats *before);
/* In the scheduler's collect: the /slots snapshot a connection asked for (the engine is
 * only read on the scheduler's thread). */
void srv_ops_collect(st_server *s);
/* Counts a refused completion request (takes the lock). */
void srv_reject_add(st_server *s, srv_reject r);
/* GET /metrics (501 without metrics) and GET /slots. */
enum MHD_Result srv_metrics_ep(st_server *s, struct MHD_Connection *con);
enum MHD_Result srv_slots_ep(st_server *s, struct MHD_Connection *con);

/* The dashboard's files (src/server/dash/), generated into the build by cmake/embed.cmake:
 * path ("/index.html"), Content-Type and bytes. */
typedef struct srv_asset {
    const char *path, *type;
    const unsigned char *data;
    size_t n;
} srv_asset;
extern const srv_asset srv_assets[];
extern const int srv_n_assets;
/* GET of a dashboard file (url "/" is /index.html), with its security headers: returns 1 and
 * the queued response's result in *r, or 0 when url is none of them (server_dash.c). */
int srv_dashboard(struct MHD_Connection *con, const char *url, enum MHD_Result *r);

/* A JSON response (o consumed; 503 adds Retry-After), and an OpenAI-shaped error of it. */
enum MHD_Result srv_send_json(struct MHD_Connection *con, int status, json_t *o);
enum MHD_Result srv_send_error(struct MHD_Connection *con, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- connections (server_conn.c) ---------------------------------------------------------- */
/* libmicrohttpd's logger: its messages only with verbose. */
void srv_http_log(void *cls, const char *fmt, va_list ap);
/* libmicrohttpd's connection notification: a connection joins the reaper's list at its start
 * (reading, its first request's deadline running) and leaves it before its socket closes. */
void srv_conn_notify(void *cls, struct MHD_Connection *con, void **socket_context,
                     enum MHD_ConnectionNotificationCode code);
/* A connection's request has fully arrived (reading 0), or its answer is done (1: the next
 * request's deadline runs). Connection threads. */
void srv_conn_reading(st_server *s, struct MHD_Connection *con, int reading);
/* The reaper thread (arg: the server): shuts connections reading past their deadline until
 * reaper_stop. */
void *srv_reaper(void *arg);

/* ---- token endpoints (server_api.c) --------------------------------------------------------- */
enum MHD_Result srv_tokenize_ep(st_server *s, struct MHD_Connection *con, const char *body, size_t len);
enum MHD_Result srv_detokenize_ep(st_server *s, struct MHD_Connection *con, const char *body, size_t len);
enum MHD_Result srv_apply_template_ep(st_server *s, struct MHD_Connection *con, const char *body, size_t len);

#endif
