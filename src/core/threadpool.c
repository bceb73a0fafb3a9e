/* Thread pool: a fixed set of workers that all run the same task per dispatch.
 *
 * Decode dispatches some 50 small tasks per token (short ones on the small model), so the
 * latency of a dispatch matters:
 *   - workers spin on the generation counter (pause only for the first ST_SPIN_FIRM spins,
 *     then with a sched_yield every 1024) before they sleep on the condition variable. A
 *     pool with more threads than the CPUs it may run on yields every 1024 spins from the
 *     start: there a spinning worker holds the core that the thread with work needs (a
 *     several-fold loss: docs/PERFORMANCE.md, end to end, thread pool);
 *   - the generation, the task and its argument share one cache line, and the finish
 *     counter has its own, so a dispatch costs about one line transfer each way;
 *   - the dispatcher takes the mutex only when a worker sleeps: a worker announces its
 *     sleep (n_sleeping) under the mutex and then re-reads the generation; the dispatcher
 *     bumps the generation and then reads n_sleeping (both sequentially consistent), so
 *     one of them sees the other and no wake-up is lost.
 * A dispatch then costs about two cache-line round trips between the cores (figures in
 * docs/PERFORMANCE.md, end to end, thread pool).
 * st_threadpool_run splits work statically by (ith, nth) and the pool adds no reduction, so
 * results depend only on how callers split; st_threadpool_run_range hands out chunks by
 * timing, for items whose results do not depend on the thread. */
#include "strata/core.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#define ST_CPU_RELAX() _mm_pause()
#else
#define ST_CPU_RELAX() ((void)0)
#endif

#define ST_SPIN_ITERS 200000
#define ST_SPIN_FIRM 8192

struct worker {
    st_threadpool *tp;
    int ith;
    pthread_t thread;
};

/* A thread's share of a st_threadpool_run_range call, in chunks: next (low 32 bits) and
 * end (high 32 bits) in one word, so the owner taking from the front and a thief taking
 * from the back are each one compare-and-swap. One cache line each: the owner's claims
 * stay in its own cache until someone steals. */
struct range_slot {
    _Alignas(64) _Atomic uint64_t r;
};

struct st_threadpool {
    /* written by the dispatcher once per dispatch and read by every worker: one line, so a
     * waking worker gets the generation and the task in one transfer */
    _Alignas(64) _Atomic uint64_t gen;
    st_task_fn fn;
    void *arg;
    /* written by the workers as they finish: its own line, so the finishing writes do not
     * steal the command line from the workers still reading it */
    _Alignas(64) _Atomic int n_done;
    _Alignas(64) _Atomic int n_sleeping; /* workers blocked (or about to block) on cv */
    _Atomic int stop;
    int n_threads;
    int firm_spins; /* spins before the first yield: ST_SPIN_FIRM, or 0 when oversubscribed */
    struct worker *workers; /* [n_threads - 1]: ith 1..n-1 */
    struct range_slot *slots; /* [n_threads] */
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static void *worker_main(void *p) {
    struct worker *w = p;
    st_threadpool *tp = w->tp;
    uint64_t seen = 0;
    for (;;) {
        uint64_t g;
        int spins = 0;
        while ((g = atomic_load_explicit(&tp->gen, memory_order_acquire)) == seen &&
               !atomic_load_explicit(&tp->stop, memory_order_relaxed) && spins < ST_SPIN_ITERS) {
            if (++spins > tp->firm_spins && (spins & 1023) == 0)
                sched_yield();
            else
                ST_CPU_RELAX();
        }
        if (g == seen && !atomic_load(&tp->stop)) {
            /* Announce the sleep before the last look at gen; the dispatcher bumps gen
             * before it reads n_sleeping (both seq_cst), so one of the two sees the other
             * and no wake-up is lost. */
            pthread_mutex_lock(&tp->mu);
            atomic_fetch_add(&tp->n_sleeping, 1);
            while ((g = atomic_load(&tp->gen)) == seen && !atomic_load(&tp->stop))
                pthread_cond_wait(&tp->cv, &tp->mu);
            atomic_fetch_sub(&tp->n_sleeping, 1);
            pthread_mutex_unlock(&tp->mu);
        }
        if (atomic_load(&tp->stop)) return NULL;
        seen = g;
        tp->fn(tp->arg, w->ith, tp->n_threads);
        atomic_fetch_add_explicit(&tp->n_done, 1, memory_order_acq_rel);
    }
}

int st_threadpool_create(int n_threads, st_threadpool **out) {
    if (!out) return ST_E_INVAL;
    *out = NULL;
    if (n_threads < 1) return ST_E_INVAL;
    st_threadpool *tp = st_alloc_aligned(sizeof *tp, 64);
    if (!tp) return ST_E_NOMEM;
    memset(tp, 0, sizeof *tp);
    tp->n_threads = n_threads;
    cpu_set_t cpus;
    tp->firm_spins = sched_getaffinity(0, sizeof cpus, &cpus) == 0 && n_threads > CPU_COUNT(&cpus)
                         ? 0
                         : ST_SPIN_FIRM;
    tp->slots = st_alloc_aligned(sizeof *tp->slots * (size_t)n_threads, 64);
    if (!tp->slots) {
        st_free_aligned(tp);
        return ST_E_NOMEM;
    }
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->cv, NULL);
    if (n_threads > 1) {
        tp->workers = calloc((size_t)n_threads - 1, sizeof *tp->workers);
        if (!tp->workers) {
            st_free_aligned(tp->slots);
            st_free_aligned(tp);
            return ST_E_NOMEM;
        }
    }
    for (int i = 1; i < n_threads; i++) {
        struct worker *w = &tp->workers[i - 1];
        w->tp = tp;
        w->ith = i;
        int rc = pthread_create(&w->thread, NULL, worker_main, w);
        if (rc) {
            tp->n_threads = i; /* join only those started */
            st_threadpool_destroy(tp);
            return -rc;
        }
    }
    *out = tp;
    return 0;
}

