/* Sessions: a conversation's tokens and KV saved to a file, so that a later request (after
 * a restart too) continues it without computing its history again.
 *
 * Save (POST /v1/sessions/NAME): the conversation becomes an engine request with max_tokens
 * 0 and keep_seq, so its KV is what the prefix cache holds (attached) plus what the engine
 * computes; at its finish the scheduler serializes the kept sequence (st_kv_snapshot_write,
 * a KV operation, so on the engine's thread) into memory and frees it; the connection thread
 * then writes the session file atomically (a temporary file, fsync, rename, fsync of the
 * directory) before it answers, so an acknowledged save survives a crash.
 *
 * Resume: the connection thread reads and checks the file (size, header, checksum, model)
 * and that the prompt begins with its tokens; the scheduler restores the KV snapshot into a
 * new sequence (st_kv_snapshot_read validates it again) and submits the request continuing
 * that sequence with the remaining tokens. A request names its session ("session") or is
 * matched to the longest indexed history its prompt begins with. A named session that
 * cannot be used fails the request (404 / 409, naming the session and the reason); a
 * matched one that fails is dropped from the index and the request runs without it.
 *
 * The index (names, tokens, sizes, times) is rebuilt from the directory at the start and
 * kept under its own lock; the files are the truth, the index only finds candidates. */
#include "server/server_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

/* A session's name on disk and in the index is its tenant's prefix ("" without API keys, else
 * "k" + 16 hex digits of its key's hash + '~', a character no name holds) and its name, so
 * each key sees only its own sessions. */
#define QUAL_MAX (SRV_SESSION_NAME_MAX + 18)

/* The name a client gave, of a qualified one. */
static const char *plain(const char *qual) {
    const char *t = strchr(qual, '~');
    return t ? t + 1 : qual;
}

/* Whether qual is tenant's. */
static int of_tenant(const char *qual, const char *tenant) {
    return *tenant ? !strncmp(qual, tenant, strlen(tenant)) : !strchr(qual, '~');
}

typedef struct sess_ent {
    char name[QUAL_MAX + 1];
    int32_t *tokens;
    int32_t n_tokens;
    uint64_t bytes;
    int64_t mtime;
} sess_ent;

struct srv_sessions {
    char *dir;
    pthread_mutex_t mu; /* guards the entries */
    sess_ent *ents;
    int n, cap;
    uint8_t fp[16];
};

#define BAD(code, ...) (snprintf(msg, cap, __VA_ARGS__), (code))

/* ---- the file format ----------------------------------------------------------------------- */

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* XXH3-64 of the whole file but its checksum field (bytes 56..63). */
static uint64_t file_sum(const uint8_t *b, size_t n) {
    XXH3_state_t *st = XXH3_createState();
    if (!st) return 0;
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, b, 56);
    XXH3_64bits_update(st, b + SRV_SESSION_HEADER, n - SRV_SESSION_HEADER);
    const uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}

int srv_session_encode(const uint8_t fingerprint[16], const srv_session_info *in, uint8_t **out, size_t *n_out) {
    *out = NULL, *n_out = 0;
    if (in->n_tokens < 1 || in->n_tokens > SRV_SESSION_MAX_TOKENS) return ST_E_LIMIT;
    const size_t n = SRV_SESSION_HEADER + 4 * (size_t)in->n_tokens + in->n_snap;
    uint8_t *b = malloc(n);
    if (!b) return ST_E_NOMEM;
    memcpy(b, SRV_SESSION_MAGIC, 8);
    put32(b + 8, SRV_SESSION_VERSION);
    put32(b + 12, SRV_SESSION_HEADER);
    memcpy(b + 16, fingerprint, 16);
    put32(b + 32, (uint32_t)in->n_tokens);
    put32(b + 36, 0);
    put64(b + 40, in->n_snap);
    put64(b + 48, (uint64_t)in->created);
    for (int32_t i = 0; i < in->n_tokens; i++) put32(b + SRV_SESSION_HEADER + 4 * (size_t)i, (uint32_t)in->tokens[i]);
    if (in->n_snap) memcpy(b + SRV_SESSION_HEADER + 4 * (size_t)in->n_tokens, in->snap, in->n_snap);
    put64(b + 56, file_sum(b, n));
    *out = b, *n_out = n;
    return 0;
}

