/* The llama.cpp figure a bench compares with. No figure is written into a bench: one measured
 * on another machine, or with another build, says nothing about this run. So the figure is
 * measured now by llama-bench when it is on PATH (with the same model file, threads and test),
 * else read from ../shared/peers/llama-bench.md (measured on this kind of machine), and the
 * bench prints which it did; with neither, it says that no figure is available and prints no
 * ratio. Where llama.cpp was run with and without flash attention, the better of the two is
 * the bar (its CPU decode at depth is faster without). */
#ifndef STRATA_BENCH_PEER_H
#define STRATA_BENCH_PEER_H

#include "bench_common.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct bench_peer {
    double tps;       /* t/s; 0 when no figure is available */
    char source[768]; /* where tps comes from, or why there is none: for the printout */
} bench_peer;

/* p->source from a format; a message cut at the buffer's end still says what happened. */
__attribute__((format(printf, 2, 3))) static inline void bench_peer_say_(bench_peer *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->source, sizeof p->source, fmt, ap);
    va_end(ap);
}

/* The path of llama-bench on PATH into out; 0, or -1 when it is not there. */
static inline int bench_peer_find_exe(char *out, size_t cap) {
    const char *path = getenv("PATH");
    while (path && *path) {
        const char *end = strchr(path, ':');
        size_t n = end ? (size_t)(end - path) : strlen(path);
        if (n > 0 && (size_t)snprintf(out, cap, "%.*s/llama-bench", (int)n, path) < cap && access(out, X_OK) == 0)
            return 0;
        path = end ? end + 1 : NULL;
    }
    return -1;
}

/* The number after "key": in one JSON line; 0, or -1 when absent. */
static inline int bench_peer_json_num_(const char *line, const char *key, double *v) {
    char k[64];
    snprintf(k, sizeof k, "\"%s\"", key);
    const char *p = strstr(line, k);
    if (!p || !(p = strchr(p + strlen(k), ':'))) return -1;
    char *end;
    *v = strtod(p + 1, &end);
    return end == p + 1 ? -1 : 0;
}

/* Runs `llama-bench -m MODEL -t THREADS ARGS -fa 0,1 -o jsonl` (ARGS naming one test, as
 * "-p 0 -n 32 -d 32768") and takes the best avg_ts of its lines with n_prompt == n_prompt and
 * n_gen == n_gen. 0 with p filled in, or -1 (p->source says why). */
static inline int bench_peer_run(const char *exe, const char *model, int n_threads, const char *args,
                                 long long n_prompt, long long n_gen, bench_peer *p) {
    char cmd[2048];
    p->tps = 0;
    if ((size_t)snprintf(cmd, sizeof cmd, "'%s' -m '%s' -t %d %s -fa 0,1 -o jsonl 2>/dev/null", exe, model,
                         n_threads, args) >= sizeof cmd) {
        bench_peer_say_(p, "the llama-bench command line would be too long (%s)", exe);
        return -1;
    }
    FILE *f = popen(cmd, "r");
    if (!f) {
        bench_peer_say_(p, "llama-bench could not be started (%s)", cmd);
        return -1;
    }
    char line[16384];
    double best = 0;
    while (fgets(line, sizeof line, f)) {
        double np, ng, ts;
        if (!bench_peer_json_num_(line, "n_prompt", &np) && !bench_peer_json_num_(line, "n_gen", &ng) &&
            !bench_peer_json_num_(line, "avg_ts", &ts) && np == (double)n_prompt && ng == (double)n_gen && ts > best)
            best = ts;
    }
    const int st = pclose(f);
    if (best <= 0) {
        bench_peer_say_(p, "llama-bench gave no figure (%s %d): %s", WIFEXITED(st) ? "exit status" : "wait status",
                        WIFEXITED(st) ? WEXITSTATUS(st) : st, cmd);
        return -1;
    }
    p->tps = best;
    bench_peer_say_(p, "measured now by %s, better of fa 0 / fa 1: %s", exe, cmd);
    return 0;
}

/* Splits a markdown table row "| a | b |" into at most max trimmed cells (written into line);
 * the count. */
static inline int bench_peer_cells_(char *line, char **cells, int max) {
    int n = 0;
    char *s = strchr(line, '|');
    while (s && n < max) {
        char *e = strchr(s + 1, '|');
        if (!e) break;
        *e = 0;
        char *a = s + 1, *b = e;
        while (a < b && isspace((unsigned char)*a)) a++;
        while (b > a && isspace((unsigned char)b[-1])) *--b = 0;
        cells[n++] = a;
        s = e;
    }
    return n;
}

/* The larger number of a cell ("116", "59–73": a range over rounds, its best end); 0 for an
 * empty cell. */
static inline double bench_peer_cell_value_(const char *c) {
    double best = 0;
    while (*c) {
        if (isdigit((unsigned char)*c)) {
            char *end;
            const double v = strtod(c, &end);
            if (v > best) best = v;
            c = end;
        } else {
            c++;
        }
    }
    return best;
}

/* The best figure of the rows named in rows[n_rows] (first cell), column col (header cell),
 * of the first table after the line holding `heading` in md_path. 0 with p filled in (the
 * file, table, rows and column named), or -1 (p->source says why). */
