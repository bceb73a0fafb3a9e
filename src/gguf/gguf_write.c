/*
 * GGUF writer: collects keys (each already serialized into a small blob) and tensor
 * descriptions, then lays the file out in one pass: header, key/values, tensor
 * infos, padding to the alignment, and each tensor's data padded to the alignment.
 *
 * It refuses to produce anything the reader would reject (same named limits, same
 * shape rules), so every file it writes reads back. Output goes through a tiny sink
 * (a FILE or a memory buffer) so both paths share the layout code.
 */
#include "gguf/gguf_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct wkv {
    char *key;          /* owned, NUL-terminated */
    size_t key_len;
    st_gguf_vtype type;
    uint8_t *val;       /* (val_len): the value serialized exactly as in the file */
    size_t val_len;
} wkv;

typedef struct wtensor {
    char *name;         /* owned, NUL-terminated */
    size_t name_len;
    st_type type;
    int n_dims;
    int64_t ne[ST_GGUF_MAX_DIMS];
    const void *data;   /* borrowed until write; NULL = zeros */
    uint64_t nbytes;
    uint64_t offset;    /* relative to the data section, set by layout() */
} wtensor;

struct st_gguf_writer {
    st_ctx *ctx;
    uint32_t alignment;
    int64_t n_kv, cap_kv;
    wkv *kv;                /* (n_kv) */
    int64_t n_t, cap_t;
    wtensor *t;             /* (n_t) */
    st_gguf_index kidx, tidx;
};

int st_gguf_writer_create(st_ctx *ctx, st_gguf_writer **out) {
    if (!out) return st_seterr(ctx, ST_E_INVAL, "st_gguf_writer_create: out is NULL");
    *out = NULL;
    st_gguf_writer *w = calloc(1, sizeof *w);
    if (!w) return st_seterr(ctx, ST_E_NOMEM, "gguf writer: out of memory");
    w->ctx = ctx;
    w->alignment = ST_GGUF_DEFAULT_ALIGNMENT;
    *out = w;
    return 0;
}

void st_gguf_writer_destroy(st_gguf_writer *w) {
    if (!w) return;
    for (int64_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val);
    }
    for (int64_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->kv);
    free(w->t);
    st_gguf_index_free_(&w->kidx);
    st_gguf_index_free_(&w->tidx);
    free(w);
}

static const char *wkv_name_of(const void *arg, int64_t i, size_t *len) {
    const st_gguf_writer *w = arg;
    *len = w->kv[i].key_len;
    return w->kv[i].key;
}

static const char *wt_name_of(const void *arg, int64_t i, size_t *len) {
    const st_gguf_writer *w = arg;
    *len = w->t[i].name_len;
    return w->t[i].name;
}

/* Makes room for entry n (growing the array and rebuilding its index when needed). */
static int grow(st_gguf_writer *w, void **arr, int64_t *cap, size_t esz, int64_t n, st_gguf_index *ix,
                const char *(*name_of)(const void *, int64_t, size_t *)) {
    if (n < *cap) return 0;
    int64_t ncap = *cap ? *cap * 2 : 16;
    void *p = realloc(*arr, (size_t)ncap * esz);
    if (!p) return ST_E_NOMEM;
    *arr = p;
    *cap = ncap;
    st_gguf_index nix;
    if (st_gguf_index_init_(&nix, (uint64_t)ncap)) return ST_E_NOMEM;
    for (int64_t i = 0; i < n; i++) {
        size_t len;
        const char *s = name_of(w, i, &len);
        st_gguf_index_find_(&nix, s, len, name_of, w, i);
    }
    st_gguf_index_free_(ix);
    *ix = nix;
    return 0;
}

static int nomem(st_gguf_writer *w, const char *what) {
    return st_seterr(w->ctx, ST_E_NOMEM, "gguf writer: out of memory (%s)", what);
}

