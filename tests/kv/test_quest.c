/* Quest: key boxes against brute force, the bound against every true q.k,
 * selection invariants, the exactness gate (a selection of every page is bit-identical to
 * dense), sparse attention against a double-precision reference, snapshots keep boxes. */
#include "strata/quest.h"
#include "kv/kv_int.h"
#include "quest_fx.h"

#include <unistd.h>

/* Appends n tokens of random keys whose scale varies per page (so pages rank differently)
 * in steps of `step` tokens. */
static void fill(fx *f, st_kv_seq_id s, int n, int step) {
    const int row = f->H * f->D;
    float *k = malloc((size_t)f->L * step * row * sizeof *k);
    float *v = malloc((size_t)f->L * step * row * sizeof *v);
    int64_t len;
    for (int done = 0; done < n; done += step) {
        int m = n - done < step ? n - done : step;
        CHECK_OK(st_kv_seq_len(f->kv, s, &len));
        for (int l = 0; l < f->L; l++)
            for (int t = 0; t < m; t++) {
                float amp = 0.25f + (float)(((len + t) / f->P * 7919 + l) % 13) / 4.0f;
                for (int j = 0; j < row; j++) {
                    k[((size_t)l * m + t) * row + j] = amp * frand();
                    v[((size_t)l * m + t) * row + j] = frand();
                }
            }
        CHECK_OK(st_kv_seq_append(f->kv, s, m, NULL, k, v));
    }
    free(k);
    free(v);
}

static void rand_vec(float *x, size_t n, float amp) {
    for (size_t i = 0; i < n; i++) x[i] = amp * frand();
}

/* Boxes equal the element-wise min/max over read-back keys of every sealed page, rounded
 * outward to f16 (so they contain every key); the partial tail has none; an unsealed page
 * loses its box until it is sealed again. */
TEST(test_box_bruteforce) {
    static const st_type types[] = {ST_TYPE_F32, ST_TYPE_F16, ST_TYPE_BF16, ST_TYPE_Q8_0};
    for (size_t ti = 0; ti < 4; ti++) {
        fx f;
        REQUIRE(fx_open(&f, types[ti], 8, 64, 2, 2, 24) == 0);
        st_kv_seq_id s;
        CHECK_OK(st_kv_seq_create(f.kv, &s));
        rng_state = 7 + ti;
        fill(&f, s, 8 * 5 + 3, 5);
        st_kv_page_id pages[16];
        int np;
        CHECK_OK(st_kv_seq_pages(f.kv, s, pages, 16, &np));
        CHECK_INT(np, 6);
        float k[8 * 2 * 24];
        for (int i = 0; i < np; i++)
            for (int l = 0; l < 2; l++) {
                float mn[24], mx[24];
                int rc = st_kv_page_box(f.kv, pages[i], l, 1, mn, mx);
                if (i == np - 1) {
                    CHECK_INT(rc, ST_E_NOT_FOUND);
                    continue;
                }
                CHECK_OK(rc);
                CHECK_OK(st_kv_read(f.kv, s, l, (int64_t)i * 8, 8, k, NULL));
                for (int h = 0; h < 2; h++) {
                    CHECK_OK(st_kv_page_box(f.kv, pages[i], l, h, mn, mx));
                    int bad = 0;
                    float lo[24], hi[24];
                    uint16_t want[48];
                    for (int d = 0; d < 24; d++) {
                        lo[d] = hi[d] = k[h * 24 + d];
                        for (int t = 1; t < 8; t++) {
                            float x = k[(t * 2 + h) * 24 + d];
                            lo[d] = x < lo[d] ? x : lo[d];
                            hi[d] = x > hi[d] ? x : hi[d];
                        }
                    }
                    st_attn_box_to_f16(NULL, 24, lo, hi, want);
                    for (int d = 0; d < 24; d++) {
                        /* q8_0: box and read dequantize the same int8 * scale */
                        bad += mn[d] != st_fp16_to_fp32(want[d]) || mx[d] != st_fp16_to_fp32(want[24 + d]);
                        bad += !(mn[d] <= lo[d] && mx[d] >= hi[d]); /* contains every key */
                        /* f16 keys are f16 values already: their box is exact */
                        if (types[ti] == ST_TYPE_F16) bad += mn[d] != lo[d] || mx[d] != hi[d];
                    }
                    CHECK_INT(bad, 0);
                }
            }
        /* rewriting a sealed page unseals it: no box until the next commit */
        float kk[2 * 24], vv[2 * 24];
        rand_vec(kk, 48, 1);
        rand_vec(vv, 48, 1);
        float mn[24], mx[24];
        CHECK_OK(st_kv_write(f.kv, s, 0, 9, 1, kk, vv));
        CHECK_OK(st_kv_seq_pages(f.kv, s, pages, 16, &np));
        CHECK_INT(st_kv_page_box(f.kv, pages[1], 0, 0, mn, mx), ST_E_NOT_FOUND);
        CHECK_OK(st_kv_seq_commit(f.kv, s));
        CHECK_OK(st_kv_page_box(f.kv, pages[1], 0, 0, mn, mx));
        CHECK_INT(st_kv_page_box(f.kv, pages[1], 2, 0, mn, mx), ST_E_INVAL);
        char msg[256];
        CHECK_OK(kv_check(f.kv, msg, sizeof msg));
        fx_close(&f);
    }
}

