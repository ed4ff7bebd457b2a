/* The GPU-cluster simulator: a discrete-event model of a cluster of nodes
 * whose GPUs can be shared by fractional pods, placement policies behind one
 * ops table, and the two experiments of the FGD paper (Weng et al., USENIX
 * ATC'23): arrival-only inflation to a target share of GPU capacity, and a
 * replay of a trace's real creation and deletion times with a FIFO queue.
 *
 * Lifetimes: a cluster and a workload are loaded once, are read-only
 * afterwards and may be shared by any number of concurrent runs; results
 * are owned by the caller and released with the matching _free(). Every
 * call that can fail returns 0 or a negative STK_E* code and, when errmsg
 * is given (STK_ERRMSG_MAX bytes), one sentence that names the file, line
 * and cause. */
#ifndef STOKER_SIM_H
#define STOKER_SIM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "stoker/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most GPUs one node may have, and most GPU models one cluster may name. */
#define STK_SIM_MAX_GPUS 16
#define STK_SIM_MAX_MODELS 63

/* ---- cluster --------------------------------------------------------- */

/* A node list (openb_node_list_*.csv: sn, cpu_milli, memory_mib, gpu,
 * model), immutable once loaded. */
struct stk_sim_cluster;

struct stk_sim_cluster_info {
  uint32_t nodes, gpu_nodes, models;
  uint64_t gpus, cpu_milli, memory_mib;
};

/* Load a node list; path "-" reads stdin. Malformed rows fail with
 * STK_EFORMAT and "FILE:LINE: cause"; an empty list with STK_EEMPTY. */
STK_EXPORT int stk_sim_cluster_load(struct stk_sim_cluster **out, const char *path, char *errmsg);
STK_EXPORT void stk_sim_cluster_free(struct stk_sim_cluster *c);
STK_EXPORT void stk_sim_cluster_info(const struct stk_sim_cluster *c, struct stk_sim_cluster_info *info);

/* ---- workload -------------------------------------------------------- */

/* A pod list (openb_pod_list_*.csv) reduced while it streams in to a
 * histogram of distinct pod kinds (CPU, memory, GPU count, milli-GPU per
 * GPU, GPU-model constraint), so its memory does not grow with the number
 * of rows. Experiment mode samples from it. */
struct stk_sim_workload;

struct stk_sim_workload_info {
  uint64_t pods;                  /* rows read */
  uint64_t cpu_pods;              /* no GPU */
  uint64_t share_pods;            /* one GPU, fraction of it */
  uint64_t gpu_pods;              /* whole GPUs, one or more */
  uint64_t gpu_milli;             /* total GPU request in milli-GPU */
  uint64_t never_fit;             /* pods no node of the cluster could host even empty */
  uint64_t unknown_model_pods;    /* pods naming a GPU model the cluster lacks */
  uint32_t kinds, specs, typical; /* distinct kinds, resource specs, typical specs */
  char unknown_models[256];       /* the unknown model names, comma separated */
};

/* Stream a pod list in; the cluster resolves GPU-model constraints and
 * decides which pods could never fit, so the workload runs on that cluster
 * only, which must outlive it. */
STK_EXPORT int stk_sim_workload_load(struct stk_sim_workload **out, const struct stk_sim_cluster *c,
                          const char *path, char *errmsg);
STK_EXPORT void stk_sim_workload_free(struct stk_sim_workload *w);
STK_EXPORT void stk_sim_workload_info(const struct stk_sim_workload *w, struct stk_sim_workload_info *info);

/* ---- policies -------------------------------------------------------- */

/* The placement policies, in table order: Random, DotProd, GpuClustering,
 * GpuPacking, BestFit, FGD. Index i < stk_sim_policy_count(). */
STK_EXPORT size_t stk_sim_policy_count(void);
STK_EXPORT const char *stk_sim_policy_name(size_t i);
STK_EXPORT const char *stk_sim_policy_summary(size_t i);
/* Index of a policy by case-insensitive name, or STK_EINVAL. */
STK_EXPORT int stk_sim_policy_find(const char *name);

/* ---- experiment mode ------------------------------------------------- */

