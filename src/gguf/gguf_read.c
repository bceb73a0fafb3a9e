/*
 * GGUF reader: validates a whole file image on open.
 *
 * The file is untrusted. Parsing walks it once, front to back, with a cursor that
 * never reads a byte before checking it lies inside the image (need()); every count
 * and length is checked against a named limit (gguf.h, ST_GGUF_MAX_*) and against the
 * bytes left, before anything is allocated for it, so an allocation never exceeds a
 * small multiple of the file size. Sizes are computed with overflow-checked
 * arithmetic. After the header the tensors' data ranges are checked to lie inside
 * the file, aligned, and pairwise disjoint.
 *
 * Layout (docs/FORMATS.md has it byte by byte):
 *   magic "GGUF" | version u32 | n_tensors u64 | n_kv u64
 *   n_kv x (key string | value type u32 | value)
 *   n_tensors x (name string | n_dims u32 | ne u64 x n_dims | type u32 | offset u64)
 *   padding to general.alignment | tensor data
 * where string = length u64 + bytes, and array value = elem type u32 + count u64 + elems.
 *
 * Every rejection goes through fail(), which writes "FILE: WHERE FIELD at byte N:
 * PROBLEM" into the ctx, WHERE being "header", "key 3 ('name')[17]" (an array element)
 * or "tensor 5 ('name')".
 */
#include "gguf/gguf_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Smallest possible serialized sizes, used to reject huge counts before allocating. */
#define MIN_KV_BYTES 14u     /* key length 8 + key >= 1 + type 4 + value >= 1 */
#define MIN_TENSOR_BYTES 33u /* name length 8 + name >= 1 + n_dims 4 + ne 8 + type 4 + offset 8 */
#define MIN_STRING_BYTES 8u  /* an empty string: its length */
#define MIN_ARRAY_BYTES 12u  /* an empty array: elem type + count */
#define MSG_NAME_MAX 80      /* bytes of a key/tensor name quoted in a message */

enum loc { LOC_HEADER, LOC_KV, LOC_TENSOR };

typedef struct rd {
    st_gguf *g;
    const uint8_t *p;   /* (size): the image */
    uint64_t size;
    uint64_t pos;       /* cursor: next byte to read */
    /* where we are, for messages */
    enum loc loc;
    int64_t idx;
    const uint8_t *what;   /* current key / tensor name (in the image) or NULL */
    uint64_t what_len;
    int depth;             /* valid entries of elem[] */
    uint64_t elem[ST_GGUF_MAX_ARRAY_DEPTH];
    /* growing: elem_off of string and nested arrays */
    uint64_t eo_len, eo_cap;
    uint64_t *tensor_off_at; /* (n_tensors): file offset of each tensor's offset field */
    uint64_t *tensor_name_at;/* (n_tensors): file offset of each tensor's name length */
} rd;

static void quote_name(char *dst, size_t cap, const uint8_t *s, uint64_t len) {
    size_t n = 0;
    for (uint64_t i = 0; i < len && n + 4 < cap; i++) {
        if (i == MSG_NAME_MAX) {
            n += (size_t)snprintf(dst + n, cap - n, "...");
            break;
        }
        dst[n++] = (s[i] >= 0x20 && s[i] < 0x7f) ? (char)s[i] : '?';
    }
    dst[n] = '\0';
}

static void where(const rd *r, char *buf, size_t cap) {
    char nm[MSG_NAME_MAX + 8];
    size_t n = 0;
    if (r->loc == LOC_HEADER) {
        n = (size_t)snprintf(buf, cap, "header");
    } else {
        n = (size_t)snprintf(buf, cap, "%s %" PRId64, r->loc == LOC_KV ? "key" : "tensor", r->idx);
        if (r->what && n < cap) {
            quote_name(nm, sizeof nm, r->what, r->what_len);
            n += (size_t)snprintf(buf + n, cap - n, " ('%s')", nm);
        }
    }
    for (int d = 0; d < r->depth && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "[%" PRIu64 "]", r->elem[d]);
}

