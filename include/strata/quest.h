/*
 * strata Quest: query-aware page selection for sparse decode.
 *
 * When the KV library seals a full page (st_kv_seq_commit), it records, per layer and KV
 * head, the element-wise min and max of the page's keys as stored (after RoPE, dequantized):
 * a box that contains every key of the page (kept in f16, each bound rounded outward, so it
 * takes half the RAM and still contains them). The box lives in RAM in arrays indexed by
 * physical page id (never in the page slab), so it is there also for pages on disk, and it
 * is saved with snapshots. For a decode query q the upper bound
 *     bound(page) = max over the GQA group's query heads g of sum_d max(q_g,d * min_d, q_g,d * max_d)
 * is >= q_g . k for every key k of the page, so the pages with the highest bounds are those
 * that can hold the largest attention scores.
 *
 * A selection for one (sequence, layer) picks, per KV head:
 *   - the sink pages (logical pages covering the first `sinks` tokens),
 *   - the recent pages (the last ceil(recent / P) logical pages, the partial tail included),
 *   - every page without a box (not sealed yet, or sealed with no valid key),
 *   - and the k other pages with the highest bounds, k = budget / P - (pages above),
 * and lists them as indices into the sequence's view list (st_kv_seq_views: logical order,
 * holes omitted) IN INCREASING ORDER. A budget that covers every page therefore yields
 * exactly the dense list, and attention (which merges runs in list order) is bit-identical
 * to dense: the exactness gate. Selection reads only page tables and boxes, never page data.
 *
 * Residency (resident_bonus B > 0, with the SSD tier): a candidate page whose (page, layer)
 * block is in RAM ranks as if its bound were B nats of score higher, i.e. its bound plus
 * B / scale. What this promises, per KV head: a page left out has a bound at most B / scale
 * above that of any ranked page chosen, and a page left out that was in RAM has a bound at
 * least B / scale below any chosen page from disk. Through the tier a plain ranking churns
 * where bounds lie close together (a head that attends nearly uniformly picks different
 * pages at every step, each a disk read); the bonus settles such ties on what RAM holds, so
 * those steps read nothing, while a page whose bound stands out still wins. It changes which
 * pages are attended, so tiered output is no longer equal to all-in-RAM output: 0 (the
 * default) keeps it equal. Without a tier every block is in RAM and the bonus does nothing
 * (the selection is plain Quest's, bit for bit). The two-level ranking is not used with a
 * bonus (its group boxes bound pages, not pages plus a bonus). Certified mode grows from
 * the bonus's selection with the true bounds, so its guarantee is unchanged.
 *
 * Certified mode (certify, epsilon) replaces the fixed budget by a guarantee: the budget's
 * selection is grown (st_kv_quest_certify) until a rigorous upper bound on the softmax mass
 * of the pages left out is <= epsilon for every query head, the bound coming from the same
 * boxes and the exact scores of the selected keys ("certificates" below has the math and
 * the rounding margins). epsilon 0 selects every page: dense, bit for bit.
 *
 * Errors follow core.h: 0, a negative ST_E_* code; outputs cleared / untouched on error.
 * Threads: an st_kv_select is used by one thread at a time; selection reads the st_kv
 * (read-only) under the rules of kv.h.
 */
#ifndef STRATA_QUEST_H
#define STRATA_QUEST_H

#include "strata/attn.h"
#include "strata/kv.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Quest knobs, in tokens (rounded up to whole pages), as the CLI flags name them. */
typedef struct st_kv_quest_params {
    int64_t budget;   /* --kv-budget: tokens attended per KV head; 0 = dense */
    int64_t sinks;    /* --kv-sinks: < 0 = one page (default) */
    int64_t recent;   /* --kv-recent: < 0 = two pages (default), partial tail included */
    int32_t dense_layers; /* --kv-dense-layers: layers [0, dense_layers) stay dense; < 0 = 2 */
    int32_t certify;  /* 1 (--kv-epsilon given): certified mode, see "certificates" below;
                         0: the fixed budget */
    double epsilon;   /* certified mode: the skipped-mass bound every query head must meet,
                         in [0, 1]; 0 = dense (every page selected) */
    double cert_dense_frac; /* certified mode: a KV head whose selection would have to list
                         more than this fraction of the pages goes dense at once (scoring
                         keys to spare a few pages costs more than reading them); 0 = 0.5,
                         >= 1: grow page by page to the end */
    double resident_bonus; /* --kv-resident-bonus: with the SSD tier, a candidate page whose
                         (page, layer) block is in RAM ranks as if its bound were this many
                         nats of attention score higher (see "residency" below); 0 = off,
                         the default. Without a tier every block is in RAM and it does nothing */
    double score_scale; /* the attention's score scale (score = scale * q . k), which turns
                         resident_bonus into the bound's units; 0 = 1 / sqrt(head_dim) */
} st_kv_quest_params;

