/* Server internals: the channel between a connection thread and the scheduler (server.c), the
 * OpenAI request and response shapes (server_api.c), and the operations endpoints /metrics
 * and /slots with the latency histograms behind them (server_metrics.c), and the dashboard at
 * GET / (server_dash.c). */
#ifndef STRATA_SERVER_INT_H
#define STRATA_SERVER_INT_H

#include "strata/server.h"

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>

/* Why a request was refused (counted per reason). */
typedef enum srv_reject {
    SRV_REJECT_QUEUE_FULL,
    SRV_REJECT_KV_BUDGET,
    SRV_REJECT_QUEUE_TIMEOUT,
    SRV_REJECT_INVALID,
    SRV_REJECT_N
} srv_reject;

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
    int port;
    char *api_key, *model_id;
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

#endif