__attribute__((format(printf, 5, 6))) static int fail(const rd *r, int code, uint64_t at,
                                                      const char *field, const char *fmt, ...) {
    char loc[256], problem[512];
    where(r, loc, sizeof loc);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(problem, sizeof problem, fmt, ap);
    va_end(ap);
    return st_seterr(r->g->ctx, code, "%s: %s %s at byte %" PRIu64 ": %s", r->g->path, loc, field, at,
                     problem);
}

/* The n bytes at the cursor lie inside the image. */
static int need(const rd *r, uint64_t n, const char *field) {
    if (n <= r->size - r->pos) return 0;
    return fail(r, ST_E_FORMAT, r->pos, field,
                "runs past end of file (needs %" PRIu64 " bytes, %" PRIu64 " left; file is %" PRIu64
                " bytes)",
                n, r->size - r->pos, r->size);
}

static int rd_u32(rd *r, const char *field, uint32_t *v) {
    int rc = need(r, 4, field);
    if (rc) return rc;
    *v = st_gguf_rd_u32_(r->p + r->pos);
    r->pos += 4;
    return 0;
}

static int rd_u64(rd *r, const char *field, uint64_t *v) {
    int rc = need(r, 8, field);
    if (rc) return rc;
    *v = st_gguf_rd_u64_(r->p + r->pos);
    r->pos += 8;
    return 0;
}

/* A length-prefixed string; *at receives the offset of its length field. */
static int rd_string(rd *r, const char *field, uint64_t max, const char *max_name, uint64_t *at,
                     uint64_t *len) {
    char lf[64];
    snprintf(lf, sizeof lf, "%s length", field);
    *at = r->pos;
    int rc = rd_u64(r, lf, len);
    if (rc) return rc;
    if (*len > max)
        return fail(r, ST_E_LIMIT, *at, lf, "%" PRIu64 " exceeds %s (%" PRIu64 ")", *len, max_name, max);
    rc = need(r, *len, field);
    if (rc) return rc;
    r->pos += *len;
    return 0;
}

static int eo_push(rd *r, uint64_t off) {
    if (r->eo_len == r->eo_cap) {
        uint64_t cap = r->eo_cap ? r->eo_cap * 2 : 256;
        uint64_t *p = realloc(r->g->elem_off, cap * sizeof *p);
        if (!p) return st_seterr(r->g->ctx, ST_E_NOMEM, "%s: out of memory indexing arrays", r->g->path);
        r->g->elem_off = p;
        r->eo_cap = cap;
    }
    r->g->elem_off[r->eo_len++] = off;
    return 0;
}

static int check_bool(const rd *r, uint64_t at, const char *field) {
    uint8_t b = r->p[at];
    if (b <= 1) return 0;
    return fail(r, ST_E_FORMAT, at, field, "bool value %u (must be 0 or 1)", b);
}

/* An array value at the cursor, nested `depth` deep (1 = a key's own array). For a key's
 * own array (kv != NULL) the offsets of string / array elements go to elem_off. */