/* Set with stk_sim_run_opts_init(): the library reads only struct_size bytes
 * (later fields take their defaults) and refuses a larger struct, naming
 * it (docs/internals/api.md). */
struct stk_sim_run_opts {
  size_t struct_size; /* set by stk_sim_run_opts_init(); 0 = this header's */
  const char *policy; /* NULL = "FGD" */
  uint64_t seed;
  double inflate; /* arrived GPU demand to reach, as a share of capacity; 0 = 1.3 */
};
#define stk_sim_run_opts_init(o) stk_sim_run_opts_init_sized((o), sizeof *(o))
STK_EXPORT void stk_sim_run_opts_init_sized(struct stk_sim_run_opts *o, size_t size);

/* One arrival-only run. Curves are indexed by arrived GPU demand in whole
 * percent of capacity, 0..npct-1; a percentage no arrival fell on holds
 * the mean of its neighbours, or NAN when they are empty too. */
struct stk_sim_result {
  char policy[32];
  uint64_t seed;
  double inflate;
  uint32_t npct;
  double *alloc;      /* allocated GPUs, % of capacity */
  double *frag;       /* fragmented idle GPUs, in GPUs (milli / 1000) */
  double *frag_ratio; /* fragmented share of idle GPUs, % */
  uint64_t total_gpu_milli, arrived_gpu_milli, used_gpu_milli;
  uint64_t pods, placed, failed, failed_never_fit;
  uint64_t failed_by_class[4]; /* cpu, share, one GPU, multi-GPU */
  uint64_t events;             /* heap events processed */
  double final_alloc, final_frag, final_frag_ratio;
  double wall_s; /* time spent simulating (loading excluded) */
  double cpu_s;  /* CPU time of the simulating thread */
};

STK_EXPORT int stk_sim_run(const struct stk_sim_cluster *c, const struct stk_sim_workload *w,
                const struct stk_sim_run_opts *opts, struct stk_sim_result *res, char *errmsg);
STK_EXPORT void stk_sim_result_free(struct stk_sim_result *r);
/* Allocation at an arrived percentage (linear between whole percents, NAN
 * outside the curve). */
STK_EXPORT double stk_sim_result_at(const struct stk_sim_result *r, double pct);

/* Policies x seeds, run by a pool of threads. results receives a malloc'ed
 * array of npolicies * seeds results, policy-major, which the caller frees
 * with stk_sim_results_free(). progress, if set, is called from the
 * calling thread after each finished run. */
/* Set with stk_sim_experiment_opts_init(): the library reads only struct_size bytes
 * (later fields take their defaults) and refuses a larger struct, naming
 * it (docs/internals/api.md). */
struct stk_sim_experiment_opts {
  size_t struct_size; /* set by stk_sim_experiment_opts_init(); 0 = this header's */
  const char *const *policies; /* NULL = all */
  size_t npolicies;
  uint64_t seed;    /* first seed (the paper's artifact used 42..51) */
  uint32_t seeds;   /* 0 = 10 */
  double inflate;   /* 0 = 1.3 */
  uint32_t threads; /* 0 = online CPUs */
  void (*progress)(void *ctx, uint32_t done, uint32_t total);
  void *ctx;
  volatile int *cancel; /* set non-zero to stop after the runs in flight */
};
#define stk_sim_experiment_opts_init(o) stk_sim_experiment_opts_init_sized((o), sizeof *(o))
STK_EXPORT void stk_sim_experiment_opts_init_sized(struct stk_sim_experiment_opts *o, size_t size);
STK_EXPORT int stk_sim_experiment(const struct stk_sim_cluster *c, const struct stk_sim_workload *w,
                       const struct stk_sim_experiment_opts *opts, struct stk_sim_result **results,
                       size_t *nresults, char *errmsg);
STK_EXPORT void stk_sim_results_free(struct stk_sim_result *r, size_t n);

/* ---- replay mode ----------------------------------------------------- */

/* A sample of the cluster after all events of one instant. */
struct stk_sim_sample {
  int64_t time;            /* trace seconds */
  double alloc;            /* allocated GPUs, % of capacity */
  double frag, frag_ratio; /* as in stk_sim_result */
  uint64_t running, queued;
};

