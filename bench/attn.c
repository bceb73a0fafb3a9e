/* bench/attn: decode attention for a Llama-3.2-1B-like layer (32 query heads, 8 KV heads,
 * head_dim 64, f16 KV, page 16 (the KV library's default) or --page P) at 4k, 32k and 128k
 * context.
 *
 * Prints GB/s of K/V read, the ratio to the read-bandwidth probe measured in the same run,
 * and paged vs contiguous: the same kernel over one big "page" per layer holding
 * K^T [n_kv_head][head_dim][ctx] (keys dim-major, as pages store them) and V
 * [n_kv_head][ctx][head_dim]. Note that in this layout a block of 16 keys is 64 short runs
 * (one per dimension) ctx * 2 bytes apart, which hardware prefetchers track less well than
 * the 2 KiB runs of a 16-slot page: "contiguous" is the natural contiguous form of this
 * kernel's layout, not a tuned one. Paged pages are 32 KiB slabs at page 16 (K then
 * V, as the KV library lays out one layer of a page) placed in a shuffled order in one pool, so
 * consecutive logical pages are not adjacent in memory. Each measurement rotates over
 * enough layers that the working set is >= 256 MiB, so K/V come from DRAM, not cache.
 *
 * A third figure, "slabs", reads the same shuffled page slabs in decode order without any
 * attention math (plain loads, next slab prefetched): the bandwidth the paged access pattern
 * itself allows, so "%slabs" separates the kernel's cost from the layout's.
 *
 * The multiply-add bound line: the K/V rate of a kernel that did nothing but decode's
 * multiply-adds at the FMA rate measured on the same threads (each f16 element in 4 f32
 * multiply-adds, 8 bytes per 16-lane FMA). No exact decode kernel runs faster, even from
 * cache; --hot shows how close this one comes, and "80% of the probe is X% of it" how much
 * of its time the kernel's arithmetic may take for the target.
 *
 * --patterns (a diagnostic) adds what the memory gives the same slabs read without math in
 * three orders over two placements: decode's order (per run of pages, head after head, each
 * head's 2 KiB K chunk of every page, then its V chunks), each slab whole (K half, V half,
 * page after page), or a run's K halves page after page and then its V halves (a
 * page-major kernel that keeps two passes per run); slabs shuffled (as "paged" above) or one
 * layer's slabs adjacent in page order (what a pool with a region per layer would give a
 * sequence allocated in order). It reads them all again with the kernel's arithmetic but
 * none of its dependencies (each f16 element converted once and used in 4 multiply-adds
 * into running sums, as decode with 4 query heads per KV head does, prefetching at the
 * kernel's distance): how much of the memory a kernel this busy can keep in flight in each
 * order, the ceiling for a better kernel. It then times the decode kernel itself on both
 * placements.
 *
 * usage: attn [--threads N] [--ctx 4096,32768,131072] [--isa scalar|avx2|avx512] [--hot]
 *             [--trials N] [--no-thp] [--patterns] [--page P]
 * (--page: tokens per page, a power of two in 16..256; slabs are then P / 16 times larger)
 * (--hot: one layer only, so small contexts measure the kernel from cache: a diagnostic)
 */
#include "strata/attn.h"
#include "bench_common.h"

#include <immintrin.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define N_HEAD 32
#define N_KV 8
#define HEAD_DIM 64
#define PAGE_DEFAULT 16 /* the KV library's default page size */
#define MIN_WORKING_SET ((size_t)256 << 20)
/* How far ahead the arithmetic readers prefetch in decode's order: the decode kernel's
 * distance (ATTN_RUN_PF blocks of 2 KiB at page 16). Plain loads do best prefetching only
 * the next chunk (at ~53 GB/s probes 82-83% of the probe at 16 KiB, 84-94% at 2 KiB), with
 * the arithmetic the next chunk is too close (63-65%, against 80-83% at 16 KiB). The whole-slab orders prefetch the
 * next half slab (16 KiB at page 16) either way. */
#define SLAB_PF_BYTES ((size_t)16 << 10)