static void hex16(const uint8_t *b, char out[33]) {
    for (int i = 0; i < 16; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
}

int srv_session_decode(const uint8_t *b, size_t n, const uint8_t fingerprint[16], int32_t n_vocab,
                       srv_session_info *out, char *msg, size_t cap) {
    memset(out, 0, sizeof *out);
    if (n < SRV_SESSION_HEADER)
        return BAD(ST_E_FORMAT, "truncated: %zu bytes, shorter than the %d-byte header", n, SRV_SESSION_HEADER);
    if (memcmp(b, SRV_SESSION_MAGIC, 8)) return BAD(ST_E_FORMAT, "not a session file (bad magic at byte 0)");
    if (get32(b + 8) != SRV_SESSION_VERSION)
        return BAD(ST_E_VERSION, "format version %u (this server reads %u)", get32(b + 8), SRV_SESSION_VERSION);
    if (get32(b + 12) != SRV_SESSION_HEADER)
        return BAD(ST_E_FORMAT, "header size %u at byte 12 (expected %d)", get32(b + 12), SRV_SESSION_HEADER);
    const uint64_t nt = get32(b + 32), ns = get64(b + 40);
    if (nt < 1 || nt > SRV_SESSION_MAX_TOKENS)
        return BAD(ST_E_LIMIT, "token count %llu at byte 32 (1 to %d)", (unsigned long long)nt, SRV_SESSION_MAX_TOKENS);
    if (get32(b + 36)) return BAD(ST_E_FORMAT, "reserved field at byte 36 is not zero");
    const uint64_t body = (uint64_t)n - SRV_SESSION_HEADER;
    if (ns > body || 4 * nt > body - ns || 4 * nt + ns != body)
        return BAD(ST_E_FORMAT, "%s: the header says %llu bytes, the file has %zu",
                   4 * nt + ns > body ? "truncated" : "trailing bytes",
                   (unsigned long long)(SRV_SESSION_HEADER + 4 * nt) + (unsigned long long)ns, n);
    const uint64_t want = get64(b + 56), got = file_sum(b, n);
    if (want != got)
        return BAD(ST_E_CORRUPT, "checksum mismatch (stored %016llx, computed %016llx): the file is damaged",
                   (unsigned long long)want, (unsigned long long)got);
    if (fingerprint && memcmp(b + 16, fingerprint, 16)) {
        char a[33], m[33];
        hex16(b + 16, a), hex16(fingerprint, m);
        return BAD(ST_E_TYPE, "made by another model (fingerprint %s, this server's model is %s)", a, m);
    }
    int32_t *t = malloc(nt * sizeof *t);
    if (!t) return BAD(ST_E_NOMEM, "out of memory");
    for (uint64_t i = 0; i < nt; i++) {
        const uint32_t v = get32(b + SRV_SESSION_HEADER + 4 * i);
        if (v > INT32_MAX || (n_vocab > 0 && (int32_t)v >= n_vocab)) {
            free(t);
            return BAD(ST_E_FORMAT, "token %llu is %u, outside the vocabulary", (unsigned long long)i, v);
        }
        t[i] = (int32_t)v;
    }
    out->n_tokens = (int32_t)nt;
    out->tokens = t;
    out->snap = b + SRV_SESSION_HEADER + 4 * nt;
    out->n_snap = (size_t)ns;
    out->created = (int64_t)get64(b + 48);
    return 0;
}

int srv_session_name_check(const char *name, char *msg, size_t cap) {
    const size_t n = name ? strlen(name) : 0;
    int ok = n >= 1 && n <= SRV_SESSION_NAME_MAX && strcmp(name, ".") && strcmp(name, "..");
    for (size_t i = 0; ok && i < n; i++) {
        const char c = name[i];
        ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
             c == '-';
    }
    if (ok) return 0;
    return BAD(400, "a session name is 1 to %d characters of A-Z a-z 0-9 . _ - and not \".\" or \"..\"",
               SRV_SESSION_NAME_MAX);
}

/* ---- files ------------------------------------------------------------------------------------ */

static void path_of(const srv_sessions *ss, const char *name, char *out, size_t cap) {
    snprintf(out, cap, "%s/%s.session", ss->dir, name);
}

/* The whole file into *out (malloc'd). 0 or -errno. */
static int read_all(const char *path, uint8_t **out, size_t *n_out, int64_t *mtime) {
    *out = NULL, *n_out = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        const int err = errno ? errno : EINVAL;
        close(fd);
        return -err;
    }
    const size_t n = (size_t)st.st_size;
    uint8_t *b = malloc(n ? n : 1);
    size_t got = 0;
    while (b && got < n) {
        ssize_t r = read(fd, b + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (!b) return -ENOMEM;
    if (mtime) *mtime = (int64_t)st.st_mtime;
    *out = b, *n_out = got; /* a file that shrank meanwhile reads short: the size check says so */
    return 0;
}

static int write_all(int fd, const uint8_t *b, size_t n) {
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return w < 0 ? -errno : -EIO;
        b += w, n -= (size_t)w;
    }
    return 0;
}

static int fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -errno;
    int rc = fsync(fd) ? -errno : 0;
    close(fd);
    return rc;
}

