/*
 * Chat templates: the family of a GGUF's tokenizer.chat_template is recognized by the
 * distinctive substrings llama.cpp's llm_chat_detect_template looks for (checked in the
 * same order, so a template that llama.cpp files under a family strata does not render is
 * refused rather than mistaken for a neighbour), and rendered natively as
 * llm_chat_apply_template does. No Jinja.
 */
#include "tok/tok_int.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_names[ST_CHAT_COUNT_] = {
    [ST_CHAT_UNKNOWN] = "unknown",
    [ST_CHAT_CHATML] = "chatml",
    [ST_CHAT_LLAMA2] = "llama2",
    [ST_CHAT_LLAMA2_SYS] = "llama2-sys",
    [ST_CHAT_LLAMA2_SYS_BOS] = "llama2-sys-bos",
    [ST_CHAT_LLAMA2_SYS_STRIP] = "llama2-sys-strip",
    [ST_CHAT_MISTRAL_V1] = "mistral-v1",
    [ST_CHAT_MISTRAL_V3] = "mistral-v3",
    [ST_CHAT_MISTRAL_V3_TEKKEN] = "mistral-v3-tekken",
    [ST_CHAT_MISTRAL_V7] = "mistral-v7",
    [ST_CHAT_LLAMA3] = "llama3",
    [ST_CHAT_PHI3] = "phi3",
    [ST_CHAT_GEMMA] = "gemma",
    [ST_CHAT_DEEPSEEK] = "deepseek",
    [ST_CHAT_DEEPSEEK2] = "deepseek2",
    [ST_CHAT_DEEPSEEK3] = "deepseek3",
    [ST_CHAT_ZEPHYR] = "zephyr",
};

const char *st_chat_name(st_chat_tmpl t) {
    return (unsigned)t < ST_CHAT_COUNT_ && k_names[t] ? k_names[t] : "unknown";
}

int st_chat_from_name(const char *name, st_chat_tmpl *out) {
    if (out) *out = ST_CHAT_UNKNOWN;
    if (!name || !out) return ST_E_INVAL;
    for (int i = 1; i < ST_CHAT_COUNT_; i++)
        if (!strcmp(name, k_names[i])) {
            *out = (st_chat_tmpl)i;
            return 0;
        }
    return ST_E_NOT_FOUND;
}

#define HAS(s) (strstr(tmpl, (s)) != NULL)

static st_chat_tmpl detect(const char *tmpl) {
    if (HAS("<|im_start|>")) return HAS("<|im_sep|>") || HAS("<end_of_utterance>") ? ST_CHAT_UNKNOWN : ST_CHAT_CHATML;
    if (!strncmp(tmpl, "mistral", 7) || HAS("[INST]")) {
        if (HAS("[SYSTEM_PROMPT]")) return ST_CHAT_MISTRAL_V7;
        if (HAS("' [INST] ' + system_message") || HAS("[AVAILABLE_TOOLS]")) {
            if (HAS(" [INST]")) return ST_CHAT_MISTRAL_V1;
            if (HAS("\"[INST]\"")) return ST_CHAT_MISTRAL_V3_TEKKEN;
            return ST_CHAT_MISTRAL_V3;
        }
        if (HAS("content.strip()")) return ST_CHAT_LLAMA2_SYS_STRIP;
        if (HAS("bos_token + '[INST]")) return ST_CHAT_LLAMA2_SYS_BOS;
        if (HAS("<<SYS>>")) return ST_CHAT_LLAMA2_SYS;
        return ST_CHAT_LLAMA2;
    }
    if (HAS("<|assistant|>") && HAS("<|end|>")) return ST_CHAT_PHI3;
    if (HAS("[gMASK]<sop>")) return ST_CHAT_UNKNOWN;                          /* chatglm4 */
    if (HAS("<|assistant|>") && HAS("<|user|>")) return ST_CHAT_UNKNOWN;      /* falcon3, glmedge */
    if (HAS("<|{{ item['role'] }}|>") && HAS("<|begin_of_image|>")) return ST_CHAT_UNKNOWN;
    if (HAS("<|user|>") && HAS("<|endoftext|>")) return ST_CHAT_ZEPHYR;
    if (HAS("bos_token + message['role']")) return ST_CHAT_UNKNOWN;           /* monarch */
    if (HAS("<start_of_turn>")) return ST_CHAT_GEMMA;
    if (HAS("'\\n\\nAssistant: ' + eos_token") || HAS("GPT4 Correct ") || (HAS("USER: ") && HAS("ASSISTANT: ")))
        return ST_CHAT_UNKNOWN;                                                /* orion, openchat, vicuna */
    if (HAS("### Instruction:") && HAS("<|EOT|>")) return ST_CHAT_DEEPSEEK;
    if (HAS("<|START_OF_TURN_TOKEN|>") && HAS("<|USER_TOKEN|>")) return ST_CHAT_UNKNOWN; /* command-r */
    if (HAS("<|start_header_id|>") && HAS("<|end_header_id|>")) return ST_CHAT_LLAMA3;
    if (HAS("[gMASK]sop") || HAS("<\xe7\x94\xa8\xe6\x88\xb7>")) return ST_CHAT_UNKNOWN; /* chatglm3, minicpm */
    if (HAS("'Assistant: ' + message['content'] + eos_token")) return ST_CHAT_DEEPSEEK2;
    if (HAS("<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>") && HAS("<\xef\xbd\x9c" "User\xef\xbd\x9c>") &&
        HAS("<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"))
        return ST_CHAT_DEEPSEEK3;
    return ST_CHAT_UNKNOWN;
}

