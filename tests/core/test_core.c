#include "strata/core.h"
#include "strata/quant.h"
#include "../test.h"

#include <errno.h>
#include <sched.h>
#include <unistd.h>
#include <stdatomic.h>
#include <time.h>

TEST(test_strerror_table) {
    CHECK_STR(st_strerror(0), "success");
    CHECK_STR(st_errname(ST_E_POOL_FULL), "ST_E_POOL_FULL");
    CHECK_STR(st_errname(-ENOSPC), "ENOSPC");
    CHECK_STR(st_strerror(-ENOSPC), "No space left on device");
    CHECK_STR(st_strerror(-99999), "unknown error");
}

TEST(test_ctx_error_detail) {
    st_ctx *ctx = NULL;
    CHECK_OK(st_ctx_create(NULL, &ctx));
    REQUIRE(ctx);
    CHECK_STR(st_ctx_error(ctx), "");
    int rc = st_seterr(ctx, ST_E_FORMAT, "%s: field %s at offset %d", "x.gguf", "n_tensors", 16);
    CHECK_INT(rc, ST_E_FORMAT);
    CHECK_STR(st_ctx_error(ctx), "x.gguf: field n_tensors at offset 16");
    CHECK_INT(st_ctx_last_code(ctx), ST_E_FORMAT);
    st_ctx_clear_error(ctx);
    CHECK_STR(st_ctx_error(ctx), "");
    st_ctx_destroy(ctx);
    st_ctx_destroy(NULL);
}

TEST(test_fp16_roundtrip) {
    /* every half value converts to float and back unchanged (NaNs stay NaN) */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = st_fp16_to_fp32((uint16_t)h);
        uint16_t back = st_fp32_to_fp16(f);
        if (f != f) {
            if (st_fp16_to_fp32(back) == st_fp16_to_fp32(back)) bad++;
        } else if (back != h) {
            bad++;
        }
    }
    CHECK_INT(bad, 0);
    CHECK_NEAR(st_fp16_to_fp32(st_fp32_to_fp16(1.0f / 3.0f)), 0.333251953125, 0);
    CHECK_NEAR(st_bf16_to_fp32(st_fp32_to_bf16(1.0f)), 1.0, 0);
    CHECK_INT(st_fp32_to_fp16(65520.0f), 0x7c00); /* rounds to +inf */
}

struct sum_job {
    _Atomic long hits[8];
};

static void sum_task(void *arg, int ith, int nth) {
    struct sum_job *j = arg;
    (void)nth;
    atomic_fetch_add(&j->hits[ith], 1);
}

TEST(test_threadpool_runs_each_thread_once) {
    for (int n = 1; n <= 4; n++) {
        st_threadpool *tp = NULL;
        CHECK_OK(st_threadpool_create(n, &tp));
        REQUIRE(tp);
        struct sum_job j;
        memset(&j, 0, sizeof j);
        for (int it = 0; it < 1000; it++) st_threadpool_run(tp, sum_task, &j);
        for (int i = 0; i < n; i++) CHECK_INT(atomic_load(&j.hits[i]), 1000);
        for (int i = n; i < 8; i++) CHECK_INT(atomic_load(&j.hits[i]), 0);
        st_threadpool_destroy(tp);
    }
}

/* Dispatches after idle gaps of 30 ms, long past the workers' spinning (they block on the
 * condition variable): each dispatch must still wake every worker exactly once. A lost
 * wake-up hangs here, and ctest's timeout fails the test. */
TEST(test_threadpool_wakes_sleeping_workers) {
    for (int n = 2; n <= 3; n++) {
        st_threadpool *tp = NULL;
        CHECK_OK(st_threadpool_create(n, &tp));
        REQUIRE(tp);
        struct sum_job j;
        memset(&j, 0, sizeof j);
        const struct timespec gap = {0, 30 * 1000 * 1000};
        for (int it = 0; it < 6; it++) {
            nanosleep(&gap, NULL);
            st_threadpool_run(tp, sum_task, &j);
            for (int b = 0; b < 200; b++) st_threadpool_run(tp, sum_task, &j); /* then a burst */
        }
        for (int i = 0; i < n; i++) CHECK_INT(atomic_load(&j.hits[i]), 6 * 201);
        st_threadpool_destroy(tp);
    }
}

