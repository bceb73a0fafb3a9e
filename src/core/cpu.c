/* CPU feature detection for the kernel dispatch tables. */
#include "strata/core.h"

#include <sched.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#endif

/* The features each SIMD build is compiled for (CMakeLists.txt: ST_AVX2_FLAGS, ST_AVX512_FLAGS):
 * the compiler may emit any of them anywhere in those files (BMI2 shifts in plain C, say),
 * so an ISA is chosen only when the CPU has every one. libgcc's and compiler-rt's
 * __builtin_cpu_supports also check that the OS saves the AVX / AVX-512 state (XCR0). */
#define ST_NEED_(feat)                                                                  \
    do {                                                                                \
        if (!__builtin_cpu_supports(feat)) return feat;                                 \
    } while (0)

#if defined(__x86_64__) || defined(__i386__)
/* CPUID leaf 1, ECX bit 29 (clang 14's __builtin_cpu_supports does not know "f16c"); F16C is
 * VEX-encoded, so it also needs the AVX state that the "avx2" check confirms. */
static int cpu_has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && ((c >> 29) & 1);
}
#endif

const char *st_cpu_isa_missing(st_isa isa) {
    if (isa == ST_ISA_SCALAR) return NULL;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    ST_NEED_("avx2");
    ST_NEED_("fma");
    if (!cpu_has_f16c()) return "f16c";
    ST_NEED_("bmi2");
    if (isa == ST_ISA_AVX2) return NULL;
    if (isa != ST_ISA_AVX512) return "?";
    ST_NEED_("avx512f");
    ST_NEED_("avx512bw");
    ST_NEED_("avx512vl");
    ST_NEED_("avx512dq");
    ST_NEED_("avx512vnni");
    return NULL;
#else
    return "x86-64";
#endif
}

st_isa st_cpu_best_isa(void) {
    if (!st_cpu_isa_missing(ST_ISA_AVX512)) return ST_ISA_AVX512;
    if (!st_cpu_isa_missing(ST_ISA_AVX2)) return ST_ISA_AVX2;
    return ST_ISA_SCALAR;
}

int st_cpu_has_vnni(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni");
#else
    return 0;
#endif
}

int st_cpu_has_gfni(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("gfni");
#else
    return 0;
#endif
}

int st_cpu_has_avxvnni(void) {
#if defined(__x86_64__) || defined(__i386__)
    /* CPUID leaf 7 subleaf 1, EAX bit 4 (the compilers' cpu_supports does not all know it);
     * the VEX encoding needs the AVX state, which st_cpu_isa_missing's AVX2 check implies */
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return 0;
    return (a >> 4) & 1;
#else
    return 0;
#endif
}

int st_cpu_amx_enable(void) {
#if defined(__linux__) && defined(__x86_64__)
    /* CPUID leaf 7: EDX bit 24 AMX-TILE, bit 25 AMX-INT8; the state is XFEATURE 18
     * (XTILEDATA), granted by ARCH_REQ_XCOMP_PERM (0x1023, Linux 5.16 and newer) */
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !((d >> 24) & 1) || !((d >> 25) & 1)) return 0;
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#else
    return 0;
#endif
}

int st_cpu_default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    /* a process pinned to fewer CPUs (taskset, a container's cpuset) gets those */
    cpu_set_t set;
    if (!sched_getaffinity(0, sizeof set, &set) && CPU_COUNT(&set) > 0 && CPU_COUNT(&set) < n) n = CPU_COUNT(&set);
    return n < 1 ? 1 : n > ST_THREADS_MAX ? ST_THREADS_MAX : (int)n;
}

int st_isa_parse(const char *s) {
    if (!s) return -1;
    if (!strcasecmp(s, "scalar")) return ST_ISA_SCALAR;
    if (!strcasecmp(s, "avx2")) return ST_ISA_AVX2;
    if (!strcasecmp(s, "avx512")) return ST_ISA_AVX512;
    return -1;
}

const char *st_isa_name(st_isa isa) {
    switch (isa) {
    case ST_ISA_SCALAR: return "scalar";
    case ST_ISA_AVX2: return "avx2";
    case ST_ISA_AVX512: return "avx512";
    }
    return "?";
}

void *st_alloc_aligned(size_t size, size_t alignment) {
    if (size == 0) size = alignment;
    size_t rounded;
    if (__builtin_add_overflow(size, alignment - 1, &rounded)) return NULL;
    rounded &= ~(alignment - 1);
    return aligned_alloc(alignment, rounded);
}

void st_free_aligned(void *p) { free(p); }

double st_time_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define ST_HUGE_PAGE ((size_t)2 << 20)

void *st_alloc_huge(size_t size) {
    size_t len;
    if (__builtin_add_overflow(size, ST_HUGE_PAGE - 1, &len)) return NULL;
    len &= ~(ST_HUGE_PAGE - 1);
    if (len == 0) len = ST_HUGE_PAGE;
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, len, MADV_HUGEPAGE);
#endif
    return p;
}

void st_free_huge(void *p, size_t size) {
    if (!p) return;
    size_t len = (size + ST_HUGE_PAGE - 1) & ~(ST_HUGE_PAGE - 1);
    munmap(p, len ? len : ST_HUGE_PAGE);
}