/* Takes ownership of val (freed on error). */
static int set_blob(st_gguf_writer *w, const char *key, st_gguf_vtype type, uint8_t *val, size_t val_len) {
    if (!w || !key) {
        free(val);
        return w ? st_seterr(w->ctx, ST_E_INVAL, "gguf writer: key is NULL") : ST_E_INVAL;
    }
    size_t klen = strlen(key);
    if (klen == 0 || klen > ST_GGUF_MAX_KEY_LEN) {
        free(val);
        return st_seterr(w->ctx, ST_E_INVAL, "gguf writer: key '%.64s' length %zu not in 1..ST_GGUF_MAX_KEY_LEN (%u)",
                         key, klen, ST_GGUF_MAX_KEY_LEN);
    }
    uint32_t align = w->alignment;
    if (strcmp(key, "general.alignment") == 0) {
        uint32_t a = type == ST_GGUF_UINT32 ? st_gguf_rd_u32_(val) : 0;
        if (type != ST_GGUF_UINT32 || a < 8 || (a & (a - 1)) || a > ST_GGUF_MAX_ALIGNMENT) {
            free(val);
            return st_seterr(w->ctx, ST_E_INVAL,
                             "gguf writer: general.alignment must be a uint32 power of two in 8..%u (got %s %u)",
                             ST_GGUF_MAX_ALIGNMENT, st_gguf_vtype_name(type), a);
        }
        align = a;
    }
    int64_t i = st_gguf_index_find_(&w->kidx, key, klen, wkv_name_of, w, -1);
    if (i >= 0) {
        free(w->kv[i].val);
        w->kv[i].type = type;
        w->kv[i].val = val;
        w->kv[i].val_len = val_len;
        w->alignment = align;
        return 0;
    }
    if (w->n_kv >= (int64_t)ST_GGUF_MAX_KV) {
        free(val);
        return st_seterr(w->ctx, ST_E_INVAL, "gguf writer: more than ST_GGUF_MAX_KV (%u) keys", ST_GGUF_MAX_KV);
    }
    char *k = strdup(key);
    if (!k || grow(w, (void **)&w->kv, &w->cap_kv, sizeof *w->kv, w->n_kv, &w->kidx, wkv_name_of)) {
        free(k);
        free(val);
        return nomem(w, "keys");
    }
    w->kv[w->n_kv] = (wkv){.key = k, .key_len = klen, .type = type, .val = val, .val_len = val_len};
    st_gguf_index_find_(&w->kidx, k, klen, wkv_name_of, w, w->n_kv);
    w->n_kv++;
    w->alignment = align;
    return 0;
}

static void put_u32(uint8_t *p, uint32_t v) {
    for (int b = 0; b < 4; b++) p[b] = (uint8_t)(v >> (8 * b));
}
static void put_u64(uint8_t *p, uint64_t v) {
    for (int b = 0; b < 8; b++) p[b] = (uint8_t)(v >> (8 * b));
}

int st_gguf_writer_set_scalar(st_gguf_writer *w, const char *key, st_gguf_vtype t, const void *v) {
    size_t sz = st_gguf_vtype_size(t);
    if (!w) return ST_E_INVAL;
    if (!sz || !v)
        return st_seterr(w->ctx, ST_E_INVAL, "gguf writer: key '%.64s': %s is not a scalar type", key ? key : "",
                         st_gguf_vtype_name(t));
    if (t == ST_GGUF_BOOL && *(const uint8_t *)v > 1)
        return st_seterr(w->ctx, ST_E_INVAL, "gguf writer: key '%.64s': bool value %u", key ? key : "",
                         *(const uint8_t *)v);
    uint8_t *val = malloc(sz);
    if (!val) return nomem(w, "value");
    memcpy(val, v, sz);
    return set_blob(w, key, t, val, sz);
}

