/* Shared CLI helpers for the model commands. */
#include "cli/cli_util.h"
#include "cli/commands.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

int st_cli_int(const char *s, long long lo, long long hi, long long *out) {
    if (!s || !*s) return ST_E_USAGE;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return ST_E_USAGE;
    *out = v;
    return 0;
}

int st_cli_float(const char *s, double lo, double hi, double *out) {
    if (!s || !*s) return ST_E_USAGE;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !(v >= lo && v <= hi)) return ST_E_USAGE;
    *out = v;
    return 0;
}

size_t st_cli_process_escapes(char *s, size_t len) {
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] != '\\' || i + 1 == len) { /* a trailing backslash stays */
            s[o++] = s[i];
            continue;
        }
        const char c = s[++i];
        switch (c) {
        case 'n': s[o++] = '\n'; break;
        case 'r': s[o++] = '\r'; break;
        case 't': s[o++] = '\t'; break;
        case '\'': case '"': case '\\': s[o++] = c; break;
        default: {
            /* \x and the two bytes after it through strtol, as llama.cpp does: its quirks
             * come along ("\x 5" and "\x+5" are 0x05, "\x-1" is 0xFF) so that the same
             * command line gives the same bytes; fewer than two bytes read, or any
             * other escape, and the backslash is kept with what follows it. */
            int done = 0;
            if (c == 'x' && i + 2 < len) {
                const char x[3] = {s[i + 1], s[i + 2], 0};
                char *end;
                const long v = strtol(x, &end, 16);
                if (end == x + 2) {
                    s[o++] = (char)(unsigned char)v;
                    i += 2;
                    done = 1;
                }
            }
            if (!done) {
                s[o++] = '\\';
                s[o++] = c;
            }
        }
        }
    }
    s[o] = 0;
    return o;
}

size_t st_cli_prompt_text(char *s, size_t len, int from_file, int escape) {
    if (from_file && len && s[len - 1] == '\n') s[--len] = 0;
    return escape ? st_cli_process_escapes(s, len) : len;
}

int st_cli_read_file(const char *path, char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return -errno;
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    for (;;) {
        if (!b) {
            fclose(f);
            return ST_E_NOMEM;
        }
        n += fread(b + n, 1, cap - n - 1, f);
        if (n < cap - 1) break;
        cap *= 2;
        char *nb = realloc(b, cap);
        if (!nb) free(b);
        b = nb;
    }
    int err = ferror(f) ? -EIO : 0;
    fclose(f);
    if (err) {
        free(b);
        return err;
    }
    b[n] = 0;
    *out = b;
    *len = n;
    return 0;
}

unsigned long long st_cli_mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return kb * 1024ull;
}

int st_cli_ctx_create(const char *cmd, int n_threads, st_ctx **out) {
    st_ctx_params cp = st_ctx_default_params();
    cp.n_threads = n_threads;
    char why[256];
    int rc = st_ctx_create_msg(&cp, out, why, sizeof why);
    if (!rc) return 0;
    fprintf(stderr, "strata %s: %s\n", cmd, *why ? why : st_strerror(rc));
    return st_cli_exit_code(rc);
}

void st_cli_progress_begin(st_cli_progress *p, const char *label) {
    memset(p, 0, sizeof *p);
    p->t0 = st_time_now();
    p->active = isatty(2);
    p->label = label;
}

void st_cli_progress_update(st_cli_progress *p, long long done, long long total) {
    if (!p->active || total <= 0) return;
    double now = st_time_now(), el = now - p->t0;
    if (el < 1.0 && !p->shown) return;
    if (p->shown && now - p->last < 0.1 && done < total) return;
    int w = 40, fill = (int)(w * done / total);
    char bar[64];
    for (int i = 0; i < w; i++) bar[i] = i < fill ? '#' : '.';
    bar[w] = 0;
    double rate = el > 0 ? done / el : 0;
    fprintf(stderr, "\r%s [%s] %lld/%lld (%.0f tok/s)", p->label, bar, done, total, rate);
    p->shown = 1;
    p->last = now;
}

static void on_layer(void *user, int64_t done, int64_t total) {
    st_cli_progress *p = user;
    if (total > 0)
        st_cli_progress_update(p, p->base + (long long)((double)done / (double)total * (double)p->step), p->n_tok);
}

void st_cli_progress_attach(st_cli_progress *p, st_runner *r, long long n_tok) {
    p->runner = r;
    p->n_tok = n_tok;
    p->base = 0, p->step = n_tok;
    if (p->active) st_runner_set_progress(r, on_layer, p);
}

void st_cli_progress_step(st_cli_progress *p, long long base, long long step) {
    p->base = base;
    p->step = base + step > p->n_tok ? p->n_tok - base : step;
}