/* bound(page) >= q_g . k for every key of the page and every query head of the group. */
TEST(test_bound_is_upper) {
    fx f;
    REQUIRE(fx_open(&f, ST_TYPE_F16, 16, 64, 1, 2, 64) == 0);
    st_kv_seq_id s;
    CHECK_OK(st_kv_seq_create(f.kv, &s));
    rng_state = 99;
    fill(&f, s, 16 * 20, 16);
    st_kv_page_id pages[32];
    int np;
    CHECK_OK(st_kv_seq_pages(f.kv, s, pages, 32, &np));
    float q[4 * 64], k[16 * 2 * 64];
    int viol = 0, checked = 0;
    for (int trial = 0; trial < 50; trial++) {
        rand_vec(q, 4 * 64, trial % 2 ? 3.0f : 0.3f);
        for (int i = 0; i < 20; i++) {
            CHECK_OK(st_kv_read(f.kv, s, 0, (int64_t)i * 16, 16, k, NULL));
            for (int h = 0; h < 2; h++) {
                float mn[64], mx[64], bound;
                uint16_t box[128];
                CHECK_OK(st_kv_page_box(f.kv, pages[i], 0, h, mn, mx));
                st_attn_box_to_f16(NULL, 64, mn, mx, box); /* exact: the values came from f16 */
                CHECK_OK(st_attn_quest_bounds(f.ws, 64, 2, q + h * 2 * 64, box, 128, 1, &bound));
                for (int g = 0; g < 2; g++)
                    for (int t = 0; t < 16; t++) {
                        double dot = 0, mag = 0;
                        for (int d = 0; d < 64; d++) {
                            double a = (double)q[(h * 2 + g) * 64 + d] * k[(t * 2 + h) * 64 + d];
                            dot += a;
                            mag += fabs(a);
                        }
                        checked++;
                        viol += dot > bound + 1e-5 * mag + 1e-6; /* float summation slack */
                    }
            }
        }
    }
    CHECK_INT(viol, 0);
    CHECK(checked == 50 * 20 * 2 * 2 * 16);
    fx_close(&f);
}

