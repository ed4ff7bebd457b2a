/* The inference service's run state, shared by infer.c (requests,
 * iterations, the whole-replica controller) and infer_mig.c (lending on
 * MIG instances). */
#ifndef STK_SIM_INFER_IMPL_H
#define STK_SIM_INFER_IMPL_H

#include "sim_impl.h"
#include "stoker/infer.h"
#include "stoker/mig.h"

enum { R_OFF, R_START, R_SERVE, R_DRAIN };
/* a replica's MIG layout on each of its GPUs: whole GPU lent, a smaller
 * instance serving beside lent ones, whole GPU serving */
enum { LV_OFF, LV_SMALL, LV_FULL, LV_COUNT };

struct rq {
  double arrive, first, finish;
  uint32_t prompt, gen, left;
};

struct rep {
  int state, busy, prefill;
  double ready_at, busy_until, busy_s, serve_s, energy_j;
  size_t *act; /* requests held (prefilling or decoding) */
  int nact, npre;
  /* MIG lending: the level served at (or started at), the level a drain
   * leads to, the layout of each of its GPUs; time factors of a prefill
   * and a decode step, and the share of the GPU's power (1 on a whole GPU) */
  int level, next;
  struct stk_mig_layout lay;
  double pf, dec, share;
  double armed; /* the ready_at a wake-up was pushed for */
};

/* The three layouts, and what the small one serves and lends. */
struct stk__infer_mig {
  const struct stk_mig_geometry *g;
  struct stk_mig_layout lay[LV_COUNT];
  double pf, dec, share; /* of the small serving instance */
  unsigned lent_compute; /* compute slices lent beside it */
  double delay;
};

int stk__infer_mig_init(struct stk__infer_mig *m, const struct stk_infer_opts *o, char *errmsg);
/* The controller at a tick, on MIG: whole replicas wanted, and one on the
 * small instance when that covers the rest of the rate. */
int stk__infer_mig_control(const struct stk__infer_mig *m, const struct stk_infer_opts *o,
                           struct rep *rp, double want, double cap, double cap_small, double now,
                           uint64_t *reconfigs, char *errmsg);
/* A replica done draining takes the layout it drained for. */
int stk__infer_mig_drained(const struct stk__infer_mig *m, const struct stk_infer_opts *o,
                           struct rep *r, double now, uint64_t *reconfigs, char *errmsg);

#endif
