/* libFuzzer target for the prefix-cache file reader (st_kv_prefix_import).
 *
 * The input is imported into a small pool that already caches a prompt of its own. Whatever
 * the bytes, the import must either succeed (then the pool passes its invariant check, the
 * imported chains can be attached and exported again) or fail leaving the pool as it was:
 * the same counters and its own prompt still cached.
 *
 * Seeds as for kv_snapshot_fuzz.c: the 1-byte input 'S' is expanded into a valid file of two
 * parts (four chains, two sequence slots), and an input starting with 'P' is a patch of it
 * (3-byte edits: u16 offset modulo the length and a byte XORed in there; an optional last
 * byte b cuts the file to len * b / 256), after which every checksum the edited structure
 * still frames is recomputed (the container header's, each part's records and trailer), so
 * the checks behind the checksums see the edits. */
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

/* Recomputes the checksums of the snapshot at b[off..len) (docs/FORMATS.md) and returns the
 * offset just past it, or 0 where the framing runs out. */
static size_t fix_part(uint8_t *b, size_t off, size_t len) {
    if (off + 80 > len) return 0;
    uint8_t *s = b + off;
    uint64_t sums[64];
    int n_sums = 0;
    const uint64_t L = rd32(s + 16), H = rd32(s + 20), D = rd32(s + 24), P = rd32(s + 28);
    const uint64_t flags = rd32(s + 36), payload = rd64(s + 40);
    const uint64_t n_seqs = rd32(s + 64), n_pages = rd32(s + 68);
    uint64_t h = XXH3_64bits(s, 72);
    memcpy(s + 72, &h, 8);
    sums[n_sums++] = h;
    if (L > 64 || H > 64 || D > 1024 || P > 256 || payload > (1u << 20)) return 0;
    const uint64_t B = flags & 2 ? L * H * 2 * D * 4 : 0, W = (P + 63) / 64;
    const uint64_t A = flags & 4 ? L * 4 : 0; /* the attention ledger */
    const uint64_t page_rec = 48 + 4 * P + L * payload + B + A + 8;
    off += 80;
    for (uint64_t i = 0; i < n_pages && n_sums < 63; i++, off += page_rec) {
        if (off + page_rec > len) return 0;
        h = XXH3_64bits(b + off, page_rec - 8);
        memcpy(b + off + page_rec - 8, &h, 8);
        sums[n_sums++] = h;
    }
    for (uint64_t j = 0; j < n_seqs && n_sums < 63; j++) {
        if (off + 32 > len) return 0;
        const uint64_t slen = rd64(b + off + 8), n_ent = rd64(b + off + 16);
        if (slen > len || n_ent > len) return 0;
        const uint64_t rec = 32 + n_ent * (16 + 8 * W) + 4 * slen + 8;
        if (off + rec > len) return 0;
        h = XXH3_64bits(b + off, rec - 8);
        memcpy(b + off + rec - 8, &h, 8);
        sums[n_sums++] = h;
        off += rec;
    }
    if (off + 16 > len) return 0;
    h = XXH3_64bits(sums, (size_t)n_sums * 8);
    memcpy(b + off + 8, &h, 8);
    return off + 16;
}

static void fix_checksums(uint8_t *b, size_t len) {
    if (len < 40) return;
    uint64_t h = XXH3_64bits(b, 32);
    memcpy(b + 32, &h, 8);
    size_t off = 40;
    for (uint32_t p = 0, n = rd32(b + 12); p < n && p < 16 && off; p++) off = fix_part(b, off, len);
}

static st_kv *make_pool(st_ctx *ctx, int n_pages) {
    st_kv_params p = st_kv_default_params();
    p.n_layer = 2;
    p.n_kv_head = 1;
    p.head_dim = 2;
    p.page_size = 8;
    p.type = ST_TYPE_F32;
    p.n_pages = n_pages;
    p.max_seqs = 2;
    st_kv *kv = NULL;
    if (st_kv_create(ctx, &p, &kv)) abort();
    return kv;
}

/* Runs toks[n] as a request: attach, append the rest, free. */
static void run(st_kv *kv, const int32_t *toks, int n) {
    st_kv_seq_id s;
    int64_t got = 0;
    if (st_kv_seq_create(kv, &s) || st_kv_prefix_attach(kv, s, toks, n, &got)) abort();
    float k[2 * 32 * 2], v[2 * 32 * 2];
    for (int i = 0; i < 2 * 32 * 2; i++) k[i] = (float)(i + got), v[i] = -(float)i;
    if (st_kv_seq_append(kv, s, n - got, toks + got, k, v) || st_kv_seq_free(kv, s)) abort();
}

/* Four chains (two sharing a root) through two sequence slots: a file of two parts. */
static void valid_file(st_ctx *ctx, st_kv_io *io) {
    st_kv *kv = make_pool(ctx, 32);
    int32_t t[4][27];
    for (int i = 0; i < 27; i++) {
        t[0][i] = i * 7;
        t[1][i] = i < 8 ? t[0][i] : 500 + i;
        t[2][i] = 900 + i;
        t[3][i] = 1300 + 2 * i;
    }
    for (int w = 0; w < 4; w++) run(kv, t[w], w == 3 ? 11 : 27);
    st_kv_io_mem_writer(io);
    if (st_kv_prefix_export(kv, io, -1, NULL)) abort();
    st_kv_destroy(kv);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_ctx *ctx = NULL;
    if (st_ctx_create(&(st_ctx_params){.n_threads = 1, .isa = 0}, &ctx)) abort();
    st_kv_io gen = {0};
    if (size == 1 && data[0] == 'S') {
        valid_file(ctx, &gen);
        data = gen.buf;
        size = gen.len;
    } else if (size >= 1 && data[0] == 'P') {
        valid_file(ctx, &gen);
        const size_t len = fuzz_patch(gen.buf, gen.len, data + 1, size - 1);
        fix_checksums(gen.buf, len);
        data = gen.buf;
        size = len;
    }
    st_kv *kv = make_pool(ctx, 24);
    int32_t own[19];
    for (int i = 0; i < 19; i++) own[i] = 3000 + i;
    run(kv, own, 19);
    st_kv_stats before, after;
    st_kv_get_stats(kv, &before);
    st_kv_io in;
    st_kv_io_mem_reader(&in, data, size);
    st_kv_prefix_counts c;
    int rc = st_kv_prefix_import(kv, &in, &c);
    char msg[256];
    if (kv_check(kv, msg, sizeof msg)) abort();
    st_kv_get_stats(kv, &after);
    int64_t n_own = 0;
    if (st_kv_prefix_lookup(kv, own, 19, &n_own) || n_own != 16) abort();
    if (rc != 0) {
        if (c.pages != 0 || memcmp(&before, &after, sizeof before) != 0) abort();
    } else {
        if (after.pages_cached != before.pages_cached + c.pages) abort();
        st_kv_io w;
        st_kv_io_mem_writer(&w);
        st_kv_prefix_counts c2;
        if (st_kv_prefix_export(kv, &w, -1, &c2)) abort();
        if (c2.pages > after.pages_cached) abort();
        st_kv_io_mem_release(&w);
        if (kv_check(kv, msg, sizeof msg)) abort();
    }
    st_kv_destroy(kv);
    st_kv_io_mem_release(&gen);
    st_ctx_destroy(ctx);
    return 0;
}
