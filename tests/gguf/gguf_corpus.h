/* The malformed-GGUF corpus: each case builds one bad file in memory and says how the
 * reader must reject it: the error code, where (header / key N / tensor N), the field
 * named in the message, and (gb.mark) the byte offset the message must give.
 * Replayed by test_gguf_corpus; `test_gguf_corpus --write DIR` saves the files as a
 * seed corpus for fuzz/gguf_fuzz.c. */
#ifndef STRATA_TESTS_GGUF_CORPUS_H
#define STRATA_TESTS_GGUF_CORPUS_H

#include "gguf_build.h"

typedef struct corpus_case {
    const char *name;
    void (*build)(gb *b);
    int code;
    const char *where; /* "header", "key 1", "tensor 0 ('w')", ... */
    const char *field; /* text the message must contain */
} corpus_case;

#define BIG (UINT64_C(1) << 40)

/* A key/value long enough that later truncated entries pass the up-front
 * "n entries of at least M bytes" checks and reach the field under test. */
static void filler(gb *b) {
    gb_kv_str(b, "general.name", "filler: long enough for the per-entry minimum size checks of n_kv and n_tensors");
}
/* header with one tensor and the filler key */
static void t1(gb *b) {
    gb_header(b, 3, 1, 1);
    filler(b);
}

/* ---- header ---- */
static void c_empty(gb *b) { (void)b; }
static void c_short_magic(gb *b) { gb_bytes(b, "GG", 2); }
static void c_bad_magic(gb *b) {
    gb_header(b, 3, 0, 0);
    memcpy(b->p, "GGML", 4);
}
static void c_trunc_version(gb *b) {
    gb_bytes(b, "GGUF\3\0", 6);
    b->mark = 4;
}
static void c_v1(gb *b) {
    gb_header(b, 1, 0, 0);
    b->mark = 4;
}
static void c_v4(gb *b) {
    gb_header(b, 4, 0, 0);
    b->mark = 4;
}
static void c_big_endian(gb *b) {
    gb_bytes(b, "GGUF\0\0\0\3", 8);
    gb_zeros(b, 16);
    b->mark = 4;
}
static void c_trunc_n_tensors(gb *b) {
    gb_bytes(b, "GGUF\3\0\0\0\1\0\0", 11);
    b->mark = 8;
}
static void c_trunc_n_kv(gb *b) {
    gb_bytes(b, "GGUF\3\0\0\0", 8);
    gb_u64(b, 0);
    gb_mark(b);
    gb_u32(b, 0);
}
static void c_huge_n_tensors(gb *b) {
    gb_header(b, 3, UINT64_C(1) << 63, 0);
    b->mark = 8;
}
static void c_huge_n_kv(gb *b) {
    gb_header(b, 3, 0, UINT64_MAX);
    b->mark = 16;
}
static void c_n_tensors_past_eof(gb *b) {
    gb_header(b, 3, 1000, 0);
    gb_zeros(b, 100);
    b->mark = 8;
}
static void c_n_kv_past_eof(gb *b) {
    gb_header(b, 3, 0, 1000);
    gb_zeros(b, 100);
    b->mark = 16;
}
static void c_v2_trunc_key(gb *b) { /* v2 is parsed like v3 */
    gb_header(b, 2, 0, 2);
    filler(b);
    gb_mark(b);
}