static int rd_array(rd *r, int depth, st_gguf_kv *kv) {
    uint64_t at = r->pos;
    if (depth > ST_GGUF_MAX_ARRAY_DEPTH)
        return fail(r, ST_E_LIMIT, at, "array nesting depth",
                    "%d exceeds ST_GGUF_MAX_ARRAY_DEPTH (%d)", depth, ST_GGUF_MAX_ARRAY_DEPTH);
    uint32_t et;
    uint64_t n;
    int rc = rd_u32(r, "array element type", &et);
    if (rc) return rc;
    if (et >= ST_GGUF_VTYPE_COUNT_)
        return fail(r, ST_E_FORMAT, at, "array element type", "%u unknown (valid: 0..%d)", et,
                    ST_GGUF_VTYPE_COUNT_ - 1);
    uint64_t n_at = r->pos;
    rc = rd_u64(r, "array length", &n);
    if (rc) return rc;
    if (n > ST_GGUF_MAX_ARRAY_LEN)
        return fail(r, ST_E_LIMIT, n_at, "array length", "%" PRIu64 " exceeds ST_GGUF_MAX_ARRAY_LEN (%u)", n,
                    ST_GGUF_MAX_ARRAY_LEN);
    if (kv) {
        kv->elem_type = (st_gguf_vtype)et;
        kv->n_elem = n;
        kv->elem_at = r->pos;
        kv->first_off = r->eo_len;
    }
    size_t esz = st_gguf_vtype_size((st_gguf_vtype)et);
    if (esz) {
        rc = need(r, n * esz, "array data"); /* n <= 2^26, esz <= 8: no overflow */
        if (rc) return rc;
        if (et == ST_GGUF_BOOL) {
            for (uint64_t i = 0; i < n; i++) {
                r->elem[depth - 1] = i;
                r->depth = depth;
                rc = check_bool(r, r->pos + i, "array element");
                if (rc) return rc;
            }
            r->depth = depth - 1;
        }
        r->pos += n * esz;
        return 0;
    }
    uint64_t min = et == ST_GGUF_STRING ? MIN_STRING_BYTES : MIN_ARRAY_BYTES;
    if (n * min > r->size - r->pos)
        return fail(r, ST_E_FORMAT, n_at, "array length",
                    "%" PRIu64 " elements of at least %" PRIu64 " bytes each run past end of file "
                    "(%" PRIu64 " bytes left)",
                    n, min, r->size - r->pos);
    for (uint64_t i = 0; i < n; i++) {
        r->elem[depth - 1] = i;
        r->depth = depth;
        if (kv && (rc = eo_push(r, r->pos))) return rc;
        if (et == ST_GGUF_STRING) {
            uint64_t sat, len;
            rc = rd_string(r, "string", ST_GGUF_MAX_STRING_LEN, "ST_GGUF_MAX_STRING_LEN", &sat, &len);
        } else {
            rc = rd_array(r, depth + 1, NULL);
        }
        if (rc) return rc;
    }
    r->depth = depth - 1;
    return 0;
}

static int rd_kv(rd *r, int64_t i) {
    st_gguf *g = r->g;
    st_gguf_kv *kv = &g->kv[i];
    r->loc = LOC_KV;
    r->idx = i;
    r->what = NULL;
    r->depth = 0;
    int rc = rd_string(r, "key", ST_GGUF_MAX_KEY_LEN, "ST_GGUF_MAX_KEY_LEN", &kv->key_at, &kv->key_len);
    if (rc) return rc;
    const uint8_t *key = r->p + kv->key_at + 8;
    if (kv->key_len == 0) return fail(r, ST_E_FORMAT, kv->key_at, "key length", "0: keys must not be empty");
    if (memchr(key, 0, kv->key_len))
        return fail(r, ST_E_FORMAT, kv->key_at + 8, "key", "contains a NUL byte");
    r->what = key;
    r->what_len = kv->key_len;
    /* The index only holds kv[0..i], whose key_at / key_len are set. */
    int64_t dup = st_gguf_index_find_(&g->key_idx, (const char *)key, kv->key_len, st_gguf_key_name_of_, g, i);
    if (dup != i)
        return fail(r, ST_E_FORMAT, kv->key_at, "key", "duplicate key (also key %" PRId64 ")", dup);
    uint64_t t_at = r->pos;
    uint32_t t;
    rc = rd_u32(r, "value type", &t);
    if (rc) return rc;
    if (t >= ST_GGUF_VTYPE_COUNT_)
        return fail(r, ST_E_FORMAT, t_at, "value type", "%u unknown (valid: 0..%d)", t, ST_GGUF_VTYPE_COUNT_ - 1);
    kv->type = (st_gguf_vtype)t;
    kv->val_at = r->pos;
    size_t sz = st_gguf_vtype_size(kv->type);
    if (sz) {
        rc = need(r, sz, "value");
        if (rc) return rc;
        if (kv->type == ST_GGUF_BOOL && (rc = check_bool(r, r->pos, "value"))) return rc;
        for (size_t b = 0; b < sz; b++) kv->bits |= (uint64_t)r->p[r->pos + b] << (8 * b);
        r->pos += sz;
    } else if (kv->type == ST_GGUF_STRING) {
        uint64_t sat;
        rc = rd_string(r, "string", ST_GGUF_MAX_STRING_LEN, "ST_GGUF_MAX_STRING_LEN", &sat, &kv->str_len);
    } else {
        rc = rd_array(r, 1, kv);
    }
    if (rc) return rc;
    kv->val_end = r->pos;
    return 0;
}

