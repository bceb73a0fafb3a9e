/* The server's operations endpoints over real HTTP (curl), with the built-in model and an
 * SSD tier whose RAM pool is too small for the requests, so pages spill and come back:
 * /metrics checked by promtool and against the responses and the engine's own counters
 * (tokens, finishes, rejections, tier moves, histogram counts and buckets); /slots while a
 * streamed request is in flight (its state, its page strip against its length and residency,
 * user text only when asked for); 401 without the API key; 501 without --metrics. */
#include "strata/server.h"
#include "srv_test.h"

#include <jansson.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>



typedef struct srv {
    st_engine *e;
    st_server *s;
    int port;
    char spill[300];
} srv;

static int32_t open_np = 4, open_queue; /* n_parallel and max_queue (0: the engine's) */

/* A server on a free port over the built-in model; spill: a spill directory with ram_pages
 * pages of RAM (0: all in RAM). */
static int srv_open(srv *v, const st_server_params *sp0, int64_t ram_pages, int32_t n_ctx) {
    memset(v, 0, sizeof *v);
    st_engine_params ep = st_engine_default_params();
    ep.n_threads = 2;
    ep.n_ctx = n_ctx;
    ep.n_parallel = open_np;
    ep.max_queue = open_queue;
    ep.n_batch = 64;
    if (ram_pages) {
        static int n_spill;
        snprintf(v->spill, sizeof v->spill, "%s/spill%d", tmpdir(), n_spill++);
        ST_ASSERT(mkdir(v->spill, 0700) == 0);
        ep.spill_dir = v->spill;
        ep.ram_pages = ram_pages;
    }
    return srv_test_start(&ep, sp0, &v->e, &v->s, &v->port);
}

static void srv_close(srv *v) {
    st_server_stop(v->s);
    st_engine_destroy(v->e);
}

/* `curl` of PATH with BODY (NULL: GET); the body into *out (malloc'd); the HTTP status (0 when
 * curl failed). tag names its files so that parallel calls do not collide. */
static int http(const srv *v, const char *tag, const char *path, const char *body, const char *extra, char **out) {
    return srv_curl(v->port, tag, NULL, path, body, extra, out);
}


/* The value of the sample named exactly `name` (labels included) in an exposition; -1 when
 * it is missing. */
static double sample(const char *text, const char *name) {
    const size_t n = strlen(name);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (!strncmp(l, name, n) && l[n] == ' ') return atof(l + n + 1);
    return -1;
}

static long long isample(const char *text, const char *name) { return (long long)sample(text, name); }

/* A histogram's buckets: cumulative, non-decreasing, +Inf == _count; returns _count. */
static long long check_hist(const char *text, const char *name) {
    char key[256];
    long long prev = 0, n_b = 0;
    const size_t nl = strlen(name);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (strncmp(l, name, nl) || strncmp(l + nl, "_bucket{le=\"", 12)) continue;
        const char *sp = strchr(l, ' ');
        if (!sp) {
            CHECK(sp);
            return -1;
        }
        const long long c = atoll(sp + 1);
        CHECK(c >= prev);
        prev = c, n_b++;
    }
    snprintf(key, sizeof key, "%s_bucket{le=\"+Inf\"}", name);
    const long long inf = isample(text, key);
    snprintf(key, sizeof key, "%s_count", name);
    const long long cnt = isample(text, key);
    snprintf(key, sizeof key, "%s_sum", name);
    CHECK(sample(text, key) >= 0);
    CHECK_INT(n_b, 20); /* 19 bounds and +Inf */
    CHECK_INT(inf, cnt);
    CHECK_INT(prev, cnt);
    return cnt;
}

/* promtool's own parse and lint of the exposition: it must pass clean (exit 0, no note), so
 * Prometheus and its tooling take every name, type, HELP line and suffix as they are. */
static void promtool_check(const char *text) {
    if (system("command -v promtool >/dev/null 2>&1")) {
        test_untested("promtool is not installed: the exposition was not linted");
        return;
    }
    char path[300], cmd[700];
    snprintf(path, sizeof path, "%s/metrics.txt", tmpdir());
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    fputs(text, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "promtool check metrics < %s > %s.lint 2>&1; echo $?", path, path);
    char *rc = test_run_capture(cmd);
    REQUIRE(rc);
    snprintf(cmd, sizeof cmd, "%s.lint", path);
    char *lint = test_slurp(cmd, NULL);
    REQUIRE(lint);
    if (*lint) fprintf(stderr, "  promtool: %s\n", lint);
    CHECK_INT(atoi(rc), 0);
    CHECK_INT((int)strlen(lint), 0);
    free(rc);
    free(lint);
}