/* Every selection invariant, over random configurations with holes and masked pages. */
TEST(test_select_invariants) {
    fx f;
    REQUIRE(fx_open(&f, ST_TYPE_F32, 8, 256, 3, 2, 16) == 0);
    st_kv_select *sel;
    REQUIRE(st_kv_select_create(&sel) == 0);
    rng_state = 5;
    st_kv_seq_id s;
    CHECK_OK(st_kv_seq_create(f.kv, &s));
    fill(&f, s, 8 * 30 + 5, 7);
    CHECK_OK(st_kv_seq_remove(f.kv, s, 8 * 6, 8 * 7));  /* a hole */
    CHECK_OK(st_kv_seq_remove(f.kv, s, 8 * 9 + 2, 8 * 9 + 5)); /* a masked page */
    st_kv_page_id pg[64];
    int n_ent, nv;
    CHECK_OK(st_kv_seq_pages(f.kv, s, pg, 64, &n_ent));
    CHECK_INT(st_kv_seq_views(f.kv, s, 0, NULL, 0, &nv), ST_E_LIMIT); /* counts only */
    CHECK_INT(n_ent, 31);
    CHECK_INT(nv, 30);
    int32_t ent_of[64]; /* view -> logical entry */
    for (int i = 0, j = 0; i < n_ent; i++)
        if (pg[i] >= 0) ent_of[j++] = i;
    float q[4 * 16], bnd[64];
    int bad_order = 0, bad_forced = 0, bad_count = 0, bad_topk = 0;
    for (int trial = 0; trial < 300; trial++) {
        st_kv_quest_params p = st_kv_quest_default_params();
        p.budget = (int64_t)(trial % 40) * 8 + trial % 3;
        p.sinks = trial % 5 == 0 ? -1 : trial % 17;
        p.recent = trial % 7 == 0 ? -1 : trial % 29;
        p.dense_layers = trial % 4 == 0 ? -1 : 0;
        int layer = 1 + trial % 2;
        rand_vec(q, 4 * 16, 1.0f + (float)(trial % 3));
        CHECK_OK(st_kv_quest_select(f.kv, s, layer, f.ws, q, 4, &p, sel));
        CHECK_INT(st_kv_select_n_views(sel), nv);
        if (p.budget == 0 || layer < (p.dense_layers < 0 ? 2 : p.dense_layers)) {
            CHECK(st_kv_select_dense(sel));
            continue;
        }
        CHECK(!st_kv_select_dense(sel));
        int64_t sp = p.sinks < 0 ? 1 : (p.sinks + 7) / 8, rp = p.recent < 0 ? 2 : (p.recent + 7) / 8;
        for (int h = 0; h < 2; h++) {
            const int32_t *idx;
            int32_t n;
            CHECK_OK(st_kv_select_head(sel, h, &idx, &n));
            uint8_t in[64] = {0};
            for (int32_t i = 0; i < n; i++) {
                bad_order += idx[i] < 0 || idx[i] >= nv || (i && idx[i] <= idx[i - 1]);
                if (idx[i] >= 0 && idx[i] < nv) in[idx[i]] = 1;
            }
            int n_forced = 0;
            float best_out = -INFINITY, worst_in = INFINITY;
            for (int j = 0; j < nv; j++) {
                int e = ent_of[j];
                float mn[16], mx[16];
                uint16_t box[32];
                int boxed = st_kv_page_box(f.kv, pg[e], layer, h, mn, mx) == 0;
                int forced = e < sp || e >= n_ent - rp || !boxed;
                n_forced += forced;
                bad_forced += forced && !in[j];
                if (forced) continue;
                st_attn_box_to_f16(NULL, 16, mn, mx, box);
                CHECK_OK(st_attn_quest_bounds(f.ws, 16, 2, q + h * 32, box, 32, 1, &bnd[j]));
                if (in[j] && bnd[j] < worst_in) worst_in = bnd[j];
                if (!in[j] && bnd[j] > best_out) best_out = bnd[j];
            }
            int64_t want = p.budget / 8 > n_forced ? p.budget / 8 : n_forced;
            if (want > nv) want = nv;
            bad_count += n != want;
            bad_topk += worst_in < best_out;
        }
    }
    CHECK_INT(bad_order, 0);
    CHECK_INT(bad_forced, 0);
    CHECK_INT(bad_count, 0);
    CHECK_INT(bad_topk, 0);
    /* dense layers and bad arguments */
    st_kv_quest_params p = st_kv_quest_default_params();
    p.budget = 16;
    CHECK_OK(st_kv_quest_select(f.kv, s, 1, f.ws, q, 4, &p, sel));
    CHECK(st_kv_select_dense(sel)); /* default: layers 0 and 1 stay dense */
    CHECK_INT(st_kv_quest_select(f.kv, s, 3, f.ws, q, 4, &p, sel), ST_E_INVAL);
    CHECK_INT(st_kv_quest_select(f.kv, s, 2, f.ws, q, 3, &p, sel), ST_E_INVAL);
    CHECK_INT(st_kv_quest_select(f.kv, s + 1, 2, f.ws, q, 4, &p, sel), ST_E_STATE);
    st_kv_select_destroy(sel);
    st_kv_select_destroy(NULL);
    fx_close(&f);
}