/* 2 MiB-aligned buffer, backed by transparent huge pages unless no_thp: with 4 KiB pages
 * every 32 KiB page slab costs 8 TLB walks, which the shuffled paged layout cannot amortize
 * (a contiguous cache walks page tables sequentially). The KV library's pool does the same
 * (st_alloc_huge in st_kv_create), so this bench measures the layout the library uses. */
static void *alloc_kv(size_t bytes, int no_thp) {
    bytes = (bytes + ((size_t)2 << 20) - 1) & ~(((size_t)2 << 20) - 1);
    void *p = st_alloc_aligned(bytes, (size_t)2 << 20);
    if (p && !no_thp) madvise(p, bytes, MADV_HUGEPAGE);
    return p;
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static void fill_f16(uint16_t *p, size_t n, uint64_t *seed) {
    uint16_t table[4096];
    for (int i = 0; i < 4096; i++)
        table[i] = st_fp32_to_fp16((float)((double)(rng_next(seed) >> 11) / 9007199254740992.0 * 2 - 1));
    for (size_t i = 0; i < n; i++) p[i] = table[(i ^ (i >> 12) * 2654435761u) & 4095];
}

/* The paged layout's access pattern without the attention math: every page slab of every
 * layer read in the order decode reads it (plain 256-bit loads). Decode cuts a layer's
 * pages into runs of ST_ATTN_SPLIT_TOKENS tokens that the threads take in turn, and walks
 * a run head after head: the head's K^T chunk of each page of the run, then its V chunks
 * (2 KiB each here), prefetching ahead as it goes; here each chunk's lines are loaded while
 * the next chunk's are prefetched. It tells how much of the streaming probe this pattern
 * itself allows, i.e. where the kernel stands against its own access pattern rather than
 * against one long sequential stream. */
struct slab_job {
    const st_attn_page *pages; /* [n_layers][n_pages] */
    int64_t n_layers, n_pages;
    int page;  /* tokens per page */
    int whole; /* 0: decode's order; 1: each slab whole, page after page; 2: a run's pages
                * page after page twice, every head's K the first time and V the second (the
                * order of a page-major kernel that keeps decode's two passes per run) */
    int math;  /* 0: plain loads; 1: AVX2 or 2: AVX-512 multiply-adds at the kernel's rate */
    double sink[64];
};

/* Running sums of the arithmetic readers: 8 independent chains, enough to keep both FMA
 * pipes busy, none waiting on anything but its line. */
typedef struct fma_acc {
    float f[8][16] __attribute__((aligned(64)));
} fma_acc;

/* XORs the 64-byte lines of chunk c into a0/a1 while prefetching chunk nx's. */
__attribute__((target("avx2"))) static inline void read_chunk(const uint8_t *c, const uint8_t *nx,
                                                               size_t bytes, __m256i *a0, __m256i *a1) {
    for (size_t o = 0; o < bytes; o += 64) {
        __builtin_prefetch(nx + o, 0, 3);
        *a0 = _mm256_xor_si256(*a0, _mm256_load_si256((const __m256i *)(c + o)));
        *a1 = _mm256_xor_si256(*a1, _mm256_load_si256((const __m256i *)(c + o + 32)));
    }
}

/* read_chunk with decode's arithmetic density: a 64-byte line is 32 f16 K/V elements, and
 * with 4 query heads per KV head each element takes part in 4 multiply-adds: 128 per line,
 * here 8 of 16 lanes (AVX-512) after two conversions, as the kernel converts each element
 * once. */
__attribute__((target("avx512f"))) static void fma_chunk512(const uint8_t *c, const uint8_t *nx,
                                                            size_t bytes, fma_acc *acc) {
    __m512 s[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) s[i] = _mm512_load_ps(acc->f[i]);
    const __m512 w = _mm512_set1_ps(1e-3f);
    for (size_t o = 0; o < bytes; o += 64) {
        __builtin_prefetch(nx + o, 0, 3);
        const __m512 a = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(c + o)));
        const __m512 b = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(c + o + 32)));
        s[0] = _mm512_fmadd_ps(a, w, s[0]), s[1] = _mm512_fmadd_ps(b, w, s[1]);
        s[2] = _mm512_fmadd_ps(a, w, s[2]), s[3] = _mm512_fmadd_ps(b, w, s[3]);
        s[4] = _mm512_fmadd_ps(a, w, s[4]), s[5] = _mm512_fmadd_ps(b, w, s[5]);
        s[6] = _mm512_fmadd_ps(a, w, s[6]), s[7] = _mm512_fmadd_ps(b, w, s[7]);
    }
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) _mm512_store_ps(acc->f[i], s[i]);
}

