/* libFuzzer target for the KV snapshot reader (st_kv_snapshot_read).
 *
 * The input is read as a snapshot into a small pool that already holds a sequence of its
 * own. Whatever the bytes, the reader must either succeed (then the pool must pass its
 * invariant check, and the restored sequences must be readable and re-serializable) or
 * fail leaving the pool exactly as it was. Seeds: valid snapshots are made by the writer
 * when the corpus is empty (LLVMFuzzerInitialize cannot add to it, so the first input of
 * 1 byte 'S' is expanded into a valid snapshot instead). */
#include "strata/kv.h"
#include "kv/kv_int.h"

#include <stdlib.h>

static st_kv *make_pool(st_ctx *ctx, int n_pages) {
    st_kv_params p = st_kv_default_params();
    p.n_layer = 2;
    p.n_kv_head = 1;
    p.head_dim = 2;
    p.page_size = 8;
    p.type = ST_TYPE_F32;
    p.n_pages = n_pages;
    p.max_seqs = 8;
    st_kv *kv = NULL;
    if (st_kv_create(ctx, &p, &kv)) abort();
    return kv;
}

static void fill(st_kv *kv, st_kv_seq_id s, int n, const int32_t *toks) {
    float k[2 * 32 * 2], v[2 * 32 * 2];
    for (int i = 0; i < 2 * n * 2; i++) k[i] = (float)i, v[i] = -(float)i;
    if (st_kv_seq_append(kv, s, n, toks, k, v)) abort();
}

/* A valid snapshot of three sequences (keyed, forked, with masks and a hole). */
static void valid_snapshot(st_ctx *ctx, st_kv_io *io) {
    st_kv *kv = make_pool(ctx, 16);
    int32_t toks[32];
    for (int i = 0; i < 32; i++) toks[i] = i * 7;
    st_kv_seq_id ids[3];
    st_kv_seq_create(kv, &ids[0]);
    fill(kv, ids[0], 19, toks);
    st_kv_seq_remove(kv, ids[0], 1, 3);
    st_kv_seq_fork(kv, ids[0], &ids[1]);
    fill(kv, ids[1], 5, toks + 19);
    st_kv_seq_create(kv, &ids[2]);
    fill(kv, ids[2], 20, NULL);
    st_kv_seq_remove(kv, ids[2], 0, 8);
    st_kv_io_mem_writer(io);
    if (st_kv_snapshot_write(kv, ids, 3, -1, io)) abort();
    st_kv_destroy(kv);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_ctx *ctx = NULL;
    if (st_ctx_create(&(st_ctx_params){.n_threads = 1, .isa = 0}, &ctx)) abort();
    st_kv_io gen = {0};
    if (size == 1 && data[0] == 'S') {
        valid_snapshot(ctx, &gen);
        data = gen.buf;
        size = gen.len;
    }
    st_kv *kv = make_pool(ctx, 12);
    st_kv_seq_id own;
    st_kv_seq_create(kv, &own);
    fill(kv, own, 9, NULL);
    st_kv_stats before, after;
    st_kv_get_stats(kv, &before);
    st_kv_io in;
    st_kv_io_mem_reader(&in, data, size);
    st_kv_seq_id out[8];
    int n = 0;
    int rc = st_kv_snapshot_read(kv, &in, out, 8, &n);
    char msg[256];
    if (kv_check(kv, msg, sizeof msg)) abort();
    st_kv_get_stats(kv, &after);
    /* whatever happened, the pool's own sequence reads back what fill wrote: records are
     * staged in free frames, never in the frames of live pages */
    for (int l = 0; l < 2; l++)
        for (int p = 0; p < 9; p++) {
            float k[2], v[2];
            if (st_kv_read(kv, own, l, p, 1, k, v)) abort();
            for (int d = 0; d < 2; d++)
                if (k[d] != (float)((l * 9 + p) * 2 + d) || v[d] != -k[d]) abort();
        }
    if (rc != 0) {
        if (n != 0 || memcmp(&before, &after, sizeof before) != 0) abort();
    } else {
        for (int j = 0; j < n; j++) {
            int64_t len;
            if (st_kv_seq_len(kv, out[j], &len)) abort();
            float k[4], v[4];
            for (int64_t p = 0; p < len; p++) {
                int valid;
                st_kv_seq_valid(kv, out[j], p, &valid);
                if (valid && st_kv_read(kv, out[j], 1, p, 1, k, v)) abort();
            }
        }
        st_kv_io w;
        st_kv_io_mem_writer(&w);
        if (st_kv_snapshot_write(kv, out, n, -1, &w)) abort();
        st_kv_io_mem_release(&w);
        for (int j = 0; j < n; j++) st_kv_seq_free(kv, out[j]);
        if (kv_check(kv, msg, sizeof msg)) abort();
    }
    st_kv_destroy(kv);
    st_kv_io_mem_release(&gen);
    st_ctx_destroy(ctx);
    return 0;
}