int st_gguf_writer_set_u32(st_gguf_writer *w, const char *key, uint32_t v) {
    uint8_t b[4];
    put_u32(b, v);
    return st_gguf_writer_set_scalar(w, key, ST_GGUF_UINT32, b);
}
int st_gguf_writer_set_i32(st_gguf_writer *w, const char *key, int32_t v) {
    uint8_t b[4];
    put_u32(b, (uint32_t)v);
    return st_gguf_writer_set_scalar(w, key, ST_GGUF_INT32, b);
}
int st_gguf_writer_set_u64(st_gguf_writer *w, const char *key, uint64_t v) {
    uint8_t b[8];
    put_u64(b, v);
    return st_gguf_writer_set_scalar(w, key, ST_GGUF_UINT64, b);
}
int st_gguf_writer_set_i64(st_gguf_writer *w, const char *key, int64_t v) {
    uint8_t b[8];
    put_u64(b, (uint64_t)v);
    return st_gguf_writer_set_scalar(w, key, ST_GGUF_INT64, b);
}
int st_gguf_writer_set_f32(st_gguf_writer *w, const char *key, float v) {
    uint8_t b[4];
    put_u32(b, st_fp32_to_bits(v));
    return st_gguf_writer_set_scalar(w, key, ST_GGUF_FLOAT32, b);
}
int st_gguf_writer_set_f64(st_gguf_writer *w, const char *key, double v) {
    uint8_t b[8];
    uint64_t u;
    memcpy(&u, &v, 8);
    put_u64(b, u);
    return st_gguf_writer_set_scalar(w, key, ST_GGUF_FLOAT64, b);
}
int st_gguf_writer_set_bool(st_gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    return st_gguf_writer_set_scalar(w, key, ST_GGUF_BOOL, &b);
}

int st_gguf_writer_set_strn(st_gguf_writer *w, const char *key, const char *s, size_t len) {
    if (!w) return ST_E_INVAL;
    if (!s && len) return st_seterr(w->ctx, ST_E_INVAL, "gguf writer: key '%.64s': string is NULL", key ? key : "");
    if (len > ST_GGUF_MAX_STRING_LEN)
        return st_seterr(w->ctx, ST_E_INVAL, "gguf writer: key '%.64s': string of %zu bytes exceeds "
                         "ST_GGUF_MAX_STRING_LEN (%u)", key ? key : "", len, ST_GGUF_MAX_STRING_LEN);
    uint8_t *val = malloc(8 + len);
    if (!val) return nomem(w, "string");
    put_u64(val, len);
    if (len) memcpy(val + 8, s, len);
    return set_blob(w, key, ST_GGUF_STRING, val, 8 + len);
}

int st_gguf_writer_set_str(st_gguf_writer *w, const char *key, const char *s) {
    return st_gguf_writer_set_strn(w, key, s, s ? strlen(s) : 0);
}

int st_gguf_writer_set_arr(st_gguf_writer *w, const char *key, st_gguf_vtype elem_type, const void *data,
                           uint64_t n) {
    if (!w) return ST_E_INVAL;
    size_t esz = st_gguf_vtype_size(elem_type);
    if (!esz)
        return st_seterr(w->ctx, ST_E_INVAL, "gguf writer: key '%.64s': %s arrays need set_arr_str or copy_kv",
                         key ? key : "", st_gguf_vtype_name(elem_type));
    if (n > ST_GGUF_MAX_ARRAY_LEN || (!data && n))
        return st_seterr(w->ctx, ST_E_INVAL, "gguf writer: key '%.64s': array of %" PRIu64
                         " elements (NULL data, or over ST_GGUF_MAX_ARRAY_LEN %u)", key ? key : "", n,
                         ST_GGUF_MAX_ARRAY_LEN);
    const uint8_t *d = data;
    if (elem_type == ST_GGUF_BOOL)
        for (uint64_t i = 0; i < n; i++)
            if (d[i] > 1)
                return st_seterr(w->ctx, ST_E_INVAL, "gguf writer: key '%.64s': element %" PRIu64 " bool value %u",
                                 key ? key : "", i, d[i]);
    uint8_t *val = malloc(12 + n * esz);
    if (!val) return nomem(w, "array");
    put_u32(val, (uint32_t)elem_type);
    put_u64(val + 4, n);
    if (n) memcpy(val + 12, data, n * esz);
    return set_blob(w, key, ST_GGUF_ARRAY, val, 12 + n * esz);
}

