/* Prompt lookup drafting (speculative decoding): a request's history (prompt + generated
 * tokens), the n-gram search that proposes a draft from it, and the throttle that turns
 * drafting down while drafts keep being rejected, and the engine-wide check that verify
 * rounds cost less per token than plain steps. The verify round itself (one forward,
 * acceptance, rewind) is the step's, in engine.c. */
#include "engine/engine_int.h"

#include <stdlib.h>
#include <string.h>

int en_spec_push(en_req *q, int32_t t) {
    if (q->n_gen == q->cap_gen) {
        int32_t c = q->cap_gen ? 2 * q->cap_gen : 64;
        int32_t *n = realloc(q->gen, (size_t)c * sizeof *n);
        if (!n) return ST_E_NOMEM;
        q->gen = n, q->cap_gen = c;
    }
    q->gen[q->n_gen++] = t;
    return 0;
}

/* llama.cpp's prompt lookup: the most recent earlier occurrence of the last N tokens of
 * prompt + generated text proposes the tokens that followed it. */
int32_t en_spec_draft(en_req *q, int32_t max) {
    const int32_t N = q->spec_ngram;
    const int64_t n = (int64_t)q->n_prompt + q->n_gen;
    if (N < 1 || max < 1 || n <= N) return 0;
    const int64_t tail = n - N;
    for (int64_t j = tail - 1; j >= 0; j--) {
        int32_t m = 0;
        while (m < N && en_hist_at(q, j + m) == en_hist_at(q, tail + m)) m++;
        if (m < N) continue;
        int32_t k = 0;
        while (k < max && j + N + k < n) {
            q->draft[k] = en_hist_at(q, j + N + k);
            k++;
        }
        return k;
    }
    return 0;
}

/* How many tokens q may draft this step: what can still be emitted after the bonus token,
 * a page (a step's growth is then one page, as admission and the RAM check count), and with
 * a Quest budget the exactness gate: the budget must cover every page of the sequence at
 * every length the round reaches, plus one position of margin, so the selection plain
 * decode would make there lists every page (quest.h) and the round's dense attention is
 * bit for bit the same; past that crossover the request decodes plain tokens. */
int32_t en_spec_room(const en_req *q, int page, int64_t quest_budget, int64_t len, int32_t room) {
    int64_t d = q->spec_len < room ? q->spec_len : room;
    if (d > page) d = page;
    const int64_t left = (int64_t)q->max_gen - q->st.n_generated - 1;
    if (d > left) d = left;
    const int64_t budget = q->budget < 0 ? quest_budget : q->budget;
    if (budget > 0) {
        const int64_t cover = budget / page * page - len - 2;
        if (d > cover) d = cover;
    }
    return d > 0 ? (int32_t)d : 0;
}

/* After a round with `accepted` of `drafted` tokens taken, the next draft's length: a round
 * that took its whole draft doubles it (up to draft_max), one that took part of it drafts one
 * more than it took, since each rejected token cost a verify position for nothing; a round
 * that took none also pauses drafting for 1, 2, 4 ... 32 steps (where the text does not
 * repeat itself a verify costs more than a plain step); one that took some resets the pause. */
void en_spec_after(en_req *q, int32_t drafted, int32_t accepted) {
    if (drafted <= 0) return;
    if (accepted >= drafted) q->spec_len = 2 * q->spec_len < q->draft_max ? 2 * q->spec_len : q->draft_max;
    else q->spec_len = accepted + 1;
    if (accepted > 0) {
        q->spec_miss = 0;
        return;
    }
    en_spec_miss(q);
}

void en_spec_miss(en_req *q) {
    if (q->spec_miss < 5) q->spec_miss++;
    q->spec_cool = 1 << q->spec_miss >> 1;
    if (q->spec_cool < 1) q->spec_cool = 1;
}

#define EN_SPEC_COST_WINDOW 32

int en_spec_cost_record(en_spec_cost *c, double seconds, int64_t emitted, int verify) {
    const int v = verify != 0;
    if (c->pause > 0) c->pause--;
    if (emitted <= 0 || !(seconds >= 0)) return 0;
    c->s[v] += seconds, c->tok[v] += emitted, c->n[v]++;
    if (c->n[v] > EN_SPEC_COST_WINDOW) c->s[v] /= 2, c->tok[v] /= 2, c->n[v] /= 2;
    if (!v || c->pause > 0) return 0;
    if (c->n[0] < 4) {
        if (c->n[1] < 16) return 0;
        c->pause = 4;
        return 1;
    }
    if (c->n[1] < 4) return 0;
    /* s1 / tok1 > s0 / tok0, without dividing */
    if (c->s[1] * (double)c->tok[0] <= c->s[0] * (double)c->tok[1]) {
        c->exp = 0;
        return 0;
    }
    c->pause = 8 << c->exp;
    if (c->exp < 3) c->exp++;
    c->s[1] = 0, c->tok[1] = 0, c->n[1] = 0;
    return 1;
}
