/*
 * strata KV page library: the key and value vectors of every layer and KV head, stored in
 * fixed-size token pages drawn from one pool, with per-sequence page tables, copy-on-write
 * forks, a content-keyed prefix cache, pinning, and snapshots.
 *
 * It knows nothing about models. The model runtime, per forward step:
 *     st_kv_seq_reserve(kv, seq, n, tokens, &p0);          slots for positions [p0, p0+n)
 *     for each layer l:
 *         st_kv_write(kv, seq, l, p0, n, k, v);            this layer's K/V (after RoPE)
 *         st_kv_seq_views(kv, seq, l, views, max, &nv);    pages for attention (attn.h)
 *     st_kv_seq_commit(kv, seq);                           every layer written: seal full pages
 *
 * Geometry (fixed at creation): n_layer, n_kv_head, head_dim, page size P (a power of two in
 * [8, 256], default 16), element type f32 / f16 / bf16 / q8_0. Positions are logical: slot s
 * of logical page i holds position i*P + s; positions never shift (remove leaves holes).
 *
 * Physical page layout (one contiguous, 4096-aligned slab per page, so a page moves to and
 * from disk in one large I/O and one layer of it in one smaller I/O):
 *     page = n_layer layer blocks, each padded to a multiple of 4096 bytes;
 *     layer block = K [n_kv_head][head_dim][P] (dim-major: K^T, see attn.h) (padded to 64 bytes)
 *                   V [n_kv_head][P][head_dim] (padded to 64 bytes)
 *                   q8_0 only: k_scale [n_kv_head] f32, v_scale [n_kv_head] f32
 * q8_0 here is NOT ggml's block_q8_0: elements are int8 and there is ONE f32 scale per page
 * per KV head for K and one for V (value = q * scale). When an appended token's abs-max
 * exceeds 127 * scale, that page-head is requantized with scale' = max(absmax/127, 2*scale).
 * Error bound: one-shot quantization errs by at most scale/2 per element; because scales
 * at least double at every requantization, the rounding errors form a geometric series and
 * the total error of any element stays <= scale_final (one quantization step of the page-
 * head's final scale), i.e. at most twice the one-shot bound. (The doubling also costs up
 * to one bit of resolution for that page-head; tests assert the bound.)
 *
 * Errors: every function returns 0, a negative ST_E_* code, or -errno; on error nothing
 * observable changed; output pointers are cleared on entry. A detailed message is kept in
 * the st_ctx given to st_kv_create (st_ctx_error()).
 *
 * Threads: an st_kv is not thread-safe. One thread at a time calls its functions; attention
 * threads may read the memory behind views concurrently as long as no st_kv call runs.
 *
 * Lifetime of borrowed pointers (views, page data): valid until the next call that changes
 * the page tables or the pool (any function below not marked "read-only"). With the SSD
 * tier (a spill directory in the params) they are valid only while their pages are pinned
 * (st_kv_pin), and pinned pages never move.
 *
 * SSD tier (design essay at the top of src/kv/kv_pool.c). n_pages is the LOGICAL
 * page count; with a spill directory RAM residency is per (page, layer) block: only
 * ram_blocks layer blocks hold RAM at once (the hot pool), the rest live in the spill file
 * (cold) or are still all-zero (never touched). What does not fit is moved transparently:
 * a write fetches the block it writes, a pin every block of its page (evicting the block
 * with the least recent attention among the least recently used unpinned ones,
 * write-behind), st_kv_read reads cold layer blocks directly, and attention goes through
 * st_kv_attend_decode / st_kv_attend_chunk, which fetch the layer's blocks that fit and
 * stream the rest with results bit-identical to the all-in-RAM computation.
 * st_kv_seq_views only works for sequences whose blocks of that layer are all resident
 * (ST_E_STATE otherwise). I/O errors and checksum mismatches fail the affected
 * sequences: they keep returning that error (st_kv_seq_error) until freed; an operation
 * that stopped half-way for an I/O or disk-space error also fails its sequence, so no
 * sequence ever holds a silent hole or garbage.
 */
#ifndef STRATA_KV_H
#define STRATA_KV_H

#include <stdio.h>

