/*
 * strata tier: the SSD (cold) tier's building blocks, used by the KV page pool.
 *
 *   st_io          a tiny I/O interface (pread / pwrite / fsync / close) with backends:
 *                  plain fd, memory, and a fault-injecting wrapper for tests.
 *   st_spill_dir   DIR/instance-<id>/: lock file (flock, held for the process's life),
 *                  pid file, spill file; st_spill_gc removes dead instances.
 *   st_spill       the spill store: fixed-size slots in a spill file, a free list, a disk
 *                  budget, XXH3-64 checksums verified on every read, a write-behind I/O
 *                  thread (io_uring when available, pread/pwrite otherwise), batched and
 *                  coalesced reads, optional cold compression (q8 / q4).
 *
 * The pool owns page states (see the design essay in src/tier/spill.c); the store owns
 * slots and I/O. The pool calls, per page slab:
 *   st_spill_write()   spill: copies the bytes, returns a slot at once, writes behind;
 *   st_spill_read() / st_spill_read_batch() / st_spill_read_submit()+wait()   fetch;
 *   st_spill_release() the slot is no longer needed (page dropped or rewritten).
 *
 * Errors follow core.h. Write errors happen on the I/O thread; they are recorded on the
 * slot and returned by the next operation that needs that slot's data (a read, or
 * st_spill_slot_status / st_spill_flush), never by aborting.
 */
#ifndef STRATA_TIER_H
#define STRATA_TIER_H

#include "strata/core.h"

#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ==== I/O interface =============================================================== */

typedef struct st_io st_io;

/* One backend. pread/pwrite make ONE attempt and return the bytes transferred (may be
 * short; 0 from pread means end of file) or -errno (-EINTR included). The helpers below
 * loop. fd and dontneed may be NULL (no raw fd: io_uring is then not used). */
typedef struct st_io_ops {
    ssize_t (*pread)(st_io *io, void *buf, size_t n, uint64_t off);
    ssize_t (*pwrite)(st_io *io, const void *buf, size_t n, uint64_t off);
    int (*fsync)(st_io *io);                               /* 0 or -errno */
    void (*close)(st_io *io);                              /* frees io */
    int (*fd)(st_io *io);                                  /* raw fd, or -1 */
    void (*dontneed)(st_io *io, uint64_t off, uint64_t n); /* drop cached pages */
} st_io_ops;

/* Backends embed this as their first member (like redis' rio). */
struct st_io {
    const st_io_ops *ops;
};

/* Complete-read / complete-write loops: retry on EINTR, continue after short transfers.
 * Return 0 when all n bytes moved, -errno on a failure, ST_E_IO when pread hits end of
 * file before n bytes, or when pwrite keeps returning 0. Not thread-safe per io unless
 * the backend is (fd is; memory and fault are not). */
int st_io_pread_full(st_io *io, void *buf, size_t n, uint64_t off);
int st_io_pwrite_full(st_io *io, const void *buf, size_t n, uint64_t off);
int st_io_sync(st_io *io); /* fsync, retried on EINTR; 0 or -errno */
int st_io_fd(st_io *io);   /* raw fd or -1 */
void st_io_close(st_io *io); /* NULL is a no-op */

/* Plain fd backend. open(2) flags/mode as given (O_CLOEXEC added). Returns 0, -errno.
 * *out owned by caller (st_io_close closes the fd). */
int st_io_fd_open(const char *path, int flags, int mode, st_io **out);
/* Wraps an open fd; st_io_close closes it. Returns 0 or ST_E_INVAL / ST_E_NOMEM. */
int st_io_fd_adopt(int fd, st_io **out);

/* Growable in-memory file. Returns 0 or ST_E_NOMEM. */
int st_io_mem_create(st_io **out);
/* The memory file's bytes (writable, so tests can flip bits) and size; valid until the
 * next write to io. NULL when io is not a memory backend. */
uint8_t *st_io_mem_data(st_io *io, size_t *size);

/* Fault injection. Call counters are 1-based and count calls of the backend op (each
 * EINTR returned counts as a call). 0 disables a rule. */
