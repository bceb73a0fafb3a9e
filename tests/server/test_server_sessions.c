/* Sessions of strata's server (built-in model, 127.0.0.1 on a free port, driven by curl):
 * save a conversation, list and delete it, resume it by name and by repeating its history
 * (greedy continuation equal, log-probabilities and all, to an uninterrupted run on a server
 * that never saw it; the history reported as cached), also after a restart on the same
 * directory; a file of another model, a truncated one and a bit-flipped one each refused
 * with its reason; bad names refused; a session directory that is a file refused. */
#include "strata/server.h"
#include "srv_test.h"

#include <jansson.h>
#include <sys/stat.h>
#include <unistd.h>



typedef struct srv {
    st_engine *e;
    st_server *s;
    int port;
} srv;

/* seed 0: the built-in model; else the built-in model drawn with another seed. sdir NULL:
 * no sessions. */
/* the API keys of the next srv_open, and the key http() sends (NULL: none) */
static const char *const *keys;
static int n_keys;
static const char *bearer;

static int srv_open(srv *v, const char *sdir, uint64_t seed) {
    memset(v, 0, sizeof *v);
    st_engine_params ep = st_engine_default_params();
    st_synth_params syn = st_engine_builtin_model();
    if (seed) syn.seed = seed, ep.synth = &syn;
    ep.n_threads = 2;
    ep.n_ctx = 512;
    ep.n_parallel = 2;
    ep.n_batch = 64;
    st_server_params sp = {.model_id = "m", .chat_template = "chatml", .session_dir = sdir, .api_keys = keys,
                           .n_api_keys = n_keys};
    return srv_test_start(&ep, &sp, &v->e, &v->s, &v->port);
}

static void srv_close(srv *v) {
    st_server_stop(v->s);
    st_engine_destroy(v->e);
    memset(v, 0, sizeof *v);
}

/* `curl -X METHOD` of PATH with BODY (NULL: none); the response into *out (malloc'd);
 * returns the HTTP status (0 when curl failed). */
static int http(const srv *v, const char *method, const char *path, const char *body, char **out) {
    char auth[128] = "";
    if (bearer) snprintf(auth, sizeof auth, "-H 'Authorization: Bearer %s'", bearer);
    return srv_curl(v->port, "s", method, path, body, auth, out);
}


static long long usage_of(json_t *o, const char *field) {
    json_t *u = json_object_get(o, "usage");
    if (!strcmp(field, "cached_tokens")) u = json_object_get(u, "prompt_tokens_details");
    return json_integer_value(json_object_get(u, field));
}

#define SYS "You are a test of sessions; this system prompt is long enough to fill several pages of sixteen tokens."

/* The conversation's messages: system, user, and with reply an assistant turn; with next a
 * further user turn. */
static char *messages(const char *reply, const char *next) {
    json_t *m = json_pack("[{s:s, s:s}, {s:s, s:s}]", "role", "system", "content", SYS, "role", "user", "content",
                          "hello there");
    if (reply) json_array_append_new(m, json_pack("{s:s, s:s}", "role", "assistant", "content", reply));
    if (next) json_array_append_new(m, json_pack("{s:s, s:s}", "role", "user", "content", next));
    char *s = json_dumps(m, JSON_COMPACT);
    json_decref(m);
    return s;
}

/* The continuation request: greedy, with log-probabilities (bit-identical logits show). */
static char *continuation(const char *reply, const char *session) {
    char *m = messages(reply, "and again, please");
    char *b = malloc(strlen(m) + 256);
    sprintf(b, "{\"messages\":%s,\"max_tokens\":10,\"temperature\":0,\"logprobs\":true,\"top_logprobs\":2%s%s%s}", m,
            session ? ",\"session\":\"" : "", session ? session : "", session ? "\"" : "");
    free(m);
    return b;
}

typedef struct answer {
    int status;
    char *text, *logprobs;
    long long prompt, cached;
} answer;