/* The exactness gate: a selection that covers every page (budget >= context) gives output
 * bit-identical to dense, through st_attn_decode's subset path; a smaller budget gives the
 * softmax over exactly the selected pages (double-precision reference), and the audit
 * reports mass 1 for the full selection and < 1 otherwise. */
TEST(test_exactness_gate) {
    static const st_type types[] = {ST_TYPE_F32, ST_TYPE_F16, ST_TYPE_Q8_0};
    for (size_t ti = 0; ti < 3; ti++) {
        fx f;
        const int D = 64, HQ = 4, H = 2;
        REQUIRE(fx_open(&f, types[ti], 16, 128, 3, H, D) == 0);
        st_kv_select *sel;
        REQUIRE(st_kv_select_create(&sel) == 0);
        rng_state = 11 + ti;
        st_kv_seq_id s;
        CHECK_OK(st_kv_seq_create(f.kv, &s));
        fill(&f, s, 16 * 40 + 9, 13);
        CHECK_OK(st_kv_seq_remove(f.kv, s, 16 * 3, 16 * 4));
        CHECK_OK(st_kv_seq_remove(f.kv, s, 16 * 8 + 1, 16 * 8 + 9));
        st_attn_page views[64];
        int nv;
        CHECK_OK(st_kv_seq_views(f.kv, s, 2, views, 64, &nv));
        st_attn_geom g = {.n_head = HQ, .n_kv_head = H, .head_dim = D, .page_size = 16,
                          .type = types[ti], .scale = 0};
        float q[HQ * D], dense[HQ * D], sparse[HQ * D];
        double frac[HQ];
        int n_diff = 0;
        for (int trial = 0; trial < 8; trial++) {
            rand_vec(q, HQ * D, 2.0f);
            st_attn_seq a = {.pages = views, .n_pages = nv};
            CHECK_OK(st_attn_decode(f.ctx, f.ws, &g, &a, q, dense));
            st_kv_quest_params p = st_kv_quest_default_params();
            p.budget = 16 * 41 + trial * 100;
            CHECK_OK(st_kv_quest_select(f.kv, s, 2, f.ws, q, HQ, &p, sel));
            CHECK(!st_kv_select_dense(sel));
            CHECK_OK(st_kv_select_apply(sel, &a));
            CHECK(a.sel != NULL);
            for (int h = 0; h < H; h++) CHECK_INT(a.n_sel[h], nv);
            CHECK_OK(st_attn_decode(f.ctx, f.ws, &g, &a, q, sparse));
            n_diff += memcmp(dense, sparse, sizeof dense) != 0;
            CHECK_OK(st_kv_quest_mass(f.kv, views, nv, sel, q, HQ, 0, frac));
            for (int h = 0; h < HQ; h++) CHECK(frac[h] == 1.0);
        }
        CHECK_INT(n_diff, 0);
        /* budget 10 pages: reference softmax over the selected tokens only */
        st_kv_quest_params p = st_kv_quest_default_params();
        p.budget = 160;
        rand_vec(q, HQ * D, 2.0f);
        CHECK_OK(st_kv_quest_select(f.kv, s, 2, f.ws, q, HQ, &p, sel));
        st_attn_seq a = {.pages = views, .n_pages = nv};
        CHECK_OK(st_kv_select_apply(sel, &a));
        CHECK_OK(st_attn_decode(f.ctx, f.ws, &g, &a, q, sparse));
        CHECK_OK(st_kv_quest_mass(f.kv, views, nv, sel, q, HQ, 0, frac));
        float *kr = malloc(16 * H * D * sizeof *kr), *vr = malloc(16 * H * D * sizeof *vr);
        double max_err = 0;
        for (int hq = 0; hq < HQ; hq++) {
            CHECK(frac[hq] > 0 && frac[hq] < 1);
            const int h = hq / (HQ / H);
            const int32_t *idx;
            int32_t n;
            CHECK_OK(st_kv_select_head(sel, h, &idx, &n));
            CHECK_INT(n, 10);
            double m = -INFINITY, sum = 0, acc[64] = {0};
            for (int pass = 0; pass < 2; pass++)
                for (int32_t i = 0; i < n; i++) {
                    const st_attn_page *v = &views[idx[i]];
                    for (int t = 0; t < v->n_tokens; t++) {
                        if (v->valid && !((v->valid[0] >> t) & 1)) continue;
                        CHECK_OK(st_kv_read(f.kv, s, 2, v->pos0 + t, 1, kr, vr));
                        double sc = 0;
                        for (int d = 0; d < D; d++) sc += (double)q[hq * D + d] * kr[h * D + d];
                        sc /= sqrt((double)D);
                        if (pass == 0) {
                            m = sc > m ? sc : m;
                            continue;
                        }
                        double e = exp(sc - m);
                        sum += e;
                        for (int d = 0; d < D; d++) acc[d] += e * vr[h * D + d];
                    }
                }
            for (int d = 0; d < D; d++) {
                double err = fabs(acc[d] / sum - sparse[hq * D + d]);
                max_err = err > max_err ? err : max_err;
            }
        }
        /* f16/q8_0 kernels may round q or p; the data are exact in the pool */
        CHECK(max_err < (types[ti] == ST_TYPE_F32 ? 1e-5 : 2e-2));
        free(kr);
        free(vr);
        st_kv_select_destroy(sel);
        fx_close(&f);
    }
}