typedef struct st_io_fault_cfg {
    uint64_t fail_write_nth;     /* the Nth pwrite fails with fail_write_errno ... */
    uint64_t fail_write_count;   /* ... and so do the next count-1 (0 means 1) */
    int fail_write_errno;        /* positive errno, e.g. EIO; 0 means EIO */
    size_t short_write_max;      /* pwrite moves at most this many bytes */
    size_t short_read_max;       /* pread moves at most this many bytes */
    unsigned eintr_storm;        /* before each real op, return -EINTR this many times */
    uint64_t enospc_after_bytes; /* total bytes written beyond this fail with -ENOSPC */
    int enospc_enabled;          /* (0 bytes is a valid limit, hence the switch) */
    uint64_t eio_read_nth;       /* the Nth pread fails with -EIO */
    uint64_t corrupt_read_nth;   /* the Nth pread succeeds but flips one byte ... */
    size_t corrupt_byte;         /* ... at this index of what it read (mod length) */
    uint64_t fail_fsync_nth;     /* the Nth fsync fails with -EIO */
} st_io_fault_cfg;

typedef struct st_io_fault_counts {
    uint64_t writes, reads, fsyncs;           /* op calls seen */
    uint64_t bytes_written, bytes_read;       /* bytes passed through to inner */
    uint64_t injected_errors, injected_eintr; /* faults injected */
    uint64_t injected_short, injected_corrupt;
} st_io_fault_counts;

/* Wraps inner (ownership passes to the wrapper, also on failure). cfg copied. Returns 0,
 * ST_E_INVAL, ST_E_NOMEM. The wrapper exposes no raw fd, so the store uses pread/pwrite
 * through it. Not thread-safe (the store only calls it from its I/O thread). */
int st_io_fault_create(st_io *inner, const st_io_fault_cfg *cfg, st_io **out);
/* Replace the rules (counters keep running); call only while no I/O is in flight. */
void st_io_fault_set(st_io *io, const st_io_fault_cfg *cfg);
/* Counters so far; zeros when io is not a fault backend. */
st_io_fault_counts st_io_fault_get_counts(st_io *io);

/* ==== spill directory ============================================================= */

typedef struct st_spill_dir st_spill_dir;

#define ST_SPILL_ID_MAX 64 /* instance id: 1..64 of [A-Za-z0-9._-], not "." / ".." */

/* Creates (mkdir -p) root and root/instance-<id>/, takes an exclusive non-blocking
 * flock on its "lock" file for as long as the handle lives, and writes "pid".
 * id NULL or "" means the pid. Returns 0; ST_E_BUSY when another live process holds the
 * lock (message names its pid); ST_E_INVAL for a bad id; -errno. *out owned by caller. */
int st_spill_dir_open(const char *root, const char *id, st_ctx *ctx, st_spill_dir **out);
/* "root/instance-<id>"; valid for the handle's life. */
const char *st_spill_dir_path(const st_spill_dir *d);
/* Removes the instance's files and directory, then drops the lock. NULL is a no-op.
 * Close every st_spill opened on d first. */
void st_spill_dir_close(st_spill_dir *d);

/* Removes every root/instance-* directory whose lock no process holds (stale: its
 * process died); leaves live ones alone. Counts may be NULL. Returns 0 or -errno for
 * root itself (a missing root is 0 with nothing done); a directory it cannot remove is
 * reported in ctx and counted in *n_failed. */
int st_spill_gc(const char *root, st_ctx *ctx, int *n_removed, int *n_live, int *n_failed);

/* ==== spill store ================================================================= */

typedef struct st_spill st_spill;
typedef uint32_t st_slot;
#define ST_SLOT_NONE UINT32_MAX
#define ST_SPILL_ALIGN 4096u /* slot size and every I/O offset/length are multiples */

/* Cold compression of spilled payloads (f32/f16/bf16 only; other types stored raw):
 * blocks of 32 elements with an f16 scale, ggml's q8_0 (34 B / 32, 8.5 bpw) and q4_0
 * (18 B / 32, 4.5 bpw) layouts. Lossy: a fetched page is the dequantized values. */
typedef enum st_cold_type { ST_COLD_NONE = 0, ST_COLD_Q8 = 1, ST_COLD_Q4 = 2 } st_cold_type;

/* Parse "none" | "q8" | "q4"; -1 when unknown. */
int st_cold_parse(const char *s);
const char *st_cold_name(st_cold_type t);
/* Encoded size of src_bytes of type src under cold type t; src_bytes itself when t is
 * NONE or src is not f32/f16/bf16; 0 when src_bytes is not a whole number of elements. */
size_t st_cold_bytes(st_cold_type t, st_type src, size_t src_bytes);
/* Encode / decode. Returns 0, ST_E_INVAL (type, sizes), ST_E_LIMIT (dst too small). */
int st_cold_encode(st_cold_type t, st_type src, const void *in, size_t in_bytes, void *out,
                   size_t out_cap, size_t *out_len);
