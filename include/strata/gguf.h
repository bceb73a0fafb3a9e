/*
 * GGUF reader (v2, v3) over mmap, and writer.
 *
 * The reader validates the whole header on open (magic, version, every count and
 * length against named limits, overflow-safe offsets, tensor data inside the file,
 * aligned and non-overlapping, known types, unique names and keys). A rejection
 * returns ST_E_FORMAT / ST_E_VERSION / ST_E_LIMIT and leaves in the st_ctx a message
 * naming the file, the field and the byte offset.
 *
 * Borrowed pointers (strings, arrays, tensor data) point into the mapping and stay
 * valid until st_gguf_close(). Strings in GGUF are not NUL-terminated on disk: the
 * getters return (pointer, length); st_gguf_get_str_dup gives a NUL-terminated copy.
 * A st_gguf is read-only after open: any number of threads may read it.
 */
#ifndef STRATA_GGUF_H
#define STRATA_GGUF_H

#include "strata/core.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Named limits. The reader rejects a file exceeding one with ST_E_LIMIT (a message names
 * the limit); the writer refuses to produce such a file (ST_E_INVAL). Each is far above
 * what real models use (DeepSeek-V3: ~1.1k tensors, ~50 keys, 129k-token vocab). */
#define ST_GGUF_MAX_TENSORS (1u << 20)        /* n_tensors */
#define ST_GGUF_MAX_KV (1u << 16)             /* n_kv */
#define ST_GGUF_MAX_KEY_LEN 4096u             /* bytes of a metadata key */
#define ST_GGUF_MAX_NAME_LEN 1024u            /* bytes of a tensor name */
#define ST_GGUF_MAX_STRING_LEN (1u << 28)     /* bytes of a string value (256 MiB) */
#define ST_GGUF_MAX_ARRAY_LEN (1u << 26)      /* elements of one array (64 Mi) */
#define ST_GGUF_MAX_ARRAY_DEPTH 4             /* arrays of arrays, nested this deep at most */
#define ST_GGUF_MAX_DIMS 4                    /* n_dims of a tensor */
#define ST_GGUF_MAX_ALIGNMENT (1u << 20)      /* general.alignment (a power of two) */
#define ST_GGUF_DEFAULT_ALIGNMENT 32u

typedef enum st_gguf_vtype {
    ST_GGUF_UINT8 = 0,
    ST_GGUF_INT8 = 1,
    ST_GGUF_UINT16 = 2,
    ST_GGUF_INT16 = 3,
    ST_GGUF_UINT32 = 4,
    ST_GGUF_INT32 = 5,
    ST_GGUF_FLOAT32 = 6,
    ST_GGUF_BOOL = 7,
    ST_GGUF_STRING = 8,
    ST_GGUF_ARRAY = 9,
    ST_GGUF_UINT64 = 10,
    ST_GGUF_INT64 = 11,
    ST_GGUF_FLOAT64 = 12,
    ST_GGUF_VTYPE_COUNT_
} st_gguf_vtype;

typedef struct st_gguf st_gguf;

typedef struct st_gguf_tensor {
    const char *name;   /* NUL-terminated copy owned by the st_gguf */
    st_type type;
    int n_dims;         /* 1..4 */
    int64_t ne[4];      /* elements per dimension, ne[0] innermost; unused dims are 1 */
    uint64_t offset;    /* byte offset relative to the data section */
    uint64_t nbytes;    /* bytes of tensor data: ne[0]/block_size * block_bytes * ne[1]*ne[2]*ne[3] */
    const void *data;   /* borrowed: inside the mapping. From st_gguf_open it is aligned to
                         * the file's alignment (the mapping is page-aligned; with
                         * ST_GGUF_OPEN_ANON the copy starts up to 63 bytes into it, a
                         * multiple of that alignment, so that most tensor bytes start on a
                         * 64-byte line); from memory, only as well as the caller's buffer is. */
} st_gguf_tensor;

/* Opens and validates path (mmap, read-only). *out owned by caller: st_gguf_close.
 * Returns 0; -errno when the file cannot be opened or mapped; ST_E_FORMAT, ST_E_VERSION
 * (v1, unknown version, big-endian file) or ST_E_LIMIT for a malformed file; ST_E_NOMEM.
 * ctx (may be NULL) receives the detailed message and, later, the getters' messages:
 * it must outlive the st_gguf. */
