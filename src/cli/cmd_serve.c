/* strata serve: the OpenAI-compatible HTTP server (server.h) over one engine, with
 * llama-server's spellings for its flags. Runs until SIGINT or SIGTERM. */
#include "cli/cli_quest.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/kv_flags.h"
#include "strata/server.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: strata serve [-m FILE] [--host ADDR] [--port N] [-c CTX] [-np N] [-b N_BATCH] [-t THREADS]\n"
            "                    [--api-key KEY | --api-key-file FILE] [--alias NAME] [--chat-template NAME]\n"
            "                    [--max-queue N] [--queue-timeout S] [--max-body BYTES] [--max-header BYTES]\n"
            "                    [--timeout S] [--request-timeout S] [--max-connections N] [--kv-page P]\n"
            "                    [-ctk/-ctv TYPE] [--mmap|--no-mmap] [--metrics] [--slots-show-text] [--verbose]\n"
            "                    [--session-dir DIR] [--shutdown-timeout S]\n"
            "OpenAI-compatible HTTP API: GET /health, GET /v1/models, POST /v1/completions,\n"
            "POST /v1/chat/completions (stream with \"stream\": true), POST /tokenize, POST /detokenize,\n"
            "POST /apply-template; for operations GET /slots (every active request: state, tokens, timings,\n"
            "where its KV pages are) and, with --metrics, GET /metrics (Prometheus text format; 501 without).\n"
            "GET /: a dashboard in the browser (chat, and the KV cache live from /slots and /metrics).\n"
            "--slots-show-text: /slots shows each request's prompt and output (by default no user text).\n"
            "--verbose: a line on stderr after each step that moved KV pages between RAM and disk.\n"
            "--timeout: seconds a connection may idle (600).\n"
            "--session-dir DIR: POST /v1/sessions/NAME saves a conversation's tokens and KV there (made if\n"
            "missing), GET /v1/sessions lists them, DELETE /v1/sessions/NAME removes one; a request with\n"
            "\"session\": NAME (or whose prompt begins with a saved one) continues it without its prefill.\n"
            "--host PATH (holding a '/', e.g. ./strata.sock): a unix socket instead of TCP.\n"
            "Defaults: --host 127.0.0.1 (loopback only), --port 8080 (0: any free port, printed), -np 4 requests\n"
            "at once sharing one KV pool (-c tokens each at most), --max-queue 4 x -np waiting (beyond: 503\n"
            "\"queue_full\"), --queue-timeout 60 s for a waiting request to be admitted (beyond: 503 \"queue_timeout\"\n"
            "or \"kv_budget\"; 0: no limit), --max-body 1 MiB (beyond: 413), --max-header 32 KiB (beyond: 431),\n"
            "--request-timeout 60 s to send a request or idle between two (beyond: closed), --max-connections 256.\n"
            "--api-key K1[,K2...] / --api-key-file (a key per line): every route but /health and the dashboard's\n"
            "page needs \"Authorization: Bearer KEY\" (the page keeps the key typed into it in its memory);\n"
            "each key's saved sessions are its own.\n"
            "Without -m, the built-in synthetic model (noise text). Prints \"listening on http://HOST:PORT\" on\n"
            "stderr when ready. SIGINT / SIGTERM stop it gracefully: it stops listening, lets the running\n"
            "requests finish for up to --shutdown-timeout seconds (30; then cancels them) and exits 0.\n"
            "With --kv-spill DIR and --instance-id ID the prefix cache survives a restart: the stop writes it\n"
            "to DIR/prefix-ID.kv, the next start with the same flags resumes it (a file that does not\n"
            "validate is reported and removed).\n" ST_CLI_QUEST_USAGE ST_CLI_KV_FLAGS_USAGE
            ST_CLI_SPEC_USAGE "(serve: the default of requests that send no \"spec_ngram\" / \"spec_draft\" / \"draft_max\")\n");
}

/* At start: loads the prefix-cache file if there is one; one that does not validate is
 * reported and removed (it is never served, and a later save would replace it anyway). */