void st_cli_progress_end(st_cli_progress *p) {
    if (p->runner) st_runner_set_progress(p->runner, NULL, NULL);
    p->runner = NULL;
    if (p->shown) fprintf(stderr, "\r\033[K");
    p->shown = 0;
}

int st_cli_kv_type(const char *s, st_type *out) {
    if (!strcasecmp(s, "f16")) *out = ST_TYPE_F16;
    else if (!strcasecmp(s, "bf16")) *out = ST_TYPE_BF16;
    else if (!strcasecmp(s, "f32")) *out = ST_TYPE_F32;
    else if (!strcasecmp(s, "q8_0")) *out = ST_TYPE_Q8_0;
    else return ST_E_USAGE;
    return 0;
}

void st_cli_session_close(st_cli_session *s) {
    st_runner_destroy(s->runner);
    st_kv_destroy(s->kv);
    st_tok_destroy(s->tok);
    st_model_destroy(s->model);
    free(s->synth_buf);
    st_ctx_destroy(s->ctx);
    memset(s, 0, sizeof *s);
}

static int fail(const char *cmd, st_cli_session *s, int rc, const char *what) {
    const char *detail = s->ctx ? st_ctx_error(s->ctx) : "";
    if (*detail)
        fprintf(stderr, "strata %s: %s\n", cmd, detail);
    else
        fprintf(stderr, "strata %s: %s: %s\n", cmd, what, st_strerror(rc));
    st_cli_session_close(s);
    return st_cli_exit_code(rc);
}

int st_cli_sampler_arg(st_sampler_params *sp, const char *a, const char *v) {
    double d;
    long long n;
    if (!strcmp(a, "--temp")) {
        if (st_cli_float(v, -1e6, 1e6, &d)) return -1;
        sp->temp = (float)d;
    } else if (!strcmp(a, "--top-k")) {
        if (st_cli_int(v, -(1 << 30), 1 << 30, &n)) return -1;
        sp->top_k = (int32_t)n;
    } else if (!strcmp(a, "--top-p") || !strcmp(a, "--min-p")) {
        if (st_cli_float(v, 0, 1, &d)) return -1;
        *(a[2] == 't' ? &sp->top_p : &sp->min_p) = (float)d;
    } else if (!strcmp(a, "--repeat-penalty")) {
        if (st_cli_float(v, 1e-6, 1e6, &d)) return -1;
        sp->repeat_penalty = (float)d;
    } else if (!strcmp(a, "--frequency-penalty") || !strcmp(a, "--presence-penalty")) {
        if (st_cli_float(v, -1e6, 1e6, &d)) return -1;
        *(a[2] == 'f' ? &sp->freq_penalty : &sp->presence_penalty) = (float)d;
    } else if (!strcmp(a, "--repeat-last-n")) {
        if (st_cli_int(v, 0, 1 << 20, &n)) return -1;
        sp->repeat_last_n = (int32_t)n;
    } else {
        return 0;
    }
    return 1;
}

int st_cli_engine_arg(st_cli_quest *q, st_sampler_params *sp, st_cli_kv_flags *f, st_cli_spec *spec, const char *a,
                      const char *v) {
    int r = st_cli_quest_arg(q, a, v);
    if (!r && sp) r = st_cli_sampler_arg(sp, a, v);
    if (!r && spec && (!strcmp(a, "--spec-ngram") || !strcmp(a, "--draft-max") || !strcmp(a, "--draft-min"))) {
        long long n;
        const int lookup = a[2] == 's', min = !strcmp(a, "--draft-min");
        if (st_cli_int(v, lookup || min ? 0 : 1, lookup ? ST_ENGINE_MAX_NGRAM : ST_ENGINE_MAX_DRAFT, &n)) return -1;
        *(lookup ? &spec->ngram : min ? &spec->draft_min : &spec->draft_max) = (int32_t)n;
        return 1;
    }
    if (!r && spec && (!strcmp(a, "-md") || !strcmp(a, "--model-draft"))) {
        if (!v || !*v) return -1;
        spec->draft_model = v;
        return 1;
    }
    if (!r && spec && !strcmp(a, "--draft-p-min")) {
        double d;
        if (st_cli_float(v, 0, 1, &d)) return -1;
        spec->p_min = (float)d, spec->p_min_set = 1;
        return 1;
    }
    return r ? r : st_cli_kv_flags_arg(f, a, v);
}

st_model_load_params st_cli_model_load_params(int mmap) {
    st_model_load_params p = st_model_load_default_params();
    const char *e = getenv("STRATA_MMAP");
    p.use_mmap = mmap ? mmap > 0 : e && *e == '1';
    e = getenv("STRATA_WLAYOUT");
    if (e && !strcmp(e, "rows")) p.layout = ST_WEIGHT_LAYOUT_ROWS;
    return p;
}

