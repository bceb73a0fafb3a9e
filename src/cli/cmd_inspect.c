/* strata inspect FILE.gguf: header, metadata, tensor table and a summary.
 * Everything printed comes from the validated st_gguf; a malformed file is one line on
 * stderr (the reader's message: file, field, byte offset) and exit code 2. */
#include "strata/gguf.h"
#include "cli/cli_util.h"
#include "cli/commands.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SHOW_ELEMS 8      /* array elements shown before "... (N total)" */
#define SHOW_STR_BYTES 64 /* string bytes shown before "..." */

typedef struct opts {
    int full;             /* no abbreviation */
    int no_tensors;
} opts;

static void print_str(FILE *f, const char *s, size_t len, const opts *o) {
    size_t show = len;
    if (!o->full && len > SHOW_STR_BYTES) {
        show = SHOW_STR_BYTES;
        while (show > 0 && ((unsigned char)s[show] & 0xC0) == 0x80) show--; /* whole UTF-8 chars */
    }
    fputc('"', f);
    for (size_t i = 0; i < show; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\t': fputs("\\t", f); break;
        case '\r': fputs("\\r", f); break;
        default:
            if (c < 0x20 || c == 0x7f) fprintf(f, "\\x%02x", c);
            else fputc(c, f);
        }
    }
    fputc('"', f);
    if (show < len) fprintf(f, "... (%zu bytes)", len);
}

/* One fixed-size value of type t at p (little-endian, maybe unaligned). */
static void print_scalar(FILE *f, st_gguf_vtype t, const void *p) {
    uint64_t u = 0;
    memcpy(&u, p, st_gguf_vtype_size(t)); /* x86-64 is little-endian, as GGUF is */
    switch (t) {
    case ST_GGUF_UINT8: case ST_GGUF_UINT16: case ST_GGUF_UINT32: case ST_GGUF_UINT64:
        fprintf(f, "%" PRIu64, u);
        break;
    case ST_GGUF_INT8: fprintf(f, "%d", (int8_t)u); break;
    case ST_GGUF_INT16: fprintf(f, "%d", (int16_t)u); break;
    case ST_GGUF_INT32: fprintf(f, "%d", (int32_t)u); break;
    case ST_GGUF_INT64: fprintf(f, "%" PRId64, (int64_t)u); break;
    case ST_GGUF_FLOAT32: fprintf(f, "%.9g", st_fp32_from_bits((uint32_t)u)); break;
    case ST_GGUF_FLOAT64: {
        double d;
        memcpy(&d, &u, 8);
        fprintf(f, "%.17g", d);
        break;
    }
    case ST_GGUF_BOOL: fputs(u ? "true" : "false", f); break;
    default: fputs("?", f); break;
    }
}

static void print_array(FILE *f, st_gguf *g, const char *key, const opts *o) {
    st_gguf_vtype et;
    uint64_t n;
    const void *data;
    if (st_gguf_get_arr(g, key, &et, &n, &data)) return;
    fprintf(f, "array[%s; %" PRIu64 "] = [", st_gguf_vtype_name(et), n);
    uint64_t show = (!o->full && n > SHOW_ELEMS) ? SHOW_ELEMS : n;
    size_t esz = st_gguf_vtype_size(et);
    for (uint64_t i = 0; i < show; i++) {
        if (i) fputs(", ", f);
        if (esz) {
            print_scalar(f, et, (const uint8_t *)data + i * esz);
        } else if (et == ST_GGUF_STRING) {
            const char *s;
            size_t len;
            if (st_gguf_get_arr_str(g, key, i, &s, &len) == 0) print_str(f, s, len, o);
        } else {
            st_gguf_vtype it;
            uint64_t in;
            const void *id;
            if (st_gguf_get_arr_arr(g, key, i, &it, &in, &id) == 0)
                fprintf(f, "array[%s; %" PRIu64 "]", st_gguf_vtype_name(it), in);
        }
    }
    if (show < n) fprintf(f, ", ... (%" PRIu64 " total)", n);
    fputs("]", f);
}

static void print_kv(FILE *f, st_gguf *g, int64_t i, const opts *o) {
    const char *key = st_gguf_key_name(g, i);
    st_gguf_vtype t = st_gguf_key_type(g, i);
    fprintf(f, "  %-44s ", key);
    if (t == ST_GGUF_ARRAY) {
        print_array(f, g, key, o);
    } else if (t == ST_GGUF_STRING) {
        const char *s;
        size_t len;
        fputs("string = ", f);
        if (st_gguf_get_str(g, key, &s, &len) == 0) print_str(f, s, len, o);
    } else {
        /* scalars: re-read through the widest getter that holds the type losslessly */
        fprintf(f, "%s = ", st_gguf_vtype_name(t));
        uint8_t b[8] = {0};
        int64_t iv;
        uint64_t uv;
        double dv;
        bool bv;
        switch (t) {
        case ST_GGUF_BOOL: st_gguf_get_bool(g, key, &bv); b[0] = bv; break;
        case ST_GGUF_FLOAT32: case ST_GGUF_FLOAT64: {
            st_gguf_get_f64(g, key, &dv);
            if (t == ST_GGUF_FLOAT32) {
                uint32_t w = st_fp32_to_bits((float)dv);
                memcpy(b, &w, 4);
            } else {
                memcpy(b, &dv, 8);
            }
            break;
        }
        case ST_GGUF_UINT8: case ST_GGUF_UINT16: case ST_GGUF_UINT32: case ST_GGUF_UINT64:
            st_gguf_get_u64(g, key, &uv);
            memcpy(b, &uv, 8);
            break;
        default:
            st_gguf_get_i64(g, key, &iv);
            memcpy(b, &iv, 8);
            break;
        }
        print_scalar(f, t, b);
    }
    fputc('\n', f);
}

