/* libFuzzer target for the KV snapshot reader (st_kv_snapshot_read).
 *
 * The input is read as a snapshot into a small pool that already holds a sequence of its
 * own. Whatever the bytes, the reader must either succeed (then the pool must pass its
 * invariant check, and the restored sequences must be readable and re-serializable) or
 * fail leaving the pool exactly as it was. Seeds: valid snapshots are made by the writer
 * when the corpus is empty (LLVMFuzzerInitialize cannot add to it, so the first input of
 * 1 byte 'S' is expanded into a valid snapshot instead).
 *
 * Every record ends in a checksum, so blind mutations stop at the first one: from an empty
 * corpus the target's coverage stayed where a bad checksum is reported (150 s, 5 inputs).
 * An input starting with 'P' is therefore a patch of that valid snapshot instead: 3-byte
 * edits (u16 offset, taken modulo the length, and a byte XORed in there), an optional last
 * byte b that cuts the stream to len * b / 256, then every checksum the edited structure
 * still frames is recomputed (records walked with the sizes their own, possibly edited,
 * header and fields give), so the field checks behind the checksums see the edits. */
#include "fuzz_patch.h"
#include "strata/kv.h"
#include "kv/kv_int.h"

#include <stdlib.h>
#include <xxhash.h>

static uint64_t rd64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static uint32_t rd32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Recomputes the checksums of the records that fit in b[0..len) as docs/FORMATS.md frames
 * them, then the trailer's hash of those checksums; stops where the framing runs out. */
static void fix_checksums(uint8_t *b, size_t len) {
    if (len < 80) return;
    uint64_t sums[64];
    int n_sums = 0;
    const uint64_t L = rd32(b + 16), H = rd32(b + 20), D = rd32(b + 24), P = rd32(b + 28);
    const uint64_t flags = rd32(b + 36), payload = rd64(b + 40);
    const uint64_t n_seqs = rd32(b + 64), n_pages = rd32(b + 68);
    uint64_t h = XXH3_64bits(b, 72);
    memcpy(b + 72, &h, 8);
    sums[n_sums++] = h;
    if (L > 64 || H > 64 || D > 1024 || P > 256 || payload > (1u << 20)) return;
    const uint64_t B = flags & 2 ? L * H * 2 * D * 4 : 0, W = (P + 63) / 64;
    const uint64_t A = flags & 4 ? L * 4 : 0; /* the attention ledger */
    const uint64_t page_rec = 48 + 4 * P + L * payload + B + A + 8;
    size_t off = 80;
    for (uint64_t i = 0; i < n_pages && n_sums < 63; i++, off += page_rec) {
        if (off + page_rec > len) return;
        h = XXH3_64bits(b + off, page_rec - 8);
        memcpy(b + off + page_rec - 8, &h, 8);
        sums[n_sums++] = h;
    }
    for (uint64_t j = 0; j < n_seqs && n_sums < 63; j++) {
        if (off + 32 > len) return;
        const uint64_t slen = rd64(b + off + 8), n_ent = rd64(b + off + 16);
        if (slen > len || n_ent > len) return;
        const uint64_t rec = 32 + n_ent * (16 + 8 * W) + 4 * slen + 8;
        if (off + rec > len) return;
        h = XXH3_64bits(b + off, rec - 8);
        memcpy(b + off + rec - 8, &h, 8);
        sums[n_sums++] = h;
        off += rec;
    }
    if (off + 16 > len) return;
    h = XXH3_64bits(sums, (size_t)n_sums * 8);
    memcpy(b + off + 8, &h, 8);
}

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
    } else if (size >= 1 && data[0] == 'P') {
        valid_snapshot(ctx, &gen);
        const size_t len = fuzz_patch(gen.buf, gen.len, data + 1, size - 1);
        fix_checksums(gen.buf, len);
        data = gen.buf;
        size = len;
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