static inline int bench_peer_from_md(const char *md_path, const char *heading, const char *const *rows,
                                     int n_rows, const char *col, bench_peer *p) {
    p->tps = 0;
    size_t n = 0;
    char *md = bench_read_file(md_path, &n);
    if (!md) {
        bench_peer_say_(p, "%s cannot be read", md_path);
        return -1;
    }
    char *h = strstr(md, heading);
    char *line = h;
    while (line && line > md && line[-1] != '\n') line--;
    while (line && *line && *line != '|') { /* to the table's header row */
        char *nl = strchr(line, '\n');
        line = nl ? nl + 1 : NULL;
    }
    int col_i = -1, found = 0;
    char used[256] = "", head0[64] = "";
    double best = 0;
    for (int row_no = 0; line && *line == '|'; row_no++) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        char *cells[32];
        const int nc = bench_peer_cells_(line, cells, 32);
        if (row_no == 0) {
            if (nc > 0) snprintf(head0, sizeof head0, "%s", cells[0]);
            for (int i = 0; i < nc; i++)
                if (!strcmp(cells[i], col)) col_i = i;
        } else if (col_i >= 0 && col_i < nc) {
            for (int r = 0; r < n_rows; r++) {
                const double v = nc > 0 && !strcmp(cells[0], rows[r]) ? bench_peer_cell_value_(cells[col_i]) : 0;
                if (v > 0) {
                    found = 1;
                    if (v > best) {
                        best = v;
                        snprintf(used, sizeof used, "%s %s", head0, rows[r]);
                    }
                }
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    free(md);
    if (n_rows == 0) {
        bench_peer_say_(p, "%s has no row for this model in the table after \"%s\"", md_path, heading);
        return -1;
    }
    if (!h || col_i < 0 || !found) {
        char names[256] = "";
        for (int r = 0; r < n_rows; r++)
            if (strlen(names) + strlen(rows[r]) + 5 < sizeof names)
                strcat(strcat(strcat(names, r ? ", \"" : "\""), rows[r]), "\"");
        bench_peer_say_(p, "%s has no figure in column \"%s\", row %s of the table after \"%s\"", md_path, col,
                        names, heading);
        return -1;
    }
    p->tps = best;
    bench_peer_say_(p, "read from %s: table after \"%s\", column \"%s\", row \"%s\"%s",
             md_path, heading, col, used, n_rows > 1 ? " (the better of the rows that apply)" : "");
    return 0;
}

/* The figure for one test: llama-bench on `model` (NULL: none to give it) with args, n_prompt and
 * n_gen as bench_peer_run when it is on PATH; else, or when that gives nothing, the table after
 * `heading` of ../shared/peers/llama-bench.md as bench_peer_from_md (n_rows 0: the file has no
 * row for this model). p->source says what was tried and where the figure comes from. */
static inline void bench_peer_get(const char *model, int n_threads, const char *args, long long n_prompt,
                                  long long n_gen, const char *heading, const char *const *rows, int n_rows,
                                  const char *col, bench_peer *p) {
    char exe[4096], tried[sizeof p->source] = "llama-bench is not on PATH";
    if (!bench_peer_find_exe(exe, sizeof exe)) {
        if (model && !bench_peer_run(exe, model, n_threads, args, n_prompt, n_gen, p)) return;
        if (model) memcpy(tried, p->source, sizeof tried);
        else snprintf(tried, sizeof tried, "no model file for llama-bench");
    }
    char md[1024];
    snprintf(md, sizeof md, "%s/peers/llama-bench.md", bench_shared_dir());
    bench_peer_from_md(md, heading, rows, n_rows, col, p);
    char found[sizeof p->source];
    memcpy(found, p->source, sizeof found);
    bench_peer_say_(p, "%s; %s", tried, found);
}

/* One line saying where the figure came from, or that there is none. */
static inline void bench_peer_print(const char *what, const bench_peer *p) {
    if (p->tps > 0) printf("llama.cpp %s: %.1f tok/s, %s\n", what, p->tps, p->source);
    else printf("llama.cpp %s: no figure available (%s)\n", what, p->source);
}

/* From the table after the "llama-server -np 16" line of llama-bench.md: the row whose model
 * cell is `model`, the columns headed "1 client", "4", "16" into v[3] (0: empty or absent).
 * Returns 0 when the row was found. */
static inline int bench_peer_server_row(const char *md, const char *model, double v[3]) {
    v[0] = v[1] = v[2] = 0;
    const char *s = strstr(md, "llama-server -np 16");
    if (!s) return -1;
    const char *hdr = strstr(s, "\n|");
    if (!hdr) return -1;
    hdr++;
    /* column indices from the header */
    int col[3] = {-1, -1, -1}, c = 0;
    const char *p = hdr + 1;
    while (*p && *p != '\n') {
        const char *q = p;
        while (*q && *q != '|' && *q != '\n') q++;
        char cell[64];
        const char *b = p, *en = q;
        while (b < en && *b == ' ') b++;
        while (en > b && en[-1] == ' ') en--;
        snprintf(cell, sizeof cell, "%.*s", (int)(en - b), b);
        if (!strcmp(cell, "1 client")) col[0] = c;
        else if (!strcmp(cell, "4")) col[1] = c;
        else if (!strcmp(cell, "16")) col[2] = c;
        c++;
        if (*q != '|') break;
        p = q + 1;
    }
    /* rows until the table ends */
    const char *row = strchr(hdr, '\n');
    while (row && row[1] == '|') {
        row++;
        const char *q = row + 1;
        while (*q == ' ') q++;
        if (!strncmp(q, model, strlen(model)) && (q[strlen(model)] == ' ' || q[strlen(model)] == '|')) {
            c = 0;
            p = row + 1;
            while (*p && *p != '\n') {
                const char *e = p;
                while (*e && *e != '|' && *e != '\n') e++;
                for (int k = 0; k < 3; k++)
                    if (col[k] == c) v[k] = strtod(p, NULL);
                c++;
                if (*e != '|') break;
                p = e + 1;
            }
            return 0;
        }
        row = strchr(row, '\n');
    }
    return -1;
}

#endif
