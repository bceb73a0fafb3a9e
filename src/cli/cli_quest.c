/* Quest flags for the model commands (see cli_quest.h). */
#include "cli/cli_quest.h"
#include "cli/cli_util.h"

#include <string.h>

void st_cli_quest_init(st_cli_quest *q) {
    memset(q, 0, sizeof *q);
    q->p = st_kv_quest_default_params();
}

int st_cli_quest_arg(st_cli_quest *q, const char *a, const char *v) {
    long long x;
    int64_t *dst = NULL;
    if (!strcmp(a, "--kv-cert-dense")) {
        double e;
        if (!v || st_cli_float(v, 0.001, 1, &e)) return -1;
        q->given = 1;
        q->p.cert_dense_frac = e;
        return 1;
    }
    if (!strcmp(a, "--kv-resident-bonus")) {
        double e;
        if (!v || st_cli_float(v, 0, 1e6, &e)) return -1;
        q->given = 1;
        q->p.resident_bonus = e;
        return 1;
    }
    if (!strcmp(a, "--kv-epsilon")) {
        double e;
        if (!v || st_cli_float(v, 0, 1, &e)) return -1;
        q->given = 1;
        q->p.certify = 1;
        q->p.epsilon = e;
        return 1;
    }
    if (!strcmp(a, "--kv-budget")) dst = &q->p.budget;
    else if (!strcmp(a, "--kv-sinks")) dst = &q->p.sinks;
    else if (!strcmp(a, "--kv-recent")) dst = &q->p.recent;
    else if (strcmp(a, "--kv-dense-layers") && strcmp(a, "--kv-audit")) return 0;
    if (!v || st_cli_int(v, 0, 1ll << 40, &x)) return -1;
    q->given = 1;
    if (dst) *dst = x;
    else if (!strcmp(a, "--kv-audit")) q->audit = x;
    else if (x > 1 << 20) return -1;
    else q->p.dense_layers = (int32_t)x;
    return 1;
}

int st_cli_quest_apply(const st_cli_quest *q, st_runner *r) {
    if (q->audit > 1 << 30) return ST_E_INVAL;
    return st_runner_set_quest(r, &q->p, (int32_t)q->audit);
}

int st_cli_quest_print(const st_cli_quest *q, const st_runner *r, FILE *f) {
    if (q->p.budget <= 0 && !q->p.certify) return 0;
    st_runner_quest_stats st;
    st_runner_get_quest_stats(r, &st);
    if (q->p.certify)
        fprintf(f, "quest: certified, epsilon %g (starting budget %lld tokens)", q->p.epsilon, (long long)q->p.budget);
    else
        fprintf(f, "quest: budget %lld tokens", (long long)q->p.budget);
    fprintf(f, ", %lld decode steps, %.1f%% of pages attended at sparse layers", (long long)st.steps,
            st.pages_total ? 100.0 * (double)st.pages_listed / (double)st.pages_total : 100.0);
    if (q->p.certify)
        fprintf(f, "; skipped-mass bound max %.3g, mean %.3g over %lld (head, layer, step); %lld pages added, "
                   "%lld selections dense for a page on disk",
                st.bound_max, st.bound_mean, (long long)st.cert_bounds, (long long)st.pages_grown,
                (long long)st.cert_dense);
    if (q->audit > 0)
        fprintf(f, "; audit (every %lld steps, %lld samples): softmax mass captured mean %.4f, min %.4f",
                q->audit, (long long)st.audits, st.mass_mean, st.mass_min);
    if (q->audit > 0 && q->p.certify)
        fprintf(f, "; bound checked on %lld samples (%lld skipping pages), true skipped mass max %.3g, "
                   "%lld violations", (long long)st.cert_audits, (long long)st.cert_audits_skipping,
                st.skip_max, (long long)st.cert_violations);
    fprintf(f, "\n");
    if (st.cert_violations) {
        fprintf(f, "quest: CERTIFICATE VIOLATED: %lld of %lld audited samples had a true skipped mass above "
                   "the reported bound; first at decode step %lld, layer %d, query head %d: mass %.17g > bound "
                   "%.17g\n", (long long)st.cert_violations, (long long)st.cert_audits, (long long)st.viol_step,
                st.viol_layer, st.viol_head, st.viol_skip, st.viol_bound);
        return ST_E_CORRUPT;
    }
    return 0;
}
