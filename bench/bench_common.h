/* Shared by the bench/ programs: figures rated against the read-bandwidth probe (core/membw.h)
 * measured in the same run, so that each is printed as a ratio to what this machine can do
 * right now; and small helpers. */
#ifndef STRATA_BENCH_COMMON_H
#define STRATA_BENCH_COMMON_H

#include "core/membw.h"
#include "strata/core.h"
#include "strata/model.h"
#include "strata/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- interleaved probing ----------------------------------------------------------------
 * The probe itself (st_membw_read, st_membw_probe) is the library's, as the CLI's bench command
 * uses it too. On a machine whose bandwidth drifts minute to minute (a shared VM), a probe taken
 * at the start of a run says little about a measurement made a minute later. bench_paired_run
 * alternates short probe passes and measured passes (probe, work, probe, work, ..., probe)
 * and rates each work pass against the mean of the two probes around it. */

/* One measured pass of the work under test; returns its GB/s. */
typedef double (*bench_work_fn)(void *arg);

typedef struct bench_paired {
    int n;                                   /* measured passes (pairs) */
    double ratio_med, ratio_min, ratio_max;  /* work GB/s / mean of the adjacent probes */
    double work_med, work_max;               /* work GB/s */
    double probe_med, probe_min, probe_max;  /* probe GB/s over all n + 1 probes */
} bench_paired;

static inline int bench_cmp_double_(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* median of v[n] (sorts v) */
static inline double bench_median_(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double_);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#define BENCH_PAIRED_MAX 64

/* Runs one unmeasured warm-up pass of fn, then `rounds` (1..BENCH_PAIRED_MAX) pairs of probe
 * and measured pass, and a closing probe. Every figure is reported, none discarded. */
static inline bench_paired bench_paired_run(st_threadpool *tp, st_membw_probe *p, int rounds, bench_work_fn fn,
                                            void *arg) {
    double probe[BENCH_PAIRED_MAX + 1], work[BENCH_PAIRED_MAX], ratio[BENCH_PAIRED_MAX];
    if (rounds < 1) rounds = 1;
    if (rounds > BENCH_PAIRED_MAX) rounds = BENCH_PAIRED_MAX;
    (void)fn(arg);
    for (int i = 0; i < rounds; i++) {
        probe[i] = st_membw_probe_run(tp, p);
        work[i] = fn(arg);
    }
    probe[rounds] = st_membw_probe_run(tp, p);
    bench_paired r = {.n = rounds};
    for (int i = 0; i < rounds; i++) ratio[i] = work[i] / (0.5 * (probe[i] + probe[i + 1]));
    r.ratio_med = bench_median_(ratio, rounds);
    r.ratio_min = ratio[0], r.ratio_max = ratio[rounds - 1];
    r.work_med = bench_median_(work, rounds);
    r.work_max = work[rounds - 1];
    r.probe_med = bench_median_(probe, rounds + 1);
    r.probe_min = probe[0], r.probe_max = probe[rounds];
    return r;
}

/* The next token of a timed decode loop: the first index of the largest logit. The decode
 * benches time st_runner_forward alone, as llama-bench's tg times llama_decode alone (it
 * samples nothing); this runs outside the timer. */
static inline int bench_argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* "avx512 (VNNI) (GFNI)": the kernel table a bench runs on, for its header line. */
static inline const char *bench_kernels_name(const st_kernels *k, char *buf, size_t cap) {
    snprintf(buf, cap, "%s%s%s%s", st_isa_name(k->isa), k->vnni ? " (VNNI)" : "", k->gfni ? " (GFNI)" : "", k->amx ? " (AMX)" : "");
    return buf;
}

/* Where ../shared lives: $STRATA_SHARED, else ../shared beside the source tree (as
 * tests/test.h finds it). */
static inline const char *bench_shared_dir(void) {
    const char *e = getenv("STRATA_SHARED");
    return e && *e ? e : STRATA_SOURCE_DIR "/../shared";
}

/* Model load params as the strata CLI takes them from the environment, so the benches
 * compare the same layouts: STRATA_MMAP=1 maps the file, STRATA_WLAYOUT=rows keeps every
 * matrix in the file's row layout. */
static inline st_model_load_params bench_model_load_params(void) {
    st_model_load_params p = st_model_load_default_params();
    const char *e = getenv("STRATA_MMAP");
    p.use_mmap = e && *e == '1';
    e = getenv("STRATA_WLAYOUT");
    if (e && !strcmp(e, "rows")) p.layout = ST_WEIGHT_LAYOUT_ROWS;
    return p;
}

/* "1k,4k,32768" into out[<= max]: positive numbers, k or K for 1024. Returns the count, or
 * -1 on a malformed list. */
static inline int bench_parse_list(const char *s, long long *out, int max) {
    int n = 0;
    while (*s && n < max) {
        char *end;
        double v = strtod(s, &end);
        if (end == s || v <= 0) return -1;
        if (*end == 'k' || *end == 'K') v *= 1024, end++;
        out[n++] = (long long)v;
        if (*end == ',') end++;
        else if (*end) return -1;
        s = end;
    }
    return n;
}

/* A fresh directory ROOT/strata-bench-NAME-XXXXXX into dir (cap bytes) for a tiered pool's
 * spill files; the caller removes it. Returns 0, or -1 with a message on stderr. */
static inline int bench_make_spill_dir(const char *root, const char *name, char *dir, size_t cap) {
    snprintf(dir, cap, "%s/strata-bench-%s-XXXXXX", root, name);
    if (mkdtemp(dir)) return 0;
    fprintf(stderr, "%s: cannot make a spill directory under %s\n", name, root);
    return -1;
}

/* The whole file at path, NUL-terminated (*n bytes before the NUL); NULL if it cannot be
 * read. Caller frees. */
static inline char *bench_read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = NULL;
    long sz = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (sz >= 0 && fseek(f, 0, SEEK_SET) == 0 && (b = malloc((size_t)sz + 1)) != NULL) {
        if (fread(b, 1, (size_t)sz, f) == (size_t)sz) {
            b[sz] = 0;
            *n = (size_t)sz;
        } else {
            free(b);
            b = NULL;
        }
    }
    fclose(f);
    return b;
}

