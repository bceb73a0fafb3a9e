/* Helpers shared by the model commands (run, perplexity, mkmodel, bench): number parsing,
 * a progress bar, and opening a model with its KV cache and runner. */
#ifndef STRATA_CLI_UTIL_H
#define STRATA_CLI_UTIL_H

#include "cli/cli_quest.h"
#include "cli/kv_flags.h"
#include "strata/model.h"
#include "strata/sample.h"
#include "strata/tok.h"

#include <stdio.h>

/* Strict parsers: the whole string must be a number in [lo, hi]. Return 0 or ST_E_USAGE. */
int st_cli_int(const char *s, long long lo, long long hi, long long *out);
int st_cli_float(const char *s, double lo, double hi, double *out);
/* The sampler flags of run and batch, as llama.cpp spells them: --temp, --top-k, --top-p,
 * --min-p, --repeat-penalty, --frequency-penalty, --presence-penalty, --repeat-last-n (the
 * seed is each command's: run takes -1 for a random one). Option a with value v: 1 consumed
 * (v valid), 0 not a sampler flag, -1 bad or missing value. */
int st_cli_sampler_arg(st_sampler_params *sp, const char *a, const char *v);
/* Speculative decoding flags, llama.cpp's spellings: --spec-ngram N (prompt lookup drafting
 * with an N-gram; 0 off), -md / --model-draft FILE (a draft model), --draft-max N,
 * --draft-min N, --draft-p-min P. Copied into st_engine_params (the requests' default);
 * st_cli_spec_apply does that. The zeroed struct is "none given". */
typedef struct st_cli_spec {
    int32_t ngram;           /* 0: not given (off) */
    int32_t draft_max;       /* 0: the engine's */
    const char *draft_model; /* NULL: none (borrowed from argv) */
    int32_t draft_min;       /* 0: any */
    float p_min;             /* valid when p_min_set */
    int p_min_set;
} st_cli_spec;
#define ST_CLI_SPEC_USAGE                                                                          \
    "Speculative decoding: --spec-ngram N drafts what followed the last N tokens' latest earlier\n"  \
    "occurrence in the prompt and text so far; -md FILE (--model-draft) drafts with a smaller\n"    \
    "model of the same vocabulary (when the lookup finds nothing, with both); either is verified\n" \
    "in one forward (greedy output is plain decode's, sampled output keeps its distribution);\n"   \
    "--draft-max M drafted tokens per round (default 8), --draft-min M drafts shorter are not\n"   \
    "verified (default 0), --draft-p-min P the draft model stops below this probability (0.75).\n"
struct st_engine_params;
/* Copies the flags given into the engine's params. */
void st_cli_spec_apply(const st_cli_spec *spec, struct st_engine_params *ep);

/* The flags the engine's commands share: Quest (cli_quest.h), the sampler's (sp NULL: none, as
 * serve takes them per request), the SSD tier's (kv_flags.h) and speculative decoding's (spec
 * NULL: none). Option a with value v: 1
 * consumed a and v, 2 consumed a alone (--verbose), 0 none of these, -1 bad or missing value. */
int st_cli_engine_arg(st_cli_quest *q, st_sampler_params *sp, st_cli_kv_flags *f, st_cli_spec *spec, const char *a,
                      const char *v);
/* Reads a whole file (NUL-terminated). *out malloc'd. Returns 0 or -errno. */
int st_cli_read_file(const char *path, char **out, size_t *len);
/* llama.cpp's string_process_escapes (common.cpp), which its tools apply to prompt text
 * unless --no-escape: \n \r \t \' \" \\ and \xHH become the bytes they stand for; a
 * trailing backslash, \x without two hex digits, and any other escape stay as written. In
 * place over s[0, len) (which may hold NULs, and may gain them from \x00); returns the new
 * length and NUL-terminates. */
size_t st_cli_process_escapes(char *s, size_t len);
/* Prompt text as llama.cpp's tools take it: from a file (`from_file`), one trailing '\n'
 * dropped; then, with `escape` (their default), st_cli_process_escapes. Returns the new
 * length. */
size_t st_cli_prompt_text(char *s, size_t len, int from_file, int escape);
/* MemAvailable from /proc/meminfo in bytes (0 when unknown). */
unsigned long long st_cli_mem_available(void);