#include "strata/attn.h"
#include "strata/core.h"
#include "strata/tier.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- limits ---------------------------------------------------------------------- */
#define ST_KV_PAGE_SIZE_DEFAULT 16
#define ST_KV_PAGE_SIZE_MIN 8
#define ST_KV_PAGE_SIZE_MAX 256 /* == ST_ATTN_MAX_PAGE_SIZE */
#define ST_KV_MAX_LAYERS 1024
#define ST_KV_MAX_HEADS 1024
#define ST_KV_MAX_HEAD_DIM 1024
#define ST_KV_MAX_SEQS 65535
#define ST_KV_MAX_PAGES (1 << 28)
#define ST_KV_LAYER_ALIGN 4096 /* every layer block and every page slab */
#define ST_KV_MASK_WORDS (ST_KV_PAGE_SIZE_MAX / 64)

typedef struct st_kv st_kv;

/* A sequence handle: slot (low 16 bits) + a 32-bit generation of the slot (bits 16..47),
 * so a freed id is recognized as stale (ST_E_STATE) instead of silently naming a newer
 * sequence: an id could name another sequence only after 2^32 sequences were freed from
 * its slot. Always >= 0 when valid; -1 marks "none". Print with %lld. */
typedef int64_t st_kv_seq_id;
/* Index of a physical page in the pool, [0, n_pages). -1 marks a hole in page lists. */
typedef int32_t st_kv_page_id;

/* Content key of the prefix cache and caller-given model fingerprint (XXH3-128 bytes). */
typedef struct st_kv_key {
    uint8_t b[16];
} st_kv_key;

typedef struct st_kv_params {
    int n_layer;        /* [1, ST_KV_MAX_LAYERS] */
    int n_kv_head;      /* [1, ST_KV_MAX_HEADS] */
    int head_dim;       /* [1, ST_KV_MAX_HEAD_DIM] */
    int page_size;      /* 0 = ST_KV_PAGE_SIZE_DEFAULT; else a power of two in [8, 256] */
    st_type type;       /* ST_TYPE_F32, ST_TYPE_F16, ST_TYPE_BF16 or ST_TYPE_Q8_0 */
    int64_t n_pages;    /* pool capacity in pages, allocated once: [1, ST_KV_MAX_PAGES] */
    int64_t n_reserve;  /* admission watermark: st_kv_admit keeps this many pages back */
    int max_seqs;       /* 0 = 256; [1, ST_KV_MAX_SEQS] live sequences at once */
    st_kv_key fingerprint; /* model/config identity mixed into prefix keys and snapshots */
    /* SSD tier. spill_dir NULL: every page has RAM, exactly as without a tier. */
    const char *spill_dir;   /* root: DIR/instance-<id>/ holds lock, pid and spill file;
                                borrowed for st_kv_create only */
    const char *instance_id; /* NULL or "" = the pid */
    int64_t ram_pages;       /* hot pool in pages: 0 = n_pages; [2, n_pages] with spill_dir */
    int64_t ram_blocks;      /* with spill_dir: hot pool in layer blocks (the unit of RAM
                                residency), 0 = ram_pages * n_layer; [2, n_pages * n_layer] */
    uint64_t disk_budget;    /* bytes of spill slots; 0 = unlimited */
    st_cold_type cold;       /* cold compression of spilled f32/f16/bf16 pages (lossy) */
    int prefetch;            /* 1: decode reads ahead the blocks the next layer used last step
                                while this layer's attention runs (off by default: it read
                                more than it saved in docs/PERFORMANCE.md, SSD tier) */
    int spill_no_direct;     /* 1: buffered spill I/O (default: O_DIRECT when possible) */
    st_spill_open_fn spill_open; /* tests: open the spill file through another backend */
    void *spill_open_arg;
    int quest_group;         /* pages per group box of Quest's two-level ranking (quest.h):
                                0 or 1 = no group boxes (flat ranking); else a power of two
                                in [2, 256]. The selection is the same either way; only
                                the ranking's speed differs (docs/PERFORMANCE.md, Quest). */
} st_kv_params;

/* Zeroed params with page_size 16, type f16, max_seqs 256; caller fills the rest. */
st_kv_params st_kv_default_params(void);
/* Bytes of one page slab (all layers) for params p, as st_kv_create would lay it out (0
 * when the geometry fields are out of range); a layer block, the unit of RAM residency
 * with a tier (--kv-ram counts whole ones), is page_bytes / n_layer. */
size_t st_kv_page_bytes(const st_kv_params *p);