/* The same with 8 lanes: four conversions and 16 multiply-adds per line. */
__attribute__((target("avx2,fma,f16c"))) static void fma_chunk256(const uint8_t *c, const uint8_t *nx,
                                                                  size_t bytes, fma_acc *acc) {
    __m256 s[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) s[i] = _mm256_load_ps(acc->f[i]);
    const __m256 w = _mm256_set1_ps(1e-3f);
    for (size_t o = 0; o < bytes; o += 64) {
        __builtin_prefetch(nx + o, 0, 3);
        __m256 x[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) x[k] = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(c + o + 16 * k)));
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            s[2 * k] = _mm256_fmadd_ps(x[k], w, s[2 * k]);
            s[2 * k + 1] = _mm256_fmadd_ps(x[k], w, s[2 * k + 1]);
        }
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            s[2 * k] = _mm256_fmadd_ps(x[k], w, s[2 * k]);
            s[2 * k + 1] = _mm256_fmadd_ps(x[k], w, s[2 * k + 1]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) _mm256_store_ps(acc->f[i], s[i]);
}

/* The multiply-add bound: the K/V read rate of a kernel that did nothing but decode's
 * multiply-adds (each f16 element in N_HEAD / N_KV of them, in f32: the exact arithmetic), at
 * the rate this machine's threads issue FMAs when that is all they do (16 independent chains
 * in registers, 12 with AVX2's 16 registers: enough to fill both pipes), all threads at once.
 * No exact decode kernel runs faster, even from cache; from DRAM, a kernel reaches a share of
 * the probe only if its compute leaves the time for it. */
struct fma_job {
    int avx512;
    double rate[64];
    float sink[64]; /* each thread's sums: the FMAs have a use, so they all run */
};

#define FMA_ROUNDS 20000000L

__attribute__((target("avx512f"))) static double fma_rate512(float *sink) {
    __m512 a[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) a[i] = _mm512_set1_ps(1e-3f * (float)i);
    const __m512 m = _mm512_set1_ps(0.9999f), c = _mm512_set1_ps(1e-4f);
    const double t0 = st_time_now();
    for (long k = 0; k < FMA_ROUNDS / 16; k++) {
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) a[i] = _mm512_fmadd_ps(a[i], m, c);
    }
    const double t = st_time_now() - t0;
    __m512 s = a[0];
#pragma GCC unroll 16
    for (int i = 1; i < 16; i++) s = _mm512_add_ps(s, a[i]);
    *sink = _mm512_reduce_add_ps(s);
    return (double)FMA_ROUNDS / t / 1e9;
}

__attribute__((target("avx2,fma"))) static double fma_rate256(float *sink) {
    __m256 a[12]; /* 12 chains and 2 constants: 16 ymm registers */
#pragma GCC unroll 12
    for (int i = 0; i < 12; i++) a[i] = _mm256_set1_ps(1e-3f * (float)i);
    const __m256 m = _mm256_set1_ps(0.9999f), c = _mm256_set1_ps(1e-4f);
    const double t0 = st_time_now();
    for (long k = 0; k < FMA_ROUNDS / 12; k++) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) a[i] = _mm256_fmadd_ps(a[i], m, c);
    }
    const double t = st_time_now() - t0;
    float v[8];
    __m256 s = a[0];
#pragma GCC unroll 12
    for (int i = 1; i < 12; i++) s = _mm256_add_ps(s, a[i]);
    _mm256_storeu_ps(v, s);
    *sink = v[0];
    return (double)(FMA_ROUNDS / 12 * 12) / t / 1e9;
}

static void fma_task(void *arg, int ith, int nth) {
    struct fma_job *j = arg;
    if (ith < 64) j->rate[ith] = j->avx512 ? fma_rate512(&j->sink[ith]) : fma_rate256(&j->sink[ith]);
}

