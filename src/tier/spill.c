/*
 * The spill store: the cold tier of the KV page pool.
 *
 * ==== Design ===========================================================================
 *
 * Division of labour. The KV page pool owns PAGE states: which physical page holds
 * which (sequence, layer, logical page), refcounts, pins, LRU. This store owns SLOTS of
 * the spill file and the I/O on them. A page slab (one page's K and V for one layer) is
 * spilled into one slot; the pool remembers (slot, key, gen) for the page and hands them
 * back to read it. The store never interprets the bytes (except cold coding).
 *
 * Page states (kept by the pool) and the function that moves each edge:
 *
 *                 pool alloc                 append / CoW / truncate
 *     FREE ------------------> RESIDENT ----------------------------> DIRTY
 *       ^                      |  ^   ^                                 |
 *       | pool free            |  |   | st_spill_read* ok               | evict:
 *       | (st_spill_release    |  |   |                                 | st_spill_write
 *       |  if it has a slot)   |  |  LOADING <-- st_spill_read_submit -+ |
 *       |                      |  |                                   | v
 *       +----------------------+  +-- evict clean: no I/O at all    ON DISK <--- WRITING
 *                                     (slot still valid) ---------->   |    (staging copy;
 *                                                                      |     I/O thread)
 *                                                   st_spill_read* fails: ERROR
 *
 *   FREE      no data. RESIDENT: in RAM, and if it has a slot the slot holds the same
 *   bytes (clean). DIRTY: in RAM, slot absent or stale (the pool releases a stale slot
 *   with st_spill_release before the next spill). WRITING: st_spill_write has copied
 *   the bytes into a staging buffer and returned a slot, so the RAM page is reusable at
 *   once; the store finishes the write behind (the pool may treat WRITING as ON DISK:
 *   a read of a WRITING slot is served from the staging copy). ON DISK: only the slot
 *   holds the data. LOADING: a read was submitted; the destination page is pinned until
 *   st_spill_read_wait. ERROR: a write or read failed or a checksum did not match; the
 *   pool fails the sequences that reference the page (ST_E_CORRUPT or the I/O error),
 *   never computes from it.
 *
 * Slot states (kept here, st_slot_state in tier_int.h):
 *
 *     FREE --st_spill_write--> WRITING --I/O thread ok--> STORED --st_spill_release--> FREE
 *                                 |   \--I/O thread err--> FAILED --st_spill_release--> FREE
 *                                 +--st_spill_release: release_pending, FREE on completion
 *     STORED --failed fsync (st_spill_flush, do_sync)--> FAILED(-EIO)
 *
 * Invariants (asserted where cheap):
 *   1. A slot index < hwm is either on the free list (state FREE) or allocated; never
 *      both. n_used + n_free == hwm.
 *   2. WRITING <=> stage >= 0 and stage[stage].slot == this slot and busy. A staging
 *      buffer is released only by the I/O thread's completion, under mu, so a reader
 *      holding mu may copy from it.
 *   3. A slot is reused only after it is FREE, so a write in flight can never land on a
 *      reallocated slot (release while WRITING defers the free to the completion).
 *   4. Every byte returned by a read matched the XXH3-64 recorded when it was written;
 *      otherwise the caller gets ST_E_CORRUPT and a zeroed buffer, never the bytes.
 *   5. Errors are values: a failed write is kept on its slot until released; the first
 *      error since the last flush is also returned by st_spill_flush. The I/O thread
 *      never aborts and never calls exit().
 *   6. n_used <= min(max_slots, fs_cap): the disk budget and, once the filesystem said
 *      ENOSPC, the file extent reached then (only reused slots are written afterwards).
 *
 * Why the checksum lives in RAM (a side table) and not in a per-slot header: O_DIRECT
 * needs every I/O 4096-aligned, so an in-file header would cost a whole 4 KiB block per
 * slot (up to 2x for small slabs), or a read-modify-write of shared header blocks. The
 * spill file never outlives its process (gc deletes it; nothing recovers from it), so
 * the side table is the authority anyway. It detects bit rot, lost and misdirected
 * writes alike, because the expected value never went through the disk.
 *
 * Parts (ranged reads) and the part-major layout. The KV pool opens the store with
 * n_parts = n_layer: a payload is n_parts equal parts (a page's layer blocks), each coded and
 * checksummed on its own and given B = slot_bytes / n_parts bytes (whole 4096-byte blocks) of
 * the file. st_spill_rd.part_first/part_count read a run of parts and verify each part's
 * checksum, which is what lets attention stream one layer of a cold page without reading the
 * others. Where the parts live decides the speed of that stream: dense decode reads layer l of
 * every cold page, one layer at a time. With whole slots side by side (page-major) that is one
 * small read per page, strided by the slot size: IOPS-bound (docs/PERFORMANCE.md, SSD
 * tier). So slots are grouped in extents of G slots, and an
 * extent stores part 0 of its G slots, then part 1 of them, ... (st_spill_part_off,
 * docs/FORMATS.md): layer l of consecutive slots is one contiguous range, and a batch of
 * them coalesces into reads of up to max_read_bytes. Slots are handed out from the hwm in
 * order and the pool spills a sequence's pages oldest first, so a sequence's pages mostly get
 * consecutive slots. The price: a whole-page read or write is n_parts I/Os (coalesced across
 * consecutive slots in a batch), and a cold-coded part still takes whole blocks on disk. G is
 * ST_SPILL_EXTENT_RUN / B, so a run is long enough for any coalesced read, and the file is
 * sparse: unused slots' regions are never written. The side table holds np checksums per
 * slot (st_spill.psum), copied into the read ticket at submit (the table may move).
 *
 * The pool's view of the same machine (the integrated state machine is the essay at the
 * top of src/kv/kv_pool.c): WRITING is a sub-state of the pool's DISK (a read of a WRITING
 * slot is served from the staging copy), LOADING is a page whose frame is reserved while a
 * st_spill_read / st_spill_read_batch runs, and the store's FAILED slot becomes the pool's
 * ERROR page, which fails its sequences.
 *
 * Threads: every public function is thread-safe (one mutex, mu). The I/O thread drains
 * the write queue and the read tickets in rounds, executing a round without mu: one
 * io_uring submission for the whole round when available, else pread/pwrite loops
 * through st_io. Reads are verified and decoded on the I/O thread, so a prefetch costs
 * the caller nothing until st_spill_read_wait.
 */
