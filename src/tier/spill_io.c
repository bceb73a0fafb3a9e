/* The spill store's I/O thread. Each round takes every queued write and read ticket
 * under mu, runs them without mu, and publishes the results under mu:
 *
 *   writes   one op per part of each staging buffer (aligned, padded to 4096; a slot's
 *            parts lie in different regions of its extent, see spill.c);
 *   reads    each ticket's disk ranges (one per part) sorted by offset; adjacent ranges
 *            (the same part of consecutive slots) coalesce into one op up to
 *            max_read_bytes, into a bounce buffer; then each range is checksummed and
 *            copied / decoded into the caller's buffer;
 *   sync     when st_spill_flush asked for it, an fsync after the round's writes.
 *
 * A ticket is delivered and published as soon as its own ops are done, while the rest of
 * the round is still in flight, so a caller computing on one window overlaps the reads of
 * the next. A coalesced read whose ranges land back to back in the caller's buffers
 * (uncompressed parts filling whole 4096-byte blocks: the streaming windows) is read
 * straight into them and verified in place; others go through a bounce buffer.
 *
 * With io_uring the round's ops go out in one submission per ring-full; a short or
 * interrupted completion is finished with the st_io loops. Without it (no raw fd, ring
 * refused, or a submission error, after which the ring is dropped for good) the ops run
 * one after another through st_io_pread_full / st_io_pwrite_full. */
#include "tier_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ST_SPILL_ARENA_MAX ((size_t)64 << 20) /* bounce memory kept between rounds */

typedef struct io_op {
    uint8_t *buf; /* (len) aligned */
    uint32_t len;
    uint64_t off;
    int write;
    int res; /* 0 or the error */
    int done;
    int direct;              /* reads: buf is the caller's memory (no bounce, no copy) */
    int stage;               /* writes: staging index */
    st_spill_ticket *t;      /* reads: owner ticket ... */
    int snap0, n_snap;       /* ... and its snap entries [snap0, snap0 + n_snap) */
    st_slot slot;            /* writes: for the completion callback */
    uint64_t key, gen;
} io_op;

typedef struct io_round {
    io_op *ops;
    int n_ops, cap_ops;
    uint8_t **bounce; /* per ticket when the arena is too small, freed after the round */
    int n_bounce, cap_bounce;
    uint8_t *arena;   /* (arena_cap) reused across rounds: no mmap/munmap per fetch */
    size_t arena_cap, arena_used;
} io_round;

static int push_op(io_round *r, const io_op *op) {
    if (r->n_ops == r->cap_ops) {
        int nc = r->cap_ops ? r->cap_ops * 2 : 64;
        io_op *o = realloc(r->ops, (size_t)nc * sizeof *o);
        if (!o) return ST_E_NOMEM;
        r->ops = o;
        r->cap_ops = nc;
    }
    r->ops[r->n_ops++] = *op;
    return 0;
}

static int push_bounce(io_round *r, uint8_t *b) {
    if (r->n_bounce == r->cap_bounce) {
        int nc = r->cap_bounce ? r->cap_bounce * 2 : 16;
        uint8_t **o = realloc(r->bounce, (size_t)nc * sizeof *o);
        if (!o) return ST_E_NOMEM;
        r->bounce = o;
        r->cap_bounce = nc;
    }
    r->bounce[r->n_bounce++] = b;
    return 0;
}