int st_gguf_writer_set_arr_str(st_gguf_writer *w, const char *key, const char *const *strs, uint64_t n) {
    if (!w) return ST_E_INVAL;
    if (n > ST_GGUF_MAX_ARRAY_LEN || (!strs && n))
        return st_seterr(w->ctx, ST_E_INVAL, "gguf writer: key '%.64s': string array of %" PRIu64 " elements "
                         "(NULL, or over ST_GGUF_MAX_ARRAY_LEN %u)", key ? key : "", n, ST_GGUF_MAX_ARRAY_LEN);
    uint64_t total = 12;
    for (uint64_t i = 0; i < n; i++) {
        size_t len = strs[i] ? strlen(strs[i]) : 0;
        if (!strs[i] || len > ST_GGUF_MAX_STRING_LEN)
            return st_seterr(w->ctx, ST_E_INVAL, "gguf writer: key '%.64s': element %" PRIu64 " is NULL or too long",
                             key ? key : "", i);
        total += 8 + len;
    }
    uint8_t *val = malloc(total), *p = val;
    if (!val) return nomem(w, "string array");
    put_u32(p, ST_GGUF_STRING);
    put_u64(p + 4, n);
    p += 12;
    for (uint64_t i = 0; i < n; i++) {
        size_t len = strlen(strs[i]);
        put_u64(p, len);
        memcpy(p + 8, strs[i], len);
        p += 8 + len;
    }
    return set_blob(w, key, ST_GGUF_ARRAY, val, total);
}

int st_gguf_writer_copy_kv(st_gguf_writer *w, const st_gguf *src, int64_t i) {
    if (!w) return ST_E_INVAL;
    if (!src || i < 0 || i >= src->n_kv)
        return st_seterr(w->ctx, ST_E_INVAL, "gguf writer: copy_kv: no key %" PRId64 " in the source", i);
    const st_gguf_kv *kv = &src->kv[i];
    size_t len = (size_t)(kv->val_end - kv->val_at);
    uint8_t *val = malloc(len ? len : 1);
    if (!val) return nomem(w, "copied value");
    memcpy(val, src->base + kv->val_at, len);
    return set_blob(w, kv->key, kv->type, val, len);
}

int st_gguf_writer_set_alignment(st_gguf_writer *w, uint32_t alignment) {
    return st_gguf_writer_set_u32(w, "general.alignment", alignment);
}

int st_gguf_writer_add_tensor(st_gguf_writer *w, const char *name, st_type type, int n_dims, const int64_t *ne,
                              const void *data) {
    if (!w) return ST_E_INVAL;
    size_t nlen = name ? strlen(name) : 0;
    if (nlen == 0 || nlen > ST_GGUF_MAX_NAME_LEN)
        return st_seterr(w->ctx, ST_E_INVAL, "gguf writer: tensor name length %zu not in 1..ST_GGUF_MAX_NAME_LEN (%u)",
                         nlen, ST_GGUF_MAX_NAME_LEN);
    if (st_gguf_index_find_(&w->tidx, name, nlen, wt_name_of, w, -1) >= 0)
        return st_seterr(w->ctx, ST_E_INVAL, "gguf writer: duplicate tensor name '%.64s'", name);
    if (w->n_t >= (int64_t)ST_GGUF_MAX_TENSORS)
        return st_seterr(w->ctx, ST_E_INVAL, "gguf writer: more than ST_GGUF_MAX_TENSORS (%u)", ST_GGUF_MAX_TENSORS);
    int64_t blck = st_type_block_size(type);
    if (blck <= 0) return st_seterr(w->ctx, ST_E_INVAL, "gguf writer: tensor '%.64s': unknown type %d", name, type);
    if (n_dims < 1 || n_dims > ST_GGUF_MAX_DIMS || !ne)
        return st_seterr(w->ctx, ST_E_INVAL, "gguf writer: tensor '%.64s': n_dims %d not in 1..%d", name, n_dims,
                         ST_GGUF_MAX_DIMS);
    wtensor t = {.type = type, .n_dims = n_dims, .data = data, .name_len = nlen};
    uint64_t n_elem = 1;
    for (int d = 0; d < ST_GGUF_MAX_DIMS; d++) {
        t.ne[d] = d < n_dims ? ne[d] : 1;
        if (t.ne[d] < 1 || st_mul_overflow_u64(n_elem, (uint64_t)t.ne[d], &n_elem) || n_elem > INT64_MAX)
            return st_seterr(w->ctx, ST_E_INVAL, "gguf writer: tensor '%.64s': ne[%d] = %" PRId64
                             " is < 1 or overflows", name, d, t.ne[d]);
    }
    if (t.ne[0] % blck)
        return st_seterr(w->ctx, ST_E_INVAL, "gguf writer: tensor '%.64s': ne[0] = %" PRId64
                         " is not a multiple of %s's block size %" PRId64, name, t.ne[0], st_type_name(type), blck);
    if (st_mul_overflow_u64(n_elem / (uint64_t)blck, st_type_size(type), &t.nbytes))
        return st_seterr(w->ctx, ST_E_INVAL, "gguf writer: tensor '%.64s': byte size overflows", name);
    t.name = strdup(name);
    if (!t.name || grow(w, (void **)&w->t, &w->cap_t, sizeof *w->t, w->n_t, &w->tidx, wt_name_of)) {
        free(t.name);
        return nomem(w, "tensors");
    }
    w->t[w->n_t] = t;
    st_gguf_index_find_(&w->tidx, t.name, nlen, wt_name_of, w, w->n_t);
    w->n_t++;
    return 0;
}

