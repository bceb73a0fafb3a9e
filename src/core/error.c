/* Error codes and messages: one X-macro table (core.h) generates both. */
#include "strata/core.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *st_strerror(int err) {
    switch (err) {
#define ST_ERR_MSG_(name, value, msg) \
    case value:                       \
        return msg;
        ST_ERRORS(ST_ERR_MSG_)
#undef ST_ERR_MSG_
    default:
        break;
    }
    if (err < 0 && err > -4096) {
        /* strerror() may share a static buffer; the glibc table is read-only. */
        const char *s = strerrordesc_np(-err);
        if (s) return s;
    }
    return "unknown error";
}

const char *st_errname(int err) {
    switch (err) {
#define ST_ERR_NAME_(name, value, msg) \
    case value:                        \
        return #name;
        ST_ERRORS(ST_ERR_NAME_)
#undef ST_ERR_NAME_
    default:
        break;
    }
    if (err < 0 && err > -4096) {
        const char *s = strerrorname_np(-err);
        if (s) return s;
    }
    return "?";
}

void st_assert_fail_(const char *expr, const char *file, int line) {
    fprintf(stderr, "strata: internal error: assertion `%s' failed at %s:%d\n", expr, file, line);
    fflush(stderr);
    abort();
}
