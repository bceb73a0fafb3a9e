/* KV snapshots: a versioned, checksummed stream of sequences (page tables, masks, token
 * ids), their pages (contents, prefix keys, ledger) — byte layout in docs/FORMATS.md,
 * "KV snapshot". The reader stages everything where nothing can see it (page contents in
 * the frames of free pages, or private memory) and checks it all (every count against a
 * named limit, every record's XXH3-64 and Quest box, the trailer) before it changes the
 * pool, so a rejected stream changes nothing. Memory it allocates grows only with the bytes
 * actually read, so a tiny stream claiming huge counts cannot make it allocate much. */
#include "kv_int.h"

#include <stdlib.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the snapshot format stores page contents in host order: little-endian hosts only"
#endif

#define SNAP_MAGIC "STKVSNAP"
#define SNAP_END_MAGIC "STKVEND1"
/* 2: keys stored dim-major (K^T) in the page payload; a version 1 stream (slot-major keys)
 * would read as scrambled keys, so it is refused rather than converted silently. */
#define SNAP_VERSION 2u
#define SNAP_HEADER_BYTES 80u
#define SNAP_PAGE_HEAD 48u  /* bytes of a page record before its tokens */
#define SNAP_SEQ_HEAD 32u   /* bytes of a sequence record before its entries */
#define SNAP_FLAG_CUT 1u
#define SNAP_FLAG_BOXES 2u /* page records end with the Quest key boxes */
#define SNAP_FLAG_LEDGER 4u /* ... then with the attention ledger (f32 per layer) */
#define SNAP_PF_SEALED 1u
#define SNAP_PF_KEY 2u
#define SNAP_PF_BOX 4u

/* ---- little-endian buffer ------------------------------------------------------------ */
typedef struct wbuf {
    uint8_t *b;
    size_t n, cap;
    int oom;
} wbuf;

static void put(wbuf *w, const void *p, size_t n) {
    if (w->oom || n == 0) return;
    if (w->n + n > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap < w->n + n) cap *= 2;
        uint8_t *b = realloc(w->b, cap);
        if (!b) {
            w->oom = 1;
            return;
        }
        w->b = b;
        w->cap = cap;
    }
    if (p) memcpy(w->b + w->n, p, n);
    else memset(w->b + w->n, 0, n); /* room, filled in place by the caller */
    w->n += n;
}
static void put_u32(wbuf *w, uint32_t v) { put(w, &v, 4); }
static void put_u64(wbuf *w, uint64_t v) { put(w, &v, 8); }
static uint32_t get_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get_u64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static int mask_words(int P) { return (P + 63) / 64; }
static size_t layer_payload(const st_kv *kv) {
    return 2 * kv->g.kv_bytes + (kv->p.type == ST_TYPE_Q8_0 ? 8u * kv->p.n_kv_head : 0);
}
static size_t page_record_bytes(const st_kv *kv, int boxes, int ledger) {
    return SNAP_PAGE_HEAD + 4u * kv->p.page_size + kv->p.n_layer * layer_payload(kv) +
           (boxes ? kv_quest_box_bytes(kv) : 0) + (ledger ? 4u * kv->p.n_layer : 0) + 8;
}
static size_t entry_bytes(int P) { return 16 + 8u * mask_words(P); }

/* Appends the record checksum and writes the record. */
static int flush_record(st_kv_io *io, wbuf *w, uint64_t *sums, size_t i) {
    if (w->oom) return ST_E_NOMEM;
    uint64_t h = XXH3_64bits(w->b, w->n);
    put_u64(w, h);
    if (w->oom) return ST_E_NOMEM;
    sums[i] = h;
    int rc = io->write(io, w->b, w->n);
    w->n = 0;
    return rc;
}

/* ---- writer ---------------------------------------------------------------------------- */

/* A page record. The ledger records the residency as it is: a page not in RAM (on disk,
 * or never touched) is read one layer block at a time into kv->rd_blk, as st_kv_read
 * does, so writing a snapshot moves nothing between the tiers. Returns 0 or the read's
 * error (the page then fails, as on any read). */
static int put_page(st_kv *kv, wbuf *w, int32_t idx, int32_t id) {
    const kv_page *pg = &kv->pages[id];
    const int P = kv->p.page_size;
    const int in_ram = kv_page_in_ram(kv, id);
    put_u32(w, (uint32_t)idx);
    const int box = pg->sealed && kv->qbox_ok[id];
    uint8_t b[4] = {(uint8_t)in_ram, (uint8_t)kv->p.type,
                    (uint8_t)((pg->sealed ? SNAP_PF_SEALED : 0) | (pg->has_key ? SNAP_PF_KEY : 0) |
                              (box ? SNAP_PF_BOX : 0)),
                    0};
    put(w, b, 4);
    put_u64(w, pg->last_use);
    st_kv_key zero;
    memset(&zero, 0, sizeof zero);
    put(w, pg->has_key ? pg->key.b : zero.b, 16);
    put(w, pg->has_key ? pg->parent.b : zero.b, 16);
    for (int j = 0; j < P; j++)
        put_u32(w, pg->has_key ? (uint32_t)kv->page_tokens[(size_t)id * P + j] : UINT32_MAX);
    for (int l = 0; l < kv->p.n_layer; l++) {
        const uint8_t *blk;
        int rc = kv_block_bytes(kv, id, l, kv->rd_blk, &blk);
        if (rc) return rc;
        put(w, blk, kv->g.kv_bytes);
        put(w, blk + kv->g.v_offset, kv->g.kv_bytes);
        if (kv->p.type == ST_TYPE_Q8_0) put(w, blk + kv->g.scale_offset, 8u * kv->p.n_kv_head);
    }
    const size_t nb = kv_quest_box_bytes(kv);
    put(w, NULL, nb); /* room for the boxes, converted to f32 in place below */
    if (!w->oom) kv_quest_get_box(kv, id, w->b + w->n - nb);
    /* the attention ledger: each block's score as of now (zero without the SSD tier) */
    for (int l = 0; l < kv->p.n_layer; l++) {
        float sc = kv->blk ? kv_blk_score(kv, kv_blk(kv, id, l)) : 0.0f;
        put(w, &sc, 4);
    }
    return 0;
}