/* One pod's fate: started at start (-1 if it never did) after waiting
 * delay = start - creation seconds; outcome is "placed", "queued" (still
 * waiting when the trace ended) or "never_fits". node is the node's sn. */
struct stk_sim_pod_record {
  const char *name, *node, *outcome;
  int64_t creation, start, delay;
};

/* Set with stk_sim_replay_opts_init(): the library reads only struct_size bytes
 * (later fields take their defaults) and refuses a larger struct, naming
 * it (docs/internals/api.md). */
struct stk_sim_replay_opts {
  size_t struct_size; /* set by stk_sim_replay_opts_init(); 0 = this header's */
  const char *policy; /* NULL = "FGD" */
  uint64_t seed;
  double compress; /* arrivals this many times denser (creation times
                      divided by it, lifetimes kept); 0 = 1 */
  void (*on_sample)(void *ctx, const struct stk_sim_sample *s);
  void (*on_pod)(void *ctx, const struct stk_sim_pod_record *p);
  void *ctx;
};
#define stk_sim_replay_opts_init(o) stk_sim_replay_opts_init_sized((o), sizeof *(o))
STK_EXPORT void stk_sim_replay_opts_init_sized(struct stk_sim_replay_opts *o, size_t size);

struct stk_sim_replay_result {
  char policy[32];
  uint64_t seed;
  uint64_t pods, placed, placed_after_wait, still_queued, never_fit;
  double delay_mean, delay_p50, delay_p90, delay_p99, delay_max; /* seconds, placed pods */
  double alloc_mean, alloc_peak; /* time-weighted mean and peak, % */
  double frag_ratio_mean;        /* time-weighted, % */
  int64_t t_first, t_last;
  uint64_t events, max_queue;
  double wall_s, cpu_s;
};

/* Replay a pod list with creation_time and deletion_time columns: each pod
 * arrives at its creation time, waits in a FIFO queue while it fits
 * nowhere, and then runs for deletion - creation seconds. Rows need not be
 * sorted. */
STK_EXPORT int stk_sim_replay(const struct stk_sim_cluster *c, const char *pods_path,
                   const struct stk_sim_replay_opts *opts, struct stk_sim_replay_result *res,
                   char *errmsg);

/* ---- reports --------------------------------------------------------- */

/* Published allocation (% of GPUs) for a trace and policy at 100 or 130%
 * arrived, from the paper's artifact; NAN when unknown. trace is the pod
 * list's file name (a path is reduced to its base name). */
STK_EXPORT double stk_sim_published(const char *trace, const char *policy, int at_pct);

/* The policy x seed table: mean allocation at 100% and 130% (or the run's
 * end when inflate is smaller), seeds, failures, and the published figure
 * where one is known for trace (may be NULL). */
STK_EXPORT void stk_sim_write_table(FILE *f, const struct stk_sim_result *r, size_t n, const char *trace);
/* Everything in JSON: per policy means and per run curves. */
STK_EXPORT void stk_sim_write_json(FILE *f, const struct stk_sim_result *r, size_t n, const char *trace);
/* One row per policy, seed and arrived percentage (seed "mean" for the
 * mean over seeds): policy,seed,arrived_pct,alloc_pct,frag_gpus,frag_ratio_pct. */
STK_EXPORT void stk_sim_write_csv(FILE *f, const struct stk_sim_result *r, size_t n);
/* Allocation curves, mean over seeds, one line per policy. */
STK_EXPORT void stk_sim_write_svg(FILE *f, const struct stk_sim_result *r, size_t n, const char *title);

/* ---- jobs mode ------------------------------------------------------- */

/* Jobs that arrive, wait, run on whole GPUs, resize and finish, on a
 * cluster of identical nodes (16 x 4 GPUs by default), as in the Pollux
 * OSDI'21 artifact: each job's progress follows its application's measured
 * throughput (by placement and local batch size) and statistical
 * efficiency (by gradient noise); policies are asked for allocations every
 * scheduling interval, and a job whose allocation changes pays a restart
 * delay. Trace jobs (Philly) instead carry a fixed duration at their GPU
 * count. */