static void prefix_resume(st_engine *e, const char *path) {
    st_kv_prefix_counts c;
    const double t0 = st_time_now();
    int rc = st_engine_prefix_load(e, path, &c);
    if (rc) {
        fprintf(stderr, "strata serve: prefix cache refused (%s): %s; removed, starting cold\n",
                st_strerror(rc), st_ctx_error(st_engine_ctx(e)));
        if (unlink(path) != 0) fprintf(stderr, "strata serve: cannot remove %s\n", path);
    } else if (c.pages > 0) {
        fprintf(stderr, "strata serve: prefix cache resumed from %s: %lld pages, %lld tokens in %lld "
                        "prefixes (%.3f s)\n", path, (long long)c.pages, (long long)c.tokens,
                (long long)c.chains, st_time_now() - t0);
    }
}

/* At a graceful stop, the server gone and the engine ours again: writes the prefix cache. A
 * request the stop cancelled finishes in a step; the save needs an idle engine. */
static void prefix_keep(st_engine *e, const char *path) {
    for (int i = 0; i < 1000 && st_engine_n_active(e) > 0; i++) {
        const st_engine_event *ev;
        int nev;
        if (st_engine_step(e, &ev, &nev)) break;
    }
    st_kv_prefix_counts c;
    const double t0 = st_time_now();
    int rc = st_engine_prefix_save(e, path, &c);
    if (rc)
        fprintf(stderr, "strata serve: prefix cache not saved: %s\n", st_ctx_error(st_engine_ctx(e)));
    else
        fprintf(stderr, "strata serve: prefix cache saved to %s: %lld pages, %lld tokens in %lld prefixes "
                        "(%.3f s)\n", path, (long long)c.pages, (long long)c.tokens, (long long)c.chains,
                st_time_now() - t0);
}

static volatile sig_atomic_t stop_flag;
static void on_signal(int sig) {
    (void)sig;
    stop_flag = 1;
}

static int bad(const char *opt, const char *val) {
    fprintf(stderr, "strata serve: bad value '%s' for %s\n", val ? val : "(missing)", opt);
    return ST_EXIT_INPUT;
}

#define MAX_KEYS 256

/* Appends the keys of text to *all (one per line; sep also separates them: ',' for
 * --api-key, as llama-server splits it). Returns 0, or -1 (out of memory, or no key in it). */
static int add_keys(char **all, const char *text, size_t n, char sep) {
    size_t have = *all ? strlen(*all) : 0;
    char *b = realloc(*all, have + n + 2);
    if (!b) return -1;
    *all = b;
    int found = 0;
    for (size_t i = 0, start = 0; i <= n; i++) {
        if (i < n && text[i] != sep && text[i] != '\n' && text[i] != '\r') continue;
        if (i > start) {
            memcpy(b + have, text + start, i - start);
            have += i - start;
            b[have++] = '\n';
            found = 1;
        }
        start = i + 1;
    }
    b[have] = 0;
    return found ? 0 : -1;
}

/* Splits the keys of all (in place) into keys[]; returns their count. */
static int split_keys(char *all, const char **keys) {
    int n = 0;
    for (char *p = all, *e; p && *p && n < MAX_KEYS; p = e + 1) {
        e = strchr(p, '\n');
        *e = 0;
        keys[n++] = p;
    }
    return n;
}

