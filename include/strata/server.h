/*
 * strata server: an OpenAI-compatible HTTP API over an engine (engine.h).
 *
 * HTTP is libmicrohttpd's (a thread per connection), JSON is jansson's. One scheduler thread
 * owns the engine and runs its steps; connection threads parse and tokenize a request, submit
 * it under the server's lock and then wait for its events, which the scheduler hands to them
 * (as Server-Sent Events when the client asked to stream). A client that goes away is
 * cancelled at the next step, so its pages go back to the pool (full ones to the prefix
 * cache, where only a request whose tokens are verified equal can attach them).
 *
 * Endpoints: GET /health, GET /v1/models, POST /v1/completions, POST /v1/chat/completions,
 * POST /tokenize, POST /detokenize, POST /apply-template, and for operations GET /metrics
 * (Prometheus text format: request, token, KV pool, SSD tier, prefix cache and Quest counters
 * and latency histograms; only with `metrics`, else 501) and GET /slots (JSON: every active
 * request's state, token counts, timings and a strip of where each of its KV pages is; no
 * user text unless `slots_show_text`). Both are in docs/FORMATS.md. GET / (also /index.html,
 * /dash.css, /dash.js): a dashboard page, chat and a live view of the KV cache from /slots and
 * /metrics, served without the API key (it holds no data; the routes it reads ask for the key
 * typed into it) under a Content-Security-Policy of 'self' only. With a session directory
 * POST /v1/sessions/NAME (saves the conversation of a completion's or chat's body: its tokens
 * and KV, atomically, before answering {"name", "n_tokens", "bytes"}), GET /v1/sessions
 * ({"data": [{"name", "n_tokens", "bytes", "modified", "age_s"}]}) and DELETE
 * /v1/sessions/NAME (404 when absent); with API keys each key has its own sessions. A completion or chat with "session": NAME continues
 * that session (its history is not computed again; usage counts it as cached); one whose
 * prompt begins with a saved history continues the longest such session unasked. A name
 * outside [A-Za-z0-9._-]{1,64} (or "." / "..") is a 400; an unknown session a 404; a session
 * file that is damaged, truncated, of another model, or whose tokens the prompt does not
 * begin with is a 409 naming the session and the reason (a matched, unnamed session that
 * fails is dropped and the request runs without it). Errors come in OpenAI's shape
 * {"error": {"message", "type", "code"}}: 400 for malformed JSON or a field of the wrong type
 * (named), and for a prompt longer than the context (with n_prompt_tokens and n_ctx); 401 for
 * a missing or wrong API key (/health and the dashboard stay open); 404 for an unknown route; 413 for a body
 * over max_body; 431 for headers over max_header; 503 with Retry-After when the server cannot
 * take the request now, its error's "reason" naming why (beside "code" 503, as llama-server
 * sends it): "queue_full" (the engine's wait queue holds
 * max_queue requests), "queue_timeout" (not admitted within queue_timeout_s: every slot busy),
 * "kv_budget" (not admitted within queue_timeout_s: a slot was free but the KV pool could not
 * promise its pages). A streamed request's 200 and first event wait for its admission, so a
 * refusal is always a status, never a broken stream. A request whose pages can never fit is
 * a 400.
 *
 * Hostile clients: the API key is compared in constant time; a connection that sends its
 * request too slowly (request_timeout_s) is closed; a streaming client that stops reading
 * has its request cancelled once max_stream_buffer bytes wait for it; at most max_connections
 * connections are served at once.
 *
 * Threads: st_server_start and st_server_stop from one thread; the engine must not be used by
 * anyone else between them.
 */
#ifndef STRATA_SERVER_H
#define STRATA_SERVER_H

#include "strata/engine.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct st_server st_server;

typedef struct st_server_params {
    const char *host;          /* IPv4 address to bind, or a unix socket's path (holding a '/':
                                  made, and removed at the stop; an existing file that is not a
                                  socket is refused); NULL: 127.0.0.1 (loopback only) */
    int port;                  /* 0: any free port (st_server_port says which) */
    const char *api_key;       /* NULL: no key; else "Authorization: Bearer KEY" is required */
    const char *const *api_keys; /* n_api_keys more keys (each a tenant, as api_key is one):
                                  saved sessions are kept apart per key, so one key's
                                  clients never list, continue or delete another's */
    int n_api_keys;
    const char *model_id;      /* the id /v1/models lists and responses carry; NULL: "strata" */
    const char *chat_template; /* a template name (tok.h), or NULL: the model's own */
    size_t max_body;           /* request bytes at most; 0: 1 MiB */
    int timeout_s;             /* a connection whose socket stays silent this long is closed;
                                  0: 600 (llama-server's) */
    double queue_timeout_s;    /* a request not admitted this long is refused with 503 (reason
                                  "queue_timeout", or "kv_budget" when a slot was free but its
                                  KV pages were not); 0: 60; < 0: it waits as long as it takes */
    double request_timeout_s;  /* a request's headers and body must arrive within this, and a
                                  kept-alive connection may idle this long; 0: 60 */
    int max_connections;       /* connections at once (each holds a thread); beyond, new ones
                                  are closed at once; 0: 256 */
    size_t max_header;         /* bytes of request line and headers; beyond: 431; 0: 32 KiB */
    size_t max_stream_buffer;  /* streamed bytes a client may leave unread before its request
                                  is cancelled; 0: 1 MiB */
    int metrics;               /* serve GET /metrics (else it answers 501) */
    int slots_show_text;       /* GET /slots shows each request's prompt and output text */
    int verbose;               /* after a step that moved pages between the tiers, one line
                                  on stderr (st_kv_stats_line) */
    const char *session_dir;   /* NULL: no sessions; else where they are saved (made if missing;
                                  not a writable directory: the start is refused) */
} st_server_params;

/* Starts serving e (borrowed: it must outlive the server, and nobody else may use it until
 * st_server_stop). Returns 0; ST_E_INVAL (a bad host or parameter: named), ST_E_NOT_FOUND /
 * ST_E_UNSUPPORTED (no usable chat template: chat requests are then refused, not the start),
 * -errno (the address cannot be bound), ST_E_NOMEM; the reason in why[why_len]. */
int st_server_start(st_engine *e, const st_server_params *p, st_server **out, char *why, size_t why_len);
/* The port it listens on (0 on a unix socket). */
int st_server_port(const st_server *s);
/* The engine's and its KV pool's counters, read under the server's lock (from any thread). */
void st_server_get_stats(st_server *s, st_engine_stats *engine, st_kv_stats *kv);
/* A graceful stop's first half: stops listening (new connections are refused; a new request
 * on an open connection answers 503), then waits until every request in flight has
 * answered, at most timeout_s seconds. Returns the requests still running at the timeout
 * (0: all finished); st_server_stop then cancels them. */
int st_server_drain(st_server *s, double timeout_s);
/* Stops accepting, cancels what runs, joins every thread and frees s. NULL is a no-op. */
void st_server_stop(st_server *s);

#ifdef __cplusplus
}
#endif
#endif