/* The multiply-add bound in GB/s of f16 K/V for the pool's threads (best of 3); 0 for the
 * scalar kernels. */
static double fma_bound_gbs(st_threadpool *tp, st_isa isa) {
    if (isa != ST_ISA_AVX512 && isa != ST_ISA_AVX2) return 0;
    const int lanes = isa == ST_ISA_AVX512 ? 16 : 8, nth = st_threadpool_n_threads(tp);
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        struct fma_job j = {.avx512 = isa == ST_ISA_AVX512};
        st_threadpool_run(tp, fma_task, &j);
        double sum = 0;
        for (int i = 0; i < nth && i < 64; i++) sum += j.rate[i];
        if (sum > best) best = sum;
    }
    /* an FMA covers `lanes` elements of one multiply-add each: 2 * lanes / G bytes of f16 */
    return best * 2.0 * lanes / (N_HEAD / N_KV);
}

/* One chunk in the job's manner: plain loads into a0/a1, or the arithmetic into acc. */
__attribute__((target("avx2"))) static inline void job_chunk(const struct slab_job *j, const uint8_t *c,
                                                              const uint8_t *nx, size_t bytes, __m256i *a0,
                                                              __m256i *a1, fma_acc *acc) {
    if (j->math == 2) fma_chunk512(c, nx, bytes, acc);
    else if (j->math == 1) fma_chunk256(c, nx, bytes, acc);
    else read_chunk(c, nx, bytes, a0, a1);
}

/* Chunk e of a run of np pages in decode's order (head, then K or V, then page). */
static inline const uint8_t *slab_chunk(const st_attn_page *pg, int64_t np, size_t chunk, int64_t e) {
    const int64_t h = e / (2 * np), kv = e / np % 2, i = e % np;
    return (const uint8_t *)(kv ? pg[i].v : pg[i].k) + h * chunk;
}

__attribute__((target("avx2"))) static void slab_task(void *arg, int ith, int nth) {
    struct slab_job *j = arg;
    fma_acc acc;
    memset(&acc, 0, sizeof acc);
    const size_t chunk = (size_t)j->page * HEAD_DIM * 2; /* one head of one page, K or V */
    const int64_t pps = st_attn_pages_per_run(j->page, j->n_pages), runs = (j->n_pages + pps - 1) / pps;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0;
    for (int64_t ri = ith; ri < j->n_layers * runs; ri += nth) {
        const st_attn_page *pg = j->pages + (ri / runs) * j->n_pages + (ri % runs) * pps;
        const int64_t np = j->n_pages - (ri % runs) * pps < pps ? j->n_pages - (ri % runs) * pps : pps;
        if (j->whole == 2) {
            for (int kv = 0; kv < 2; kv++)
                for (int64_t i = 0; i < np; i++) {
                    const st_attn_page *nx = &pg[i + 1 < np ? i + 1 : i];
                    job_chunk(j, kv ? pg[i].v : pg[i].k, kv ? nx->v : nx->k, N_KV * chunk, &a0, &a1, &acc);
                }
            continue;
        }
        if (j->whole) {
            for (int64_t i = 0; i < np; i++) {
                const st_attn_page *nx = &pg[i + 1 < np ? i + 1 : i];
                job_chunk(j, pg[i].k, pg[i].v, N_KV * chunk, &a0, &a1, &acc);
                job_chunk(j, pg[i].v, nx->k, N_KV * chunk, &a0, &a1, &acc);
            }
            continue;
        }
        /* chunk e of the run: head e / (2 np), K or V, page e % np; the next one, or with
         * the arithmetic the one SLAB_PF_BYTES ahead, is prefetched alongside (the last one
         * at the run's end) */
        const int64_t ne = N_KV * 2 * np;
        const int64_t ahead = !j->math || chunk >= SLAB_PF_BYTES ? 1 : (int64_t)(SLAB_PF_BYTES / chunk);
        for (int64_t e = 0; e < ne; e++) {
            const int64_t f = e + ahead < ne ? e + ahead : ne - 1;
            job_chunk(j, slab_chunk(pg, np, chunk, e), slab_chunk(pg, np, chunk, f), chunk, &a0, &a1, &acc);
        }
    }
    j->sink[ith] = (double)_mm256_extract_epi32(_mm256_xor_si256(a0, a1), 0) + acc.f[0][0] + acc.f[7][15];
}

