/* Private layout of the spill store, shared by spill.c (slots, API) and spill_io.c (the
 * I/O thread). Everything here is guarded by st_spill.mu unless a comment says otherwise. */
#ifndef STRATA_TIER_INT_H
#define STRATA_TIER_INT_H

#include "strata/tier.h"

#include <liburing.h>
#include <pthread.h>

#define ST_SPILL_MAGIC "STRSPILL"
#define ST_SPILL_VERSION 2u
#define ST_SPILL_HEADER_BYTES 4096u /* file header; slot 0 starts right after it */
#define ST_SPILL_DEFAULT_QUEUE 16
#define ST_SPILL_MAX_QUEUE 4096
#define ST_SPILL_DEFAULT_READ (1u << 20)
#define ST_SPILL_DEFAULT_URING 64
#define ST_SPILL_MAX_SLOT_BYTES ((size_t)1 << 30)
#define ST_SPILL_MAX_EXTENT 65536u /* slots per extent */
#define ST_SPILL_EXTENT_RUN ((uint64_t)8 << 20) /* bytes of one part's run in an extent */

typedef enum st_slot_state {
    ST_SLOT_FREE = 0,    /* on the free list (or beyond hwm) */
    ST_SLOT_WRITING = 1, /* data in a staging buffer; write queued or in flight */
    ST_SLOT_STORED = 2,  /* data on disk, checksum in the side table */
    ST_SLOT_FAILED = 3,  /* the write (or a later fsync) failed: err says how */
} st_slot_state;

/* Side table entry: the checksum and identity of each slot live in RAM, not in the file
 * (see the essay in spill.c). */
typedef struct st_slot_ent {
    uint64_t key, gen;   /* page identity given by the pool */
    /* checksums: st_spill.psum[slot * np + i] = XXH3-64 of part i's stored bytes */
    uint64_t epoch;      /* write sequence number, for fsync failure attribution */
    uint32_t len;        /* stored payload bytes (after cold coding) */
    uint32_t raw_len;    /* bytes the caller handed in and will get back */
    uint32_t part_len;   /* stored bytes of one part (np == 1: == len) */
    int32_t err;         /* FAILED: the error */
    uint16_t readers;    /* read entries on disk in flight (release is refused meanwhile) */
    int16_t stage;       /* WRITING: staging buffer index; else -1 */
    uint8_t state;       /* st_slot_state */
    uint8_t cold;        /* st_cold_type applied to this payload */
    uint8_t type;        /* st_type of the caller's data */
    uint8_t release_pending; /* released while WRITING: free it on completion */
    uint8_t backed;      /* a write to it once succeeded: the filesystem has its blocks */
} st_slot_ent;

typedef struct st_stage {
    uint8_t *buf;    /* (slot_bytes), 4096-aligned */
    st_slot slot;    /* owner while busy */
    uint32_t io_len; /* bytes to write per part: stored part length rounded up to 4096 */
    int busy;
    uint64_t *sums;  /* (np) part checksums computed outside mu */
} st_stage;

/* One contiguous range of a read entry. From disk, an entry of a multi-part store is one
 * snap per part (parts of a slot are not adjacent in the file, see spill.c); from a
 * staging buffer, one snap covers the entry's parts at the staging stride. */
typedef struct st_rd_snap {
    int idx;       /* index into the caller's rd array */
    uint64_t off;  /* file offset of the (4096-aligned) read */
    uint32_t io_len;    /* bytes read, a multiple of 4096 */
    uint32_t skip;      /* first part's offset within the read */
    uint32_t n_part;    /* parts delivered */
    uint32_t part_len;  /* stored bytes per part */
    uint32_t stride;    /* distance between consecutive parts in the source */
    uint32_t part_raw;  /* bytes per part delivered to the caller */
    uint32_t dst_part;  /* the first part lands at rd->buf + dst_part * part_raw */
    const uint64_t *sums; /* (n_part) expected checksums, copied at submit */
    uint8_t cold, type;
    uint8_t head;       /* 1 on exactly one snap of each entry (counts readers, stats) */
} st_rd_snap;

struct st_spill_ticket {
    st_spill_rd *rd;
    int n;
    st_rd_snap *snap; /* (n_snap) sorted by off by the I/O thread */
    int n_snap;
    uint64_t *sums;   /* backing store of snap[].sums */
    int done;         /* set by the I/O thread under mu */
    int op0, n_ops;   /* I/O thread: its read ops in the round's op list */
    int pending;      /* I/O thread: ops not finished yet; 0 -> delivered and published */
    st_spill_ticket *next;
};

struct st_spill {
    st_spill_params p;
    size_t slot_bytes;
    st_io *io;
    st_spill_dir *dir; /* NULL for st_spill_open_io */
    int direct, uring_ok;
    char why[160];
    struct io_uring ring; /* used by the I/O thread only */

    pthread_mutex_t mu;
    pthread_cond_t cv_io;   /* wakes the I/O thread */
    pthread_cond_t cv_done; /* signalled on every completion */
    pthread_t thread;
    int thread_started, stop;

    st_slot_ent *ent; /* (ent_cap) side table; [0, hwm) meaningful */
    uint64_t *psum;   /* (ent_cap * np) part checksums */
    uint32_t np;      /* parts per payload, >= 1 */
    size_t pstride;   /* file bytes per part, a multiple of 4096; slot_bytes = np * pstride */
    uint32_t extent;  /* slots per extent (G in docs/FORMATS.md); 1 when np == 1 */
    uint32_t ent_cap, hwm, max_slots, fs_cap;
    st_slot *free_list; /* (ent_cap) stack */
    uint32_t n_free, n_used;
    uint32_t n_release_pending; /* allocated slots released while WRITING */

    st_stage *stage; /* (queue_depth) */
    int *wq;         /* (queue_depth) FIFO of stage indices waiting for the thread */
    int wq_head, wq_n;
    uint64_t writes_in_flight; /* queued + executing */
    st_spill_ticket *rq_head, *rq_tail;

    uint64_t write_epoch, synced_epoch;
    uint64_t sync_req, sync_done;
    int sync_rc;  /* result of the last sync */
    int flush_err; /* first error since the last st_spill_flush */

    st_spill_stats st;
};

/* spill.c: the slot goes back to the free list. Called with mu held. */
void st_spill_slot_free_locked(st_spill *s, st_slot slot);

/* spill_io.c */
void *st_spill_io_main(void *arg);
/* Verifies and copies/decodes the parts described by sn from src (the first part at
 * src + sn->skip) into rd->buf; returns 0 or ST_E_CORRUPT (buf zeroed). Called with or
 * without mu; touches no store state. */
int st_spill_deliver(const uint8_t *src, const st_rd_snap *sn, st_spill_rd *rd);

/* File offset of part `part` of `slot`: extents of G = s->extent slots, each laid out
 * part-major (all G slots' part 0, then all their part 1, ...), so the same part of
 * consecutive slots is one contiguous range. np == 1 (G = 1) is plain slot * slot_bytes. */
static inline uint64_t st_spill_part_off(const st_spill *s, st_slot slot, uint32_t part) {
    const uint64_t g = s->extent, ext = slot / g, in = slot % g;
    return ST_SPILL_HEADER_BYTES + ext * g * s->slot_bytes + (part * g + in) * (uint64_t)s->pstride;
}
static inline uint32_t st_spill_pad(uint32_t n) {
    return (n + ST_SPILL_ALIGN - 1) & ~(ST_SPILL_ALIGN - 1);
}

#endif
