/* strata: one binary, subcommands. */
#include "strata/core.h"
#include "cli/commands.h"

#include <stdio.h>
#include <string.h>

int st_cli_exit_code(int err) {
    switch (err) {
    case 0:
        return ST_EXIT_OK;
    case ST_E_INVAL:
    case ST_E_FORMAT:
    case ST_E_VERSION:
    case ST_E_TYPE:
    case ST_E_NOT_FOUND:
    case ST_E_LIMIT:
    case ST_E_UNSUPPORTED:
    case ST_E_USAGE:
    case ST_E_CORRUPT:
    case ST_E_BUSY:
        return ST_EXIT_INPUT;
    default:
        return err > -4096 && err < 0 ? ST_EXIT_INPUT : ST_EXIT_INTERNAL;
    }
}

struct command {
    const char *name;
    const char *help;
    int (*fn)(int, char **);
};

static const struct command commands[] = {
#define ST_CLI_ROW_(name, help) {#name, help, st_cmd_##name},
    ST_CLI_COMMANDS(ST_CLI_ROW_)
#undef ST_CLI_ROW_
};

static void usage(FILE *f) {
    fprintf(f, "usage: strata COMMAND [options]   (strata COMMAND --help for a command's options)\n\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (commands[i].fn) fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return ST_EXIT_INPUT;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return ST_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(argv[1], commands[i].name) != 0) continue;
        if (!commands[i].fn) break;
        return commands[i].fn(argc - 1, argv + 1);
    }
    fprintf(stderr, "strata: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return ST_EXIT_INPUT;
}
