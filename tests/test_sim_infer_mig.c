/* Lending an inference service's GPUs on MIG instances (issue 22 section
 * 4): the three layouts of a replica's GPUs against NVIDIA's geometry, a
 * run that shrinks the last replica onto a smaller instance off-peak and
 * lends the rest of each GPU, and refusals. */
#include <math.h>

#include "../src/sim/infer_impl.h"
#include "test.h"
#include "test_sim_infer.h"

static const struct stk_mig_geometry *geo(const char *name) {
  const struct stk_mig_geometry *g = stk_mig_geometry_find(name);
  CHECK(g);
  return g;
}

static const char *inst(const struct stk_mig_geometry *g, const struct stk_mig_layout *l,
                        unsigned i, char *buf, size_t n) {
  snprintf(buf, n, "%s@%u", g->profiles[l->inst[i].profile].name, l->inst[i].start);
  return buf;
}

TEST(sim_infer_mig_layouts) {
  const struct stk_mig_geometry *g = geo("a100-80gb");
  struct stk_infer_opts o;
  memset(&o, 0, sizeof o);
  o.mig = g;
  o.mig_serve = stk_mig_profile_find(g, "4g");
  struct stk__infer_mig m;
  char err[STK_ERRMSG_MAX] = "", b[32];
  CHECK_MSG(stk__infer_mig_init(&m, &o, err) == 0, "%s", err);
  /* serving 4g.40gb at slot 0, the 3g.40gb beside it lent */
  CHECK_EQ(m.lay[LV_SMALL].n, 2);
  CHECK_STR(inst(g, &m.lay[LV_SMALL], 0, b, sizeof b), "4g.40gb@0");
  CHECK_STR(inst(g, &m.lay[LV_SMALL], 1, b, sizeof b), "3g.40gb@4");
  CHECK_EQ(m.lent_compute, 3);
  CHECK_STR(inst(g, &m.lay[LV_FULL], 0, b, sizeof b), "7g.80gb@0");
  CHECK(!memcmp(&m.lay[LV_OFF], &m.lay[LV_FULL], sizeof m.lay[0])); /* lent whole: same instance */
  CHECK(fabs(m.pf - 7.0 / 4) < 1e-12 && m.dec == 2 && fabs(m.share - 4.0 / 7) < 1e-12);
  CHECK(m.delay == STK_MIG_RECONFIG_DELAY_S);
  /* every profile below a whole GPU, on every geometry: valid layouts that
   * lend something and use at most the GPU's compute */
  for (size_t k = 0; k < stk_mig_geometry_count(); k++) {
    const struct stk_mig_geometry *gk = stk_mig_geometry_at(k);
    o.mig = gk;
    for (size_t pi = 0; pi < gk->nprofiles; pi++) {
      if (gk->profiles[pi].compute == STK_MIG_COMPUTE_SLICES) continue;
      o.mig_serve = (int)pi;
      CHECK_MSG(stk__infer_mig_init(&m, &o, err) == 0, "%s %s: %s", gk->name, gk->profiles[pi].name,
                err);
      for (int lv = 0; lv < LV_COUNT; lv++) CHECK(stk_mig_layout_check(gk, &m.lay[lv], err) == 0);
      CHECK(m.lent_compute > 0);
      CHECK(m.lent_compute + gk->profiles[pi].compute <= STK_MIG_COMPUTE_SLICES);
    }
  }
  o.mig = g;
  o.mig_serve = stk_mig_profile_find(g, "7g");
  CHECK(stk__infer_mig_init(&m, &o, err) == STK_EINVAL);
  CHECK_CONTAINS(err, "7g.80gb takes the whole GPU");
  o.mig_serve = 99;
  CHECK(stk__infer_mig_init(&m, &o, err) == STK_EINVAL);
  CHECK_CONTAINS(err, "no profile 99 on a100-80gb");
}

/* The trace of sim_infer_lends_off_peak: quiet, a 10-minute peak, quiet.
 * Whole replicas lend three of four replicas' GPUs off-peak; on MIG the
 * fourth also shrinks to 4g.40gb and lends the 3g.40gb of each of its two
 * GPUs, after a whole replica stood in while it was reconfigured. */