typedef struct layer_set {
    int n_layers;
    st_attn_page *pages; /* [n_layers][n_pages] */
    st_attn_seq *seqs;   /* [n_layers] */
    void *mem;
} layer_set;

/* Seconds per call of `iters` decode calls rotating over the layers. */
static double time_decode(st_ctx *ctx, st_attn_ws *ws, const st_attn_geom *g, layer_set *ls,
                          const float *q, float *out, int iters) {
    double t0 = st_time_now();
    for (int i = 0; i < iters; i++) {
        int rc = st_attn_decode(ctx, ws, g, &ls->seqs[i % ls->n_layers], q, out);
        if (rc) {
            fprintf(stderr, "decode failed: %s (%s)\n", st_strerror(rc), st_ctx_error(ctx));
            exit(1);
        }
    }
    return (st_time_now() - t0) / iters;
}

typedef struct result {
    int64_t n_ctx;
    int n_layers;
    double mib, gbp, gbc, us, gbs; /* gbs: the slab-pattern probe */
    double pat[2][2][3]; /* --patterns: [with arithmetic][in order][slab_job.whole] GB/s */
    double kern[2];   /* --patterns: the decode kernel, [in order] GB/s */
} result;

/* GB/s of the best of `trials` reads of every slab of the job's layers. */
static double time_slabs(st_ctx *ctx, struct slab_job *sj, size_t layer_bytes, int trials) {
    double best = 1e30;
    for (int t = 0; t < trials; t++) {
        double t0 = st_time_now();
        st_threadpool_run(st_ctx_threadpool(ctx), slab_task, sj);
        double dt = st_time_now() - t0;
        if (dt < best) best = dt;
    }
    return (double)layer_bytes * (double)sj->n_layers / best / 1e9;
}