int st_cli_report_written(st_ctx *ctx, const char *cmd, int rc, const char *out, double t0) {
    if (rc) {
        fprintf(stderr, "strata %s: %s\n", cmd, *st_ctx_error(ctx) ? st_ctx_error(ctx) : st_strerror(rc));
        st_ctx_destroy(ctx);
        return st_cli_exit_code(rc);
    }
    st_model *m = NULL;
    st_model_load_params lp = st_cli_model_load_params(0);
    rc = st_model_load(ctx, out, &lp, &m);
    if (!rc)
        fprintf(stderr, "wrote %s in %.1f s: %s, %.1f M params, %.1f MiB of weights per token\n", out,
                st_time_now() - t0, st_model_desc(m), st_model_n_params(m) / 1e6,
                st_model_weight_bytes(m) / 1048576.0);
    else
        fprintf(stderr, "strata %s: wrote %s but cannot load it back: %s\n", cmd, out, st_ctx_error(ctx));
    st_model_destroy(m);
    st_ctx_destroy(ctx);
    return rc ? ST_EXIT_INTERNAL : 0;
}

int st_cli_session_open(const char *cmd, const st_cli_session_opts *o, st_cli_session *s) {
    memset(s, 0, sizeof *s);
    int rc = st_cli_ctx_create(cmd, o->n_threads, &s->ctx);
    if (rc) return rc;
    if (o->model_path) {
        st_model_load_params lp = st_cli_model_load_params(o->mmap);
        rc = st_model_load(s->ctx, o->model_path, &lp, &s->model);
    } else {
        size_t n = 0;
        rc = st_synth_write_memory(s->ctx, o->synth, &s->synth_buf, &n);
        if (!rc) rc = st_model_load_memory(s->ctx, s->synth_buf, n, "(built-in synthetic model)", &s->model);
    }
    if (rc) return fail(cmd, s, rc, o->model_path ? o->model_path : "synthetic model");
    const st_model_hparams *hp = st_model_get_hparams(s->model);
    int32_t n_ctx = o->n_ctx ? o->n_ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    if (n_ctx > hp->n_ctx_train) {
        st_seterr(s->ctx, ST_E_LIMIT, "context %d is larger than the model's %d tokens", n_ctx, hp->n_ctx_train);
        return fail(cmd, s, ST_E_LIMIT, "context");
    }
    s->n_ctx = n_ctx;
    if (o->need_tok && (rc = st_tok_load(s->ctx, st_model_gguf(s->model), NULL, &s->tok)))
        return fail(cmd, s, rc, "tokenizer");
    st_kv_params kp = st_kv_default_params();
    kp.n_layer = hp->n_layer, kp.n_kv_head = hp->n_head_kv, kp.head_dim = hp->head_dim;
    kp.page_size = o->page_size ? o->page_size : 16;
    kp.type = o->kv_type;
    int32_t n_seqs = o->n_seqs > 0 ? o->n_seqs : 1;
    kp.n_pages = ((int64_t)n_ctx + kp.page_size - 1) / kp.page_size * n_seqs + n_seqs;
    st_model_fingerprint(s->model, kp.fingerprint.b);
    if (o->kv_flags && (rc = st_cli_kv_flags_apply(o->kv_flags, &kp, cmd))) {
        st_cli_session_close(s);
        return st_cli_exit_code(rc);
    }
    /* refuse a pool that cannot fit in memory before allocating it (the hot pool: with the
     * SSD tier only ram_pages of the n_pages hold RAM) */
    size_t eb = kp.type == ST_TYPE_F32 ? 4 : kp.type == ST_TYPE_Q8_0 ? 1 : 2;
    unsigned long long need = (unsigned long long)(kp.ram_pages ? kp.ram_pages : kp.n_pages) * kp.page_size * hp->n_layer * hp->n_head_kv *
                              hp->head_dim * 2 * eb, avail = st_cli_mem_available();
    if (avail && need > avail) {
        st_seterr(s->ctx, ST_E_LIMIT, "context %d needs %llu MiB of KV cache, more than the %llu MiB of memory "
                  "available", n_ctx, need >> 20, avail >> 20);
        return fail(cmd, s, ST_E_LIMIT, "context");
    }
    if ((rc = st_kv_create(s->ctx, &kp, &s->kv))) return fail(cmd, s, rc, "KV cache");
    st_runner_params rp = st_runner_default_params();
    rp.n_ctx = n_ctx;
    if (o->n_batch > 0) rp.n_batch = o->n_batch;
    if ((rc = st_runner_create(s->ctx, s->model, s->kv, &rp, &s->runner))) return fail(cmd, s, rc, "runner");
    return 0;
}

void st_cli_spec_apply(const st_cli_spec *spec, st_engine_params *ep) {
    ep->spec_ngram = spec->ngram;
    ep->draft_max = spec->draft_max;
    ep->draft_model_path = spec->draft_model;
    ep->draft_min = spec->draft_min;
    if (spec->p_min_set) ep->draft_p_min = spec->p_min;
}