/* A snapshot restores the boxes (same bytes, same selection); a box that misses a key of
 * its page is refused as corrupt even with every checksum fixed up. */
TEST(test_snapshot_boxes) {
    fx f, g;
    const int P = 8, L = 2, H = 2, D = 16;
    REQUIRE(fx_open(&f, ST_TYPE_F16, P, 64, L, H, D) == 0);
    REQUIRE(fx_open(&g, ST_TYPE_F16, P, 64, L, H, D) == 0);
    rng_state = 3;
    st_kv_seq_id s, t;
    CHECK_OK(st_kv_seq_create(f.kv, &s));
    fill(&f, s, P * 12 + 3, 9);
    st_kv_io io;
    st_kv_io_mem_writer(&io);
    CHECK_OK(st_kv_snapshot_write(f.kv, &s, 1, -1, &io));
    st_kv_io in;
    st_kv_io_mem_reader(&in, io.buf, io.len);
    int n;
    CHECK_OK(st_kv_snapshot_read(g.kv, &in, &t, 1, &n));
    st_kv_page_id pa[16], pb[16];
    int na, nb;
    CHECK_OK(st_kv_seq_pages(f.kv, s, pa, 16, &na));
    CHECK_OK(st_kv_seq_pages(g.kv, t, pb, 16, &nb));
    CHECK_INT(na, nb);
    int bad = 0, boxed = 0;
    for (int i = 0; i < na; i++)
        for (int l = 0; l < L; l++)
            for (int h = 0; h < H; h++) {
                float m1[ST_ATTN_MAX_HEAD_DIM], x1[ST_ATTN_MAX_HEAD_DIM];
                float m2[ST_ATTN_MAX_HEAD_DIM], x2[ST_ATTN_MAX_HEAD_DIM];
                int r1 = st_kv_page_box(f.kv, pa[i], l, h, m1, x1);
                int r2 = st_kv_page_box(g.kv, pb[i], l, h, m2, x2);
                bad += r1 != r2;
                if (!r1 && !r2) {
                    boxed++;
                    bad += memcmp(m1, m2, D * 4) != 0 || memcmp(x1, x2, D * 4) != 0;
                }
            }
    CHECK_INT(bad, 0);
    CHECK_INT(boxed, 12 * L * H);
    st_kv_select *s1, *s2;
    REQUIRE(st_kv_select_create(&s1) == 0 && st_kv_select_create(&s2) == 0);
    float q[4 * D];
    rand_vec(q, 4 * D, 2);
    st_kv_quest_params p = st_kv_quest_default_params();
    p.budget = 5 * P;
    p.dense_layers = 0;
    CHECK_OK(st_kv_quest_select(f.kv, s, 1, f.ws, q, 4, &p, s1));
    CHECK_OK(st_kv_quest_select(g.kv, t, 1, g.ws, q, 4, &p, s2));
    for (int h = 0; h < H; h++) {
        const int32_t *i1, *i2;
        int32_t n1, n2;
        CHECK_OK(st_kv_select_head(s1, h, &i1, &n1));
        CHECK_OK(st_kv_select_head(s2, h, &i2, &n2));
        CHECK(n1 == n2 && n1 == 5 && memcmp(i1, i2, (size_t)n1 * 4) == 0);
    }
    /* shrink page 2's first box (layer 0, head 0, kmin[0] raised past its keys), then fix
     * the record's checksum and the trailer: the reader must still refuse it */
    const size_t payload = 2 * (size_t)H * P * D * 2, box = (size_t)L * H * 2 * D * 4;
    const size_t rec = 48 + 4 * P + L * payload + box + 4 * L + 8, n_rec = (size_t)na; /* + ledger */
    uint8_t *buf = malloc(io.len);
    memcpy(buf, io.buf, io.len);
    uint8_t *r2 = buf + 80 + 2 * rec;
    float hi = 1e30f;
    memcpy(r2 + 48 + 4 * P + L * payload, &hi, 4);
    uint64_t h2 = XXH3_64bits(r2, rec - 8);
    memcpy(r2 + rec - 8, &h2, 8);
    /* trailer: XXH3-64 over every record's checksum, header first, then pages, then seqs */
    size_t n_all = 1 + n_rec + 1, off = 80 + n_rec * rec;
    uint64_t *sums = malloc(n_all * 8);
    memcpy(&sums[0], buf + 72, 8);
    for (size_t i = 0; i < n_rec; i++) memcpy(&sums[1 + i], buf + 80 + i * rec + rec - 8, 8);
    size_t seq_end = io.len - 16;
    memcpy(&sums[n_all - 1], buf + seq_end - 8, 8);
    uint64_t tr = XXH3_64bits(sums, n_all * 8);
    memcpy(buf + io.len - 8, &tr, 8);
    (void)off;
    st_kv_seq_id u;
    st_kv_io_mem_reader(&in, buf, io.len);
    CHECK_INT(st_kv_snapshot_read(g.kv, &in, &u, 1, &n), ST_E_CORRUPT);
    CHECK(strstr(st_ctx_error(g.ctx), "Quest box") != NULL);
    free(sums);
    free(buf);
    st_kv_select_destroy(s1);
    st_kv_select_destroy(s2);
    st_kv_io_mem_release(&io);
    fx_close(&f);
    fx_close(&g);
}

