/* GGUF reader/writer: round trips of every value type and tensor layout, nested
 * arrays, typed getter mismatches, writer validation, every truncation point,
 * byte flips, open errors, and `strata inspect` (when STRATA_BIN is set). */
#include "strata/gguf.h"
#include "../test.h"
#include "gguf_build.h"

#include <errno.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static st_ctx *new_ctx(void) {
    st_ctx_params p = st_ctx_default_params();
    p.n_threads = 1;
    st_ctx *ctx = NULL;
    if (st_ctx_create(&p, &ctx)) abort();
    return ctx;
}

/* ---- a writer holding every value type and several tensor types ---------------------- */

#define N_ARR 5
static const st_gguf_vtype num_types[] = {ST_GGUF_UINT8, ST_GGUF_INT8,  ST_GGUF_UINT16, ST_GGUF_INT16,
                                          ST_GGUF_UINT32, ST_GGUF_INT32, ST_GGUF_FLOAT32, ST_GGUF_BOOL,
                                          ST_GGUF_UINT64, ST_GGUF_INT64, ST_GGUF_FLOAT64};
#define N_NUM_TYPES ((int)(sizeof num_types / sizeof num_types[0]))
static const char *const strs[] = {"<unk>", "", "h\xc3\xa9llo", "a b", "\xe2\x96\x81the"};

typedef struct tspec {
    const char *name;
    st_type type;
    int n_dims;
    int64_t ne[4];
} tspec;
static const tspec tspecs[] = {
    {"t.f32", ST_TYPE_F32, 2, {3, 2}},       {"t.f16", ST_TYPE_F16, 1, {5}},
    {"t.q8_0", ST_TYPE_Q8_0, 2, {64, 3}},    {"t.q4_K", ST_TYPE_Q4_K, 1, {256}},
    {"t.bf16", ST_TYPE_BF16, 4, {2, 3, 1, 2}}, {"t.zeros", ST_TYPE_F32, 1, {7}},
};
#define N_TSPECS ((int)(sizeof tspecs / sizeof tspecs[0]))
static uint8_t tdata[N_TSPECS][1024];

/* element i of the test array of type t, as little-endian bytes */
static void arr_elem(st_gguf_vtype t, int i, uint8_t *out) {
    uint64_t v = (uint64_t)(i * 37 + (int)t * 1000 + 3);
    if (t == ST_GGUF_BOOL) v = (uint64_t)(i % 2);
    if (t == ST_GGUF_INT8 || t == ST_GGUF_INT16 || t == ST_GGUF_INT32 || t == ST_GGUF_INT64) v = (uint64_t)-(int64_t)v;
    if (t == ST_GGUF_FLOAT32) {
        uint32_t b = st_fp32_to_bits(-1.25f * (float)i);
        v = b;
    }
    if (t == ST_GGUF_FLOAT64) {
        double d = 0.1 * i;
        memcpy(&v, &d, 8);
    }
    memcpy(out, &v, st_gguf_vtype_size(t));
}

static st_gguf_writer *full_writer(st_ctx *ctx, uint32_t alignment) {
    st_gguf_writer *w = NULL;
    if (st_gguf_writer_create(ctx, &w)) abort();
    int rc = 0;
    rc |= st_gguf_writer_set_str(w, "general.architecture", "llama");
    if (alignment != ST_GGUF_DEFAULT_ALIGNMENT) rc |= st_gguf_writer_set_alignment(w, alignment);
    uint8_t u8 = 200, i8 = (uint8_t)-5;
    uint16_t u16 = 60000, i16 = (uint16_t)-30000;
    rc |= st_gguf_writer_set_scalar(w, "s.u8", ST_GGUF_UINT8, &u8);
    rc |= st_gguf_writer_set_scalar(w, "s.i8", ST_GGUF_INT8, &i8);
    rc |= st_gguf_writer_set_scalar(w, "s.u16", ST_GGUF_UINT16, &u16);
    rc |= st_gguf_writer_set_scalar(w, "s.i16", ST_GGUF_INT16, &i16);
    rc |= st_gguf_writer_set_u32(w, "s.u32", 4000000000u);
    rc |= st_gguf_writer_set_i32(w, "s.i32", -2000000000);
    rc |= st_gguf_writer_set_f32(w, "s.f32", 1.5f);
    rc |= st_gguf_writer_set_bool(w, "s.bool", true);
    rc |= st_gguf_writer_set_u64(w, "s.u64", (UINT64_C(1) << 40) + 7);
    rc |= st_gguf_writer_set_i64(w, "s.i64", -(INT64_C(1) << 50));
    rc |= st_gguf_writer_set_f64(w, "s.f64", 3.141592653589793);
    rc |= st_gguf_writer_set_str(w, "s.str", "hello");
    rc |= st_gguf_writer_set_strn(w, "s.strn", "a\0b", 3);
    rc |= st_gguf_writer_set_str(w, "s.empty", "");
    for (int k = 0; k < N_NUM_TYPES; k++) {
        uint8_t buf[N_ARR * 8];
        size_t esz = st_gguf_vtype_size(num_types[k]);
        for (int i = 0; i < N_ARR; i++) arr_elem(num_types[k], i, buf + i * esz);
        char key[64];
        snprintf(key, sizeof key, "arr.%s", st_gguf_vtype_name(num_types[k]));
        rc |= st_gguf_writer_set_arr(w, key, num_types[k], buf, N_ARR);
    }
    uint32_t longarr[100];
    for (int i = 0; i < 100; i++) longarr[i] = (uint32_t)i;
    rc |= st_gguf_writer_set_arr(w, "arr.long", ST_GGUF_UINT32, longarr, 100);
    rc |= st_gguf_writer_set_arr(w, "arr.empty", ST_GGUF_FLOAT32, NULL, 0);
    rc |= st_gguf_writer_set_arr_str(w, "arr.str", strs, 5);
    rc |= st_gguf_writer_set_arr_str(w, "arr.str_empty", NULL, 0);
    for (int k = 0; k < N_TSPECS; k++) {
        for (int i = 0; i < 1024; i++) tdata[k][i] = (uint8_t)(i * 7 + k * 13 + 1);
        const tspec *t = &tspecs[k];
        rc |= st_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne,
                                        strcmp(t->name, "t.zeros") ? tdata[k] : NULL);
    }
    if (rc) {
        fprintf(stderr, "full_writer: %s\n", st_ctx_error(ctx));
        abort();
    }
    return w;
}

