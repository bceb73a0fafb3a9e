/* st_io: the loops every caller needs (short transfers, EINTR) and the plain fd and
 * memory backends. The fault-injecting wrapper lives in io_fault.c. */
#include "strata/tier.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A backend that keeps returning 0 from pwrite would spin forever; give up after this
 * many zero-byte results in a row. */
#define ST_IO_MAX_ZERO_WRITES 16

int st_io_pread_full(st_io *io, void *buf, size_t n, uint64_t off) {
    uint8_t *p = buf;
    while (n > 0) {
        ssize_t r = io->ops->pread(io, p, n, off);
        if (r == -EINTR || r == -EAGAIN) continue;
        if (r < 0) return (int)r;
        if (r == 0) return ST_E_IO; /* end of file before n bytes */
        ST_ASSERT((size_t)r <= n);
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

int st_io_pwrite_full(st_io *io, const void *buf, size_t n, uint64_t off) {
    const uint8_t *p = buf;
    int zeros = 0;
    while (n > 0) {
        ssize_t r = io->ops->pwrite(io, p, n, off);
        if (r == -EINTR || r == -EAGAIN) continue;
        if (r < 0) return (int)r;
        if (r == 0) {
            if (++zeros >= ST_IO_MAX_ZERO_WRITES) return ST_E_IO;
            continue;
        }
        zeros = 0;
        ST_ASSERT((size_t)r <= n);
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

int st_io_sync(st_io *io) {
    int rc;
    do rc = io->ops->fsync(io);
    while (rc == -EINTR);
    return rc;
}

int st_io_fd(st_io *io) { return io && io->ops->fd ? io->ops->fd(io) : -1; }

void st_io_close(st_io *io) {
    if (io) io->ops->close(io);
}

/* ---- plain fd ---------------------------------------------------------------------- */

typedef struct st_io_fdb {
    st_io io;
    int fd;
} st_io_fdb;

static ssize_t fd_pread(st_io *io, void *buf, size_t n, uint64_t off) {
    ssize_t r = pread(((st_io_fdb *)io)->fd, buf, n, (off_t)off);
    return r < 0 ? -errno : r;
}
static ssize_t fd_pwrite(st_io *io, const void *buf, size_t n, uint64_t off) {
    ssize_t r = pwrite(((st_io_fdb *)io)->fd, buf, n, (off_t)off);
    return r < 0 ? -errno : r;
}
static int fd_fsync(st_io *io) { return fdatasync(((st_io_fdb *)io)->fd) ? -errno : 0; }
static void fd_close(st_io *io) {
    close(((st_io_fdb *)io)->fd);
    free(io);
}
static int fd_fd(st_io *io) { return ((st_io_fdb *)io)->fd; }
static void fd_dontneed(st_io *io, uint64_t off, uint64_t n) {
    int fd = ((st_io_fdb *)io)->fd;
    /* DONTNEED skips dirty pages: start and wait for their writeback first. */
    sync_file_range(fd, (off_t)off, (off_t)n,
                    SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
    posix_fadvise(fd, (off_t)off, (off_t)n, POSIX_FADV_DONTNEED);
}

static const st_io_ops fd_ops = {fd_pread, fd_pwrite, fd_fsync, fd_close, fd_fd, fd_dontneed};

int st_io_fd_adopt(int fd, st_io **out) {
    if (!out) return ST_E_INVAL;
    *out = NULL;
    if (fd < 0) return ST_E_INVAL;
    st_io_fdb *b = calloc(1, sizeof *b);
    if (!b) return ST_E_NOMEM;
    b->io.ops = &fd_ops;
    b->fd = fd;
    *out = &b->io;
    return 0;
}

int st_io_fd_open(const char *path, int flags, int mode, st_io **out) {
    if (!out) return ST_E_INVAL;
    *out = NULL;
    if (!path) return ST_E_INVAL;
    int fd = open(path, flags | O_CLOEXEC, mode);
    if (fd < 0) return -errno;
    int rc = st_io_fd_adopt(fd, out);
    if (rc) close(fd);
    return rc;
}

/* ---- memory ------------------------------------------------------------------------ */

typedef struct st_io_memb {
    st_io io;
    uint8_t *data; /* (cap) bytes, the first size of them meaningful */
    size_t size, cap;
} st_io_memb;

static ssize_t mem_pread(st_io *io, void *buf, size_t n, uint64_t off) {
    st_io_memb *m = (st_io_memb *)io;
    if (off >= m->size) return 0;
    size_t k = m->size - (size_t)off;
    if (k > n) k = n;
    memcpy(buf, m->data + off, k);
    return (ssize_t)k;
}
static ssize_t mem_pwrite(st_io *io, const void *buf, size_t n, uint64_t off) {
    st_io_memb *m = (st_io_memb *)io;
    uint64_t end;
    if (st_add_overflow_u64(off, n, &end) || end > (uint64_t)SSIZE_MAX) return -EFBIG;
    if (end > m->cap) {
        size_t cap = m->cap ? m->cap : 4096;
        while (cap < end) cap *= 2;
        uint8_t *d = realloc(m->data, cap);
        if (!d) return -ENOMEM;
        memset(d + m->cap, 0, cap - m->cap);
        m->data = d;
        m->cap = cap;
    }
    memcpy(m->data + off, buf, n);
    if (end > m->size) m->size = (size_t)end;
    return (ssize_t)n;
}
static int mem_fsync(st_io *io) { return 0; }
static void mem_close(st_io *io) {
    free(((st_io_memb *)io)->data);
    free(io);
}

static const st_io_ops mem_ops = {mem_pread, mem_pwrite, mem_fsync, mem_close, NULL, NULL};

int st_io_mem_create(st_io **out) {
    if (!out) return ST_E_INVAL;
    *out = NULL;
    st_io_memb *m = calloc(1, sizeof *m);
    if (!m) return ST_E_NOMEM;
    m->io.ops = &mem_ops;
    *out = &m->io;
    return 0;
}

uint8_t *st_io_mem_data(st_io *io, size_t *size) {
    if (size) *size = 0;
    if (!io || io->ops != &mem_ops) return NULL;
    st_io_memb *m = (st_io_memb *)io;
    if (size) *size = m->size;
    return m->data;
}