typedef struct job {
    const srv *v;
    char tag[16], body[512];
    int status;
    char *out;
} job;

static void *run_job(void *arg) {
    job *j = arg;
    j->status = http(j->v, j->tag, "/v1/completions", j->body, NULL, &j->out);
    return NULL;
}

/* Six requests at once through a RAM pool of 8 pages (each needs 6 or 7): pages spill and
 * come back; then every counter is held against what the responses and the engine say. */
TEST(test_metrics_values) {
    srv v;
    st_server_params sp = {.metrics = 1};
    CHECK_OK(srv_open(&v, &sp, 8, 256));
    if (!v.s) return;
    /* one invalid request, counted as rejected */
    CHECK_INT(http(&v, "bad", "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":\"many\"}", NULL, NULL), 400);
    enum { N = 6 };
    static job jobs[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        jobs[i] = (job){.v = &v};
        snprintf(jobs[i].tag, sizeof jobs[i].tag, "m%d", i);
        snprintf(jobs[i].body, sizeof jobs[i].body,
                 "{\"prompt\":\"request %d: a prompt long enough to cover several pages of sixteen bytes, "
                 "each a token here\",\"max_tokens\":%d,\"temperature\":0}",
                 i, 10 + 3 * i);
        REQUIRE(pthread_create(&th[i], NULL, run_job, &jobs[i]) == 0);
    }
    long long gen = 0, prompt = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        CHECK_INT(jobs[i].status, 200);
        json_t *o = parse(jobs[i].out), *u = json_object_get(o, "usage");
        CHECK_INT(json_integer_value(json_object_get(u, "completion_tokens")), 10 + 3 * i);
        CHECK_STR(json_string_value(json_object_get(json_array_get(json_object_get(o, "choices"), 0),
                                                    "finish_reason")), "length");
        gen += json_integer_value(json_object_get(u, "completion_tokens"));
        prompt += json_integer_value(json_object_get(u, "prompt_tokens"));
        json_decref(o);
        free(jobs[i].out);
    }
    char *m = NULL;
    CHECK_INT(http(&v, "metrics", "/metrics", NULL, NULL, &m), 200);
    REQUIRE(m);
    st_engine_stats es;
    st_kv_stats ks;
    st_server_get_stats(v.s, &es, &ks);
    promtool_check(m);
    CHECK_INT(isample(m, "strata_generation_tokens_total"), gen);
    CHECK_INT(isample(m, "strata_prompt_tokens_total"), prompt);
    CHECK_INT(isample(m, "strata_requests_finished_total{reason=\"length\"}"), N);
    CHECK_INT(isample(m, "strata_requests_finished_total{reason=\"error\"}"), 0);
    CHECK_INT(isample(m, "strata_requests_rejected_total{reason=\"invalid\"}"), 1);
    CHECK_INT(isample(m, "strata_requests_rejected_total{reason=\"queue_full\"}"), 0);
    CHECK_INT(isample(m, "strata_requests_running"), 0);
    CHECK_INT(isample(m, "strata_requests_waiting"), 0);
    const long long writes = isample(m, "strata_tier_writes_total");
    CHECK(writes > 0);
    CHECK_INT(writes, ks.tier_writes);
    CHECK_INT(isample(m, "strata_tier_reads_total"), ks.tier_reads);
    CHECK_INT(isample(m, "strata_tier_bytes_written_total"), ks.tier_bytes_written);
    CHECK(ks.tier_bytes_written >= writes * (long long)st_kv_get_geometry(st_engine_kv(v.e))->page_bytes / 2);
    CHECK_INT(isample(m, "strata_tier_io_errors_total"), 0);
    CHECK_INT(isample(m, "strata_tier_checksum_failures_total"), 0);
    CHECK_INT(isample(m, "strata_preemptions_total"), es.preemptions);
    CHECK_INT(isample(m, "strata_kv_pages_capacity"), ks.n_pages);
    CHECK_INT(isample(m, "strata_kv_pages{state=\"used\"}") + isample(m, "strata_kv_pages{state=\"cached\"}") +
                  isample(m, "strata_kv_pages{state=\"free\"}"),
              ks.n_pages);
    /* every prompt was looked up whole or but its last token; cache hits are whole pages */
    const long long q = isample(m, "strata_prefix_cache_queries_tokens_total"),
                    h = isample(m, "strata_prefix_cache_hits_tokens_total");
    CHECK(q >= prompt - N && q <= prompt);
    CHECK(h >= 0 && h <= q && h % 16 == 0);
    CHECK_INT(isample(m, "strata_prompt_tokens_cached_total"), es.tokens_cached);
    CHECK_INT(isample(m, "strata_sparse_pages_total"), 0); /* dense decode: no Quest */
    CHECK_INT(check_hist(m, "strata_e2e_request_latency_seconds"), N);
    CHECK_INT(check_hist(m, "strata_request_queue_time_seconds"), N);
    CHECK_INT(check_hist(m, "strata_time_to_first_token_seconds"), N);
    /* a gap between each pair of consecutive tokens of a request */
    CHECK_INT(check_hist(m, "strata_inter_token_latency_seconds"), gen - N);
    fprintf(stderr, "  %lld tokens generated, %lld pages spilled, %lld fetched, %lld preemptions\n", gen,
            (long long)ks.tier_writes, (long long)ks.tier_reads, (long long)es.preemptions);
    free(m);
    srv_close(&v);
}