/* The measured applications: a directory with one subdirectory per
 * application (placements.csv, scalability.csv, validation-BSZ.csv). */
struct stk_sim_apps;
STK_EXPORT int stk_sim_apps_load(struct stk_sim_apps **out, const char *traces_dir, char *errmsg);
/* The same for one GPU type of the Sia SOSP'23 artifact ("aws", "rtx",
 * "dgx-ext", "quad", "dgx", "azure"): placements-TYPE.csv and
 * scalability-TYPE.csv of each application that has them. */
STK_EXPORT int stk_sim_apps_load_type(struct stk_sim_apps **out, const char *traces_dir,
                                      const char *type, char *errmsg);

/* One GPU type of a heterogeneous cluster: its nodes, GPUs per node and
 * the applications' measurements on it. */
struct stk_sim_gpu_type {
  const char *name; /* aws (T4), rtx (RTX 2080Ti), dgx-ext (A100), quad, ... */
  uint32_t nodes, gpus_per_node;
  const struct stk_sim_apps *apps;
};
STK_EXPORT void stk_sim_apps_free(struct stk_sim_apps *a);

/* A job list: either the artifact's workload CSV (name, time, application,
 * num_replicas, batch_size) or a trace with fixed durations (columns
 * submit_time or time, num_gpus or num_replicas, duration; the Philly
 * trace's jobid,submit_time,num_gpus,duration, with optional status).
 * apps may be NULL for a trace. Malformed rows fail with "FILE:LINE:
 * cause"; an unknown application names it; an empty list is STK_EEMPTY. */
struct stk_sim_jobs;
STK_EXPORT int stk_sim_jobs_load(struct stk_sim_jobs **out, const struct stk_sim_apps *apps, const char *path,
                      char *errmsg);
STK_EXPORT void stk_sim_jobs_free(struct stk_sim_jobs *j);
STK_EXPORT size_t stk_sim_jobs_count(const struct stk_sim_jobs *j);

/* The queueing policies, in table order: fifo, sjf, tiresias, optimus,
 * pollux, multi, carbon, and for heterogeneous clusters gavel and sia. */
STK_EXPORT size_t stk_sim_job_policy_count(void);
STK_EXPORT const char *stk_sim_job_policy_name(size_t i);
STK_EXPORT const char *stk_sim_job_policy_summary(size_t i);
STK_EXPORT int stk_sim_job_policy_find(const char *name);

struct stk_sim_jobs_sample {
  double time;
  uint32_t gpus_alloc, running, queued;
  double power_w;
};

/* Set with stk_sim_jobs_opts_init(): the library reads only struct_size bytes
 * (later fields take their defaults) and refuses a larger struct, naming
 * it (docs/internals/api.md). */