static int rd_alignment(rd *r) {
    st_gguf *g = r->g;
    g->alignment = ST_GGUF_DEFAULT_ALIGNMENT;
    int64_t i = st_gguf_find_key(g, "general.alignment");
    if (i < 0) return 0;
    const st_gguf_kv *kv = &g->kv[i];
    r->loc = LOC_KV;
    r->idx = i;
    r->what = r->p + kv->key_at + 8;
    r->what_len = kv->key_len;
    r->depth = 0;
    if (kv->type != ST_GGUF_UINT32)
        return fail(r, ST_E_FORMAT, kv->val_at, "general.alignment", "has type %s, must be uint32",
                    st_gguf_vtype_name(kv->type));
    uint64_t a = kv->bits;
    if (a == 0 || (a & (a - 1)))
        return fail(r, ST_E_FORMAT, kv->val_at, "general.alignment", "%" PRIu64 " is not a power of two", a);
    /* the GGUF spec asks for a multiple of 8: below that, f32 and f16 tensor data may start
     * at addresses their element type cannot be read from (found by fuzz/model_fuzz.c) */
    if (a % 8)
        return fail(r, ST_E_FORMAT, kv->val_at, "general.alignment", "%" PRIu64 " is not a multiple of 8", a);
    if (a > ST_GGUF_MAX_ALIGNMENT)
        return fail(r, ST_E_LIMIT, kv->val_at, "general.alignment",
                    "%" PRIu64 " exceeds ST_GGUF_MAX_ALIGNMENT (%u)", a, ST_GGUF_MAX_ALIGNMENT);
    g->alignment = (uint32_t)a;
    return 0;
}

static const char *tensor_name_of(const void *arg, int64_t i, size_t *len) {
    const rd *r = arg;
    uint64_t at = r->tensor_name_at[i];
    *len = (size_t)st_gguf_rd_u64_(r->p + at);
    return (const char *)r->p + at + 8;
}

static int rd_tensor_info(rd *r, int64_t j) {
    st_gguf *g = r->g;
    st_gguf_tensor *t = &g->tensors[j];
    r->loc = LOC_TENSOR;
    r->idx = j;
    r->what = NULL;
    r->depth = 0;
    uint64_t at, len;
    int rc = rd_string(r, "name", ST_GGUF_MAX_NAME_LEN, "ST_GGUF_MAX_NAME_LEN", &at, &len);
    if (rc) return rc;
    if (len == 0) return fail(r, ST_E_FORMAT, at, "name length", "0: tensor names must not be empty");
    if (memchr(r->p + at + 8, 0, len)) return fail(r, ST_E_FORMAT, at + 8, "name", "contains a NUL byte");
    r->tensor_name_at[j] = at;
    r->what = r->p + at + 8;
    r->what_len = len;
    int64_t dup = st_gguf_index_find_(&g->tensor_idx, (const char *)r->what, len, tensor_name_of, r, j);
    if (dup != j)
        return fail(r, ST_E_FORMAT, at, "name", "duplicate tensor name (also tensor %" PRId64 ")", dup);

    uint64_t nd_at = r->pos;
    uint32_t nd;
    if ((rc = rd_u32(r, "n_dims", &nd))) return rc;
    if (nd == 0) return fail(r, ST_E_FORMAT, nd_at, "n_dims", "0 (must be 1..%d)", ST_GGUF_MAX_DIMS);
    if (nd > ST_GGUF_MAX_DIMS)
        return fail(r, ST_E_LIMIT, nd_at, "n_dims", "%u exceeds ST_GGUF_MAX_DIMS (%d)", nd, ST_GGUF_MAX_DIMS);
    t->n_dims = (int)nd;
    uint64_t n_elem = 1;
    for (int d = 0; d < ST_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < nd; d++) {
        char field[16];
        snprintf(field, sizeof field, "ne[%u]", d);
        uint64_t ne_at = r->pos, ne;
        if ((rc = rd_u64(r, field, &ne))) return rc;
        if (ne == 0) return fail(r, ST_E_FORMAT, ne_at, field, "is 0 (dimensions must be >= 1)");
        if (ne > INT64_MAX || st_mul_overflow_u64(n_elem, ne, &n_elem) || n_elem > INT64_MAX)
            return fail(r, ST_E_FORMAT, ne_at, field, "%" PRIu64 ": element count overflows int64", ne);
        t->ne[d] = (int64_t)ne;
    }
    uint64_t ty_at = r->pos;
    uint32_t ty;
    if ((rc = rd_u32(r, "type", &ty))) return rc;
    int64_t blck = st_type_block_size((st_type)ty);
    size_t bsz = st_type_size((st_type)ty);
    if (blck <= 0 || bsz == 0) return fail(r, ST_E_FORMAT, ty_at, "type", "%u is not a known ggml type", ty);
    t->type = (st_type)ty;
    if (t->ne[0] % blck)
        return fail(r, ST_E_FORMAT, ty_at, "type",
                    "row length ne[0]=%" PRId64 " is not a multiple of %s's block size %" PRId64, t->ne[0],
                    st_type_name(t->type), blck);
    /* nbytes = n_elem / blck * bsz; n_elem is a multiple of blck since ne[0] is */
    if (st_mul_overflow_u64(n_elem / (uint64_t)blck, bsz, &t->nbytes))
        return fail(r, ST_E_FORMAT, ty_at, "type", "tensor byte size overflows");
    uint64_t off_at = r->pos;
    if ((rc = rd_u64(r, "offset", &t->offset))) return rc;
    if (t->offset % g->alignment)
        return fail(r, ST_E_FORMAT, off_at, "offset", "%" PRIu64 " is not a multiple of the alignment %u",
                    t->offset, g->alignment);
    r->tensor_off_at[j] = off_at;
    return 0;
}

