/* Context: the last error's detailed message, the thread pool and the ISA choice.
 * Everything mutable lives here rather than in globals. */
#include "strata/core.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#define ST_ERRMSG_MAX 1024
#define ST_THREADS_MAX 1024

struct st_ctx {
    st_threadpool *tp;
    st_isa isa;
    int last_code;
    char last_msg[ST_ERRMSG_MAX];
};

st_ctx_params st_ctx_default_params(void) {
    st_ctx_params p = {.n_threads = 0, .isa = -1};
    return p;
}

int st_ctx_create(const st_ctx_params *params, st_ctx **out) {
    if (!out) return ST_E_INVAL;
    *out = NULL;
    st_ctx_params p = params ? *params : st_ctx_default_params();
    if (p.n_threads <= 0) {
        const char *env = getenv("STRATA_THREADS");
        p.n_threads = env ? atoi(env) : 2;
        if (p.n_threads <= 0) p.n_threads = 2;
    }
    if (p.n_threads > ST_THREADS_MAX) return ST_E_LIMIT;
    st_isa best = st_cpu_best_isa();
    if (p.isa < 0) {
        const char *env = getenv("STRATA_ISA");
        if (env && *env) {
            p.isa = st_isa_parse(env);
            if (p.isa < 0) {
                fprintf(stderr, "strata: STRATA_ISA=%s is not one of scalar, avx2, avx512\n", env);
                return ST_E_INVAL;
            }
        } else {
            p.isa = (int)best;
        }
    }
    if (p.isa > (int)best) {
        fprintf(stderr, "strata: ISA %s requested but this CPU supports at most %s\n",
                st_isa_name((st_isa)p.isa), st_isa_name(best));
        return ST_E_UNSUPPORTED;
    }
    st_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return ST_E_NOMEM;
    int rc = st_threadpool_create(p.n_threads, &ctx->tp);
    if (rc) {
        free(ctx);
        return rc;
    }
    ctx->isa = (st_isa)p.isa;
    *out = ctx;
    return 0;
}

void st_ctx_destroy(st_ctx *ctx) {
    if (!ctx) return;
    st_threadpool_destroy(ctx->tp);
    free(ctx);
}

st_threadpool *st_ctx_threadpool(st_ctx *ctx) { return ctx->tp; }
st_isa st_ctx_isa(const st_ctx *ctx) { return ctx->isa; }

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
