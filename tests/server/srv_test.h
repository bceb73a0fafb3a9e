/* What the server tests share: a scratch directory removed at exit, a curl call of one
 * route, and JSON parsing. Each test file is its own executable, so the statics here are
 * per test. */
#ifndef STRATA_TESTS_SRV_TEST_H
#define STRATA_TESTS_SRV_TEST_H

#include "strata/server.h"
#include "../test.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char srv_test_dir[] = "/tmp/strata-srv-test-XXXXXX";
static int srv_test_dir_made;

static void srv_test_cleanup(void) {
    if (!srv_test_dir_made) return;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", srv_test_dir);
    if (system(cmd)) fprintf(stderr, "  could not remove %s\n", srv_test_dir);
    srv_test_dir_made = 0;
}

/* The scratch directory (made at the first call, removed at exit). */
static const char *tmpdir(void) {
    if (!srv_test_dir_made) {
        ST_ASSERT(mkdtemp(srv_test_dir) != NULL);
        srv_test_dir_made = 1;
        atexit(srv_test_cleanup);
    }
    return srv_test_dir;
}

/* `curl -X METHOD` of PATH on 127.0.0.1:port with BODY as JSON (NULL: none; method NULL: GET,
 * or POST with a body) and extra curl arguments (may be NULL); the response body into *out
 * (malloc'd; out may be NULL). Returns the HTTP status (0 when curl failed). tag names the
 * files so that parallel calls do not collide. */
static int srv_curl(int port, const char *tag, const char *method, const char *path, const char *body,
                    const char *extra, char **out) {
    char bf[256], of[256];
    snprintf(bf, sizeof bf, "%s/%s.req", tmpdir(), tag);
    snprintf(of, sizeof of, "%s/%s.out", tmpdir(), tag);
    if (out) *out = NULL;
    if (body) {
        FILE *f = fopen(bf, "wb");
        if (!f) return 0;
        fputs(body, f);
        fclose(f);
    }
    const size_t cap = 1024 + strlen(path) + (extra ? strlen(extra) : 0);
    char *cmd = malloc(cap);
    if (!cmd) return 0;
    snprintf(cmd, cap, "curl -s -N --path-as-is %s%s -o %s -w '%%{http_code}' %s %s%s 'http://127.0.0.1:%d%s'",
             method ? "-X " : "", method ? method : "", of, extra ? extra : "",
             body ? "-H 'Content-Type: application/json' --data-binary @" : "", body ? bf : "", port, path);
    FILE *p = popen(cmd, "r");
    free(cmd);
    if (!p) return 0;
    int status = 0;
    if (fscanf(p, "%d", &status) != 1) status = 0;
    pclose(p);
    if (out) *out = test_slurp(of, NULL);
    return status;
}

static json_t *parse(const char *s) {
    json_error_t je;
    return s ? json_loads(s, 0, &je) : NULL;
}

/* Opens an engine with ep and serves it with sp on a free port (sp's port is ignored): *e,
 * *s and *port filled. Returns 0, or the failing call's error with its reason on stderr
 * (then nothing is left open and *e, *s are NULL). */
static int srv_test_start(const st_engine_params *ep, const st_server_params *sp, st_engine **e, st_server **s,
                          int *port) {
    char why[512];
    *e = NULL, *s = NULL;
    int rc = st_engine_create(ep, e, why, sizeof why);
    if (rc) {
        fprintf(stderr, "  engine: %s\n", why);
        return rc;
    }
    st_server_params p = *sp;
    p.port = 0;
    if ((rc = st_server_start(*e, &p, s, why, sizeof why))) {
        fprintf(stderr, "  server: %s\n", why);
        st_engine_destroy(*e);
        *e = NULL;
        return rc;
    }
    *port = st_server_port(*s);
    return 0;
}

#endif