/* Byte geometry of a page (read-only, fixed at creation). */
typedef struct st_kv_geometry {
    int n_layer, n_kv_head, head_dim, page_size;
    st_type type;
    size_t elem_bytes;    /* 4, 2, 2 or 1 (q8_0) */
    size_t kv_bytes;      /* K (or V) of one layer: n_kv_head*P*head_dim*elem_bytes */
    size_t v_offset;      /* V within a layer block (K is at 0) */
    size_t scale_offset;  /* q8_0: k_scale[n_kv_head] then v_scale[n_kv_head]; else 0 */
    size_t layer_bytes;   /* one layer block, a multiple of 4096 */
    size_t page_bytes;    /* n_layer * layer_bytes */
} st_kv_geometry;

/* Creates a pool. ctx is borrowed for error messages (may be NULL) and must outlive kv.
 * *out is owned by the caller; release with st_kv_destroy. Returns 0, ST_E_INVAL (a
 * parameter out of range: the message names it), ST_E_UNSUPPORTED (element type),
 * ST_E_NOMEM. */
int st_kv_create(st_ctx *ctx, const st_kv_params *params, st_kv **out);
/* Frees the pool and every sequence. NULL is a no-op. Views die with it. */
void st_kv_destroy(st_kv *kv);
/* Read-only. */
const st_kv_geometry *st_kv_get_geometry(const st_kv *kv);
const st_kv_params *st_kv_get_params(const st_kv *kv);

/* ---- counters -------------------------------------------------------------------- */
typedef struct st_kv_stats {
    int64_t n_pages;        /* capacity */
    int64_t pages_used;     /* referenced by a page table or pinned */
    int64_t pages_free;     /* on the free list */
    int64_t pages_cached;   /* unreferenced, kept for prefix reuse (evictable, LRU order) */
    int64_t pages_pinned;   /* pages with pin count > 0 */
    int64_t n_seqs;         /* live sequences */
    int64_t forks;          /* st_kv_seq_fork calls that succeeded */
    int64_t cow_copies;     /* pages copied because a shared page was written */
    int64_t prefix_hits;    /* attach calls that attached >= 1 page */
    int64_t prefix_misses;  /* attach calls that attached nothing */
    int64_t prefix_tokens_queried; /* tokens looked up by attach calls (their n) */
    int64_t prefix_tokens_reused; /* tokens attached from the cache */
    int64_t cache_evictions; /* cached pages reclaimed for new allocations */
    int64_t requants;       /* q8_0 page-head requantizations */
    /* SSD tier (zero without a spill directory) */
    int64_t ram_blocks;     /* hot pool capacity in layer blocks (frames) */
    int64_t blocks_hot;     /* layer blocks holding a frame now */
    int64_t blocks_cold;    /* layer blocks whose only copy is in the spill file */
    int64_t ram_pages;      /* page equivalents of the three above (blocks / n_layer, */
    int64_t pages_hot;      /*  rounded up): pages' worth of RAM and of disk in use */
    int64_t pages_cold;
    int64_t tier_writes;    /* page slabs written to the spill file (a dirty block's page) */
    int64_t tier_reads;     /* cold -> hot block fetches */
    int64_t tier_block_reads; /* layer blocks streamed for attention or st_kv_read */
    int64_t tier_prefetches; /* of tier_reads: blocks read ahead for the next layer's decode */
    int64_t tier_bytes_written, tier_bytes_read;
    int64_t fetch_stalls;   /* times a step waited for a read (sync fetch or stream wait) */
    int64_t tier_drops;     /* cached pages dropped to make room in RAM or on disk */
    int64_t tier_errors;    /* pages lost: tier_io_errors + tier_checksum_failures */
    int64_t tier_io_errors; /* ... to a failed read or write (or no disk space) */
    int64_t tier_checksum_failures; /* ... to a spill slot whose checksum did not match */
    int64_t seqs_failed;    /* sequences marked failed */
} st_kv_stats;

/* Read-only. Fills *out (never fails for a valid kv). */
void st_kv_get_stats(const st_kv *kv, st_kv_stats *out);

/* The --verbose line: a one-line summary of what moved between two snapshots of the stats
 * ("kv tier: +3 spilled, +5 fetched (80.0 KiB), ..."), written into buf[cap]. Returns its
 * length, or 0 (buf = "") when nothing moved. */
