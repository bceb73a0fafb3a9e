/* strata: one binary, subcommands. */
#include "strata/core.h"
#include "cli/commands.h"

#include <stdio.h>
#include <string.h>

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
