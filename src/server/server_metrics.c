/* The operations side of the server: GET /metrics (Prometheus text format 0.0.4) and
 * GET /slots (JSON), both described byte by byte in docs/FORMATS.md.
 *
 * Where the numbers come from: the counters are the engine's (st_engine_get_stats), the KV
 * pool's (st_kv_get_stats), the runner's Quest statistics and the server's own refusals, as
 * the scheduler copied them after its last step; nothing here reads the engine from a
 * connection's thread. The histograms are measured here, from the stats every engine event
 * carries (seconds since the request's submit), so they time what the engine saw, not the
 * network. /slots needs the live page tables, which only the scheduler's thread may read: a
 * connection asks for a snapshot and waits (at most one step) until the scheduler made it in
 * its collect pass. */
#include "server/server_int.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Upper bounds in seconds: a millisecond (a decode step of a small model) to ten minutes (a
 * long prompt queued behind others on a CPU). */
static const double srv_hist_bounds[SRV_HIST_BOUNDS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                        0.25,  0.5,    1,     2.5,  5,     10,   20,
                                                        40,    80,     160,   320,  640};

static void hist_add(srv_hist *h, double v) {
    if (v < 0) v = 0;
    int b = 0;
    while (b < SRV_HIST_BOUNDS && v > srv_hist_bounds[b]) b++;
    h->n[b]++;
    h->sum += v;
    h->count++;
}

static void text_add(srv_chan *c, const char *t, size_t k) {
    if (!k) return;
    if (c->n_text + k + 1 > c->cap_text) {
        size_t nc = c->cap_text ? c->cap_text * 2 : 1024;
        while (nc < c->n_text + k + 1) nc *= 2;
        char *nb = realloc(c->text, nc);
        if (!nb) return; /* /slots shows less: never the request's failure */
        c->text = nb, c->cap_text = nc;
    }
    memcpy(c->text + c->n_text, t, k);
    c->n_text += k;
    c->text[c->n_text] = 0;
}

void srv_ops_event(st_server *s, srv_chan *c, const st_engine_event *ev) {
    const st_engine_req_stats *t = &ev->stats;
    if (ev->token >= 0) {
        /* the first token's time is observed when it comes, not at the finish */
        if (c->t_last > 0) hist_add(&s->hist[SRV_H_ITL], t->t_total - c->t_last);
        else hist_add(&s->hist[SRV_H_TTFT], t->t_first > 0 ? t->t_first : t->t_total);
        c->t_last = t->t_total;
    }
    /* non-streamed requests keep their text already (server.c's deliver) */
    if (s->slots_text && c->stream) text_add(c, ev->text, ev->text_len);
    if (!ev->finish) return;
    hist_add(&s->hist[SRV_H_E2E], t->t_total);
    hist_add(&s->hist[SRV_H_QUEUE], t->t_queued);
}

void srv_ops_step(st_server *s, const st_kv_stats *before) {
    st_runner_get_quest_stats(st_engine_runner(s->e), &s->qst);
    if (!s->verbose) return;
    char line[512];
    if (st_kv_stats_line(before, &s->kst, line, sizeof line)) fprintf(stderr, "strata serve: %s\n", line);
}

void srv_reject_add(st_server *s, srv_reject r) {
    pthread_mutex_lock(&s->mu);
    s->rejected[r]++;
    pthread_mutex_unlock(&s->mu);
}

/* ---- /metrics --------------------------------------------------------------------------------- */

typedef struct mbuf {
    char *b;
    size_t n, cap;
    int oom;
} mbuf;

static void mb_printf(mbuf *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void mb_printf(mbuf *m, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        const size_t room = m->cap - m->n;
        const int k = m->b ? vsnprintf(m->b + m->n, room, fmt, ap) : -1;
        va_end(ap);
        if (k >= 0 && (size_t)k < room) {
            m->n += (size_t)k;
            return;
        }
        const size_t nc = m->cap ? m->cap * 2 : 8192;
        char *nb = m->oom ? NULL : realloc(m->b, nc);
        if (!nb) {
            m->oom = 1;
            return;
        }
        m->b = nb, m->cap = nc;
    }
}

static void head(mbuf *m, const char *name, const char *type, const char *help) {
    mb_printf(m, "# HELP strata_%s %s\n# TYPE strata_%s %s\n", name, help, name, type);
}

static void one(mbuf *m, const char *name, const char *type, const char *help, int64_t v) {
    head(m, name, type, help);
    mb_printf(m, "strata_%s %" PRId64 "\n", name, v);
}