/* tmp, fsync, rename, fsync of the directory: the name holds the old file or the whole new
 * one, whenever the process or the machine stops. */
static int write_atomic(const srv_sessions *ss, const char *name, const uint8_t *b, size_t n, char *msg, size_t cap) {
    char tmp[4200], path[4200];
    snprintf(tmp, sizeof tmp, "%s/.%s.session.tmp-XXXXXX", ss->dir, name);
    path_of(ss, name, path, sizeof path);
    int fd = mkstemp(tmp);
    if (fd < 0) return BAD(-errno, "cannot create a file in %.900s: %s", ss->dir, strerror(errno));
    int rc = write_all(fd, b, n);
    if (!rc && fsync(fd)) rc = -errno;
    if (close(fd) && !rc) rc = -errno;
    if (!rc && rename(tmp, path)) rc = -errno;
    if (rc) {
        unlink(tmp);
        return BAD(rc, "cannot write %.900s: %s", path, strerror(-rc));
    }
    if ((rc = fsync_dir(ss->dir))) return BAD(rc, "cannot sync %.900s: %s", ss->dir, strerror(-rc));
    return 0;
}

/* ---- the index ------------------------------------------------------------------------------ */

static int find_ent(const srv_sessions *ss, const char *name) {
    for (int i = 0; i < ss->n; i++)
        if (!strcmp(ss->ents[i].name, name)) return i;
    return -1;
}

static void drop_ent(srv_sessions *ss, const char *name) {
    int i = find_ent(ss, name);
    if (i < 0) return;
    free(ss->ents[i].tokens);
    ss->ents[i] = ss->ents[--ss->n];
}

/* Adds or replaces name's entry (tokens owned by the index from here, also on failure). */
static void put_ent(srv_sessions *ss, const char *name, int32_t *tokens, int32_t n, uint64_t bytes, int64_t mtime) {
    drop_ent(ss, name);
    if (ss->n == ss->cap) {
        const int c = ss->cap ? 2 * ss->cap : 16;
        sess_ent *ne = realloc(ss->ents, (size_t)c * sizeof *ne);
        if (!ne) {
            free(tokens); /* not indexed: found again by name, and at the next start */
            return;
        }
        ss->ents = ne, ss->cap = c;
    }
    sess_ent *e = &ss->ents[ss->n++];
    snprintf(e->name, sizeof e->name, "%s", name);
    e->tokens = tokens, e->n_tokens = n, e->bytes = bytes, e->mtime = mtime;
}

