/* Internals of the job-level simulator (stoker sim --jobs): the measured
 * application models of the Pollux OSDI'21 artifact, the job list, the
 * per-run job state the engine steps through time, and the queueing-policy
 * ops table. Nothing here is part of the public API. */
#ifndef STOKER_SIM_JOBS_IMPL_H
#define STOKER_SIM_JOBS_IMPL_H

#include <stdint.h>

#include "../base/base.h"
#include "resource.h"
#include "stoker/sim.h"

#define STK__JOBS_MAX_NODES 64
#define STK__JOBS_MAX_GPN 16 /* GPUs per node */
#define STK__JOBS_MAX_TYPES 8 /* GPU types of a heterogeneous cluster */

/* ---- applications ---------------------------------------------------- */

/* One validation run at one batch size: per epoch, the progress reached
 * at its end, iterations done, validation metric and gradient statistics. */
struct stk__jval {
  int bsz, n;
  double *progress, *iteration, *metric, *sqr, *var;
};

/* Measured (step, sync) times of one placement by local batch size. */
struct stk__jplace {
  char key[24]; /* GPUs per node, rotated to the smallest rotation */
  int nodes, replicas, n;
  double *bsz, *step, *sync;
};

struct stk__japp {
  char name[32];
  int nval;
  struct stk__jval *val; /* by batch size, ascending */
  int nplace;
  struct stk__jplace *place; /* sorted by key */
  int init_bsz, max_bsz, min_local, max_local, max_epochs;
  double *progress_at; /* progress at the end of epoch e-1, e = 0..max_epochs */
  /* Scattered (nodes, replicas, local batch) -> (step, sync) points and
   * their Delaunay tetrahedra, for placements that were not measured. */
  int npts, nsimp;
  double *pts, *vals;
  int *simp;      /* 4 point indices per tetrahedron */
  double *tinv;   /* 9 + 3 per tetrahedron: inverse edge matrix, origin */
  double lo[3], hi[3];
};

struct stk_sim_apps {
  int n;
  struct stk__japp *app;
};

const struct stk__japp *stk__japp_find(const struct stk_sim_apps *a, const char *name);
/* Measured step and sync time of a placement (GPUs on each node, zeros
 * ignored) at an atomic batch size: linear in the batch size within a
 * measured placement, else linear over the tetrahedra of the scattered
 * points (nodes capped at 16). */
void stk__japp_throughput(const struct stk__japp *a, const int *per_node, int nnodes, double bsz,
                          double *step, double *sync);
/* Gradient statistics during epoch at a total batch size (linear between
 * the measured batch sizes, clamped to their range). */
void stk__japp_grad(const struct stk__japp *a, double bsz, int epoch, double *sqr, double *var);
/* Iterations done after epoch at a batch size (as above). */
double stk__japp_iteration(const struct stk__japp *a, double bsz, int epoch);

/* ---- jobs ------------------------------------------------------------ */

struct stk__jspec {
  char *name;
  const struct stk__japp *app; /* NULL for a trace job with a fixed duration */
  double submit;
  int replicas, bsz;
  double duration; /* trace jobs: seconds of work at `replicas` GPUs */
};

struct stk_sim_jobs {
  size_t n;
  struct stk__jspec *job;
  char path[256];
  uint64_t too_large; /* rows asking for more GPUs than any cluster here */
};

/* ---- perf model (Pollux's goodput) ----------------------------------- */

struct stk__perf {
  double ac, bc, an, bn, ar, br, gamma;
};
/* Fit the step-time model to observed configurations (RMSLE objective,
 * projected quasi-Newton over box bounds, as the artifact's fit). */
/* Nonzero: the fit's objective takes its exps and logs from libm one at a
 * time even where libmvec's AVX2 ones are used (tests compare the two). */
extern int stk__fit_scalar;
void stk__perf_fit(struct stk__perf *p, int n, const int *nodes, const int *replicas,
                   const int *bsz, const double *accum_time, const double *step_time);
/* The same, through a run's memo (made on first use, *m NULL at first):
 * rows equal bit for bit to an earlier fit's give that fit's answer. */
struct stk__fitmemo;
void stk__perf_fit_memo(struct stk__fitmemo **m, struct stk__perf *p, int n, const int *nodes,
                        const int *reps, const int *bsz, const double *accum, const double *step);
void stk__fitmemo_free(struct stk__fitmemo *m);
double stk__perf_throughput(const struct stk__perf *p, int nodes, int replicas, int atomic,
                            int accum);