/* Quest sparse decode: the pages attended are counted against those a dense pass reads. */
TEST(test_metrics_sparse) {
    srv v;
    st_server_params sp = {.metrics = 1};
    CHECK_OK(srv_open(&v, &sp, 0, 512));
    if (!v.s) return;
    char *m = NULL, body[512];
    /* a budget of 2 pages over a prompt of ~12 pages */
    snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":8,\"temperature\":0}",
             "sparse decode reads only the pages whose keys may score highest for the query; "
             "the rest of this prompt only makes the sequence long enough to have pages to skip over.");
    st_kv_quest_params qp = st_kv_quest_default_params();
    qp.budget = 32;
    qp.dense_layers = 0;
    /* the engine's runner is the scheduler's: set before any request runs */
    CHECK_OK(st_runner_set_quest(st_engine_runner(v.e), &qp, 0));
    CHECK_INT(http(&v, "q", "/v1/completions", body, NULL, NULL), 200);
    CHECK_INT(http(&v, "qm", "/metrics", NULL, NULL, &m), 200);
    REQUIRE(m);
    const long long att = isample(m, "strata_sparse_pages_attended_total"), tot = isample(m, "strata_sparse_pages_total");
    st_runner_quest_stats qs;
    st_runner_get_quest_stats(st_engine_runner(v.e), &qs);
    CHECK_INT(att, qs.pages_listed);
    CHECK_INT(tot, qs.pages_total);
    CHECK(att > 0 && att < tot);
    fprintf(stderr, "  sparse decode: %lld of %lld pages attended\n", att, tot);
    free(m);
    srv_close(&v);
}

/* One streamed request in flight: /slots shows it decoding, with a page strip as long as its
 * sequence and as resident as its counts say. */