static answer ask(const srv *v, const char *body) {
    answer a = {0};
    char *out = NULL;
    a.status = http(v, "POST", "/v1/chat/completions", body, &out);
    json_t *o = parse(out), *ch = json_array_get(json_object_get(o, "choices"), 0);
    json_t *t = json_object_get(json_object_get(ch, "message"), "content");
    a.text = strdup(json_is_string(t) ? json_string_value(t) : "");
    a.logprobs = json_object_get(ch, "logprobs") ? json_dumps(json_object_get(ch, "logprobs"), JSON_SORT_KEYS) : NULL;
    a.prompt = usage_of(o, "prompt_tokens"), a.cached = usage_of(o, "cached_tokens");
    if (a.status != 200) fprintf(stderr, "  %d: %s\n", a.status, out ? out : "");
    json_decref(o), free(out);
    return a;
}

static void answer_free(answer *a) {
    free(a->text), free(a->logprobs);
}

/* the same tokens drawn with the same log-probabilities */
static int same(const answer *a, const answer *b) {
    return a->status == 200 && b->status == 200 && !strcmp(a->text, b->text) && a->logprobs && b->logprobs &&
           !strcmp(a->logprobs, b->logprobs) && a->prompt == b->prompt;
}

/* Saves the first turn (run here to get its reply) as NAME; returns its token count and
 * the reply in reply[cap]. */
static long long save_first_turn(const srv *v, const char *name, char *reply, size_t cap) {
    char *m = messages(NULL, NULL), body[4096], path[128], *out = NULL;
    snprintf(body, sizeof body, "{\"messages\":%s,\"max_tokens\":8,\"temperature\":0}", m);
    answer a = ask(v, body);
    snprintf(reply, cap, "%s", a.text);
    answer_free(&a);
    free(m);
    m = messages(reply, NULL);
    snprintf(body, sizeof body, "{\"messages\":%s}", m);
    free(m);
    snprintf(path, sizeof path, "/v1/sessions/%s", name);
    const int st = http(v, "POST", path, body, &out);
    json_t *o = parse(out);
    const long long n = st == 200 ? json_integer_value(json_object_get(o, "n_tokens")) : -1;
    if (st != 200) fprintf(stderr, "  save: %d %s\n", st, out ? out : "");
    CHECK_STR(json_string_value(json_object_get(o, "name")), name);
    json_decref(o), free(out);
    return n;
}

static off_t file_size(const char *path) {
    struct stat st;
    return stat(path, &st) ? -1 : st.st_size;
}

TEST(test_save_resume_restart) {
    char sdir[256], path[512];
    snprintf(sdir, sizeof sdir, "%s/s1", tmpdir());
    srv ref, v;
    /* the uninterrupted run: a server that never saw the conversation, no sessions */
    CHECK_OK(srv_open(&ref, NULL, 0));
    if (!ref.s) return;
    CHECK_OK(srv_open(&v, sdir, 0));
    if (!v.s) {
        srv_close(&ref);
        return;
    }
    char reply[1024];
    const long long n_hist = save_first_turn(&v, "conv", reply, sizeof reply);
    CHECK(n_hist > 100);
    snprintf(path, sizeof path, "%s/conv.session", sdir);
    const off_t size = file_size(path);
    CHECK(size > 64 + 4 * n_hist);
    char *body = continuation(reply, NULL), *named = continuation(reply, "conv");
    answer want = ask(&ref, body);
    CHECK_INT(want.status, 200);
    CHECK(want.prompt > n_hist);
    fprintf(stderr, "  history %lld tokens (%lld bytes), continuation prompt %lld\n", n_hist, (long long)size,
            want.prompt);
    /* by name: the whole history comes from the session */
    answer a = ask(&v, named);
    CHECK(same(&a, &want));
    CHECK_INT(a.cached, n_hist);
    answer_free(&a);
    /* the list */
    char *out = NULL;
    CHECK_INT(http(&v, "GET", "/v1/sessions", NULL, &out), 200);
    json_t *o = parse(out), *e = json_array_get(json_object_get(o, "data"), 0);
    CHECK_INT(json_array_size(json_object_get(o, "data")), 1);
    CHECK_STR(json_string_value(json_object_get(e, "name")), "conv");
    CHECK_INT(json_integer_value(json_object_get(e, "n_tokens")), n_hist);
    CHECK_INT(json_integer_value(json_object_get(e, "bytes")), size);
    CHECK(json_integer_value(json_object_get(e, "modified")) > 0 && json_is_integer(json_object_get(e, "age_s")));
    json_decref(o), free(out);
    /* restart: new engine and server on the same directory; repeating the history resumes it */
    srv_close(&v);
    CHECK_OK(srv_open(&v, sdir, 0));
    if (!v.s) goto done;
    a = ask(&v, body);
    CHECK(same(&a, &want));
    CHECK_INT(a.cached, n_hist); /* the new engine's prefix cache was empty */
    answer_free(&a);
    srv_close(&v);
    CHECK_OK(srv_open(&v, sdir, 0));
    if (!v.s) goto done;
    a = ask(&v, named);
    CHECK(same(&a, &want));
    CHECK_INT(a.cached, n_hist);
    answer_free(&a);
    /* the exact history as the prompt: all but its last token (computed for its logits) */
    {
        char *m = messages(reply, NULL), b2[4096];
        snprintf(b2, sizeof b2,
                 "{\"messages\":%s,\"add_generation_prompt\":false,\"max_tokens\":3,\"temperature\":0,"
                 "\"session\":\"conv\"}", m);
        free(m);
        a = ask(&v, b2);
        CHECK_INT(a.status, 200);
        CHECK_INT(a.prompt, n_hist);
        CHECK_INT(a.cached, n_hist - 1);
        answer_free(&a);
    }
    /* delete */
    CHECK_INT(http(&v, "DELETE", "/v1/sessions/conv", NULL, NULL), 200);
    CHECK(access(path, F_OK) != 0);
    CHECK_INT(http(&v, "DELETE", "/v1/sessions/conv", NULL, NULL), 404);
    a = ask(&v, named);
    CHECK_INT(a.status, 404);
    answer_free(&a);
    CHECK_INT(http(&v, "GET", "/v1/sessions", NULL, &out), 200);
    o = parse(out);
    CHECK_INT(json_array_size(json_object_get(o, "data")), 0);
    json_decref(o), free(out);
    srv_close(&v);
done:
    answer_free(&want);
    free(body), free(named);
    srv_close(&ref);
}