/* Equal bounds (a zero query makes every bound 0): the earlier pages win, so the selection
 * is the sink, the first k candidates and the recent window, in order. */
TEST(test_select_ties) {
    fx f;
    REQUIRE(fx_open(&f, ST_TYPE_F32, 8, 64, 2, 2, 16) == 0);
    st_kv_seq_id s;
    CHECK_OK(st_kv_seq_create(f.kv, &s));
    rng_state = 99;
    fill(&f, s, 8 * 16, 8);
    st_kv_select *sel = NULL;
    REQUIRE(st_kv_select_create(&sel) == 0);
    float q[4 * 16] = {0};
    st_kv_quest_params p = st_kv_quest_default_params();
    p.budget = 8 * 6; /* 6 pages: sink 1 + recent 2 forced, 3 ranked */
    p.dense_layers = 0;
    CHECK_OK(st_kv_quest_select(f.kv, s, 1, f.ws, q, 4, &p, sel));
    for (int h = 0; h < 2; h++) {
        const int32_t *idx;
        int32_t n;
        CHECK_OK(st_kv_select_head(sel, h, &idx, &n));
        static const int32_t want[6] = {0, 1, 2, 3, 14, 15};
        CHECK_INT(n, 6);
        for (int i = 0; i < 6 && i < n; i++) CHECK_INT(idx[i], want[i]);
    }
    st_kv_select_destroy(sel);
    fx_close(&f);
}