static void fmt_shape(char *buf, size_t cap, const st_gguf_tensor *t) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < t->n_dims && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%" PRId64, d ? ", " : "", t->ne[d]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

static void fmt_count(char *buf, size_t cap, double v, const char *const *units) {
    int u = 0;
    while (v >= 1000.0 && units[u + 1]) {
        v /= 1000.0;
        u++;
    }
    snprintf(buf, cap, u ? "%.2f %s" : "%.0f%s", v, units[u]);
}

static void print_tensors_and_summary(FILE *f, st_gguf *g, const opts *o) {
    int64_t nt = st_gguf_n_tensors(g);
    uint64_t params = 0, bytes = 0;
    if (!o->no_tensors && nt) {
        fprintf(f, "\ntensors (%" PRId64 "):\n", nt);
        fprintf(f, "  %6s  %-40s %-8s %-24s %14s %14s\n", "#", "name", "type", "shape", "offset", "bytes");
    }
    for (int64_t i = 0; i < nt; i++) {
        const st_gguf_tensor *t = st_gguf_tensor_at(g, i);
        uint64_t ne = (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]); /* validated: fits int64 */
        params += ne;
        bytes += t->nbytes;
        if (o->no_tensors) continue;
        char shape[96];
        fmt_shape(shape, sizeof shape, t);
        fprintf(f, "  %6" PRId64 "  %-40s %-8s %-24s %14" PRIu64 " %14" PRIu64 "\n", i, t->name,
                st_type_name(t->type), shape, t->offset, t->nbytes);
    }
    static const char *const pu[] = {"", "K", "M", "B", "T", NULL};
    static const char *const bu[] = {" bytes", "KB", "MB", "GB", "TB", NULL};
    char pbuf[32], bbuf[32];
    fmt_count(pbuf, sizeof pbuf, (double)params, pu);
    fmt_count(bbuf, sizeof bbuf, (double)bytes, bu);
    const char *arch = NULL;
    size_t alen = 0;
    st_gguf_get_str(g, "general.architecture", &arch, &alen);
    fprintf(f, "\nsummary:\n");
    fprintf(f, "  %-18s %.*s\n", "architecture", arch ? (int)(alen > 64 ? 64 : alen) : 6,
            arch ? arch : "(none)");
    fprintf(f, "  %-18s %s (%" PRIu64 ")\n", "parameters", pbuf, params);
    fprintf(f, "  %-18s %s (%" PRIu64 ")\n", "tensor bytes", bbuf, bytes);
    if (params)
        fprintf(f, "  %-18s %.2f\n", "bits per weight", 8.0 * (double)bytes / (double)params);
    else
        fprintf(f, "  %-18s -\n", "bits per weight");
}

static void usage(FILE *f) {
    fprintf(f, "usage: strata inspect [--full] [--no-tensors] FILE.gguf\n"
               "  --full        print every array element and whole strings\n"
               "  --no-tensors  skip the tensor table (the summary still counts them)\n");
}

int st_cmd_inspect(int argc, char **argv) {
    opts o = {0};
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--full") || !strcmp(argv[i], "-a")) {
            o.full = 1;
        } else if (!strcmp(argv[i], "--no-tensors")) {
            o.no_tensors = 1;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return ST_EXIT_OK;
        } else if (argv[i][0] == '-' || path) {
            fprintf(stderr, "strata inspect: unexpected argument '%s'\n", argv[i]);
            usage(stderr);
            return ST_EXIT_INPUT;
        } else {
            path = argv[i];
        }
    }
    if (!path) {
        usage(stderr);
        return ST_EXIT_INPUT;
    }
    st_ctx *ctx = NULL;
    int rc = st_cli_ctx_create("inspect", 1, &ctx);
    if (rc) return rc;
    st_gguf *g = NULL;
    rc = st_gguf_open(ctx, path, &g);
    if (rc) {
        fprintf(stderr, "strata inspect: %s\n", st_ctx_error(ctx));
        st_ctx_destroy(ctx);
        return st_cli_exit_code(rc);
    }
    FILE *f = stdout;
    uint64_t tbytes = 0;
    for (int64_t i = 0; i < st_gguf_n_tensors(g); i++) tbytes += st_gguf_tensor_at(g, i)->nbytes;
    fprintf(f, "%s: GGUF v%u, %" PRIu64 " bytes\n", path, st_gguf_version(g), st_gguf_file_size(g));
    fprintf(f, "  alignment %u, data offset %" PRIu64 ", %" PRId64 " keys, %" PRId64 " tensors, %" PRIu64
               " bytes of tensor data\n",
            st_gguf_alignment(g), st_gguf_data_offset(g), st_gguf_n_kv(g), st_gguf_n_tensors(g), tbytes);
    fprintf(f, "\nmetadata (%" PRId64 " keys):\n", st_gguf_n_kv(g));
    for (int64_t i = 0; i < st_gguf_n_kv(g); i++) print_kv(f, g, i, &o);
    print_tensors_and_summary(f, g, &o);
    int werr = fflush(f) != 0 || ferror(f);
    st_gguf_close(g);
    st_ctx_destroy(ctx);
    if (werr) {
        fprintf(stderr, "strata inspect: error writing output\n");
        return ST_EXIT_INTERNAL;
    }
    return ST_EXIT_OK;
}