static void hist_write(mbuf *m, const char *name, const char *help, const srv_hist *h) {
    head(m, name, "histogram", help);
    int64_t cum = 0;
    for (int b = 0; b < SRV_HIST_BOUNDS; b++) {
        cum += h->n[b];
        mb_printf(m, "strata_%s_bucket{le=\"%g\"} %" PRId64 "\n", name, srv_hist_bounds[b], cum);
    }
    mb_printf(m, "strata_%s_bucket{le=\"+Inf\"} %" PRId64 "\n", name, h->count);
    mb_printf(m, "strata_%s_sum %.9g\nstrata_%s_count %" PRId64 "\n", name, h->sum, name, h->count);
}

/* The whole exposition from the server's copies (under the lock). */
static void metrics_text(const st_server *s, mbuf *m) {
    const st_engine_stats *e = &s->est;
    const st_kv_stats *k = &s->kst;
    const st_kv_geometry *g = st_kv_get_geometry(st_engine_kv(s->e));
    /* without a spill directory every page holding data is in RAM; with one, RAM residency
     * is per layer block (blocks_hot, blocks_cold) */
    const uint64_t ram = k->ram_blocks ? (uint64_t)k->blocks_hot * g->layer_bytes
                                       : (uint64_t)(k->pages_used + k->pages_cached) * g->page_bytes;
    const uint64_t disk = (uint64_t)k->blocks_cold * g->layer_bytes;
    one(m, "requests_running", "gauge", "Requests admitted and not finished (prefilling or decoding).", e->running);
    one(m, "requests_waiting", "gauge", "Requests queued or preempted, waiting to run.", e->waiting);
    head(m, "kv_pages", "gauge", "KV pool pages by state: used by sequences, cached for prefix reuse, free.");
    mb_printf(m, "strata_kv_pages{state=\"used\"} %" PRId64 "\nstrata_kv_pages{state=\"cached\"} %" PRId64
                 "\nstrata_kv_pages{state=\"free\"} %" PRId64 "\n",
              k->pages_used, k->pages_cached, k->pages_free);
    one(m, "kv_pages_capacity", "gauge", "KV pool capacity in (logical) pages.", k->n_pages);
    head(m, "kv_bytes", "gauge", "Bytes of KV pages holding data, in RAM and only on disk (page size, before cold compression).");
    mb_printf(m, "strata_kv_bytes{tier=\"ram\"} %" PRIu64 "\nstrata_kv_bytes{tier=\"disk\"} %" PRIu64 "\n",
              ram, disk);
    head(m, "requests_finished_total", "counter", "Requests finished, by finish reason.");
    for (int f = ST_FINISH_STOP; f <= ST_FINISH_ERROR; f++)
        mb_printf(m, "strata_requests_finished_total{reason=\"%s\"} %" PRId64 "\n", st_finish_name((st_finish)f),
                  e->finished_by[f]);
    head(m, "requests_rejected_total", "counter", "Completion requests refused before they ran, by reason.");
    for (int r = 0; r < SRV_REJECT_N; r++)
        mb_printf(m, "strata_requests_rejected_total{reason=\"%s\"} %" PRId64 "\n", srv_reject_name((srv_reject)r),
                  s->rejected[r]);
    one(m, "connections_closed_slow_total", "counter",
        "Connections closed because a request did not arrive within --request-timeout.", s->slow_closed);
    one(m, "streams_overrun_total", "counter",
        "Streamed requests cancelled because their client left too many bytes unread.", s->overruns);
    one(m, "prompt_tokens_total", "counter", "Prompt tokens of admitted requests.", e->tokens_prompt);
    one(m, "prompt_tokens_cached_total", "counter", "Prompt tokens not computed: attached from the prefix cache.",
        e->tokens_cached);
    one(m, "generation_tokens_total", "counter", "Tokens generated (an end-of-generation token included).",
        e->tokens_generated);
    one(m, "tier_writes_total", "counter", "KV pages spilled from RAM to disk.", k->tier_writes);
    one(m, "tier_reads_total", "counter", "KV pages fetched from disk into RAM.", k->tier_reads);
    one(m, "tier_bytes_written_total", "counter", "Bytes written to the spill file.", k->tier_bytes_written);
    one(m, "tier_bytes_read_total", "counter", "Bytes read from the spill file (pages and streamed layer blocks).",
        k->tier_bytes_read);
    one(m, "tier_drops_total", "counter", "Cached KV pages dropped to make room in RAM or on disk.", k->tier_drops);
    one(m, "tier_io_errors_total", "counter", "KV pages lost to a failed spill read or write.", k->tier_io_errors);
    one(m, "tier_checksum_failures_total", "counter", "KV pages lost to a spill slot whose checksum did not match.",
        k->tier_checksum_failures);
    one(m, "prefix_cache_queries_tokens_total", "counter", "Prompt tokens looked up in the prefix cache.",
        k->prefix_tokens_queried);
    one(m, "prefix_cache_hits_tokens_total", "counter", "Prompt tokens attached from the prefix cache.",
        k->prefix_tokens_reused);
    one(m, "preemptions_total", "counter", "Running requests preempted to free RAM.", e->preemptions);
    one(m, "spec_drafts_total", "counter", "Speculative decoding: verify rounds (a token with a draft).", e->spec_drafts);
    one(m, "spec_drafted_tokens_total", "counter", "Speculative decoding: drafted tokens verified.", e->spec_drafted);
    one(m, "spec_accepted_tokens_total", "counter", "Speculative decoding: drafted tokens accepted (emitted).",
        e->spec_accepted);
    one(m, "spec_model_drafts_total", "counter", "Speculative decoding: verify rounds drafted by the draft model.",
        e->spec_model_drafts);
    one(m, "spec_model_drafted_tokens_total", "counter", "Speculative decoding: tokens drafted by the draft model.",
        e->spec_model_drafted);
    one(m, "spec_model_accepted_tokens_total", "counter",
        "Speculative decoding: draft-model tokens accepted (emitted).", e->spec_model_accepted);
    one(m, "spec_model_steps_total", "counter", "Speculative decoding: draft model forwards.", e->spec_model_steps);
    one(m, "spec_paused_steps_total", "counter",
        "Speculative decoding: steps without drafts because verify steps had cost more per token.",
        e->spec_paused_steps);
    one(m, "sparse_pages_attended_total", "counter",
        "Quest sparse decode: KV pages attended, summed over sparse layers and KV heads.", s->qst.pages_listed);
    one(m, "sparse_pages_total", "counter", "Quest sparse decode: KV pages a dense pass would have read, same sum.",
        s->qst.pages_total);
    hist_write(m, "time_to_first_token_seconds", "Seconds from submit to the first generated token.",
               &s->hist[SRV_H_TTFT]);
    hist_write(m, "inter_token_latency_seconds", "Seconds between consecutive tokens of one request.",
               &s->hist[SRV_H_ITL]);
    hist_write(m, "e2e_request_latency_seconds", "Seconds from submit to the finish.", &s->hist[SRV_H_E2E]);
    hist_write(m, "request_queue_time_seconds", "Seconds from submit to admission.", &s->hist[SRV_H_QUEUE]);
}