/* budget 0 (dense), sinks -1, recent -1, dense_layers -1, certify 0 (the defaults above). */
st_kv_quest_params st_kv_quest_default_params(void);

/* The key box of physical page `page`, layer `layer`, KV head `kv_head`, copied into the
 * caller's kmin, kmax ([head_dim] floats each). Boxes are kept in f16, rounded outward
 * (st_attn_box_to_f16), so they contain every key of the page but may exceed its exact
 * min/max by one f16 step. Returns 0; ST_E_INVAL (an index out of range, NULL output);
 * ST_E_NOT_FOUND (the page has no box: not sealed, or no valid key at seal time). */
int st_kv_page_box(const st_kv *kv, st_kv_page_id page, int layer, int kv_head, float *kmin,
                   float *kmax);

/* ---- selections -------------------------------------------------------------------------- */

/* One (sequence, layer)'s selection: per KV head, the chosen indices into the view list.
 * Opaque; owns its buffers (reused from call to call, so steady-state decode allocates
 * nothing). */
typedef struct st_kv_select st_kv_select;

/* Returns 0 or ST_E_INVAL / ST_E_NOMEM. *out owned by the caller: st_kv_select_destroy. */
int st_kv_select_create(st_kv_select **out);
void st_kv_select_destroy(st_kv_select *s); /* NULL is a no-op */

/* Selects the pages layer `layer` of sequence seq attends to for the decode query q
 * ([n_head][head_dim] f32, after RoPE; query head h belongs to KV head h / (n_head /
 * n_kv_head)). ws supplies the bound kernel's ISA (st_attn_quest_bounds). p NULL = defaults.
 * Dense (budget 0 without certify, certify with epsilon 0, or layer < dense_layers) makes a
 * selection that lists every page; certified mode starts from the budget (0: the forced
 * pages alone) and st_kv_quest_certify then grows it.
 * Read-only for kv; overwrites *s. The selection describes the page table as it is now:
 * st_kv_attend_decode rejects it (ST_E_INVAL) once entries were added or a selected page
 * removed. Returns 0; ST_E_INVAL (NULL pointer, layer, n_head not a
 * multiple of n_kv_head, epsilon outside [0, 1] or NaN), ST_E_STATE (stale seq), ST_E_LIMIT (more than INT32_MAX views),
 * ST_E_NOMEM (s could not grow; s then holds an empty, dense selection). */
int st_kv_quest_select(const st_kv *kv, st_kv_seq_id seq, int layer, const st_attn_ws *ws,
                       const float *q, int32_t n_head, const st_kv_quest_params *p,
                       st_kv_select *s);

/* Read-only accessors. dense: 1 when every page is listed for every head (attention may then
 * read the plain page list). n_views: the length of the view list the indices refer to.
 * st_kv_select_head: KV head h's indices (*idx: [*n] ascending, owned by s, valid until the
 * next select on s); ST_E_INVAL for h out of range. */
int st_kv_select_dense(const st_kv_select *s);
int32_t st_kv_select_n_views(const st_kv_select *s);
int32_t st_kv_select_n_kv_head(const st_kv_select *s);
int st_kv_select_head(const st_kv_select *s, int32_t h, const int32_t **idx, int32_t *n);

/* Points a's optional subset (sel, n_sel, sel_stride) at s: NULL when s is dense, so dense
 * decode takes exactly its usual path. a->pages must be the view list s was made for (same
 * length: else ST_E_INVAL and a unchanged). a borrows s's arrays until the next select. */
int st_kv_select_apply(const st_kv_select *s, st_attn_seq *a);

/* Counters of the last select on s (per KV head summed): pages listed, pages forced in
 * (sinks, recent, no box), pages ranked by bound, and page boxes scored to rank them: all
 * n_ranked when the flat ranking ran, fewer when the two-level one did (a box per group of
 * st_kv_params.quest_group physical pages first, then the pages of the groups that can
 * still hold one of the k best: the same selection, bit for bit), 0 when the budget took
 * every ranked page or none; after st_kv_quest_certify also the pages it added (included in
 * n_listed) and, over the query heads it certified (n_bound of them), the largest and the
 * sum of the certified skipped-mass bounds. */
typedef struct st_kv_select_stats {
    int64_t n_listed, n_forced, n_ranked, n_scored;
    int64_t n_grown, n_bound;
    double bound_max, bound_sum;
} st_kv_select_stats;
void st_kv_select_get_stats(const st_kv_select *s, st_kv_select_stats *out);