static void index_dir(srv_sessions *ss, int32_t n_vocab) {
    DIR *d = opendir(ss->dir);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *fn = de->d_name;
        char path[4200], name[QUAL_MAX + 16], msg[512];
        snprintf(path, sizeof path, "%s/%s", ss->dir, fn);
        if (fn[0] == '.' && strstr(fn, ".session.tmp-")) {
            unlink(path); /* a write that a crash interrupted: never acknowledged */
            continue;
        }
        const size_t n = strlen(fn);
        if (n <= 8 || n - 8 > QUAL_MAX || strcmp(fn + n - 8, ".session")) continue;
        memcpy(name, fn, n - 8);
        name[n - 8] = 0;
        const char *tl = strchr(name, '~');
        if (tl && (tl - name != 17 || name[0] != 'k' || strspn(name + 1, "0123456789abcdef") != 16)) continue;
        if (srv_session_name_check(plain(name), msg, sizeof msg)) continue;
        uint8_t *b;
        size_t nb;
        int64_t mt = 0;
        srv_session_info in;
        int rc = read_all(path, &b, &nb, &mt);
        if (rc) snprintf(msg, sizeof msg, "%s", strerror(-rc));
        else rc = srv_session_decode(b, nb, ss->fp, n_vocab, &in, msg, sizeof msg);
        if (rc) fprintf(stderr, "strata serve: session file %s not indexed: %s\n", fn, msg);
        else put_ent(ss, name, in.tokens, in.n_tokens, nb, mt);
        free(b);
    }
    closedir(d);
}

int srv_sessions_open(st_server *s, const char *dir, srv_sessions **out, char *why, size_t cap) {
    *out = NULL;
    struct stat st;
    if (strlen(dir) > 4000) {
        if (why && cap) snprintf(why, cap, "--session-dir: the path is over 4000 bytes");
        return ST_E_INVAL;
    }
    if (mkdir(dir, 0755) && errno != EEXIST) {
        const int err = errno;
        if (why && cap) snprintf(why, cap, "--session-dir %s: cannot make it: %s", dir, strerror(err));
        return -err;
    }
    if (stat(dir, &st) || !S_ISDIR(st.st_mode) || access(dir, W_OK | X_OK)) {
        const int err = errno ? errno : ENOTDIR;
        if (why && cap)
            snprintf(why, cap, "--session-dir %s: not a writable directory (%s)", dir,
                     !S_ISDIR(st.st_mode) ? "not a directory" : strerror(err));
        return ST_E_INVAL;
    }
    srv_sessions *ss = calloc(1, sizeof *ss);
    if (!ss || !(ss->dir = strdup(dir))) {
        free(ss);
        return ST_E_NOMEM;
    }
    pthread_mutex_init(&ss->mu, NULL);
    memcpy(ss->fp, st_kv_get_params(st_engine_kv(s->e))->fingerprint.b, 16);
    index_dir(ss, s->n_vocab);
    *out = ss;
    return 0;
}

void srv_sessions_close(srv_sessions *ss) {
    if (!ss) return;
    for (int i = 0; i < ss->n; i++) free(ss->ents[i].tokens);
    free(ss->ents);
    pthread_mutex_destroy(&ss->mu);
    free(ss->dir);
    free(ss);
}

/* ---- on the scheduler thread ----------------------------------------------------------------- */

void srv_session_capture(st_server *s, srv_chan *c, const st_engine_event *ev) {
    st_kv *kv = st_engine_kv(s->e);
    /* refs > 1: the connection still holds c (the engine's reference goes after this) */
    if (c->save && ev->finish == ST_FINISH_LENGTH && c->refs > 1) {
        st_kv_io io;
        st_kv_io_mem_writer(&io);
        c->snap_rc = st_kv_snapshot_write(kv, &ev->seq, 1, -1, &io);
        if (c->snap_rc) {
            snprintf(c->err, sizeof c->err, "the KV snapshot failed: %s", st_ctx_error(st_engine_ctx(s->e)));
            st_kv_io_mem_release(&io);
        } else {
            c->snap = io.buf, c->n_snap = io.len; /* the memory writer's buffer is malloc'd */
        }
    }
    st_kv_seq_free(kv, ev->seq);
}