int st_kv_stats_line(const st_kv_stats *before, const st_kv_stats *after, char *buf,
                     size_t cap);

/* Read-only: how many of the sequence's pages hold RAM (*hot) and how many live only in
 * the spill file (*cold); never-touched pages count as neither. Returns 0, ST_E_INVAL,
 * ST_E_STATE. */
int st_kv_seq_residency(const st_kv *kv, st_kv_seq_id seq, int64_t *hot, int64_t *cold);

/* Where each logical page of a sequence is (st_kv_seq_page_map): flag bits, 0 for a page
 * never written (a hole, or allocated and still all-zero under the SSD tier). */
#define ST_KV_PAGE_IN_RAM 1u  /* holds RAM (every written page without a spill directory) */
#define ST_KV_PAGE_ON_DISK 2u /* its only copy is in the spill file */
#define ST_KV_PAGE_SHARED 4u  /* named by more than one page table (refcount > 1) */
#define ST_KV_PAGE_LOST 8u    /* its data was lost to an I/O error or checksum mismatch */

/* Read-only: flags of the sequence's logical pages in order into out[max] (a byte each, the
 * ST_KV_PAGE_* bits), count in *n_out (== ceil(length / P); also when max is too small: then
 * ST_E_LIMIT and nothing is written, so max = 0 queries the count). Moves nothing between
 * the tiers. Returns 0, ST_E_LIMIT, ST_E_INVAL (bad id, out NULL with max > 0), ST_E_STATE
 * (stale id). Threads: as every st_kv call. */
int st_kv_seq_page_map(const st_kv *kv, st_kv_seq_id seq, uint8_t *out, int64_t max,
                       int64_t *n_out);

/* Read-only: the sequence's sticky error: 0, or the I/O / ST_E_CORRUPT / ST_E_NOSPACE code
 * that failed it. Returns that code, or ST_E_INVAL / ST_E_STATE for a bad id. */
int st_kv_seq_error(const st_kv *kv, st_kv_seq_id seq);

/* Waits for every write-behind spill and returns the first write error since the last
 * call (0 when none or no tier). Pages whose write failed fail their sequences when read. */
int st_kv_flush(st_kv *kv);

/* Admission check: 0 when n_tokens more tokens (ceil(n_tokens/P) pages) can be allocated
 * while still leaving n_reserve pages obtainable (free or evictable cached); else
 * ST_E_POOL_FULL with the counts in the message. Read-only. Running sequences may dip
 * into the reserve (st_kv_seq_reserve ignores it) so admitted work can finish. */
int st_kv_admit(st_kv *kv, int64_t n_tokens);

/* ---- sequences --------------------------------------------------------------------- */

/* Creates an empty sequence. Returns 0, ST_E_LIMIT (max_seqs live), ST_E_NOMEM. */
int st_kv_seq_create(st_kv *kv, st_kv_seq_id *out);
/* Ends the sequence: drops its references to its pages (pinned ones stay until unpinned;
 * keyed ones stay cached) and retires the id (later calls with it: ST_E_STATE). Named free,
 * not destroy as handles are: a sequence is a slot that kv owns (st_kv_destroy ends every
 * live one), not an object the caller owns, and its pages may outlive it. Dropping
 * positions inside a sequence is st_kv_seq_remove. Returns 0, ST_E_INVAL (bad id),
 * ST_E_STATE (already freed: stale id). */
int st_kv_seq_free(st_kv *kv, st_kv_seq_id seq);
/* New sequence sharing every page of src by refcount (no page is copied now: the partial
 * tail page is shared too and copied by whichever sequence first writes into it, so an
 * n-way fork costs no pages). Returns 0, ST_E_INVAL/ST_E_STATE (src), ST_E_LIMIT, ST_E_NOMEM. */
int st_kv_seq_fork(st_kv *kv, st_kv_seq_id src, st_kv_seq_id *dst);

/* Read-only: the sequence's length (next position to reserve) in *len. */
int st_kv_seq_len(const st_kv *kv, st_kv_seq_id seq, int64_t *len);
/* Read-only: whether position pos holds a token (reserved and not removed): 1 / 0 in
 * *valid. Returns 0, ST_E_INVAL (pos < 0 or bad id), ST_E_STATE. */
int st_kv_seq_valid(const st_kv *kv, st_kv_seq_id seq, int64_t pos, int *valid);