/* ---- certificates ------------------------------------------------------------------------
 *
 * For one decode query, query head g (KV head h = g / G) and a selection of h's pages, let
 * s_t = scale * q_g . k_t be the score of valid token t and m any reference. The softmax
 * mass the pages left out would have held is
 *     skip_g = X / (S + X),   S = sum over selected tokens exp(s_t - m),
 *                             X = sum over skipped tokens  exp(s_t - m).
 * A skipped page p has a box, which contains all its keys (kv_quest.c, Q2), so every
 * token of p scores at most scale * b_g(p), b_g(p) = sum_d max(q_d * kmin_d, q_d * kmax_d),
 * and X <= U = sum over skipped pages n_valid(p) * exp(scale * b_g(p) - m). Since
 * X / (S + X) grows with X and falls with S, skip_g <= U / (S + U) =: bound_g. S is exact
 * (every selected key is read), so the bound is as tight as the boxes are.
 *
 * Rounding. The truth bounded is the exact-arithmetic softmax of the f32 query against the
 * keys as stored (dequantized to f32, as st_kv_quest_mass reads them). Everything is
 * computed in double: a product of an f32 query element with an f32 key or f16 box element
 * is exact in double (24 + 24 bits < 53), so only the D-term sums, the scaling, exp and the
 * final sums round. Each is pushed in the safe direction by a margin:
 *   - a dot product or box bound of D exact terms t_d, summed in order, is within
 *     (D - 1) * 2^-53 * sum |t_d| of the truth: b is raised, s_t lowered, by
 *     D * 2^-51 * sum |t_d| (twice that, which also covers the margin's own rounding);
 *   - the exponent a = scale * b - m is moved by 2^-50 * (|scale * b| + |m| + 1) and the
 *     exp result (glibc: under 1 ulp) by a factor 1 +- 2^-50;
 *   - a sum of n positive terms rounds by at most n * 2^-53 relative: U is multiplied by
 *     1 + n * 2^-51, S by 1 - n * 2^-51, and U gains n * 2^-1060 for terms that
 *     underflowed or lost bits as subnormals;
 *   - the ratio is raised by a factor 1 + 2^-48 and clamped to 1.
 * The margins are relative 1e-12-ish: the bound stays tight and is never below the truth.
 */

/* Certified mode: grows s (a selection st_kv_quest_select made for views, the layer's
 * st_kv_seq_views) until bound_g <= epsilon for every query head g, adding each KV head's
 * skipped pages in decreasing order of their bound (max over the group, ties: the earlier
 * page), or until it lists every page (bound 0). The grown selection is again in
 * increasing view order, so attention over it is the one over its pages, and a selection
 * grown to every page is marked dense: bit-identical to dense decode. bound: NULL or
 * [n_head], each query head's final bound (0 for a dense selection). q: [n_head][head_dim]
 * as given to the select; scale 0 = 1/sqrt(head_dim). Reads the selected keys (a pass over
 * the selection, in RAM: views come from st_kv_seq_views) and the skipped pages' boxes.
 * Updates s's stats (n_grown, n_listed, bound_*). Returns 0; ST_E_INVAL (NULL pointer,
 * views not s's, epsilon outside [0, 1], n_head); ST_E_NOMEM (s unchanged). */
int st_kv_quest_certify(const st_kv *kv, const st_attn_page *views, int32_t n_views,
                        const float *q, int32_t n_head, float scale, double epsilon,
                        st_kv_select *s, double *bound);

/* ---- audit -------------------------------------------------------------------------------- */

/* The fraction of the dense softmax mass (scores q.k * scale over every valid token of the
 * view list) that the pages selected for each query head's KV head hold: frac[h] in [0, 1]
 * for h < n_head (1 for a dense selection; 0 if the query sees no token; NaN scores give NaN).
 * views: the dense list s was made for ([n_views], st_kv_seq_views of that layer); scale 0 =
 * 1/sqrt(head_dim). Reads every key (a dense pass: sample it). Returns 0 or ST_E_INVAL /
 * ST_E_NOMEM. */
int st_kv_quest_mass(const st_kv *kv, const st_attn_page *views, int32_t n_views,
                     const st_kv_select *s, const float *q, int32_t n_head, float scale,
                     double *frac);
/* Same, also writing skip[h] (NULL: not wanted), the mass of the tokens NOT selected, summed
 * directly (not 1 - frac, which cancels to rounding noise when it is tiny): what
 * st_kv_quest_certify's bound must be >= (in double arithmetic, relative error ~1e-15). */
int st_kv_quest_mass_skip(const st_kv *kv, const st_attn_page *views, int32_t n_views,
                          const st_kv_select *s, const float *q, int32_t n_head, float scale,
                          double *frac, double *skip);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_QUEST_H */
