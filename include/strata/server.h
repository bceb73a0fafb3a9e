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
 * POST /tokenize, POST /detokenize, POST /apply-template; with a session directory
 * POST /v1/sessions/NAME (saves the conversation of a completion's or chat's body: its tokens
 * and KV, atomically, before answering {"name", "n_tokens", "bytes"}), GET /v1/sessions
 * ({"data": [{"name", "n_tokens", "bytes", "modified", "age_s"}]}) and DELETE
 * /v1/sessions/NAME (404 when absent). A completion or chat with "session": NAME continues
 * that session (its history is not computed again; usage counts it as cached); one whose
 * prompt begins with a saved history continues the longest such session unasked. A name
 * outside [A-Za-z0-9._-]{1,64} (or "." / "..") is a 400; an unknown session a 404; a session
 * file that is damaged, truncated, of another model, or whose tokens the prompt does not
 * begin with is a 409 naming the session and the reason (a matched, unnamed session that
 * fails is dropped and the request runs without it). Errors come in OpenAI's shape
 * {"error": {"message", "type", "code"}}: 400 for malformed JSON or a field of the wrong type
 * (named), and for a prompt longer than the context (with n_prompt_tokens and n_ctx); 401 for
 * a missing or wrong API key (/health stays open); 404 for an unknown route; 413 for a body
 * over max_body; 503 with Retry-After when the engine's queue is full.
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
    const char *model_id;      /* the id /v1/models lists and responses carry; NULL: "strata" */
    const char *chat_template; /* a template name (tok.h), or NULL: the model's own */
    size_t max_body;           /* request bytes at most; 0: 1 MiB */
    int timeout_s;             /* a connection idle this long is closed; 0: 600 (llama-server's) */
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
