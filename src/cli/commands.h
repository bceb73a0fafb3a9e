/* Subcommands of the `strata` binary. Each lives in src/cli/cmd_<name>.c and returns the
 * process exit code: 0 ok, 2 bad input or usage, 1 internal error. */
#ifndef STRATA_CLI_COMMANDS_H
#define STRATA_CLI_COMMANDS_H

#define ST_EXIT_OK 0
#define ST_EXIT_INTERNAL 1
#define ST_EXIT_INPUT 2

/* Maps an st_err code or -errno to the CLI exit code (exit_code.c): 0 -> 0; codes that say
 * the user's input is wrong (usage, arguments, malformed / missing / unreadable files) -> 2;
 * the rest (out of memory, I/O, disk full, bad state) -> 1. */
int st_cli_exit_code(int err);

/* Declared weak so the table below links while a command's file is not part of the build. */
#define ST_CLI_COMMANDS(X)                                                            \
    X(run, "generate text from a GGUF model (default: a built-in synthetic model)")     \
    X(demo, "short vs long context decode with a small RAM pool, SSD spill and Quest")  \
    X(batch, "complete a file of prompts, many at once (continuous batching)")          \
    X(serve, "an OpenAI-compatible HTTP server (completions, chat, streaming)")       \
    X(perplexity, "perplexity of a text file, chunked as llama.cpp does")                \
    X(inspect, "print a GGUF file's header, metadata and tensor table")                 \
    X(mkmodel, "write a llama-family GGUF with random weights for a given shape")        \
    X(convert, "write a llama2.c checkpoint and its tokenizer as a GGUF")               \
    X(tokenize, "print the pieces and ids of a text")                                   \
    X(bench, "decode/prefill benchmark on synthetic models")                            \
    X(spill, "manage KV spill directories (gc)")

#define ST_CLI_DECL_(name, help) __attribute__((weak)) int st_cmd_##name(int argc, char **argv);
ST_CLI_COMMANDS(ST_CLI_DECL_)
#undef ST_CLI_DECL_

#endif