/* Best (goodput, atomic batch, accumulation steps) over 50 geometric
 * batch sizes up to max_bsz, as the artifact's GoodputFunction.optimize. */
double stk__goodput_opt(const struct stk__perf *p, double sqr, double var, int init_bsz,
                        int nodes, int replicas, int max_bsz, int min_local, int max_local,
                        int *atomic, int *accum);
/* The same, with the batch sizes tried kept in a run's table by the
 * application's limits and replica count (made on first use, *gc NULL at
 * first): the same answer, fewer pow calls. */
struct stk__gpcache;
double stk__goodput_opt_c(struct stk__gpcache **gc, const struct stk__perf *p, double sqr,
                          double var, int init_bsz, int nodes, int replicas, int max_bsz,
                          int min_local, int max_local, int *atomic, int *accum);
void stk__gpcache_free(struct stk__gpcache *gc);
/* How often the table's step times were found, and taken anew (tests). */
void stk__gpcache_counts(const struct stk__gpcache *gc, uint64_t *hits, uint64_t *misses);

/* ---- run state ------------------------------------------------------- */

struct stk__jstate {
  const struct stk__jspec *spec;
  int done, too_large;
  double done_at, start_at;
  double progress, rescale, attained;
  int epoch, atomic, accum, restarts; /* restarts -1 before the first start */
  int target_bsz;                      /* 0 = Pollux picks */
  int nalloc;
  double held;     /* GPUs' worth nalloc holds: nalloc, or less on MIG instances */
  uint8_t *alloc;  /* node of each GPU, nalloc entries (capacity max GPUs) */
  int place[STK__JOBS_MAX_NODES], nplace;
  /* cached true throughput of the current placement and batch */
  double c_step, c_sync;
  int c_atomic, c_valid;
  /* Pollux's fitted model */
  int nprof, capprof;
  int *prof_nodes, *prof_rep, *prof_bsz;
  double *prof_step, *prof_sync;
  struct stk__perf perf;
  int have_perf, max_prof_rep;
  double sqr, var;
  double *opt_pred; /* Optimus: predicted step time by replicas */
  void *pol; /* policy's per-job state */
  /* heterogeneous cluster: the application measured on each type, the
   * type of the current placement and its measurements, the artifact's
   * calibration (1 / slowdown) and restart time */
  const struct stk__japp *by_type[STK__JOBS_MAX_TYPES];
  const struct stk__japp *tapp;
  int type;
  /* a type-aware policy's fitted model per type (rn->fit_by_type) */
  int *prof_type;
  struct stk__perf perf_t[STK__JOBS_MAX_TYPES];
  int have_t[STK__JOBS_MAX_TYPES], maxrep_t[STK__JOBS_MAX_TYPES];
  double calib, rescale_s;
};

/* The measurements a job runs at: its type's on a heterogeneous cluster. */
static inline const struct stk__japp *stk__japp_of(const struct stk__jstate *j) {
  return j->tapp ? j->tapp : j->spec->app;
}

struct stk__jrun {
  const struct stk_sim_jobs *jobs;
  const struct stk_sim_jobs_opts *o;
  struct stk__jstate *js;
  size_t n;
  int nodes, gpn, gpus;
  int usable; /* GPUs the power cap (and GPUs lent by inference) let run */
  int usable_base; /* the power cap's */
  uint64_t lend_stops; /* jobs stopped to give GPUs back to inference */
  int fit;    /* jobs keep Pollux's fitted model */
  int fit_by_type; /* one model per GPU type (Sia) */
  double now;
  /* the policy writes the new allocation of each active job here */
  int *new_n;
  uint8_t **new_alloc;
  void *pol; /* policy's run state */
  /* the GPUs as the queueing policies (fifo, sjf, tiresias, multi,
   * carbon) see them: whole GPUs, or a placement policy's pods (o->placer) */
  struct stk__sim_res *res;
  /* heterogeneous cluster (ntypes > 0): nodes are virtual nodes of gpn
   * GPUs; the type and physical node (numbered across types) of each */
  int ntypes;
  const struct stk_sim_gpu_type *types;
  int vtype[STK__JOBS_MAX_NODES], vphys[STK__JOBS_MAX_NODES];
  int type_rank[STK__JOBS_MAX_TYPES]; /* 0 = fastest */
  struct stk__fitmemo *fitmemo; /* the run's fits by their rows (jobs_fitmemo.c) */
  struct stk__gpcache *gpcache; /* the goodput search's batch sizes (jobs_goodput.c) */
};