static void slots_in_flight(int show_text) {
    srv v;
    st_server_params sp = {.metrics = 1, .slots_show_text = show_text};
    CHECK_OK(srv_open(&v, &sp, 6, 2048));
    if (!v.s) return;
    /* no spaces: the built-in vocabulary writes a space back as SPM's escape */
    const char *prompt = "the-slots-endpoint-shows-this-request-while-it-streams-its-tokens";
    job j = {.v = &v};
    snprintf(j.tag, sizeof j.tag, "st%d", show_text);
    snprintf(j.body, sizeof j.body, "{\"prompt\":\"%s\",\"max_tokens\":500,\"temperature\":0,\"stream\":true}",
             prompt);
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, run_job, &j) == 0);
    int seen = 0, polls = 0;
    for (; polls < 2000 && !seen; polls++) {
        char *out = NULL;
        CHECK_INT(http(&v, show_text ? "sl1" : "sl0", "/slots", NULL, NULL, &out), 200);
        json_t *o = parse(out), *slots = json_object_get(o, "slots"), *s0 = json_array_get(slots, 0);
        REQUIRE(o);
        CHECK_INT(json_integer_value(json_object_get(o, "page_size")), 16);
        CHECK_INT(json_integer_value(json_object_get(o, "n_parallel")), 4);
        CHECK_INT(json_integer_value(json_object_get(o, "n_ctx")), 2048);
        CHECK_INT(json_integer_value(json_object_get(json_object_get(o, "pool"), "ram_pages")), 6);
        const char *state = json_string_value(json_object_get(s0, "state"));
        if (s0 && state && !strcmp(state, "decode") && json_integer_value(json_object_get(s0, "n_generated")) > 60) {
            seen = 1;
            CHECK_INT(json_array_size(slots), 1);
            const long long n_tok = json_integer_value(json_object_get(s0, "n_tokens"));
            const char *pages = json_string_value(json_object_get(s0, "pages"));
            REQUIRE(pages);
            CHECK_INT((long long)strlen(pages), (n_tok + 15) / 16);
            long long ram = 0, disk = 0, sh = 0;
            for (const char *c = pages; *c; c++) {
                CHECK(strchr("SsRD.", *c) != NULL);
                ram += *c == 'R' || *c == 'S', disk += *c == 'D' || *c == 's', sh += *c == 'S' || *c == 's';
            }
            CHECK_INT(ram, json_integer_value(json_object_get(s0, "pages_hot")));
            CHECK_INT(disk, json_integer_value(json_object_get(s0, "pages_cold")));
            CHECK_INT(sh, json_integer_value(json_object_get(s0, "pages_shared")));
            /* 6 pages' worth of layer blocks in RAM for > 6 pages of sequence: a page holds
             * RAM when any of its blocks does */
            const int n_layer = st_kv_get_params(st_engine_kv(v.e))->n_layer;
            const json_t *pool = json_object_get(o, "pool");
            CHECK(ram <= 6 * n_layer && ram + disk > 6);
            CHECK(json_integer_value(json_object_get(pool, "hot")) <= 6 &&
                  json_integer_value(json_object_get(pool, "cold")) > 0); /* page equivalents */
            CHECK_INT(json_integer_value(json_object_get(s0, "n_prompt")) +
                          json_integer_value(json_object_get(s0, "n_generated")) - 1,
                      n_tok); /* the last token drawn is not in the KV yet */
            CHECK(json_real_value(json_object_get(s0, "t_total")) > 0);
            CHECK(json_real_value(json_object_get(s0, "t_first")) > 0);
            CHECK(json_integer_value(json_object_get(s0, "id")) >= 1);
            CHECK(json_integer_value(json_object_get(s0, "seq")) >= 0);
            if (show_text) {
                /* as the tokenizer writes it back: the byte vocabulary keeps SPM's leading "▁" */
                const char *pt = json_string_value(json_object_get(s0, "prompt"));
                CHECK(pt && strstr(pt, prompt) && strlen(pt) <= strlen(prompt) + 3);
                CHECK(json_is_string(json_object_get(s0, "output")));
                CHECK(strlen(json_string_value(json_object_get(s0, "output"))) > 0);
            } else {
                CHECK(!json_object_get(s0, "prompt") && !json_object_get(s0, "output"));
                CHECK(out && !strstr(out, "slots-endpoint-shows"));
            }
            fprintf(stderr, "  after %d polls: %lld tokens, pages %.40s...\n", polls + 1, n_tok, pages);
        }
        json_decref(o);
        free(out);
    }
    CHECK(seen);
    pthread_join(th, NULL);
    CHECK_INT(j.status, 200);
    free(j.out);
    /* finished: no slot left */
    char *out = NULL;
    CHECK_INT(http(&v, "sl_end", "/slots", NULL, NULL, &out), 200);
    json_t *o = parse(out);
    CHECK_INT(json_array_size(json_object_get(o, "slots")), 0);
    json_decref(o);
    free(out);
    srv_close(&v);
}

TEST(test_slots_no_text) { slots_in_flight(0); }
TEST(test_slots_show_text) { slots_in_flight(1); }

/* One request at a time and one waiting: of eight at once some are refused with 503, and
 * each refusal is counted as queue_full; the rest finish. */