int st_chat_detect(const char *tmpl, st_chat_tmpl *out) {
    if (out) *out = ST_CHAT_UNKNOWN;
    if (!tmpl || !out) return ST_E_INVAL;
    if (st_chat_from_name(tmpl, out) == 0) return 0;
    *out = detect(tmpl);
    return *out == ST_CHAT_UNKNOWN ? ST_E_UNSUPPORTED : 0;
}

static void list_names(char *buf, size_t cap) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 1; i < ST_CHAT_COUNT_ && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%s", i > 1 ? ", " : "", k_names[i]);
}

int st_chat_for_tok(st_ctx *ctx, const st_tok *tok, const char *force_name, st_chat_tmpl *out) {
    if (out) *out = ST_CHAT_UNKNOWN;
    if (!tok || !out) return ST_E_INVAL;
    char names[512];
    list_names(names, sizeof names);
    if (force_name) {
        if (st_chat_from_name(force_name, out) == 0) return 0;
        return st_seterr(ctx, ST_E_NOT_FOUND, "unknown chat template name '%s' (known: %s)", force_name, names);
    }
    if (!tok->chat_template)
        return st_seterr(ctx, ST_E_NOT_FOUND,
                         "the model has no tokenizer.chat_template; choose one with --chat-template NAME (%s)", names);
    if (st_chat_detect(tok->chat_template, out) == 0) return 0;
    return st_seterr(ctx, ST_E_UNSUPPORTED,
                     "unrecognized tokenizer.chat_template (%.60s...); choose one with --chat-template NAME (%s)",
                     tok->chat_template, names);
}

/* ---- rendering ---------------------------------------------------------------------- */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int err;
} sbuf;

