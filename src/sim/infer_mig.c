/* Lending an inference service's GPUs on MIG instances (stoker/infer.h,
 * docs/sim_infer.md): each GPU of a replica holds one of three layouts,
 * checked against NVIDIA's geometry (stoker/mig.h), and moves between them
 * only through stk_mig_reconfigure, so only once the instances it removes
 * are empty: the replica drained, its lent instances taken back. */
#include <math.h>
#include <string.h>

#include "infer_impl.h"

int stk__infer_mig_init(struct stk__infer_mig *m, const struct stk_infer_opts *o, char *errmsg) {
  memset(m, 0, sizeof *m);
  const struct stk_mig_geometry *g = m->g = o->mig;
  if (o->mig_serve < 0 || (size_t)o->mig_serve >= g->nprofiles)
    return stk__errf(errmsg, STK_EINVAL, "MIG lending: no profile %d on %s", o->mig_serve, g->name);
  const struct stk_mig_profile *p = &g->profiles[o->mig_serve];
  if (p->compute >= STK_MIG_COMPUTE_SLICES)
    return stk__errf(errmsg, STK_EINVAL,
                     "MIG lending: %s takes the whole GPU; a replica on it lends nothing that "
                     "whole replicas do not (name a smaller profile, e.g. 4g)",
                     p->name);
  /* whole-GPU instance: 7 compute slices, no media extensions, most memory */
  int whole = -1;
  for (size_t i = 0; i < g->nprofiles; i++) {
    const struct stk_mig_profile *q = &g->profiles[i];
    if (q->compute == STK_MIG_COMPUTE_SLICES && !q->media &&
        (whole < 0 || q->memory > g->profiles[whole].memory))
      whole = (int)i;
  }
  char why[STK_ERRMSG_MAX];
  if (whole < 0 || stk_mig_layout_add(g, &m->lay[LV_FULL], whole, -1, why))
    return stk__errf(errmsg, STK_EINVAL, "MIG lending: %s has no whole-GPU profile", g->name);
  m->lay[LV_OFF] = m->lay[LV_FULL]; /* lent whole: the same instance, training's */
  /* the serving instance first, then the rest lent, largest instances first */
  struct stk_mig_layout *s = &m->lay[LV_SMALL];
  if (stk_mig_layout_add(g, s, o->mig_serve, -1, why))
    return stk__errf(errmsg, STK_EINVAL, "MIG lending: %s: %s", p->name, why);
  for (unsigned c = STK_MIG_COMPUTE_SLICES; c >= 1; c--)
    for (size_t i = 0; i < g->nprofiles; i++) {
      const struct stk_mig_profile *q = &g->profiles[i];
      if (q->compute == c && !q->media)
        while (stk_mig_layout_add(g, s, (int)i, -1, NULL) == 0) {
        }
    }
  m->lent_compute = stk_mig_layout_compute(g, s) - p->compute;
  if (m->lent_compute == 0)
    return stk__errf(errmsg, STK_EINVAL, "MIG lending: beside %s no instance fits on %s", p->name,
                     g->name);
  m->pf = (double)STK_MIG_COMPUTE_SLICES / p->compute;
  m->dec = (double)STK_MIG_MEMORY_SLICES / p->memory;
  m->share = (double)p->compute / STK_MIG_COMPUTE_SLICES;
  m->delay = o->mig_delay_s == 0  ? STK_MIG_RECONFIG_DELAY_S
             : o->mig_delay_s < 0 ? 0
                                  : o->mig_delay_s;
  return 0;
}

static int eff(const struct rep *r) {
  if (r->state == R_SERVE || r->state == R_START) return r->level;
  return r->state == R_DRAIN ? r->next : LV_OFF;
}

/* Every GPU of an idle replica to the layout of level lv; *ready: when
 * its new instances can be used. */
static int relayout(const struct stk__infer_mig *m, const struct stk_infer_opts *o, struct rep *r,
                    int lv, double now, double *ready, uint64_t *reconfigs, char *errmsg) {
  int changes = memcmp(&r->lay, &m->lay[lv], sizeof r->lay) != 0;
  uint32_t busy = r->level != LV_OFF && (r->busy || r->nact) ? 1u : 0u; /* the serving instance */
  char why[STK_ERRMSG_MAX];
  if (stk_mig_reconfigure(m->g, &r->lay, busy, &m->lay[lv], now, m->delay, ready, why))
    return stk__errf(errmsg, STK_EINVAL, "MIG lending: internal error at %.3f s: %s", now, why);
  if (changes) *reconfigs += o->tp;
  r->level = r->next = lv;
  r->pf = lv == LV_SMALL ? m->pf : 1;
  r->dec = lv == LV_SMALL ? m->dec : 1;
  r->share = lv == LV_SMALL ? m->share : 1;
  return 0;
}

/* An idle replica (not serving, or serving nothing) to level lv now. */
static int switch_now(const struct stk__infer_mig *m, const struct stk_infer_opts *o, struct rep *r,
                      int lv, double now, uint64_t *reconfigs, char *errmsg) {
  double ready = now;
  int rc = relayout(m, o, r, lv, now, &ready, reconfigs, errmsg);
  if (rc) return rc;
  r->state = lv == LV_OFF ? R_OFF : R_START;
  r->ready_at = ready + o->start_s;
  return 0;
}

