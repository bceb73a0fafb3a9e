/* strata tokenize: print the pieces and ids of a text, like llama.cpp's llama-tokenize. */
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "strata/gguf.h"
#include "strata/tok.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: strata tokenize -m FILE.gguf [options] TEXT\n"
            "       strata tokenize -m FILE.gguf [options] -f TEXTFILE\n"
            "  --ids                print only the ids, as [1, 2, 3]\n"
            "  --no-bos             do not add BOS/EOS (add_special off)\n"
            "  --no-parse-special   read control tokens in the text as plain text\n"
            "  --pre NAME           use pre-tokenizer NAME instead of tokenizer.ggml.pre\n"
            "  --force-default-pre  accept an unknown tokenizer.ggml.pre (use the default one)\n"
            "  --show-count         print the number of tokens at the end\n"
            "  --no-escape          keep backslashes as written (default, -e / --escape: the text,\n"
            "                       from the command line or -f, has its \\n \\r \\t \\' \\\" \\\\ \\xHH\n"
            "                       turned into the bytes they stand for, as llama-tokenize)\n"
            "TEXTFILE is read as it is, a trailing newline included (a newline is a token).\n");
}

/* Writes a piece between quotes; bytes that are not valid UTF-8 (a byte token alone) as \xNN. */
static void put_piece(const char *p, size_t n) {
    const unsigned char *u = (const unsigned char *)p;
    for (size_t i = 0; i < n;) {
        int l = u[i] < 0x80 ? 1 : u[i] >= 0xC2 && u[i] <= 0xDF ? 2 : u[i] >= 0xE0 && u[i] <= 0xEF ? 3
                : u[i] >= 0xF0 && u[i] <= 0xF4 ? 4 : 0;
        bool ok = l > 0 && i + (size_t)l <= n;
        for (int j = 1; ok && j < l; j++) ok = (u[i + (size_t)j] & 0xC0) == 0x80;
        if (!ok) {
            printf("\\x%02x", u[i]);
            i++;
        } else {
            fwrite(p + i, 1, (size_t)l, stdout);
            i += (size_t)l;
        }
    }
}

int st_cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *text = NULL, *file = NULL, *pre = NULL;
    bool ids_only = false, add_special = true, parse_special = true, force_pre = false, count = false;
    bool escape = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && i + 1 < argc) model = argv[++i];
        else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && i + 1 < argc) file = argv[++i];
        else if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && i + 1 < argc) text = argv[++i];
        else if (!strcmp(a, "--pre") && i + 1 < argc) pre = argv[++i];
        else if (!strcmp(a, "--ids")) ids_only = true;
        else if (!strcmp(a, "--no-bos")) add_special = false;
        else if (!strcmp(a, "--no-parse-special")) parse_special = false;
        else if (!strcmp(a, "--force-default-pre")) force_pre = true;
        else if (!strcmp(a, "--show-count")) count = true;
        else if (!strcmp(a, "-e") || !strcmp(a, "--escape")) escape = true;
        else if (!strcmp(a, "--no-escape")) escape = false;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return ST_EXIT_OK;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "strata tokenize: unknown option '%s'\n", a);
            usage(stderr);
            return ST_EXIT_INPUT;
        } else if (!text) {
            text = a;
        } else {
            fprintf(stderr, "strata tokenize: more than one TEXT (quote it)\n");
            return ST_EXIT_INPUT;
        }
    }
    if (!model || (!text && !file) || (text && file)) {
        usage(stderr);
        return ST_EXIT_INPUT;
    }
    char *buf = NULL;
    size_t len = 0;
    if (file) {
        int rc = st_cli_read_file(file, &buf, &len);
        if (rc) {
            fprintf(stderr, "strata tokenize: cannot read %s: %s\n", file, st_strerror(rc));
            return st_cli_exit_code(rc);
        }
    } else {
        len = strlen(text);
        buf = malloc(len + 1);
        if (!buf) {
            fprintf(stderr, "strata tokenize: %s\n", st_strerror(ST_E_NOMEM));
            return st_cli_exit_code(ST_E_NOMEM);
        }
        memcpy(buf, text, len + 1);
    }
    if (escape) len = st_cli_process_escapes(buf, len);
    text = buf;
    st_ctx *ctx = NULL;
    int rc = st_cli_ctx_create("tokenize", 1, &ctx);
    if (rc) {
        free(buf);
        return rc;
    }
    st_gguf *g = NULL;
    st_tok *tok = NULL;
    int32_t *ids = NULL;
    int n = 0;
    rc = st_gguf_open(ctx, model, &g);
    if (!rc) {
        st_tok_params p = st_tok_default_params();
        p.pre_override = pre;
        p.force_default_pre = force_pre;
        rc = st_tok_load(ctx, g, &p, &tok);
    }
    if (!rc) rc = st_tok_encode_alloc(tok, text, len, add_special, parse_special, &ids, &n);
    if (rc) {
        const char *detail = st_ctx_error(ctx);
        fprintf(stderr, "strata tokenize: %s%s%s\n", st_strerror(rc), *detail ? ": " : "", detail);
    } else if (ids_only) {
        printf("[");
        for (int i = 0; i < n; i++) printf("%s%d", i ? ", " : "", ids[i]);
        printf("]\n");
    } else {
        for (int i = 0; i < n; i++) {
            const char *p;
            size_t l;
            st_tok_piece(tok, ids[i], &p, &l);
            printf("%6d -> '", ids[i]);
            put_piece(p, l);
            printf("'\n");
        }
    }
    if (!rc && count) printf("Total number of tokens: %d\n", n);
    free(ids);
    st_tok_destroy(tok);
    st_gguf_close(g);
    st_ctx_destroy(ctx);
    free(buf);
    return rc ? st_cli_exit_code(rc) : ST_EXIT_OK;
}