/* The residency bonus (quest.h, resident_bonus): through the SSD tier a candidate whose
 * block is in RAM ranks as if its bound were B nats higher. Checked as the promise it makes,
 * against bounds computed here from the public boxes: every candidate left out has a bound
 * at most B / scale above any candidate chosen, and no more than its own bound minus that
 * when it is in RAM and the chosen one is not; the budget is the same; B = 0 and a pool
 * without a tier select exactly as plain Quest does. */
TEST(test_resident_bonus) {
    enum { L = 2, H = 2, G = 2, D = 64, P = 16, NP = 30, BUDGET = 10 * P };
    st_ctx *ctx;
    REQUIRE(st_ctx_create(NULL, &ctx) == 0);
    char dir[] = "/tmp/strata-quest-bonus-XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    fx f[2]; /* [0]: all in RAM, [1]: tiered, the same keys */
    for (int t = 0; t < 2; t++) {
        memset(&f[t], 0, sizeof f[t]);
        f[t].ctx = ctx, f[t].L = L, f[t].H = H, f[t].D = D, f[t].P = P;
        st_kv_params p = st_kv_default_params();
        p.n_layer = L, p.n_kv_head = H, p.head_dim = D, p.page_size = P, p.type = ST_TYPE_F16;
        p.n_pages = NP + 4;
        if (t) p.spill_dir = dir, p.ram_pages = 12;
        REQUIRE(st_kv_create(ctx, &p, &f[t].kv) == 0);
        REQUIRE(st_attn_ws_create(st_ctx_isa(ctx), &f[t].ws) == 0);
    }
    st_kv_seq_id s[2];
    for (int t = 0; t < 2; t++) {
        CHECK_OK(st_kv_seq_create(f[t].kv, &s[t]));
        rng_state = 5;
        fill(&f[t], s[t], NP * P, P);
    }
    st_kv_page_id pages[NP];
    int np;
    CHECK_OK(st_kv_seq_pages(f[1].kv, s[1], pages, NP, &np));
    REQUIRE(np == NP);
    const double scale = 1.0 / sqrt((double)D);
    static const double bonuses[] = {0.5, 2, 8};
    st_kv_select *sel[2], *plain;
    REQUIRE(st_kv_select_create(&sel[0]) == 0 && st_kv_select_create(&sel[1]) == 0 &&
            st_kv_select_create(&plain) == 0);
    float q[H * G * D];
    int differs = 0, n_res = 0, n_disk = 0, bad = 0, checked = 0;
    for (int trial = 0; trial < 20; trial++) {
        rand_vec(q, H * G * D, 1.0f);
        for (int l = 0; l < L; l++) {
            st_kv_quest_params qp = st_kv_quest_default_params();
            qp.budget = BUDGET, qp.dense_layers = 0;
            CHECK_OK(st_kv_quest_select(f[1].kv, s[1], l, f[1].ws, q, H * G, &qp, plain));
            for (size_t bi = 0; bi < sizeof bonuses / sizeof *bonuses; bi++) {
                qp.resident_bonus = bonuses[bi];
                const float braw = (float)(bonuses[bi] / scale);
                for (int t = 0; t < 2; t++) CHECK_OK(st_kv_quest_select(f[t].kv, s[t], l, f[t].ws, q, H * G, &qp, sel[t]));
                for (int h = 0; h < H; h++) {
                    const int32_t *a, *b, *c;
                    int32_t na, nb, nc;
                    CHECK_OK(st_kv_select_head(sel[0], h, &a, &na));
                    CHECK_OK(st_kv_select_head(sel[1], h, &b, &nb));
                    CHECK_OK(st_kv_select_head(plain, h, &c, &nc));
                    /* no tier: the bonus does nothing */
                    CHECK(na == nc && memcmp(a, c, (size_t)nc * sizeof *c) == 0);
                    CHECK_INT(nb, BUDGET / P);
                    differs += nb != nc || memcmp(b, c, (size_t)nc * sizeof *c) != 0;
                    int chosen[NP] = {0};
                    for (int i = 0; i < nb; i++) chosen[b[i]] = 1;
                    CHECK(chosen[0] && chosen[NP - 2] && chosen[NP - 1]); /* the sink and the recent pages */
                    float bound[NP];
                    int res[NP];
                    for (int i = 1; i < NP - 2; i++) {
                        float mn[D], mx[D];
                        uint16_t box[2 * D];
                        CHECK_OK(st_kv_page_box(f[1].kv, pages[i], l, h, mn, mx));
                        st_attn_box_to_f16(NULL, D, mn, mx, box);
                        CHECK_OK(st_attn_quest_bounds(f[1].ws, D, G, q + h * G * D, box, 2 * D, 1, &bound[i]));
                        res[i] = kv_blk_ram(f[1].kv, pages[i], l);
                        if (trial == 0 && bi == 0) n_res += res[i], n_disk += !res[i];
                    }
                    for (int i = 1; i < NP - 2; i++) {
                        if (chosen[i]) continue;
                        for (int j = 1; j < NP - 2; j++) {
                            if (!chosen[j]) continue;
                            const float slack = 1e-4f * (fabsf(bound[i]) + fabsf(bound[j]) + braw);
                            const float gi = bound[i] + (res[i] ? braw : 0), gj = bound[j] + (res[j] ? braw : 0);
                            bad += gi > gj + slack;
                            bad += bound[i] > bound[j] + braw + slack;
                            checked++;
                        }
                    }
                }
            }
        }
    }
    CHECK_INT(bad, 0);
    CHECK(checked > 10000);
    CHECK(n_res > 0 && n_disk > 0); /* both kinds of candidate were there to choose from */
    CHECK(differs > 0);             /* and the bonus changed some choices */
    char msg[256];
    CHECK_OK(kv_check(f[1].kv, msg, sizeof msg));
    st_kv_select_destroy(plain);
    for (int t = 0; t < 2; t++) {
        st_kv_select_destroy(sel[t]);
        st_attn_ws_destroy(f[t].ws);
        st_kv_destroy(f[t].kv);
    }
    CHECK_INT(rmdir(dir), 0);
    st_ctx_destroy(ctx);
}

TEST_MAIN(test_box_bruteforce, test_bound_is_upper, test_select_invariants,
          test_select_ties, test_exactness_gate, test_snapshot_boxes, test_resident_bonus)