int stk__infer_mig_drained(const struct stk__infer_mig *m, const struct stk_infer_opts *o,
                           struct rep *r, double now, uint64_t *reconfigs, char *errmsg) {
  return switch_now(m, o, r, r->next, now, reconfigs, errmsg);
}

/* Replica r to level lv: at once when it holds nothing, else after its
 * drain; a draining replica at lv serves again at once. */
static int move(const struct stk__infer_mig *m, const struct stk_infer_opts *o, struct rep *r,
                int lv, double now, uint64_t *reconfigs, char *errmsg) {
  if (eff(r) == lv) return 0;
  if (r->state == R_DRAIN) {
    if (r->level == lv) r->state = R_SERVE;
    r->next = lv;
    return 0;
  }
  if (r->state == R_SERVE && (r->busy || r->nact)) {
    r->state = R_DRAIN;
    r->next = lv;
    return 0;
  }
  return switch_now(m, o, r, lv, now, reconfigs, errmsg);
}

/* Of the replicas at level lv, the one to give up: one still starting,
 * else the one serving fewest, else one on its way there. */
static int pick(const struct rep *rp, unsigned R, int lv) {
  int best = -1, bk = 0;
  for (unsigned i = 0; i < R; i++) {
    if (eff(&rp[i]) != lv) continue;
    int k = rp[i].state == R_START ? 0 : rp[i].state == R_SERVE ? 1 : 2;
    if (best < 0 || k < bk || (k == bk && k == 1 && rp[i].nact < rp[best].nact))
      best = (int)i, bk = k;
  }
  return best;
}

/* Of the replicas lent, the one to bring to level lv: one still draining
 * at lv, else one whose GPUs already have lv's layout, else one lent,
 * else one draining. */
static int pick_lent(const struct stk__infer_mig *m, const struct rep *rp, unsigned R, int lv) {
  int best = -1, bk = 4;
  for (unsigned i = 0; i < R; i++) {
    const struct rep *r = &rp[i];
    if (eff(r) != LV_OFF) continue;
    int k = r->state == R_DRAIN && r->level == lv                               ? 0
            : r->state == R_OFF && !memcmp(&r->lay, &m->lay[lv], sizeof r->lay) ? 1
            : r->state == R_OFF                                                 ? 2
                                                                                : 3;
    if (k < bk) best = (int)i, bk = k;
  }
  return best;
}

/* Replicas lent brought to level lv until *have reach want. */
static int grow(const struct stk__infer_mig *m, const struct stk_infer_opts *o, struct rep *rp,
                int lv, unsigned want, unsigned *have, double now, uint64_t *reconfigs,
                char *errmsg) {
  int rc = 0;
  for (; *have < want && !rc; ++*have) {
    int i = pick_lent(m, rp, o->replicas, lv);
    if (i < 0) break;
    rc = move(m, o, &rp[i], lv, now, reconfigs, errmsg);
  }
  return rc;
}

int stk__infer_mig_control(const struct stk__infer_mig *m, const struct stk_infer_opts *o,
                           struct rep *rp, double want, double cap, double cap_small, double now,
                           uint64_t *reconfigs, char *errmsg) {
  unsigned R = o->replicas;
  double whole = floor(want / cap);
  unsigned f = whole >= R ? R : (unsigned)whole, s = 0;
  double rest = want - f * cap;
  if (rest > 1e-9 * cap && f < R) {
    if (rest <= cap_small)
      s = 1;
    else
      f++;
  }
  while (f + s < o->min_replicas && f + s < R) s++;
  unsigned hf = 0, hs = 0;
  for (unsigned i = 0; i < R; i++) {
    hf += eff(&rp[i]) == LV_FULL;
    hs += eff(&rp[i]) == LV_SMALL;
  }
  int rc = grow(m, o, rp, LV_FULL, f, &hf, now, reconfigs, errmsg);
  if (!rc) rc = grow(m, o, rp, LV_SMALL, s, &hs, now, reconfigs, errmsg);
  /* a replica no longer wanted serves on while one wanted in its stead
   * is still loading: whole ones for small ones not yet serving, a small
   * one for whole ones taken back */
  unsigned serve_f = 0, serve_s = 0;
  for (unsigned i = 0; i < R; i++) {
    serve_f += rp[i].state == R_SERVE && rp[i].level == LV_FULL;
    serve_s += rp[i].state == R_SERVE && rp[i].level == LV_SMALL;
  }
  unsigned keep_f = s > serve_s ? s - serve_s : 0, keep_s = serve_f < hf ? hs : s;
  for (; hf > f + keep_f && !rc; hf--)
    rc = move(m, o, &rp[pick(rp, R, LV_FULL)], LV_OFF, now, reconfigs, errmsg);
  for (; hs > keep_s && hs > s && !rc; hs--)
    rc = move(m, o, &rp[pick(rp, R, LV_SMALL)], LV_OFF, now, reconfigs, errmsg);
  /* and those given up now may be what is still wanted */
  if (!rc) rc = grow(m, o, rp, LV_FULL, f, &hf, now, reconfigs, errmsg);
  if (!rc) rc = grow(m, o, rp, LV_SMALL, s, &hs, now, reconfigs, errmsg);
  return rc;
}