static void copy_file(const char *from, const char *to, long keep, long flip) {
    size_t n = 0;
    char *b = test_slurp(from, &n);
    REQUIRE(b != NULL);
    if (flip >= 0 && (size_t)flip < n) b[flip] ^= 0x10;
    FILE *f = fopen(to, "wb");
    REQUIRE(f != NULL);
    fwrite(b, 1, keep >= 0 && (size_t)keep < n ? (size_t)keep : n, f);
    fclose(f);
    free(b);
}

/* A named resume of a bad file: 409 with the reason; returns whether the message holds why. */
static int refused(const srv *v, const char *reply, const char *name, const char *why) {
    char *b = continuation(reply, name);
    char *out = NULL;
    const int st = http(v, "POST", "/v1/chat/completions", b, &out);
    const int ok = st == 409 && out && strstr(out, why) && strstr(out, name);
    if (!ok) fprintf(stderr, "  %s: %d %s\n", name, st, out ? out : "");
    free(b), free(out);
    return ok;
}

TEST(test_bad_files_and_names) {
    char sdir[256], odir[256], src[512], dst[512];
    snprintf(sdir, sizeof sdir, "%s/s2", tmpdir());
    snprintf(odir, sizeof odir, "%s/other", tmpdir());
    srv v, other;
    CHECK_OK(srv_open(&other, odir, 7)); /* another synthetic model (seed 7) */
    if (!other.s) return;
    char reply[1024], oreply[1024];
    CHECK(save_first_turn(&other, "conv", oreply, sizeof oreply) > 0);
    srv_close(&other);
    CHECK_OK(srv_open(&v, sdir, 0));
    if (!v.s) return;
    CHECK(save_first_turn(&v, "conv", reply, sizeof reply) > 0);
    snprintf(src, sizeof src, "%s/conv.session", odir);
    snprintf(dst, sizeof dst, "%s/foreign.session", sdir);
    copy_file(src, dst, -1, -1);
    snprintf(src, sizeof src, "%s/conv.session", sdir);
    const long size = (long)file_size(src);
    snprintf(dst, sizeof dst, "%s/cut.session", sdir);
    copy_file(src, dst, size / 2, -1);
    snprintf(dst, sizeof dst, "%s/flip.session", sdir);
    copy_file(src, dst, -1, size - 1000); /* a byte of the KV snapshot */
    CHECK(refused(&v, reply, "foreign", "another model"));
    CHECK(refused(&v, reply, "cut", "truncated"));
    CHECK(refused(&v, reply, "flip", "checksum mismatch"));
    /* the good one still resumes, and a request without a session still runs */
    char *b = continuation(reply, "conv");
    answer a = ask(&v, b);
    CHECK_INT(a.status, 200);
    answer_free(&a);
    free(b);
    /* bad names: 400 naming the rule, on every route and in a request */
    char *out = NULL, path[256];
    CHECK_INT(http(&v, "POST", "/v1/sessions/../x", "{\"prompt\":\"hi\"}", &out), 400);
    CHECK(out && strstr(out, "A-Z a-z 0-9 . _ -"));
    free(out);
    CHECK_INT(http(&v, "POST", "/v1/sessions/", "{\"prompt\":\"hi\"}", NULL), 400);
    CHECK_INT(http(&v, "POST", "/v1/sessions/..", "{\"prompt\":\"hi\"}", NULL), 400);
    CHECK_INT(http(&v, "DELETE", "/v1/sessions/a%2Fb", NULL, NULL), 400);
    snprintf(path, sizeof path, "/v1/sessions/%065d", 1);
    CHECK_INT(http(&v, "POST", path, "{\"prompt\":\"hi\"}", NULL), 400);
    snprintf(path, sizeof path, "/v1/sessions/%064d", 1); /* 64 characters: fine */
    CHECK_INT(http(&v, "POST", path, "{\"prompt\":\"hi\"}", NULL), 200);
    CHECK_INT(http(&v, "POST", "/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":2,\"session\":\"../x\"}", NULL), 400);
    CHECK_INT(http(&v, "POST", "/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":2,\"session\":3}", NULL), 400);
    CHECK_INT(http(&v, "POST", "/v1/sessions/x", "{\"prompt\":", NULL), 400);
    /* a prompt that does not continue the session */
    CHECK_INT(http(&v, "POST", "/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":2,\"session\":\"conv\"}", &out), 409);
    CHECK(out && strstr(out, "conv"));
    free(out);
    /* a matched session whose file went bad since it was indexed is dropped, and the request
     * runs without it */
    copy_file(src, src, -1, size / 3);
    char *plain = continuation(reply, NULL);
    a = ask(&v, plain);
    CHECK_INT(a.status, 200);
    answer_free(&a);
    CHECK_INT(http(&v, "GET", "/v1/sessions", NULL, &out), 200);
    CHECK(out && !strstr(out, "\"conv\""));
    free(out);
    srv_close(&v);
    CHECK_OK(srv_open(&v, sdir, 0)); /* restart: the bad files are not indexed */
    if (!v.s) {
        free(plain);
        return;
    }
    a = ask(&v, plain);
    CHECK_INT(a.status, 200);
    CHECK(a.cached < 100); /* nothing of the history came from the damaged session */
    answer_free(&a);
    CHECK_INT(http(&v, "GET", "/v1/sessions", NULL, &out), 200);
    CHECK(out && !strstr(out, "\"conv\"") && !strstr(out, "foreign") && !strstr(out, "\"cut\""));
    free(out), free(plain);
    srv_close(&v);
}