/* The synthetic model of a preset and type at DIR/NAME.gguf (llama-spm's vocabulary from
 * ../shared when there, else byte-level), made when missing, and made again when what is there
 * is not what the preset makes (st_synth_check: shape keys, vocabulary, every tensor's type and
 * shape), so a file cached by an older preset or another type is never measured as this one.
 * tag names the bench in messages. 0 or the writer's error (printed). */
static inline int bench_ensure_model(st_ctx *ctx, const char *tag, const char *name, const char *preset,
                                     const char *type, const char *shared, const char *dir, char *path,
                                     size_t cap) {
    snprintf(path, cap, "%s/%s.gguf", dir, name);
    st_synth_params p = st_synth_default_params();
    st_synth_preset(preset, &p);
    st_synth_parse_type(type, &p);
    char vocab[1024];
    snprintf(vocab, sizeof vocab, "%s/models/vocab/ggml-vocab-llama-spm.gguf", shared);
    if (access(vocab, R_OK) == 0) p.vocab_from = vocab;
    if (access(path, R_OK) == 0) {
        st_gguf *g = NULL;
        int rc = st_gguf_open(ctx, path, &g);
        if (!rc) rc = st_synth_check(ctx, &p, g);
        st_gguf_close(g);
        if (!rc) return 0;
        fprintf(stderr, "%s: %s is not the %s model (%s): making it again\n", tag, path, name, st_ctx_error(ctx));
    }
    mkdir(dir, 0755);
    fprintf(stderr, "making %s ...\n", path);
    int rc = st_synth_write(ctx, &p, path);
    if (rc) fprintf(stderr, "%s: cannot make %s: %s\n", tag, path, st_ctx_error(ctx));
    return rc;
}

#endif