/* Appends n slots at positions [len, len+n) and returns len in *pos0 (may be NULL).
 * tokens: NULL or [n] token ids (>= 0; negative = unknown) recorded for the prefix cache.
 * Allocates every page needed up front and makes the tail page exclusive (copying it if
 * shared), so the st_kv_write calls of this step never allocate. Slot contents are zero
 * until written. Returns 0, ST_E_INVAL (n < 1, bad id), ST_E_STATE, ST_E_POOL_FULL (the
 * pool cannot supply the pages: message has needed/free/cached/used/pinned), ST_E_NOMEM. */
int st_kv_seq_reserve(st_kv *kv, st_kv_seq_id seq, int64_t n, const int32_t *tokens,
                      int64_t *pos0);

/* Writes layer `layer`'s K and V of positions [pos, pos+n), converting f32 to the KV type.
 * k, v: [n][n_kv_head][head_dim] f32, borrowed for the call. Every position must be
 * reserved (< len) and not removed. A write into a page shared with another sequence or
 * held by the prefix cache copies that page first (copy-on-write; may need a free page).
 * Returns 0, ST_E_INVAL (range, layer, NULL), ST_E_NOT_FOUND (a removed position),
 * ST_E_STATE, ST_E_POOL_FULL (copy-on-write could not get a page; nothing written). */
int st_kv_write(st_kv *kv, st_kv_seq_id seq, int layer, int64_t pos, int64_t n,
                const float *k, const float *v);

/* Declares that every layer of every reserved position has been written: full pages are
 * sealed (prefix key computed and registered when their tokens are known; Quest's
 * min/max key metadata is computed here). Returns 0, ST_E_INVAL, ST_E_STATE, ST_E_NOMEM. */
int st_kv_seq_commit(st_kv *kv, st_kv_seq_id seq);

/* Convenience: reserve + write every layer + commit. k, v: [n_layer][n][n_kv_head][head_dim]
 * f32. Same errors as the three; on error nothing changed. */
int st_kv_seq_append(st_kv *kv, st_kv_seq_id seq, int64_t n, const int32_t *tokens,
                     const float *k, const float *v);

/* Read-only: layer `layer`'s K and V of positions [pos, pos+n) as f32 into k, v
 * ([n][n_kv_head][head_dim], caller-owned; either may be NULL). Returns 0, ST_E_INVAL
 * (range), ST_E_NOT_FOUND (a removed position: nothing is returned for it), ST_E_STATE. */
int st_kv_read(const st_kv *kv, st_kv_seq_id seq, int layer, int64_t pos, int64_t n,
               float *k, float *v);

/* Read-only: the token ids recorded for [pos, pos+n) (-1 where unknown) into tokens[n]. */
int st_kv_seq_tokens(const st_kv *kv, st_kv_seq_id seq, int64_t pos, int64_t n,
                     int32_t *tokens);

/* Rewinds to length len (<= current length): positions >= len are dropped (pages wholly
 * past len released). Returns 0, ST_E_INVAL (len < 0 or > length), ST_E_STATE. */
int st_kv_seq_truncate(st_kv *kv, st_kv_seq_id seq, int64_t len);

/* Rewinds to length len like st_kv_seq_truncate, for tokens this sequence appended and now
 * discards (rejected speculative drafts) rather than sets aside: every page holding a
 * position >= len that the sequence alone holds (one reference, unpinned) loses its prefix
 * key, its registration in the prefix index and its Quest boxes (it was sealed with the
 * discarded tokens in it), so no later st_kv_prefix_attach finds those tokens and a
 * released page goes FREE, not CACHED: after appending n tokens and rewinding them the
 * pool's pages, references, boxes and index are as before the append. A spilled page's
 * disk copy is never read back for the dropped slots (the next reserve zeroes them in
 * RAM and the page turns dirty). Shared pages just lose this sequence's reference. Same
 * errors as st_kv_seq_truncate. */
int st_kv_seq_rewind(st_kv *kv, st_kv_seq_id seq, int64_t len);

/* Removes positions [p0, p1) (clamped to the length; the length does not change): pages
 * wholly inside are released and leave holes; a partly covered page keeps a per-token
 * validity mask in this sequence's table (other sequences sharing the page are
 * unaffected; no copy is made). Attention never reads a removed token. Returns 0,
 * ST_E_INVAL (p0 < 0, p1 < p0), ST_E_STATE. */