TEST(test_session_dir_checked) {
    char file[256], made[256], why[512];
    snprintf(file, sizeof file, "%s/a-file", tmpdir());
    FILE *f = fopen(file, "w");
    REQUIRE(f != NULL);
    fclose(f);
    st_engine_params ep = st_engine_default_params();
    ep.n_threads = 1;
    ep.n_ctx = 128;
    st_engine *e = NULL;
    CHECK_OK(st_engine_create(&ep, &e, why, sizeof why));
    if (!e) return;
    st_server *s = NULL;
    st_server_params sp = {.port = 0, .session_dir = file};
    CHECK_INT(st_server_start(e, &sp, &s, why, sizeof why), ST_E_INVAL);
    CHECK(strstr(why, "--session-dir") && strstr(why, "not a writable directory"));
    CHECK(s == NULL);
    snprintf(made, sizeof made, "%s/made-here", tmpdir());
    sp.session_dir = made;
    CHECK_OK(st_server_start(e, &sp, &s, why, sizeof why));
    struct stat st;
    CHECK(stat(made, &st) == 0 && S_ISDIR(st.st_mode));
    /* no sessions on a server without a directory: the routes say so */
    st_server_stop(s);
    st_engine_destroy(e);
}

/* Two API keys, two tenants: what one key saves, the other neither lists, continues (by name
 * or by repeating its history), nor deletes; a session of the same name is each one's own;
 * the files survive a restart kept apart; a wrong key is a 401. */