static int cmp_by_offset(const void *a, const void *b, void *arg) {
    const st_gguf_tensor *t = arg;
    int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
    uint64_t x = t[i].offset, y = t[j].offset;
    if (x != y) return x < y ? -1 : 1;
    return i < j ? -1 : i > j; /* ties by index: the later tensor is the one reported */
}

/* Every tensor's data lies inside the file, and no two overlap. */
static int check_data(rd *r) {
    st_gguf *g = r->g;
    for (int64_t j = 0; j < g->n_tensors; j++) {
        st_gguf_tensor *t = &g->tensors[j];
        uint64_t start, end;
        r->loc = LOC_TENSOR;
        r->idx = j;
        r->what = (const uint8_t *)t->name;
        r->what_len = strlen(t->name);
        r->depth = 0;
        if (st_add_overflow_u64(g->data_offset, t->offset, &start) || st_add_overflow_u64(start, t->nbytes, &end))
            return fail(r, ST_E_FORMAT, r->tensor_off_at[j], "offset",
                        "%" PRIu64 ": data runs past end of file (its end overflows 64 bits; file is %" PRIu64
                        " bytes)", t->offset, g->size);
        if (end > g->size)
            return fail(r, ST_E_FORMAT, r->tensor_off_at[j], "offset",
                        "%" PRIu64 ": data runs past end of file (%" PRIu64 " bytes at file offset %" PRIu64
                        ", ends at %" PRIu64 ", file is %" PRIu64 " bytes)",
                        t->offset, t->nbytes, start, end, g->size);
        t->data = g->base + start;
    }
    if (g->n_tensors < 2) return 0;
    int64_t *ord = malloc((size_t)g->n_tensors * sizeof *ord);
    if (!ord) return st_seterr(g->ctx, ST_E_NOMEM, "%s: out of memory checking tensor overlap", g->path);
    for (int64_t j = 0; j < g->n_tensors; j++) ord[j] = j;
    qsort_r(ord, (size_t)g->n_tensors, sizeof *ord, cmp_by_offset, g->tensors);
    int rc = 0;
    for (int64_t k = 1; k < g->n_tensors && !rc; k++) {
        const st_gguf_tensor *a = &g->tensors[ord[k - 1]], *b = &g->tensors[ord[k]];
        if (a->offset + a->nbytes <= b->offset) continue;
        r->idx = ord[k];
        r->what = (const uint8_t *)b->name;
        r->what_len = strlen(b->name);
        char an[MSG_NAME_MAX + 8];
        quote_name(an, sizeof an, (const uint8_t *)a->name, strlen(a->name));
        rc = fail(r, ST_E_FORMAT, r->tensor_off_at[ord[k]], "offset",
                  "data [%" PRIu64 ", %" PRIu64 ") overlaps tensor %" PRId64 " ('%s') [%" PRIu64 ", %" PRIu64 ")",
                  b->offset, b->offset + b->nbytes, ord[k - 1], an, a->offset, a->offset + a->nbytes);
    }
    free(ord);
    return rc;
}