void st_threadpool_destroy(st_threadpool *tp) {
    if (!tp) return;
    pthread_mutex_lock(&tp->mu);
    atomic_store(&tp->stop, 1);
    pthread_cond_broadcast(&tp->cv);
    pthread_mutex_unlock(&tp->mu);
    for (int i = 1; i < tp->n_threads; i++) pthread_join(tp->workers[i - 1].thread, NULL);
    pthread_cond_destroy(&tp->cv);
    pthread_mutex_destroy(&tp->mu);
    free(tp->workers);
    st_free_aligned(tp->slots);
    st_free_aligned(tp);
}

int st_threadpool_n_threads(const st_threadpool *tp) { return tp ? tp->n_threads : 1; }

void st_threadpool_run(st_threadpool *tp, st_task_fn fn, void *arg) {
    if (!tp || tp->n_threads == 1) {
        fn(arg, 0, 1);
        return;
    }
    tp->fn = fn;
    tp->arg = arg;
    atomic_store_explicit(&tp->n_done, 0, memory_order_relaxed);
    atomic_fetch_add(&tp->gen, 1); /* seq_cst: ordered before the n_sleeping load */
    if (atomic_load(&tp->n_sleeping)) {
        pthread_mutex_lock(&tp->mu);
        pthread_cond_broadcast(&tp->cv);
        pthread_mutex_unlock(&tp->mu);
    }
    fn(arg, 0, tp->n_threads);
    /* Yield after a short spin: with more threads than free cores a descheduled worker
     * would otherwise cost the spinner a whole time slice per dispatch. */
    for (int spins = 0; atomic_load_explicit(&tp->n_done, memory_order_acquire) != tp->n_threads - 1; spins++) {
        if (spins < 4096)
            ST_CPU_RELAX();
        else
            sched_yield();
    }
}

/* ---- ranges with stealing --------------------------------------------------------- */

struct range_job {
    st_threadpool *tp;
    int64_t n, grain;
    st_range_fn fn;
    void *arg;
};

static uint64_t range_pack(uint32_t next, uint32_t end) { return (uint64_t)end << 32 | next; }

/* Claims one chunk of slot s: the owner from the front, a thief from the back. Returns the
 * chunk index, or -1 when the slot is empty. */
static int64_t range_claim(struct range_slot *s, int from_back) {
    uint64_t v = atomic_load_explicit(&s->r, memory_order_relaxed);
    for (;;) {
        const uint32_t next = (uint32_t)v, end = (uint32_t)(v >> 32);
        if (next >= end) return -1;
        const uint64_t nv = from_back ? range_pack(next, end - 1) : range_pack(next + 1, end);
        if (atomic_compare_exchange_weak_explicit(&s->r, &v, nv, memory_order_relaxed,
                                                  memory_order_relaxed))
            return from_back ? (int64_t)end - 1 : (int64_t)next;
    }
}

static void range_run_chunk(const struct range_job *j, int64_t c, int ith) {
    const int64_t i0 = c * j->grain, i1 = i0 + j->grain < j->n ? i0 + j->grain : j->n;
    j->fn(j->arg, i0, i1, ith);
}

static void range_task(void *arg, int ith, int nth) {
    const struct range_job *j = arg;
    struct range_slot *slots = j->tp->slots;
    for (int64_t c; (c = range_claim(&slots[ith], 0)) >= 0;) range_run_chunk(j, c, ith);
    for (;;) {
        int victim = -1;
        uint32_t most = 0;
        for (int t = 0; t < nth; t++) {
            const uint64_t v = atomic_load_explicit(&slots[t].r, memory_order_relaxed);
            const uint32_t next = (uint32_t)v, end = (uint32_t)(v >> 32);
            if (end > next && end - next > most) most = end - next, victim = t;
        }
        if (victim < 0) return;
        const int64_t c = range_claim(&slots[victim], 1);
        if (c >= 0) range_run_chunk(j, c, ith);
    }
}

void st_threadpool_run_range(st_threadpool *tp, int64_t n, int64_t grain, st_range_fn fn,
                             void *arg) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (!tp || tp->n_threads == 1) {
        for (int64_t i = 0; i < n; i += grain) fn(arg, i, n - i < grain ? n : i + grain, 0);
        return;
    }
    int64_t n_chunks = (n + grain - 1) / grain;
    if (n_chunks > UINT32_MAX) { /* the slot packs chunk indices in 32 bits */
        grain = (n + UINT32_MAX - 1) / UINT32_MAX;
        n_chunks = (n + grain - 1) / grain;
    }
    for (int t = 0; t < tp->n_threads; t++) {
        int64_t c0, c1;
        st_split_range(n_chunks, t, tp->n_threads, &c0, &c1);
        /* made visible to the workers by st_threadpool_run's release of the generation */
        atomic_store_explicit(&tp->slots[t].r, range_pack((uint32_t)c0, (uint32_t)c1),
                              memory_order_relaxed);
    }
    struct range_job j = {tp, n, grain, fn, arg};
    st_threadpool_run(tp, range_task, &j);
}
