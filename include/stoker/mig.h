/* MIG partitions for the simulator: NVIDIA's Multi-Instance GPU geometry of
 * the A100 40 GB, A100 80 GB and H100 80 GB as data (profiles, their compute
 * and memory slices, valid start slots, what may coexist, reconfiguration),
 * and ParvaGPU (SC'24): MIG + MPS segments for inference services sized
 * from profiles and packed onto GPUs, reproduced from the artifact's data,
 * beside an allocator of stoker's own that packs exactly.
 *
 * Geometry, as NVIDIA's MIG user guide and NVML state it: a GPU has 7
 * compute slices and 8 memory slices; a GPU instance of a profile starts at
 * one of the profile's start slots and occupies a run of memory slices from
 * there; two instances coexist exactly when their memory slices do not
 * overlap; at most one instance with media extensions (+me) per GPU.
 * Every call that can fail returns 0 or a negative STK_E* code with one
 * sentence in errmsg (STK_ERRMSG_MAX bytes, may be NULL). */
#ifndef STOKER_MIG_H
#define STOKER_MIG_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define STK_MIG_COMPUTE_SLICES 7
#define STK_MIG_MEMORY_SLICES 8
#define STK_MIG_MAX_INSTANCES 7

struct stk_mig_profile {
  const char *name;   /* "3g.40gb" */
  uint8_t compute;    /* compute slices (GPCs) */
  uint8_t memory;     /* memory slices occupied from the start slot */
  uint8_t media;      /* 1: has the media extensions (+me) */
  uint8_t nstarts;    /* valid start slots (memory-slice index) */
  uint8_t starts[STK_MIG_MEMORY_SLICES];
};

struct stk_mig_geometry {
  const char *name;   /* "a100-40gb", "a100-80gb", "h100-80gb" */
  const char *product;
  unsigned memory_gb;
  size_t nprofiles;
  const struct stk_mig_profile *profiles;
};

/* The geometry of a GPU by name (case-insensitive), NULL when unknown;
 * stk_mig_geometry_at(i) for i < stk_mig_geometry_count() lists them. */
STK_EXPORT const struct stk_mig_geometry *stk_mig_geometry_find(const char *name);
STK_EXPORT size_t stk_mig_geometry_count(void);
STK_EXPORT const struct stk_mig_geometry *stk_mig_geometry_at(size_t i);
/* Index of a profile by name ("1g.10gb", "3g"), or -1. A bare "Ng" names
 * the profile of N compute slices without +me and with the fewest memory
 * slices. */
STK_EXPORT int stk_mig_profile_find(const struct stk_mig_geometry *g, const char *name);

/* A GPU's instances: profile index and start slot of each. */
struct stk_mig_instance {
  uint8_t profile, start;
};
struct stk_mig_layout {
  uint8_t n;
  struct stk_mig_instance inst[STK_MIG_MAX_INSTANCES];
};

/* 0 when every instance starts at a valid slot of its profile and no two
 * overlap (and at most one has +me); else STK_EINVAL naming the first
 * offending instance. */
STK_EXPORT int stk_mig_layout_check(const struct stk_mig_geometry *g,
                                    const struct stk_mig_layout *l, char *errmsg);
/* Add an instance of profile at start (start < 0: the first free slot in
 * the profile's own order); 0, or STK_EINVAL/STK_ENOSPC with the reason.
 * The layout is unchanged on failure. */
STK_EXPORT int stk_mig_layout_add(const struct stk_mig_geometry *g, struct stk_mig_layout *l,
                                  int profile, int start, char *errmsg);
/* Compute slices in use. */
STK_EXPORT unsigned stk_mig_layout_compute(const struct stk_mig_geometry *g,
                                           const struct stk_mig_layout *l);
/* Distinct valid layouts (sets of placed instances) using only the profiles
 * in mask (bit i = profile i): all of them, and the maximal ones (to which
 * no instance of those profiles can be added). */
