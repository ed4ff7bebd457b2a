/* A cluster of MIG GPUs (mig_gpus.h): instances per GPU, the
 * fragmentation score and the places for one request's instances, as the
 * online MIG policies place them (docs/sim-mig-online.md). */
#include <stdlib.h>

#include "mig_gpus.h"

void stk__mig_recount(const struct stk__mig_gpus *m, struct stk__mig_gpu *G) {
  G->busy = G->bc = G->all = G->ac = 0;
  for (unsigned i = 0; i < G->n; i++) {
    const struct stk_mig_profile *p = &m->g->profiles[G->in[i].profile];
    unsigned s = stk__mig_slices(p, G->in[i].start);
    G->all |= (uint16_t)s;
    G->ac += p->compute;
    if (G->in[i].req != STK__MIG_NO_REQ) {
      G->busy |= (uint16_t)s;
      G->bc += p->compute;
    }
  }
}

/* Free compute slices that instances of each profile could not use if as
 * many as fit were created (lowest start first), weighted by the profile's
 * share of the requests; cached by (occupied memory slices, compute). */
static double frag(struct stk__mig_gpus *m, unsigned mask, unsigned compute) {
  if (compute > STK_MIG_COMPUTE_SLICES) compute = STK_MIG_COMPUTE_SLICES;
  if (m->have[mask][compute]) return m->frag[mask][compute];
  double f = 0;
  unsigned free_c = STK_MIG_COMPUTE_SLICES - compute;
  for (size_t pi = 0; pi < m->g->nprofiles && pi < STK__MIG_MAX_PROFILES; pi++) {
    if (m->w[pi] == 0) continue;
    const struct stk_mig_profile *p = &m->g->profiles[pi];
    unsigned msk = mask, c = compute, n = 0;
    for (unsigned k = 0; k < p->nstarts; k++) {
      unsigned s = stk__mig_slices(p, p->starts[k]);
      if (!(s & msk) && c + p->compute <= STK_MIG_COMPUTE_SLICES) {
        msk |= s;
        c += p->compute;
        n++;
      }
    }
    f += m->w[pi] * (double)(free_c - n * p->compute);
  }
  m->have[mask][compute] = 1;
  m->frag[mask][compute] = (float)f;
  return f;
}

/* FIFO takes the first in GPU order (reuse before create on a GPU); the
 * others the least fragmentation added, then reuse < create <
 * reconfigure, then GPU and slot order. */
int stk__mig_better(const struct stk__mig_gpus *m, const struct stk__mig_cand *a,
                    const struct stk__mig_cand *b) {
  if (!b->ok) return a->ok;
  if (!a->ok) return 0;
  int firstfit = m->policy == STK_MIG_FIFO || m->policy == STK_MIG_FIFO_RECONF;
  /* first fit: any GPU without destroying before one that must */
  if (firstfit && (a->action == STK__MIG_RECONF) != (b->action == STK__MIG_RECONF))
    return b->action == STK__MIG_RECONF;
  if (!firstfit) {
    double ka = a->dfrag + (m->policy == STK_MIG_MULTI && a->action == STK__MIG_RECONF
                                ? m->w_reconf * STK_MIG_COMPUTE_SLICES / m->w_frag
                                : 0);
    double kb = b->dfrag + (m->policy == STK_MIG_MULTI && b->action == STK__MIG_RECONF
                                ? m->w_reconf * STK_MIG_COMPUTE_SLICES / m->w_frag
                                : 0);
    if (ka < kb - 1e-9) return 1;
    if (ka > kb + 1e-9) return 0;
    if (a->action != b->action) return a->action < b->action;
  }
  if (a->gpu != b->gpu) return a->gpu < b->gpu;
  if (a->action != b->action) return a->action < b->action;
  return a->slot < b->slot;
}