static void put_seq(const st_kv *kv, wbuf *w, uint32_t idx, const kv_seq *s, int64_t cut,
                    const int32_t *snap_idx) {
    const int P = kv->p.page_size;
    int64_t len = cut < s->n_ent ? cut * P : s->len;
    int64_t seal_from = s->seal_from < cut ? s->seal_from : cut;
    put_u32(w, idx);
    put_u32(w, 0);
    put_u64(w, (uint64_t)len);
    put_u64(w, (uint64_t)cut);
    put_u64(w, (uint64_t)seal_from);
    for (int64_t i = 0; i < cut; i++) {
        const kv_entry *e = &s->ent[i];
        put_u32(w, (uint32_t)(e->page >= 0 ? snap_idx[e->page] : -1));
        put_u32(w, (uint32_t)e->n_tokens);
        put_u32(w, (uint32_t)e->has_mask);
        put_u32(w, 0);
        put(w, e->mask, 8u * mask_words(P));
    }
    put(w, s->tokens, (size_t)len * 4);
}

int st_kv_snapshot_write(st_kv *kv, const st_kv_seq_id *seqs, int n_seqs, int64_t max_pages,
                         st_kv_io *io) {
    KV_CHECK_ON_RETURN(kv);
    if (!io || !io->write || n_seqs < 0 || (n_seqs > 0 && !seqs) || n_seqs > ST_KV_MAX_SEQS)
        return st_seterr(kv->ctx, ST_E_INVAL, "kv snapshot: bad arguments (io, seqs, n_seqs %d)",
                         n_seqs);
    kv_seq **ss = calloc((size_t)n_seqs + 1, sizeof *ss);
    int32_t *snap_idx = malloc((size_t)kv->n_pages * sizeof *snap_idx);
    int32_t *order = malloc((size_t)kv->n_pages * sizeof *order);
    int64_t *cut = calloc((size_t)n_seqs + 1, sizeof *cut);
    uint64_t *sums = malloc(((size_t)kv->n_pages + (size_t)n_seqs + 1) * sizeof *sums);
    wbuf w = {0};
    int rc = 0;
    if (!ss || !snap_idx || !order || !cut || !sums) {
        rc = st_seterr(kv->ctx, ST_E_NOMEM, "kv snapshot: out of memory");
        goto done;
    }
    for (int j = 0; j < n_seqs; j++) {
        if ((rc = kv_seq_get_ok(kv, seqs[j], &ss[j])) != 0) goto done;
        for (int i = 0; i < j; i++)
            if (ss[i] == ss[j]) {
                rc = st_seterr(kv->ctx, ST_E_INVAL, "kv snapshot: sequence %lld listed twice",
                               (long long)seqs[j]);
                goto done;
            }
    }
    for (int32_t i = 0; i < kv->n_pages; i++) snap_idx[i] = -1;
    int32_t n_snap = 0;
    uint32_t flags = 0;
    for (int j = 0; j < n_seqs; j++) {
        const kv_seq *s = ss[j];
        cut[j] = s->n_ent;
        for (int64_t i = 0; i < s->n_ent; i++) {
            int32_t pg = s->ent[i].page;
            if (pg < 0 || snap_idx[pg] >= 0) continue;
            if (max_pages >= 0 && n_snap >= max_pages) {
                cut[j] = i;
                flags |= SNAP_FLAG_CUT;
                break;
            }
            snap_idx[pg] = n_snap;
            order[n_snap++] = pg;
        }
    }
    /* header */
    put(&w, SNAP_MAGIC, 8);
    put_u32(&w, SNAP_VERSION);
    put_u32(&w, SNAP_HEADER_BYTES);
    put_u32(&w, (uint32_t)kv->p.n_layer);
    put_u32(&w, (uint32_t)kv->p.n_kv_head);
    put_u32(&w, (uint32_t)kv->p.head_dim);
    put_u32(&w, (uint32_t)kv->p.page_size);
    put_u32(&w, (uint32_t)kv->p.type);
    put_u32(&w, flags | SNAP_FLAG_BOXES | SNAP_FLAG_LEDGER);
    put_u64(&w, layer_payload(kv));
    put(&w, kv->p.fingerprint.b, 16);
    put_u32(&w, (uint32_t)n_seqs);
    put_u32(&w, (uint32_t)n_snap);
    size_t k = 0;
    if ((rc = flush_record(io, &w, sums, k++)) != 0) goto io_err;
    for (int32_t i = 0; i < n_snap; i++) {
        if ((rc = put_page(kv, &w, i, order[i])) != 0) goto done;
        if ((rc = flush_record(io, &w, sums, k++)) != 0) goto io_err;
    }
    for (int j = 0; j < n_seqs; j++) {
        put_seq(kv, &w, (uint32_t)j, ss[j], cut[j], snap_idx);
        if ((rc = flush_record(io, &w, sums, k++)) != 0) goto io_err;
    }
    put(&w, SNAP_END_MAGIC, 8);
    put_u64(&w, XXH3_64bits(sums, k * sizeof *sums));
    rc = w.oom ? ST_E_NOMEM : io->write(io, w.b, w.n);
io_err:
    if (rc) rc = st_seterr(kv->ctx, rc, "kv snapshot: write failed: %s", st_strerror(rc));
done:
    free(w.b);
    free(ss);
    free(snap_idx);
    free(order);
    free(cut);
    free(sums);
    return rc;
}