int st_cold_decode(st_cold_type t, st_type dst, const void *in, size_t in_len, void *out,
                   size_t out_bytes);

/* Opens a backend for the spill file. direct: try O_DIRECT. Return 0 or -errno (EINVAL
 * from a direct open makes the store retry buffered). Tests use it to inject faults. */
typedef int (*st_spill_open_fn)(void *arg, const char *path, int direct, st_io **out);

/* Called on the I/O thread when a write finishes (rc 0 or its error). Must be quick and
 * must not call into the store. */
typedef void (*st_spill_done_fn)(void *arg, st_slot slot, uint64_t key, uint64_t gen, int rc);

typedef struct st_spill_params {
    size_t slot_bytes;      /* payload capacity of a slot; rounded up to 4096. Required. */
    uint64_t disk_budget;   /* bytes of slots allowed (0 = unlimited) */
    int queue_depth;        /* write-behind staging buffers (0 = 16); bounds RAM used */
    size_t max_read_bytes;  /* largest coalesced read (0 = 1 MiB) */
    int no_direct;          /* 1: never try O_DIRECT */
    int no_uring;           /* 1: never try io_uring */
    int uring_entries;      /* ring size (0 = 64) */
    st_cold_type cold;      /* cold compression of f32/f16/bf16 payloads */
    st_spill_open_fn open_fn; /* NULL = plain fd backend */
    void *open_arg;
    st_spill_done_fn on_done; /* optional write-completion callback */
    void *done_arg;
    /* Parts (the KV pool passes n_layer): 0 or 1 = one whole payload. Else every page
     * written has a length that is a multiple of n_parts and is stored as n_parts equal
     * parts, each checksummed (and cold-coded) on its own, so one part or a run of parts
     * (one layer block of a page) can be read and verified alone (st_spill_rd.part_*). */
    uint32_t n_parts;
} st_spill_params;

#define ST_SPILL_MAX_PARTS 4096

st_spill_params st_spill_default_params(size_t slot_bytes);

/* Opens "spill.dat" in d (which must outlive the store). Tries O_DIRECT unless
 * no_direct; EINVAL at open or on the first (header) write falls back to buffered I/O
 * with posix_fadvise(DONTNEED). Tries io_uring unless no_uring; a failed
 * io_uring_queue_init falls back to pread/pwrite. st_spill_info says which were chosen.
 * Returns 0, ST_E_INVAL, ST_E_NOMEM, -errno. *out owned by caller. */
int st_spill_open(st_spill_dir *d, const st_spill_params *p, st_ctx *ctx, st_spill **out);
/* Same over a caller-made backend (ownership of io passes to the store, also on
 * failure); treated as buffered. For tests (memory, fault backends). */
int st_spill_open_io(st_io *io, const st_spill_params *p, st_ctx *ctx, st_spill **out);
/* Waits for queued writes, stops the I/O thread, closes the file. NULL is a no-op. */
void st_spill_close(st_spill *s);

typedef struct st_spill_info {
    int direct;            /* 1: O_DIRECT in use */
    int uring;             /* 1: io_uring in use; 0: pread/pwrite */
    size_t slot_bytes;     /* slot size (multiple of 4096): n_parts * part_bytes */
    size_t part_bytes;     /* file bytes per part (multiple of 4096) */
    uint32_t extent_slots; /* slots per extent of the part-major layout (1: page-major) */
    char why[160];         /* why a fallback was taken ("" when none) */
} st_spill_info;
st_spill_info st_spill_get_info(st_spill *s);

/* One page slab to spill. data is only read during the call. */
typedef struct st_spill_page {
    const void *data;
    size_t len;        /* bytes, 1..slot_bytes (after cold encoding) */
    st_type type;      /* element type (cold compression applies to f32/f16/bf16) */
    uint64_t key, gen; /* page identity and generation; checked again on read */
    uint64_t checksum; /* XXH3-64 of data when has_checksum (end-to-end check: a read */
    int has_checksum;  /*  verifies it); ignored when cold compression re-encodes */
} st_spill_page;

#define ST_SPILL_NOWAIT 1 /* st_spill_write: -EAGAIN instead of waiting for a buffer */
#define ST_SPILL_DROP 2   /* st_spill_release: counted as a cache drop */

