/* Parsing of the SSD-tier flags (kv_flags.h). */
#include "cli/kv_flags.h"

#include <errno.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

void st_cli_kv_flags_init(st_cli_kv_flags *f) { memset(f, 0, sizeof *f); }

int st_cli_parse_size(const char *s, unsigned long long *out) {
    *out = 0;
    if (!s || !*s || *s == '-' || *s == '+') return ST_E_USAGE;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s) return ST_E_USAGE;
    unsigned shift = 0;
    if (*end) {
        switch (*end) {
        case 'k': case 'K': shift = 10; break;
        case 'm': case 'M': shift = 20; break;
        case 'g': case 'G': shift = 30; break;
        case 't': case 'T': shift = 40; break;
        default: return ST_E_USAGE;
        }
        end++;
        if (*end == 'i') end++;  /* KiB, MiB ... */
        if (*end == 'B' || *end == 'b') end++;
        if (*end) return ST_E_USAGE;
    }
    if (shift && v > (~0ull >> shift)) return ST_E_USAGE;
    *out = v << shift;
    return *out ? 0 : ST_E_USAGE;
}

int st_cli_kv_flags_arg(st_cli_kv_flags *f, const char *a, const char *v) {
    if (!strcmp(a, "--verbose")) {
        f->verbose = 1;
        return 2;
    }
    int ours = !strcmp(a, "--kv-spill") || !strcmp(a, "--instance-id") || !strcmp(a, "--kv-ram") ||
               !strcmp(a, "--kv-pool-pages") || !strcmp(a, "--kv-disk") || !strcmp(a, "--kv-cold-type");
    if (!ours) return 0;
    if (!v) return -1;
    f->given = 1;
    char *end;
    if (!strcmp(a, "--kv-spill")) {
        f->spill_dir = v;
    } else if (!strcmp(a, "--instance-id")) {
        f->instance_id = v;
    } else if (!strcmp(a, "--kv-ram")) {
        f->ram_auto = !strcmp(v, "auto");
        f->ram_bytes = 0;
        if (!f->ram_auto && st_cli_parse_size(v, &f->ram_bytes)) return -1;
    } else if (!strcmp(a, "--kv-pool-pages")) {
        errno = 0;
        f->pool_pages = strtoll(v, &end, 10);
        if (errno || *end || end == v || f->pool_pages < 2) return -1;
    } else if (!strcmp(a, "--kv-disk")) {
        errno = 0;
        f->disk_mib = strtoll(v, &end, 10);
        if (errno || *end || end == v || f->disk_mib < 1 || f->disk_mib > (1ll << 40)) return -1;
    } else {
        int c = st_cold_parse(v);
        if (c <= 0) return -1; /* q8 or q4 ("none" is the default: no flag) */
        f->cold = (st_cold_type)c;
    }
    return 1;
}

static int flags_check(const st_cli_kv_flags *f, const char *cmd) {
    if (!f->spill_dir) {
        fprintf(stderr, "strata %s: --kv-ram, --kv-pool-pages, --kv-disk, --kv-cold-type and "
                "--instance-id need --kv-spill DIR\n", cmd);
        return ST_E_USAGE;
    }
    if (f->ram_bytes && f->pool_pages) {
        fprintf(stderr, "strata %s: give --kv-ram or --kv-pool-pages, not both\n", cmd);
        return ST_E_USAGE;
    }
    return 0;
}

/* mkdir -p: 0, or -1 with errno. */
static int mkdir_p(const char *path) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return errno = ENAMETOOLONG, -1;
    for (char *q = buf + 1; *q; q++) {
        if (*q != '/') continue;
        *q = 0;
        if (mkdir(buf, 0700) && errno != EEXIST) return -1;
        *q = '/';
    }
    return mkdir(buf, 0700) && errno != EEXIST ? -1 : 0;
}

int st_cli_kv_flags_engine(const st_cli_kv_flags *f, st_engine_params *p, const char *cmd) {
    if (!f || !f->given) return 0;
    int rc = flags_check(f, cmd);
    if (rc) return rc;
    /* what the tier will need, checked before the model loads: a directory it can write,
     * and a disk budget the file system can hold */
    if (mkdir_p(f->spill_dir)) {
        fprintf(stderr, "strata %s: --kv-spill %s: cannot make the directory: %s\n", cmd, f->spill_dir, strerror(errno));
        return ST_E_USAGE;
    }
    struct statvfs vfs;
    if (access(f->spill_dir, W_OK | X_OK) || statvfs(f->spill_dir, &vfs)) {
        fprintf(stderr, "strata %s: --kv-spill %s: not a directory this process can write: %s\n", cmd, f->spill_dir,
                strerror(errno));
        return ST_E_USAGE;
    }
    const unsigned long long free_b = (unsigned long long)vfs.f_bavail * vfs.f_frsize;
    if (f->disk_mib && (unsigned long long)f->disk_mib << 20 > free_b) {
        fprintf(stderr, "strata %s: --kv-disk %lld MiB is more than the %llu MiB free under %s\n", cmd, f->disk_mib,
                free_b >> 20, f->spill_dir);
        return ST_E_USAGE;
    }
    p->spill_dir = f->spill_dir;
    p->instance_id = f->instance_id;
    p->ram_pages = f->pool_pages;
    p->ram_bytes = f->ram_bytes;
    p->ram_auto = f->ram_auto || (!f->ram_bytes && !f->pool_pages);
    p->disk_budget = (uint64_t)f->disk_mib << 20;
    p->cold = f->cold;
    return 0;
}

int st_cli_kv_flags_apply(const st_cli_kv_flags *f, st_kv_params *p, const char *cmd) {
    if (!f || !f->given) return 0;
    int rc = flags_check(f, cmd);
    if (rc) return rc;
    p->spill_dir = f->spill_dir;
    p->instance_id = f->instance_id;
    p->disk_budget = (uint64_t)f->disk_mib << 20;
    p->cold = f->cold;
    size_t pb = st_kv_page_bytes(p);
    int64_t pages = f->pool_pages ? f->pool_pages
                    : f->ram_bytes ? (int64_t)(f->ram_bytes / (pb ? pb : 1))
                                   : p->n_pages;
    if (pages < 2) {
        fprintf(stderr, "strata %s: --kv-ram %llu bytes is less than two KV pages of %zu bytes "
                "(the smallest pool that works)\n", cmd, f->ram_bytes, pb);
        return ST_E_USAGE;
    }
    p->ram_pages = pages < p->n_pages ? pages : p->n_pages;
    /* RAM residency is per layer block: a byte budget holds bytes / block size blocks */
    if (f->ram_bytes && pages < p->n_pages && p->n_layer > 0)
        p->ram_blocks = (int64_t)(f->ram_bytes / (pb / (size_t)p->n_layer));
    return 0;
}