/* ---- reader ---------------------------------------------------------------------------- */

typedef struct rd {
    st_kv *kv;
    st_kv_io *io;
    uint64_t off; /* bytes consumed so far */
    int boxes;    /* header flag SNAP_FLAG_BOXES */
    int ledger;   /* header flag SNAP_FLAG_LEDGER */
} rd;

/* Reads exactly n bytes or fails: ST_E_FORMAT naming what was being read where. */
static int read_exact(rd *r, void *buf, size_t n, const char *what) {
    int64_t got = r->io->read(r->io, buf, n);
    if (got < 0)
        return st_seterr(r->kv->ctx, (int)got, "kv snapshot: read error at byte %llu (%s): %s",
                         (unsigned long long)r->off, what, st_strerror((int)got));
    if ((size_t)got < n)
        return st_seterr(r->kv->ctx, ST_E_FORMAT,
                         "kv snapshot: truncated at byte %llu: %s needs %zu more byte(s)",
                         (unsigned long long)(r->off + (uint64_t)got), what, n - (size_t)got);
    r->off += n;
    return 0;
}

/* Reads n bytes appended to w, in chunks, so memory follows the bytes that really exist. */
static int read_grow(rd *r, wbuf *w, uint64_t n, const char *what) {
    uint8_t chunk[65536];
    while (n > 0) {
        size_t c = n < sizeof chunk ? (size_t)n : sizeof chunk;
        int rc = read_exact(r, chunk, c, what);
        if (rc) return rc;
        put(w, chunk, c);
        if (w->oom) return st_seterr(r->kv->ctx, ST_E_NOMEM, "kv snapshot: out of memory");
        n -= c;
    }
    return 0;
}

static int check_sum(rd *r, const uint8_t *rec, size_t n, const char *what, uint64_t start,
                     uint64_t *sum) {
    uint64_t want = get_u64(rec + n), got = XXH3_64bits(rec, n);
    *sum = want;
    if (want != got)
        return st_seterr(r->kv->ctx, ST_E_CORRUPT,
                         "kv snapshot: %s at byte %llu: checksum %016llx, computed %016llx", what,
                         (unsigned long long)start, (unsigned long long)want,
                         (unsigned long long)got);
    return 0;
}

#define BAD(code, ...) return st_seterr(r->kv->ctx, code, __VA_ARGS__)