static int run_ctx(st_ctx *ctx, st_attn_ws *ws, int64_t n_ctx, int page, int hot, int no_thp,
                   int trials, int patterns, result *res) {
    const size_t head_page = (size_t)page * HEAD_DIM * 2;   /* bytes, one head of one page */
    const size_t slab = 2 * N_KV * head_page;               /* K + V of one page: 32 KiB at 16 */
    const int64_t n_pages = n_ctx / page;
    const size_t layer_bytes = (size_t)n_pages * slab;
    int n_layers = (int)((MIN_WORKING_SET + layer_bytes - 1) / layer_bytes);
    if (n_layers < 2) n_layers = 2;
    if (hot) n_layers = 1; /* diagnostic: K/V stay in cache when small enough */
    uint64_t seed = 0x9E3779B97F4A7C15ull ^ (uint64_t)n_ctx;

    /* paged: one pool, slabs assigned to (layer, logical page) by a random permutation */
    size_t total = (size_t)n_layers * (size_t)n_pages;
    layer_set paged = {.n_layers = n_layers};
    paged.mem = alloc_kv(total * slab, no_thp);
    paged.pages = calloc(total, sizeof(st_attn_page));
    paged.seqs = calloc((size_t)n_layers, sizeof(st_attn_seq));
    int64_t *perm = malloc(total * sizeof(int64_t));
    if (!paged.mem || !paged.pages || !paged.seqs || !perm) return ST_E_NOMEM;
    fill_f16(paged.mem, total * slab / 2, &seed);
    for (size_t i = 0; i < total; i++) perm[i] = (int64_t)i;
    for (size_t i = total - 1; i > 0; i--) {
        size_t j = rng_next(&seed) % (i + 1);
        int64_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    for (int l = 0; l < n_layers; l++) {
        for (int64_t p = 0; p < n_pages; p++) {
            char *s = (char *)paged.mem + (size_t)perm[(size_t)l * n_pages + p] * slab;
            paged.pages[(size_t)l * n_pages + p] = (st_attn_page){
                .k = s, .v = s + N_KV * head_page, .n_tokens = page, .pos0 = p * page};
        }
        paged.seqs[l] = (st_attn_seq){.pages = paged.pages + (size_t)l * n_pages, .n_pages = (int32_t)n_pages};
    }
    free(perm);

    /* contiguous: per layer one "page" of n_ctx slots */
    layer_set contig = {.n_layers = n_layers};
    contig.mem = alloc_kv((size_t)n_layers * layer_bytes, no_thp);
    contig.pages = calloc((size_t)n_layers, sizeof(st_attn_page));
    contig.seqs = calloc((size_t)n_layers, sizeof(st_attn_seq));
    if (!contig.mem || !contig.pages || !contig.seqs) return ST_E_NOMEM;
    fill_f16(contig.mem, (size_t)n_layers * layer_bytes / 2, &seed);
    for (int l = 0; l < n_layers; l++) {
        char *s = (char *)contig.mem + (size_t)l * layer_bytes;
        contig.pages[l] = (st_attn_page){.k = s, .v = s + layer_bytes / 2, .n_tokens = (int32_t)n_ctx};
        contig.seqs[l] = (st_attn_seq){.pages = &contig.pages[l], .n_pages = 1};
    }

    st_attn_geom gp = {.n_head = N_HEAD, .n_kv_head = N_KV, .head_dim = HEAD_DIM,
                       .page_size = page, .type = ST_TYPE_F16};
    st_attn_geom gc = gp;
    gc.page_size = (int32_t)n_ctx;
    float q[N_HEAD * HEAD_DIM], out[N_HEAD * HEAD_DIM], out2[N_HEAD * HEAD_DIM];
    for (int i = 0; i < N_HEAD * HEAD_DIM; i++) q[i] = (float)((double)(rng_next(&seed) >> 11) / 9007199254740992.0 * 2 - 1);

    /* trials alternate between the layouts (best of each), so a burst of load from other
     * processes hurts both alike; one warm-up pass over every layer first */
    int iters = n_layers * (n_ctx >= 100000 ? 2 : 4);
    time_decode(ctx, ws, &gp, &paged, q, out, n_layers);
    time_decode(ctx, ws, &gc, &contig, q, out2, n_layers);
    double tp = 1e30, tc = 1e30, ts = 1e30;
    struct slab_job sj = {.pages = paged.pages, .n_layers = n_layers, .n_pages = n_pages, .page = page};
    for (int t = 0; t < trials; t++) {
        double a = time_decode(ctx, ws, &gp, &paged, q, out, iters);
        double b = time_decode(ctx, ws, &gc, &contig, q, out2, iters);
        double t0 = st_time_now();
        st_threadpool_run(st_ctx_threadpool(ctx), slab_task, &sj);
        double c = (st_time_now() - t0) / n_layers;
        if (a < tp) tp = a;
        if (b < tc) tc = b;
        if (c < ts) ts = c;
    }
    res->n_ctx = n_ctx;
    res->n_layers = n_layers;
    res->mib = (double)layer_bytes / 1048576.0;
    res->gbp = (double)layer_bytes / tp / 1e9;
    res->gbc = (double)layer_bytes / tc / 1e9;
    res->us = tp * 1e6;
    res->gbs = (double)layer_bytes / ts / 1e9;
    if (patterns) {
        /* the same memory with slab i of the pool at (layer i / n_pages, page i % n_pages) */
        st_attn_page *ordered = malloc(total * sizeof *ordered);
        if (!ordered) return ST_E_NOMEM;
        for (size_t i = 0; i < total; i++) {
            char *sl = (char *)paged.mem + i * slab;
            ordered[i] = (st_attn_page){.k = sl, .v = sl + N_KV * head_page, .n_tokens = page,
                                        .pos0 = (int64_t)(i % (size_t)n_pages) * page};
        }
        const int math = st_ctx_isa(ctx) == ST_ISA_AVX512 ? 2 : st_ctx_isa(ctx) == ST_ISA_AVX2 ? 1 : 0;
        for (int a = 0; a < 2; a++)
            for (int o = 0; o < 2; o++)
                for (int w = 0; w < 3; w++) {
                    struct slab_job pj = {.pages = o ? ordered : paged.pages, .n_layers = n_layers,
                                          .n_pages = n_pages, .page = page, .whole = w, .math = a ? math : 0};
                    res->pat[a][o][w] = a && !math ? 0 : time_slabs(ctx, &pj, layer_bytes, trials);
                }
        /* the decode kernel itself over the in-order placement, alternating with the
         * shuffled one (best of each) */
        layer_set ord = {.n_layers = n_layers, .pages = ordered, .seqs = calloc((size_t)n_layers, sizeof(st_attn_seq))};
        if (!ord.seqs) return ST_E_NOMEM;
        for (int l = 0; l < n_layers; l++)
            ord.seqs[l] = (st_attn_seq){.pages = ordered + (size_t)l * n_pages, .n_pages = (int32_t)n_pages};
        double to = 1e30, ts2 = 1e30;
        for (int t = 0; t < trials; t++) {
            const double a = time_decode(ctx, ws, &gp, &ord, q, out2, iters);
            const double b = time_decode(ctx, ws, &gp, &paged, q, out, iters);
            if (a < to) to = a;
            if (b < ts2) ts2 = b;
        }
        res->kern[0] = (double)layer_bytes / ts2 / 1e9;
        res->kern[1] = (double)layer_bytes / to / 1e9;
        free(ord.seqs);
        free(ordered);
    }
    fprintf(stderr, "  %lldk: paged %.2f GB/s, contiguous %.2f GB/s\n", (long long)(n_ctx / 1024),
            res->gbp, res->gbc);

    st_free_aligned(paged.mem);
    free(paged.pages);
    free(paged.seqs);
    st_free_aligned(contig.mem);
    free(contig.pages);
    free(contig.seqs);
    return 0;
}

int main(int argc, char **argv) {
    int n_threads = 2, isa = -1, hot = 0, trials = 5, no_thp = 0, patterns = 0, page = PAGE_DEFAULT;
    const char *ctx_list = "4096,32768,131072";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) n_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--ctx") && i + 1 < argc) ctx_list = argv[++i];
        else if (!strcmp(argv[i], "--isa") && i + 1 < argc) isa = st_isa_parse(argv[++i]);
        else if (!strcmp(argv[i], "--hot")) hot = 1;
        else if (!strcmp(argv[i], "--no-thp")) no_thp = 1;
        else if (!strcmp(argv[i], "--patterns")) patterns = 1;
        else if (!strcmp(argv[i], "--trials") && i + 1 < argc) trials = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--page") && i + 1 < argc) page = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: attn [--threads N] [--ctx 4096,32768,131072] [--isa NAME] [--hot] [--trials N]\n"
                            "            [--no-thp] [--patterns] [--page P]\n");
            return 2;
        }
    }
    if (page < 16 || page > ST_ATTN_MAX_PAGE_SIZE || (page & (page - 1))) {
        fprintf(stderr, "attn: --page %d: a power of two in 16..%d\n", page, ST_ATTN_MAX_PAGE_SIZE);
        return 2;
    }
    st_ctx_params p = st_ctx_default_params();
    p.n_threads = n_threads;
    p.isa = isa;
    st_ctx *ctx = NULL;
    st_attn_ws *ws = NULL;
    int rc = st_ctx_create(&p, &ctx);
    if (!rc) rc = st_attn_ws_create(st_ctx_isa(ctx), &ws);
    if (rc) {
        fprintf(stderr, "attn: %s\n", st_strerror(rc));
        return 1;
    }
    /* the probe runs before and after (best of both), since other processes may load the
     * machine; every ratio below uses it */
    double probe = st_membw_read(st_ctx_threadpool(ctx), (size_t)1 << 30, 3);
    result res[16];
    int n_res = 0;
    for (const char *s = ctx_list; *s && n_res < 16;) {
        int64_t n = strtoll(s, NULL, 10);
        if (n < page || n % page) {
            fprintf(stderr, "attn: context %lld must be a positive multiple of %d\n", (long long)n, page);
            return 2;
        }
        if ((rc = run_ctx(ctx, ws, n, page, hot, no_thp, trials, patterns, &res[n_res++]))) {
            fprintf(stderr, "attn: %s\n", st_strerror(rc));
            return 1;
        }
        const char *c = strchr(s, ',');
        s = c ? c + 1 : s + strlen(s);
    }
    double probe2 = st_membw_read(st_ctx_threadpool(ctx), (size_t)1 << 30, 3);
    if (probe2 > probe) probe = probe2;
    printf("decode attention: %d q heads, %d kv heads, head_dim %d, f16 KV, page %d, %d threads, %s, "
           "%s pages%s\n", N_HEAD, N_KV, HEAD_DIM, page, n_threads, st_isa_name(st_ctx_isa(ctx)),
           no_thp ? "4 KiB" : "huge (THP)", hot ? ", --hot" : "");
    printf("read-bandwidth probe: %.2f GB/s (best of before/after)\n", probe);
    printf("slabs: the paged layout's slabs read in decode order without the math (GB/s), and\n"
           "paged decode as a fraction of it\n");
    printf("%8s %6s %9s %9s %8s %9s %8s %8s %10s %8s %8s\n", "context", "layers", "MiB/layer",
           "paged", "%probe", "contig", "%probe", "pg/cont", "us/call", "slabs", "%slabs");
    for (int i = 0; i < n_res; i++)
        printf("%7lldk %6d %9.1f %9.2f %8.1f %9.2f %8.1f %8.3f %10.2f %8.2f %8.1f\n",
               (long long)(res[i].n_ctx / 1024), res[i].n_layers, res[i].mib, res[i].gbp,
               100 * res[i].gbp / probe, res[i].gbc, 100 * res[i].gbc / probe,
               res[i].gbp / res[i].gbc, res[i].us, res[i].gbs, 100 * res[i].gbp / res[i].gbs);
    const double bound = fma_bound_gbs(st_ctx_threadpool(ctx), st_ctx_isa(ctx));
    if (bound > 0) {
        printf("multiply-add bound: %.1f GB/s on %d threads (nothing but decode's %d f32 multiply-adds per\n"
               "f16 element, at this machine's measured FMA rate); 80%% of the probe is %.0f%% of it; paged:",
               bound, n_threads, N_HEAD / N_KV, 100 * 0.8 * probe / bound);
        for (int i = 0; i < n_res; i++)
            printf(" %lldk %.0f%%", (long long)(res[i].n_ctx / 1024), 100 * res[i].gbp / bound);
        printf("\n");
    }
    if (patterns) {
        for (int a = 0; a < 2; a++) {
            if (a && st_ctx_isa(ctx) == ST_ISA_SCALAR) break;
            printf(a ? "the same with the kernel's arithmetic: each f16 element converted once and in 4 multiply-adds\n"
                       "(128 per 64-byte line), nothing else (GB/s, %% of the probe)\n"
                     : "\n--patterns: the slabs read without math (GB/s, %% of the probe)\n");
            printf("%8s %18s %18s %18s %18s %18s %18s\n", "context", "shuffled, decode", "shuffled, whole",
                   "shuffled, K then V", "in order, decode", "in order, whole", "in order, K then V");
            for (int i = 0; i < n_res; i++) {
                printf("%7lldk", (long long)(res[i].n_ctx / 1024));
                for (int o = 0; o < 2; o++)
                    for (int w = 0; w < 3; w++)
                        printf(" %10.2f (%4.0f%%)", res[i].pat[a][o][w], 100 * res[i].pat[a][o][w] / probe);
                printf("\n");
            }
        }
        printf("the decode kernel on the same slabs (GB/s, %% of the probe; alternating, best of each)\n");
        printf("%8s %18s %18s\n", "context", "shuffled", "in order");
        for (int i = 0; i < n_res; i++)
            printf("%7lldk %10.2f (%4.0f%%) %10.2f (%4.0f%%)\n", (long long)(res[i].n_ctx / 1024), res[i].kern[0],
                   100 * res[i].kern[0] / probe, res[i].kern[1], 100 * res[i].kern[1] / probe);
    }
    st_attn_ws_destroy(ws);
    st_ctx_destroy(ctx);
    return 0;
}
