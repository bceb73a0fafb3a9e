/* bench/serve: N concurrent clients (1, 4, 16) streaming completions from `strata serve`
 * (in process, on a free loopback port) on the small Q8_0 model: aggregate generated tok/s,
 * p50 / p99 time to first token and inter-token latency, each client timing the SSE events
 * as they arrive on its socket. llama-server's figures for the same shape come from
 * ../shared/peers/llama-bench.md (its clients made 64 new tokens, as these do); llama-server
 * itself is not run here.
 *
 * usage: serve [--n 1,4,16] [--tokens 64] [--models DIR] [-t THREADS] [-b N_BATCH (the engine's, 256)]
 */
#include "bench_common.h"
#include "bench_peer.h"
#include "strata/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>

typedef struct client {
    int port, id, n_tokens;
    double t0, t_first, t_end;
    double *gaps; /* inter-event gaps in seconds */
    int n_gaps, n_events;
    int ok;
} client;

static void *run_client(void *arg) {
    client *c = arg;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)c->port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a)) return NULL;
    char body[256], req[512];
    snprintf(body, sizeof body,
             "{\"prompt\":\"Client %d asks for a story about the number %d.\",\"max_tokens\":%d,\"temperature\":0,"
             "\"stream\":true}", c->id, c->id * 7, c->n_tokens);
    int n = snprintf(req, sizeof req, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s", strlen(body), body);
    c->t0 = st_time_now();
    if (write(fd, req, (size_t)n) != n) {
        close(fd);
        return NULL;
    }
    char buf[65536];
    double last = 0;
    ssize_t k;
    /* count "data: {" events (each a token's text, the final chunk included) as they arrive,
     * until "data: [DONE]" (the connection stays open: keep-alive, as clients use it) */
    char tail[8] = "";
    int done = 0;
    while (!done && (k = read(fd, buf, sizeof buf)) > 0) {
        const double now = st_time_now();
        for (ssize_t i = 0; i < k; i++) {
            memmove(tail, tail + 1, 6);
            tail[6] = buf[i];
            tail[7] = 0;
            if (!memcmp(tail, "data: [", 7)) done = 1;
            if (!memcmp(tail, "data: {", 7)) {
                if (!c->n_events) c->t_first = now;
                else if (c->n_gaps < c->n_tokens + 8) c->gaps[c->n_gaps++] = now - last;
                last = now;
                c->n_events++;
            }
        }
    }
    c->t_end = st_time_now();
    close(fd);
    c->ok = c->n_events > 0;
    return NULL;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p) {
    if (!n) return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    int i = (int)(p * (n - 1) + 0.5);
    return v[i];
}

int main(int argc, char **argv) {
    int ns[8] = {1, 4, 16}, n_ns = 3, tokens = 64, threads = 0, n_batch = 0;
    const char *dir = "/tmp/strata-bench";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--n") && i + 1 < argc) {
            n_ns = 0;
            for (char *t = strtok(argv[++i], ","); t && n_ns < 8; t = strtok(NULL, ",")) ns[n_ns++] = atoi(t);
        } else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) tokens = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--models") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-b") && i + 1 < argc) n_batch = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: serve [--n 1,4,16] [--tokens 64] [--models DIR] [-t THREADS] [-b N_BATCH]\n");
            return 2;
        }
    }
    st_ctx *ctx = NULL;
    if (st_ctx_create(NULL, &ctx)) return 1;
    char path[1024];
    if (bench_ensure_model(ctx, "serve", "small-q8_0", "small", "q8_0", bench_shared_dir(), dir, path, sizeof path))
        return 1;
    char mdpath[1200];
    snprintf(mdpath, sizeof mdpath, "%s/peers/llama-bench.md", bench_shared_dir());
    char *md = NULL;
    FILE *mf = fopen(mdpath, "rb");
    if (mf) {
        md = calloc(1, 1 << 20);
        if (md && fread(md, 1, (1 << 20) - 1, mf) == 0) free(md), md = NULL;
        fclose(mf);
    }
    printf("strata serve, small Q8_0, N streaming clients of %d new tokens each (greedy), loopback\n", tokens);
    printf("   N   tok/s   TTFT p50   TTFT p99   ITL p50   ITL p99\n");
    for (int t = 0; t < n_ns; t++) {
        const int N = ns[t];
        st_engine_params ep = st_engine_default_params();
        ep.model_path = path;
        ep.n_threads = threads;
        ep.n_parallel = N;
        ep.n_ctx = 512;
        ep.max_queue = N;
        if (n_batch) ep.n_batch = n_batch < N ? N : n_batch;
        char why[512];
        st_engine *e = NULL;
        st_server *s = NULL;
        st_server_params sp = {.port = 0};
        if (st_engine_create(&ep, &e, why, sizeof why) || st_server_start(e, &sp, &s, why, sizeof why)) {
            fprintf(stderr, "serve: %s\n", why);
            return 1;
        }
        client *cs = calloc((size_t)N, sizeof *cs);
        pthread_t *th = calloc((size_t)N, sizeof *th);
        double *ttft = calloc((size_t)N, sizeof *ttft), *gaps = calloc((size_t)N * (size_t)(tokens + 8), sizeof *gaps);
        for (int i = 0; i < N; i++) {
            cs[i] = (client){.port = st_server_port(s), .id = i, .n_tokens = tokens};
            cs[i].gaps = malloc((size_t)(tokens + 8) * sizeof *cs[i].gaps);
        }
        const double t0 = st_time_now();
        for (int i = 0; i < N; i++) pthread_create(&th[i], NULL, run_client, &cs[i]);
        for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
        const double wall = st_time_now() - t0;
        st_engine_stats es;
        st_server_get_stats(s, &es, NULL);
        int ng = 0, ok = 0;
        for (int i = 0; i < N; i++) {
            ok += cs[i].ok;
            ttft[i] = cs[i].t_first - cs[i].t0;
            memcpy(gaps + ng, cs[i].gaps, (size_t)cs[i].n_gaps * sizeof *gaps);
            ng += cs[i].n_gaps;
            free(cs[i].gaps);
        }
        printf("%4d %7.1f %8.1f ms %8.1f ms %6.1f ms %6.1f ms%s\n", N, (double)es.tokens_generated / wall,
               pct(ttft, N, 0.5) * 1e3, pct(ttft, N, 0.99) * 1e3, pct(gaps, ng, 0.5) * 1e3, pct(gaps, ng, 0.99) * 1e3,
               ok == N ? "" : " (some clients failed)");
        double peer[3];
        if ((N == 1 || N == 4 || N == 16) && md && !bench_peer_server_row(md, "small Q8_0", peer)) {
            const double pv = peer[N == 1 ? 0 : N == 4 ? 1 : 2];
            if (pv > 0)
                printf("       llama-server -np 16: %.1f tok/s (from %s, not this run): strata %.2fx\n", pv, mdpath,
                       (double)es.tokens_generated / wall / pv);
        }
        st_server_stop(s);
        st_engine_destroy(e);
        free(cs), free(th), free(ttft), free(gaps);
    }
    free(md);
    st_ctx_destroy(ctx);
    return 0;
}