static int read_header(rd *r, uint32_t *n_seqs, uint32_t *n_pages, uint64_t *sum) {
    st_kv *kv = r->kv;
    uint8_t h[SNAP_HEADER_BYTES];
    int rc = read_exact(r, h, sizeof h, "header");
    if (rc) return rc;
    if (memcmp(h, SNAP_MAGIC, 8) != 0) BAD(ST_E_FORMAT, "kv snapshot: bad magic at byte 0");
    if (get_u32(h + 8) != SNAP_VERSION)
        BAD(ST_E_VERSION, "kv snapshot: version %u at byte 8, this build reads %u",
            get_u32(h + 8), SNAP_VERSION);
    if (get_u32(h + 12) != SNAP_HEADER_BYTES)
        BAD(ST_E_FORMAT, "kv snapshot: header_bytes %u at byte 12, want %u", get_u32(h + 12),
            SNAP_HEADER_BYTES);
    if ((rc = check_sum(r, h, SNAP_HEADER_BYTES - 8, "header", 0, sum)) != 0) return rc;
    static const char *const names[] = {"n_layer", "n_kv_head", "head_dim", "page_size"};
    const int want[] = {kv->p.n_layer, kv->p.n_kv_head, kv->p.head_dim, kv->p.page_size};
    for (int i = 0; i < 4; i++)
        if (get_u32(h + 16 + 4 * i) != (uint32_t)want[i])
            BAD(ST_E_FORMAT, "kv snapshot: %s %u at byte %d, the pool's is %d", names[i],
                get_u32(h + 16 + 4 * i), 16 + 4 * i, want[i]);
    if (get_u32(h + 32) != (uint32_t)kv->p.type)
        BAD(ST_E_TYPE, "kv snapshot: element type %u at byte 32, the pool's is %d (%s)",
            get_u32(h + 32), (int)kv->p.type, st_type_name(kv->p.type));
    if (get_u32(h + 36) & ~(SNAP_FLAG_CUT | SNAP_FLAG_BOXES | SNAP_FLAG_LEDGER))
        BAD(ST_E_FORMAT, "kv snapshot: unknown flags %#x at byte 36", get_u32(h + 36));
    r->boxes = (get_u32(h + 36) & SNAP_FLAG_BOXES) != 0;
    r->ledger = (get_u32(h + 36) & SNAP_FLAG_LEDGER) != 0;
    if (get_u64(h + 40) != layer_payload(kv))
        BAD(ST_E_FORMAT, "kv snapshot: layer payload %llu bytes at byte 40, want %zu",
            (unsigned long long)get_u64(h + 40), layer_payload(kv));
    if (memcmp(h + 48, kv->p.fingerprint.b, 16) != 0)
        BAD(ST_E_FORMAT, "kv snapshot: model fingerprint at byte 48 differs from the pool's "
            "(KV made by another model or configuration)");
    *n_seqs = get_u32(h + 64);
    *n_pages = get_u32(h + 68);
    if (*n_pages > (uint32_t)kv->n_pages)
        BAD(ST_E_LIMIT, "kv snapshot: n_pages %u at byte 68 exceeds the pool's %d pages",
            *n_pages, kv->n_pages);
    if (*n_seqs > (uint32_t)kv->p.max_seqs)
        BAD(ST_E_LIMIT, "kv snapshot: n_seqs %u at byte 64 exceeds max_seqs %d", *n_seqs,
            kv->p.max_seqs);
    return 0;
}

/* One page record into pg (ledger), tok[P], dst (the page's contents laid out as a frame:
 * g.page_bytes, layer blocks of g.layer_bytes) and box[box bytes] (*box_ok = 1 when the
 * record carries a box, which is checked against the keys here, while the record is in
 * cache). */
static int read_page(rd *r, uint32_t i, uint8_t *rec, kv_page *pg, int32_t *tok, uint8_t *dst,
                     uint8_t *box, uint8_t *box_ok, float *score, uint64_t *sum) {
    st_kv *kv = r->kv;
    const int P = kv->p.page_size;
    const size_t n = page_record_bytes(kv, r->boxes, r->ledger);
    const uint64_t start = r->off;
    int rc = read_exact(r, rec, n, "page record");
    if (rc) return rc;
    if ((rc = check_sum(r, rec, n - 8, "page record", start, sum)) != 0) return rc;
    if (get_u32(rec) != i)
        BAD(ST_E_FORMAT, "kv snapshot: page record at byte %llu has index %u, want %u",
            (unsigned long long)start, get_u32(rec), i);
    uint8_t resident = rec[4], type = rec[5], fl = rec[6];
    if (resident > 1 || rec[7] != 0 ||
        (fl & ~(SNAP_PF_SEALED | SNAP_PF_KEY | (r->boxes ? SNAP_PF_BOX : 0))) ||
        ((fl & (SNAP_PF_KEY | SNAP_PF_BOX)) && !(fl & SNAP_PF_SEALED)))
        BAD(ST_E_FORMAT, "kv snapshot: page %u at byte %llu: bad ledger bytes %u %u %u %u", i,
            (unsigned long long)start + 4, resident, type, fl, rec[7]);
    if (type != (uint8_t)kv->p.type)
        BAD(ST_E_TYPE, "kv snapshot: page %u at byte %llu: element type %u, the pool's is %d",
            i, (unsigned long long)start + 5, type, (int)kv->p.type);
    memset(pg, 0, sizeof *pg);
    pg->resident = 1;
    pg->sealed = (fl & SNAP_PF_SEALED) != 0;
    pg->has_key = (fl & SNAP_PF_KEY) != 0;
    pg->last_use = get_u64(rec + 8);
    memcpy(pg->key.b, rec + 16, 16);
    memcpy(pg->parent.b, rec + 32, 16);
    for (int j = 0; j < P; j++) {
        tok[j] = (int32_t)get_u32(rec + SNAP_PAGE_HEAD + 4 * j);
        if (pg->has_key ? tok[j] < 0 : tok[j] != -1)
            BAD(ST_E_FORMAT, "kv snapshot: page %u: token %d = %d at byte %llu", i, j, tok[j],
                (unsigned long long)(start + SNAP_PAGE_HEAD + 4 * j));
    }
    if (pg->has_key) {
        st_kv_key k = kv_key_compute(kv, &pg->parent, tok);
        if (memcmp(k.b, pg->key.b, 16) != 0)
            BAD(ST_E_CORRUPT, "kv snapshot: page %u: prefix key at byte %llu does not match "
                "its tokens", i, (unsigned long long)start + 16);
    } else if (memcmp(rec + 16, (const uint8_t[32]){0}, 32) != 0) {
        BAD(ST_E_FORMAT, "kv snapshot: page %u: key bytes set without the key flag", i);
    }
    const uint8_t *d = rec + SNAP_PAGE_HEAD + 4u * P;
    *box_ok = (fl & SNAP_PF_BOX) != 0;
    if (r->boxes) {
        const uint8_t *b = d + kv->p.n_layer * layer_payload(kv);
        const size_t nb = kv_quest_box_bytes(kv);
        memcpy(box, b, nb);
        for (size_t j = 0; !*box_ok && j < nb; j++)
            if (b[j])
                BAD(ST_E_FORMAT, "kv snapshot: page %u: box bytes set without the box flag", i);
    }
    for (int l = 0; l < kv->p.n_layer; l++) { /* no ledger (an older stream): all zero */
        score[l] = 0.0f;
        if (!r->ledger) continue;
        const size_t off = SNAP_PAGE_HEAD + 4u * P + kv->p.n_layer * layer_payload(kv) +
                           (r->boxes ? kv_quest_box_bytes(kv) : 0) + 4u * (size_t)l;
        memcpy(&score[l], rec + off, 4);
        if (!(score[l] >= 0.0f && score[l] < 3.0e38f))
            BAD(ST_E_FORMAT, "kv snapshot: page %u layer %d: attention score %g at byte %llu", i,
                l, (double)score[l], (unsigned long long)(start + off));
    }
    if (kv->p.type == ST_TYPE_Q8_0)
        for (int l = 0; l < kv->p.n_layer; l++)
            for (int h = 0; h < 2 * kv->p.n_kv_head; h++) {
                float sc;
                memcpy(&sc, d + l * layer_payload(kv) + 2 * kv->g.kv_bytes + 4u * h, 4);
                if (!(sc >= 0.0f && sc < 3.0e38f))
                    BAD(ST_E_FORMAT, "kv snapshot: page %u layer %d: q8_0 scale %d is %g", i,
                        l, h, (double)sc);
            }
    const size_t lp = layer_payload(kv);
    if (*box_ok) { /* a stored box must hold every key of its page (kv_quest.c, Q2) */
        char msg[160];
        if (kv_quest_check_box(kv, d, lp, box, msg, sizeof msg))
            BAD(ST_E_CORRUPT, "kv snapshot: page %u: Quest box %s", i, msg);
    }
    for (int l = 0; l < kv->p.n_layer; l++) {
        uint8_t *blk = dst + (size_t)l * kv->g.layer_bytes;
        const uint8_t *src = d + (size_t)l * lp;
        memcpy(blk, src, kv->g.kv_bytes);
        memcpy(blk + kv->g.v_offset, src + kv->g.kv_bytes, kv->g.kv_bytes);
        if (kv->p.type == ST_TYPE_Q8_0)
            memcpy(blk + kv->g.scale_offset, src + 2 * kv->g.kv_bytes, 8u * kv->p.n_kv_head);
    }
    return 0;
}