int st_gguf_open(st_ctx *ctx, const char *path, st_gguf **out);
/* Flags for st_gguf_open_flags. ST_GGUF_OPEN_ANON reads the file into anonymous memory
 * (transparent huge pages where allowed) instead of mapping it: faster to stream, but
 * the whole file is resident (costs its size in RAM, not shared with the page cache). */
#define ST_GGUF_OPEN_ANON 1u
int st_gguf_open_flags(st_ctx *ctx, const char *path, unsigned flags, st_gguf **out);
/* An image read with ST_GGUF_OPEN_ANON is read-only memory once open; this makes it
 * writable (on) or read-only again (off), so its owner can rearrange tensor data in place
 * (the model loader's quad layout). 0, ST_E_STATE for an image that is not the st_gguf's
 * own anonymous copy (a file mapping, a caller's buffer), or -errno from mprotect. */
int st_gguf_set_writable(st_gguf *g, int on);
/* Same over a caller-owned buffer that must outlive the st_gguf; name is used in messages. */
int st_gguf_open_memory(st_ctx *ctx, const void *data, size_t size, const char *name, st_gguf **out);
void st_gguf_close(st_gguf *g); /* NULL is a no-op */

uint32_t st_gguf_version(const st_gguf *g);
uint32_t st_gguf_alignment(const st_gguf *g);
uint64_t st_gguf_data_offset(const st_gguf *g); /* file offset of the data section */
uint64_t st_gguf_file_size(const st_gguf *g);
const char *st_gguf_path(const st_gguf *g);

/* ---- metadata ----
 * Keys in file order, 0..n_kv-1. key_name: NULL, key_type: ST_GGUF_VTYPE_COUNT_ for an
 * index out of range. */
int64_t st_gguf_n_kv(const st_gguf *g);
int64_t st_gguf_find_key(const st_gguf *g, const char *key); /* index or -1 */
const char *st_gguf_key_name(const st_gguf *g, int64_t i);  /* NUL-terminated, borrowed */
st_gguf_vtype st_gguf_key_type(const st_gguf *g, int64_t i);

/* Typed getters: 0; ST_E_NOT_FOUND when the key is absent; ST_E_TYPE (with a message naming
 * the key, the expected and the actual type) when the type differs. Integer getters accept
 * any integer type (not bool, not float) whose value fits the requested one losslessly; a
 * value that does not fit (-1 read as uint32) is ST_E_TYPE too. Outputs are cleared on
 * entry. Messages go to the ctx given at open (shared by every thread using g: read it
 * only from one thread at a time, or pass a NULL ctx at open). Strings are borrowed. */
int st_gguf_get_u32(st_gguf *g, const char *key, uint32_t *out);
int st_gguf_get_i32(st_gguf *g, const char *key, int32_t *out);
int st_gguf_get_u64(st_gguf *g, const char *key, uint64_t *out);
int st_gguf_get_i64(st_gguf *g, const char *key, int64_t *out);
/* float32 only: a float64 value is ST_E_TYPE (no silent rounding). */
int st_gguf_get_f32(st_gguf *g, const char *key, float *out);
/* float32 or float64. */
int st_gguf_get_f64(st_gguf *g, const char *key, double *out);
int st_gguf_get_bool(st_gguf *g, const char *key, bool *out);
int st_gguf_get_str(st_gguf *g, const char *key, const char **s, size_t *len);
/* NUL-terminated malloc'd copy; caller frees. */
int st_gguf_get_str_dup(st_gguf *g, const char *key, char **out);

/* Arrays. *elem_type is the element type (ST_GGUF_ARRAY for nested arrays). For numeric
 * and bool element types *data points at n packed little-endian elements (borrowed, not
 * necessarily aligned: memcpy them). For strings and arrays it points at the first
 * element's serialized bytes (use the two getters below). ST_E_TYPE if not an array. */
int st_gguf_get_arr(st_gguf *g, const char *key, st_gguf_vtype *elem_type, uint64_t *n, const void **data);
/* Element i of an array of strings (borrowed pointer + length). ST_E_TYPE if the key is
 * not an array of strings, ST_E_INVAL if i >= its length. */
int st_gguf_get_arr_str(st_gguf *g, const char *key, uint64_t i, const char **s, size_t *len);
/* Element i of a nested array (array of arrays): its element type, count and data (as
 * st_gguf_get_arr gives them for a key's own array). ST_E_TYPE / ST_E_INVAL as above. */