int srv_session_restore(st_server *s, srv_req *q, char *msg, size_t cap) {
    if (!q->snap) return 0;
    st_kv *kv = st_engine_kv(s->e);
    if (!q->sess_named) {
        /* a matched session is only worth its copy when the prefix cache holds less of it */
        int64_t cached = 0;
        st_kv_prefix_lookup(kv, q->tokens, q->n_tokens, &cached);
        if (cached >= q->n_hist) return 0;
    }
    st_kv_io io;
    st_kv_io_mem_reader(&io, q->snap, q->n_snap);
    st_kv_seq_id seqs[2];
    int n = 0, rc = st_kv_snapshot_read(kv, &io, seqs, 2, &n);
    int64_t len = 0;
    if (rc) {
        snprintf(msg, cap, "session '%s': its KV snapshot was refused: %s", q->session,
                 st_ctx_error(st_engine_ctx(s->e)));
    } else if (n != 1 || st_kv_seq_len(kv, seqs[0], &len) || len != q->n_hist) {
        rc = ST_E_FORMAT;
        snprintf(msg, cap, "session '%s': its KV snapshot holds %d sequences of %lld tokens, not one of %d", q->session,
                 n, (long long)len, q->n_hist);
    }
    for (int64_t i = 0; !rc && i < len; i++) {
        int32_t t = -1;
        st_kv_seq_tokens(kv, seqs[0], i, 1, &t);
        if (t >= 0 && t != q->tokens[i]) {
            rc = ST_E_CORRUPT;
            snprintf(msg, cap, "session '%s': its KV holds token %d at %lld, its history %d", q->session, t,
                     (long long)i, q->tokens[i]);
        }
    }
    /* the last prompt token is always computed: its logits draw the first new token */
    const int32_t keep = q->n_hist < q->n_tokens ? q->n_hist : q->n_tokens - 1;
    if (!rc && keep < len) rc = st_kv_seq_truncate(kv, seqs[0], keep);
    if (rc) {
        for (int i = 0; i < n; i++) st_kv_seq_free(kv, seqs[i]);
        if (q->sess_named) {
            q->sess_failed = 1;
            return rc;
        }
        fprintf(stderr, "strata serve: %s; the request runs without it\n", msg);
        return 0;
    }
    q->rp.seq = seqs[0];
    q->rp.tokens = q->tokens + keep, q->rp.n_tokens = q->n_tokens - keep;
    q->n_resumed = keep;
    return 0;
}

/* ---- on connection threads -------------------------------------------------------------------- */

/* Reads and checks name's file for q (whose prompt must begin with its tokens). 0, or an
 * HTTP status with msg. */
static int load_into(st_server *s, const char *name, srv_req *q, char *msg, size_t cap) {
    srv_sessions *ss = s->sess;
    char path[4200], why[512];
    path_of(ss, name, path, sizeof path);
    uint8_t *b;
    size_t nb;
    int rc = read_all(path, &b, &nb, NULL);
    const char *shown = plain(name);
    if (rc == -ENOENT) return BAD(404, "no session '%s'", shown);
    if (rc) return BAD(409, "session '%s' cannot be read: %s", shown, strerror(-rc));
    srv_session_info in;
    if ((rc = srv_session_decode(b, nb, ss->fp, s->n_vocab, &in, why, sizeof why))) {
        free(b);
        return BAD(409, "session '%s' is refused: %s", shown, why);
    }
    int32_t diff = -1;
    for (int32_t i = 0; i < in.n_tokens && i < q->n_tokens && diff < 0; i++)
        if (in.tokens[i] != q->tokens[i]) diff = i;
    if (diff >= 0 || in.n_tokens > q->n_tokens) {
        free(b);
        free(in.tokens);
        if (diff < 0) return BAD(409, "session '%s' holds %d tokens, the prompt only %d", shown, in.n_tokens, q->n_tokens);
        return BAD(409, "the prompt does not continue session '%s': it differs from the session's %d tokens at token %d",
                   shown, in.n_tokens, diff);
    }
    free(in.tokens);
    q->sess_file = b, q->snap = in.snap, q->n_snap = in.n_snap, q->n_hist = in.n_tokens;
    snprintf(q->session, sizeof q->session, "%s", shown);
    return 0;
}