/* Copies every key and tensor name, NUL-terminated, into one block. */
static int copy_names(rd *r) {
    st_gguf *g = r->g;
    uint64_t total = 1;
    for (int64_t i = 0; i < g->n_kv; i++) total += g->kv[i].key_len + 1;
    for (int64_t j = 0; j < g->n_tensors; j++) total += st_gguf_rd_u64_(r->p + r->tensor_name_at[j]) + 1;
    g->names = malloc(total);
    if (!g->names) return st_seterr(g->ctx, ST_E_NOMEM, "%s: out of memory copying names", g->path);
    char *w = g->names;
    for (int64_t i = 0; i < g->n_kv; i++) {
        memcpy(w, r->p + g->kv[i].key_at + 8, g->kv[i].key_len);
        g->kv[i].key = w;
        w += g->kv[i].key_len;
        *w++ = '\0';
    }
    for (int64_t j = 0; j < g->n_tensors; j++) {
        uint64_t at = r->tensor_name_at[j], len = st_gguf_rd_u64_(r->p + at);
        memcpy(w, r->p + at + 8, len);
        g->tensors[j].name = w;
        w += len;
        *w++ = '\0';
    }
    return 0;
}

static int rd_header(rd *r) {
    st_gguf *g = r->g;
    int rc = need(r, 4, "magic");
    if (rc) return rc;
    if (memcmp(r->p, ST_GGUF_MAGIC, 4) != 0)
        return fail(r, ST_E_FORMAT, 0, "magic", "expected \"GGUF\" (47 47 55 46), found %02x %02x %02x %02x",
                    r->p[0], r->p[1], r->p[2], r->p[3]);
    r->pos = 4;
    if ((rc = rd_u32(r, "version", &g->version))) return rc;
    uint32_t v = g->version, sw = __builtin_bswap32(v);
    if (v == 1)
        return fail(r, ST_E_VERSION, 4, "version", "GGUF v1 is not supported (only v2 and v3)");
    if (v != 2 && v != 3) {
        if (sw >= 1 && sw <= 3)
            return fail(r, ST_E_VERSION, 4, "version",
                        "reads 0x%08x: a big-endian GGUF (v%u); only little-endian files are supported", v, sw);
        return fail(r, ST_E_VERSION, 4, "version", "%u is not supported (only 2 and 3)", v);
    }
    uint64_t nt, nkv;
    if ((rc = rd_u64(r, "n_tensors", &nt))) return rc;
    if ((rc = rd_u64(r, "n_kv", &nkv))) return rc;
    uint64_t left = r->size - r->pos;
    if (nt > ST_GGUF_MAX_TENSORS)
        return fail(r, ST_E_LIMIT, 8, "n_tensors", "%" PRIu64 " exceeds ST_GGUF_MAX_TENSORS (%u)", nt,
                    ST_GGUF_MAX_TENSORS);
    if (nkv > ST_GGUF_MAX_KV)
        return fail(r, ST_E_LIMIT, 16, "n_kv", "%" PRIu64 " exceeds ST_GGUF_MAX_KV (%u)", nkv, ST_GGUF_MAX_KV);
    if (nt * MIN_TENSOR_BYTES > left)
        return fail(r, ST_E_FORMAT, 8, "n_tensors",
                    "%" PRIu64 " tensor infos of at least %u bytes run past end of file (%" PRIu64 " bytes left)", nt,
                    MIN_TENSOR_BYTES, left);
    if (nkv * MIN_KV_BYTES > left)
        return fail(r, ST_E_FORMAT, 16, "n_kv",
                    "%" PRIu64 " key/value pairs of at least %u bytes run past end of file (%" PRIu64 " bytes left)",
                    nkv, MIN_KV_BYTES, left);
    g->kv = calloc(nkv ? nkv : 1, sizeof *g->kv);
    g->tensors = calloc(nt ? nt : 1, sizeof *g->tensors);
    r->tensor_off_at = calloc(nt ? nt : 1, sizeof *r->tensor_off_at);
    r->tensor_name_at = calloc(nt ? nt : 1, sizeof *r->tensor_name_at);
    if (!g->kv || !g->tensors || !r->tensor_off_at || !r->tensor_name_at ||
        st_gguf_index_init_(&g->key_idx, nkv) || st_gguf_index_init_(&g->tensor_idx, nt))
        return st_seterr(g->ctx, ST_E_NOMEM, "%s: out of memory for %" PRIu64 " keys and %" PRIu64 " tensors",
                         g->path, nkv, nt);
    g->n_kv = (int64_t)nkv;
    g->n_tensors = (int64_t)nt;
    return 0;
}