#include "tier_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

st_spill_params st_spill_default_params(size_t slot_bytes) {
    st_spill_params p;
    memset(&p, 0, sizeof p);
    p.slot_bytes = slot_bytes;
    return p;
}

static int default_open(void *arg, const char *path, int direct, st_io **out) {
    return st_io_fd_open(path, O_RDWR | O_CREAT | O_TRUNC | (direct ? O_DIRECT : 0), 0600, out);
}

/* The header (layout in docs/FORMATS.md, "spill file"); also the O_DIRECT probe. */
static int write_header(st_spill *s) {
    uint8_t *h = st_alloc_aligned(ST_SPILL_HEADER_BYTES, ST_SPILL_ALIGN);
    if (!h) return ST_E_NOMEM;
    memset(h, 0, ST_SPILL_HEADER_BYTES);
    uint32_t v32;
    uint64_t v64;
    memcpy(h, ST_SPILL_MAGIC, 8);
    v32 = ST_SPILL_VERSION, memcpy(h + 8, &v32, 4);
    v32 = ST_SPILL_HEADER_BYTES, memcpy(h + 12, &v32, 4);
    v64 = s->slot_bytes, memcpy(h + 16, &v64, 8);
    v64 = ST_SPILL_HEADER_BYTES, memcpy(h + 24, &v64, 8);
    v64 = (uint64_t)time(NULL), memcpy(h + 32, &v64, 8);
    v32 = (uint32_t)getpid(), memcpy(h + 40, &v32, 4);
    v32 = (uint32_t)s->p.cold, memcpy(h + 44, &v32, 4);
    v32 = s->np, memcpy(h + 48, &v32, 4);
    v32 = s->extent, memcpy(h + 52, &v32, 4);
    v64 = XXH3_64bits(h, 56), memcpy(h + 56, &v64, 8);
    int rc = st_io_pwrite_full(s->io, h, ST_SPILL_HEADER_BYTES, 0);
    st_free_aligned(h);
    return rc;
}

static void why(st_spill *s, const char *fmt, const char *arg) {
    size_t n = strlen(s->why);
    if (n + 2 >= sizeof s->why) return;
    snprintf(s->why + n, sizeof s->why - n, fmt, n ? "; " : "", arg);
}