static void put(sbuf *b, const char *s, size_t n) {
    if (b->err) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->err = ST_E_NOMEM;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

/* trims C-locale white space at both ends, as llama.cpp's trim() */
static void put_trim(sbuf *b, const char *s) {
    size_t n = strlen(s), i = 0;
    while (i < n && isspace((uint8_t)s[i])) i++;
    while (n > i && isspace((uint8_t)s[n - 1])) n--;
    put(b, s + i, n - i);
}

static void render_mistral(sbuf *b, st_chat_tmpl t, const st_chat_msg *m, size_t n) {
    if (t == ST_CHAT_MISTRAL_V7) {
        for (size_t i = 0; i < n; i++) {
            if (!strcmp(m[i].role, "system")) {
                puts_(b, "[SYSTEM_PROMPT] "), puts_(b, m[i].content), puts_(b, "[/SYSTEM_PROMPT]");
            } else if (!strcmp(m[i].role, "user")) {
                puts_(b, "[INST] "), puts_(b, m[i].content), puts_(b, "[/INST]");
            } else {
                puts_(b, " "), puts_(b, m[i].content), puts_(b, "</s>");
            }
        }
        return;
    }
    const char *lead = t == ST_CHAT_MISTRAL_V1 ? " " : "";
    const char *trail = t == ST_CHAT_MISTRAL_V3_TEKKEN ? "" : " ";
    bool inside = false;
    for (size_t i = 0; i < n; i++) {
        if (!inside) {
            puts_(b, lead), puts_(b, "[INST]"), puts_(b, trail);
            inside = true;
        }
        if (!strcmp(m[i].role, "system")) {
            puts_(b, m[i].content), puts_(b, "\n\n");
        } else if (!strcmp(m[i].role, "user")) {
            puts_(b, m[i].content), puts_(b, lead), puts_(b, "[/INST]");
        } else {
            puts_(b, trail);
            if (t == ST_CHAT_MISTRAL_V3) put_trim(b, m[i].content);
            else puts_(b, m[i].content);
            puts_(b, "</s>");
            inside = false;
        }
    }
}

static void render_llama2(sbuf *b, st_chat_tmpl t, const st_chat_msg *m, size_t n) {
    bool sys = t != ST_CHAT_LLAMA2, bos_inside = t == ST_CHAT_LLAMA2_SYS_BOS, strip = t == ST_CHAT_LLAMA2_SYS_STRIP;
    bool inside = true;
    puts_(b, "[INST] ");
    for (size_t i = 0; i < n; i++) {
        if (!inside) {
            inside = true;
            puts_(b, bos_inside ? "<s>[INST] " : "[INST] ");
        }
        const char *c = m[i].content;
        sbuf tmp = {0};
        if (strip) {
            put_trim(&tmp, c);
            c = tmp.p ? tmp.p : "";
        }
        if (!strcmp(m[i].role, "system")) {
            if (sys) puts_(b, "<<SYS>>\n"), puts_(b, c), puts_(b, "\n<</SYS>>\n\n");
            else puts_(b, c), puts_(b, "\n");
        } else if (!strcmp(m[i].role, "user")) {
            puts_(b, c), puts_(b, " [/INST]");
        } else {
            puts_(b, c), puts_(b, "</s>");
            inside = false;
        }
        if (tmp.err) b->err = tmp.err;
        free(tmp.p);
    }
}

static void render_gemma(sbuf *b, const st_chat_msg *m, size_t n, bool gen) {
    sbuf sys = {0};
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(m[i].role, "system")) {
            put_trim(&sys, m[i].content);
            continue;
        }
        bool model = !strcmp(m[i].role, "assistant");
        puts_(b, "<start_of_turn>"), puts_(b, model ? "model" : m[i].role), puts_(b, "\n");
        if (sys.n && !model) {
            put(b, sys.p, sys.n), puts_(b, "\n\n");
            sys.n = 0;
        }
        put_trim(b, m[i].content), puts_(b, "<end_of_turn>\n");
    }
    if (gen) puts_(b, "<start_of_turn>model\n");
    if (sys.err) b->err = sys.err;
    free(sys.p);
}