int st_kv_seq_remove(st_kv *kv, st_kv_seq_id seq, int64_t p0, int64_t p1);

/* Read-only: layer `layer`'s pages of the sequence in logical order, holes omitted, as
 * attention views (attn.h): k/v point into the pool, valid is NULL or points into the
 * sequence's table, n_tokens = slots reserved in that page, pos0 = logical index * P.
 * *n_out = number of views (also when max is too small: then ST_E_LIMIT and nothing is
 * written, so max = 0 queries the count). Returns 0, ST_E_LIMIT, ST_E_INVAL, ST_E_STATE.
 * Lifetime: see the top of this header. */
int st_kv_seq_views(const st_kv *kv, st_kv_seq_id seq, int layer, st_attn_page *out,
                    int max, int *n_out);

/* Read-only: the physical page of every logical page (-1 for holes), count in *n_out;
 * ST_E_LIMIT as for views. */
int st_kv_seq_pages(const st_kv *kv, st_kv_seq_id seq, st_kv_page_id *out, int max,
                    int *n_out);

/* ---- pinning ------------------------------------------------------------------------ */
/* Pins a page (pins are counted). A pinned page is never freed, evicted or moved; a
 * sequence may still drop its reference (truncate, remove, free): the page is then released
 * at its last unpin. With the SSD tier every layer block of the page is fetched into RAM
 * first (n_layer frames). Returns 0, ST_E_INVAL (id out of range), ST_E_STATE (page free or
 * only cached: not in use), ST_E_POOL_FULL (fewer than n_layer frames obtainable: every
 * other hot block pinned or held), ST_E_NOSPACE / a read error (tier). */
int st_kv_pin(st_kv *kv, st_kv_page_id page);
/* Returns 0, ST_E_INVAL, ST_E_STATE (page not pinned: unbalanced unpin). */
int st_kv_unpin(st_kv *kv, st_kv_page_id page);
/* Read-only: *refs = page-table references, *pins = pin count (either may be NULL). */
int st_kv_page_info(const st_kv *kv, st_kv_page_id page, int *refs, int *pins);

/* ---- prefix cache -------------------------------------------------------------------- */
/* Read-only: how many leading tokens of tokens[n] the cache holds as a run of full pages
 * (a multiple of P) in *n_cached. Stored tokens are compared, not only hashes. */
int st_kv_prefix_lookup(const st_kv *kv, const int32_t *tokens, int64_t n, int64_t *n_cached);
/* Attaches the longest cached run of full pages covering a prefix of tokens[n] to the
 * EMPTY sequence seq (by refcount; no copy), recording those tokens; *n_attached (may be
 * NULL) = tokens attached (a multiple of P, possibly 0: a miss). The caller reserves and
 * computes the rest. Returns 0, ST_E_INVAL, ST_E_STATE (seq not empty or stale). */
int st_kv_prefix_attach(st_kv *kv, st_kv_seq_id seq, const int32_t *tokens, int64_t n,
                        int64_t *n_attached);
/* Read-only: *covers = 1 when positions [0, n) of seq are all present (not removed) and
 * were recorded with exactly tokens[0..n), else 0. */
int st_kv_prefix_covers(const st_kv *kv, st_kv_seq_id seq, const int32_t *tokens, int64_t n,
                        int *covers);

/* ---- attention through the tiers --------------------------------------------------------- */

/* A Quest selection (quest.h): per KV head, indices into the sequence's view list. */
typedef struct st_kv_select st_kv_select;

/* Decode attention of layer `layer` for n_seq sequences: sequence i's query q[i]
 * ([n_head][head_dim] f32) -> out[i]. g: the attention geometry; its n_kv_head,
 * head_dim, page_size and type must be the pool's. sel: NULL, or per sequence NULL (dense)
 * or a selection made for this sequence and layer (st_kv_quest_select): only the selected
 * pages are read, fetched or streamed. Output is bit-identical to st_attn_decode_batch
 * over st_kv_seq_views (with the selection applied), whatever is in RAM: pages that are all
 * resident are used in place; cold pages are fetched in one coalesced batch when they fit
 * in the hot pool, else streamed layer block by layer block through a double buffer (the
 * next window's reads in flight while the current one computes). ctx: errors and threads.
 * Returns 0; ST_E_INVAL (arguments, geometry mismatch, a selection made for another page
 * table: entries added or a selected page removed since); ST_E_STATE (stale id); a
 * sequence's sticky error; ST_E_CORRUPT / -errno when a read fails (the affected sequences
 * are failed); ST_E_POOL_FULL; ST_E_NOMEM. On error out is unspecified. */