static void check_full(st_gguf *g, uint32_t alignment) {
    CHECK_INT(st_gguf_version(g), 3);
    CHECK_INT(st_gguf_alignment(g), alignment);
    CHECK_INT(st_gguf_data_offset(g) % alignment, 0);
    CHECK_STR(st_gguf_key_name(g, 0), "general.architecture");
    CHECK_INT(st_gguf_n_kv(g), 15 + (alignment != 32) + N_NUM_TYPES + 4);
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    int64_t i64;
    float f32;
    double f64;
    bool b;
    const char *s;
    size_t len;
    CHECK_OK(st_gguf_get_u32(g, "s.u8", &u32));
    CHECK_INT(u32, 200);
    CHECK_OK(st_gguf_get_i32(g, "s.i8", &i32));
    CHECK_INT(i32, -5);
    CHECK_OK(st_gguf_get_u32(g, "s.u16", &u32));
    CHECK_INT(u32, 60000);
    CHECK_OK(st_gguf_get_i32(g, "s.i16", &i32));
    CHECK_INT(i32, -30000);
    CHECK_OK(st_gguf_get_u32(g, "s.u32", &u32));
    CHECK_INT(u32, 4000000000u);
    CHECK_OK(st_gguf_get_i32(g, "s.i32", &i32));
    CHECK_INT(i32, -2000000000);
    CHECK_OK(st_gguf_get_f32(g, "s.f32", &f32));
    CHECK(f32 == 1.5f);
    CHECK_OK(st_gguf_get_bool(g, "s.bool", &b));
    CHECK(b);
    CHECK_OK(st_gguf_get_u64(g, "s.u64", &u64));
    CHECK(u64 == (UINT64_C(1) << 40) + 7);
    CHECK_OK(st_gguf_get_i64(g, "s.i64", &i64));
    CHECK(i64 == -(INT64_C(1) << 50));
    CHECK_OK(st_gguf_get_f64(g, "s.f64", &f64));
    CHECK(f64 == 3.141592653589793);
    CHECK_OK(st_gguf_get_str(g, "s.str", &s, &len));
    CHECK(len == 5 && memcmp(s, "hello", 5) == 0);
    CHECK_OK(st_gguf_get_str(g, "s.strn", &s, &len));
    CHECK(len == 3 && memcmp(s, "a\0b", 3) == 0);
    CHECK_OK(st_gguf_get_str(g, "s.empty", &s, &len));
    CHECK_INT(len, 0);
    char *dup = NULL;
    CHECK_OK(st_gguf_get_str_dup(g, "general.architecture", &dup));
    CHECK_STR(dup, "llama");
    free(dup);
    for (int k = 0; k < N_NUM_TYPES; k++) {
        char key[64];
        snprintf(key, sizeof key, "arr.%s", st_gguf_vtype_name(num_types[k]));
        st_gguf_vtype et;
        uint64_t n;
        const void *data;
        CHECK_OK(st_gguf_get_arr(g, key, &et, &n, &data));
        CHECK_INT(et, num_types[k]);
        CHECK_INT(n, N_ARR);
        size_t esz = st_gguf_vtype_size(num_types[k]);
        for (int i = 0; i < N_ARR && data; i++) {
            uint8_t want[8];
            arr_elem(num_types[k], i, want);
            CHECK(memcmp((const uint8_t *)data + i * esz, want, esz) == 0);
        }
    }
    st_gguf_vtype et;
    uint64_t n;
    const void *data;
    CHECK_OK(st_gguf_get_arr(g, "arr.empty", &et, &n, &data));
    CHECK(et == ST_GGUF_FLOAT32 && n == 0);
    CHECK_OK(st_gguf_get_arr(g, "arr.str", &et, &n, &data));
    CHECK(et == ST_GGUF_STRING && n == 5);
    for (uint64_t i = 0; i < 5; i++) {
        CHECK_OK(st_gguf_get_arr_str(g, "arr.str", i, &s, &len));
        CHECK(len == strlen(strs[i]) && memcmp(s, strs[i], len) == 0);
    }
    CHECK_OK(st_gguf_get_arr(g, "arr.str_empty", &et, &n, &data));
    CHECK(et == ST_GGUF_STRING && n == 0);
    CHECK_INT(st_gguf_n_tensors(g), N_TSPECS);
    for (int k = 0; k < N_TSPECS; k++) {
        const tspec *ts = &tspecs[k];
        const st_gguf_tensor *t = st_gguf_tensor_at(g, k);
        REQUIRE(t && st_gguf_find_tensor(g, ts->name) == t);
        CHECK_STR(t->name, ts->name);
        CHECK_INT(t->type, ts->type);
        CHECK_INT(t->n_dims, ts->n_dims);
        int64_t ne = 1;
        for (int d = 0; d < 4; d++) {
            CHECK_INT(t->ne[d], d < ts->n_dims ? ts->ne[d] : 1);
            ne *= t->ne[d];
        }
        CHECK_INT(t->nbytes, (uint64_t)ne / st_type_block_size(ts->type) * st_type_size(ts->type));
        CHECK_INT(t->offset % alignment, 0);
        if (strcmp(ts->name, "t.zeros") == 0) {
            for (uint64_t i = 0; i < t->nbytes; i++) CHECK_INT(((const uint8_t *)t->data)[i], 0);
        } else {
            CHECK(memcmp(t->data, tdata[k], t->nbytes) == 0);
        }
    }
    CHECK(st_gguf_find_tensor(g, "t.missing") == NULL);
    CHECK_INT(st_gguf_find_key(g, "s.missing"), -1);
}