STK_EXPORT void stk_mig_count_layouts(const struct stk_mig_geometry *g, uint32_t mask,
                                      uint64_t *all, uint64_t *maximal);

/* Reconfiguration: a GPU's layout changes to target only when every
 * instance that the change removes is idle (bit i of busy = instance i of
 * the current layout runs work); kept instances (same profile and start)
 * keep running. New instances are usable from now + delay_s. Returns 0 and
 * sets *ready_at, or STK_EBUSY naming the busy instance, or STK_EINVAL for
 * an invalid target. */
STK_EXPORT int stk_mig_reconfigure(const struct stk_mig_geometry *g, struct stk_mig_layout *cur,
                                   uint32_t busy, const struct stk_mig_layout *target,
                                   double now, double delay_s, double *ready_at, char *errmsg);
/* The delay stoker assumes for creating GPU instances (seconds); stated,
 * not measured here: docs/sim.md. */
#define STK_MIG_RECONFIG_DELAY_S 5.0

/* ---- ParvaGPU ---------------------------------------------------------- */

/* The artifact's inputs: prof_data/MODEL.csv and SLO/SLO_{req_rate,latency}.csv. */
struct stk_parva;

STK_EXPORT int stk_parva_load(struct stk_parva **out, const char *dir, char *errmsg);
STK_EXPORT void stk_parva_free(struct stk_parva *p);
STK_EXPORT unsigned stk_parva_scenarios(const struct stk_parva *p);
STK_EXPORT unsigned stk_parva_models(const struct stk_parva *p);
STK_EXPORT const char *stk_parva_model(const struct stk_parva *p, unsigned m);

enum stk_parva_method {
  STK_PARVA_ARTIFACT, /* the artifact's configurator and allocator */
  STK_PARVA_PACKED    /* fewest compute slices per service, packed exactly */
};

/* One GPU segment: a MIG instance serving one model with a batch size and
 * a number of MPS processes, on a GPU at a start slot. */
struct stk_parva_segment {
  uint16_t model;
  uint8_t size, procs; /* compute slices; MPS processes */
  uint16_t batch;
  uint8_t start;
  uint32_t gpu;
  double rate, latency_ms; /* the profile's throughput (all processes) and latency */
};

struct stk_parva_service {
  int active;           /* has an SLO in this scenario */
  double rate, slo_ms;  /* requested requests/s and latency SLO */
  double capacity;      /* sum of its segments' rates */
  double worst_ms;      /* its slowest segment's latency */
};

struct stk_parva_plan {
  unsigned scenario, gpus, models;
  unsigned slices;      /* compute slices used */
  unsigned lower_bound; /* no plan under the same latency rule needs fewer GPUs */
  size_t nseg;
  struct stk_parva_segment *seg; /* by GPU, then start slot */
  struct stk_parva_service *svc;
};

/* Plan scenario (1-based) with method. Fails with STK_EINVAL naming the
 * model when no segment meets its latency SLO. stk_parva_plan_free()
 * releases it. */
STK_EXPORT int stk_parva_plan(const struct stk_parva *p, unsigned scenario,
                              enum stk_parva_method method, struct stk_parva_plan *out,
                              char *errmsg);
STK_EXPORT void stk_parva_plan_free(struct stk_parva_plan *plan);
/* Check a plan: each segment is a measured point of its model whose latency
 * is under the artifact's bound (SLO / 2 x 0.9), each service's capacity
 * covers its rate, and each GPU's instances form a valid A100 80 GB layout.
 * 0, or STK_EINVAL naming the first violation. */
STK_EXPORT int stk_parva_check(const struct stk_parva *p, const struct stk_parva_plan *plan,
                               char *errmsg);
/* The GPU counts of the artifact's deployment maps, scenario 1..6. */
STK_EXPORT unsigned stk_parva_published_gpus(unsigned scenario);

#ifdef __cplusplus
}
#endif
#endif