/* ---- keys and values ---- */
static void c_trunc_key_len(gb *b) {
    gb_header(b, 3, 0, 2);
    filler(b);
    gb_mark(b);
    gb_u32(b, 5);
}
static void c_huge_key_len(gb *b) {
    gb_header(b, 3, 0, 1);
    gb_mark(b);
    gb_u64(b, UINT64_C(1) << 62);
    gb_zeros(b, 16);
}
static void c_key_past_eof(gb *b) {
    gb_header(b, 3, 0, 1);
    gb_u64(b, 100);
    gb_mark(b);
    gb_bytes(b, "general.xyz", 11);
    gb_zeros(b, 4);
}
static void c_empty_key(gb *b) {
    gb_header(b, 3, 0, 1);
    gb_mark(b);
    gb_u64(b, 0);
    gb_u32(b, ST_GGUF_UINT32);
    gb_u32(b, 1);
}
static void c_key_nul(gb *b) {
    gb_header(b, 3, 0, 1);
    gb_u64(b, 4);
    gb_mark(b);
    gb_bytes(b, "ab\0c", 4);
    gb_u32(b, ST_GGUF_UINT32);
    gb_u32(b, 1);
}
static void c_dup_key(gb *b) {
    gb_header(b, 3, 0, 2);
    gb_kv_u32(b, "llama.block_count", 1);
    gb_mark(b);
    gb_kv_u32(b, "llama.block_count", 2);
}
static void c_bad_vtype(gb *b) {
    gb_header(b, 3, 0, 1);
    gb_str(b, "x");
    gb_mark(b);
    gb_u32(b, 13);
    gb_u32(b, 0);
}
static void c_trunc_vtype(gb *b) {
    gb_header(b, 3, 0, 2);
    filler(b);
    gb_str(b, "x");
    gb_mark(b);
    gb_u8(b, 4);
}
static void c_trunc_value(gb *b) {
    gb_header(b, 3, 0, 2);
    filler(b);
    gb_str(b, "x");
    gb_u32(b, ST_GGUF_UINT64);
    gb_mark(b);
    gb_zeros(b, 3);
}
static void c_bool7(gb *b) {
    gb_header(b, 3, 0, 1);
    gb_str(b, "tokenizer.ggml.add_bos_token");
    gb_u32(b, ST_GGUF_BOOL);
    gb_mark(b);
    gb_u8(b, 7);
}
static void c_huge_string_len(gb *b) {
    gb_header(b, 3, 0, 1);
    gb_str(b, "s");
    gb_u32(b, ST_GGUF_STRING);
    gb_mark(b);
    gb_u64(b, BIG);
}
static void c_string_past_eof(gb *b) {
    gb_header(b, 3, 0, 1);
    gb_str(b, "s");
    gb_u32(b, ST_GGUF_STRING);
    gb_u64(b, 50);
    gb_mark(b);
    gb_bytes(b, "hello", 5);
}
static void c_bad_elem_type(gb *b) {
    gb_header(b, 3, 0, 1);
    gb_str(b, "a");
    gb_u32(b, ST_GGUF_ARRAY);
    gb_mark(b);
    gb_u32(b, 13);
    gb_u64(b, 0);
}
static void c_huge_array_len(gb *b) {
    gb_header(b, 3, 0, 1);
    gb_str(b, "a");
    gb_u32(b, ST_GGUF_ARRAY);
    gb_u32(b, ST_GGUF_UINT32);
    gb_mark(b);
    gb_u64(b, BIG);
}
static void c_array_data_past_eof(gb *b) {
    gb_header(b, 3, 0, 1);
    gb_str(b, "a");
    gb_u32(b, ST_GGUF_ARRAY);
    gb_u32(b, ST_GGUF_UINT32);
    gb_u64(b, 1000);
    gb_mark(b);
    gb_zeros(b, 40);
}
static void c_str_array_past_eof(gb *b) {
    gb_header(b, 3, 0, 1);
    gb_str(b, "tokenizer.ggml.tokens");
    gb_u32(b, ST_GGUF_ARRAY);
    gb_u32(b, ST_GGUF_STRING);
    gb_mark(b);
    gb_u64(b, 1000000);
    gb_str(b, "<unk>");
}
static void c_str_elem_past_eof(gb *b) {
    gb_header(b, 3, 0, 1);
    gb_str(b, "tokenizer.ggml.tokens");
    gb_u32(b, ST_GGUF_ARRAY);
    gb_u32(b, ST_GGUF_STRING);
    gb_u64(b, 2);
    gb_str(b, "<unk>");
    gb_u64(b, 100);
    gb_mark(b);
    gb_bytes(b, "abc", 3);
}
static void c_str_elem_huge(gb *b) {
    gb_header(b, 3, 0, 1);
    gb_str(b, "tokenizer.ggml.tokens");
    gb_u32(b, ST_GGUF_ARRAY);
    gb_u32(b, ST_GGUF_STRING);
    gb_u64(b, 3);
    gb_str(b, "a");
    gb_str(b, "b");
    gb_mark(b);
    gb_u64(b, UINT64_MAX);
}
static void c_bool_array7(gb *b) {
    gb_header(b, 3, 0, 1);
    gb_str(b, "flags");
    gb_u32(b, ST_GGUF_ARRAY);
    gb_u32(b, ST_GGUF_BOOL);
    gb_u64(b, 3);
    gb_u8(b, 0);
    gb_u8(b, 1);
    gb_mark(b);
    gb_u8(b, 7);
}
static void c_nested_too_deep(gb *b) {
    gb_header(b, 3, 0, 1);
    gb_str(b, "n");
    gb_u32(b, ST_GGUF_ARRAY);
    for (int d = 0; d < ST_GGUF_MAX_ARRAY_DEPTH; d++) { /* depths 1..4: one array each */
        gb_u32(b, ST_GGUF_ARRAY);
        gb_u64(b, 1);
    }
    gb_mark(b); /* depth 5 */
    gb_u32(b, ST_GGUF_UINT8);
    gb_u64(b, 0);
}
static void c_nested_inner_past_eof(gb *b) {
    gb_header(b, 3, 0, 1);
    gb_str(b, "n");
    gb_u32(b, ST_GGUF_ARRAY);
    gb_u32(b, ST_GGUF_ARRAY);
    gb_u64(b, 2);
    gb_u32(b, ST_GGUF_UINT8); /* [0]: 2 bytes */
    gb_u64(b, 2);
    gb_u8(b, 1);
    gb_u8(b, 2);
    gb_u32(b, ST_GGUF_UINT16); /* [1]: 100 x u16 but 4 bytes */
    gb_u64(b, 100);
    gb_mark(b);
    gb_zeros(b, 4);
}