static int parse(st_gguf *g) {
    rd r = {.g = g, .p = g->base, .size = g->size, .loc = LOC_HEADER};
    int rc = rd_header(&r);
    for (int64_t i = 0; !rc && i < g->n_kv; i++) rc = rd_kv(&r, i);
    if (!rc) rc = rd_alignment(&r); /* before the tensor infos: their offsets need it */
    for (int64_t j = 0; !rc && j < g->n_tensors; j++) rc = rd_tensor_info(&r, j);
    if (!rc) {
        uint64_t a = g->alignment, end = r.pos;
        g->data_offset = (end + a - 1) / a * a; /* end <= size < 2^63, a <= 2^20: no overflow */
        rc = copy_names(&r);
    }
    if (!rc) rc = check_data(&r);
    free(r.tensor_off_at);
    free(r.tensor_name_at);
    return rc;
}

/* Takes ownership of map (map_len bytes, NULL for caller-owned memory) even on failure. */
static int open_image(st_ctx *ctx, const void *data, uint64_t size, const char *name, void *map, size_t map_len,
                      st_gguf **out) {
    static const uint8_t empty[1];
    st_gguf *g = calloc(1, sizeof *g);
    char *path = strdup(name ? name : "(memory)");
    if (!g || !path) {
        free(g);
        free(path);
        if (map) munmap(map, map_len);
        return st_seterr(ctx, ST_E_NOMEM, "%s: out of memory", name ? name : "(memory)");
    }
    g->ctx = ctx;
    g->path = path;
    g->base = data ? data : empty;
    g->size = size;
    g->map = map;
    g->map_len = map_len;
    int rc = parse(g);
    if (rc) {
        st_gguf_close(g);
        return rc;
    }
    *out = g;
    return 0;
}

int st_gguf_open_memory(st_ctx *ctx, const void *data, size_t size, const char *name, st_gguf **out) {
    if (!out) return st_seterr(ctx, ST_E_INVAL, "st_gguf_open_memory: out is NULL");
    *out = NULL;
    if (!data && size) return st_seterr(ctx, ST_E_INVAL, "st_gguf_open_memory: data is NULL");
    return open_image(ctx, data, size, name, NULL, 0, out);
}

/* Where in a cache line the anonymous copy should start so that most tensor bytes start on
 * one: GGUF aligns tensors to 32 bytes by default, so half of llama.cpp's files put every
 * tensor 32 bytes past a cache line, where the quad kernels' 64-byte loads cross lines or
 * split in halves (slower: docs/PERFORMANCE.md, quantized matvec). Parses the file once from
 * a read-only mapping; 0 when that fails (the real open then says why). */
static size_t anonymous_shift(int fd, uint64_t size) {
    void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) return 0;
    st_gguf *g = NULL;
    uint64_t bytes_at[64] = {0}; /* tensor bytes by start offset mod 64 */
    if (open_image(NULL, m, size, NULL, NULL, 0, &g) == 0) {
        for (int64_t i = 0; i < g->n_tensors; i++)
            bytes_at[(g->data_offset + g->tensors[i].offset) % 64] += g->tensors[i].nbytes;
        st_gguf_close(g);
    }
    munmap(m, (size_t)size);
    int best = 0;
    for (int r = 1; r < 64; r++)
        if (bytes_at[r] > bytes_at[best]) best = r;
    return (size_t)(64 - best) % 64;
}