static int check_entry(rd *r, uint32_t j, int64_t i, const kv_entry *e, const kv_seq *s,
                       uint32_t n_pages) {
    const int P = r->kv->p.page_size;
    int64_t want = i + 1 < s->n_ent ? P : s->len - i * P;
    if (e->page < -1 || e->page >= (int32_t)n_pages || e->n_tokens != want ||
        (e->has_mask != 0 && e->has_mask != 1) || e->pad_ != 0)
        BAD(ST_E_FORMAT, "kv snapshot: sequence %u entry %lld: page %d n_tokens %d (want %lld) "
            "mask flag %d", j, (long long)i, e->page, e->n_tokens, (long long)want,
            e->has_mask);
    int any = 0;
    for (int b = 0; b < ST_KV_PAGE_SIZE_MAX; b++) {
        int bit = (int)((e->mask[b >> 6] >> (b & 63)) & 1);
        if (bit && (!e->has_mask || b >= e->n_tokens))
            BAD(ST_E_FORMAT, "kv snapshot: sequence %u entry %lld: mask bit %d set", j,
                (long long)i, b);
        any |= bit;
    }
    if (e->page >= 0 && e->has_mask && !any && e->n_tokens == P)
        BAD(ST_E_FORMAT, "kv snapshot: sequence %u entry %lld: fully removed page not a hole",
            j, (long long)i);
    return 0;
}