/* Spills one page: allocates a slot, copies (and maybe encodes) the data into an aligned
 * staging buffer and queues the write; returns at once with *slot set. The caller may
 * reuse its buffer immediately; the slot's data can be read back at once (served from
 * staging while the write is in flight). Blocks while all staging buffers are in flight
 * (counted as a stall) unless ST_SPILL_NOWAIT. Returns 0; ST_E_NOSPACE (budget or
 * filesystem full: drop cached pages, then retry; slots released while their write is
 * in flight are waited for first); -EAGAIN (NOWAIT, and it would have had to wait);
 * ST_E_INVAL / ST_E_LIMIT (bad page). Thread-safe. */
int st_spill_write(st_spill *s, const st_spill_page *pg, int flags, st_slot *slot, st_ctx *ctx);

/* One read of a batch. buf receives exactly len bytes (the page's original length and
 * type; cold pages are decoded). rc is set by the read. */
typedef struct st_spill_rd {
    st_slot slot;
    uint64_t key, gen; /* must equal what was written (else ST_E_STATE) */
    void *buf;
    size_t len;        /* whole payload: the written length; parts: part_count * part length */
    int rc; /* out: 0, ST_E_CORRUPT, -errno of the failed write/read, ST_E_STATE... */
    /* Ranged read (stores opened with n_parts > 1): parts [part_first, part_first +
     * part_count) only, one aligned I/O, each part's checksum verified. part_count 0 = the
     * whole payload (part_first must then be 0). */
    uint32_t part_first, part_count;
} st_spill_rd;

/* Reads slots back: sorted by file offset, adjacent slots coalesced into one read,
 * checksums verified; a mismatch is ST_E_CORRUPT for that entry and its buf is zeroed
 * (never garbage). Returns 0 when every entry succeeded, else the first failing
 * entry's rc (every rd[i].rc is set). Thread-safe. */
int st_spill_read_batch(st_spill *s, st_spill_rd *rd, int n, st_ctx *ctx);
int st_spill_read(st_spill *s, st_slot slot, uint64_t key, uint64_t gen, void *buf,
                  size_t len, st_ctx *ctx);

/* Asynchronous form, for prefetch: rd (and the buffers) must stay untouched until
 * st_spill_read_wait returns. *ticket owned by the store; wait exactly once. Returns 0,
 * ST_E_INVAL, ST_E_NOMEM. wait returns what st_spill_read_batch would. */
typedef struct st_spill_ticket st_spill_ticket;
int st_spill_read_submit(st_spill *s, st_spill_rd *rd, int n, st_spill_ticket **ticket);
int st_spill_read_wait(st_spill *s, st_spill_ticket *ticket, st_ctx *ctx);

/* The slot is no longer needed. A slot still being written is freed when the write
 * completes. Returns 0 or ST_E_STATE (not allocated: a double release). Thread-safe. */
int st_spill_release(st_spill *s, st_slot slot, int flags);

/* 0 stored; 1 write in flight; the recorded error of a failed write; ST_E_STATE when
 * not allocated. */
int st_spill_slot_status(st_spill *s, st_slot slot);

/* Waits for every queued write; with do_sync also fsyncs (a failed fsync marks every slot
 * written since the last good one as failed with -EIO). Returns 0 or the first error
 * recorded since the previous flush. */
int st_spill_flush(st_spill *s, int do_sync, st_ctx *ctx);

typedef struct st_spill_stats {
    uint64_t writes, reads;             /* slot writes completed OK / slot reads verified */
    uint64_t bytes_written, bytes_read; /* bytes moved to / from the file */
    uint64_t bytes_logical;             /* payload bytes handed in (before cold coding) */
    uint64_t bytes_stored;              /* payload bytes after cold coding */
    uint64_t read_ios;                  /* coalesced read I/Os issued */
    uint64_t staged_reads;              /* reads served from a staging buffer */
    uint64_t checksum_failures, write_errors, read_errors, sync_errors;
    uint64_t write_stalls;              /* writes that waited for a staging buffer */
    uint64_t read_stalls;               /* read waits that had to block */
    uint64_t drops, releases, nospace;  /* releases with ST_SPILL_DROP / all / refused */
    uint64_t slots_used, slots_max;     /* allocated now / budget (UINT32_MAX: none) */
    uint64_t slots_hwm;                 /* file extent in slots */
    uint64_t bytes_used, bytes_budget;  /* slots_used*slot_bytes / disk_budget (0 none) */
    uint64_t writes_in_flight;
} st_spill_stats;
st_spill_stats st_spill_get_stats(st_spill *s);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_TIER_H */
