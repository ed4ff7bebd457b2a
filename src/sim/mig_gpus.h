/* A cluster of MIG GPUs and where one request's instances go: each GPU's
 * instances (profile, start slot, the request running on it), the
 * fragmentation score, and the places for an instance (reuse an idle one,
 * create one in free slices, or destroy idle instances to make room).
 * Shared by the online MIG experiment (mig_online.c) and the job engine's
 * MIG resource model (resource_mig.c). Nothing here is public API. */
#ifndef STOKER_SIM_MIG_GPUS_H
#define STOKER_SIM_MIG_GPUS_H

#include <stdint.h>

#include "../base/base.h"
#include "stoker/mig_online.h"

#define STK__MIG_NO_REQ (-1)
#define STK__MIG_MAX_PROFILES 16

struct stk__mig_inst {
  uint8_t profile, start;
  int32_t req; /* running request, STK__MIG_NO_REQ when idle */
};
struct stk__mig_gpu {
  uint8_t n;
  struct stk__mig_inst in[STK_MIG_MAX_INSTANCES];
  /* memory slices and compute of the busy instances and of all, kept by
   * stk__mig_recount() after every change */
  uint16_t busy, bc, all, ac;
};

/* A place for one instance on one GPU. */
enum { STK__MIG_REUSE, STK__MIG_CREATE, STK__MIG_RECONF };
struct stk__mig_cand {
  int ok;
  uint32_t gpu;
  uint8_t action, slot, idx; /* idx: the reused instance */
  double dfrag;              /* fragmentation added */
};

/* The GPUs and the placement rule: policy STK_MIG_FIFO first fit without
 * removing instances, STK_MIG_FIFO_RECONF first fit destroying idle
 * instances where no GPU fits without, STK_MIG_AWARE and
 * STK_MIG_MULTI least fragmentation added (MULTI adds w_reconf for a
 * reconfiguration). w[p]: profile p's share of the requests. */
struct stk__mig_gpus {
  const struct stk_mig_geometry *g;
  struct stk__mig_gpu *gpu;
  uint32_t n;
  enum stk_mig_policy policy;
  double w_frag, w_reconf;
  double w[STK__MIG_MAX_PROFILES];
  float frag[256][STK_MIG_COMPUTE_SLICES + 1];
  uint8_t have[256][STK_MIG_COMPUTE_SLICES + 1];
  uint64_t created, reconfigs;
};

static inline unsigned stk__mig_slices(const struct stk_mig_profile *p, unsigned start) {
  return ((1u << p->memory) - 1) << start;
}

void stk__mig_recount(const struct stk__mig_gpus *m, struct stk__mig_gpu *G);
/* Ordering of two places of one request: 1 when a is better than b. */
int stk__mig_better(const struct stk__mig_gpus *m, const struct stk__mig_cand *a,
                    const struct stk__mig_cand *b);
/* The best place for one instance of profile pi on GPU gi (ok 0: none). */
struct stk__mig_cand stk__mig_best_on(struct stk__mig_gpus *m, uint32_t gi, unsigned pi);
/* The ordering cost of k places (weighted fragmentation and reconfigurations). */
double stk__mig_cost(const struct stk__mig_gpus *m, const struct stk__mig_cand *c, unsigned k);
/* Places for count instances of profile on distinct GPUs: first fit takes
 * the first GPUs that can, the others the best. 1 with *cost, or 0 when
 * they do not fit. */
int stk__mig_choose(struct stk__mig_gpus *m, unsigned profile, unsigned count,
                    struct stk__mig_cand *out, double *cost);
/* Take place c for request req: reuse, create, or destroy the idle
 * instances in the way and create (counted in created, reconfigs); *created
 * set when an instance was made. Every layout made is checked against
 * NVIDIA's rules (STK_EINVAL: an internal error). */
int stk__mig_apply(struct stk__mig_gpus *m, const struct stk__mig_cand *c, unsigned profile,
                   int32_t req, int *created, char *errmsg);
/* Request req leaves GPU gi: its instance stays, idle. */
void stk__mig_release(struct stk__mig_gpus *m, uint32_t gi, int32_t req);

#endif