int st_kv_attend_decode(st_kv *kv, st_ctx *ctx, st_attn_ws *ws, const st_attn_geom *g,
                        int layer, const st_kv_seq_id *seqs, int n_seq,
                        const st_kv_select *const *sel, const float *q, float *out);
/* Same, where entry i attends only positions < lens[i] of its sequence (lens NULL, or an
 * entry <= 0: the whole sequence). A sequence may appear several times with different
 * limits: that is how several tokens appended in one step (a speculative verify run) each
 * attend as the decode token they would have been, their views and hence their output
 * bit-identical to a decode call made when the sequence was lens[i] tokens long (slots at
 * or past the limit are outside the views, whatever they hold). A limited entry takes no
 * sparse selection (its sel entry NULL or dense). Errors as st_kv_attend_decode; ST_E_INVAL
 * also for a limit past the sequence's length or with a sparse selection. */
int st_kv_attend_decode_at(st_kv *kv, st_ctx *ctx, st_attn_ws *ws, const st_attn_geom *g,
                           int layer, const st_kv_seq_id *seqs, const int64_t *lens, int n_seq,
                           const st_kv_select *const *sel, const float *q, float *out);

/* Chunk (prefill) attention of layer `layer`: n_q queries of seq at positions pos0_q ..
 * (their K/V already written), q, out: [n_q][n_head][head_dim]. Bit-identical to
 * st_attn_chunk over st_kv_seq_views; streams what does not fit. Errors as decode. */
int st_kv_attend_chunk(st_kv *kv, st_ctx *ctx, st_attn_ws *ws, const st_attn_geom *g,
                       int layer, st_kv_seq_id seq, const float *q, int32_t n_q,
                       int64_t pos0_q, float *out);

/* ---- snapshot I/O --------------------------------------------------------------------- */
/* A small I/O interface with swappable backends (memory, FILE*, fd); tests plug in their
 * own functions to inject faults. Caller-allocated; no backend owns what it was given
 * except the memory writer's buffer (st_kv_io_mem_release). */
typedef struct st_kv_io st_kv_io;
struct st_kv_io {
    /* Writes all n bytes: 0 or a negative error. */
    int (*write)(st_kv_io *io, const void *buf, size_t n);
    /* Reads up to n bytes: the count read (< n only at end of stream) or a negative error. */
    int64_t (*read)(st_kv_io *io, void *buf, size_t n);
    void *user;    /* free for custom backends */
    uint8_t *buf;  /* memory backends: [cap] bytes, [len] used */
    size_t len, cap, pos;
    FILE *fp;
    int fd;
};
/* Memory writer (growing buffer, owned by io until st_kv_io_mem_release). */
void st_kv_io_mem_writer(st_kv_io *io);
/* Memory reader over buf[n] (borrowed for the reader's life). */
void st_kv_io_mem_reader(st_kv_io *io, const void *buf, size_t n);
void st_kv_io_mem_release(st_kv_io *io); /* frees the writer's buffer; safe twice */
void st_kv_io_file(st_kv_io *io, FILE *fp); /* fp borrowed */
void st_kv_io_fd(st_kv_io *io, int fd);     /* fd borrowed; retries EINTR and short I/O */

/* ---- snapshots -------------------------------------------------------------------------- */
/* Serializes sequences seqs[n_seqs] (tables, page contents, validity masks, prefix keys,
 * token ids, a per-page ledger) into io; the format is in docs/FORMATS.md ("KV snapshot").
 * max_pages < 0: all pages; else at most max_pages distinct pages are written (in order of
 * first use, sequences in the order given, logical pages in order) and each sequence is cut
 * at its first page past that budget. Read-only for kv: with the SSD tier a page that is
 * not in RAM is read from the spill file one layer block at a time (as st_kv_read does),
 * so no page moves between the tiers and each page's ledger entry records the residency
 * and score it had. Returns 0, ST_E_INVAL (bad or duplicate ids), ST_E_STATE, ST_E_NOMEM,
 * the io's error, or a spill read's error (ST_E_CORRUPT / -errno: that page's sequences
 * fail, as on any read). */