int st_chat_render(st_chat_tmpl t, const st_chat_msg *m, size_t n, bool gen, char **out, size_t *out_len) {
    if (out) *out = NULL;
    if (out_len) *out_len = 0;
    if (!out || (n && !m) || t <= ST_CHAT_UNKNOWN || t >= ST_CHAT_COUNT_) return ST_E_INVAL;
    for (size_t i = 0; i < n; i++)
        if (!m[i].role || !m[i].content) return ST_E_INVAL;
    sbuf b = {0};
    puts_(&b, "");
    switch (t) {
    case ST_CHAT_CHATML:
        for (size_t i = 0; i < n; i++)
            puts_(&b, "<|im_start|>"), puts_(&b, m[i].role), puts_(&b, "\n"), puts_(&b, m[i].content),
                puts_(&b, "<|im_end|>\n");
        if (gen) puts_(&b, "<|im_start|>assistant\n");
        break;
    case ST_CHAT_MISTRAL_V1:
    case ST_CHAT_MISTRAL_V3:
    case ST_CHAT_MISTRAL_V3_TEKKEN:
    case ST_CHAT_MISTRAL_V7: render_mistral(&b, t, m, n); break;
    case ST_CHAT_LLAMA2:
    case ST_CHAT_LLAMA2_SYS:
    case ST_CHAT_LLAMA2_SYS_BOS:
    case ST_CHAT_LLAMA2_SYS_STRIP: render_llama2(&b, t, m, n); break;
    case ST_CHAT_LLAMA3:
        for (size_t i = 0; i < n; i++)
            puts_(&b, "<|start_header_id|>"), puts_(&b, m[i].role), puts_(&b, "<|end_header_id|>\n\n"),
                put_trim(&b, m[i].content), puts_(&b, "<|eot_id|>");
        if (gen) puts_(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    case ST_CHAT_PHI3:
        for (size_t i = 0; i < n; i++)
            puts_(&b, "<|"), puts_(&b, m[i].role), puts_(&b, "|>\n"), puts_(&b, m[i].content), puts_(&b, "<|end|>\n");
        if (gen) puts_(&b, "<|assistant|>\n");
        break;
    case ST_CHAT_ZEPHYR:
        for (size_t i = 0; i < n; i++)
            puts_(&b, "<|"), puts_(&b, m[i].role), puts_(&b, "|>\n"), puts_(&b, m[i].content),
                puts_(&b, "<|endoftext|>\n");
        if (gen) puts_(&b, "<|assistant|>\n");
        break;
    case ST_CHAT_GEMMA: render_gemma(&b, m, n, gen); break;
    case ST_CHAT_DEEPSEEK:
        for (size_t i = 0; i < n; i++) {
            if (!strcmp(m[i].role, "system")) puts_(&b, m[i].content);
            else if (!strcmp(m[i].role, "user")) puts_(&b, "### Instruction:\n"), puts_(&b, m[i].content), puts_(&b, "\n");
            else if (!strcmp(m[i].role, "assistant"))
                puts_(&b, "### Response:\n"), puts_(&b, m[i].content), puts_(&b, "\n<|EOT|>\n");
        }
        if (gen) puts_(&b, "### Response:\n");
        break;
    case ST_CHAT_DEEPSEEK2:
        for (size_t i = 0; i < n; i++) {
            if (!strcmp(m[i].role, "system")) puts_(&b, m[i].content), puts_(&b, "\n\n");
            else if (!strcmp(m[i].role, "user")) puts_(&b, "User: "), puts_(&b, m[i].content), puts_(&b, "\n\n");
            else if (!strcmp(m[i].role, "assistant"))
                puts_(&b, "Assistant: "), puts_(&b, m[i].content),
                    puts_(&b, "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>");
        }
        if (gen) puts_(&b, "Assistant:");
        break;
    case ST_CHAT_DEEPSEEK3:
        for (size_t i = 0; i < n; i++) {
            if (!strcmp(m[i].role, "system")) puts_(&b, m[i].content), puts_(&b, "\n\n");
            else if (!strcmp(m[i].role, "user")) puts_(&b, "<\xef\xbd\x9cUser\xef\xbd\x9c>"), puts_(&b, m[i].content);
            else if (!strcmp(m[i].role, "assistant"))
                puts_(&b, "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"), puts_(&b, m[i].content),
                    puts_(&b, "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>");
        }
        if (gen) puts_(&b, "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>");
        break;
    default: break;
    }
    if (b.err) {
        free(b.p);
        return b.err;
    }
    *out = b.p;
    if (out_len) *out_len = b.n;
    return 0;
}