/* st_threadpool_run_range: every item exactly once, chunks inside [0, n) and at most
 * `grain` long; with thread 1 slowed down, thread 0 must take chunks of thread 1's share
 * (the static split would give it none). */
#define RANGE_N 1000
struct range_job {
    _Atomic int seen[RANGE_N];
    _Atomic long by_thread[8];
    _Atomic int bad;
    int64_t grain, n;
    int slow_ith;
};

static void range_fn(void *arg, int64_t i0, int64_t i1, int ith) {
    struct range_job *j = arg;
    if (i0 < 0 || i1 > j->n || i1 <= i0 || i1 - i0 > j->grain || ith < 0 || ith >= 8)
        atomic_fetch_add(&j->bad, 1);
    for (int64_t i = i0; i < i1 && i >= 0 && i < RANGE_N; i++) atomic_fetch_add(&j->seen[i], 1);
    if (ith >= 0 && ith < 8) atomic_fetch_add(&j->by_thread[ith], i1 - i0);
    if (ith == j->slow_ith) { /* 50 chunks of 0.2 ms: thread 0 has 10 ms to steal some */
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
}

TEST(test_threadpool_range_covers_and_shares) {
    static const int64_t ns[] = {0, 1, 7, 64, 999, RANGE_N}, grains[] = {1, 3, 16, 5000};
    for (int nth = 1; nth <= 4; nth++) {
        st_threadpool *tp = NULL;
        CHECK_OK(st_threadpool_create(nth, &tp));
        REQUIRE(tp);
        for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
            for (size_t b = 0; b < sizeof grains / sizeof *grains; b++) {
                static struct range_job j;
                memset(&j, 0, sizeof j);
                j.n = ns[a], j.grain = grains[b], j.slow_ith = -1;
                st_threadpool_run_range(tp, j.n, j.grain, range_fn, &j);
                int wrong = 0;
                for (int64_t i = 0; i < RANGE_N; i++) wrong += atomic_load(&j.seen[i]) != (i < j.n);
                CHECK_INT(wrong, 0);
                CHECK_INT(atomic_load(&j.bad), 0);
            }
        if (nth == 2) {
            static struct range_job j;
            memset(&j, 0, sizeof j);
            j.n = RANGE_N, j.grain = 10, j.slow_ith = 1;
            st_threadpool_run_range(tp, j.n, j.grain, range_fn, &j);
            int wrong = 0;
            for (int64_t i = 0; i < RANGE_N; i++) wrong += atomic_load(&j.seen[i]) != 1;
            CHECK_INT(wrong, 0);
            CHECK(atomic_load(&j.by_thread[0]) > RANGE_N / 2); /* it stole from thread 1 */
            CHECK_INT(atomic_load(&j.by_thread[0]) + atomic_load(&j.by_thread[1]), RANGE_N);
        }
        st_threadpool_destroy(tp);
    }
    static struct range_job j; /* no pool: the caller runs every chunk */
    memset(&j, 0, sizeof j);
    j.n = 5, j.grain = 2, j.slow_ith = -1;
    st_threadpool_run_range(NULL, 5, 2, range_fn, &j);
    CHECK_INT(atomic_load(&j.by_thread[0]), 5);
    CHECK_INT(atomic_load(&j.bad), 0);
}

TEST(test_split_range_covers) {
    for (int n = 0; n < 50; n++)
        for (int nth = 1; nth < 6; nth++) {
            int64_t covered = 0, prev = 0;
            for (int ith = 0; ith < nth; ith++) {
                int64_t a, b;
                st_split_range(n, ith, nth, &a, &b);
                CHECK_INT(a, prev);
                covered += b - a;
                prev = b;
            }
            CHECK_INT(covered, n);
        }
}

TEST(test_isa_parse) {
    CHECK_INT(st_isa_parse("AVX2"), ST_ISA_AVX2);
    CHECK_INT(st_isa_parse("scalar"), ST_ISA_SCALAR);
    CHECK_INT(st_isa_parse("sse"), -1);
}

/* Runs st_ctx_create_msg with var=env (NULL: unset) and stderr captured; returns its code,
 * the reason in why, and whether anything was printed in *printed. */
static int ctx_create_var(const char *var, const char *env, int n_threads, int isa, st_ctx **ctx, char *why,
                          size_t why_len, int *printed) {
    const char *old = getenv(var);
    char saved[64] = "";
    if (old) snprintf(saved, sizeof saved, "%s", old);
    if (env) setenv(var, env, 1);
    else unsetenv(var);
    fflush(stderr);
    FILE *cap = tmpfile();
    int fd = dup(2);
    if (cap) dup2(fileno(cap), 2);
    st_ctx_params p = st_ctx_default_params();
    p.n_threads = n_threads;
    p.isa = isa;
    int rc = st_ctx_create_msg(&p, ctx, why, why_len);
    fflush(stderr);
    dup2(fd, 2);
    close(fd);
    *printed = cap ? lseek(fileno(cap), 0, SEEK_END) > 0 : -1;
    if (cap) fclose(cap);
    if (old) setenv(var, saved, 1);
    else unsetenv(var);
    return rc;
}

static int ctx_create_env(const char *env, int isa, st_ctx **ctx, char *why, size_t why_len, int *printed) {
    return ctx_create_var("STRATA_ISA", env, 1, isa, ctx, why, why_len, printed);
}

/* The context's ISA is one the CPU runs entirely (st_cpu_isa_missing NULL), so the kernel
 * table it gets is that ISA's own; an ISA it cannot run is refused, with the missing
 * feature named in the reason, and nothing printed (library code reports, the CLI prints). */
TEST(test_ctx_isa_is_what_runs) {
    const st_isa best = st_cpu_best_isa();
    CHECK(st_cpu_isa_missing(ST_ISA_SCALAR) == NULL);
    CHECK(st_cpu_isa_missing(best) == NULL);
    st_ctx *ctx = NULL;
    char why[256];
    int printed = 0;
    for (int isa = ST_ISA_SCALAR; isa <= ST_ISA_AVX512; isa++) {
        const char *missing = st_cpu_isa_missing((st_isa)isa);
        CHECK_INT(missing == NULL, isa <= (int)best);
        int rc = ctx_create_env(st_isa_name((st_isa)isa), -1, &ctx, why, sizeof why, &printed);
        CHECK_INT(printed, 0);
        if (missing) {
            CHECK_INT(rc, ST_E_UNSUPPORTED);
            CHECK(ctx == NULL);
            CHECK(strstr(why, "STRATA_ISA") && strstr(why, missing));
            rc = ctx_create_env(NULL, isa, &ctx, why, sizeof why, &printed);
            CHECK_INT(rc, ST_E_UNSUPPORTED);
            CHECK(strstr(why, missing) != NULL);
            continue;
        }
        CHECK_OK(rc);
        CHECK_STR(why, "");
        REQUIRE(ctx);
        CHECK_INT(st_ctx_isa(ctx), isa);
        CHECK_INT(st_kernels_get(st_ctx_isa(ctx))->isa, isa);
        st_ctx_destroy(ctx);
    }
    if (best < ST_ISA_AVX512) fprintf(stderr, "  (this CPU runs at most %s: the refusal was checked)\n", st_isa_name(best));
    else test_untested("this CPU runs every ISA: a forced ISA it lacks cannot be checked here");
    CHECK_INT(ctx_create_env("avx1024", -1, &ctx, why, sizeof why, &printed), ST_E_INVAL);
    CHECK(ctx == NULL);
    CHECK_INT(printed, 0);
    CHECK(strstr(why, "STRATA_ISA=avx1024") != NULL);
    CHECK_INT(ctx_create_env(NULL, 7, &ctx, why, sizeof why, &printed), ST_E_INVAL);
    CHECK_INT(ctx_create_env(NULL, -1, &ctx, why, sizeof why, &printed), 0);
    CHECK_INT(st_ctx_isa(ctx), best);
    st_ctx_destroy(ctx);
}

/* The default thread count is the CPUs this process may run on, not a constant; STRATA_THREADS
 * must be a whole number in range, and a bad one is named in the reason. */
TEST(test_ctx_threads) {
    const int def = st_cpu_default_threads();
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
    long want = CPU_COUNT(&set) < online ? CPU_COUNT(&set) : online;
    CHECK_INT(def, want < 1 ? 1 : want > ST_THREADS_MAX ? ST_THREADS_MAX : want);
    st_ctx *ctx = NULL;
    char why[256];
    int printed = 0;
    CHECK_OK(ctx_create_var("STRATA_THREADS", NULL, 0, -1, &ctx, why, sizeof why, &printed));
    REQUIRE(ctx);
    CHECK_INT(st_threadpool_n_threads(st_ctx_threadpool(ctx)), def);
    st_ctx_destroy(ctx);
    /* pinned to one CPU, the default follows (whatever this machine's size) */
    cpu_set_t one;
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set)) {
            CPU_SET(c, &one);
            break;
        }
    REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
    CHECK_INT(st_cpu_default_threads(), 1);
    int rc = ctx_create_var("STRATA_THREADS", NULL, 0, -1, &ctx, why, sizeof why, &printed);
    REQUIRE(sched_setaffinity(0, sizeof set, &set) == 0);
    CHECK_OK(rc);
    REQUIRE(ctx);
    CHECK_INT(st_threadpool_n_threads(st_ctx_threadpool(ctx)), 1);
    st_ctx_destroy(ctx);
    CHECK_OK(ctx_create_var("STRATA_THREADS", "3", 0, -1, &ctx, why, sizeof why, &printed));
    REQUIRE(ctx);
    CHECK_INT(st_threadpool_n_threads(st_ctx_threadpool(ctx)), 3);
    st_ctx_destroy(ctx);
    /* an explicit count wins over the variable, even a bad one */
    CHECK_OK(ctx_create_var("STRATA_THREADS", "abc", 1, -1, &ctx, why, sizeof why, &printed));
    REQUIRE(ctx);
    CHECK_INT(st_threadpool_n_threads(st_ctx_threadpool(ctx)), 1);
    st_ctx_destroy(ctx);
    const struct { const char *v; int rc; } bad[] = {
        {"abc", ST_E_INVAL}, {"0", ST_E_INVAL}, {"-2", ST_E_INVAL}, {"4x", ST_E_INVAL}, {" ", ST_E_INVAL},
        {"1025", ST_E_LIMIT}, {"99999999999999999999", ST_E_LIMIT},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK_INT(ctx_create_var("STRATA_THREADS", bad[i].v, 0, -1, &ctx, why, sizeof why, &printed), bad[i].rc);
        CHECK(ctx == NULL);
        CHECK_INT(printed, 0);
        char want_msg[64];
        snprintf(want_msg, sizeof want_msg, "STRATA_THREADS=%s ", bad[i].v);
        if (!strstr(why, want_msg)) fprintf(stderr, "  reason: '%s'\n", why);
        CHECK(strstr(why, want_msg) != NULL);
    }
    CHECK_INT(ctx_create_var("STRATA_THREADS", NULL, ST_THREADS_MAX + 1, -1, &ctx, why, sizeof why, &printed),
              ST_E_LIMIT);
    CHECK(strstr(why, "1025") != NULL);
}

TEST(test_type_geometry) {
    CHECK_INT(st_type_size(ST_TYPE_Q4_K), 144);
    CHECK_INT(st_type_block_size(ST_TYPE_Q8_0), 32);
    CHECK_INT(st_row_bytes(ST_TYPE_Q6_K, 512), 420);
    CHECK_INT(st_row_bytes(ST_TYPE_Q8_0, 33), 0);
    CHECK_INT(st_row_bytes((st_type)31, 32), 0); /* removed from ggml: unknown */
    CHECK_STR(st_type_name(ST_TYPE_BF16), "bf16");
    CHECK(st_type_name((st_type)1000) == NULL);
}

TEST_MAIN(test_type_geometry, test_strerror_table, test_ctx_error_detail, test_fp16_roundtrip,
          test_threadpool_runs_each_thread_once, test_threadpool_wakes_sleeping_workers,
          test_threadpool_range_covers_and_shares,
          test_split_range_covers, test_isa_parse, test_ctx_isa_is_what_runs,
          test_ctx_threads)
