/* libFuzzer target for the GGUF reader (and, round trip, the writer).
 *
 * Any input must either be rejected with a format error whose message names the
 * file, or open into an st_gguf whose every key, array element and tensor byte can
 * be read through the getters without leaving the buffer (ASan checks that). An
 * accepted file is then copied key by key and tensor by tensor through the writer;
 * the copy must open and read back equal, and writing the copy again must give the
 * same bytes (the writer is a fixed point after one pass).
 *
 *   build: make fuzz   (or CC=clang cmake -DSTRATA_FUZZ=ON ...; target gguf_fuzz)
 *   run:   build-fuzz/fuzz/gguf_fuzz CORPUS_DIR  (seed: test_gguf_corpus --write DIR) */
#include "strata/gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_CHECK(c)                                                                   \
    do {                                                                                \
        if (!(c)) {                                                                     \
            fprintf(stderr, "gguf_fuzz: check failed: %s (line %d)\n", #c, __LINE__);   \
            abort();                                                                    \
        }                                                                               \
    } while (0)

static volatile uint8_t sink_;

static void touch(const void *p, size_t n) {
    const uint8_t *b = p;
    uint8_t acc = 0;
    for (size_t i = 0; i < n; i++) acc ^= b[i];
    sink_ ^= acc;
}

/* Reads every key through every getter; the result must not depend on the getter order. */
static void walk_keys(st_gguf *g) {
    for (int64_t i = 0; i < st_gguf_n_kv(g); i++) {
        const char *key = st_gguf_key_name(g, i);
        FUZZ_CHECK(key && st_gguf_find_key(g, key) == i);
        st_gguf_vtype t = st_gguf_key_type(g, i);
        uint32_t u32;
        int32_t i32;
        uint64_t u64;
        int64_t i64;
        float f32;
        double f64;
        bool b;
        const char *s;
        size_t len;
        char *dup = NULL;
        int is_int = t == ST_GGUF_UINT8 || t == ST_GGUF_INT8 || t == ST_GGUF_UINT16 || t == ST_GGUF_INT16 ||
                     t == ST_GGUF_UINT32 || t == ST_GGUF_INT32 || t == ST_GGUF_UINT64 || t == ST_GGUF_INT64;
        int rc_u64 = st_gguf_get_u64(g, key, &u64), rc_i64 = st_gguf_get_i64(g, key, &i64);
        FUZZ_CHECK(!is_int ? (rc_u64 == ST_E_TYPE && rc_i64 == ST_E_TYPE) : (rc_u64 == 0 || rc_i64 == 0));
        st_gguf_get_u32(g, key, &u32);
        st_gguf_get_i32(g, key, &i32);
        FUZZ_CHECK((st_gguf_get_f32(g, key, &f32) == 0) == (t == ST_GGUF_FLOAT32));
        FUZZ_CHECK((st_gguf_get_f64(g, key, &f64) == 0) == (t == ST_GGUF_FLOAT32 || t == ST_GGUF_FLOAT64));
        FUZZ_CHECK((st_gguf_get_bool(g, key, &b) == 0) == (t == ST_GGUF_BOOL));
        if (st_gguf_get_str(g, key, &s, &len) == 0) {
            FUZZ_CHECK(t == ST_GGUF_STRING);
            touch(s, len);
            FUZZ_CHECK(st_gguf_get_str_dup(g, key, &dup) == 0 && memcmp(dup, s, len) == 0 && dup[len] == 0);
            free(dup);
        }
        st_gguf_vtype et;
        uint64_t n;
        const void *data;
        if (st_gguf_get_arr(g, key, &et, &n, &data) != 0) {
            FUZZ_CHECK(t != ST_GGUF_ARRAY);
            continue;
        }
        size_t esz = st_gguf_vtype_size(et);
        if (esz) touch(data, (size_t)n * esz);
        for (uint64_t e = 0; e < n && et == ST_GGUF_STRING; e++) {
            FUZZ_CHECK(st_gguf_get_arr_str(g, key, e, &s, &len) == 0);
            touch(s, len);
        }
        for (uint64_t e = 0; e < n && et == ST_GGUF_ARRAY; e++) {
            st_gguf_vtype it;
            uint64_t in;
            const void *id;
            FUZZ_CHECK(st_gguf_get_arr_arr(g, key, e, &it, &in, &id) == 0);
            if (st_gguf_vtype_size(it)) touch(id, (size_t)in * st_gguf_vtype_size(it));
        }
        FUZZ_CHECK(st_gguf_get_arr_str(g, key, n, &s, &len) != 0);
    }
}

static void walk_tensors(st_gguf *g, const uint8_t *buf, size_t size) {
    for (int64_t i = 0; i < st_gguf_n_tensors(g); i++) {
        const st_gguf_tensor *t = st_gguf_tensor_at(g, i);
        FUZZ_CHECK(t && st_gguf_find_tensor(g, t->name) == t);
        FUZZ_CHECK(t->n_dims >= 1 && t->n_dims <= 4 && t->nbytes > 0);
        FUZZ_CHECK(t->offset % st_gguf_alignment(g) == 0);
        const uint8_t *p = t->data;
        FUZZ_CHECK(p >= buf && t->nbytes <= size && (size_t)(p - buf) <= size - t->nbytes);
        FUZZ_CHECK(st_row_bytes(t->type, t->ne[0]) * (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]) == t->nbytes);
        touch(p, (size_t)t->nbytes);
    }
}