int srv_session_prepare(st_server *s, const char *tenant, const char *body, size_t len, srv_req *q, char *msg,
                        size_t cap) {
    json_t *o = json_loadb(body, len, 0, NULL), *v = o ? json_object_get(o, "session") : NULL;
    char name[QUAL_MAX + 1] = "";
    int st = 0, named = v && !json_is_null(v);
    if (named && !json_is_string(v)) st = BAD(400, "'session' must be a string (a session's name)");
    else if (named && !s->sess) st = BAD(400, "'session': this server keeps no sessions (start it with --session-dir)");
    else if (named && !(st = srv_session_name_check(json_string_value(v), msg, cap)))
        snprintf(name, sizeof name, "%s%s", tenant, json_string_value(v));
    json_decref(o);
    if (st || !s->sess) return st;
    if (named) {
        q->sess_named = 1;
        return load_into(s, name, q, msg, cap);
    }
    /* the longest saved history the prompt begins with */
    srv_sessions *ss = s->sess;
    int32_t best = 0;
    pthread_mutex_lock(&ss->mu);
    for (int i = 0; i < ss->n; i++) {
        const sess_ent *e = &ss->ents[i];
        if (e->n_tokens > best && e->n_tokens <= q->n_tokens && of_tenant(e->name, tenant) &&
            !memcmp(e->tokens, q->tokens, (size_t)e->n_tokens * sizeof *e->tokens))
            best = e->n_tokens, snprintf(name, sizeof name, "%s", e->name);
    }
    pthread_mutex_unlock(&ss->mu);
    if (!best) return 0;
    char why[1024];
    if (load_into(s, name, q, why, sizeof why)) {
        fprintf(stderr, "strata serve: %s; dropped from the index\n", why);
        pthread_mutex_lock(&ss->mu);
        drop_ent(ss, name);
        pthread_mutex_unlock(&ss->mu);
    }
    return 0;
}

/* POST /v1/sessions/NAME */
static enum MHD_Result save_ep(st_server *s, struct MHD_Connection *con, const char *name, const char *body,
                               size_t len) { /* name: qualified */
    char msg[1024];
    json_error_t je;
    json_t *o = json_loadb(body, len, 0, &je);
    if (!o) return srv_send_error(con, 400, "malformed JSON at line %d, column %d: %s", je.line, je.column, je.text);
    const int chat = json_is_object(o) && json_object_get(o, "messages") != NULL;
    /* the conversation so far, without the next turn's generation prompt */
    if (chat && !json_object_get(o, "add_generation_prompt")) json_object_set_new(o, "add_generation_prompt", json_false());
    char *b = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!b) return srv_send_error(con, 500, "out of memory");
    srv_req q;
    int st = srv_parse_request(b, strlen(b), chat, s->tok, s->n_vocab, s->tmpl, s->tmpl_ok, &q, msg, sizeof msg);
    free(b);
    if (st) return srv_send_error(con, st, "%s", msg);
    if (q.n_tokens > s->n_ctx) {
        srv_req_free(&q);
        return srv_send_error(con, 400, "the conversation is %d tokens, the context %d", q.n_tokens, s->n_ctx);
    }
    q.rp.max_tokens = 0, q.rp.keep_seq = 1, q.rp.n_logprobs = -1, q.rp.n_stop = 0;
    srv_chan *c = srv_chan_new(s, chat, 0, 0, -1);
    if (!c) {
        srv_req_free(&q);
        return srv_send_error(con, 500, "out of memory");
    }
    c->save = 1;
    int rc = srv_chan_submit(s, c, &q, msg, sizeof msg);
    if (rc) {
        srv_req_free(&q);
        return srv_send_error(con, rc == ST_E_QUEUE_FULL || rc == ST_E_POOL_FULL ? 503 : 400, "%s", msg);
    }
    pthread_mutex_lock(&s->mu);
    while (!c->done && !s->stop) pthread_cond_wait(&s->progress, &s->mu);
    const int done = c->done, fin = c->fin.finish;
    uint8_t *snap = c->snap;
    const size_t n_snap = c->n_snap;
    rc = c->snap_rc;
    c->snap = NULL;
    snprintf(msg, sizeof msg, "%s", c->err);
    srv_chan_unref(s, c);
    pthread_mutex_unlock(&s->mu);
    st = !done ? 503 : fin == ST_FINISH_ERROR || rc ? 500 : !snap ? 500 : 0;
    if (st == 503) snprintf(msg, sizeof msg, "the server is stopping");
    else if (!st && !snap) snprintf(msg, sizeof msg, "the conversation ended without its KV");
    uint8_t *file = NULL;
    size_t n_file = 0;
    srv_session_info in = {.n_tokens = q.n_tokens, .tokens = q.tokens, .snap = snap, .n_snap = n_snap,
                           .created = (int64_t)time(NULL)};
    if (!st && (rc = srv_session_encode(s->sess->fp, &in, &file, &n_file))) st = 500, snprintf(msg, sizeof msg, "%s", st_strerror(rc));
    free(snap);
    if (!st && write_atomic(s->sess, name, file, n_file, msg, sizeof msg)) st = 500;
    free(file);
    if (st) {
        srv_req_free(&q);
        return srv_send_error(con, st, "%s", msg);
    }
    const int32_t n_tokens = q.n_tokens;
    pthread_mutex_lock(&s->sess->mu);
    put_ent(s->sess, name, q.tokens, q.n_tokens, n_file, (int64_t)time(NULL));
    pthread_mutex_unlock(&s->sess->mu);
    q.tokens = NULL; /* the index's now */
    srv_req_free(&q);
    return srv_send_json(con, 200, json_pack("{s:s, s:i, s:I}", "name", plain(name), "n_tokens", n_tokens, "bytes",
                                             (json_int_t)n_file));
}