static int snap_cmp(const void *a, const void *b) {
    const st_rd_snap *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Where range k of t is delivered in the caller's memory. */
static uint8_t *snap_dst(const st_spill_ticket *t, int k) {
    const st_rd_snap *sn = &t->snap[k];
    return (uint8_t *)t->rd[sn->idx].buf + (size_t)sn->dst_part * sn->part_raw;
}

/* Op o (ranges [snap0, snap0 + n_snap) of t) can be read into the caller's buffers: each
 * range is a raw part that fills its blocks exactly and lands right after the previous one,
 * and the start is aligned for O_DIRECT. */
static int can_direct(const st_spill *s, const st_spill_ticket *t, const io_op *o) {
    const uint8_t *d0 = snap_dst(t, o->snap0);
    if (s->direct && ((uintptr_t)d0 & (ST_SPILL_ALIGN - 1))) return 0;
    uint64_t pos = 0;
    for (int k = o->snap0; k < o->snap0 + o->n_snap; k++) {
        const st_rd_snap *sn = &t->snap[k];
        if (sn->cold != ST_COLD_NONE || sn->n_part != 1 || sn->skip || sn->part_len != sn->io_len ||
            sn->part_raw != sn->part_len || sn->off != o->off + pos || snap_dst(t, k) != d0 + pos)
            return 0;
        pos += sn->io_len;
    }
    return pos == o->len;
}

/* Splits a ticket's disk ranges into coalesced read ops [t->op0, t->op0 + t->n_ops). A
 * range that gets no op (no memory) has its entry's rc set. */
static void plan_reads(st_spill *s, io_round *r, st_spill_ticket *t) {
    qsort(t->snap, (size_t)t->n_snap, sizeof *t->snap, snap_cmp);
    t->op0 = r->n_ops;
    io_op op = {0};
    for (int i = 0; i <= t->n_snap; i++) {
        const st_rd_snap *sn = i < t->n_snap ? &t->snap[i] : NULL;
        int join = sn && i > 0 && sn->off >= op.off && sn->off <= op.off + op.len &&
                   sn->off + sn->io_len - op.off <= s->p.max_read_bytes;
        if (join) {
            if (sn->off + sn->io_len > op.off + op.len) op.len = (uint32_t)(sn->off + sn->io_len - op.off);
            op.n_snap++;
            continue;
        }
        if (i > 0 && push_op(r, &op))
            for (int k = op.snap0; k < op.snap0 + op.n_snap; k++) t->rd[t->snap[k].idx].rc = ST_E_NOMEM;
        if (!sn) break;
        op = (io_op){.off = sn->off, .len = sn->io_len, .t = t, .snap0 = i, .n_snap = 1, .stage = -1};
    }
    t->n_ops = r->n_ops - t->op0;
    /* Buffers: the caller's where possible, else one bounce allocation for the ticket. */
    uint64_t total = 0;
    for (int i = t->op0; i < r->n_ops; i++) {
        io_op *o = &r->ops[i];
        o->direct = can_direct(s, t, o);
        if (o->direct) o->buf = snap_dst(t, o->snap0);
        else total += o->len;
    }
    if (!total) return;
    uint8_t *bounce = NULL;
    int rc = 0;
    if (r->arena_cap - r->arena_used >= total) {
        bounce = r->arena + r->arena_used;
        r->arena_used += (size_t)total;
    } else {
        bounce = st_alloc_aligned((size_t)total, ST_SPILL_ALIGN);
        rc = bounce ? push_bounce(r, bounce) : ST_E_NOMEM;
        if (rc) st_free_aligned(bounce);
    }
    uint64_t pos = 0;
    for (int i = t->op0; i < r->n_ops; i++) {
        io_op *o = &r->ops[i];
        if (o->direct) continue;
        if (rc) { /* never submitted: finished as failed */
            o->res = rc;
            o->done = 1;
            continue;
        }
        o->buf = bounce + pos;
        pos += o->len;
    }
}

static void drop_ring(st_spill *s, int rc) {
    io_uring_queue_exit(&s->ring);
    pthread_mutex_lock(&s->mu);
    s->uring_ok = 0;
    size_t n = strlen(s->why);
    snprintf(s->why + n, sizeof s->why - n, "%sio_uring submit failed (%s): pread/pwrite",
             n ? "; " : "", st_errname(rc));
    pthread_mutex_unlock(&s->mu);
}

/* Finishes an op from byte `from` with the st_io loops. */
static void finish_sync(st_spill *s, io_op *op, uint32_t from) {
    int rc = op->write ? st_io_pwrite_full(s->io, op->buf + from, op->len - from, op->off + from)
                       : st_io_pread_full(s->io, op->buf + from, op->len - from, op->off + from);
    op->res = rc;
    op->done = 1;
}

/* Verifies and delivers the ranges of read op, without mu; an entry keeps the first error
 * of its ranges (publish_ticket zeroes its buffer). Returns checksum failures. */
static int deliver_op(const io_op *op) {
    int bad = 0;
    for (int k = op->snap0; k < op->snap0 + op->n_snap; k++) {
        const st_rd_snap *sn = &op->t->snap[k];
        st_spill_rd *rd = &op->t->rd[sn->idx];
        if (rd->rc) continue; /* an earlier range failed: the entry is lost anyway */
        if (op->res) {
            rd->rc = op->res;
            continue;
        }
        rd->rc = st_spill_deliver(op->buf + (sn->off - op->off), sn, rd);
        bad += rd->rc == ST_E_CORRUPT;
    }
    return bad;
}

/* Every op of ticket t is done: verify and deliver, zero the buffers of failed entries
 * (never a mix of good and bad parts), then publish under mu. t belongs to its waiter
 * from then on: the I/O thread must not touch it again. */
static void publish_ticket(st_spill *s, io_round *r, st_spill_ticket *t) {
    int bad = 0;
    uint64_t n_ok = 0, n_err = 0, bytes = 0;
    for (int i = t->op0; i < t->op0 + t->n_ops; i++) {
        bad += deliver_op(&r->ops[i]);
        if (!r->ops[i].res) bytes += r->ops[i].len;
    }
    for (int k = 0; k < t->n_snap; k++) {
        const st_rd_snap *sn = &t->snap[k];
        st_spill_rd *rd = &t->rd[sn->idx];
        if (!sn->head) continue;
        if (!rd->rc) n_ok++;
        else memset(rd->buf, 0, rd->len);
        if (rd->rc && rd->rc != ST_E_CORRUPT) n_err++;
    }
    pthread_mutex_lock(&s->mu);
    s->st.bytes_read += bytes;
    s->st.read_ios += (uint64_t)t->n_ops;
    s->st.reads += n_ok;
    s->st.read_errors += n_err;
    s->st.checksum_failures += (uint64_t)bad;
    for (int k = 0; k < t->n_snap; k++) {
        if (!t->snap[k].head) continue;
        st_slot_ent *e = &s->ent[t->rd[t->snap[k].idx].slot];
        ST_ASSERT(e->readers > 0);
        e->readers--;
    }
    t->done = 1;
    pthread_cond_broadcast(&s->cv_done);
    pthread_mutex_unlock(&s->mu);
}

/* Op i has finished (done set): a ticket whose last op it was is published. */
static void op_finished(st_spill *s, io_round *r, int i) {
    io_op *op = &r->ops[i];
    if (!op->write && --op->t->pending == 0) publish_ticket(s, r, op->t);
}

static void run_uring(st_spill *s, io_round *r) {
    int fd = st_io_fd(s->io);
    int i0 = 0;
    while (s->uring_ok) {
        int cnt = 0;
        for (; i0 < r->n_ops && cnt < s->p.uring_entries; i0++) {
            io_op *op = &r->ops[i0];
            if (op->done) continue;
            struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
            if (!sqe) break;
            if (op->write) io_uring_prep_write(sqe, fd, op->buf, op->len, op->off);
            else io_uring_prep_read(sqe, fd, op->buf, op->len, op->off);
            io_uring_sqe_set_data64(sqe, (uint64_t)i0);
            cnt++;
        }
        if (!cnt) break;
        int sub = io_uring_submit(&s->ring);
        int n_wait = sub > 0 ? sub : 0;
        for (int k = 0; k < n_wait; k++) {
            struct io_uring_cqe *cqe;
            int rc;
            do rc = io_uring_wait_cqe(&s->ring, &cqe);
            while (rc == -EINTR);
            if (rc) { /* cannot reap: the ring is unusable; leftovers go synchronous */
                sub = rc;
                break;
            }
            const int i = (int)io_uring_cqe_get_data64(cqe);
            io_op *op = &r->ops[i];
            int res = cqe->res;
            io_uring_cqe_seen(&s->ring, cqe);
            if (res == -EINTR || res == -EAGAIN) finish_sync(s, op, 0);
            else if (res < 0) op->res = res, op->done = 1;
            else if ((uint32_t)res < op->len) finish_sync(s, op, (uint32_t)res); /* short */
            else op->res = 0, op->done = 1;
            op_finished(s, r, i);
        }
        if (sub != cnt) {
            drop_ring(s, sub < 0 ? sub : -EIO);
            break;
        }
    }
}

static void run_round(st_spill *s, io_round *r) {
    /* Ops failed at planning never run; their tickets may be complete already. */
    for (int i = 0; i < r->n_ops; i++)
        if (r->ops[i].done) op_finished(s, r, i);
    if (s->uring_ok) run_uring(s, r);
    for (int i = 0; i < r->n_ops; i++)
        if (!r->ops[i].done) {
            finish_sync(s, &r->ops[i], 0);
            op_finished(s, r, i);
        }
    if (!s->direct && s->io->ops->dontneed)
        for (int i = 0; i < r->n_ops; i++)
            if (r->ops[i].write && !r->ops[i].res) s->io->ops->dontneed(s->io, r->ops[i].off, r->ops[i].len);
}

/* A write finished with rc (mu held): the slot leaves WRITING, its staging buffer is
 * released (invariant 2), and a pending release frees the slot (invariant 3). */
static void complete_write(st_spill *s, int stage, int rc, uint32_t len) {
    st_stage *sg = &s->stage[stage];
    st_slot_ent *e = &s->ent[sg->slot];
    ST_ASSERT(e->state == ST_SLOT_WRITING && e->stage == stage && sg->busy);
    if (!rc) {
        e->state = ST_SLOT_STORED;
        e->backed = 1;
        s->st.writes++;
        s->st.bytes_written += len;
    } else {
        e->state = ST_SLOT_FAILED;
        e->err = rc;
        s->st.write_errors++;
        if (!s->flush_err) s->flush_err = rc;
        /* Invariant 6: past this extent the filesystem has no room; reuse only. */
        if (rc == -ENOSPC && s->hwm < s->fs_cap) s->fs_cap = s->hwm;
    }
    e->stage = -1;
    sg->busy = 0;
    s->writes_in_flight--;
    if (e->release_pending) st_spill_slot_free_locked(s, sg->slot);
}

/* Publishes a round's writes (mu held): a slot's np part writes are consecutive ops, and
 * the slot is stored if all of them succeeded. */
static void complete_writes(st_spill *s, io_round *r, int n_write_ops) {
    for (int i = 0; i < n_write_ops; i += (int)s->np) {
        int rc = 0;
        uint32_t len = 0;
        for (uint32_t k = 0; k < s->np; k++) {
            if (!rc) rc = r->ops[i + (int)k].res;
            len += r->ops[i + (int)k].len;
        }
        complete_write(s, r->ops[i].stage, rc, len);
    }
}

static void do_sync(st_spill *s, uint64_t target, uint64_t epoch) {
    int rc = st_io_sync(s->io);
    pthread_mutex_lock(&s->mu);
    if (rc) {
        /* Whatever was written since the last good fsync may be lost: say so on each slot
         * (the kernel may already have dropped the dirty pages, so a read could "work"). */
        for (uint32_t i = 0; i < s->hwm; i++) {
            st_slot_ent *e = &s->ent[i];
            if (e->state == ST_SLOT_STORED && e->epoch > s->synced_epoch && e->epoch <= epoch)
                e->state = ST_SLOT_FAILED, e->err = rc;
        }
        s->st.sync_errors++;
        if (!s->flush_err) s->flush_err = rc;
    }
    s->synced_epoch = epoch;
    s->sync_done = target;
    pthread_cond_broadcast(&s->cv_done);
    pthread_mutex_unlock(&s->mu);
}

void *st_spill_io_main(void *arg) {
    st_spill *s = arg;
    io_round r = {0};
    const int qd = s->p.queue_depth;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->stop && !s->wq_n && !s->rq_head && s->sync_done == s->sync_req)
            pthread_cond_wait(&s->cv_io, &s->mu);
        if (s->stop && !s->wq_n && !s->rq_head && s->sync_done == s->sync_req) break;
        int head0 = s->wq_head, nw = s->wq_n;
        s->wq_head = (s->wq_head + nw) % qd;
        s->wq_n = 0;
        st_spill_ticket *tickets = s->rq_head;
        s->rq_head = s->rq_tail = NULL;
        uint64_t sync_target = s->sync_done != s->sync_req ? s->sync_req : 0;
        uint64_t epoch = s->write_epoch;
        r.n_ops = r.n_bounce = 0;
        int rc = 0;
        /* Writes first in the op list, np consecutive ops per slot; within a round
         * io_uring may reorder anyway, and no read in this round can target a WRITING
         * slot (those are served from staging). */
        for (int i = 0; i < nw && !rc; i++) {
            st_stage *sg = &s->stage[s->wq[(head0 + i) % qd]];
            st_slot_ent *e = &s->ent[sg->slot];
            for (uint32_t k = 0; k < s->np && !rc; k++) {
                io_op op = {.buf = sg->buf + k * s->pstride, .len = sg->io_len,
                            .off = st_spill_part_off(s, sg->slot, k), .write = 1,
                            .stage = s->wq[(head0 + i) % qd], .slot = sg->slot, .key = e->key,
                            .gen = e->gen};
                rc = push_op(&r, &op);
            }
        }
        if (rc) { /* no memory for the op list: fail this round's writes cleanly */
            r.n_ops = 0;
            for (int i = 0; i < nw; i++) complete_write(s, s->wq[(head0 + i) % qd], ST_E_NOMEM, 0);
            pthread_cond_broadcast(&s->cv_done);
        }
        int n_write_ops = r.n_ops;
        pthread_mutex_unlock(&s->mu);

        /* Grow the arena to a bound of this round's bounce bytes (coalesced ranges never
         * span more than their parts), capped. */
        size_t need = 0;
        for (st_spill_ticket *t = tickets; t; t = t->next)
            for (int k = 0; k < t->n_snap; k++) need += t->snap[k].io_len;
        if (need > r.arena_cap && need <= ST_SPILL_ARENA_MAX) {
            st_free_aligned(r.arena);
            r.arena = st_alloc_aligned(need, ST_SPILL_ALIGN);
            r.arena_cap = r.arena ? need : 0;
        }
        r.arena_used = 0;
        /* Plan every ticket before any can be published (and freed by its waiter). */
        for (st_spill_ticket *t = tickets; t; t = t->next) plan_reads(s, &r, t);
        for (st_spill_ticket *t = tickets, *next; t; t = next) {
            next = t->next;
            t->pending = t->n_ops;
            if (!t->n_ops) publish_ticket(s, &r, t); /* nothing could be planned */
        }
        run_round(s, &r);
        for (int i = 0; i < r.n_bounce; i++) st_free_aligned(r.bounce[i]);

        pthread_mutex_lock(&s->mu);
        complete_writes(s, &r, n_write_ops);
        pthread_cond_broadcast(&s->cv_done);
        if (s->p.on_done && n_write_ops) {
            pthread_mutex_unlock(&s->mu);
            for (int i = 0; i < n_write_ops; i += (int)s->np) {
                int wrc = 0;
                for (uint32_t k = 0; k < s->np && !wrc; k++) wrc = r.ops[i + (int)k].res;
                s->p.on_done(s->p.done_arg, r.ops[i].slot, r.ops[i].key, r.ops[i].gen, wrc);
            }
            pthread_mutex_lock(&s->mu);
        }
        if (sync_target) {
            pthread_mutex_unlock(&s->mu);
            do_sync(s, sync_target, epoch);
            pthread_mutex_lock(&s->mu);
        }
    }
    pthread_mutex_unlock(&s->mu);
    free(r.ops);
    free(r.bounce);
    st_free_aligned(r.arena);
    return NULL;
}