static void *copy_through_writer(st_ctx *ctx, st_gguf *g, size_t *size) {
    st_gguf_writer *w = NULL;
    FUZZ_CHECK(st_gguf_writer_create(ctx, &w) == 0);
    for (int64_t i = 0; i < st_gguf_n_kv(g); i++) FUZZ_CHECK(st_gguf_writer_copy_kv(w, g, i) == 0);
    for (int64_t i = 0; i < st_gguf_n_tensors(g); i++) {
        const st_gguf_tensor *t = st_gguf_tensor_at(g, i);
        FUZZ_CHECK(st_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data) == 0);
    }
    void *out = NULL;
    FUZZ_CHECK(st_gguf_writer_write_memory(w, &out, size) == 0);
    st_gguf_writer_destroy(w);
    return out;
}

static void check_same(st_gguf *a, st_gguf *b) {
    FUZZ_CHECK(st_gguf_n_kv(a) == st_gguf_n_kv(b) && st_gguf_n_tensors(a) == st_gguf_n_tensors(b));
    FUZZ_CHECK(st_gguf_alignment(a) == st_gguf_alignment(b));
    for (int64_t i = 0; i < st_gguf_n_kv(a); i++) {
        const char *key = st_gguf_key_name(a, i);
        FUZZ_CHECK(strcmp(key, st_gguf_key_name(b, i)) == 0 && st_gguf_key_type(a, i) == st_gguf_key_type(b, i));
        uint64_t ua = 0, ub = 0;
        int64_t ia = 0, ib = 0;
        FUZZ_CHECK(st_gguf_get_u64(a, key, &ua) == st_gguf_get_u64(b, key, &ub) && ua == ub);
        FUZZ_CHECK(st_gguf_get_i64(a, key, &ia) == st_gguf_get_i64(b, key, &ib) && ia == ib);
        const char *sa, *sb;
        size_t la, lb;
        if (st_gguf_get_str(a, key, &sa, &la) == 0)
            FUZZ_CHECK(st_gguf_get_str(b, key, &sb, &lb) == 0 && la == lb && memcmp(sa, sb, la) == 0);
        st_gguf_vtype ea, eb;
        uint64_t na, nb;
        const void *da, *db;
        if (st_gguf_get_arr(a, key, &ea, &na, &da) == 0) {
            FUZZ_CHECK(st_gguf_get_arr(b, key, &eb, &nb, &db) == 0 && ea == eb && na == nb);
            size_t esz = st_gguf_vtype_size(ea);
            FUZZ_CHECK(!esz || memcmp(da, db, (size_t)na * esz) == 0);
            for (uint64_t e = 0; e < na && ea == ST_GGUF_STRING; e++) {
                FUZZ_CHECK(st_gguf_get_arr_str(a, key, e, &sa, &la) == 0 && st_gguf_get_arr_str(b, key, e, &sb, &lb) == 0);
                FUZZ_CHECK(la == lb && memcmp(sa, sb, la) == 0);
            }
        }
    }
    for (int64_t i = 0; i < st_gguf_n_tensors(a); i++) {
        const st_gguf_tensor *ta = st_gguf_tensor_at(a, i), *tb = st_gguf_tensor_at(b, i);
        FUZZ_CHECK(strcmp(ta->name, tb->name) == 0 && ta->type == tb->type && ta->n_dims == tb->n_dims);
        FUZZ_CHECK(memcmp(ta->ne, tb->ne, sizeof ta->ne) == 0 && ta->nbytes == tb->nbytes);
        FUZZ_CHECK(memcmp(ta->data, tb->data, (size_t)ta->nbytes) == 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_ctx_params cp = st_ctx_default_params();
    cp.n_threads = 1;
    cp.isa = ST_ISA_SCALAR;
    st_ctx *ctx = NULL;
    FUZZ_CHECK(st_ctx_create(&cp, &ctx) == 0);
    st_gguf *g = NULL;
    int rc = st_gguf_open_memory(ctx, data, size, "fuzz.gguf", &g);
    if (rc) {
        FUZZ_CHECK(g == NULL);
        FUZZ_CHECK(rc == ST_E_FORMAT || rc == ST_E_VERSION || rc == ST_E_LIMIT || rc == ST_E_NOMEM);
        FUZZ_CHECK(strncmp(st_ctx_error(ctx), "fuzz.gguf: ", 11) == 0);
        FUZZ_CHECK(rc == ST_E_NOMEM || strstr(st_ctx_error(ctx), " at byte "));
        st_ctx_destroy(ctx);
        return 0;
    }
    walk_keys(g);
    walk_tensors(g, data, size);
    size_t n1 = 0, n2 = 0;
    void *c1 = copy_through_writer(ctx, g, &n1);
    st_gguf *g1 = NULL;
    FUZZ_CHECK(st_gguf_open_memory(ctx, c1, n1, "copy.gguf", &g1) == 0);
    check_same(g, g1);
    void *c2 = copy_through_writer(ctx, g1, &n2);
    FUZZ_CHECK(n1 == n2 && memcmp(c1, c2, n1) == 0);
    free(c2);
    st_gguf_close(g1);
    free(c1);
    st_gguf_close(g);
    st_ctx_destroy(ctx);
    return 0;
}