TEST(test_roundtrip_memory) {
    st_ctx *ctx = new_ctx();
    const uint32_t aligns[] = {32, 8, 64, 4096};
    for (int a = 0; a < 4; a++) {
        st_gguf_writer *w = full_writer(ctx, aligns[a]);
        void *buf = NULL;
        size_t size = 0;
        CHECK_OK(st_gguf_writer_write_memory(w, &buf, &size));
        st_gguf *g = NULL;
        CHECK_OK(st_gguf_open_memory(ctx, buf, size, "mem.gguf", &g));
        if (g) check_full(g, aligns[a]);
        st_gguf_close(g);
        free(buf);
        st_gguf_writer_destroy(w);
    }
    st_ctx_destroy(ctx);
}

TEST(test_roundtrip_file) {
    st_ctx *ctx = new_ctx();
    char dir[] = "/tmp/strata-gguf-test-XXXXXX";
    REQUIRE(mkdtemp(dir));
    char path[256], tmp[300];
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    st_gguf_writer *w = full_writer(ctx, 64);
    CHECK_OK(st_gguf_writer_write(w, path));
    CHECK_OK(st_gguf_writer_write(w, path)); /* replaces the file */
    CHECK(access(tmp, F_OK) != 0);
    st_gguf *g = NULL;
    CHECK_OK(st_gguf_open(ctx, path, &g));
    if (g) {
        check_full(g, 64);
        CHECK_STR(st_gguf_path(g), path);
        struct stat st;
        CHECK(stat(path, &st) == 0 && (uint64_t)st.st_size == st_gguf_file_size(g));
    }
    st_gguf_close(g);
    char bad[300];
    snprintf(bad, sizeof bad, "%s/no/such/dir/x.gguf", dir);
    CHECK_INT(st_gguf_writer_write(w, bad), -ENOENT);
    CHECK(strstr(st_ctx_error(ctx), "no/such/dir/x.gguf.tmp") != NULL);
    st_gguf_writer_destroy(w);
    unlink(path);
    rmdir(dir);
    st_ctx_destroy(ctx);
}

/* ST_GGUF_OPEN_ANON places its copy so that most tensor bytes start on a 64-byte line: with
 * the default 32-byte alignment and a small tensor first, the big one starts 32 past a line
 * in the file's data section in one of two metadata sizes; either way it starts on a line in
 * memory, every tensor keeps the file's alignment, and every byte reads back. */