/* ---- output ---------------------------------------------------------------------------- */

typedef struct sink {
    FILE *f;           /* file output, or */
    uint8_t *buf;      /* (cap): memory output */
    uint64_t len, cap;
    int err;           /* first -errno */
} sink;

static void put(sink *s, const void *p, uint64_t n) {
    if (s->err || n == 0) return;
    if (s->f) {
        if (fwrite(p, 1, (size_t)n, s->f) != n) s->err = errno ? -errno : -EIO;
        return;
    }
    ST_ASSERT(s->len + n <= s->cap); /* layout() sized the buffer exactly */
    if (p) memcpy(s->buf + s->len, p, (size_t)n);
    else memset(s->buf + s->len, 0, (size_t)n);
    s->len += n;
}

static void put_zeros(sink *s, uint64_t n) {
    static const uint8_t zeros[4096];
    if (!s->f) {
        put(s, NULL, n);
        return;
    }
    while (n && !s->err) {
        uint64_t k = n < sizeof zeros ? n : sizeof zeros;
        put(s, zeros, k);
        n -= k;
    }
}

static void put_le32(sink *s, uint32_t v) {
    uint8_t b[4];
    put_u32(b, v);
    put(s, b, 4);
}
static void put_le64(sink *s, uint64_t v) {
    uint8_t b[8];
    put_u64(b, v);
    put(s, b, 8);
}

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* Sets each tensor's offset and (*data_off, *total) the data offset and the file size.
 * ST_E_INVAL when the file would not fit 63 bits (tensors of absurd sizes). The header
 * sums cannot overflow: keys, names and values are bounded by the named limits. */
static int layout(st_gguf_writer *w, uint64_t *data_off, uint64_t *total) {
    uint64_t hdr = ST_GGUF_HEADER_BYTES, a = w->alignment, off = 0;
    for (int64_t i = 0; i < w->n_kv; i++) hdr += 8 + w->kv[i].key_len + 4 + w->kv[i].val_len;
    for (int64_t i = 0; i < w->n_t; i++) hdr += 8 + w->t[i].name_len + 4 + 8 * (uint64_t)w->t[i].n_dims + 4 + 8;
    for (int64_t i = 0; i < w->n_t; i++) {
        w->t[i].offset = off;
        uint64_t end;
        if (st_add_overflow_u64(off, w->t[i].nbytes, &end) || end > INT64_MAX - a)
            return st_seterr(w->ctx, ST_E_INVAL, "gguf writer: tensor data up to '%.64s' overflows the file size",
                             w->t[i].name);
        off = align_up(end, a);
    }
    /* a file without tensors ends with its header, as llama.cpp's vocab files do */
    *data_off = w->n_t ? align_up(hdr, a) : hdr;
    if (st_add_overflow_u64(*data_off, off, total) || *total > INT64_MAX)
        return st_seterr(w->ctx, ST_E_INVAL, "gguf writer: file size overflows");
    return 0;
}