/* GET /v1/sessions */
static enum MHD_Result list_ep(st_server *s, struct MHD_Connection *con, const char *tenant) {
    json_t *arr = json_array();
    const int64_t now = (int64_t)time(NULL);
    pthread_mutex_lock(&s->sess->mu);
    for (int i = 0; i < s->sess->n; i++) {
        const sess_ent *e = &s->sess->ents[i];
        if (!of_tenant(e->name, tenant)) continue;
        json_array_append_new(arr, json_pack("{s:s, s:i, s:I, s:I, s:I}", "name", plain(e->name), "n_tokens", e->n_tokens,
                                             "bytes", (json_int_t)e->bytes, "modified", (json_int_t)e->mtime, "age_s",
                                             (json_int_t)(now > e->mtime ? now - e->mtime : 0)));
    }
    pthread_mutex_unlock(&s->sess->mu);
    return srv_send_json(con, 200, json_pack("{s:s, s:o}", "object", "list", "data", arr));
}

/* DELETE /v1/sessions/NAME */
static enum MHD_Result delete_ep(st_server *s, struct MHD_Connection *con, const char *name) {
    char path[4200];
    path_of(s->sess, name, path, sizeof path);
    pthread_mutex_lock(&s->sess->mu);
    int rc = unlink(path) ? -errno : 0;
    if (!rc || rc == -ENOENT) drop_ent(s->sess, name);
    pthread_mutex_unlock(&s->sess->mu);
    if (rc == -ENOENT) return srv_send_error(con, 404, "no session '%s'", plain(name));
    if (rc) return srv_send_error(con, 500, "cannot remove session '%s': %s", plain(name), strerror(-rc));
    fsync_dir(s->sess->dir);
    return srv_send_json(con, 200, json_pack("{s:s, s:b}", "name", plain(name), "deleted", 1));
}

int srv_session_route(st_server *s, struct MHD_Connection *con, const char *tenant, const char *url,
                      const char *method, const char *body, size_t len, enum MHD_Result *ret) {
    const size_t np = strlen("/v1/sessions");
    if (strncmp(url, "/v1/sessions", np) || (url[np] && url[np] != '/')) return 0;
    char msg[512];
    if (!s->sess) {
        *ret = srv_send_error(con, 404, "this server keeps no sessions (start it with --session-dir)");
        return 1;
    }
    const int get = !strcmp(method, "GET"), post = !strcmp(method, "POST"), del = !strcmp(method, "DELETE");
    if (!url[np]) {
        *ret = get ? list_ep(s, con, tenant) : srv_send_error(con, 404, "no route for %s %s", method, url);
        return 1;
    }
    const char *given = url + np + 1;
    char name[QUAL_MAX + 1];
    snprintf(name, sizeof name, "%s%s", tenant, given);
    if (srv_session_name_check(given, msg, sizeof msg)) *ret = srv_send_error(con, 400, "%s", msg);
    else if (post) *ret = save_ep(s, con, name, body, len);
    else if (del) *ret = delete_ep(s, con, name);
    else *ret = srv_send_error(con, 404, "no route for %s %s", method, url);
    return 1;
}
