/*
 * strata core: error model, context (last-error detail, thread pool, ISA choice),
 * tensor element types, half-precision conversions.
 *
 * Error convention (everywhere in strata):
 *   - functions return int: 0 on success, a negative ST_E* code, or -errno for
 *     system errors passed through unchanged;
 *   - output pointers are cleared on entry; on error nothing observable changed;
 *   - a detailed message (file, field, byte offset, limit) for the last error is
 *     kept by the st_ctx that the failing call was given (st_ctx_error()).
 *   - bugs abort through ST_ASSERT (always on); bad input never does.
 */
#ifndef STRATA_CORE_H
#define STRATA_CORE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, message). Values sit below -1000 so they never collide with -errno. */
#define ST_ERRORS(X)                                                             \
    X(ST_OK, 0, "success")                                                       \
    X(ST_E_INVAL, -1001, "invalid argument")                                     \
    X(ST_E_NOMEM, -1002, "out of memory")                                        \
    X(ST_E_FORMAT, -1003, "malformed input")                                     \
    X(ST_E_VERSION, -1004, "unsupported format version")                         \
    X(ST_E_TYPE, -1005, "type mismatch")                                         \
    X(ST_E_NOT_FOUND, -1006, "not found")                                        \
    X(ST_E_LIMIT, -1007, "value exceeds a limit")                                \
    X(ST_E_IO, -1008, "I/O error")                                               \
    X(ST_E_STATE, -1009, "operation not valid in the current state")             \
    X(ST_E_POOL_FULL, -1010, "page pool full: every page is pinned or referenced") \
    X(ST_E_CORRUPT, -1011, "data corrupt: checksum mismatch")                    \
    X(ST_E_UNSUPPORTED, -1012, "unsupported feature")                            \
    X(ST_E_BUSY, -1013, "resource held by another process")                      \
    X(ST_E_NOSPACE, -1014, "storage budget exhausted")                           \
    X(ST_E_USAGE, -1015, "bad command-line usage")                               \
    X(ST_E_QUEUE_FULL, -1016, "request queue full")

typedef enum st_err {
#define ST_ERR_ENUM_(name, value, msg) name = value,
    ST_ERRORS(ST_ERR_ENUM_)
#undef ST_ERR_ENUM_
} st_err;

/* Static message for an ST_E* code or a -errno value. Never NULL; thread-safe. */
const char *st_strerror(int err);
/* Symbolic name ("ST_E_FORMAT", "ENOSPC"...) or "?"; never NULL. */
const char *st_errname(int err);