/* A queueing policy: given the active jobs (arrived, not done), write
 * rn->new_alloc / new_n for each of them. */
struct stk__jpolicy {
  const char *name, *summary;
  int elastic; /* sizes jobs itself (Optimus, Pollux) */
  int hetero;  /* needs a heterogeneous cluster (Gavel, Sia) */
  int queue;   /* starts jobs through rn->res, so a placer applies */
  int (*init)(struct stk__jrun *rn);
  void (*fini)(struct stk__jrun *rn);
  int (*schedule)(struct stk__jrun *rn, const size_t *active, size_t nactive);
};

extern const struct stk__jpolicy stk__jpol_fifo, stk__jpol_sjf, stk__jpol_tiresias,
    stk__jpol_optimus, stk__jpol_pollux, stk__jpol_multi, stk__jpol_carbon, stk__jpol_gavel, stk__jpol_sia,
    stk__jpol_sia_glpk;
/* Policy sia's exact solver takes this cluster (STK_EINVAL with errmsg if
 * its table would be too large: then sia-glpk is the way). */
int stk__sia_exact_fits(const struct stk__jrun *rn, char *errmsg);
const struct stk__jpolicy *stk__jpolicy_get(const char *name);

/* ---- workload models (jobs_work.c) ------------------------------------ */

/* What the job engine asks of a kind of job. The engine pays restart
 * delays, counts energy and asks the resource model for GPUs; the rest is
 * the workload's. Two kinds: duration jobs (a trace row: seconds of work
 * at its GPUs) and measured-application jobs (the Pollux and Sia
 * workloads: epochs at the goodput their placement and batch size give). */
struct stk__jwork_ops {
  const char *name;
  /* GPUs the job asks for (a queueing policy starts it at this size; an
   * elastic policy sizes it itself) */
  int (*asks)(const struct stk__jspec *s);
  /* Its allocation changed to j->place (nonzero): choose what runs there
   * (the batch size). NULL: nothing to choose. */
  void (*placed)(struct stk__jrun *rn, struct stk__jstate *j);
  /* Work `seconds` at its allocation, el seconds into the interval that
   * starts at rn->now; sets j->done and j->done_at when it finishes. */
  void (*step)(struct stk__jrun *rn, struct stk__jstate *j, double seconds, double el);
  /* Work left, in whole-job seconds at the GPUs it asks for. */
  double (*remaining)(struct stk__jrun *rn, struct stk__jstate *j);
};

extern const struct stk__jwork_ops stk__jwork_duration, stk__jwork_measured;

static inline const struct stk__jwork_ops *stk__jwork_of(const struct stk__jspec *s) {
  return s->app ? &stk__jwork_measured : &stk__jwork_duration;
}

/* Step time the job would have at n replicas packed 4 per node with its
 * target batch size (Optimus's oracle), cached. */
double stk__jpredict_step(struct stk__jrun *rn, struct stk__jstate *j, int n);
/* Remaining work of a job, in whole-job seconds at its requested GPUs
 * (the oracle SJF and the multi-objective policy use it): its workload
 * model's remaining. */
double stk__jremaining(struct stk__jrun *rn, struct stk__jstate *j);
/* Carbon intensity (g/kWh) at time t. */
double stk__jcarbon_at(const struct stk_sim_jobs_opts *o, double t);
/* Heterogeneous clusters (jobs_hetero.c): check and lay out the types
 * (virtual nodes, each job's measurements per type); keep only the GPUs of
 * one type of a placement that spans types; the type of a placement. */
int stk__jhet_init(struct stk__jrun *rn, char *errmsg);
int stk__jhet_repair(const struct stk__jrun *rn, uint8_t *alloc, int n);
/* Group a placement's GPUs by physical node: the count on each, in order
 * of first appearance; returns the number of nodes. */
int stk__jhet_place(const struct stk__jrun *rn, const uint8_t *alloc, int n, int *place);

/* Fixed-batch local batch and accumulation for n replicas. */
void stk__jlocal_bsz(const struct stk__japp *a, int bsz, int replicas, int *atomic, int *accum);

/* "YYYY-MM-DD HH:MM:SS" (jobs_load.c): 1 when s has that shape (*valid:
 * a real day and time, *out its seconds since 1970), 0 otherwise. */
int stk__sim_parse_date(const char *s, double *out, int *valid);

#endif
