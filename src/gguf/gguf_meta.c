/* GGUF metadata and tensor lookup: name index, accessors, typed getters.
 * Everything here reads a file image that gguf_read.c has fully validated, so the
 * offsets stored in st_gguf_kv can be followed without further bounds checks. */
#include "gguf/gguf_int.h"

#include <inttypes.h>
#include <stdlib.h>
#include <xxhash.h>

/* ---- name index -------------------------------------------------------------------- */

uint64_t st_gguf_hash_(const char *s, size_t len) { return XXH3_64bits(s, len); }

int st_gguf_index_init_(st_gguf_index *ix, uint64_t n) {
    ix->cap = 0;
    ix->slot = NULL;
    if (n == 0) return 0;
    uint64_t cap = 8;
    while (cap < 2 * n) cap *= 2;
    ix->slot = malloc(cap * sizeof *ix->slot);
    if (!ix->slot) return ST_E_NOMEM;
    for (uint64_t i = 0; i < cap; i++) ix->slot[i] = -1;
    ix->cap = cap;
    return 0;
}

void st_gguf_index_free_(st_gguf_index *ix) {
    free(ix->slot);
    ix->slot = NULL;
    ix->cap = 0;
}

int64_t st_gguf_index_find_(st_gguf_index *ix, const char *name, size_t len,
                            const char *(*name_of)(const void *arg, int64_t i, size_t *len),
                            const void *arg, int64_t insert_at) {
    if (ix->cap == 0) return -1;
    uint64_t mask = ix->cap - 1;
    /* cap >= 2n: a free slot always ends the probe */
    for (uint64_t h = st_gguf_hash_(name, len) & mask;; h = (h + 1) & mask) {
        int64_t e = ix->slot[h];
        if (e < 0) {
            if (insert_at >= 0) ix->slot[h] = insert_at;
            return insert_at >= 0 ? insert_at : -1;
        }
        size_t elen;
        const char *en = name_of(arg, e, &elen);
        if (elen == len && memcmp(en, name, len) == 0) return e;
    }
}

const char *st_gguf_key_name_of_(const void *arg, int64_t i, size_t *len) {
    const st_gguf *g = arg;
    *len = (size_t)g->kv[i].key_len;
    return (const char *)g->base + g->kv[i].key_at + 8;
}

static const char *tensor_name_of(const void *arg, int64_t i, size_t *len) {
    const st_gguf *g = arg;
    *len = strlen(g->tensors[i].name);
    return g->tensors[i].name;
}

/* ---- accessors ----------------------------------------------------------------------- */

uint32_t st_gguf_version(const st_gguf *g) { return g->version; }
uint32_t st_gguf_alignment(const st_gguf *g) { return g->alignment; }
uint64_t st_gguf_data_offset(const st_gguf *g) { return g->data_offset; }
uint64_t st_gguf_file_size(const st_gguf *g) { return g->size; }
const char *st_gguf_path(const st_gguf *g) { return g->path; }
int64_t st_gguf_n_kv(const st_gguf *g) { return g->n_kv; }
int64_t st_gguf_n_tensors(const st_gguf *g) { return g->n_tensors; }

int64_t st_gguf_find_key(const st_gguf *g, const char *key) {
    if (!g || !key) return -1;
    /* a lookup never inserts, so the const cast never writes */
    return st_gguf_index_find_((st_gguf_index *)&g->key_idx, key, strlen(key), st_gguf_key_name_of_, g, -1);
}

const char *st_gguf_key_name(const st_gguf *g, int64_t i) {
    return (g && i >= 0 && i < g->n_kv) ? g->kv[i].key : NULL;
}

st_gguf_vtype st_gguf_key_type(const st_gguf *g, int64_t i) {
    return (g && i >= 0 && i < g->n_kv) ? g->kv[i].type : ST_GGUF_VTYPE_COUNT_;
}

const st_gguf_tensor *st_gguf_tensor_at(const st_gguf *g, int64_t i) {
    return (g && i >= 0 && i < g->n_tensors) ? &g->tensors[i] : NULL;
}

const st_gguf_tensor *st_gguf_find_tensor(const st_gguf *g, const char *name) {
    if (!g || !name) return NULL;
    int64_t i = st_gguf_index_find_((st_gguf_index *)&g->tensor_idx, name, strlen(name), tensor_name_of, g, -1);
    return i >= 0 ? &g->tensors[i] : NULL;
}

static const char *const vtype_names[ST_GGUF_VTYPE_COUNT_] = {
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
    "bool",  "string", "array", "uint64", "int64", "float64",
};
static const uint8_t vtype_sizes[ST_GGUF_VTYPE_COUNT_] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *st_gguf_vtype_name(st_gguf_vtype t) {
    return (unsigned)t < ST_GGUF_VTYPE_COUNT_ ? vtype_names[t] : "?";
}