static int check_params(const st_spill_params *p, st_ctx *ctx) {
    if (!p || p->slot_bytes == 0 || p->slot_bytes > ST_SPILL_MAX_SLOT_BYTES)
        return st_seterr(ctx, ST_E_INVAL, "spill: slot size must be 1..%zu bytes",
                         ST_SPILL_MAX_SLOT_BYTES);
    if (p->queue_depth < 0 || p->queue_depth > ST_SPILL_MAX_QUEUE)
        return st_seterr(ctx, ST_E_INVAL, "spill: queue depth %d not in 0..%d", p->queue_depth,
                         ST_SPILL_MAX_QUEUE);
    if ((unsigned)p->cold > ST_COLD_Q4) return st_seterr(ctx, ST_E_INVAL, "spill: bad cold type");
    if (p->n_parts > ST_SPILL_MAX_PARTS)
        return st_seterr(ctx, ST_E_INVAL, "spill: %u parts per payload (limit %d)", p->n_parts,
                         ST_SPILL_MAX_PARTS);
    return 0;
}

/* Everything but the file: params, side table, staging, thread. */
static int spill_new(const st_spill_params *p, st_spill **out) {
    st_spill *s = calloc(1, sizeof *s);
    if (!s) return ST_E_NOMEM;
    s->p = *p;
    s->np = p->n_parts ? p->n_parts : 1;
    /* Every part gets whole 4096-byte blocks of its own, so it is one aligned I/O. */
    s->pstride = st_spill_pad((uint32_t)((p->slot_bytes + s->np - 1) / s->np));
    s->slot_bytes = s->np * s->pstride;
    if (!s->p.queue_depth) s->p.queue_depth = ST_SPILL_DEFAULT_QUEUE;
    if (!s->p.max_read_bytes) s->p.max_read_bytes = ST_SPILL_DEFAULT_READ;
    if (s->p.max_read_bytes < s->pstride) s->p.max_read_bytes = s->pstride;
    if (!s->p.uring_entries) s->p.uring_entries = ST_SPILL_DEFAULT_URING;
    uint64_t ms = p->disk_budget ? p->disk_budget / s->slot_bytes : UINT32_MAX - 1;
    s->max_slots = (uint32_t)(ms > UINT32_MAX - 1 ? UINT32_MAX - 1 : ms);
    s->fs_cap = UINT32_MAX - 1;
    /* An extent's run of one part (G parts) spans ST_SPILL_EXTENT_RUN bytes: a read of one
     * part over consecutive slots is contiguous within it and splits at its ends. */
    uint64_t g = s->np > 1 ? ST_SPILL_EXTENT_RUN / s->pstride : 1;
    if (g > ST_SPILL_MAX_EXTENT) g = ST_SPILL_MAX_EXTENT;
    if (g > s->max_slots) g = s->max_slots; /* a small budget: no region past it */
    s->extent = (uint32_t)(g ? g : 1);
    s->stage = calloc((size_t)s->p.queue_depth, sizeof *s->stage);
    s->wq = calloc((size_t)s->p.queue_depth, sizeof *s->wq);
    *out = s;
    if (!s->stage || !s->wq) return ST_E_NOMEM;
    for (int i = 0; i < s->p.queue_depth; i++) {
        s->stage[i].buf = st_alloc_aligned(s->slot_bytes, ST_SPILL_ALIGN);
        s->stage[i].sums = calloc(s->np, sizeof(uint64_t));
        if (!s->stage[i].buf || !s->stage[i].sums) return ST_E_NOMEM;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv_io, NULL);
    pthread_cond_init(&s->cv_done, NULL);
    s->st.slots_max = s->max_slots;
    s->st.bytes_budget = p->disk_budget;
    return 0;
}

static int spill_start(st_spill *s, st_ctx *ctx) {
    int fd = st_io_fd(s->io);
    if (s->p.no_uring) {
        why(s, "%sio_uring disabled by request%s", "");
    } else if (fd < 0) {
        why(s, "%sbackend has no raw fd: pread/pwrite%s", "");
    } else {
        int rc = io_uring_queue_init((unsigned)s->p.uring_entries, &s->ring, 0);
        if (rc == 0) s->uring_ok = 1;
        else why(s, "%sio_uring_queue_init: %s", st_strerror(rc));
    }
    int rc = pthread_create(&s->thread, NULL, st_spill_io_main, s);
    if (rc) return st_seterr(ctx, -rc, "spill: cannot start the I/O thread");
    s->thread_started = 1;
    return 0;
}

