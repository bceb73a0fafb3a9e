/* Byte-level GGUF builder for tests: writes fields one by one, so a test can put any
 * value (valid or not) in any field and know the byte offset of each. Aborts on OOM
 * (test code only). */
#ifndef STRATA_TESTS_GGUF_BUILD_H
#define STRATA_TESTS_GGUF_BUILD_H

#include "strata/gguf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gb {
    uint8_t *p;
    size_t len, cap;
    size_t mark; /* byte offset the test expects an error message to name */
} gb;

static inline void gb_bytes(gb *b, const void *src, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p) abort();
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, src, n);
    b->len += n;
}
static inline void gb_u8(gb *b, uint8_t v) { gb_bytes(b, &v, 1); }
static inline void gb_u32(gb *b, uint32_t v) {
    uint8_t x[4];
    for (int i = 0; i < 4; i++) x[i] = (uint8_t)(v >> (8 * i));
    gb_bytes(b, x, 4);
}
static inline void gb_u64(gb *b, uint64_t v) {
    uint8_t x[8];
    for (int i = 0; i < 8; i++) x[i] = (uint8_t)(v >> (8 * i));
    gb_bytes(b, x, 8);
}
static inline void gb_str(gb *b, const char *s) {
    gb_u64(b, strlen(s));
    gb_bytes(b, s, strlen(s));
}
static inline void gb_zeros(gb *b, size_t n) {
    for (size_t i = 0; i < n; i++) gb_u8(b, 0);
}
static inline void gb_pad(gb *b, size_t align) {
    while (b->len % align) gb_u8(b, 0);
}
static inline void gb_mark(gb *b) { b->mark = b->len; }
static inline void gb_free(gb *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* magic, version, n_tensors, n_kv */
static inline void gb_header(gb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    gb_bytes(b, "GGUF", 4);
    gb_u32(b, version);
    gb_u64(b, n_tensors);
    gb_u64(b, n_kv);
}
static inline void gb_kv_u32(gb *b, const char *key, uint32_t v) {
    gb_str(b, key);
    gb_u32(b, ST_GGUF_UINT32);
    gb_u32(b, v);
}
static inline void gb_kv_str(gb *b, const char *key, const char *v) {
    gb_str(b, key);
    gb_u32(b, ST_GGUF_STRING);
    gb_str(b, v);
}
/* A tensor info: name, n_dims, ne[n_dims], type, offset. */
static inline void gb_tensor(gb *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                             uint64_t offset) {
    gb_str(b, name);
    gb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) gb_u64(b, ne[d]);
    gb_u32(b, type);
    gb_u64(b, offset);
}

#endif