size_t st_gguf_vtype_size(st_gguf_vtype t) { return (unsigned)t < ST_GGUF_VTYPE_COUNT_ ? vtype_sizes[t] : 0; }

/* ---- typed getters ---------------------------------------------------------------------- */

static int lookup(st_gguf *g, const char *key, const st_gguf_kv **kv) {
    *kv = NULL;
    if (!g || !key) return ST_E_INVAL;
    int64_t i = st_gguf_find_key(g, key);
    if (i < 0) return st_seterr(g->ctx, ST_E_NOT_FOUND, "%s: key '%s' not found", g->path, key);
    *kv = &g->kv[i];
    return 0;
}

static int type_err(st_gguf *g, const st_gguf_kv *kv, const char *expected) {
    if (kv->type == ST_GGUF_ARRAY)
        return st_seterr(g->ctx, ST_E_TYPE, "%s: key '%s' has type array of %s, expected %s", g->path, kv->key,
                         st_gguf_vtype_name(kv->elem_type), expected);
    return st_seterr(g->ctx, ST_E_TYPE, "%s: key '%s' has type %s, expected %s", g->path, kv->key,
                     st_gguf_vtype_name(kv->type), expected);
}

/* An integer value as (negative?, value): signed types are sign-extended into *sv. */
static int int_value(const st_gguf_kv *kv, int *is_signed, int64_t *sv, uint64_t *uv) {
    uint64_t b = kv->bits;
    *is_signed = 0;
    switch (kv->type) {
    case ST_GGUF_UINT8: case ST_GGUF_UINT16: case ST_GGUF_UINT32: case ST_GGUF_UINT64:
        *uv = b;
        return 1;
    case ST_GGUF_INT8: *sv = (int8_t)b; break;
    case ST_GGUF_INT16: *sv = (int16_t)b; break;
    case ST_GGUF_INT32: *sv = (int32_t)b; break;
    case ST_GGUF_INT64: *sv = (int64_t)b; break;
    default:
        return 0;
    }
    *is_signed = 1;
    return 1;
}

/* Fetches key as an integer in [lo, hi] (signed view) or [0, uhi] (unsigned view). */
static int get_int(st_gguf *g, const char *key, const char *want, int64_t lo, int64_t hi, uint64_t uhi,
                   int *neg, int64_t *sv, uint64_t *uv) {
    const st_gguf_kv *kv;
    int rc = lookup(g, key, &kv);
    if (rc) return rc;
    *sv = 0;
    *uv = 0;
    if (!int_value(kv, neg, sv, uv)) return type_err(g, kv, want);
    int ok = *neg ? (*sv >= lo && *sv <= hi) : (*uv <= uhi);
    if (ok) return 0;
    if (*neg)
        return st_seterr(g->ctx, ST_E_TYPE, "%s: key '%s': %s value %" PRId64 " does not fit %s", g->path, key,
                         st_gguf_vtype_name(kv->type), *sv, want);
    return st_seterr(g->ctx, ST_E_TYPE, "%s: key '%s': %s value %" PRIu64 " does not fit %s", g->path, key,
                     st_gguf_vtype_name(kv->type), *uv, want);
}

int st_gguf_get_u32(st_gguf *g, const char *key, uint32_t *out) {
    int neg;
    int64_t sv;
    uint64_t uv;
    *out = 0;
    int rc = get_int(g, key, "uint32", 0, UINT32_MAX, UINT32_MAX, &neg, &sv, &uv);
    if (!rc) *out = neg ? (uint32_t)sv : (uint32_t)uv;
    return rc;
}

int st_gguf_get_i32(st_gguf *g, const char *key, int32_t *out) {
    int neg;
    int64_t sv;
    uint64_t uv;
    *out = 0;
    int rc = get_int(g, key, "int32", INT32_MIN, INT32_MAX, INT32_MAX, &neg, &sv, &uv);
    if (!rc) *out = neg ? (int32_t)sv : (int32_t)uv;
    return rc;
}

int st_gguf_get_u64(st_gguf *g, const char *key, uint64_t *out) {
    int neg;
    int64_t sv;
    uint64_t uv;
    *out = 0;
    int rc = get_int(g, key, "uint64", 0, INT64_MAX, UINT64_MAX, &neg, &sv, &uv);
    if (!rc) *out = neg ? (uint64_t)sv : uv;
    return rc;
}

int st_gguf_get_i64(st_gguf *g, const char *key, int64_t *out) {
    int neg;
    int64_t sv;
    uint64_t uv;
    *out = 0;
    int rc = get_int(g, key, "int64", INT64_MIN, INT64_MAX, INT64_MAX, &neg, &sv, &uv);
    if (!rc) *out = neg ? sv : (int64_t)uv;
    return rc;
}