int st_spill_open_io(st_io *io, const st_spill_params *p, st_ctx *ctx, st_spill **out) {
    if (!out) {
        st_io_close(io);
        return ST_E_INVAL;
    }
    *out = NULL;
    int rc = io ? check_params(p, ctx) : ST_E_INVAL;
    st_spill *s = NULL;
    if (!rc) rc = spill_new(p, &s);
    if (s) s->io = io;
    else st_io_close(io);
    if (!rc) {
        why(s, "%scaller-supplied backend: buffered%s", "");
        rc = write_header(s);
        if (rc) st_seterr(ctx, rc, "spill: writing the header: %s", st_strerror(rc));
    }
    if (!rc) rc = spill_start(s, ctx);
    if (rc) {
        st_spill_close(s);
        return rc;
    }
    *out = s;
    return 0;
}

int st_spill_open(st_spill_dir *d, const st_spill_params *p, st_ctx *ctx, st_spill **out) {
    if (!out) return ST_E_INVAL;
    *out = NULL;
    if (!d) return ST_E_INVAL;
    int rc = check_params(p, ctx);
    if (rc) return rc;
    st_spill *s = NULL;
    rc = spill_new(p, &s);
    if (rc) {
        st_spill_close(s);
        return rc;
    }
    s->dir = d;
    char path[4200];
    snprintf(path, sizeof path, "%s/spill.dat", st_spill_dir_path(d));
    st_spill_open_fn open_fn = p->open_fn ? p->open_fn : default_open;
    int direct = !p->no_direct;
    if (!direct) why(s, "%sO_DIRECT disabled by request%s", "");
    rc = open_fn(p->open_arg, path, direct, &s->io);
    if (rc == -EINVAL && direct) {
        why(s, "%sO_DIRECT refused at open (%s): buffered", st_errname(rc));
        direct = 0;
        rc = open_fn(p->open_arg, path, 0, &s->io);
    }
    if (!rc) {
        rc = write_header(s);
        if (rc == -EINVAL && direct) {
            /* Some filesystems accept O_DIRECT at open and refuse the first I/O. */
            why(s, "%sO_DIRECT refused on first write (%s): buffered", st_errname(rc));
            st_io_close(s->io);
            s->io = NULL;
            direct = 0;
            rc = open_fn(p->open_arg, path, 0, &s->io);
            if (!rc) rc = write_header(s);
        }
    }
    if (rc) {
        st_seterr(ctx, rc, "spill: %s: %s", path, st_strerror(rc));
        st_spill_close(s);
        return rc;
    }
    s->direct = direct;
    rc = spill_start(s, ctx);
    if (rc) {
        st_spill_close(s);
        return rc;
    }
    *out = s;
    return 0;
}

void st_spill_close(st_spill *s) {
    if (!s) return;
    if (s->thread_started) {
        pthread_mutex_lock(&s->mu);
        s->stop = 1;
        pthread_cond_signal(&s->cv_io);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv_io);
        pthread_cond_destroy(&s->cv_done);
    }
    if (s->uring_ok) io_uring_queue_exit(&s->ring);
    st_io_close(s->io);
    if (s->stage)
        for (int i = 0; i < s->p.queue_depth; i++) {
            st_free_aligned(s->stage[i].buf);
            free(s->stage[i].sums);
        }
    free(s->stage);
    free(s->psum);
    free(s->wq);
    free(s->ent);
    free(s->free_list);
    free(s);
}

st_spill_info st_spill_get_info(st_spill *s) {
    st_spill_info i;
    memset(&i, 0, sizeof i);
    pthread_mutex_lock(&s->mu); /* the I/O thread may drop the ring and say why */
    i.direct = s->direct;
    i.uring = s->uring_ok;
    i.slot_bytes = s->slot_bytes;
    i.part_bytes = s->pstride;
    i.extent_slots = s->extent;
    snprintf(i.why, sizeof i.why, "%s", s->why);
    pthread_mutex_unlock(&s->mu);
    return i;
}

/* ---- slots ------------------------------------------------------------------------- */

