/* Internals of the ParvaGPU reproduction shared by its files: the loaded
 * profiles and SLOs, one service's candidate points, and the GPUs being
 * filled. Not public API. */
#ifndef STOKER_PARVA_IMPL_H
#define STOKER_PARVA_IMPL_H

#include <stdint.h>

#include "../base/base.h"
#include "stoker/mig.h"

/* One profiled point: an instance of size compute slices running procs MPS
 * processes of batch; trp is all processes' requests/s and ltc the latency
 * in ms, both in float as the artifact computes them (rate per process x
 * processes; seconds x 1000). */
struct parva_point {
  uint8_t size, procs;
  uint16_t batch;
  float trp, ltc;
};

struct stk_parva {
  unsigned nmodels, nscen;
  char **names;
  struct parva_point **pts; /* per model, in file order */
  size_t *npts;
  double *rate, *slo; /* [scen * nmodels + model]; rate 0 where N/A */
};

/* The sizes the artifact profiles, in its order, and the A100 80 GB profile
 * of each. */
#define PARVA_NSIZES 5
extern const uint8_t stk__parva_sizes[PARVA_NSIZES];
int stk__parva_profile_of(unsigned size);

/* A service in one scenario: the artifact's integer-truncated rate and SLO
 * (it reads them with atoi), the latency bound a point must be under
 * (SLO / 2 x 0.9 in float), and the best point of each size under it. */
struct parva_svc {
  int active;
  float rate_i, slo_i, bound;
  double rate; /* the file's value */
  const struct parva_point *best[PARVA_NSIZES];
};
void stk__parva_service(const struct stk_parva *p, unsigned scen, unsigned m,
                        struct parva_svc *s);

/* GPUs being filled: a layout on the A100 80 GB and the point and model of
 * each instance (parallel to layout.inst). */
struct parva_gpu {
  struct stk_mig_layout layout;
  const struct parva_point *pt[STK_MIG_MAX_INSTANCES];
  uint16_t model[STK_MIG_MAX_INSTANCES];
  unsigned used;
};
struct parva_fleet {
  struct parva_gpu *gpu;
  size_t n, cap;
  unsigned proven; /* fewest GPUs any plan needs, when a search proved it */
};
const struct stk_mig_geometry *stk__parva_geom(void);
/* Place a segment on gpu at start, or at the first free slot in the
 * artifact's order for its size (PARVA_ARTIFACT_SLOT: a 3g only at slot 4)
 * or in any valid slot (PARVA_ANY_SLOT); 0, or -1 when it does not fit. */
#define PARVA_ARTIFACT_SLOT (-1)
#define PARVA_ANY_SLOT (-2)
int stk__parva_put(struct parva_gpu *g, unsigned model, const struct parva_point *pt, int start);
/* A new empty GPU at the end; NULL without memory. */
struct parva_gpu *stk__parva_grow(struct parva_fleet *f);
/* Fill out from the fleet: used GPUs renumbered in order. */
int stk__parva_emit(const struct stk_parva *p, unsigned scen, const struct parva_fleet *f,
                    struct stk_parva_plan *out, char *errmsg);

int stk__parva_artifact(const struct stk_parva *p, unsigned scen, struct parva_fleet *f,
                        char *errmsg);
int stk__parva_packed(const struct stk_parva *p, unsigned scen, struct parva_fleet *f,
                      char *errmsg);
/* Whether the services fit on k GPUs by exhaustive search (parva_proof.c):
 * 1 with each service's composition (counts of 1g..7g) and each GPU's set
 * of sizes, 0 when no plan fits, -1 when the search is too large. */
int stk__parva_fits(const struct parva_svc *svc, unsigned nsvc, unsigned k,
                    uint8_t (*comp_out)[PARVA_NSIZES], uint8_t (*gpu_out)[PARVA_NSIZES]);
/* Fewest compute slices one service needs under its bound. */
unsigned stk__parva_min_slices(const struct parva_svc *s);

#endif