int st_gguf_get_f32(st_gguf *g, const char *key, float *out) {
    const st_gguf_kv *kv;
    *out = 0;
    int rc = lookup(g, key, &kv);
    if (rc) return rc;
    if (kv->type != ST_GGUF_FLOAT32) return type_err(g, kv, "float32");
    *out = st_fp32_from_bits((uint32_t)kv->bits);
    return 0;
}

int st_gguf_get_f64(st_gguf *g, const char *key, double *out) {
    const st_gguf_kv *kv;
    *out = 0;
    int rc = lookup(g, key, &kv);
    if (rc) return rc;
    if (kv->type == ST_GGUF_FLOAT32) {
        *out = st_fp32_from_bits((uint32_t)kv->bits);
    } else if (kv->type == ST_GGUF_FLOAT64) {
        memcpy(out, &kv->bits, sizeof *out);
    } else {
        return type_err(g, kv, "float32 or float64");
    }
    return 0;
}

int st_gguf_get_bool(st_gguf *g, const char *key, bool *out) {
    const st_gguf_kv *kv;
    *out = false;
    int rc = lookup(g, key, &kv);
    if (rc) return rc;
    if (kv->type != ST_GGUF_BOOL) return type_err(g, kv, "bool");
    *out = kv->bits != 0;
    return 0;
}

int st_gguf_get_str(st_gguf *g, const char *key, const char **s, size_t *len) {
    const st_gguf_kv *kv;
    *s = NULL;
    *len = 0;
    int rc = lookup(g, key, &kv);
    if (rc) return rc;
    if (kv->type != ST_GGUF_STRING) return type_err(g, kv, "string");
    *s = (const char *)g->base + kv->val_at + 8;
    *len = (size_t)kv->str_len;
    return 0;
}

int st_gguf_get_str_dup(st_gguf *g, const char *key, char **out) {
    const char *s;
    size_t len;
    *out = NULL;
    int rc = st_gguf_get_str(g, key, &s, &len);
    if (rc) return rc;
    char *d = malloc(len + 1);
    if (!d) return st_seterr(g->ctx, ST_E_NOMEM, "%s: key '%s': out of memory copying %zu bytes", g->path, key, len);
    memcpy(d, s, len);
    d[len] = '\0';
    *out = d;
    return 0;
}

int st_gguf_get_arr(st_gguf *g, const char *key, st_gguf_vtype *elem_type, uint64_t *n, const void **data) {
    const st_gguf_kv *kv;
    *elem_type = ST_GGUF_VTYPE_COUNT_;
    *n = 0;
    *data = NULL;
    int rc = lookup(g, key, &kv);
    if (rc) return rc;
    if (kv->type != ST_GGUF_ARRAY) return type_err(g, kv, "array");
    *elem_type = kv->elem_type;
    *n = kv->n_elem;
    *data = g->base + kv->elem_at;
    return 0;
}

/* The offset of element i of a key's string or nested array. */
static int arr_elem(st_gguf *g, const char *key, st_gguf_vtype want, uint64_t i, uint64_t *off) {
    const st_gguf_kv *kv;
    *off = 0;
    int rc = lookup(g, key, &kv);
    if (rc) return rc;
    if (kv->type != ST_GGUF_ARRAY || kv->elem_type != want)
        return type_err(g, kv, want == ST_GGUF_STRING ? "array of string" : "array of array");
    if (i >= kv->n_elem)
        return st_seterr(g->ctx, ST_E_INVAL, "%s: key '%s': index %" PRIu64 " out of range (%" PRIu64 " elements)",
                         g->path, key, i, kv->n_elem);
    *off = g->elem_off[kv->first_off + i];
    return 0;
}

int st_gguf_get_arr_str(st_gguf *g, const char *key, uint64_t i, const char **s, size_t *len) {
    uint64_t off;
    *s = NULL;
    *len = 0;
    int rc = arr_elem(g, key, ST_GGUF_STRING, i, &off);
    if (rc) return rc;
    *len = (size_t)st_gguf_rd_u64_(g->base + off);
    *s = (const char *)g->base + off + 8;
    return 0;
}

int st_gguf_get_arr_arr(st_gguf *g, const char *key, uint64_t i, st_gguf_vtype *elem_type, uint64_t *n,
                        const void **data) {
    uint64_t off;
    *elem_type = ST_GGUF_VTYPE_COUNT_;
    *n = 0;
    *data = NULL;
    int rc = arr_elem(g, key, ST_GGUF_ARRAY, i, &off);
    if (rc) return rc;
    *elem_type = (st_gguf_vtype)st_gguf_rd_u32_(g->base + off);
    *n = st_gguf_rd_u64_(g->base + off + 4);
    *data = g->base + off + 12;
    return 0;
}
