/* Context: the last error's detailed message, the thread pool and the ISA choice.
 * Everything mutable lives here rather than in globals. */
#include "strata/core.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define ST_ERRMSG_MAX 1024

struct st_ctx {
    st_threadpool *tp;
    st_isa isa;
    bool amx;
    int last_code;
    char last_msg[ST_ERRMSG_MAX];
};

st_ctx_params st_ctx_default_params(void) {
    st_ctx_params p = {.n_threads = 0, .isa = -1};
    return p;
}

/* The reason for a failed creation, into the caller's buffer (there is no ctx to hold it). */
__attribute__((format(printf, 4, 5))) static int why_fail(char *why, size_t why_len, int err, const char *fmt, ...) {
    if (why && why_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, why_len, fmt, ap);
        va_end(ap);
    }
    return err;
}

int st_ctx_create_msg(const st_ctx_params *params, st_ctx **out, char *why, size_t why_len) {
    if (why && why_len) why[0] = '\0';
    if (!out) return why_fail(why, why_len, ST_E_INVAL, "st_ctx_create: out is NULL");
    *out = NULL;
    st_ctx_params p = params ? *params : st_ctx_default_params();
    if (p.n_threads <= 0) {
        const char *env = getenv("STRATA_THREADS");
        if (env && *env) {
            char *end;
            errno = 0;
            long v = strtol(env, &end, 10);
            if (errno || *end || end == env || v < 1 || v > ST_THREADS_MAX)
                return why_fail(why, why_len, v > ST_THREADS_MAX && !*end ? ST_E_LIMIT : ST_E_INVAL,
                                "STRATA_THREADS=%s is not a thread count in 1..%d", env, ST_THREADS_MAX);
            p.n_threads = (int)v;
        } else {
            p.n_threads = st_cpu_default_threads();
        }
    }
    if (p.n_threads > ST_THREADS_MAX)
        return why_fail(why, why_len, ST_E_LIMIT, "%d threads asked for; at most %d", p.n_threads, ST_THREADS_MAX);
    const char *isa_from = "the caller";
    if (p.isa < 0) {
        const char *env = getenv("STRATA_ISA");
        if (env && *env) {
            p.isa = st_isa_parse(env);
            if (p.isa < 0)
                return why_fail(why, why_len, ST_E_INVAL, "STRATA_ISA=%s is not one of scalar, avx2, avx512", env);
            isa_from = "STRATA_ISA";
        } else {
            p.isa = (int)st_cpu_best_isa();
        }
    }
    if (p.isa > (int)ST_ISA_AVX512)
        return why_fail(why, why_len, ST_E_INVAL, "ISA %d is not one of scalar, avx2, avx512", p.isa);
    const char *missing = st_cpu_isa_missing((st_isa)p.isa);
    if (missing)
        return why_fail(why, why_len, ST_E_UNSUPPORTED,
                        "%s asks for ISA %s, but this CPU lacks %s (the best it runs is %s)", isa_from,
                        st_isa_name((st_isa)p.isa), missing, st_isa_name(st_cpu_best_isa()));
    st_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return why_fail(why, why_len, ST_E_NOMEM, "cannot allocate the context");
    int rc = st_threadpool_create(p.n_threads, &ctx->tp);
    if (rc) {
        free(ctx);
        return why_fail(why, why_len, rc, "cannot start %d threads: %s", p.n_threads, st_strerror(rc));
    }
    ctx->isa = (st_isa)p.isa;
    const char *amx_env = getenv("STRATA_AMX");
    ctx->amx = !p.no_amx && !(amx_env && !strcmp(amx_env, "0"));
    *out = ctx;
    return 0;
}

int st_ctx_create(const st_ctx_params *params, st_ctx **out) { return st_ctx_create_msg(params, out, NULL, 0); }

void st_ctx_destroy(st_ctx *ctx) {
    if (!ctx) return;
    st_threadpool_destroy(ctx->tp);
    free(ctx);
}

st_threadpool *st_ctx_threadpool(st_ctx *ctx) { return ctx->tp; }
st_isa st_ctx_isa(const st_ctx *ctx) { return ctx->isa; }
bool st_ctx_amx(const st_ctx *ctx) { return ctx->amx; }

int st_vseterr(st_ctx *ctx, int err, const char *fmt, va_list ap) {
    if (ctx) {
        ctx->last_code = err;
        vsnprintf(ctx->last_msg, sizeof ctx->last_msg, fmt, ap);
    }
    return err;
}

int st_seterr(st_ctx *ctx, int err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    st_vseterr(ctx, err, fmt, ap);
    va_end(ap);
    return err;
}

const char *st_ctx_error(const st_ctx *ctx) { return ctx ? ctx->last_msg : ""; }
int st_ctx_last_code(const st_ctx *ctx) { return ctx ? ctx->last_code : 0; }
void st_ctx_clear_error(st_ctx *ctx) {
    if (!ctx) return;
    ctx->last_code = 0;
    ctx->last_msg[0] = '\0';
}
