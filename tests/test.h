/* Tiny test harness: checks print both values and are never compiled out.
 * A test file defines test functions with TEST(name) and lists them in
 * TEST_MAIN(name1, name2, ...). Each executable prints "N passed, N failed, N skipped".
 *
 * Skips, so that ctest counts what did not run instead of a silent pass:
 *  - test_skip(why): the current test cannot run here (no ../shared, no model, no strata
 *    binary, a CPU without the ISA it is about); call it and return. A test that called it
 *    and failed no check counts as skipped, not passed.
 *  - test_untested(why): part of the current test cannot run (one SIMD build, the io_uring
 *    path); the rest ran, so the test still counts as passed, and the note is listed.
 * The executable exits 1 when any test failed; TEST_SKIP_CODE (registered as ctest's
 * SKIP_RETURN_CODE) when none failed and none passed but some skipped, since then nothing
 * was checked; else 0, printing the names of the tests that skipped, because a file where
 * some tests ran still checked something and must fail if that breaks. */
#ifndef STRATA_TEST_H
#define STRATA_TEST_H

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_failures_;
static int test_skipped_;  /* the current test called test_skip */
static int test_untested_; /* ... or test_untested */

/* ctest's SKIP_RETURN_CODE (CMakeLists.txt's st_add_test); 77 as in automake. */
#define TEST_SKIP_CODE 77

#define TEST(name) static void name(void)

#define CHECK(cond)                                                                 \
    do {                                                                            \
        if (!(cond)) {                                                              \
            fprintf(stderr, "  FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);       \
            test_failures_++;                                                       \
        }                                                                           \
    } while (0)

#define CHECK_INT(a, b)                                                             \
    do {                                                                            \
        long long va_ = (long long)(a), vb_ = (long long)(b);                       \
        if (va_ != vb_) {                                                           \
            fprintf(stderr, "  FAIL %s:%d: %s == %s (%lld vs %lld)\n", __FILE__,    \
                    __LINE__, #a, #b, va_, vb_);                                    \
            test_failures_++;                                                       \
        }                                                                           \
    } while (0)

/* a == 0, printing the error name when it is not */
#define CHECK_OK(expr)                                                              \
    do {                                                                            \
        int rc_ = (expr);                                                           \
        if (rc_ != 0) {                                                             \
            fprintf(stderr, "  FAIL %s:%d: %s returned %d (%s)\n", __FILE__,        \
                    __LINE__, #expr, rc_, st_errname(rc_));                         \
            test_failures_++;                                                       \
        }                                                                           \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                       \
    do {                                                                            \
        double va_ = (double)(a), vb_ = (double)(b);                                \
        if (!(fabs(va_ - vb_) <= (tol))) {                                          \
            fprintf(stderr, "  FAIL %s:%d: |%s - %s| = |%.9g - %.9g| > %g\n",       \
                    __FILE__, __LINE__, #a, #b, va_, vb_, (double)(tol));           \
            test_failures_++;                                                       \
        }                                                                           \
    } while (0)

#define CHECK_STR(a, b)                                                             \
    do {                                                                            \
        const char *va_ = (a), *vb_ = (b);                                          \
        if (!va_ || !vb_ || strcmp(va_, vb_) != 0) {                                \
            fprintf(stderr, "  FAIL %s:%d: %s == %s (\"%s\" vs \"%s\")\n",          \
                    __FILE__, __LINE__, #a, #b, va_ ? va_ : "(null)",               \
                    vb_ ? vb_ : "(null)");                                          \
            test_failures_++;                                                       \
        }                                                                           \
    } while (0)

/* Stops the current test when a precondition fails. */
#define REQUIRE(cond)                                                               \
    do {                                                                            \
        if (!(cond)) {                                                              \
            fprintf(stderr, "  FAIL %s:%d: required %s\n", __FILE__, __LINE__,      \
                    #cond);                                                         \
            test_failures_++;                                                       \
            return;                                                                 \
        }                                                                           \
    } while (0)

/* The whole file at path, NUL-terminated (malloc'd; the caller frees), its length in *n (may
 * be NULL); NULL when it cannot be read. */
static inline char *test_slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = NULL;
    long sz = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (sz >= 0 && fseek(f, 0, SEEK_SET) == 0 && (b = malloc((size_t)sz + 1)) &&
        fread(b, 1, (size_t)sz, f) != (size_t)sz)
        sz = 0;
    if (b) b[sz] = 0;
    if (b && n) *n = (size_t)sz;
    fclose(f);
    return b;
}

/* Where ../shared lives: $STRATA_SHARED, else ../shared relative to the source tree. */
static inline const char *test_shared_dir(void) {
    const char *e = getenv("STRATA_SHARED");
    if (e && *e) return e;
#ifdef STRATA_SOURCE_DIR
    return STRATA_SOURCE_DIR "/../shared";
#else
    return "../shared";
#endif
}

static inline void test_skip(const char *why) {
    fprintf(stderr, "  SKIPPED: %s\n", why);
    test_skipped_ = 1;
}

static inline void test_untested(const char *why) {
    fprintf(stderr, "  PARTLY UNTESTED: %s\n", why);
    test_untested_ = 1;
}

/* Runs a shell command and returns its stdout (at most 64 KiB), NUL-terminated; NULL (and a
 * message naming the command) when it cannot start or exits non-zero. Caller frees. */
static inline char *test_run_capture(const char *cmd) {
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t k;
    while (buf && (k = fread(buf + n, 1, cap - n - 1, p)) > 0) n += k;
    int st = pclose(p);
    if (!buf || st != 0) {
        fprintf(stderr, "  command failed (%d): %s\n", st, cmd);
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    return buf;
}

typedef void (*test_fn_)(void);

static inline int test_run_all_(const char *names, test_fn_ *fns, int n, int argc, char **argv) {
    int passed = 0, failed = 0, skipped = 0;
    char skipped_names[4096] = "", partial_names[4096] = "";
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", names);
    char *save = NULL;
    char *name = strtok_r(buf, ", ", &save);
    for (int i = 0; i < n; i++, name = strtok_r(NULL, ", ", &save)) {
        if (argc > 1 && !strstr(name, argv[1])) continue;
        int before = test_failures_;
        test_skipped_ = test_untested_ = 0;
        fprintf(stderr, "[ RUN  ] %s\n", name);
        fns[i]();
        if (test_failures_ == before && test_skipped_) {
            skipped++;
            size_t used = strlen(skipped_names);
            snprintf(skipped_names + used, sizeof skipped_names - used, " %s", name);
            fprintf(stderr, "[ SKIP ] %s\n", name);
        } else if (test_failures_ == before) {
            passed++;
            if (test_untested_) {
                size_t used = strlen(partial_names);
                snprintf(partial_names + used, sizeof partial_names - used, " %s", name);
            }
            fprintf(stderr, "[  OK  ] %s\n", name);
        } else {
            failed++;
            fprintf(stderr, "[ FAIL ] %s\n", name);
        }
    }
    if (skipped) fprintf(stderr, "skipped:%s\n", skipped_names);
    if (*partial_names) fprintf(stderr, "passed, partly untested:%s\n", partial_names);
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    if (failed) return 1;
    return passed == 0 && skipped > 0 ? TEST_SKIP_CODE : 0;
}

#define TEST_MAIN(...)                                                              \
    int main(int argc, char **argv) {                                               \
        test_fn_ fns_[] = {__VA_ARGS__};                                            \
        return test_run_all_(#__VA_ARGS__, fns_, (int)(sizeof fns_ / sizeof fns_[0]), \
                             argc, argv);                                           \
    }

#endif