struct stk_sim_jobs_opts {
  size_t struct_size; /* set by stk_sim_jobs_opts_init(); 0 = this header's */
  const char *policy;       /* NULL = "tiresias" */
  uint32_t nodes, gpus_per_node; /* 0 = 16 and 4 */
  /* A heterogeneous cluster (nodes and gpus_per_node are then ignored):
   * the Sia artifact's model. Each job runs on one type at that type's
   * measured throughput, calibrated by the artifact's per-application
   * slowdowns; a job that starts, resizes or moves pays its application's
   * restart time (the artifact's, not restart_delay); a placement a
   * type-blind policy spreads over types keeps only the GPUs of the type
   * it has most of (ties to the faster type). Type-blind policies see
   * every node as nodes of the smallest GPUs-per-node. */
  const struct stk_sim_gpu_type *types;
  uint32_t ntypes;
  double interval;          /* scheduling period, s; 0 = 60 */
  double restart_delay;     /* s a job pays after each allocation change; 0 = 30, <0 = none */
  double horizon;           /* stop at this simulated time, s; 0 = 10^8 */
  /* energy: watts of one GPU idle and busy, price per kWh, carbon
   * intensity g/kWh (constant, or a series of one value per carbon_step_s
   * seconds, repeated) */
  double idle_w, busy_w, price_kwh, carbon_g_kwh;
  const double *carbon_series;
  size_t ncarbon;
  double carbon_step_s;
  double power_cap_w; /* 0 = none: jobs wait while busy power would pass it;
                       * a cap that leaves no GPU able to work is STK_EINVAL */
  /* GPUs left to training round by round (inference beside training,
   * stoker/infer.h): the round from k x interval uses at most
   * usable_series[k] GPUs (the last value past the end); running jobs over
   * it are stopped, the latest started first, before the policy runs.
   * NULL = every GPU. Not with types. */
  const uint32_t *usable_series;
  size_t nusable;
  int keep_samples;   /* record one sample per round */
  void (*progress)(void *ctx, double now, size_t done, size_t total);
  void *ctx;
  volatile int *cancel; /* set non-zero to stop a run (STK_ECANCELED) */
  /* NULL = jobs take GPUs from the nodes with the most free. Else a
   * placement policy (FGD, BestFit, ...; stk_sim_policy_find) places the
   * jobs of fifo, sjf, tiresias, multi and carbon as pods of whole GPUs on the
   * placement replay's node state: a job of up to gpus_per_node GPUs on
   * one node, a wider one on whole nodes plus one node for the rest. A job
   * waits while the policy finds no such room. Not with types. */
  const char *placer;
};
#define stk_sim_jobs_opts_init(o) stk_sim_jobs_opts_init_sized((o), sizeof *(o))
STK_EXPORT void stk_sim_jobs_opts_init_sized(struct stk_sim_jobs_opts *o, size_t size);

struct stk_sim_job_record {
  const char *name, *app;
  double submit, start, finish; /* start/finish -1 when it never did */
  double jct, queue_s, gpu_s, energy_kwh;
  int restarts, done;
};

struct stk_sim_jobs_result {
  char policy[32];
  size_t jobs, completed, unfinished, too_large, starved; /* starved: waited > 24 h */
  double jct_mean, jct_p50, jct_p99, jct_max; /* over the completed jobs only */
  /* the mean JCT over all jobs with each unfinished one counted up to the
   * end of the run (at least 0): a lower bound on the true mean when
   * unfinished > 0, equal to jct_mean when every job finished; NaN when
   * too_large > 0 (those jobs never run) */
  double jct_mean_bound;
  double queue_mean, queue_p50, queue_p99;
  double util_mean; /* allocated GPUs / GPUs, mean over rounds until the last completion */
  double makespan;
  uint64_t rounds, restarts;
  double energy_kwh, cost, carbon_kg;
  double wall_s;
  struct stk_sim_job_record *rec;
  size_t nrec;
  struct stk_sim_jobs_sample *samples;
  size_t nsamples;
};

STK_EXPORT int stk_sim_jobs_run(const struct stk_sim_jobs *jobs, const struct stk_sim_jobs_opts *opts,
                     struct stk_sim_jobs_result *res, char *errmsg);
STK_EXPORT void stk_sim_jobs_result_free(struct stk_sim_jobs_result *r);

/* Published mean JCT (s) of the Pollux artifact's results-jobload for a
 * policy (tiresias, optimus, pollux), load (0.5, 1, 1.5, 2) and workload
 * 1..8 (0 = the mean over the eight); NAN when unknown. */
STK_EXPORT double stk_sim_jobs_published(const char *policy, double load, int workload);

/* Reports of several runs (one row each; label names the run). */
STK_EXPORT void stk_sim_jobs_write_table(FILE *f, const struct stk_sim_jobs_result *r, size_t n,
                              const char *const *label);
STK_EXPORT void stk_sim_jobs_write_json(FILE *f, const struct stk_sim_jobs_result *r, size_t n,
                             const char *const *label);
/* One row per job of each run. */
STK_EXPORT void stk_sim_jobs_write_csv(FILE *f, const struct stk_sim_jobs_result *r, size_t n,
                            const char *const *label);
/* JCT CDFs and, from samples, allocated GPUs over time. */
STK_EXPORT void stk_sim_jobs_write_svg(FILE *f, const struct stk_sim_jobs_result *r, size_t n,
                            const char *const *label, const char *title);

#ifdef __cplusplus
}
#endif
#endif