/* ---- general.alignment ---- */
static void align_kv(gb *b, uint32_t type, uint64_t v) {
    gb_header(b, 3, 0, 1);
    gb_str(b, "general.alignment");
    gb_u32(b, type);
    gb_mark(b);
    if (type == ST_GGUF_UINT64) gb_u64(b, v);
    else gb_u32(b, (uint32_t)v);
}
static void c_align_u64(gb *b) { align_kv(b, ST_GGUF_UINT64, 32); }
static void c_align_zero(gb *b) { align_kv(b, ST_GGUF_UINT32, 0); }
static void c_align_48(gb *b) { align_kv(b, ST_GGUF_UINT32, 48); }
static void c_align_4(gb *b) { align_kv(b, ST_GGUF_UINT32, 4); }
static void c_align_huge(gb *b) { align_kv(b, ST_GGUF_UINT32, UINT32_C(1) << 24); }

/* ---- tensor infos ---- */
static void c_trunc_name_len(gb *b) {
    t1(b);
    gb_mark(b);
    gb_u32(b, 1);
}
static void c_empty_name(gb *b) {
    t1(b);
    gb_mark(b);
    gb_tensor(b, "", 1, (uint64_t[]){32}, 0, 0);
}
static void c_long_name(gb *b) {
    t1(b);
    gb_mark(b);
    gb_u64(b, ST_GGUF_MAX_NAME_LEN + 1);
    gb_zeros(b, ST_GGUF_MAX_NAME_LEN + 1);
}
static void c_name_past_eof(gb *b) {
    t1(b);
    gb_u64(b, 100);
    gb_mark(b);
    gb_bytes(b, "blk.0", 5);
}
static void c_name_nul(gb *b) {
    t1(b);
    gb_u64(b, 3);
    gb_mark(b);
    gb_bytes(b, "a\0b", 3);
    gb_u32(b, 1);
    gb_u64(b, 8);
    gb_u32(b, 0);
    gb_u64(b, 0);
}
static void c_dup_tensor(gb *b) {
    gb_header(b, 3, 2, 1);
    filler(b);
    gb_tensor(b, "w", 1, (uint64_t[]){8}, 0, 0);
    gb_mark(b);
    gb_tensor(b, "w", 1, (uint64_t[]){8}, 0, 32);
    gb_pad(b, 32);
    gb_zeros(b, 64);
}
static void tensor_dims(gb *b, uint32_t n_dims, const uint64_t *ne, int mark_dim) {
    t1(b);
    gb_str(b, "w");
    if (mark_dim < 0) gb_mark(b);
    gb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) {
        if ((int)d == mark_dim) gb_mark(b);
        gb_u64(b, ne[d]);
    }
    gb_u32(b, 0);
    gb_u64(b, 0);
    gb_pad(b, 32);
    gb_zeros(b, 64);
}
static void c_n_dims0(gb *b) { tensor_dims(b, 0, NULL, -1); }
static void c_n_dims5(gb *b) { tensor_dims(b, 5, (uint64_t[]){1, 1, 1, 1, 1}, -1); }
static void c_ne_zero(gb *b) { tensor_dims(b, 2, (uint64_t[]){4, 0}, 1); }
static void c_ne_overflow(gb *b) { tensor_dims(b, 2, (uint64_t[]){BIG, BIG}, 1); }
static void c_ne_negative(gb *b) { tensor_dims(b, 1, (uint64_t[]){UINT64_C(1) << 63}, 0); }
static void c_trunc_n_dims(gb *b) {
    t1(b);
    gb_str(b, "w");
    gb_mark(b);
    gb_u8(b, 2);
}
static void c_trunc_ne(gb *b) {
    t1(b);
    gb_str(b, "w");
    gb_u32(b, 2);
    gb_u64(b, 8);
    gb_mark(b);
    gb_zeros(b, 3);
}
static void tensor_type(gb *b, uint32_t type, uint64_t ne0) {
    t1(b);
    gb_str(b, "w");
    gb_u32(b, 1);
    gb_u64(b, ne0);
    gb_mark(b);
    gb_u32(b, type);
    gb_u64(b, 0);
    gb_pad(b, 32);
    gb_zeros(b, 64);
}
static void c_type_4(gb *b) { tensor_type(b, 4, 32); }   /* Q4_2, removed from ggml */
static void c_type_99(gb *b) { tensor_type(b, 99, 32); }
static void c_block_mismatch(gb *b) { tensor_type(b, ST_TYPE_Q8_0, 33); }
static void c_nbytes_overflow(gb *b) { tensor_type(b, ST_TYPE_F64, UINT64_C(1) << 62); }
static void c_trunc_type(gb *b) {
    t1(b);
    gb_str(b, "w");
    gb_u32(b, 1);
    gb_u64(b, 8);
    gb_mark(b);
    gb_u8(b, 0);
}
static void tensor_off(gb *b, uint64_t ne0, uint64_t off, size_t data) {
    t1(b);
    gb_str(b, "w");
    gb_u32(b, 1);
    gb_u64(b, ne0);
    gb_u32(b, ST_TYPE_F32);
    gb_mark(b);
    gb_u64(b, off);
    gb_pad(b, 32);
    gb_zeros(b, data);
}
static void c_misaligned(gb *b) { tensor_off(b, 8, 4, 64); }
static void c_data_past_eof(gb *b) { tensor_off(b, 64, 0, 100); }
static void c_offset_overflow(gb *b) { tensor_off(b, 8, UINT64_MAX - 31, 64); }
static void c_trunc_offset(gb *b) {
    t1(b);
    gb_str(b, "w");
    gb_u32(b, 1);
    gb_u64(b, 8);
    gb_u32(b, 0);
    gb_mark(b);
    gb_zeros(b, 7);
}
static void c_no_data(gb *b) { /* header ends exactly where the data section would start */
    t1(b);
    gb_str(b, "w");
    gb_u32(b, 1);
    gb_u64(b, 8);
    gb_u32(b, 0);
    gb_mark(b);
    gb_u64(b, 0);
}
static void two_tensors(gb *b, uint64_t off0, uint64_t off1, int mark) {
    gb_header(b, 3, 2, 1);
    filler(b);
    if (mark == 0) b->mark = b->len + 8 + 2 + 4 + 8 + 4; /* t0's offset field */
    gb_tensor(b, "t0", 1, (uint64_t[]){16}, ST_TYPE_F32, off0);
    if (mark == 1) b->mark = b->len + 8 + 2 + 4 + 8 + 4;
    gb_tensor(b, "t1", 1, (uint64_t[]){16}, ST_TYPE_F32, off1);
    gb_pad(b, 32);
    gb_zeros(b, 128);
}
static void c_overlap(gb *b) { two_tensors(b, 0, 32, 1); }
static void c_overlap_reversed(gb *b) { two_tensors(b, 32, 0, 0); }
static void c_overlap_same(gb *b) { two_tensors(b, 64, 64, 1); }
static void c_misaligned_64(gb *b) { /* aligned to 32 but general.alignment is 64 */
    gb_header(b, 3, 1, 2);
    filler(b);
    gb_kv_u32(b, "general.alignment", 64);
    gb_str(b, "w");
    gb_u32(b, 1);
    gb_u64(b, 8);
    gb_u32(b, 0);
    gb_mark(b);
    gb_u64(b, 32);
    gb_pad(b, 64);
    gb_zeros(b, 128);
}