enum MHD_Result srv_metrics_ep(st_server *s, struct MHD_Connection *con) {
    if (!s->metrics) return srv_send_error(con, 501, "metrics are off: start the server with --metrics");
    mbuf m = {0};
    pthread_mutex_lock(&s->mu);
    metrics_text(s, &m);
    pthread_mutex_unlock(&s->mu);
    if (m.oom) {
        free(m.b);
        return srv_send_error(con, 500, "out of memory");
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(m.n, m.b, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(m.b);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    enum MHD_Result ok = MHD_queue_response(con, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ok;
}

/* ---- /slots ----------------------------------------------------------------------------------- */

static const char *state_name(st_req_state st) {
    switch (st) {
    case ST_REQ_WAITING: return "waiting";
    case ST_REQ_PREFILL: return "prefill";
    case ST_REQ_DECODE: return "decode";
    case ST_REQ_PREEMPTED: return "preempted";
    }
    return "unknown";
}

/* The prompt's text (the tokens as the tokenizer writes them). */
static json_t *prompt_text(const st_server *s, const srv_chan *c) {
    size_t need = 0;
    char *t = NULL;
    int rc = st_tok_decode(s->tok, c->prompt, c->n_prompt, 0, NULL, 0, &need);
    if ((rc == ST_E_LIMIT || !rc) && need && (t = malloc(need + 1)))
        rc = st_tok_decode(s->tok, c->prompt, c->n_prompt, 0, t, need, &need);
    json_t *o = srv_text(t && !rc ? t : "", t && !rc ? need : 0);
    free(t);
    return o;
}

/* One active request's slot object, or NULL when it is not active any more. */
static json_t *slot_json(st_server *s, const srv_chan *c) {
    st_engine_req_info in;
    if (st_engine_req_get_info(s->e, c->id, &in)) return NULL;
    st_kv *kv = st_engine_kv(s->e);
    int64_t n_map = 0, shared = 0;
    uint8_t *map = NULL;
    char *strip = NULL;
    if (in.seq >= 0 && st_kv_seq_page_map(kv, in.seq, NULL, 0, &n_map) == ST_E_LIMIT && n_map > 0) {
        map = malloc((size_t)n_map);
        strip = malloc((size_t)n_map + 1);
        if (!map || !strip || st_kv_seq_page_map(kv, in.seq, map, n_map, &n_map)) n_map = 0;
    }
    for (int64_t i = 0; i < n_map; i++) {
        const uint8_t f = map[i];
        const int sh = (f & ST_KV_PAGE_SHARED) != 0;
        shared += sh;
        strip[i] = f & ST_KV_PAGE_IN_RAM ? (sh ? 'S' : 'R') : f & ST_KV_PAGE_ON_DISK ? (sh ? 's' : 'D') : '.';
    }
    json_t *o = json_pack("{s:I, s:I, s:s, s:i, s:i, s:i, s:I, s:I, s:I, s:I, s:s#, s:f, s:f, s:f}", "id",
                          (json_int_t)in.id, "seq", (json_int_t)in.seq, "state", state_name(in.state), "n_prompt",
                          (int)in.stats.n_prompt, "n_cached", (int)in.stats.n_cached, "n_generated",
                          (int)in.stats.n_generated, "n_tokens", (json_int_t)in.n_tokens, "pages_hot",
                          (json_int_t)in.pages_hot, "pages_cold", (json_int_t)in.pages_cold, "pages_shared",
                          (json_int_t)shared, "pages", strip ? strip : "", (int)n_map, "t_queued",
                          in.stats.t_queued, "t_first", in.stats.t_first, "t_total", in.stats.t_total);
    free(map);
    free(strip);
    if (o && s->slots_text) {
        json_object_set_new(o, "prompt", c->prompt ? prompt_text(s, c) : json_string(""));
        json_object_set_new(o, "output", srv_text(c->text ? c->text : "", c->n_text));
    }
    return o;
}

static char *slots_snapshot(st_server *s) {
    st_kv *kv = st_engine_kv(s->e);
    st_kv_stats k;
    st_kv_get_stats(kv, &k);
    json_t *arr = json_array();
    /* the channel list is newest first: prepending lists the requests oldest first */
    for (const srv_chan *c = s->chans; c && arr; c = c->next) {
        if (!c->engine_ref) continue;
        json_t *o = slot_json(s, c);
        if (o) json_array_insert_new(arr, 0, o);
    }
    json_t *r = arr ? json_pack("{s:i, s:i, s:i, s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I}, s:o}", "n_parallel",
                                (int)st_engine_get_params(s->e)->n_parallel, "n_ctx", (int)s->n_ctx, "page_size",
                                st_kv_get_geometry(kv)->page_size, "pool", "pages", (json_int_t)k.n_pages, "used",
                                (json_int_t)k.pages_used, "cached", (json_int_t)k.pages_cached, "free",
                                (json_int_t)k.pages_free, "ram_pages", (json_int_t)k.ram_pages, "hot",
                                (json_int_t)k.pages_hot, "cold", (json_int_t)k.pages_cold, "slots", arr)
                    : NULL;
    char *j = r ? json_dumps(r, JSON_COMPACT) : NULL;
    json_decref(r);
    return j;
}

void srv_ops_collect(st_server *s) {
    if (!s->slots_want) return;
    free(s->slots_body);
    s->slots_body = slots_snapshot(s);
    s->slots_want = 0;
    s->slots_gen++;
}

enum MHD_Result srv_slots_ep(st_server *s, struct MHD_Connection *con) {
    pthread_mutex_lock(&s->mu);
    const uint64_t gen = s->slots_gen;
    s->slots_want = 1;
    s->pending = 1;
    pthread_cond_signal(&s->work);
    while (s->slots_gen == gen && !s->stop) pthread_cond_wait(&s->progress, &s->mu);
    char *j = s->slots_gen != gen && s->slots_body ? strdup(s->slots_body) : NULL;
    const int stopping = s->slots_gen == gen;
    pthread_mutex_unlock(&s->mu);
    if (!j) return stopping ? srv_send_error(con, 503, "the server is stopping") : srv_send_error(con, 500, "out of memory");
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(j), j, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(j);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result ok = MHD_queue_response(con, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ok;
}
