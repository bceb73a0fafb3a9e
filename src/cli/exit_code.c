/* The CLI's exit-code rule in one place: 0 ok, 2 when the user's input is wrong (usage,
 * arguments, the files named), 1 for everything else (memory, I/O, disk space, a state the
 * program should not reach). Kept in its own file so tests/cli can check the whole table. */
#include "cli/commands.h"
#include "strata/core.h"

#include <errno.h>

int st_cli_exit_code(int err) {
    switch (err) {
    case 0:
        return ST_EXIT_OK;
    /* the arguments or the files they name are wrong: fixing the command line fixes it */
    case ST_E_INVAL:
    case ST_E_USAGE:
    case ST_E_FORMAT:      /* a malformed file */
    case ST_E_VERSION:
    case ST_E_TYPE:
    case ST_E_CORRUPT:     /* a file (prompt cache, spill) that fails its checksum */
    case ST_E_NOT_FOUND:   /* a key, tensor or template the file lacks */
    case ST_E_LIMIT:       /* a size over a named limit, or more than memory allows (checked up front) */
    case ST_E_UNSUPPORTED: /* a model feature, or an ISA forced with STRATA_ISA, strata cannot run */
    case ST_E_BUSY:        /* the spill directory / instance id named is held by a live process */
    case -ENOENT:
    case -ENOTDIR:
    case -EISDIR:
    case -EACCES:
    case -EPERM:
    case -ENAMETOOLONG:
    case -ELOOP:
    case -EINVAL:
        return ST_EXIT_INPUT;
    /* ST_E_NOMEM, ST_E_IO, ST_E_STATE, ST_E_POOL_FULL, ST_E_NOSPACE and the other -errno
     * values (ENOMEM, EIO, ENOSPC, EMFILE...): the input may be fine; the machine or strata
     * failed */
    default:
        return ST_EXIT_INTERNAL;
    }
}
