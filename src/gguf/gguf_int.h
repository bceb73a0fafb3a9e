/* Private layout of an opened GGUF file, shared by the reader (gguf_read.c) and the
 * getters (gguf_meta.c). Everything points into one read-only image of the file
 * (an mmap or a caller's buffer) by file offset; nothing of the file is copied except
 * the NUL-terminated key and tensor names. */
#ifndef STRATA_GGUF_INT_H
#define STRATA_GGUF_INT_H

#include "strata/gguf.h"

#define ST_GGUF_MAGIC "GGUF"
#define ST_GGUF_HEADER_BYTES 24u /* magic u32, version u32, n_tensors u64, n_kv u64 */

/* Name -> index hash table (open addressing, linear probing). Used both to reject
 * duplicates at open and to answer find_key / find_tensor. */
typedef struct st_gguf_index {
    uint64_t cap;   /* power of two, >= 2 * n entries; 0 when empty */
    int64_t *slot;  /* (cap): entry index, or -1 when free */
} st_gguf_index;

typedef struct st_gguf_kv {
    const char *key;         /* NUL-terminated, in st_gguf.names */
    uint64_t key_len;        /* bytes of key, without the NUL */
    uint64_t key_at;         /* file offset of the key's length field */
    st_gguf_vtype type;
    uint64_t val_at;         /* file offset of the value (after the type field) */
    uint64_t val_end;        /* file offset one past the value's last byte */
    /* scalars: the raw little-endian bits, zero-extended */
    uint64_t bits;
    /* string: bytes at val_at + 8, str_len long. array: see below */
    uint64_t str_len;
    st_gguf_vtype elem_type; /* array only */
    uint64_t n_elem;         /* array only: element count */
    uint64_t elem_at;        /* array only: file offset of the first element */
    uint64_t first_off;      /* string/array arrays: index into st_gguf.elem_off */
} st_gguf_kv;

struct st_gguf {
    st_ctx *ctx;             /* borrowed: receives getter error messages */
    char *path;              /* owned copy, used in messages */
    const uint8_t *base;     /* (size): the file image */
    uint64_t size;
    void *map;               /* mmap'd region when opened from a path, else NULL */
    size_t map_len;          /* bytes mapped at map (>= size when read into anonymous memory) */
    int anon;                /* map is our anonymous copy (ST_GGUF_OPEN_ANON) */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;    /* header end rounded up to alignment */
    int64_t n_kv;
    st_gguf_kv *kv;          /* (n_kv) */
    int64_t n_tensors;
    st_gguf_tensor *tensors; /* (n_tensors) */
    char *names;             /* every key and tensor name, NUL-terminated, back to back */
    uint64_t *elem_off;      /* file offsets of the elements of string and nested arrays */
    st_gguf_index key_idx;
    st_gguf_index tensor_idx;
};

uint64_t st_gguf_hash_(const char *s, size_t len);
/* Allocates an index for n entries. 0 or ST_E_NOMEM. */
int st_gguf_index_init_(st_gguf_index *ix, uint64_t n);
void st_gguf_index_free_(st_gguf_index *ix);
/* Looks up name among entries whose names name_of(arg, i) gives; returns the index or -1.
 * When insert_at >= 0 and the name is absent, it is inserted with that index. */
int64_t st_gguf_index_find_(st_gguf_index *ix, const char *name, size_t len,
                            const char *(*name_of)(const void *arg, int64_t i, size_t *len),
                            const void *arg, int64_t insert_at);

/* name_of for the key index: the key as it lies in the image (valid during parsing). */
const char *st_gguf_key_name_of_(const void *g, int64_t i, size_t *len);

/* Little-endian loads from the (possibly unaligned) image. */
static inline uint32_t st_gguf_rd_u32_(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t st_gguf_rd_u64_(const uint8_t *p) {
    return (uint64_t)st_gguf_rd_u32_(p) | (uint64_t)st_gguf_rd_u32_(p + 4) << 32;
}

#endif
