/* bench/spill: fetch bandwidth of the spill store vs a sequential O_DIRECT read probe of the
 * same filesystem, measured side by side in one run.
 *
 *   spill [DIR] [MiB] [slot_KiB]     defaults: /tmp 256 32
 *
 * Prints GB/s for: the probe (1 MiB O_DIRECT preads over a fresh file), store batch reads of
 * adjacent slots (coalesced), and of shuffled slots (the worst case: no coalescing), each
 * as a ratio to the probe; for io_uring and for the pread/pwrite fallback. */
#include "strata/tier.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BATCH 64 /* pages per fetch batch, e.g. one layer's pages for a step */

static double probe(const char *dir, size_t bytes) {
    char path[4200];
    snprintf(path, sizeof path, "%s/strata-spill-probe.dat", dir);
    int direct = O_DIRECT;
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
    if (fd < 0) direct = 0, fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return 0;
    size_t chunk = 1 << 20;
    uint8_t *buf = st_alloc_aligned(chunk, 4096);
    memset(buf, 0x5a, chunk);
    for (size_t off = 0; off < bytes; off += chunk)
        if (pwrite(fd, buf, chunk, (off_t)off) != (ssize_t)chunk) return 0;
    fdatasync(fd);
    if (!direct) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    double t0 = st_time_now();
    for (size_t off = 0; off < bytes; off += chunk)
        if (pread(fd, buf, chunk, (off_t)off) != (ssize_t)chunk) return 0;
    double gbs = (double)bytes / (st_time_now() - t0) / 1e9;
    close(fd);
    unlink(path);
    st_free_aligned(buf);
    if (!direct) printf("  (probe: O_DIRECT refused, buffered after DONTNEED)\n");
    return gbs;
}

static double run_store(st_spill *s, st_slot *slots, int n, size_t slot, uint8_t *dst, int shuffle) {
    int *order = malloc((size_t)n * sizeof *order);
    for (int i = 0; i < n; i++) order[i] = i;
    uint64_t r = 12345;
    if (shuffle)
        for (int i = n - 1; i > 0; i--) {
            r = r * 6364136223846793005ull + 1;
            int j = (int)((r >> 33) % (uint64_t)(i + 1)), t = order[i];
            order[i] = order[j], order[j] = t;
        }
    st_spill_rd rd[BATCH];
    double t0 = st_time_now();
    for (int b = 0; b < n; b += BATCH) {
        int m = n - b < BATCH ? n - b : BATCH;
        for (int k = 0; k < m; k++) {
            int i = order[b + k];
            rd[k] = (st_spill_rd){.slot = slots[i], .key = (uint64_t)i, .gen = 1,
                                  .buf = dst + (size_t)k * slot, .len = slot};
        }
        if (st_spill_read_batch(s, rd, m, NULL)) {
            fprintf(stderr, "read failed: %s\n", st_strerror(rd[0].rc));
            free(order);
            return 0;
        }
    }
    double gbs = (double)n * (double)slot / (st_time_now() - t0) / 1e9;
    free(order);
    return gbs;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "/tmp";
    size_t mib = argc > 2 ? (size_t)atol(argv[2]) : 256;
    size_t slot = (argc > 3 ? (size_t)atol(argv[3]) : 32) * 1024;
    size_t bytes = mib << 20;
    int n = (int)(bytes / slot);
    printf("spill bench: %s, %zu MiB, slots of %zu KiB, batches of %d pages\n", dir, mib, slot >> 10, BATCH);
    double p = probe(dir, bytes);
    printf("  sequential O_DIRECT probe (1 MiB reads)     %6.2f GB/s\n", p);
    uint8_t *src = st_alloc_aligned(slot, 4096), *dst = st_alloc_aligned(slot * BATCH, 4096);
    st_slot *slots = malloc((size_t)n * sizeof *slots);
    for (size_t i = 0; i < slot; i++) src[i] = (uint8_t)(i * 7);
    for (int no_uring = 0; no_uring <= 1; no_uring++) {
        st_spill_dir *d = NULL;
        st_spill *s = NULL;
        st_spill_params prm = st_spill_default_params(slot);
        prm.no_uring = no_uring;
        prm.queue_depth = 32;
        if (st_spill_dir_open(dir, "bench", NULL, &d) || st_spill_open(d, &prm, NULL, &s)) {
            fprintf(stderr, "cannot open the spill store in %s\n", dir);
            return 1;
        }
        st_spill_info info = st_spill_get_info(s);
        for (int i = 0; i < n; i++) {
            st_spill_page pg = {.data = src, .len = slot, .type = ST_TYPE_I8, .key = (uint64_t)i, .gen = 1};
            if (st_spill_write(s, &pg, 0, &slots[i], NULL)) return 1;
        }
        st_spill_flush(s, 1, NULL);
        double seq = run_store(s, slots, n, slot, dst, 0);
        double rnd = run_store(s, slots, n, slot, dst, 1);
        printf("  store %-11s direct=%d adjacent slots      %6.2f GB/s  (%.2fx probe)\n",
               info.uring ? "io_uring" : "pread", info.direct, seq, p > 0 ? seq / p : 0);
        printf("  store %-11s direct=%d shuffled slots      %6.2f GB/s  (%.2fx probe)\n",
               info.uring ? "io_uring" : "pread", info.direct, rnd, p > 0 ? rnd / p : 0);
        st_spill_stats st = st_spill_get_stats(s);
        printf("    %llu reads in %llu I/Os, %llu checksum failures\n", (unsigned long long)st.reads,
               (unsigned long long)st.read_ios, (unsigned long long)st.checksum_failures);
        st_spill_close(s);
        st_spill_dir_close(d);
    }
    free(slots);
    st_free_aligned(src);
    st_free_aligned(dst);
    return 0;
}
