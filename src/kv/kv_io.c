/* The snapshot I/O interface's backends: a growing memory writer, a memory reader, FILE*
 * and fd. Each write writes everything or fails; each read returns what it could (short
 * only at end of stream). The fd backend loops over short transfers and EINTR. */
#include "strata/kv.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

static int mem_write(st_kv_io *io, const void *buf, size_t n) {
    if (n > SIZE_MAX - io->len) return ST_E_NOMEM;
    if (io->len + n > io->cap) {
        size_t cap = io->cap ? io->cap : 4096;
        while (cap < io->len + n) {
            if (cap > SIZE_MAX / 2) return ST_E_NOMEM;
            cap *= 2;
        }
        uint8_t *b = realloc(io->buf, cap);
        if (!b) return ST_E_NOMEM;
        io->buf = b;
        io->cap = cap;
    }
    if (n) memcpy(io->buf + io->len, buf, n);
    io->len += n;
    return 0;
}

static int64_t mem_read(st_kv_io *io, void *buf, size_t n) {
    size_t left = io->len - io->pos;
    if (n > left) n = left;
    if (n) memcpy(buf, io->buf + io->pos, n);
    io->pos += n;
    return (int64_t)n;
}

static int no_write(st_kv_io *io, const void *buf, size_t n) { return -EBADF; }
static int64_t no_read(st_kv_io *io, void *buf, size_t n) { return -EBADF; }

void st_kv_io_mem_writer(st_kv_io *io) {
    memset(io, 0, sizeof *io);
    io->write = mem_write;
    io->read = no_read;
    io->fd = -1;
}

void st_kv_io_mem_reader(st_kv_io *io, const void *buf, size_t n) {
    memset(io, 0, sizeof *io);
    io->write = no_write;
    io->read = mem_read;
    io->buf = (uint8_t *)(uintptr_t)buf; /* read-only through mem_read */
    io->len = n;
    io->fd = -1;
}

void st_kv_io_mem_release(st_kv_io *io) {
    if (io->write == mem_write) free(io->buf);
    io->buf = NULL;
    io->len = io->cap = io->pos = 0;
}

static int file_write(st_kv_io *io, const void *buf, size_t n) {
    if (n && fwrite(buf, 1, n, io->fp) != n) return errno ? -errno : ST_E_IO;
    return 0;
}

static int64_t file_read(st_kv_io *io, void *buf, size_t n) {
    size_t got = n ? fread(buf, 1, n, io->fp) : 0;
    if (got < n && ferror(io->fp)) return errno ? -errno : ST_E_IO;
    return (int64_t)got;
}

void st_kv_io_file(st_kv_io *io, FILE *fp) {
    memset(io, 0, sizeof *io);
    io->write = file_write;
    io->read = file_read;
    io->fp = fp;
    io->fd = -1;
}

static int fd_write(st_kv_io *io, const void *buf, size_t n) {
    const uint8_t *p = buf;
    while (n > 0) {
        ssize_t w = write(io->fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (w == 0) return ST_E_IO;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int64_t fd_read(st_kv_io *io, void *buf, size_t n) {
    uint8_t *p = buf;
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(io->fd, p + got, n - got);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    return (int64_t)got;
}

void st_kv_io_fd(st_kv_io *io, int fd) {
    memset(io, 0, sizeof *io);
    io->write = fd_write;
    io->read = fd_read;
    io->fd = fd;
}