/* Always-on invariant check: a failure is a bug in strata, never bad input. */
#define ST_ASSERT(cond)                                                          \
    do {                                                                         \
        if (!(cond)) st_assert_fail_(#cond, __FILE__, __LINE__);                 \
    } while (0)
_Noreturn void st_assert_fail_(const char *expr, const char *file, int line);

/* ---- element types: numbering identical to ggml / GGUF ---------------------- */
typedef enum st_type {
    ST_TYPE_F32 = 0,
    ST_TYPE_F16 = 1,
    ST_TYPE_Q4_0 = 2,
    ST_TYPE_Q4_1 = 3,
    ST_TYPE_Q5_0 = 6,
    ST_TYPE_Q5_1 = 7,
    ST_TYPE_Q8_0 = 8,
    ST_TYPE_Q8_1 = 9,
    ST_TYPE_Q2_K = 10,
    ST_TYPE_Q3_K = 11,
    ST_TYPE_Q4_K = 12,
    ST_TYPE_Q5_K = 13,
    ST_TYPE_Q6_K = 14,
    ST_TYPE_Q8_K = 15,
    ST_TYPE_IQ2_XXS = 16,
    ST_TYPE_IQ2_XS = 17,
    ST_TYPE_IQ3_XXS = 18,
    ST_TYPE_IQ1_S = 19,
    ST_TYPE_IQ4_NL = 20,
    ST_TYPE_IQ3_S = 21,
    ST_TYPE_IQ2_S = 22,
    ST_TYPE_IQ4_XS = 23,
    ST_TYPE_I8 = 24,
    ST_TYPE_I16 = 25,
    ST_TYPE_I32 = 26,
    ST_TYPE_I64 = 27,
    ST_TYPE_F64 = 28,
    ST_TYPE_IQ1_M = 29,
    ST_TYPE_BF16 = 30,
    ST_TYPE_TQ1_0 = 34,
    ST_TYPE_TQ2_0 = 35,
    ST_TYPE_MXFP4 = 39,
    ST_TYPE_COUNT_ = 40 /* one past the largest value ggml defines today */
} st_type;

/* Storage geometry of every type ggml defines (so files holding them can be read and
 * inspected even where strata has no kernel for them). For an unknown value all three
 * return 0 / NULL. */
int64_t st_type_block_size(st_type t); /* elements per block */
size_t st_type_size(st_type t);        /* bytes per block */
const char *st_type_name(st_type t);   /* "q4_K", "f16", ...; NULL when unknown */
/* Bytes of a row of ne elements; 0 when ne is not a multiple of the block size or t unknown. */
size_t st_row_bytes(st_type t, int64_t ne);

/* ---- ISA selection ----------------------------------------------------------- */
typedef enum st_isa { ST_ISA_SCALAR = 0, ST_ISA_AVX2 = 1, ST_ISA_AVX512 = 2 } st_isa;

/* What an ISA needs is what its files are compiled for (CMakeLists.txt ST_AVX2_FLAGS /
 * ST_AVX512_FLAGS), all of it, with the OS saving the vector state:
 *   AVX2:   AVX2, FMA, F16C, BMI2;
 *   AVX512: the AVX2 set and AVX-512 F, BW, VL, DQ and VNNI. VNNI is part of the level, not an
 *           option inside it: the AVX-512 quant dots are vpdpbusd, and one level for every
 *           kernel family (quant, attention, vector ops) keeps st_ctx_isa() naming what runs.
 *           A CPU with AVX-512 but no VNNI (Skylake-SP/X) therefore runs the AVX2 level.
 * Optional extras inside a level (GFNI, AVX-VNNI) are picked per table, with the same or
 * documented results.
 * st_cpu_isa_missing: NULL when this CPU can run isa, else the name of a feature it lacks
 * ("avx512vnni", ...; "x86-64" off x86). Static strings; thread-safe. */
const char *st_cpu_isa_missing(st_isa isa);
/* Best ISA this CPU runs: the highest isa for which st_cpu_isa_missing() is NULL. */
st_isa st_cpu_best_isa(void);
/* True when the CPU has AVX512-VNNI. */
int st_cpu_has_vnni(void);
/* True when the CPU has GFNI (the AVX-512 K-quant dots then split nibbles with it). */
int st_cpu_has_gfni(void);
/* True when the CPU has AVX-VNNI (VEX vpdpbusd: the AVX2 table's K-quant dots then use it). */
int st_cpu_has_avxvnni(void);
/* True when the CPU has AMX-TILE and AMX-INT8 and the kernel grants this process the tile
 * data state, which it asks for here (arch_prctl ARCH_REQ_XCOMP_PERM: the grant is the
 * process's and lasts; asking again is harmless). False off Linux x86-64, on older kernels
 * and where the state is refused. Thread-safe. */
int st_cpu_amx_enable(void);
/* Parse "scalar" | "avx2" | "avx512" (case-insensitive); -1 when unknown. */
int st_isa_parse(const char *s);
const char *st_isa_name(st_isa isa);

/* ---- thread pool --------------------------------------------------------------- */
/* The most threads a context or pool takes. */
#define ST_THREADS_MAX 1024
/* The default thread count: the CPUs online (sysconf(_SC_NPROCESSORS_ONLN)), or fewer when
 * the process's affinity mask (taskset, a container's cpuset) allows fewer; in [1,
 * ST_THREADS_MAX]. */
int st_cpu_default_threads(void);

typedef struct st_threadpool st_threadpool;

/* Called once per thread: ith in [0, nth). The calling thread runs ith == 0. */
typedef void (*st_task_fn)(void *arg, int ith, int nth);

/* Creates a pool of n_threads (>= 1) including the caller. *out owned by caller,
 * release with st_threadpool_destroy. Returns 0, ST_E_INVAL or -errno. */
int st_threadpool_create(int n_threads, st_threadpool **out);
void st_threadpool_destroy(st_threadpool *tp); /* NULL is a no-op */
int st_threadpool_n_threads(const st_threadpool *tp);
/* Runs fn(arg, ith, nth) on every thread and returns when all have finished.
 * Not reentrant: call from one thread at a time, never from inside fn.
 * Workers spin briefly before sleeping, so back-to-back calls are cheap. */
void st_threadpool_run(st_threadpool *tp, st_task_fn fn, void *arg);

/* Called for each claimed chunk [i0, i1) of a range, on thread ith. */
typedef void (*st_range_fn)(void *arg, int64_t i0, int64_t i1, int ith);

/* Runs fn over [0, n) in chunks of `grain` items (>= 1; the last may be shorter) and
 * returns when all are done. Each thread starts on its static share (st_split_range's, in
 * whole chunks) and walks it upward, so on an even machine the split is the static one;
 * a thread that finishes its share takes chunks from the end of the share with most
 * chunks left (cores of a shared VM run at uneven speeds). Which thread runs a chunk
 * depends on timing: use it only where an item's result does not depend on the thread
 * that computes it. Same reentrancy rule as st_threadpool_run. */
void st_threadpool_run_range(st_threadpool *tp, int64_t n, int64_t grain, st_range_fn fn,
                             void *arg);

/* Static split of n items over nth threads: thread ith gets [*i0, *i1). */
static inline void st_split_range(int64_t n, int ith, int nth, int64_t *i0, int64_t *i1) {
    int64_t per = (n + nth - 1) / nth;
    int64_t a = per * ith, b = a + per;
    if (a > n) a = n;
    if (b > n) b = n;
    *i0 = a;
    *i1 = b;
}

/* ---- context ------------------------------------------------------------------ */
/* Threads: an st_ctx is used by one thread at a time. Every call that may fail writes its
 * message into the ctx's one error buffer (st_seterr, unlocked), and the ctx's thread pool
 * runs one job at a time (st_threadpool_run), so two calls that take the same ctx, or take
 * objects that keep it for their messages or threads (a KV cache, a runner, an open GGUF's
 * getters), must not overlap: e.g. two runners sharing a ctx do not forward at once.
 * Exceptions: st_ctx_isa and st_ctx_threadpool only read what creation fixed and may be
 * called from any thread, including the pool's own tasks. Separate contexts are
 * independent: one per thread runs in parallel. st_ctx_destroy: once nothing uses the ctx.
 *
 * The environment: st_ctx_create reads STRATA_THREADS, STRATA_ISA and STRATA_AMX itself (not through
 * the params the callers fill, as the model loader does for its variables) because that is
 * its contract: it is how a test run under valgrind, or a comparison of kernel paths,
 * forces an ISA or a thread count into every context, including the many that tests and
 * benchmarks create with default params; moving it to the callers would mean every one of
 * them reading the variables. They are read once, during st_ctx_create, never afterwards
 * (getenv: not while another thread calls setenv). */
typedef struct st_ctx st_ctx;

typedef struct st_ctx_params {
    int n_threads;  /* 0 = STRATA_THREADS if set, else st_cpu_default_threads() */
    int isa;        /* -1 = best supported, or STRATA_ISA from the environment */
    int no_amx;     /* 1: Q8_0 batches stay off AMX (the same bits, for comparisons); 0: AMX
                     * where the CPU runs it, unless STRATA_AMX=0 is in the environment */
} st_ctx_params;

st_ctx_params st_ctx_default_params(void);
/* Creates a context (params NULL: the defaults). Honors STRATA_ISA=scalar|avx2|avx512
 * (forcing a path, e.g. for valgrind), STRATA_AMX=0 (no AMX; any other value: the default)
 * and STRATA_THREADS=N when the params leave them at default. STRATA_THREADS must be a whole number in 1..ST_THREADS_MAX (else ST_E_INVAL, or
 * ST_E_LIMIT above the cap). An ISA the CPU cannot run (st_cpu_isa_missing), forced or
 * passed, is refused with ST_E_UNSUPPORTED: st_ctx_isa() always names the kernels that run.
 * *out owned by caller. Returns 0, ST_E_INVAL (bad STRATA_ISA / STRATA_THREADS / isa),
 * ST_E_UNSUPPORTED, ST_E_LIMIT (threads), ST_E_NOMEM or -errno (threads). Prints nothing. */
int st_ctx_create(const st_ctx_params *params, st_ctx **out);
/* As st_ctx_create; on failure, when why != NULL, writes a one-line reason into
 * why[why_len] (the variable and its value, the CPU feature missing...), "" on success. */
int st_ctx_create_msg(const st_ctx_params *params, st_ctx **out, char *why, size_t why_len);
void st_ctx_destroy(st_ctx *ctx); /* NULL is a no-op */
st_threadpool *st_ctx_threadpool(st_ctx *ctx);
st_isa st_ctx_isa(const st_ctx *ctx);
/* Whether the kernels may use AMX (st_kernels_get_ex's amx): false when the params or
 * STRATA_AMX=0 said no. Whether AMX runs is then the CPU's and the OS's (st_kernels->amx). */
bool st_ctx_amx(const st_ctx *ctx);

/* Records a detailed message for err in ctx (ctx may be NULL: then it is dropped)
 * and returns err, so callers write `return st_seterr(ctx, ST_E_FORMAT, "...")`. */
int st_seterr(st_ctx *ctx, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int st_vseterr(st_ctx *ctx, int err, const char *fmt, va_list ap);
/* The detailed message of the last error recorded in ctx ("" if none). Valid until
 * the next failing call on ctx. */
const char *st_ctx_error(const st_ctx *ctx);
int st_ctx_last_code(const st_ctx *ctx);
void st_ctx_clear_error(st_ctx *ctx);

/* ---- half precision --------------------------------------------------------------- */
static inline float st_fp32_from_bits(uint32_t w) { float f; memcpy(&f, &w, 4); return f; }
static inline uint32_t st_fp32_to_bits(float f) { uint32_t w; memcpy(&w, &f, 4); return w; }

/* IEEE binary16 -> binary32, exact for every input including subnormals, inf, NaN. */
static inline float st_fp16_to_fp32(uint16_t h) {
    const uint32_t w = (uint32_t)h << 16;
    const uint32_t sign = w & 0x80000000u;
    const uint32_t two_w = w + w;
    const uint32_t exp_offset = 0xE0u << 23;
    const float exp_scale = st_fp32_from_bits(0x7800000u);
    const float normalized = st_fp32_from_bits((two_w >> 4) + exp_offset) * exp_scale;
    const uint32_t magic_mask = 126u << 23;
    const float magic_bias = 0.5f;
    const float denormalized = st_fp32_from_bits((two_w >> 17) | magic_mask) - magic_bias;
    const uint32_t denorm_cutoff = 1u << 27;
    const uint32_t result =
        sign | (two_w < denorm_cutoff ? st_fp32_to_bits(denormalized) : st_fp32_to_bits(normalized));
    return st_fp32_from_bits(result);
}

/* binary32 -> binary16, round to nearest even (matches F16C's _cvtss_sh with RNE). */
static inline uint16_t st_fp32_to_fp16(float f) {
    const float scale_to_inf = st_fp32_from_bits(0x77800000u);
    const float scale_to_zero = st_fp32_from_bits(0x08800000u);
    float base = (f < 0 ? -f : f) * scale_to_inf * scale_to_zero;
    const uint32_t w = st_fp32_to_bits(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & 0x80000000u;
    uint32_t bias = shl1_w & 0xFF000000u;
    if (bias < 0x71000000u) bias = 0x71000000u;
    base = st_fp32_from_bits((bias >> 1) + 0x07800000u) + base;
    const uint32_t bits = st_fp32_to_bits(base);
    const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
    const uint32_t mantissa_bits = bits & 0x00000FFFu;
    const uint32_t nonsign = exp_bits + mantissa_bits;
    return (uint16_t)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

static inline float st_bf16_to_fp32(uint16_t h) { return st_fp32_from_bits((uint32_t)h << 16); }
/* binary32 -> bfloat16, round to nearest even; NaN stays NaN (as ggml does). */
static inline uint16_t st_fp32_to_bf16(float f) {
    uint32_t u = st_fp32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

/* ---- overflow-safe size arithmetic ---------------------------------------------- */
static inline int st_mul_overflow_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_mul_overflow(a, b, out);
}
static inline int st_add_overflow_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_add_overflow(a, b, out);
}

/* Aligned allocation (alignment a power of two >= sizeof(void*)); free with st_free_aligned.
 * Returns NULL on failure or overflow. */
void *st_alloc_aligned(size_t size, size_t alignment);
void st_free_aligned(void *p);

/* Large buffers that are streamed (weights, KV, bandwidth probes): anonymous memory rounded up
 * to 2 MiB and advised for transparent huge pages, so that streaming is not throttled by 4 KiB
 * TLB misses. Zero-filled. Free with st_free_huge(p, size) using the same size. NULL on failure. */
void *st_alloc_huge(size_t size);
void st_free_huge(void *p, size_t size);

/* Monotonic time in seconds. */
double st_time_now(void);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_CORE_H */