static int slot_alloc(st_spill *s, st_slot *out) {
    uint32_t cap = s->max_slots < s->fs_cap ? s->max_slots : s->fs_cap;
    if (s->n_used >= cap) return ST_E_NOSPACE;
    int fs_full = s->fs_cap < UINT32_MAX - 1;
    uint8_t backed = 0;
    if (s->n_free && fs_full) {
        /* After ENOSPC only slots whose blocks exist are safe to write (on filesystems
         * that overwrite in place): take the most recent such free slot. */
        uint32_t i = s->n_free;
        while (i > 0 && !s->ent[s->free_list[i - 1]].backed) i--;
        if (!i) return ST_E_NOSPACE;
        *out = s->free_list[i - 1];
        s->free_list[i - 1] = s->free_list[--s->n_free];
        backed = 1;
    } else if (s->n_free) {
        *out = s->free_list[--s->n_free];
        backed = s->ent[*out].backed;
    } else {
        if (s->hwm >= cap) return ST_E_NOSPACE;
        if (s->hwm == s->ent_cap) {
            uint32_t nc = s->ent_cap ? s->ent_cap * 2 : 64;
            if (nc > cap) nc = cap;
            st_slot_ent *e = realloc(s->ent, (size_t)nc * sizeof *e);
            if (!e) return ST_E_NOMEM;
            s->ent = e;
            st_slot *f = realloc(s->free_list, (size_t)nc * sizeof *f);
            if (!f) return ST_E_NOMEM;
            s->free_list = f;
            uint64_t *ps = realloc(s->psum, (size_t)nc * s->np * sizeof *ps);
            if (!ps) return ST_E_NOMEM;
            s->psum = ps;
            s->ent_cap = nc;
        }
        *out = s->hwm++;
    }
    ST_ASSERT(*out >= s->hwm - 1 || s->ent[*out].state == ST_SLOT_FREE);
    memset(&s->ent[*out], 0, sizeof s->ent[*out]);
    s->ent[*out].stage = -1;
    s->ent[*out].backed = backed;
    s->n_used++;
    ST_ASSERT(s->n_used + s->n_free == s->hwm);
    return 0;
}

void st_spill_slot_free_locked(st_spill *s, st_slot slot) {
    st_slot_ent *e = &s->ent[slot];
    ST_ASSERT(e->state != ST_SLOT_FREE && e->stage < 0 && e->readers == 0);
    e->state = ST_SLOT_FREE;
    if (e->release_pending) s->n_release_pending--;
    e->release_pending = 0;
    s->free_list[s->n_free++] = slot;
    s->n_used--;
    ST_ASSERT(s->n_used + s->n_free == s->hwm);
}

static st_slot_ent *slot_get(st_spill *s, st_slot slot) {
    if (slot >= s->hwm) return NULL;
    st_slot_ent *e = &s->ent[slot];
    return e->state == ST_SLOT_FREE || e->release_pending ? NULL : e;
}

