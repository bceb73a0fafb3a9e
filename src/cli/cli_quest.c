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

void st_cli_quest_print(const st_cli_quest *q, const st_runner *r, FILE *f) {
    if (q->p.budget <= 0) return;
    st_runner_quest_stats st;
    st_runner_get_quest_stats(r, &st);
    fprintf(f, "quest: budget %lld tokens, %lld decode steps, %.1f%% of pages attended at sparse layers",
            (long long)q->p.budget, (long long)st.steps,
            st.pages_total ? 100.0 * (double)st.pages_listed / (double)st.pages_total : 100.0);
    if (q->audit > 0)
        fprintf(f, "; audit (every %lld steps, %lld samples): softmax mass captured mean %.4f, min %.4f",
                q->audit, (long long)st.audits, st.mass_mean, st.mass_min);
    fprintf(f, "\n");
}