static int read_seq(rd *r, uint32_t j, uint32_t n_pages, wbuf *w, kv_seq *s, uint64_t *sum) {
    st_kv *kv = r->kv;
    const int P = kv->p.page_size;
    const uint64_t start = r->off;
    w->n = 0;
    int rc = read_grow(r, w, SNAP_SEQ_HEAD, "sequence record");
    if (rc) return rc;
    const uint8_t *h = w->b;
    uint64_t len = get_u64(h + 8), n_ent = get_u64(h + 16), seal_from = get_u64(h + 24);
    if (get_u32(h) != j || get_u32(h + 4) != 0 ||
        len > (uint64_t)ST_KV_MAX_PAGES * (uint64_t)P || n_ent != (len + P - 1) / P ||
        seal_from > n_ent)
        BAD(ST_E_FORMAT, "kv snapshot: sequence record %u at byte %llu: index %u, len %llu, "
            "n_ent %llu, seal_from %llu inconsistent", j, (unsigned long long)start,
            get_u32(h), (unsigned long long)len, (unsigned long long)n_ent,
            (unsigned long long)seal_from);
    const size_t eb = entry_bytes(P);
    if ((rc = read_grow(r, w, n_ent * eb + len * 4 + 8, "sequence record")) != 0) return rc;
    const size_t body = SNAP_SEQ_HEAD + n_ent * eb + len * 4;
    if ((rc = check_sum(r, w->b, body, "sequence record", start, sum)) != 0) return rc;
    s->len = (int64_t)len;
    s->n_ent = (int64_t)n_ent;
    s->seal_from = (int64_t)seal_from;
    if (kv_seq_grow(s, s->n_ent, s->len)) BAD(ST_E_NOMEM, "kv snapshot: out of memory");
    for (int64_t i = 0; i < s->n_ent; i++) {
        const uint8_t *p = w->b + SNAP_SEQ_HEAD + (size_t)i * eb;
        kv_entry *e = &s->ent[i];
        memset(e, 0, sizeof *e);
        e->page = (int32_t)get_u32(p);
        e->n_tokens = (int32_t)get_u32(p + 4);
        e->has_mask = (int32_t)get_u32(p + 8);
        e->pad_ = (int32_t)get_u32(p + 12);
        memcpy(e->mask, p + 16, 8u * mask_words(P));
        if ((rc = check_entry(r, j, i, e, s, n_pages)) != 0) return rc;
        if (e->page < 0) e->has_mask = 0;
    }
    if (len) memcpy(s->tokens, w->b + SNAP_SEQ_HEAD + n_ent * eb, len * 4);
    for (uint64_t t = 0; t < len; t++)
        if (s->tokens[t] < -1)
            BAD(ST_E_FORMAT, "kv snapshot: sequence %u: token id %d at position %llu", j,
                s->tokens[t], (unsigned long long)t);
    return 0;
}

/* Staged snapshot: everything read, nothing applied. Page i's contents are staged in the
 * frame of free page direct[i] for i < n_direct (kv_free_frame: no copy when applied), and
 * in data otherwise. */
typedef struct staged {
    uint32_t n_seqs, n_pages, n_direct;
    int32_t *direct; /* [n_direct] the first free pages, in free-list order */
    kv_page *pages;  /* [n_pages] ledger */
    int32_t *tokens; /* [n_pages][P] */
    uint8_t *data;   /* [n_pages - n_direct][g.page_bytes], frame layout (st_alloc_huge) */
    size_t data_bytes;
    kv_seq *seqs;    /* [n_seqs], entries name snapshot page indices */
    uint8_t *box;    /* [n_pages][kv_quest_box_bytes] Quest key boxes */
    uint8_t *box_ok; /* [n_pages] the record carried a box */
    float *score;    /* [n_pages][n_layer] attention ledger */
} staged;

static void staged_free(staged *st) {
    for (uint32_t j = 0; st->seqs && j < st->n_seqs; j++) {
        free(st->seqs[j].ent);
        free(st->seqs[j].tokens);
    }
    free(st->seqs);
    free(st->direct);
    free(st->pages);
    free(st->tokens);
    st_free_huge(st->data, st->data_bytes);
    free(st->box);
    free(st->box_ok);
    free(st->score);
}

/* Cross-record checks: every page referenced; keyed pages agree with the tokens of the
 * sequences that hold them. */
static int cross_check(rd *r, const staged *st) {
    const int P = r->kv->p.page_size;
    uint8_t *seen = calloc(st->n_pages + 1, 1);
    if (!seen) BAD(ST_E_NOMEM, "kv snapshot: out of memory");
    int rc = 0;
    for (uint32_t j = 0; j < st->n_seqs && !rc; j++) {
        const kv_seq *s = &st->seqs[j];
        for (int64_t i = 0; i < s->n_ent && !rc; i++) {
            const kv_entry *e = &s->ent[i];
            if (e->page < 0) continue;
            seen[e->page] = 1;
            const kv_page *pg = &st->pages[e->page];
            if (pg->has_key &&
                memcmp(s->tokens + i * P, st->tokens + (size_t)e->page * P,
                       (size_t)e->n_tokens * 4) != 0)
                rc = st_seterr(r->kv->ctx, ST_E_FORMAT, "kv snapshot: sequence %u page %lld: "
                               "token ids differ from keyed page %d's", j, (long long)i,
                               e->page);
        }
    }
    for (uint32_t i = 0; i < st->n_pages && !rc; i++)
        if (!seen[i])
            rc = st_seterr(r->kv->ctx, ST_E_FORMAT,
                           "kv snapshot: page %u is referenced by no sequence", i);
    free(seen);
    return rc;
}

/* Where page record i's contents are staged. */
static uint8_t *staged_dst(const st_kv *kv, const staged *st, uint32_t i) {
    if (i < st->n_direct) return kv_free_frame(kv, st->direct[i]);
    return st->data + (size_t)(i - st->n_direct) * kv->g.page_bytes;
}