TEST(test_rejected_queue_full) {
    srv v;
    st_server_params sp = {.metrics = 1};
    open_np = 1, open_queue = 1;
    const int rc = srv_open(&v, &sp, 0, 256);
    open_np = 4, open_queue = 0;
    CHECK_OK(rc);
    if (!v.s) return;
    enum { N = 8 };
    static job jobs[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        jobs[i] = (job){.v = &v};
        snprintf(jobs[i].tag, sizeof jobs[i].tag, "q%d", i);
        snprintf(jobs[i].body, sizeof jobs[i].body, "{\"prompt\":\"queue %d\",\"max_tokens\":200,\"temperature\":0}", i);
        REQUIRE(pthread_create(&th[i], NULL, run_job, &jobs[i]) == 0);
    }
    int n503 = 0, n200 = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        n503 += jobs[i].status == 503, n200 += jobs[i].status == 200;
        free(jobs[i].out);
    }
    CHECK_INT(n503 + n200, N);
    char *m = NULL;
    CHECK_INT(http(&v, "qm", "/metrics", NULL, NULL, &m), 200);
    REQUIRE(m);
    CHECK_INT(isample(m, "strata_requests_rejected_total{reason=\"queue_full\"}"), n503);
    CHECK_INT(isample(m, "strata_requests_finished_total{reason=\"length\"}") +
                  isample(m, "strata_requests_finished_total{reason=\"eos\"}"),
              n200);
    CHECK_INT(check_hist(m, "strata_e2e_request_latency_seconds"), n200);
    fprintf(stderr, "  %d answered, %d refused with 503\n", n200, n503);
    if (!n503) test_untested("every request found room in the queue: no refusal to count");
    free(m);
    srv_close(&v);
}

/* --api-key guards /metrics and /slots; without --metrics /metrics says how to turn it on. */
TEST(test_ops_auth_and_off) {
    srv v;
    st_server_params sp = {.metrics = 1, .api_key = "sekret"};
    CHECK_OK(srv_open(&v, &sp, 0, 256));
    if (!v.s) return;
    CHECK_INT(http(&v, "a1", "/metrics", NULL, NULL, NULL), 401);
    CHECK_INT(http(&v, "a2", "/slots", NULL, NULL, NULL), 401);
    CHECK_INT(http(&v, "a3", "/metrics", NULL, "-H 'Authorization: Bearer sekret'", NULL), 200);
    CHECK_INT(http(&v, "a4", "/slots", NULL, "-H 'Authorization: Bearer sekret'", NULL), 200);
    srv_close(&v);
    st_server_params off = {0};
    CHECK_OK(srv_open(&v, &off, 0, 256));
    if (!v.s) return;
    char *out = NULL;
    CHECK_INT(http(&v, "off", "/metrics", NULL, NULL, &out), 501);
    json_t *o = parse(out);
    const char *msg = json_string_value(json_object_get(json_object_get(o, "error"), "message"));
    CHECK(msg && strstr(msg, "--metrics"));
    json_decref(o);
    free(out);
    CHECK_INT(http(&v, "off2", "/slots", NULL, NULL, NULL), 200); /* /slots needs no flag */
    srv_close(&v);
}

/* A request with "spec_ngram" drafts by prompt lookup: its text is the plain request's, and
 * the speculative counters in /metrics are the engine's, with real rounds in them. */
TEST(test_spec_request) {
    srv v;
    st_server_params sp = {.metrics = 1};
    CHECK_OK(srv_open(&v, &sp, 0, 256));
    if (!v.s) return;
    char *a = NULL, *b = NULL, *m = NULL;
    const char *body = "{\"prompt\":\"abc abc abc abc abc abc\",\"max_tokens\":40,\"temperature\":0%s}";
    char ba[256], bb[256];
    snprintf(ba, sizeof ba, body, "");
    snprintf(bb, sizeof bb, body, ",\"spec_ngram\":2,\"draft_max\":6");
    CHECK_INT(http(&v, "plain", "/v1/completions", ba, NULL, &a), 200);
    CHECK_INT(http(&v, "spec", "/v1/completions", bb, NULL, &b), 200);
    REQUIRE(a && b);
    json_t *oa = parse(a), *ob = parse(b);
    const char *ta = json_string_value(json_object_get(json_array_get(json_object_get(oa, "choices"), 0), "text"));
    const char *tb = json_string_value(json_object_get(json_array_get(json_object_get(ob, "choices"), 0), "text"));
    CHECK_STR(ta, tb);
    CHECK_INT(http(&v, "bad", "/v1/completions", "{\"prompt\":\"x\",\"spec_ngram\":99}", NULL, NULL), 400);
    CHECK_INT(http(&v, "metrics", "/metrics", NULL, NULL, &m), 200);
    REQUIRE(m);
    promtool_check(m);
    st_engine_stats es;
    st_kv_stats ks;
    st_server_get_stats(v.s, &es, &ks);
    CHECK(es.spec_drafts > 0);
    CHECK(es.spec_accepted > 0 && es.spec_accepted <= es.spec_drafted);
    CHECK_INT(isample(m, "strata_spec_drafts_total"), es.spec_drafts);
    CHECK_INT(isample(m, "strata_spec_drafted_tokens_total"), es.spec_drafted);
    CHECK_INT(isample(m, "strata_spec_accepted_tokens_total"), es.spec_accepted);
    CHECK_INT(isample(m, "strata_spec_paused_steps_total"), es.spec_paused_steps);
    json_decref(oa), json_decref(ob);
    free(a), free(b), free(m);
    srv_close(&v);
}