TEST(test_sessions_per_key) {
    char sdir[300];
    snprintf(sdir, sizeof sdir, "%s/keyed", tmpdir());
    static const char *const two[2] = {"key-alice", "key-bob"};
    keys = two, n_keys = 2;
    srv v;
    int rc = srv_open(&v, sdir, 0);
    CHECK_OK(rc);
    if (rc) {
        keys = NULL, n_keys = 0;
        return;
    }
    char *out = NULL;
    const char *conv = "{\"prompt\":\"Alice's secret plan is to sail at dawn\"}";
    bearer = "key-alice";
    CHECK_INT(http(&v, "POST", "/v1/sessions/plan", conv, &out), 200);
    free(out);
    bearer = "key-bob";
    CHECK_INT(http(&v, "GET", "/v1/sessions", NULL, &out), 200);
    json_t *o = parse(out);
    CHECK_INT((long long)json_array_size(json_object_get(o, "data")), 0);
    json_decref(o), free(out);
    CHECK_INT(http(&v, "POST", "/v1/completions", "{\"prompt\":\"Alice's secret plan is to sail at dawn and\",\"session\":\"plan\",\"max_tokens\":2}", &out), 404);
    free(out);
    CHECK_INT(http(&v, "DELETE", "/v1/sessions/plan", NULL, &out), 404);
    free(out);
    /* the same name is bob's own session */
    CHECK_INT(http(&v, "POST", "/v1/sessions/plan", "{\"prompt\":\"Bob plans to stay home\"}", &out), 200);
    free(out);
    bearer = "key-wrong";
    CHECK_INT(http(&v, "GET", "/v1/sessions", NULL, &out), 401);
    free(out);
    bearer = "key-alice";
    CHECK_INT(http(&v, "GET", "/v1/sessions", NULL, &out), 200);
    o = parse(out);
    json_t *d = json_object_get(o, "data");
    CHECK_INT((long long)json_array_size(d), 1);
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(d, 0), "name")), "plan"));
    CHECK_INT(json_integer_value(json_object_get(json_array_get(d, 0), "n_tokens")) > 20, 1);
    json_decref(o), free(out);
    srv_close(&v);
    /* after a restart (an empty prefix cache), still apart: bob repeating alice's history does
     * not continue her session, and alice continues hers by name */
    CHECK_OK(srv_open(&v, sdir, 0));
    bearer = "key-bob";
    CHECK_INT(http(&v, "POST", "/v1/completions", "{\"prompt\":\"Alice's secret plan is to sail at dawn and\",\"max_tokens\":2}", &out), 200);
    o = parse(out);
    CHECK_INT(usage_of(o, "cached_tokens"), 0);
    json_decref(o), free(out);
    bearer = "key-alice";
    CHECK_INT(http(&v, "POST", "/v1/completions", "{\"prompt\":\"Alice's secret plan is to sail at dawn and\",\"session\":\"plan\",\"max_tokens\":2}", &out), 200);
    o = parse(out);
    CHECK(usage_of(o, "cached_tokens") > 20);
    json_decref(o), free(out);
    bearer = "key-bob";
    CHECK_INT(http(&v, "GET", "/v1/sessions", NULL, &out), 200);
    o = parse(out);
    d = json_object_get(o, "data");
    CHECK_INT((long long)json_array_size(d), 1);
    json_decref(o), free(out);
    srv_close(&v);
    bearer = NULL, keys = NULL, n_keys = 0;
}

static void all_done(void) { srv_test_cleanup(); }

TEST(test_cleanup) { all_done(); }

TEST_MAIN(test_save_resume_restart, test_bad_files_and_names, test_session_dir_checked, test_sessions_per_key, test_cleanup)