TEST(sim_infer_mig_lends_instances) {
  struct stk_infer_perf *p = toy_perf();
  struct stk_infer_trace tr = peak_trace();
  struct stk_infer_opts o = lend_opts();
  struct stk_infer_result whole, mig;
  char err[STK_ERRMSG_MAX] = "";
  CHECK_MSG(stk_infer_run(p, &tr, &o, &whole, err) == 0, "%s", err);
  o.mig = geo("a100-80gb");
  o.mig_serve = stk_mig_profile_find(o.mig, "4g.40gb");
  CHECK_MSG(stk_infer_run(p, &tr, &o, &mig, err) == 0, "%s", err);
  CHECK_EQ(whole.requests, mig.requests);
  /* off-peak from 120 s the small replica serves alone, each request a
   * prefill at 7/4 and 19 tokens at twice the whole GPU's times (the peak
   * misses targets either way: the controller sees it a minute late) */
  for (size_t k = 6; k < 30; k++) {
    CHECK_MSG(fabs(mig.e2e[k] - (0.1 * 7 / 4 + 19 * 0.05 * 2)) < 1e-9, "%zu: %.6f", k, mig.e2e[k]);
    CHECK_MSG(fabs(whole.e2e[k] - (0.1 + 19 * 0.05)) < 1e-9, "%zu: %.6f", k, whole.e2e[k]);
  }
  /* one prefill at 7/4 of 0.1 s, then 20 tokens at batch 16 at twice 0.06 s */
  CHECK_MSG(fabs(mig.rate_cap_mig - 1 / (0.1 * 7 / 4 + 20 * 0.06 * 2 / 16)) < 1e-9, "%.6f",
            mig.rate_cap_mig);
  CHECK(fabs(mig.rate_cap - 1 / (0.1 + 20 * 0.06 / 16)) < 1e-9);
  CHECK_EQ(whole.lent_mig_gpu_h, 0);
  CHECK_EQ(whole.reconfigs, 0);
  /* off-peak both lend three replicas' whole GPUs (on MIG from the second
   * tick: at the first a whole replica stands in while the small one
   * loads); at the peak nothing */
  CHECK_EQ(mig.lent[1], 4);
  CHECK_EQ(mig.lent[5], 6);
  CHECK_EQ(mig.lent[15], 0);
  CHECK_EQ(mig.lent[25], 6);
  /* the instances: 2 GPUs x 3/7 for about 17 of the 30 minutes */
  CHECK_MSG(mig.lent_mig_gpu_h > 0.15 && mig.lent_mig_gpu_h <= 2 * 3.0 / 7 * 0.5 + 1e-9,
            "%.3f GPU-h", mig.lent_mig_gpu_h);
  double whole_h = 0;
  for (size_t k = 0; k < 30; k++) whole_h += mig.lent[k] * 60 / 3600.0; /* the 31st: at 1800 s */
  CHECK(fabs(mig.lent_gpu_h - whole_h - mig.lent_mig_gpu_h) < 1e-9);
  CHECK(mig.lent_gpu_h > whole.lent_gpu_h);
  /* whole GPUs of 2 change layout together, each way */
  CHECK(mig.reconfigs >= 4 && mig.reconfigs % 2 == 0);
  /* without a creation delay the layouts change as often */
  o.mig_delay_s = -1;
  struct stk_infer_result fast;
  CHECK_MSG(stk_infer_run(p, &tr, &o, &fast, err) == 0, "%s", err);
  CHECK_EQ(fast.reconfigs, mig.reconfigs);
  stk_infer_result_free(&fast);
  o.mig_delay_s = NAN;
  CHECK(stk_infer_run(p, &tr, &o, &fast, err) == STK_EINVAL);
  CHECK_CONTAINS(err, "instance creation delay nan s is out of range");
  stk_infer_result_free(&whole);
  stk_infer_result_free(&mig);
  stk_infer_perf_free(p);
}