TEST(test_anon_copy_aligns_tensors) {
    st_ctx *ctx = new_ctx();
    char dir[] = "/tmp/strata-gguf-test-XXXXXX";
    REQUIRE(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/a.gguf", dir);
    static float small[8], big[4096];
    for (int i = 0; i < 4096; i++) big[i] = (float)i * 0.5f;
    for (int i = 0; i < 8; i++) small[i] = -(float)i;
    int seen_at32 = 0;
    for (int pad = 0; pad < 2; pad++) { /* two metadata sizes: the data section 32 bytes apart */
        st_gguf_writer *w = NULL;
        CHECK_OK(st_gguf_writer_create(ctx, &w));
        CHECK_OK(st_gguf_writer_set_str(w, "general.architecture", "llama"));
        CHECK_OK(st_gguf_writer_set_str(w, "pad", pad ? "0123456789abcdef0123456789abcdef" : ""));
        const int64_t ne_s[1] = {8}, ne_b[1] = {4096};
        CHECK_OK(st_gguf_writer_add_tensor(w, "small", ST_TYPE_F32, 1, ne_s, small));
        CHECK_OK(st_gguf_writer_add_tensor(w, "big", ST_TYPE_F32, 1, ne_b, big));
        CHECK_OK(st_gguf_writer_write(w, path));
        st_gguf_writer_destroy(w);
        st_gguf *g = NULL;
        CHECK_OK(st_gguf_open(ctx, path, &g)); /* a file mapping: page-aligned, as in the file */
        REQUIRE(g);
        const st_gguf_tensor *b = st_gguf_find_tensor(g, "big");
        seen_at32 |= ((uintptr_t)b->data & 63) == 32;
        st_gguf_close(g);
        CHECK_OK(st_gguf_open_flags(ctx, path, ST_GGUF_OPEN_ANON, &g));
        REQUIRE(g);
        const st_gguf_tensor *sm = st_gguf_find_tensor(g, "small");
        b = st_gguf_find_tensor(g, "big");
        CHECK_INT((int)((uintptr_t)b->data & 63), 0);
        CHECK_INT((int)((uintptr_t)sm->data & 31), 0);
        CHECK(memcmp(b->data, big, sizeof big) == 0 && memcmp(sm->data, small, sizeof small) == 0);
        st_gguf_close(g);
    }
    CHECK(seen_at32); /* one of the two files really put it 32 past a line */
    unlink(path);
    rmdir(dir);
    st_ctx_destroy(ctx);
}

/* read -> copy every key and tensor into a new writer -> write: the same bytes */
TEST(test_copy_is_identity) {
    st_ctx *ctx = new_ctx();
    st_gguf_writer *w = full_writer(ctx, 64);
    void *buf = NULL, *buf2 = NULL;
    size_t size = 0, size2 = 0;
    CHECK_OK(st_gguf_writer_write_memory(w, &buf, &size));
    st_gguf *g = NULL;
    CHECK_OK(st_gguf_open_memory(ctx, buf, size, "a.gguf", &g));
    REQUIRE(g);
    st_gguf_writer *w2 = NULL;
    CHECK_OK(st_gguf_writer_create(ctx, &w2));
    for (int64_t i = 0; i < st_gguf_n_kv(g); i++) CHECK_OK(st_gguf_writer_copy_kv(w2, g, i));
    for (int64_t i = 0; i < st_gguf_n_tensors(g); i++) {
        const st_gguf_tensor *t = st_gguf_tensor_at(g, i);
        CHECK_OK(st_gguf_writer_add_tensor(w2, t->name, t->type, t->n_dims, t->ne, t->data));
    }
    CHECK_OK(st_gguf_writer_write_memory(w2, &buf2, &size2));
    CHECK_INT(size2, size);
    CHECK(size == size2 && memcmp(buf, buf2, size) == 0);
    st_gguf_close(g);
    st_gguf_writer_destroy(w);
    st_gguf_writer_destroy(w2);
    free(buf);
    free(buf2);
    st_ctx_destroy(ctx);
}

/* nest = [[u8: 1,2,3], [string: "x","yz"], [array: [i32: -1]], [u32:]]; deep = 4 levels */
static void build_nested(gb *b) {
    gb_header(b, 2, 0, 2);
    gb_str(b, "nest");
    gb_u32(b, ST_GGUF_ARRAY);
    gb_u32(b, ST_GGUF_ARRAY);
    gb_u64(b, 4);
    gb_u32(b, ST_GGUF_UINT8);
    gb_u64(b, 3);
    gb_bytes(b, "\1\2\3", 3);
    gb_u32(b, ST_GGUF_STRING);
    gb_u64(b, 2);
    gb_str(b, "x");
    gb_str(b, "yz");
    gb_u32(b, ST_GGUF_ARRAY);
    gb_u64(b, 1);
    gb_u32(b, ST_GGUF_INT32);
    gb_u64(b, 1);
    gb_u32(b, UINT32_MAX);
    gb_u32(b, ST_GGUF_UINT32);
    gb_u64(b, 0);
    gb_str(b, "deep");
    gb_u32(b, ST_GGUF_ARRAY);
    for (int d = 0; d < ST_GGUF_MAX_ARRAY_DEPTH - 1; d++) {
        gb_u32(b, ST_GGUF_ARRAY);
        gb_u64(b, 1);
    }
    gb_u32(b, ST_GGUF_UINT16);
    gb_u64(b, 1);
    gb_u8(b, 7);
    gb_u8(b, 0);
}

static void check_nested(st_gguf *g) {
    st_gguf_vtype et;
    uint64_t n;
    const void *data;
    CHECK_OK(st_gguf_get_arr(g, "nest", &et, &n, &data));
    CHECK(et == ST_GGUF_ARRAY && n == 4);
    CHECK_OK(st_gguf_get_arr_arr(g, "nest", 0, &et, &n, &data));
    CHECK(et == ST_GGUF_UINT8 && n == 3 && data && memcmp(data, "\1\2\3", 3) == 0);
    CHECK_OK(st_gguf_get_arr_arr(g, "nest", 1, &et, &n, &data));
    CHECK(et == ST_GGUF_STRING && n == 2 && data && memcmp((const char *)data + 8, "x", 1) == 0);
    CHECK_OK(st_gguf_get_arr_arr(g, "nest", 2, &et, &n, &data));
    CHECK(et == ST_GGUF_ARRAY && n == 1);
    CHECK_OK(st_gguf_get_arr_arr(g, "nest", 3, &et, &n, &data));
    CHECK(et == ST_GGUF_UINT32 && n == 0);
    CHECK_INT(st_gguf_get_arr_arr(g, "nest", 4, &et, &n, &data), ST_E_INVAL);
    const char *s;
    size_t len;
    CHECK_INT(st_gguf_get_arr_str(g, "nest", 0, &s, &len), ST_E_TYPE);
    CHECK_OK(st_gguf_get_arr(g, "deep", &et, &n, &data));
    CHECK(et == ST_GGUF_ARRAY && n == 1);
}

TEST(test_nested_arrays) {
    st_ctx *ctx = new_ctx();
    gb b = {0};
    build_nested(&b);
    st_gguf *g = NULL;
    CHECK_OK(st_gguf_open_memory(ctx, b.p, b.len, "nested.gguf", &g));
    REQUIRE(g);
    CHECK_INT(st_gguf_version(g), 2);
    check_nested(g);
    /* copy_kv carries nested arrays through the writer unchanged */
    st_gguf_writer *w = NULL;
    CHECK_OK(st_gguf_writer_create(ctx, &w));
    CHECK_OK(st_gguf_writer_copy_kv(w, g, 0));
    CHECK_OK(st_gguf_writer_copy_kv(w, g, 1));
    CHECK_INT(st_gguf_writer_copy_kv(w, g, 2), ST_E_INVAL);
    void *buf = NULL;
    size_t size = 0;
    CHECK_OK(st_gguf_writer_write_memory(w, &buf, &size));
    st_gguf *g2 = NULL;
    CHECK_OK(st_gguf_open_memory(ctx, buf, size, "nested2.gguf", &g2));
    if (g2) {
        CHECK_INT(st_gguf_version(g2), 3);
        check_nested(g2);
        CHECK_INT(size, b.len); /* v2 -> v3 changes only the version field */
        CHECK(size == b.len && memcmp((uint8_t *)buf + 8, b.p + 8, size - 8) == 0);
    }
    st_gguf_close(g2);
    st_gguf_close(g);
    st_gguf_writer_destroy(w);
    free(buf);
    gb_free(&b);
    st_ctx_destroy(ctx);
}

static int msg_has(st_ctx *ctx, const char *a, const char *b, const char *c) {
    const char *m = st_ctx_error(ctx);
    int ok = strstr(m, a) && strstr(m, b) && strstr(m, c);
    if (!ok) fprintf(stderr, "  message '%s' lacks '%s' / '%s' / '%s'\n", m, a, b, c);
    return ok;
}

TEST(test_getter_mismatches) {
    st_ctx *ctx = new_ctx();
    st_gguf_writer *w = full_writer(ctx, 32);
    int32_t neg = -1;
    uint8_t b0 = 0;
    CHECK_OK(st_gguf_writer_set_scalar(w, "s.neg", ST_GGUF_INT32, &neg));
    CHECK_OK(st_gguf_writer_set_u64(w, "s.big", UINT64_C(1) << 63));
    CHECK_OK(st_gguf_writer_set_scalar(w, "s.false", ST_GGUF_BOOL, &b0));
    void *buf = NULL;
    size_t size = 0;
    CHECK_OK(st_gguf_writer_write_memory(w, &buf, &size));
    st_gguf *g = NULL;
    CHECK_OK(st_gguf_open_memory(ctx, buf, size, "types.gguf", &g));
    REQUIRE(g);
    uint32_t u32 = 99;
    int32_t i32 = 99;
    uint64_t u64 = 99;
    int64_t i64 = 99;
    float f32 = 99;
    double f64 = 99;
    bool b = true;
    const char *s = "x";
    size_t len = 9;
    CHECK_INT(st_gguf_get_u32(g, "general.architecture", &u32), ST_E_TYPE);
    CHECK_INT(u32, 0);
    CHECK(msg_has(ctx, "types.gguf", "'general.architecture'", "type string, expected uint32"));
    CHECK_INT(st_gguf_get_u32(g, "s.neg", &u32), ST_E_TYPE);
    CHECK(msg_has(ctx, "'s.neg'", "int32 value -1", "does not fit uint32"));
    CHECK_INT(st_gguf_get_u64(g, "s.neg", &u64), ST_E_TYPE);
    CHECK_OK(st_gguf_get_i64(g, "s.neg", &i64));
    CHECK_INT(i64, -1);
    CHECK_INT(st_gguf_get_i32(g, "s.u32", &i32), ST_E_TYPE);
    CHECK(msg_has(ctx, "'s.u32'", "uint32 value 4000000000", "does not fit int32"));
    CHECK_INT(st_gguf_get_i64(g, "s.big", &i64), ST_E_TYPE);
    CHECK_INT(st_gguf_get_u32(g, "s.big", &u32), ST_E_TYPE);
    CHECK_OK(st_gguf_get_u64(g, "s.big", &u64));
    CHECK(u64 == UINT64_C(1) << 63);
    CHECK_OK(st_gguf_get_u64(g, "s.u8", &u64)); /* widening is fine */
    CHECK_INT(u64, 200);
    CHECK_OK(st_gguf_get_i32(g, "s.u16", &i32));
    CHECK_INT(i32, 60000);
    CHECK_INT(st_gguf_get_u32(g, "s.i16", &u32), ST_E_TYPE);
    CHECK_INT(st_gguf_get_u32(g, "s.f32", &u32), ST_E_TYPE);
    CHECK_INT(st_gguf_get_u32(g, "s.bool", &u32), ST_E_TYPE);
    CHECK(msg_has(ctx, "'s.bool'", "type bool", "expected uint32"));
    CHECK_INT(st_gguf_get_f32(g, "s.f64", &f32), ST_E_TYPE);
    CHECK(msg_has(ctx, "'s.f64'", "type float64", "expected float32"));
    CHECK(f32 == 0);
    CHECK_INT(st_gguf_get_f32(g, "s.u32", &f32), ST_E_TYPE);
    CHECK_OK(st_gguf_get_f64(g, "s.f32", &f64));
    CHECK(f64 == 1.5);
    CHECK_INT(st_gguf_get_f64(g, "s.i32", &f64), ST_E_TYPE);
    CHECK_INT(st_gguf_get_bool(g, "s.u8", &b), ST_E_TYPE);
    CHECK(!b);
    CHECK_OK(st_gguf_get_bool(g, "s.false", &b));
    CHECK(!b);
    CHECK_INT(st_gguf_get_str(g, "arr.str", &s, &len), ST_E_TYPE);
    CHECK(s == NULL && len == 0);
    CHECK(msg_has(ctx, "'arr.str'", "array of string", "expected string"));
    char *dup = (char *)"x";
    CHECK_INT(st_gguf_get_str_dup(g, "s.u32", &dup), ST_E_TYPE);
    CHECK(dup == NULL);
    st_gguf_vtype et;
    uint64_t n = 5;
    const void *data = "x";
    CHECK_INT(st_gguf_get_arr(g, "s.u32", &et, &n, &data), ST_E_TYPE);
    CHECK(n == 0 && data == NULL);
    CHECK(msg_has(ctx, "'s.u32'", "type uint32", "expected array"));
    CHECK_INT(st_gguf_get_arr_str(g, "arr.float32", 0, &s, &len), ST_E_TYPE);
    CHECK(msg_has(ctx, "'arr.float32'", "array of float32", "expected array of string"));
    CHECK_INT(st_gguf_get_arr_str(g, "arr.str", 5, &s, &len), ST_E_INVAL);
    CHECK(msg_has(ctx, "'arr.str'", "index 5", "out of range"));
    CHECK_INT(st_gguf_get_arr_arr(g, "arr.str", 0, &et, &n, &data), ST_E_TYPE);
    CHECK_INT(st_gguf_get_u32(g, "no.such.key", &u32), ST_E_NOT_FOUND);
    CHECK(msg_has(ctx, "types.gguf", "'no.such.key'", "not found"));
    CHECK_INT(st_gguf_key_type(g, 0), ST_GGUF_STRING);
    CHECK(st_gguf_key_name(g, -1) == NULL && st_gguf_key_name(g, st_gguf_n_kv(g)) == NULL);
    CHECK(st_gguf_tensor_at(g, st_gguf_n_tensors(g)) == NULL);
    CHECK_STR(st_gguf_vtype_name(ST_GGUF_FLOAT64), "float64");
    CHECK_STR(st_gguf_vtype_name((st_gguf_vtype)99), "?");
    st_gguf_close(g);
    st_gguf_writer_destroy(w);
    free(buf);
    st_ctx_destroy(ctx);
}

TEST(test_writer_rejects) {
    st_ctx *ctx = new_ctx();
    st_gguf_writer *w = NULL;
    CHECK_OK(st_gguf_writer_create(ctx, &w));
    REQUIRE(w);
    int64_t ne[4] = {32, 2, 1, 1};
    float data[64] = {0};
    CHECK_INT(st_gguf_writer_set_alignment(w, 0), ST_E_INVAL);
    CHECK_INT(st_gguf_writer_set_alignment(w, 48), ST_E_INVAL);
    CHECK_INT(st_gguf_writer_set_alignment(w, 4), ST_E_INVAL); /* the spec: a multiple of 8 */
    CHECK_INT(st_gguf_writer_set_alignment(w, 1u << 24), ST_E_INVAL);
    CHECK_INT(st_gguf_writer_set_u64(w, "general.alignment", 64), ST_E_INVAL);
    CHECK_INT(st_gguf_writer_set_u32(w, "", 1), ST_E_INVAL);
    CHECK_INT(st_gguf_writer_set_u32(w, NULL, 1), ST_E_INVAL);
    uint8_t two = 2;
    CHECK_INT(st_gguf_writer_set_scalar(w, "b", ST_GGUF_BOOL, &two), ST_E_INVAL);
    CHECK_INT(st_gguf_writer_set_arr(w, "b", ST_GGUF_BOOL, (uint8_t[]){0, 1, 2}, 3), ST_E_INVAL);
    CHECK_INT(st_gguf_writer_set_scalar(w, "s", ST_GGUF_STRING, "x"), ST_E_INVAL);
    CHECK_INT(st_gguf_writer_set_arr(w, "a", ST_GGUF_STRING, data, 1), ST_E_INVAL);
    CHECK_INT(st_gguf_writer_set_arr(w, "a", ST_GGUF_UINT8, data, (uint64_t)ST_GGUF_MAX_ARRAY_LEN + 1), ST_E_INVAL);
    CHECK_INT(st_gguf_writer_set_arr_str(w, "a", (const char *[]){"x", NULL}, 2), ST_E_INVAL);
    CHECK_INT(st_gguf_writer_add_tensor(w, "t", ST_TYPE_F32, 0, ne, data), ST_E_INVAL);
    CHECK_INT(st_gguf_writer_add_tensor(w, "t", ST_TYPE_F32, 5, ne, data), ST_E_INVAL);
    CHECK_INT(st_gguf_writer_add_tensor(w, "t", (st_type)4, 2, ne, data), ST_E_INVAL);
    CHECK_INT(st_gguf_writer_add_tensor(w, "t", ST_TYPE_Q8_0, 1, (int64_t[]){33}, data), ST_E_INVAL);
    CHECK(msg_has(ctx, "'t'", "33", "block size 32"));
    CHECK_INT(st_gguf_writer_add_tensor(w, "t", ST_TYPE_F32, 2, (int64_t[]){4, 0}, data), ST_E_INVAL);
    CHECK_INT(st_gguf_writer_add_tensor(w, "t", ST_TYPE_F32, 2, (int64_t[]){INT64_C(1) << 40, INT64_C(1) << 40},
                                        data), ST_E_INVAL);
    CHECK_INT(st_gguf_writer_add_tensor(w, "", ST_TYPE_F32, 1, ne, data), ST_E_INVAL);
    CHECK_OK(st_gguf_writer_add_tensor(w, "t", ST_TYPE_F32, 2, ne, data));
    CHECK_INT(st_gguf_writer_add_tensor(w, "t", ST_TYPE_F32, 2, ne, data), ST_E_INVAL);
    CHECK(msg_has(ctx, "duplicate", "'t'", "tensor"));
    /* a key set twice keeps its first position and its last value */
    CHECK_OK(st_gguf_writer_set_u32(w, "a", 1));
    CHECK_OK(st_gguf_writer_set_str(w, "b", "x"));
    CHECK_OK(st_gguf_writer_set_i32(w, "a", -2));
    CHECK_OK(st_gguf_writer_set_alignment(w, 128));
    CHECK_OK(st_gguf_writer_set_alignment(w, 256));
    void *buf = NULL;
    size_t size = 0;
    CHECK_OK(st_gguf_writer_write_memory(w, &buf, &size));
    st_gguf *g = NULL;
    CHECK_OK(st_gguf_open_memory(ctx, buf, size, "w.gguf", &g));
    if (g) {
        CHECK_INT(st_gguf_n_kv(g), 3);
        CHECK_STR(st_gguf_key_name(g, 0), "a");
        int32_t v;
        CHECK_OK(st_gguf_get_i32(g, "a", &v));
        CHECK_INT(v, -2);
        CHECK_INT(st_gguf_key_type(g, 0), ST_GGUF_INT32);
        CHECK_INT(st_gguf_alignment(g), 256);
        CHECK_INT(st_gguf_data_offset(g), 256);
        CHECK_INT(size, 256 + 256); /* 256 bytes of f32 data, padded to 256 */
    }
    st_gguf_close(g);
    free(buf);
    st_gguf_writer_destroy(w);
    /* a tensor whose data would push the file past 2^63 bytes is refused at write */
    CHECK_OK(st_gguf_writer_create(ctx, &w));
    CHECK_OK(st_gguf_writer_add_tensor(w, "huge", ST_TYPE_F32, 1, (int64_t[]){INT64_C(1) << 61}, NULL));
    buf = NULL;
    CHECK_INT(st_gguf_writer_write_memory(w, &buf, &size), ST_E_INVAL);
    CHECK(buf == NULL && strstr(st_ctx_error(ctx), "overflows"));
    CHECK_INT(st_gguf_writer_write(w, "/tmp/strata-gguf-never-written.gguf"), ST_E_INVAL);
    CHECK(access("/tmp/strata-gguf-never-written.gguf.tmp", F_OK) != 0);
    st_gguf_writer_destroy(w);
    st_gguf_writer_destroy(NULL);
    st_gguf_close(NULL);
    st_ctx_destroy(ctx);
}

/* Every prefix of a valid file that cuts into its header or tensor data is rejected
 * (ST_E_FORMAT, "past end of file"); the prefixes that keep all data open fine. */
TEST(test_every_truncation) {
    st_ctx *ctx = new_ctx();
    st_gguf_writer *w = full_writer(ctx, 32);
    void *buf = NULL;
    size_t size = 0;
    CHECK_OK(st_gguf_writer_write_memory(w, &buf, &size));
    st_gguf *g = NULL;
    CHECK_OK(st_gguf_open_memory(ctx, buf, size, "full.gguf", &g));
    REQUIRE(g);
    uint64_t end = 0;
    for (int64_t i = 0; i < st_gguf_n_tensors(g); i++) {
        const st_gguf_tensor *t = st_gguf_tensor_at(g, i);
        uint64_t e = st_gguf_data_offset(g) + t->offset + t->nbytes;
        if (e > end) end = e;
    }
    st_gguf_close(g);
    int bad = 0;
    for (size_t n = 0; n <= size; n++) {
        /* a fresh copy of exactly n bytes, so ASan sees any read past the prefix */
        uint8_t *p = malloc(n ? n : 1);
        memcpy(p, buf, n);
        g = NULL;
        int rc = st_gguf_open_memory(ctx, p, n, "cut.gguf", &g);
        int ok = n >= end ? (rc == 0 && g) : (rc == ST_E_FORMAT && !g && strstr(st_ctx_error(ctx), "past end of file"));
        if (!ok && bad++ < 5)
            fprintf(stderr, "  prefix %zu of %zu: rc %s: %s\n", n, size, st_errname(rc), st_ctx_error(ctx));
        st_gguf_close(g);
        free(p);
    }
    CHECK_INT(bad, 0);
    free(buf);
    st_gguf_writer_destroy(w);
    st_ctx_destroy(ctx);
}

/* Flipping any header byte never crashes: the file opens (and every getter works) or
 * is rejected with a message naming it. */
TEST(test_byte_flips) {
    st_ctx *ctx = new_ctx();
    st_gguf_writer *w = full_writer(ctx, 32);
    void *buf = NULL;
    size_t size = 0;
    CHECK_OK(st_gguf_writer_write_memory(w, &buf, &size));
    uint8_t *p = malloc(size);
    int opened = 0, rejected = 0, bad = 0;
    const uint8_t flips[] = {0x01, 0x80, 0xff};
    size_t hdr_end = 1200 < size ? 1200 : size;
    for (size_t i = 0; i < hdr_end; i++) {
        for (int f = 0; f < 3; f++) {
            memcpy(p, buf, size);
            p[i] ^= flips[f];
            st_gguf *g = NULL;
            int rc = st_gguf_open_memory(ctx, p, size, "flip.gguf", &g);
            if (rc == 0) {
                opened++;
                for (int64_t k = 0; k < st_gguf_n_kv(g); k++) {
                    const char *key = st_gguf_key_name(g, k);
                    uint64_t u;
                    double d;
                    const char *s;
                    size_t len;
                    st_gguf_vtype et;
                    uint64_t n;
                    const void *data;
                    st_gguf_get_u64(g, key, &u);
                    st_gguf_get_f64(g, key, &d);
                    st_gguf_get_str(g, key, &s, &len);
                    if (st_gguf_get_arr(g, key, &et, &n, &data) == 0 && et == ST_GGUF_STRING)
                        for (uint64_t e = 0; e < n; e++) st_gguf_get_arr_str(g, key, e, &s, &len);
                }
                st_gguf_close(g);
            } else {
                rejected++;
                if (g || strncmp(st_ctx_error(ctx), "flip.gguf: ", 11) != 0) bad++;
            }
        }
    }
    fprintf(stderr, "  %d flipped files opened, %d rejected\n", opened, rejected);
    CHECK_INT(bad, 0);
    CHECK(rejected > 0 && opened > 0);
    free(p);
    free(buf);
    st_gguf_writer_destroy(w);
    st_ctx_destroy(ctx);
}

TEST(test_open_errors) {
    st_ctx *ctx = new_ctx();
    st_gguf *g = (st_gguf *)ctx;
    CHECK_INT(st_gguf_open(ctx, "/nonexistent/strata/x.gguf", &g), -ENOENT);
    CHECK(g == NULL);
    CHECK(strstr(st_ctx_error(ctx), "/nonexistent/strata/x.gguf") != NULL);
    CHECK_INT(st_gguf_open(ctx, "/tmp", &g), -EISDIR);
    CHECK_INT(st_gguf_open(ctx, NULL, &g), ST_E_INVAL);
    CHECK_INT(st_gguf_open(ctx, "/tmp", NULL), ST_E_INVAL);
    char path[] = "/tmp/strata-gguf-empty-XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    close(fd);
    CHECK_INT(st_gguf_open(ctx, path, &g), ST_E_FORMAT);
    CHECK(strstr(st_ctx_error(ctx), "magic") != NULL);
    CHECK_INT(st_gguf_open(NULL, path, &g), ST_E_FORMAT); /* no ctx: message dropped */
    unlink(path);
    st_ctx_destroy(ctx);
}

/* Runs `STRATA_BIN inspect ARGS`; returns the exit status, output in out/err files. */
static int run_inspect(const char *bin, const char *file, const char *out, const char *err) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' inspect '%s' >'%s' 2>'%s'", bin, file, out, err);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(test_cli_inspect) {
    const char *bin = getenv("STRATA_BIN");
    if (!bin || access(bin, X_OK) != 0) {
        test_skip("STRATA_BIN not set or not executable: `strata inspect` not tested");
        return;
    }
    st_ctx *ctx = new_ctx();
    char dir[] = "/tmp/strata-gguf-cli-XXXXXX";
    REQUIRE(mkdtemp(dir));
    char path[256], out[256], err[256], badp[256];
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    snprintf(err, sizeof err, "%s/err", dir);
    snprintf(badp, sizeof badp, "%s/bad.gguf", dir);
    st_gguf_writer *w = full_writer(ctx, 32);
    CHECK_OK(st_gguf_writer_write(w, path));
    CHECK_INT(run_inspect(bin, path, out, err), 0);
    char *o = test_slurp(out, NULL);
    REQUIRE(o);
    CHECK(strstr(o, "GGUF v3") != NULL);
    CHECK(strstr(o, "arr.long") && strstr(o, "array[uint32; 100] = [0, 1, 2, 3, 4, 5, 6, 7, ... (100 total)]"));
    CHECK(strstr(o, "s.i64") && strstr(o, "int64 = -1125899906842624"));
    CHECK(strstr(o, "s.f64") && strstr(o, "float64 = 3.141592653589793"));
    CHECK(strstr(o, "s.strn") && strstr(o, "string = \"a\\x00b\""));
    CHECK(strstr(o, "t.q4_K") && strstr(o, "q4_K") && strstr(o, "[256]"));
    CHECK(strstr(o, "t.bf16") && strstr(o, "[2, 3, 1, 2]"));
    CHECK(strstr(o, "architecture       llama") != NULL);
    CHECK(strstr(o, "bits per weight") != NULL);
    free(o);
    FILE *f = fopen(badp, "wb");
    REQUIRE(f);
    fwrite("GGUF\1\0\0\0", 1, 8, f);
    fclose(f);
    CHECK_INT(run_inspect(bin, badp, out, err), 2);
    char *e = test_slurp(err, NULL);
    REQUIRE(e);
    CHECK(strstr(e, "bad.gguf") && strstr(e, "version"));
    CHECK(strchr(e, '\n') == e + strlen(e) - 1); /* one line */
    free(e);
    CHECK_INT(run_inspect(bin, "/nonexistent.gguf", out, err), 2);
    unlink(path);
    unlink(out);
    unlink(err);
    unlink(badp);
    rmdir(dir);
    st_gguf_writer_destroy(w);
    st_ctx_destroy(ctx);
}

TEST_MAIN(test_roundtrip_memory, test_roundtrip_file, test_anon_copy_aligns_tensors, test_copy_is_identity, test_nested_arrays,
          test_getter_mismatches, test_writer_rejects, test_every_truncation, test_byte_flips, test_open_errors,
          test_cli_inspect)
