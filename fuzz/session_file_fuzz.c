/* libFuzzer target for the server's session file reader (srv_session_decode), and the KV
 * snapshot inside a file it accepts (st_kv_snapshot_read into a small pool of the same
 * model fingerprint).
 *
 * Whatever the bytes, the reader either refuses them with a message, or accepts a file whose
 * sizes add up exactly, whose token ids lie in the vocabulary, and which the writer
 * (srv_session_encode) reproduces byte for byte. An accepted snapshot's sequences are
 * readable and freed again, and a refused one leaves the pool as it was.
 *
 * A whole-file checksum stops blind mutations at once, so (as in kv_snapshot_fuzz.c) the
 * input 'S' is expanded into a valid file, and an input starting with 'P' patches that
 * valid file: 3-byte edits (u16 offset modulo the length, a byte XORed in), an optional
 * last byte b cutting it to len * b / 256, then the checksum recomputed so the checks behind
 * it see the edits (the first byte after 'P' odd: the checksum is left as the edits made it). */
#include "server/server_int.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static const uint8_t FP[16] = {0x5e, 0x55, 0x10, 0x4e, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
#define N_VOCAB 512

static st_kv *make_pool(st_ctx *ctx) {
    st_kv_params p = st_kv_default_params();
    p.n_layer = 2, p.n_kv_head = 1, p.head_dim = 2, p.page_size = 8, p.type = ST_TYPE_F32;
    p.n_pages = 16, p.max_seqs = 8;
    memcpy(p.fingerprint.b, FP, 16);
    st_kv *kv = NULL;
    if (st_kv_create(ctx, &p, &kv)) abort();
    return kv;
}

/* A valid file: 21 tokens and their KV. */
static void valid_file(st_ctx *ctx, uint8_t **out, size_t *n) {
    st_kv *kv = make_pool(ctx);
    int32_t toks[21];
    float k[2 * 21 * 2], v[2 * 21 * 2];
    for (int i = 0; i < 21; i++) toks[i] = (i * 37) % N_VOCAB;
    for (int i = 0; i < 2 * 21 * 2; i++) k[i] = (float)i, v[i] = -(float)i;
    st_kv_seq_id s;
    if (st_kv_seq_create(kv, &s) || st_kv_seq_append(kv, s, 21, toks, k, v)) abort();
    st_kv_io io;
    st_kv_io_mem_writer(&io);
    if (st_kv_snapshot_write(kv, &s, 1, -1, &io)) abort();
    srv_session_info in = {.n_tokens = 21, .tokens = toks, .snap = io.buf, .n_snap = io.len, .created = 1};
    if (srv_session_encode(FP, &in, out, n)) abort();
    st_kv_io_mem_release(&io);
    st_kv_destroy(kv);
}

static void fix_checksum(uint8_t *b, size_t n) {
    if (n < SRV_SESSION_HEADER) return;
    XXH3_state_t *st = XXH3_createState();
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, b, 56);
    XXH3_64bits_update(st, b + SRV_SESSION_HEADER, n - SRV_SESSION_HEADER);
    const uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    for (int i = 0; i < 8; i++) b[56 + i] = (uint8_t)(h >> (8 * i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_ctx *ctx = NULL;
    if (st_ctx_create(&(st_ctx_params){.n_threads = 1, .isa = 0}, &ctx)) abort();
    uint8_t *gen = NULL;
    size_t n_gen = 0;
    if (size == 1 && data[0] == 'S') {
        valid_file(ctx, &gen, &n_gen);
    } else if (size >= 2 && data[0] == 'P') {
        valid_file(ctx, &gen, &n_gen);
        size_t i = 2;
        for (; i + 3 <= size; i += 3) {
            const size_t off = ((size_t)data[i] | (size_t)data[i + 1] << 8) % n_gen;
            gen[off] ^= data[i + 2];
        }
        if (i < size && data[i]) n_gen = n_gen * data[i] / 256;
        if (!(data[1] & 1)) fix_checksum(gen, n_gen);
    }
    const uint8_t *b = gen ? gen : data;
    const size_t n = gen ? n_gen : size;
    srv_session_info in;
    char msg[512];
    int rc = srv_session_decode(b, n, FP, N_VOCAB, &in, msg, sizeof msg);
    if (rc) {
        if (!msg[0]) abort(); /* every refusal says why */
    } else {
        if (SRV_SESSION_HEADER + 4 * (size_t)in.n_tokens + in.n_snap != n) abort();
        for (int32_t i = 0; i < in.n_tokens; i++)
            if (in.tokens[i] < 0 || in.tokens[i] >= N_VOCAB) abort();
        uint8_t *again = NULL;
        size_t n_again = 0;
        if (srv_session_encode(FP, &in, &again, &n_again) || n_again != n || memcmp(again, b, n)) abort();
        free(again);
        st_kv *kv = make_pool(ctx);
        st_kv_stats before, after;
        st_kv_get_stats(kv, &before);
        st_kv_io io;
        st_kv_io_mem_reader(&io, in.snap, in.n_snap);
        st_kv_seq_id seqs[8];
        int ns = 0;
        if (st_kv_snapshot_read(kv, &io, seqs, 8, &ns) == 0) {
            for (int j = 0; j < ns; j++) {
                int64_t len = 0;
                if (st_kv_seq_len(kv, seqs[j], &len)) abort();
                for (int64_t p = 0; p < len && p < 64; p++) {
                    int32_t t;
                    if (st_kv_seq_tokens(kv, seqs[j], p, 1, &t)) abort();
                }
                if (st_kv_seq_free(kv, seqs[j])) abort();
            }
        } else {
            st_kv_get_stats(kv, &after);
            if (after.pages_used != before.pages_used || after.n_seqs != before.n_seqs) abort();
        }
        st_kv_destroy(kv);
        free(in.tokens);
    }
    free(gen);
    st_ctx_destroy(ctx);
    return 0;
}