/* With a draft model (the built-in model drafting for itself), a request drafts with it by
 * default and not with "spec_draft": false; the texts are equal, the draft model's counters
 * in /metrics are the engine's, and a spec_draft that is not a bool is a 400. */
TEST(test_spec_draft_request) {
    srv v;
    memset(&v, 0, sizeof v);
    st_engine_params ep = st_engine_default_params();
    ep.n_threads = 2, ep.n_ctx = 256, ep.n_parallel = open_np, ep.max_queue = open_queue, ep.n_batch = 64;
    const st_synth_params syn = st_engine_builtin_model();
    ep.draft_synth = &syn;
    ep.draft_p_min = 0; /* the random weights' distributions are flat */
    st_server_params sp = {.metrics = 1};
    CHECK_OK(srv_test_start(&ep, &sp, &v.e, &v.s, &v.port));
    if (!v.s) return;
    char *a = NULL, *b = NULL, *m = NULL;
    const char *body = "{\"prompt\":\"Once upon a time\",\"max_tokens\":40,\"temperature\":0%s}";
    char ba[256], bb[256];
    snprintf(ba, sizeof ba, body, ",\"spec_draft\":false");
    snprintf(bb, sizeof bb, body, "");
    CHECK_INT(http(&v, "dplain", "/v1/completions", ba, NULL, &a), 200);
    st_engine_stats es;
    st_kv_stats ks;
    st_server_get_stats(v.s, &es, &ks);
    CHECK_INT(es.spec_model_steps, 0);
    CHECK_INT(http(&v, "ddraft", "/v1/completions", bb, NULL, &b), 200);
    REQUIRE(a && b);
    json_t *oa = parse(a), *ob = parse(b);
    const char *ta = json_string_value(json_object_get(json_array_get(json_object_get(oa, "choices"), 0), "text"));
    const char *tb = json_string_value(json_object_get(json_array_get(json_object_get(ob, "choices"), 0), "text"));
    CHECK_STR(ta, tb);
    CHECK_INT(http(&v, "dbad", "/v1/completions", "{\"prompt\":\"x\",\"spec_draft\":\"yes\"}", NULL, NULL), 400);
    CHECK_INT(http(&v, "dmetrics", "/metrics", NULL, NULL, &m), 200);
    REQUIRE(m);
    promtool_check(m);
    st_server_get_stats(v.s, &es, &ks);
    CHECK(es.spec_model_drafts > 0);
    CHECK(es.spec_model_accepted > 0 && es.spec_model_accepted <= es.spec_model_drafted);
    CHECK_INT(isample(m, "strata_spec_model_drafts_total"), es.spec_model_drafts);
    CHECK_INT(isample(m, "strata_spec_model_drafted_tokens_total"), es.spec_model_drafted);
    CHECK_INT(isample(m, "strata_spec_model_accepted_tokens_total"), es.spec_model_accepted);
    CHECK_INT(isample(m, "strata_spec_model_steps_total"), es.spec_model_steps);
    CHECK_INT(isample(m, "strata_spec_drafts_total"), es.spec_drafts);
    json_decref(oa), json_decref(ob);
    free(a), free(b), free(m);
    srv_close(&v);
}

TEST_MAIN(test_metrics_values, test_metrics_sparse, test_slots_no_text, test_slots_show_text, test_rejected_queue_full,
          test_ops_auth_and_off, test_spec_request, test_spec_draft_request)