/* Cannot fail: pages (kv_need), sequence slots and every allocation were secured first. */
static void apply(st_kv *kv, staged *st, int32_t *phys, st_kv_seq_id *out) {
    const int P = kv->p.page_size;
    uint64_t min_use = UINT64_MAX, base = kv->tick;
    for (uint32_t i = 0; i < st->n_pages; i++)
        if (st->pages[i].last_use < min_use) min_use = st->pages[i].last_use;
    for (uint32_t i = 0; i < st->n_pages; i++) {
        const kv_page *sp = &st->pages[i];
        const int direct = i < st->n_direct;
        const int32_t id = direct ? kv_page_alloc_filled(kv) : kv_page_alloc(kv);
        phys[i] = id;
        if (direct) {
            ST_ASSERT(id == st->direct[i]); /* the free list is as it was when taken */
        } else {
            /* The SSD tier: each block needs RAM in turn (earlier ones may be spilled for
             * it). A failed eviction loses this page: it and its sequences fail cleanly
             * (below). */
            int frc = 0;
            for (int l = 0; l < kv->p.n_layer && !frc; l++) {
                if ((frc = kv_fetch_blk(kv, id, l)) != 0) break;
                memcpy(kv_layer_data(kv, id, l), staged_dst(kv, st, i) + (size_t)l * kv->g.layer_bytes,
                       kv->g.layer_bytes);
                kv_dirty(kv, id, l);
            }
            if (frc) {
                if (kv->pages[id].resident != KV_RES_ERROR) kv_page_fail(kv, id, ST_E_NOSPACE);
                continue;
            }
        }
        kv_page *pg = &kv->pages[id];
        for (int l = 0; kv->blk && l < kv->p.n_layer; l++) { /* the ledger, as of now */
            kv_block *k = kv_blk(kv, id, l);
            k->score = st->score[(size_t)i * kv->p.n_layer + l];
            k->score_step = (uint32_t)kv->att_step;
        }
        pg->sealed = sp->sealed;
        pg->has_key = sp->has_key;
        if (st->box_ok[i]) {
            kv_quest_set_box(kv, id, st->box + i * kv_quest_box_bytes(kv));
        } else if (sp->sealed) { /* a stream without boxes: computed as at seal */
            if (kv_quest_seal(kv, id) != 0) continue; /* a lost block: the page failed */
        } else {
            kv_quest_set_box(kv, id, NULL);
        }
        pg->key = sp->key;
        pg->parent = sp->parent;
        /* Keep the ledger's order of use, placed after everything the pool already did. */
        uint64_t d = sp->last_use - min_use;
        pg->last_use = base + 1 + (d < (1ull << 40) ? d : (1ull << 40));
        if (pg->last_use > kv->tick) kv->tick = pg->last_use;
        if (pg->has_key) {
            memcpy(kv->page_tokens + (size_t)id * P, st->tokens + (size_t)i * P, (size_t)P * 4);
            if (kv_index_find(kv, &pg->key, &pg->parent, kv->page_tokens + (size_t)id * P) < 0)
                kv_index_insert(kv, id);
        }
    }
    for (uint32_t j = 0; j < st->n_seqs; j++) {
        kv_seq *s;
        int rc = kv_seq_new(kv, &s);
        ST_ASSERT(rc == 0); /* slots pre-checked */
        kv_seq *src = &st->seqs[j];
        s->ent = src->ent;
        s->tokens = src->tokens;
        s->cap_ent = src->cap_ent;
        s->cap_tok = src->cap_tok;
        s->n_ent = src->n_ent;
        s->len = src->len;
        s->seal_from = src->seal_from;
        src->ent = NULL;
        src->tokens = NULL;
        for (int64_t i = 0; i < s->n_ent; i++)
            if (s->ent[i].page >= 0) {
                s->ent[i].page = phys[s->ent[i].page];
                kv_page_ref(kv, s->ent[i].page);
                if (kv->pages[s->ent[i].page].resident == KV_RES_ERROR)
                    kv_seq_fail(kv, s, kv->pages[s->ent[i].page].err);
            }
        out[j] = s->id;
    }
    /* the sequences' references (kv_page_ref) set every score to now: the ledger's again */
    for (uint32_t i = 0; i < st->n_pages; i++) {
        uint64_t d = st->pages[i].last_use - min_use;
        kv->pages[phys[i]].last_use = base + 1 + (d < (1ull << 40) ? d : (1ull << 40));
    }
    for (uint32_t i = 0; i < st->n_pages; i++) kv_page_unref(kv, phys[i]); /* alloc's ref */
}

int st_kv_snapshot_read(st_kv *kv, st_kv_io *io, st_kv_seq_id *out_seqs, int max_seqs,
                        int *n_out) {
    KV_CHECK_ON_RETURN(kv);
    return kv_snapshot_read(kv, io, out_seqs, max_seqs, n_out, 0);
}