int st_spill_write(st_spill *s, const st_spill_page *pg, int flags, st_slot *slot, st_ctx *ctx) {
    if (!slot) return ST_E_INVAL;
    *slot = ST_SLOT_NONE;
    if (!s || !pg || !pg->data || !pg->len || pg->len > UINT32_MAX)
        return st_seterr(ctx, ST_E_INVAL, "spill: bad page (no data or length 0)");
    int cold = s->p.cold != ST_COLD_NONE &&
               (pg->type == ST_TYPE_F32 || pg->type == ST_TYPE_F16 || pg->type == ST_TYPE_BF16);
    if (pg->len % s->np)
        return st_seterr(ctx, ST_E_INVAL, "spill: %zu bytes is not %u equal parts", pg->len, s->np);
    const size_t part_raw = pg->len / s->np;
    size_t part_len = cold ? st_cold_bytes(s->p.cold, pg->type, part_raw) : part_raw;
    if (!part_len) return st_seterr(ctx, ST_E_INVAL, "spill: %zu bytes is not a whole number of %s",
                                    part_raw, st_type_name(pg->type));
    const size_t stride = s->pstride;
    if (part_len > stride)
        return st_seterr(ctx, ST_E_LIMIT, "spill: page of %zu bytes (%u parts of %zu) exceeds the "
                         "slot size %zu", part_len * s->np, s->np, part_len, s->slot_bytes);
    pthread_mutex_lock(&s->mu);
    st_slot sl;
    int rc;
    /* Slots released while their write is in flight come free on completion: wait for
     * them rather than report a full disk that is about to have room. */
    while ((rc = slot_alloc(s, &sl)) == ST_E_NOSPACE && s->n_release_pending &&
           !(flags & ST_SPILL_NOWAIT))
        pthread_cond_wait(&s->cv_done, &s->mu);
    if (rc == ST_E_NOSPACE && s->n_release_pending) {
        pthread_mutex_unlock(&s->mu);
        return -EAGAIN;
    }
    if (rc) {
        if (rc == ST_E_NOSPACE) s->st.nospace++;
        uint32_t used = s->n_used, fs_cap = s->fs_cap, max = s->max_slots;
        pthread_mutex_unlock(&s->mu);
        if (rc == ST_E_NOSPACE && fs_cap < max)
            return st_seterr(ctx, rc, "spill: filesystem full (ENOSPC) at %u slots of %zu bytes",
                             used, s->slot_bytes);
        if (rc == ST_E_NOSPACE)
            return st_seterr(ctx, rc, "spill: disk budget of %llu bytes used up (%u slots of %zu)",
                             (unsigned long long)s->p.disk_budget, used, s->slot_bytes);
        return st_seterr(ctx, rc, "spill: out of memory for the slot table");
    }
    int si = -1, stalled = 0;
    for (;;) {
        for (int i = 0; i < s->p.queue_depth && si < 0; i++)
            if (!s->stage[i].busy) si = i;
        if (si >= 0) break;
        if (flags & ST_SPILL_NOWAIT) {
            s->ent[sl].state = ST_SLOT_WRITING; /* so the free below sees an allocated slot */
            st_spill_slot_free_locked(s, sl);
            pthread_mutex_unlock(&s->mu);
            return -EAGAIN;
        }
        if (!stalled) s->st.write_stalls++, stalled = 1;
        pthread_cond_wait(&s->cv_done, &s->mu);
    }
    st_stage *sg = &s->stage[si];
    sg->busy = 1;
    sg->slot = sl;
    s->ent[sl].state = ST_SLOT_WRITING; /* reserved; not visible to readers before we return */
    s->ent[sl].stage = (int16_t)si;
    pthread_mutex_unlock(&s->mu);

    /* Copy (and encode) outside the lock: the staging buffer is ours now. Each part is
     * coded and checksummed on its own, at its stride, so it can be written and read alone. */
    const size_t len = s->np * part_len;
    const uint32_t io_len = st_spill_pad((uint32_t)part_len);
    for (uint32_t i = 0; i < s->np; i++) {
        uint8_t *dst = sg->buf + i * stride;
        const uint8_t *src = (const uint8_t *)pg->data + i * part_raw;
        if (cold) {
            size_t got = 0;
            rc = st_cold_encode(s->p.cold, pg->type, src, part_raw, dst, part_len, &got);
            ST_ASSERT(rc == 0 && got == part_len);
        } else {
            memcpy(dst, src, part_len);
        }
        memset(dst + part_len, 0, io_len - part_len);
        sg->sums[i] = !cold && s->np == 1 && pg->has_checksum ? pg->checksum
                                                                : XXH3_64bits(dst, part_len);
    }

    pthread_mutex_lock(&s->mu);
    st_slot_ent *e = &s->ent[sl];
    e->key = pg->key;
    e->gen = pg->gen;
    memcpy(s->psum + (size_t)sl * s->np, sg->sums, s->np * sizeof(uint64_t));
    e->len = (uint32_t)len;
    e->part_len = (uint32_t)part_len;
    e->raw_len = (uint32_t)pg->len;
    e->cold = (uint8_t)(cold ? s->p.cold : ST_COLD_NONE);
    e->type = (uint8_t)pg->type;
    e->epoch = ++s->write_epoch;
    sg->io_len = io_len;
    s->wq[(s->wq_head + s->wq_n) % s->p.queue_depth] = si;
    s->wq_n++;
    s->writes_in_flight++;
    s->st.bytes_logical += pg->len;
    s->st.bytes_stored += len;
    pthread_cond_signal(&s->cv_io);
    pthread_mutex_unlock(&s->mu);
    *slot = sl;
    return 0;
}