/* Creates the context (n_threads 0: the default, STRATA_THREADS / STRATA_ISA honored). On
 * failure prints "strata CMD: <reason>" to stderr and returns the exit code (2 for a bad
 * variable or an ISA this CPU cannot run). */
int st_cli_ctx_create(const char *cmd, int n_threads, st_ctx **out);

/* A progress bar on stderr, drawn only when stderr is a terminal and the job has run for
 * more than a second; redrawn at most every 0.1 s (and at the end). */
typedef struct st_cli_progress {
    double t0, last;
    int active, shown;
    const char *label;
    st_runner *runner;  /* attached: moved by its per-layer reports */
    long long n_tok;
    long long base, step; /* the next forward reads tokens [base, base + step) of the n_tok */
} st_cli_progress;
void st_cli_progress_begin(st_cli_progress *p, const char *label);
void st_cli_progress_update(st_cli_progress *p, long long done, long long total);
/* Moves p from r's per-layer prefill reports (st_runner_set_progress) while the next
 * st_runner_forward prefills n_tok tokens, so the bar advances within a chunk; until
 * st_cli_progress_end, which detaches it. */
void st_cli_progress_attach(st_cli_progress *p, st_runner *r, long long n_tok);
void st_cli_progress_end(st_cli_progress *p);
/* The prompt is read over several forwards (engine steps): the next one reads tokens
 * [base, base + step) of the attached n_tok. */
void st_cli_progress_step(st_cli_progress *p, long long base, long long step);

/* A model ready to run one or more sequences. */
typedef struct st_cli_session {
    st_ctx *ctx;
    void *synth_buf;   /* GGUF image of a built-in synthetic model, else NULL */
    st_model *model;
    st_tok *tok;
    st_kv *kv;
    st_runner *runner;
    int32_t n_ctx;
} st_cli_session;

typedef struct st_cli_session_opts {
    const char *model_path; /* NULL: synth (must be set) */
    const st_synth_params *synth;
    int n_threads;          /* 0: default */
    int32_t n_ctx;          /* 0: min(model's, 4096) */
    int32_t n_seqs;         /* sequences the KV pool is sized for (>= 1) */
    int page_size;          /* 0: 16 */
    st_type kv_type;
    int32_t n_batch;        /* 0: 256 */
    int need_tok;           /* load the tokenizer */
    const st_cli_kv_flags *kv_flags; /* NULL: no SSD tier (kv_flags.h) */
    int mmap;               /* 1 --mmap, -1 --no-mmap, 0: $STRATA_MMAP (st_cli_model_load_params) */
} st_cli_session_opts;

/* The model load params of a command: $STRATA_MMAP=1 maps the file and $STRATA_WLAYOUT=rows
 * keeps the row layout (model.h); mmap (1 --mmap, -1 --no-mmap, 0 not given) overrides
 * STRATA_MMAP. Reads the environment, hence here and not in the library. */
st_model_load_params st_cli_model_load_params(int mmap);

/* After a command wrote the model file out (begun at t0, st_time_now): the file loaded back
 * and its summary on stderr ("wrote OUT in S s: ..."), or why it does not load, named for
 * cmd. Takes ctx's result of the write: rc != 0 reports ctx's error and returns its exit
 * code. Destroys ctx. Returns 0, the write's exit code, or ST_EXIT_INTERNAL (written but
 * not loadable). */
int st_cli_report_written(st_ctx *ctx, const char *cmd, int rc, const char *out, double t0);
#define ST_CLI_MMAP_USAGE                                                                       \
    "--mmap maps the model file instead of reading it into memory (less RAM when processes\n"   \
    "share it, but the weights stay in the file's row layout); --no-mmap reads it, the\n"       \
    "default unless $STRATA_MMAP=1.\n"

/* Opens everything; on error prints one line "strata <cmd>: <message>" to stderr and
 * returns the exit code (2 bad input, 1 internal), with nothing left open. */
int st_cli_session_open(const char *cmd, const st_cli_session_opts *o, st_cli_session *s);
void st_cli_session_close(st_cli_session *s);

/* Parses f16 | bf16 | f32 | q8_0. Returns 0 or ST_E_USAGE. */
int st_cli_kv_type(const char *s, st_type *out);

#endif
