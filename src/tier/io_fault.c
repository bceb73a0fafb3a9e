/* The fault-injecting st_io wrapper: makes the disk misbehave on cue so tests can prove
 * that every failure comes back as a clean error and never as wrong data. */
#include "strata/tier.h"

#include <errno.h>
#include <stdlib.h>

typedef struct st_io_faultb {
    st_io io;
    st_io *inner;
    st_io_fault_cfg cfg;
    st_io_fault_counts n;
    unsigned eintr_left; /* EINTRs still to return before the next real op */
} st_io_faultb;

/* Returns 1 when an EINTR is due now (consuming one of the storm). After a storm the
 * real op runs and the next op gets a fresh storm. */
static int fault_eintr(st_io_faultb *f) {
    if (!f->cfg.eintr_storm) return 0;
    if (f->eintr_left == 0) {
        f->eintr_left = f->cfg.eintr_storm + 1; /* +1: the real op's turn */
    }
    if (--f->eintr_left == 0) return 0;
    f->n.injected_eintr++;
    return 1;
}

static ssize_t fault_pwrite(st_io *io, const void *buf, size_t n, uint64_t off) {
    st_io_faultb *f = (st_io_faultb *)io;
    uint64_t call = ++f->n.writes;
    if (fault_eintr(f)) return -EINTR;
    uint64_t first = f->cfg.fail_write_nth;
    uint64_t count = f->cfg.fail_write_count ? f->cfg.fail_write_count : 1;
    if (first && call >= first && call - first < count) {
        f->n.injected_errors++;
        return -(f->cfg.fail_write_errno ? f->cfg.fail_write_errno : EIO);
    }
    size_t k = n;
    if (f->cfg.short_write_max && k > f->cfg.short_write_max) k = f->cfg.short_write_max;
    if (f->cfg.enospc_enabled) {
        uint64_t lim = f->cfg.enospc_after_bytes;
        if (f->n.bytes_written >= lim) {
            f->n.injected_errors++;
            return -ENOSPC;
        }
        /* A real filesystem fills up mid-request: transfer what fits, fail next call. */
        if (k > lim - f->n.bytes_written) k = (size_t)(lim - f->n.bytes_written);
    }
    if (k < n) f->n.injected_short++;
    ssize_t r = f->inner->ops->pwrite(f->inner, buf, k, off);
    if (r > 0) f->n.bytes_written += (uint64_t)r;
    return r;
}

static ssize_t fault_pread(st_io *io, void *buf, size_t n, uint64_t off) {
    st_io_faultb *f = (st_io_faultb *)io;
    uint64_t call = ++f->n.reads;
    if (fault_eintr(f)) return -EINTR;
    if (f->cfg.eio_read_nth && call == f->cfg.eio_read_nth) {
        f->n.injected_errors++;
        return -EIO;
    }
    size_t k = n;
    if (f->cfg.short_read_max && k > f->cfg.short_read_max) {
        k = f->cfg.short_read_max;
        f->n.injected_short++;
    }
    ssize_t r = f->inner->ops->pread(f->inner, buf, k, off);
    if (r > 0) {
        f->n.bytes_read += (uint64_t)r;
        if (f->cfg.corrupt_read_nth && call == f->cfg.corrupt_read_nth) {
            ((uint8_t *)buf)[f->cfg.corrupt_byte % (size_t)r] ^= 0x5a;
            f->n.injected_corrupt++;
        }
    }
    return r;
}

static int fault_fsync(st_io *io) {
    st_io_faultb *f = (st_io_faultb *)io;
    uint64_t call = ++f->n.fsyncs;
    if (fault_eintr(f)) return -EINTR;
    if (f->cfg.fail_fsync_nth && call == f->cfg.fail_fsync_nth) {
        f->n.injected_errors++;
        return -EIO;
    }
    return f->inner->ops->fsync(f->inner);
}

static void fault_close(st_io *io) {
    st_io_faultb *f = (st_io_faultb *)io;
    st_io_close(f->inner);
    free(f);
}

static void fault_dontneed(st_io *io, uint64_t off, uint64_t n) {
    st_io *in = ((st_io_faultb *)io)->inner;
    if (in->ops->dontneed) in->ops->dontneed(in, off, n);
}

/* fd is NULL on purpose: a raw fd would let io_uring bypass the faults. */
static const st_io_ops fault_ops = {fault_pread, fault_pwrite, fault_fsync, fault_close, NULL,
                                    fault_dontneed};

int st_io_fault_create(st_io *inner, const st_io_fault_cfg *cfg, st_io **out) {
    if (!out) {
        st_io_close(inner);
        return ST_E_INVAL;
    }
    *out = NULL;
    if (!inner) return ST_E_INVAL;
    st_io_faultb *f = calloc(1, sizeof *f);
    if (!f) {
        st_io_close(inner);
        return ST_E_NOMEM;
    }
    f->io.ops = &fault_ops;
    f->inner = inner;
    if (cfg) f->cfg = *cfg;
    *out = &f->io;
    return 0;
}

void st_io_fault_set(st_io *io, const st_io_fault_cfg *cfg) {
    if (!io || io->ops != &fault_ops) return;
    st_io_faultb *f = (st_io_faultb *)io;
    st_io_fault_cfg zero = {0};
    f->cfg = cfg ? *cfg : zero;
    f->eintr_left = 0;
}

st_io_fault_counts st_io_fault_get_counts(st_io *io) {
    st_io_fault_counts z = {0};
    if (!io || io->ops != &fault_ops) return z;
    return ((st_io_faultb *)io)->n;
}