int st_spill_release(st_spill *s, st_slot slot, int flags) {
    if (!s) return ST_E_INVAL;
    pthread_mutex_lock(&s->mu);
    st_slot_ent *e = slot_get(s, slot);
    int rc = 0;
    if (!e || e->readers) {
        rc = ST_E_STATE;
    } else {
        s->st.releases++;
        if (flags & ST_SPILL_DROP) s->st.drops++;
        if (e->state == ST_SLOT_WRITING) e->release_pending = 1, s->n_release_pending++;
        else st_spill_slot_free_locked(s, slot);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int st_spill_slot_status(st_spill *s, st_slot slot) {
    if (!s) return ST_E_INVAL;
    pthread_mutex_lock(&s->mu);
    st_slot_ent *e = slot_get(s, slot);
    int rc = !e ? ST_E_STATE : e->state == ST_SLOT_WRITING ? 1 : e->state == ST_SLOT_FAILED ? e->err : 0;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int st_spill_flush(st_spill *s, int do_sync, st_ctx *ctx) {
    if (!s) return ST_E_INVAL;
    pthread_mutex_lock(&s->mu);
    while (s->writes_in_flight) pthread_cond_wait(&s->cv_done, &s->mu);
    if (do_sync) {
        uint64_t want = ++s->sync_req;
        pthread_cond_signal(&s->cv_io);
        while (s->sync_done < want) pthread_cond_wait(&s->cv_done, &s->mu);
    }
    int rc = s->flush_err;
    s->flush_err = 0;
    pthread_mutex_unlock(&s->mu);
    if (rc) st_seterr(ctx, rc, "spill: a write-behind %s failed: %s", do_sync ? "write or fsync" : "write",
                      st_strerror(rc));
    return rc;
}

st_spill_stats st_spill_get_stats(st_spill *s) {
    pthread_mutex_lock(&s->mu);
    st_spill_stats st = s->st;
    st.slots_used = s->n_used;
    st.slots_hwm = s->hwm;
    st.slots_max = s->max_slots < s->fs_cap ? s->max_slots : s->fs_cap;
    st.bytes_used = (uint64_t)s->n_used * s->slot_bytes;
    st.writes_in_flight = s->writes_in_flight;
    pthread_mutex_unlock(&s->mu);
    return st;
}

/* ---- reads --------------------------------------------------------------------------- */

int st_spill_deliver(const uint8_t *src, const st_rd_snap *sn, st_spill_rd *rd) {
    src += sn->skip;
    /* Verify every part before delivering any: the caller never sees a partial mix. */
    for (uint32_t i = 0; i < sn->n_part; i++)
        if (XXH3_64bits(src + (size_t)i * sn->stride, sn->part_len) != sn->sums[i]) {
            memset(rd->buf, 0, rd->len);
            return ST_E_CORRUPT;
        }
    for (uint32_t i = 0; i < sn->n_part; i++) {
        uint8_t *dst = (uint8_t *)rd->buf + (size_t)(sn->dst_part + i) * sn->part_raw;
        const uint8_t *p = src + (size_t)i * sn->stride;
        if (sn->cold != ST_COLD_NONE) {
            int rc = st_cold_decode((st_cold_type)sn->cold, (st_type)sn->type, p, sn->part_len, dst,
                                    sn->part_raw);
            if (rc) {
                memset(rd->buf, 0, rd->len);
                return rc;
            }
        } else if (dst != p) { /* equal: read straight into the caller's buffer */
            memcpy(dst, p, sn->part_raw);
        }
    }
    return 0;
}

/* Describes read r of slot e (mu held) as snaps: from the staging buffer (staged) one
 * snap over all its parts, from disk one per part (each its own aligned range; parts of
 * one slot are not adjacent in the file). Returns the snap count, or ST_E_STATE for a bad
 * range. sums receives the parts' checksums. */
static int describe(const st_spill *s, st_slot slot, const st_slot_ent *e, const st_spill_rd *r,
                    int staged, st_rd_snap *sn, uint64_t *sums) {
    uint32_t first = r->part_first, cnt = r->part_count ? r->part_count : s->np;
    uint32_t part_raw = e->raw_len / s->np;
    if ((!r->part_count && first) || first > s->np || cnt > s->np - first ||
        (uint64_t)cnt * part_raw != r->len)
        return ST_E_STATE;
    memcpy(sums, s->psum + (size_t)slot * s->np + first, cnt * sizeof *sums);
    const uint32_t n_snap = staged ? 1 : cnt;
    for (uint32_t k = 0; k < n_snap; k++) {
        sn[k] = (st_rd_snap){.part_len = e->part_len, .stride = (uint32_t)s->pstride,
                             .part_raw = part_raw, .dst_part = k, .sums = sums + k,
                             .cold = e->cold, .type = e->type, .head = k == 0};
        if (staged) {
            sn[k].skip = (uint32_t)(first * s->pstride);
            sn[k].n_part = cnt;
        } else {
            sn[k].off = st_spill_part_off(s, slot, first + k);
            sn[k].io_len = st_spill_pad(e->part_len);
            sn[k].n_part = 1;
        }
    }
    return (int)n_snap;
}

int st_spill_read_submit(st_spill *s, st_spill_rd *rd, int n, st_spill_ticket **ticket) {
    if (!ticket) return ST_E_INVAL;
    *ticket = NULL;
    if (!s || n < 0 || (n && !rd)) return ST_E_INVAL;
    size_t n_sums = 0; /* also a bound on the disk snaps: one per part */
    for (int i = 0; i < n; i++)
        n_sums += rd[i].part_count && rd[i].part_count < s->np ? rd[i].part_count : s->np;
    st_spill_ticket *t = calloc(1, sizeof *t);
    st_rd_snap *snap = n ? calloc(n_sums, sizeof *snap) : NULL;
    uint64_t *sums = n ? malloc(n_sums * sizeof *sums) : NULL;
    if (!t || (n && (!snap || !sums))) {
        free(t);
        free(snap);
        free(sums);
        return ST_E_NOMEM;
    }
    t->rd = rd;
    t->n = n;
    t->snap = snap;
    t->sums = sums;
    size_t sum_at = 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < n; i++) {
        st_spill_rd *r = &rd[i];
        st_slot_ent *e = slot_get(s, r->slot);
        st_rd_snap *sn = &snap[t->n_snap];
        int staged = e && e->state == ST_SLOT_WRITING, k = 0;
        r->rc = 0;
        if (!e || !r->buf || e->key != r->key || e->gen != r->gen ||
            (r->part_count == 0 && e->raw_len != r->len)) {
            r->rc = ST_E_STATE;
        } else if (e->state == ST_SLOT_FAILED) {
            r->rc = e->err;
        } else if ((k = describe(s, r->slot, e, r, staged, sn, sums + sum_at)) < 0) {
            r->rc = k;
        } else if (staged) {
            /* Invariant 2: the staging copy is stable while we hold mu. */
            r->rc = st_spill_deliver(s->stage[e->stage].buf, sn, r);
            s->st.staged_reads++;
            if (r->rc == ST_E_CORRUPT) s->st.checksum_failures++;
            else s->st.reads++;
        } else {
            sum_at += (size_t)k;
            for (int j = 0; j < k; j++) sn[j].idx = i;
            t->n_snap += k;
            e->readers++;
        }
    }
    if (t->n_snap) {
        if (s->rq_tail) s->rq_tail->next = t;
        else s->rq_head = t;
        s->rq_tail = t;
        pthread_cond_signal(&s->cv_io);
    } else {
        t->done = 1;
    }
    pthread_mutex_unlock(&s->mu);
    *ticket = t;
    return 0;
}

int st_spill_read_wait(st_spill *s, st_spill_ticket *t, st_ctx *ctx) {
    if (!s || !t) return ST_E_INVAL;
    pthread_mutex_lock(&s->mu);
    if (!t->done) s->st.read_stalls++;
    while (!t->done) pthread_cond_wait(&s->cv_done, &s->mu);
    pthread_mutex_unlock(&s->mu);
    int rc = 0;
    for (int i = 0; i < t->n && !rc; i++) {
        rc = t->rd[i].rc;
        if (rc)
            st_seterr(ctx, rc, "spill: reading slot %u (key %llx gen %llu): %s", t->rd[i].slot,
                      (unsigned long long)t->rd[i].key, (unsigned long long)t->rd[i].gen,
                      rc == ST_E_STATE ? "slot not allocated, released, or identity/length mismatch"
                                       : st_strerror(rc));
    }
    free(t->snap);
    free(t->sums);
    free(t);
    return rc;
}

int st_spill_read_batch(st_spill *s, st_spill_rd *rd, int n, st_ctx *ctx) {
    st_spill_ticket *t;
    int rc = st_spill_read_submit(s, rd, n, &t);
    return rc ? rc : st_spill_read_wait(s, t, ctx);
}

int st_spill_read(st_spill *s, st_slot slot, uint64_t key, uint64_t gen, void *buf, size_t len,
                  st_ctx *ctx) {
    st_spill_rd r = {.slot = slot, .key = key, .gen = gen, .buf = buf, .len = len};
    return st_spill_read_batch(s, &r, 1, ctx);
}