static void emit(st_gguf_writer *w, sink *s, uint64_t data_off) {
    put(s, ST_GGUF_MAGIC, 4);
    put_le32(s, 3);
    put_le64(s, (uint64_t)w->n_t);
    put_le64(s, (uint64_t)w->n_kv);
    for (int64_t i = 0; i < w->n_kv; i++) {
        put_le64(s, w->kv[i].key_len);
        put(s, w->kv[i].key, w->kv[i].key_len);
        put_le32(s, (uint32_t)w->kv[i].type);
        put(s, w->kv[i].val, w->kv[i].val_len);
    }
    uint64_t hdr = ST_GGUF_HEADER_BYTES;
    for (int64_t i = 0; i < w->n_kv; i++) hdr += 8 + w->kv[i].key_len + 4 + w->kv[i].val_len;
    for (int64_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        put_le64(s, t->name_len);
        put(s, t->name, t->name_len);
        put_le32(s, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++) put_le64(s, (uint64_t)t->ne[d]);
        put_le32(s, (uint32_t)t->type);
        put_le64(s, t->offset);
        hdr += 8 + t->name_len + 4 + 8 * (uint64_t)t->n_dims + 4 + 8;
    }
    put_zeros(s, data_off - hdr);
    for (int64_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        if (t->data) put(s, t->data, t->nbytes);
        else put_zeros(s, t->nbytes);
        put_zeros(s, align_up(t->nbytes, w->alignment) - t->nbytes);
    }
}

int st_gguf_writer_write_memory(st_gguf_writer *w, void **out, size_t *size) {
    if (!w || !out || !size) return w ? st_seterr(w->ctx, ST_E_INVAL, "gguf writer: NULL output") : ST_E_INVAL;
    *out = NULL;
    *size = 0;
    uint64_t total, data_off;
    int rc = layout(w, &data_off, &total);
    if (rc) return rc;
    if (total > SIZE_MAX / 2) return nomem(w, "output buffer");
    sink s = {.buf = malloc(total ? (size_t)total : 1), .cap = total};
    if (!s.buf) return nomem(w, "output buffer");
    emit(w, &s, data_off);
    ST_ASSERT(s.len == total);
    *out = s.buf;
    *size = (size_t)total;
    return 0;
}

int st_gguf_writer_write(st_gguf_writer *w, const char *path) {
    if (!w || !path) return w ? st_seterr(w->ctx, ST_E_INVAL, "gguf writer: path is NULL") : ST_E_INVAL;
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 5);
    if (!tmp) return nomem(w, "path");
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    uint64_t total, data_off;
    int rc = layout(w, &data_off, &total);
    if (rc) {
        free(tmp);
        return rc;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        int e = errno;
        if (fd >= 0) close(fd);
        st_seterr(w->ctx, -e, "%s: cannot create: %s", tmp, st_strerror(-e));
        if (fd >= 0) unlink(tmp);
        free(tmp);
        return -e;
    }
    sink s = {.f = f};
    errno = 0;
    emit(w, &s, data_off);
    if (!s.err && fflush(f) != 0) s.err = -errno;
    if (!s.err && fsync(fileno(f)) != 0) s.err = -errno;
    if (fclose(f) != 0 && !s.err) s.err = -errno;
    const char *what = "write";
    if (!s.err && rename(tmp, path) != 0) {
        s.err = -errno;
        what = "rename to final path";
    }
    if (s.err) {
        unlink(tmp);
        st_seterr(w->ctx, s.err, "%s: %s failed: %s", tmp, what, st_strerror(s.err));
    }
    free(tmp);
    return s.err;
}