#define FMT ST_E_FORMAT
#define LIM ST_E_LIMIT
#define VER ST_E_VERSION
static const corpus_case corpus_cases[] = {
    {"empty", c_empty, FMT, "header", "magic"},
    {"short_magic", c_short_magic, FMT, "header", "magic"},
    {"bad_magic", c_bad_magic, FMT, "header", "magic"},
    {"trunc_version", c_trunc_version, FMT, "header", "version"},
    {"v1", c_v1, VER, "header", "version"},
    {"v4", c_v4, VER, "header", "version"},
    {"big_endian", c_big_endian, VER, "header", "big-endian"},
    {"trunc_n_tensors", c_trunc_n_tensors, FMT, "header", "n_tensors"},
    {"trunc_n_kv", c_trunc_n_kv, FMT, "header", "n_kv"},
    {"huge_n_tensors", c_huge_n_tensors, LIM, "header", "n_tensors"},
    {"huge_n_kv", c_huge_n_kv, LIM, "header", "n_kv"},
    {"n_tensors_past_eof", c_n_tensors_past_eof, FMT, "header", "n_tensors"},
    {"n_kv_past_eof", c_n_kv_past_eof, FMT, "header", "n_kv"},
    {"v2_trunc_key", c_v2_trunc_key, FMT, "key 1", "key length"},
    {"trunc_key_len", c_trunc_key_len, FMT, "key 1", "key length"},
    {"huge_key_len", c_huge_key_len, LIM, "key 0", "key length"},
    {"key_past_eof", c_key_past_eof, FMT, "key 0", "key at"},
    {"empty_key", c_empty_key, FMT, "key 0", "key length"},
    {"key_nul", c_key_nul, FMT, "key 0", "NUL"},
    {"dup_key", c_dup_key, FMT, "key 1 ('llama.block_count')", "duplicate key"},
    {"bad_vtype", c_bad_vtype, FMT, "key 0 ('x')", "value type"},
    {"trunc_vtype", c_trunc_vtype, FMT, "key 1 ('x')", "value type"},
    {"trunc_value", c_trunc_value, FMT, "key 1 ('x')", "value at"},
    {"bool7", c_bool7, FMT, "key 0 ('tokenizer.ggml.add_bos_token')", "bool value 7"},
    {"huge_string_len", c_huge_string_len, LIM, "key 0 ('s')", "string length"},
    {"string_past_eof", c_string_past_eof, FMT, "key 0 ('s')", "string at"},
    {"bad_elem_type", c_bad_elem_type, FMT, "key 0 ('a')", "array element type"},
    {"huge_array_len", c_huge_array_len, LIM, "key 0 ('a')", "array length"},
    {"array_data_past_eof", c_array_data_past_eof, FMT, "key 0 ('a')", "array data"},
    {"str_array_past_eof", c_str_array_past_eof, FMT, "key 0 ('tokenizer.ggml.tokens')", "array length"},
    {"str_elem_past_eof", c_str_elem_past_eof, FMT, "('tokenizer.ggml.tokens')[1]", "string at"},
    {"str_elem_huge", c_str_elem_huge, LIM, "('tokenizer.ggml.tokens')[2]", "string length"},
    {"bool_array7", c_bool_array7, FMT, "key 0 ('flags')[2]", "bool value 7"},
    {"nested_too_deep", c_nested_too_deep, LIM, "key 0 ('n')[0][0][0]", "array nesting depth"},
    {"nested_inner_past_eof", c_nested_inner_past_eof, FMT, "key 0 ('n')[1]", "array data"},
    {"align_u64", c_align_u64, FMT, "key 0 ('general.alignment')", "must be uint32"},
    {"align_zero", c_align_zero, FMT, "key 0 ('general.alignment')", "power of two"},
    {"align_48", c_align_48, FMT, "key 0 ('general.alignment')", "power of two"},
    {"align_4", c_align_4, FMT, "key 0 ('general.alignment')", "not a multiple of 8"},
    {"align_huge", c_align_huge, LIM, "key 0 ('general.alignment')", "ST_GGUF_MAX_ALIGNMENT"},
    {"trunc_name_len", c_trunc_name_len, FMT, "tensor 0", "name length"},
    {"empty_name", c_empty_name, FMT, "tensor 0", "name length"},
    {"long_name", c_long_name, LIM, "tensor 0", "ST_GGUF_MAX_NAME_LEN"},
    {"name_past_eof", c_name_past_eof, FMT, "tensor 0", "name at"},
    {"name_nul", c_name_nul, FMT, "tensor 0", "NUL"},
    {"dup_tensor", c_dup_tensor, FMT, "tensor 1 ('w')", "duplicate tensor name"},
    {"n_dims0", c_n_dims0, FMT, "tensor 0 ('w')", "n_dims"},
    {"n_dims5", c_n_dims5, LIM, "tensor 0 ('w')", "n_dims"},
    {"trunc_n_dims", c_trunc_n_dims, FMT, "tensor 0 ('w')", "n_dims"},
    {"ne_zero", c_ne_zero, FMT, "tensor 0 ('w')", "ne[1]"},
    {"ne_overflow", c_ne_overflow, FMT, "tensor 0 ('w')", "ne[1]"},
    {"ne_negative", c_ne_negative, FMT, "tensor 0 ('w')", "ne[0]"},
    {"trunc_ne", c_trunc_ne, FMT, "tensor 0 ('w')", "ne[1]"},
    {"type_4", c_type_4, FMT, "tensor 0 ('w')", "not a known ggml type"},
    {"type_99", c_type_99, FMT, "tensor 0 ('w')", "not a known ggml type"},
    {"block_mismatch", c_block_mismatch, FMT, "tensor 0 ('w')", "block size"},
    {"nbytes_overflow", c_nbytes_overflow, FMT, "tensor 0 ('w')", "overflows"},
    {"trunc_type", c_trunc_type, FMT, "tensor 0 ('w')", "type at"},
    {"misaligned", c_misaligned, FMT, "tensor 0 ('w')", "multiple of the alignment 32"},
    {"data_past_eof", c_data_past_eof, FMT, "tensor 0 ('w')", "data runs past end of file"},
    {"offset_overflow", c_offset_overflow, FMT, "tensor 0 ('w')", "data runs past end of file"},
    {"trunc_offset", c_trunc_offset, FMT, "tensor 0 ('w')", "offset at"},
    {"no_data", c_no_data, FMT, "tensor 0 ('w')", "data runs past end of file"},
    {"overlap", c_overlap, FMT, "tensor 1 ('t1')", "overlaps tensor 0 ('t0')"},
    {"overlap_reversed", c_overlap_reversed, FMT, "tensor 0 ('t0')", "overlaps tensor 1 ('t1')"},
    {"overlap_same", c_overlap_same, FMT, "tensor 1 ('t1')", "overlaps tensor 0 ('t0')"},
    {"misaligned_64", c_misaligned_64, FMT, "tensor 0 ('w')", "multiple of the alignment 64"},
};
#undef FMT
#undef LIM
#undef VER