int st_cmd_serve(int argc, char **argv) {
    st_engine_params ep = st_engine_default_params();
    st_server_params sp = {.host = "127.0.0.1", .port = 8080};
    st_cli_quest quest;
    st_cli_kv_flags tier;
    st_cli_spec spec;
    memset(&spec, 0, sizeof spec);
    st_cli_quest_init(&quest);
    st_cli_kv_flags_init(&tier);
    char *key = NULL;
    const char *model = NULL;
    int mmap = 0, shutdown_s = 30;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long n;
        int takes = 1, ea = st_cli_engine_arg(&quest, NULL, &tier, &spec, a, v);
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            free(key);
            return 0;
        }
        if (ea < 0) return bad(a, v);
        if (ea) takes = ea == 1;
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--host")) sp.host = v;
        else if (!strcmp(a, "--alias") || !strcmp(a, "-a")) sp.model_id = v;
        else if (!strcmp(a, "--chat-template")) sp.chat_template = v;
        else if (!strcmp(a, "--session-dir")) sp.session_dir = v;
        else if (!strcmp(a, "--shutdown-timeout")) {
            if (st_cli_int(v, 0, 1 << 20, &n)) return bad(a, v);
            shutdown_s = (int)n;
        }
        else if (!strcmp(a, "--api-key")) {
            if (!v || add_keys(&key, v, strlen(v), ',')) {
                free(key);
                return bad(a, v);
            }
        } else if (!strcmp(a, "--api-key-file")) {
            char *buf = NULL;
            size_t len = 0;
            if (!v || st_cli_read_file(v, &buf, &len) || add_keys(&key, buf, len, '\n')) {
                fprintf(stderr, "strata serve: --api-key-file %s: cannot read a key from it\n", v ? v : "(missing)");
                free(buf);
                free(key);
                return ST_EXIT_INPUT;
            }
            free(buf);
        } else if (!strcmp(a, "--metrics")) sp.metrics = 1, takes = 0;
        else if (!strcmp(a, "--slots-show-text")) sp.slots_show_text = 1, takes = 0;
        else if (!strcmp(a, "--mmap")) mmap = 1, takes = 0;
        else if (!strcmp(a, "--no-mmap")) mmap = -1, takes = 0;
        else if (!strcmp(a, "--port")) {
            if (st_cli_int(v, 0, 65535, &n)) return bad(a, v);
            sp.port = (int)n;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
            if (st_cli_int(v, 1, 1 << 30, &n)) return bad(a, v);
            ep.n_ctx = (int32_t)n;
        } else if (!strcmp(a, "-np") || !strcmp(a, "--parallel")) {
            if (st_cli_int(v, 1, 4096, &n)) return bad(a, v);
            ep.n_parallel = (int32_t)n;
        } else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) {
            if (st_cli_int(v, 1, 1 << 16, &n)) return bad(a, v);
            ep.n_batch = (int32_t)n;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (st_cli_int(v, 1, ST_THREADS_MAX, &n)) return bad(a, v);
            ep.n_threads = (int)n;
        } else if (!strcmp(a, "--timeout") || !strcmp(a, "-to")) {
            if (st_cli_int(v, 1, 1 << 20, &n)) return bad(a, v);
            sp.timeout_s = (int)n;
        } else if (!strcmp(a, "--queue-timeout")) {
            if (st_cli_int(v, 0, 1 << 20, &n)) return bad(a, v);
            sp.queue_timeout_s = n ? (double)n : -1;
        } else if (!strcmp(a, "--request-timeout")) {
            if (st_cli_int(v, 1, 1 << 20, &n)) return bad(a, v);
            sp.request_timeout_s = (double)n;
        } else if (!strcmp(a, "--max-connections")) {
            if (st_cli_int(v, 1, 1 << 16, &n)) return bad(a, v);
            sp.max_connections = (int)n;
        } else if (!strcmp(a, "--max-header")) {
            unsigned long long b;
            if (!v || st_cli_parse_size(v, &b) || b < 1024 || b > (64u << 20)) return bad(a, v);
            sp.max_header = (size_t)b;
        } else if (!strcmp(a, "--max-queue")) {
            if (st_cli_int(v, 1, 1 << 20, &n)) return bad(a, v);
            ep.max_queue = (int32_t)n;
        } else if (!strcmp(a, "--max-body")) {
            unsigned long long b;
            if (!v || st_cli_parse_size(v, &b) || !b) return bad(a, v);
            sp.max_body = (size_t)b;
        } else if (!strcmp(a, "--kv-page")) {
            if (st_cli_int(v, 8, 256, &n) || (n & (n - 1))) return bad(a, v);
            ep.page_size = (int)n;
        } else if (!strcmp(a, "--kv-type") || !strcmp(a, "-ctk") || !strcmp(a, "-ctv") ||
                   !strcmp(a, "--cache-type-k") || !strcmp(a, "--cache-type-v")) {
            if (!v || st_cli_kv_type(v, &ep.kv_type)) return bad(a, v);
        } else {
            fprintf(stderr, "strata serve: unknown option '%s' (strata serve --help lists them)\n", a);
            free(key);
            return ST_EXIT_INPUT;
        }
        if (takes && !v) return bad(a, v);
        i += takes;
    }
    if (ep.n_batch < ep.n_parallel) ep.n_batch = ep.n_parallel;
    st_model_load_params lp = st_cli_model_load_params(mmap);
    ep.model_path = model;
    ep.use_mmap = lp.use_mmap;
    ep.weight_rows = lp.layout == ST_WEIGHT_LAYOUT_ROWS;
    ep.quest = quest.p;
    ep.mem_limit = st_cli_mem_available();
    st_cli_spec_apply(&spec, &ep);
    int rc = st_cli_kv_flags_engine(&tier, &ep, "serve");
    if (rc) {
        free(key);
        return st_cli_exit_code(rc);
    }
    /* the model's id: --alias, else the file's name */
    if (!sp.model_id) sp.model_id = model ? (strrchr(model, '/') ? strrchr(model, '/') + 1 : model) : "strata-builtin";
    const char *keys[MAX_KEYS];
    sp.api_keys = keys;
    sp.n_api_keys = split_keys(key, keys);
    sp.verbose = tier.verbose; /* --verbose is the tier flags' (kv_flags.h) */
    char why[768];
    st_engine *e = NULL;
    if ((rc = st_engine_create(&ep, &e, why, sizeof why))) {
        fprintf(stderr, "strata serve: %s\n", why);
        if (rc == ST_E_LIMIT && strstr(why, "memory"))
            fprintf(stderr, "strata serve: lower -c or -np, or give the KV cache an SSD tier (--kv-spill DIR, "
                            "--kv-ram SIZE|auto)\n");
        free(key);
        return st_cli_exit_code(rc);
    }
    /* The prefix cache across a restart: only under an id the operator chose (the default,
     * the pid, never repeats, so a file under it could never be resumed). */
    char pfx[4096] = "";
    if (tier.spill_dir && tier.instance_id && *tier.instance_id)
        snprintf(pfx, sizeof pfx, "%s/prefix-%s.kv", tier.spill_dir, tier.instance_id);
    if (*pfx) prefix_resume(e, pfx);
    st_server *s = NULL;
    if ((rc = st_server_start(e, &sp, &s, why, sizeof why))) {
        fprintf(stderr, "strata serve: %s\n", why);
        st_engine_destroy(e);
        free(key);
        return st_cli_exit_code(rc);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (strchr(sp.host, '/'))
        fprintf(stderr, "strata serve: %s, %d requests at once, context %d; listening on unix:%s\n",
                st_model_desc(st_engine_model(e)), ep.n_parallel, st_engine_n_ctx(e), sp.host);
    else
        fprintf(stderr, "strata serve: %s, %d requests at once, context %d; listening on http://%s:%d\n",
                st_model_desc(st_engine_model(e)), ep.n_parallel, st_engine_n_ctx(e), sp.host, st_server_port(s));
    while (!stop_flag) usleep(50 * 1000); /* a signal between the check and a pause() would be lost */
    fprintf(stderr, "strata serve: stopping: no new requests, waiting up to %d s for the running ones\n", shutdown_s);
    const int left = st_server_drain(s, shutdown_s);
    if (left) fprintf(stderr, "strata serve: %d requests still running: cancelled\n", left);
    st_server_stop(s);
    if (*pfx) prefix_keep(e, pfx);
    fprintf(stderr, "strata serve: stopped\n");
    st_engine_destroy(e);
    free(key);
    return 0;
}
