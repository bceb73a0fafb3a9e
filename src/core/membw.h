/* Private to the strata tree (the CLI's bench command and the bench/ programs; not installed):
 * a streaming-read probe of memory bandwidth with a thread pool's threads, measured in the
 * same run as the work it rates, so that a speed is printed as a share of what this machine
 * reads right now rather than of a figure taken elsewhere. The reads are AVX2 loads. */
#ifndef STRATA_MEMBW_H
#define STRATA_MEMBW_H

#include "strata/core.h"

#include <stddef.h>
#include <stdint.h>

/* Streaming read over `bytes` (0: 1 GiB) of huge pages, as the weights and KV it is compared
 * with, faulted in before timing; best of `reps`; returns
 * gigabytes (1e9 bytes) per second; 0 when the
 * buffer cannot be allocated. */
double st_membw_read(st_threadpool *tp, size_t bytes, int reps);

/* A read probe over a buffer allocated (and faulted in) once, so that it can run often: on a
 * machine whose bandwidth drifts minute to minute (a shared VM), a probe taken at the start of
 * a run says little about a measurement made a minute later. */
typedef struct st_membw_probe {
    uint8_t *buf;
    size_t bytes;
} st_membw_probe;

/* Allocates `bytes` (huge pages) and touches them. 0, or ST_E_NOMEM. */
int st_membw_probe_init(st_membw_probe *p, size_t bytes);
void st_membw_probe_free(st_membw_probe *p);
/* One streaming-read pass over the probe buffer: GB/s. */
double st_membw_probe_run(st_threadpool *tp, st_membw_probe *p);

#endif