int st_gguf_get_arr_arr(st_gguf *g, const char *key, uint64_t i, st_gguf_vtype *elem_type, uint64_t *n,
                        const void **data);

/* ---- tensors ----
 * Tensors in file order; name lookup is a hash probe. Returned pointers are borrowed
 * (valid until st_gguf_close); NULL for an index out of range or an absent name. */
int64_t st_gguf_n_tensors(const st_gguf *g);
const st_gguf_tensor *st_gguf_tensor_at(const st_gguf *g, int64_t i); /* borrowed */
const st_gguf_tensor *st_gguf_find_tensor(const st_gguf *g, const char *name); /* NULL if absent */

const char *st_gguf_vtype_name(st_gguf_vtype t); /* "uint32", ...; "?" when unknown */
/* Bytes of one value of a fixed-size type; 0 for string, array and unknown types. */
size_t st_gguf_vtype_size(st_gguf_vtype t);

/* ---- writer ----
 * Collects metadata and tensors in memory, then writes a GGUF v3 file. Keys and tensor
 * names are copied; tensor data is borrowed until st_gguf_writer_write returns.
 * Setters return 0, ST_E_INVAL (empty/too long key, bad value, limit exceeded; message
 * in the ctx given at create) or ST_E_NOMEM. Setting a key that is already set replaces
 * its value in place. Keys keep the order they were first set in; tensors the order they
 * were added, each at the next aligned offset. Setting "general.alignment" (uint32, a
 * power of two) is the same as st_gguf_writer_set_alignment. One thread per writer. */
typedef struct st_gguf_writer st_gguf_writer;

int st_gguf_writer_create(st_ctx *ctx, st_gguf_writer **out);
void st_gguf_writer_destroy(st_gguf_writer *w); /* NULL is a no-op */
int st_gguf_writer_set_alignment(st_gguf_writer *w, uint32_t alignment);
int st_gguf_writer_set_u32(st_gguf_writer *w, const char *key, uint32_t v);
int st_gguf_writer_set_i32(st_gguf_writer *w, const char *key, int32_t v);
int st_gguf_writer_set_u64(st_gguf_writer *w, const char *key, uint64_t v);
int st_gguf_writer_set_f32(st_gguf_writer *w, const char *key, float v);
int st_gguf_writer_set_bool(st_gguf_writer *w, const char *key, bool v);
int st_gguf_writer_set_i64(st_gguf_writer *w, const char *key, int64_t v);
int st_gguf_writer_set_f64(st_gguf_writer *w, const char *key, double v);
/* Any fixed-size scalar type: *v holds one little-endian value of type t (copied). */
int st_gguf_writer_set_scalar(st_gguf_writer *w, const char *key, st_gguf_vtype t, const void *v);
int st_gguf_writer_set_str(st_gguf_writer *w, const char *key, const char *s);
/* Same with an explicit length (the string may hold any bytes, NUL included). */
int st_gguf_writer_set_strn(st_gguf_writer *w, const char *key, const char *s, size_t len);
/* Numeric (or bool) array: n elements of elem_type, copied. */
int st_gguf_writer_set_arr(st_gguf_writer *w, const char *key, st_gguf_vtype elem_type, const void *data,
                           uint64_t n);
int st_gguf_writer_set_arr_str(st_gguf_writer *w, const char *key, const char *const *strs, uint64_t n);
/* Copies key i of an open file (any type, including nested arrays) into the writer. */
int st_gguf_writer_copy_kv(st_gguf_writer *w, const st_gguf *src, int64_t i);
/* Adds a tensor; data (nbytes as the type and shape imply) is borrowed until write
 * (NULL: the tensor is written as zeros). ST_E_INVAL for a duplicate name, an unknown
 * type, n_dims outside 1..4, a dimension <= 0, ne[0] not a multiple of the block size. */
int st_gguf_writer_add_tensor(st_gguf_writer *w, const char *name, st_type type, int n_dims,
                              const int64_t *ne, const void *data);
/* Writes the file (atomically: to path.tmp, fsync, then rename). Returns 0, -errno
 * (message names the path) or ST_E_NOMEM; on error no file is left at path.tmp and an
 * existing file at path is untouched. The writer stays usable (write again, add more). */
int st_gguf_writer_write(st_gguf_writer *w, const char *path);
/* Same into a malloc'd buffer (*out, *size; caller frees). */
int st_gguf_writer_write_memory(st_gguf_writer *w, void **out, size_t *size);

#ifdef __cplusplus
}
#endif
#endif