#define N_CORPUS_CASES ((int)(sizeof corpus_cases / sizeof corpus_cases[0]))

/* ---- valid seeds for the fuzzer (the replay test checks that they open) ---- */
static void s_every_type(gb *b) {
    gb_header(b, 3, 2, 16);
    gb_kv_str(b, "general.architecture", "llama");
    gb_kv_u32(b, "llama.block_count", 2);
    const uint32_t scalar_types[] = {ST_GGUF_UINT8, ST_GGUF_INT8, ST_GGUF_UINT16, ST_GGUF_INT16, ST_GGUF_INT32,
                                     ST_GGUF_FLOAT32, ST_GGUF_BOOL, ST_GGUF_UINT64, ST_GGUF_INT64, ST_GGUF_FLOAT64};
    const char *const names[] = {"u8", "i8", "u16", "i16", "i32", "f32", "bool", "u64", "i64", "f64"};
    const int sizes[] = {1, 1, 2, 2, 4, 4, 1, 8, 8, 8};
    for (int k = 0; k < 10; k++) {
        gb_str(b, names[k]);
        gb_u32(b, scalar_types[k]);
        gb_zeros(b, (size_t)sizes[k] - 1);
        gb_u8(b, 1); /* little-endian: the top byte set, except a 1-byte 1 */
    }
    gb_str(b, "tokens");
    gb_u32(b, ST_GGUF_ARRAY);
    gb_u32(b, ST_GGUF_STRING);
    gb_u64(b, 3);
    gb_str(b, "<s>");
    gb_str(b, "");
    gb_str(b, "\xe2\x96\x81" "a");
    gb_str(b, "scores");
    gb_u32(b, ST_GGUF_ARRAY);
    gb_u32(b, ST_GGUF_FLOAT32);
    gb_u64(b, 3);
    gb_zeros(b, 12);
    gb_str(b, "nest");
    gb_u32(b, ST_GGUF_ARRAY);
    gb_u32(b, ST_GGUF_ARRAY);
    gb_u64(b, 2);
    gb_u32(b, ST_GGUF_BOOL);
    gb_u64(b, 2);
    gb_u8(b, 1);
    gb_u8(b, 0);
    gb_u32(b, ST_GGUF_STRING);
    gb_u64(b, 1);
    gb_str(b, "x");
    gb_kv_u32(b, "general.alignment", 64);
    gb_tensor(b, "w.q8", 2, (uint64_t[]){32, 2}, ST_TYPE_Q8_0, 0);
    gb_tensor(b, "w.f32", 1, (uint64_t[]){4}, ST_TYPE_F32, 128);
    gb_pad(b, 64);
    for (int i = 0; i < 144; i++) gb_u8(b, (uint8_t)(i * 29 + 1));
}
static void s_vocab_only(gb *b) {
    gb_header(b, 2, 0, 2);
    gb_kv_str(b, "tokenizer.ggml.model", "gpt2");
    gb_str(b, "tokenizer.ggml.merges");
    gb_u32(b, ST_GGUF_ARRAY);
    gb_u32(b, ST_GGUF_STRING);
    gb_u64(b, 2);
    gb_str(b, "a b");
    gb_str(b, "ab c");
}

typedef struct corpus_seed {
    const char *name;
    void (*build)(gb *b);
} corpus_seed;
static const corpus_seed corpus_seeds[] = {{"seed_every_type", s_every_type}, {"seed_vocab_only", s_vocab_only}};
#define N_CORPUS_SEEDS ((int)(sizeof corpus_seeds / sizeof corpus_seeds[0]))

#endif