/* Reads the whole file into anonymous memory backed by transparent huge pages where the
 * kernel allows: weights streamed at memory bandwidth stall on 4 KiB TLB misses when they
 * sit in the page cache behind a file mapping (docs/PERFORMANCE.md, end to end).
 * The image starts *image_off bytes into the mapping (anonymous_shift). */
static int read_anonymous(st_ctx *ctx, int fd, const char *path, uint64_t size, void **map, size_t *map_len,
                          size_t *image_off) {
    const size_t huge = (size_t)2 << 20, shift = anonymous_shift(fd, size);
    size_t len = ((size_t)size + shift + huge - 1) & ~(huge - 1);
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        return st_seterr(ctx, -e, "%s: cannot allocate %" PRIu64 " bytes: %s", path, size, st_strerror(-e));
    }
#ifdef MADV_HUGEPAGE
    madvise(p, len, MADV_HUGEPAGE);
#endif
    uint64_t done = 0;
    while (done < size) {
        size_t chunk = size - done > ((size_t)1 << 30) ? ((size_t)1 << 30) : (size_t)(size - done);
        ssize_t n = pread(fd, (char *)p + shift + done, chunk, (off_t)done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            int e = n < 0 ? errno : EIO;
            munmap(p, len);
            return st_seterr(ctx, -e, "%s: read failed at byte %" PRIu64 ": %s", path, done, st_strerror(-e));
        }
        done += (uint64_t)n;
    }
    mprotect(p, len, PROT_READ);
    *map = p;
    *map_len = len;
    *image_off = shift;
    return 0;
}

int st_gguf_open(st_ctx *ctx, const char *path, st_gguf **out) { return st_gguf_open_flags(ctx, path, 0, out); }

int st_gguf_open_flags(st_ctx *ctx, const char *path, unsigned flags, st_gguf **out) {
    if (!out) return st_seterr(ctx, ST_E_INVAL, "st_gguf_open: out is NULL");
    *out = NULL;
    if (!path) return st_seterr(ctx, ST_E_INVAL, "st_gguf_open: path is NULL");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return st_seterr(ctx, -e, "%s: cannot open: %s", path, st_strerror(-e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return st_seterr(ctx, -e, "%s: cannot stat: %s", path, st_strerror(-e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return st_seterr(ctx, S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL, "%s: not a regular file", path);
    }
    void *map = NULL;
    uint64_t size = (uint64_t)st.st_size;
    size_t map_len = (size_t)size, image_off = 0;
    if (size > 0 && (flags & ST_GGUF_OPEN_ANON)) {
        int rc = read_anonymous(ctx, fd, path, size, &map, &map_len, &image_off);
        if (rc) {
            close(fd);
            return rc;
        }
    } else if (size > 0) {
        map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            int e = errno;
            close(fd);
            return st_seterr(ctx, -e, "%s: cannot mmap %" PRIu64 " bytes: %s", path, size, st_strerror(-e));
        }
    }
    close(fd); /* the mapping keeps the file referenced */
    int rc = open_image(ctx, map ? (const uint8_t *)map + image_off : NULL, size, path, map, map_len, out);
    if (!rc) (*out)->anon = size > 0 && (flags & ST_GGUF_OPEN_ANON);
    return rc;
}

int st_gguf_set_writable(st_gguf *g, int on) {
    if (!g || !g->anon) return ST_E_STATE;
    if (mprotect(g->map, g->map_len, on ? PROT_READ | PROT_WRITE : PROT_READ) != 0) return -errno;
    return 0;
}

void st_gguf_close(st_gguf *g) {
    if (!g) return;
    if (g->map) munmap(g->map, g->map_len);
    st_gguf_index_free_(&g->key_idx);
    st_gguf_index_free_(&g->tensor_idx);
    free(g->kv);
    free(g->tensors);
    free(g->names);
    free(g->elem_off);
    free(g->path);
    free(g);
}