int st_kv_snapshot_write(st_kv *kv, const st_kv_seq_id *seqs, int n_seqs, int64_t max_pages,
                         st_kv_io *io);
/* Reads one snapshot from io, validates everything (magic, version, geometry, fingerprint,
 * counts, references, masks, token ids, prefix keys, checksums) and only then creates its
 * sequences as new sequences of kv (ids in out_seqs[max_seqs], count in *n_out). On any
 * error nothing changed. Returns 0, ST_E_FORMAT (malformed or truncated: the message
 * names the field and byte offset), ST_E_VERSION, ST_E_CORRUPT (checksum), ST_E_TYPE,
 * ST_E_LIMIT (out_seqs too small or a count past a limit), ST_E_POOL_FULL, ST_E_NOMEM, or
 * the io's error. */
int st_kv_snapshot_read(st_kv *kv, st_kv_io *io, st_kv_seq_id *out_seqs, int max_seqs,
                        int *n_out);

/* ---- the prefix cache on disk ---------------------------------------------------------- */
/* What an export wrote or an import resumed. */
typedef struct st_kv_prefix_counts {
    int64_t pages;      /* distinct pages written / now cached from the stream */
    int64_t tokens;     /* pages * P */
    int64_t chains;     /* root-to-leaf chains (sequences in the stream) */
    int64_t parts;      /* snapshots in the container */
    int64_t duplicates; /* import: pages the index already held (or a part repeated), dropped */
    int64_t tokens_in_chains; /* import: tokens of all chains (shared pages counted per chain) */
} st_kv_prefix_counts;

/* Writes every page of the prefix index that an attach could reach (pages whose ancestry
 * left the index are skipped) into io as a prefix-cache file (docs/FORMATS.md, "Prefix-cache
 * file"): one chain per leaf, root to leaf, each attached to a temporary sequence by its
 * tokens (st_kv_prefix_attach: the same verified lookup a request makes) and written as KV
 * snapshots of at most (max_seqs - live sequences) chains each. max_pages < 0: all pages;
 * else at most max_pages distinct pages, the most recently used chains first (a chain that
 * does not fit is cut to the pages that do). The pool is left as it was: the temporary
 * sequences are freed, the pages' scores, the cache's LRU order and the prefix counters are
 * put back (with the SSD tier, cold pages are read one layer block at a time and move
 * nothing between the tiers, as st_kv_snapshot_write). Pages of running sequences that are
 * registered are written too. *out (may be NULL) gets the counts. Returns 0, ST_E_INVAL (io),
 * ST_E_LIMIT (no free sequence slot with a non-empty cache), ST_E_NOMEM, the io's error, or
 * a spill read's error (as st_kv_snapshot_write); on error the stream holds a partial file
 * (the caller writes to a temporary and renames) and the pool is as it was.
 * Threads: as every st_kv call. */
int st_kv_prefix_export(st_kv *kv, st_kv_io *io, int64_t max_pages, st_kv_prefix_counts *out);

/* Reads a prefix-cache file from io and adds its pages to the prefix cache as CACHED pages
 * (evictable, in the order of use they had when written, after everything the pool already
 * did). Each part is validated whole before it is restored (st_kv_snapshot_read: magic,
 * version, geometry, fingerprint, token ids, prefix keys, checksums) and each of its
 * sequences must be a chain of full keyed pages; pages the index already holds are dropped
 * as duplicates. The pages are taken from free pages only: a file with more pages than the
 * pool has free is refused (no cached page is evicted for it). With the SSD tier the file
 * may hold more pages than the hot pool: they spill as they are restored. On any error
 * (a later part malformed, bytes after the last part, counts that disagree with the header)
 * everything this call added is dropped again: the prefix index and the page counts are
 * as before (with the SSD tier, pages that spilled to make room stay spilled). *out (may be
 * NULL) gets the counts. Returns 0, ST_E_INVAL (io), ST_E_FORMAT, ST_E_VERSION,
 * ST_E_CORRUPT, ST_E_TYPE, ST_E_LIMIT (a part with more sequences than free slots),
 * ST_E_POOL_FULL, ST_E_NOMEM, the io's error; the message names the part and the field.
 * Threads: as every st_kv call. */
int st_kv_prefix_import(st_kv *kv, st_kv_io *io, st_kv_prefix_counts *out);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_KV_H */