int kv_snapshot_read(st_kv *kv, st_kv_io *io, st_kv_seq_id *out_seqs, int max_seqs,
                     int *n_out, int free_only) {
    if (n_out) *n_out = 0;
    if (!io || !io->read || !n_out || max_seqs < 0 || (max_seqs > 0 && !out_seqs))
        return st_seterr(kv->ctx, ST_E_INVAL, "kv snapshot: bad arguments");
    rd r = {kv, io, 0, 0, 0};
    staged st;
    memset(&st, 0, sizeof st);
    uint64_t hsum = 0;
    int rc = read_header(&r, &st.n_seqs, &st.n_pages, &hsum);
    if (rc) return rc;
    if (st.n_seqs > (uint32_t)max_seqs)
        return st_seterr(kv->ctx, ST_E_LIMIT, "kv snapshot: %u sequences, room for %d ids",
                         st.n_seqs, max_seqs);
    if ((int64_t)st.n_seqs > kv->p.max_seqs - kv->n_seqs)
        return st_seterr(kv->ctx, ST_E_LIMIT, "kv snapshot: %u sequences but only %d more "
                         "may live (max_seqs %d)", st.n_seqs, kv->p.max_seqs - kv->n_seqs,
                         kv->p.max_seqs);
    if ((rc = kv_need(kv, st.n_pages, "snapshot restore")) != 0) return rc;
    if (free_only && (int64_t)st.n_pages > kv->n_free)
        return st_seterr(kv->ctx, ST_E_POOL_FULL, "kv snapshot: %u pages but only %lld free "
                         "(this restore evicts no cached page)", st.n_pages,
                         (long long)kv->n_free);
    /* Staging is bounded by the pool's own size: n_pages <= capacity was checked. Records
     * are staged straight into the frames of free pages where the pool has them (no tier),
     * so a restore copies each record once, from the read buffer into its frame, while the
     * record is still in cache; the rest (pages that need a cached page evicted, or a tier
     * frame) go to private memory and are copied into their frames only once all is
     * checked. Frames of free pages are scratch (kv_free_frame), so an error there changes
     * nothing either. */
    const int P = kv->p.page_size;
    st.n_direct = kv->spill ? 0 : (uint32_t)(kv->n_free < (int64_t)st.n_pages ? kv->n_free
                                                                             : st.n_pages);
    st.data_bytes = (size_t)(st.n_pages - st.n_direct) * kv->g.page_bytes;
    wbuf w = {0};
    uint8_t *rec = malloc(page_record_bytes(kv, r.boxes, r.ledger));
    uint64_t *sums = malloc(((size_t)st.n_pages + st.n_seqs + 1) * sizeof *sums);
    int32_t *phys = malloc((st.n_pages + 1) * sizeof *phys);
    st.seqs = calloc(st.n_seqs + 1, sizeof *st.seqs);
    st.pages = calloc(st.n_pages + 1, sizeof *st.pages);
    st.tokens = malloc(((size_t)st.n_pages * P + 1) * sizeof *st.tokens);
    st.direct = malloc((st.n_direct + 1) * sizeof *st.direct);
    if (st.data_bytes) st.data = st_alloc_huge(st.data_bytes); /* zero: frame padding */
    st.box = malloc((size_t)st.n_pages * kv_quest_box_bytes(kv) + 1);
    st.box_ok = calloc(st.n_pages + 1, 1);
    st.score = malloc(((size_t)st.n_pages * kv->p.n_layer + 1) * sizeof *st.score);
    if (!rec || !sums || !phys || !st.seqs || !st.pages || !st.tokens || !st.direct ||
        (st.data_bytes && !st.data) || !st.box || !st.box_ok || !st.score) {
        rc = st_seterr(kv->ctx, ST_E_NOMEM, "kv snapshot: out of memory staging %u pages",
                       st.n_pages);
        goto out;
    }
    for (int32_t i = 0, id = kv->free_head; i < (int32_t)st.n_direct; i++, id = kv->pages[id].next)
        st.direct[i] = id;
    size_t k = 0;
    sums[k++] = hsum;
    for (uint32_t i = 0; i < st.n_pages; i++, k++)
        if ((rc = read_page(&r, i, rec, &st.pages[i], st.tokens + (size_t)i * P,
                            staged_dst(kv, &st, i), st.box + i * kv_quest_box_bytes(kv),
                            &st.box_ok[i], st.score + (size_t)i * kv->p.n_layer, &sums[k])) != 0)
            goto out;
    for (uint32_t j = 0; j < st.n_seqs; j++, k++)
        if ((rc = read_seq(&r, j, st.n_pages, &w, &st.seqs[j], &sums[k])) != 0) goto out;
    uint8_t tr[16];
    const uint64_t tr_off = r.off;
    if ((rc = read_exact(&r, tr, sizeof tr, "trailer")) != 0) goto out;
    if (memcmp(tr, SNAP_END_MAGIC, 8) != 0) {
        rc = st_seterr(kv->ctx, ST_E_FORMAT, "kv snapshot: bad trailer magic at byte %llu",
                       (unsigned long long)tr_off);
        goto out;
    }
    if (get_u64(tr + 8) != XXH3_64bits(sums, k * sizeof *sums)) {
        rc = st_seterr(kv->ctx, ST_E_CORRUPT, "kv snapshot: trailer checksum at byte %llu "
                       "does not match the records", (unsigned long long)tr_off + 8);
        goto out;
    }
    if ((rc = cross_check(&r, &st)) != 0) goto out;
    apply(kv, &st, phys, out_seqs);
    *n_out = (int)st.n_seqs;
out:
    free(rec);
    free(sums);
    free(phys);
    free(w.b);
    staged_free(&st);
    return rc;
}