struct stk__mig_cand stk__mig_best_on(struct stk__mig_gpus *m, uint32_t gi, unsigned pi) {
  const struct stk__mig_gpu *G = &m->gpu[gi];
  const struct stk_mig_profile *p = &m->g->profiles[pi];
  unsigned busy = G->busy, bc = G->bc, all = G->all, ac = G->ac;
  int fifo = m->policy == STK_MIG_FIFO;
  int scored = !fifo && m->policy != STK_MIG_FIFO_RECONF; /* fragmentation matters */
  double before = scored ? frag(m, busy, bc) : 0;
  struct stk__mig_cand best = {0};
  for (unsigned i = 0; i < G->n; i++)
    if (G->in[i].req == STK__MIG_NO_REQ && G->in[i].profile == pi) {
      struct stk__mig_cand c = {1, gi, STK__MIG_REUSE, G->in[i].start, (uint8_t)i, 0};
      if (scored)
        c.dfrag = frag(m, busy | stk__mig_slices(p, c.slot), bc + p->compute) - before;
      if (stk__mig_better(m, &c, &best)) best = c;
    }
  for (unsigned k = 0; k < p->nstarts; k++) {
    unsigned start = p->starts[k], s = stk__mig_slices(p, start);
    if (s & busy) continue;
    struct stk__mig_cand c = {1, gi, STK__MIG_CREATE, (uint8_t)start, 0, 0};
    if ((s & all) || ac + p->compute > STK_MIG_COMPUTE_SLICES || G->n >= STK_MIG_MAX_INSTANCES) {
      if (fifo) continue;
      /* destroy the idle instances in the way; what is left must fit */
      unsigned left_c = 0, left_n = 0;
      for (unsigned i = 0; i < G->n; i++) {
        const struct stk_mig_profile *q = &m->g->profiles[G->in[i].profile];
        if (G->in[i].req != STK__MIG_NO_REQ || !(stk__mig_slices(q, G->in[i].start) & s)) {
          left_c += q->compute;
          left_n++;
        }
      }
      if (left_c + p->compute > STK_MIG_COMPUTE_SLICES || left_n >= STK_MIG_MAX_INSTANCES)
        continue;
      c.action = STK__MIG_RECONF;
    }
    if (scored) c.dfrag = frag(m, busy | s, bc + p->compute) - before;
    if (stk__mig_better(m, &c, &best)) best = c;
  }
  return best;
}

double stk__mig_cost(const struct stk__mig_gpus *m, const struct stk__mig_cand *c, unsigned k) {
  double s = 0;
  for (unsigned i = 0; i < k; i++)
    s += m->w_frag * c[i].dfrag / STK_MIG_COMPUTE_SLICES +
         (c[i].action == STK__MIG_RECONF ? m->w_reconf : 0);
  return s;
}

int stk__mig_choose(struct stk__mig_gpus *m, unsigned profile, unsigned count,
                    struct stk__mig_cand *out, double *cost) {
  unsigned k = count;
  if (k == 1) {
    struct stk__mig_cand best = {0};
    for (uint32_t gi = 0; gi < m->n; gi++) {
      struct stk__mig_cand c = stk__mig_best_on(m, gi, profile);
      if (stk__mig_better(m, &c, &best)) best = c;
      if (best.ok && best.action != STK__MIG_RECONF && m->policy <= STK_MIG_FIFO_RECONF) break;
    }
    if (!best.ok) return 0;
    out[0] = best;
  } else {
    unsigned got = 0;
    for (uint32_t gi = 0; gi < m->n; gi++) {
      struct stk__mig_cand c = stk__mig_best_on(m, gi, profile);
      if (!c.ok) continue;
      if (got < k) {
        out[got++] = c;
      } else if (m->policy == STK_MIG_FIFO) {
        break;
      } else {
        unsigned worst = 0;
        for (unsigned i = 1; i < k; i++)
          if (stk__mig_better(m, &out[worst], &out[i])) worst = i;
        if (stk__mig_better(m, &c, &out[worst])) out[worst] = c;
      }
    }
    if (got < k) return 0;
  }
  *cost = stk__mig_cost(m, out, k);
  return 1;
}

int stk__mig_apply(struct stk__mig_gpus *m, const struct stk__mig_cand *c, unsigned profile,
                   int32_t req, int *created, char *errmsg) {
  struct stk__mig_gpu *G = &m->gpu[c->gpu];
  const struct stk_mig_profile *p = &m->g->profiles[profile];
  if (c->action == STK__MIG_REUSE) {
    G->in[c->idx].req = req;
  } else {
    if (c->action == STK__MIG_RECONF) {
      unsigned s = stk__mig_slices(p, c->slot), keep = 0;
      for (unsigned i = 0; i < G->n; i++) {
        const struct stk_mig_profile *o = &m->g->profiles[G->in[i].profile];
        if (G->in[i].req != STK__MIG_NO_REQ || !(stk__mig_slices(o, G->in[i].start) & s))
          G->in[keep++] = G->in[i];
      }
      G->n = (uint8_t)keep;
      m->reconfigs++;
    }
    G->in[G->n++] = (struct stk__mig_inst){(uint8_t)profile, c->slot, req};
    m->created++;
    *created = 1;
    /* every layout the run makes is one NVIDIA allows */
    struct stk_mig_layout l = {.n = G->n};
    for (unsigned i = 0; i < G->n; i++)
      l.inst[i] = (struct stk_mig_instance){G->in[i].profile, G->in[i].start};
    char why[STK_ERRMSG_MAX];
    if (stk_mig_layout_check(m->g, &l, why))
      return stk__errf(errmsg, STK_EINVAL, "mig: internal error, GPU %u: %s", c->gpu, why);
  }
  stk__mig_recount(m, G);
  return 0;
}

void stk__mig_release(struct stk__mig_gpus *m, uint32_t gi, int32_t req) {
  struct stk__mig_gpu *G = &m->gpu[gi];
  for (unsigned k = 0; k < G->n; k++)
    if (G->in[k].req == req) {
      G->in[k].req = STK__MIG_NO_REQ;
      stk__mig_recount(m, G);
      break;
    }
}
