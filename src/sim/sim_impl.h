/* Internals of the simulator shared by its files: the immutable cluster and
 * workload, the per-run mutable node state, fragmentation, the event heap,
 * the CSV trace reader and the placement-policy ops table. Nothing here is
 * part of the public API. */
#ifndef STOKER_SIM_IMPL_H
#define STOKER_SIM_IMPL_H

#include <stdint.h>
#include <stdio.h>

#include "../base/base.h"
#include "stoker/sim.h"

#define STK__SIM_MILLI 1000
/* Normalising constants of the artifact's scores (largest node of openb). */
#define STK__SIM_MAX_SPEC_CPU 128000
#define STK__SIM_MAX_SPEC_GPU 8000

/* ---- event heap ------------------------------------------------------ */

/* A binary min-heap of events ordered by (time, kind, seq): at one instant
 * lower kinds go first, and ties keep insertion order, so a run is a pure
 * function of its inputs and seed. */
struct stk__sim_event {
  int64_t time;
  uint32_t kind;
  uint32_t arg;
  uint64_t seq;
};
struct stk__sim_heap {
  struct stk__sim_event *ev;
  size_t n, cap;
  uint64_t seq;
};
void stk__sim_heap_init(struct stk__sim_heap *h);
void stk__sim_heap_free(struct stk__sim_heap *h);
int stk__sim_heap_push(struct stk__sim_heap *h, int64_t time, uint32_t kind, uint32_t arg);
/* Pop the earliest event into *e; 0, or STK_EOF when empty. */
int stk__sim_heap_pop(struct stk__sim_heap *h, struct stk__sim_event *e);

/* ---- CSV trace reader ------------------------------------------------ */

/* Streams a CSV file row by row with one line buffer; fields are found by
 * header name, so column order and extra columns do not matter. */
struct stk__sim_csv {
  FILE *f;
  int own;
  char path[256];
  uint64_t line; /* line number of the current row, 1-based */
  char *buf;
  size_t cap;
  char **field;
  int nfield, capfield;
  char **hdr;
  int nhdr;
};
/* Open path ("-" = stdin) and read the header. STK_EEMPTY for an empty
 * file, STK_ENOENT/STK_EACCES for one that cannot be opened. */
int stk__sim_csv_open(struct stk__sim_csv *r, const char *path, char *errmsg);
void stk__sim_csv_close(struct stk__sim_csv *r);
/* Index of a header column, or -1. */
int stk__sim_csv_col(const struct stk__sim_csv *r, const char *name);
/* Next non-blank row: 0, or STK_EOF at the end. Rows with a different
 * number of fields than the header fail with STK_EFORMAT. */
int stk__sim_csv_next(struct stk__sim_csv *r, char *errmsg);
/* Field col of the current row ("" for col -1). */
const char *stk__sim_csv_get(const struct stk__sim_csv *r, int col);
/* Parse field col as a whole number in [lo, hi]; an empty field gives def
 * when allow_empty, else an error naming the file, line and column. */
int stk__sim_csv_int(const struct stk__sim_csv *r, int col, int64_t lo, int64_t hi, int allow_empty,
                     int64_t def, int64_t *out, char *errmsg);
/* A finite decimal number ("12", "-0.5", "1.5e3"): 0, or STK_EFORMAT for
 * anything else (hexadecimal, nan, inf, overflow, trailing text). */
int stk__sim_decimal(const char *s, double *out);
/* Parse field col as a finite decimal number >= lo (-INFINITY: any); an
 * error names the file, line and column. */
int stk__sim_csv_num(const struct stk__sim_csv *r, int col, double lo, double *out, char *errmsg);

/* ---- cluster --------------------------------------------------------- */

struct stk_sim_cluster {
  uint32_t n;
  int32_t *cpu; /* milli-CPU */
  int64_t *mem; /* MiB */
  uint8_t *ngpu;
  uint8_t *model;   /* model id, 0 = no GPU model */
  char **name;      /* sn */
  uint32_t nmodels; /* ids 1..nmodels */
  char *model_name[STK_SIM_MAX_MODELS + 1];
  uint64_t gpus, cpu_total, mem_total;
  uint32_t gpu_nodes;
};
/* Model id of a name, or 0 when the cluster has no such model. */
uint32_t stk__sim_model_id(const struct stk_sim_cluster *c, const char *name, size_t len);

/* ---- workload -------------------------------------------------------- */

/* A resource spec: what the artifact calls a PodResource (CPU, milli-GPU
 * per GPU, GPU count, GPU-model constraint). Scores depend only on it. */
struct stk__sim_spec {
  int32_t cpu;    /* request, milli-CPU */
  int32_t cpu_nz; /* the same as scores see it: 0 counts as 100 */
  int32_t slot;   /* score-cache slot (popularity rank), -1 = not cached */
  int16_t milli;  /* per GPU, 0 for CPU pods */
  uint8_t num;    /* GPUs */
  uint8_t share;  /* one GPU, milli < 1000 */
  uint64_t mask;  /* bit m: model id m allowed (bit 0: no-GPU nodes) */
  char *gpu_spec; /* the constraint as written ("" for none) */
  uint64_t count; /* pods of this spec in the trace */
};

/* A pod kind: a spec and a memory request; the unit of sampling. */
struct stk__sim_kind {
  uint32_t spec;
  uint32_t never_fit;
  int64_t mem;
  uint64_t count;
  uint32_t rank; /* popularity rank among kinds: tournament-tree slot */
};

/* A typical pod of the fragmentation measure: a spec and its share of the
 * workload's most popular specs. */
struct stk__sim_typical {
  int32_t cpu;
  int16_t milli;
  uint8_t num;
  uint16_t th; /* index into the distinct milli thresholds */
  uint64_t mask;
  double p;
};

struct stk_sim_workload {
  const struct stk_sim_cluster *cluster; /* its GPU model ids are the masks' */
  struct stk__sim_spec *spec;
  uint32_t nspec;
  struct stk__sim_kind *kind;
  uint32_t nkind;
  struct stk__sim_typical *typ; /* GPU typical pods */
  uint32_t ntyp;
  double p_cpu;               /* total share of CPU-only typical pods */
  int16_t th[STK__SIM_MILLI]; /* distinct milli of the GPU typical pods */
  uint32_t nth;
  uint32_t ntypical;
  uint64_t total_milli; /* GPU demand of all rows */
  struct stk_sim_workload_info info;
};

/* Intern a spec/kind into a workload under construction (hash tables
 * live in the builder below). */
struct stk__sim_builder;
int stk__sim_builder_new(struct stk__sim_builder **out, struct stk_sim_workload *w,
                         const struct stk_sim_cluster *c);
void stk__sim_builder_free(struct stk__sim_builder *b);
/* Add one pod; returns its kind index (>= 0) or a negative code. */
int stk__sim_builder_add(struct stk__sim_builder *b, int32_t cpu, int64_t mem, int num, int milli,
                         const char *gpu_spec, uint64_t count, char *errmsg, const char *where);
/* Compute typical pods and never-fit flags once all pods are in. */
int stk__sim_workload_finish(struct stk_sim_workload *w, const struct stk_sim_cluster *c);
/* Parse one pod row of a pod-list CSV (columns looked up once in cols). */
struct stk__sim_podcols {
  int name, cpu, mem, num, milli, spec, ctime, dtime;
};
void stk__sim_podcols_find(const struct stk__sim_csv *r, struct stk__sim_podcols *pc);

/* A pod list being read: the CSV reader, its columns and the workload the
 * rows build. open checks the header (cpu_milli and num_gpu are required);
 * add_row parses the current row into the workload and returns its pod
 * kind (>= 0) or an error naming file and line; close frees what is left
 * (set p->w to NULL first to keep the workload). */
struct stk__sim_pods {
  struct stk__sim_csv r;
  struct stk__sim_podcols pc;
  struct stk_sim_workload *w;
  struct stk__sim_builder *b;
};
int stk__sim_pods_open(struct stk__sim_pods *p, const struct stk_sim_cluster *c, const char *path,
                       char *errmsg);
int stk__sim_pods_add_row(struct stk__sim_pods *p, char *errmsg);
void stk__sim_pods_close(struct stk__sim_pods *p);
/* A duration trace (Philly's: a submit time, num_gpus, a duration; not
 * stdin) rather than a pod list: it has a duration column and no
 * cpu_milli. */
int stk__sim_is_job_trace(const char *path);
/* Its jobs as pods of num_gpus whole GPUs asking no CPU or memory, one
 * pod each; kinds (NULL, or one per job) gets each job's pod kind. */
struct stk_sim_jobs;
int stk__sim_workload_jobs(struct stk_sim_workload **out, const struct stk_sim_cluster *c,
                           const struct stk_sim_jobs *J, const char *path, uint32_t *kinds,
                           char *errmsg);
int stk__sim_pod_parse(const struct stk__sim_csv *r, const struct stk__sim_podcols *pc,
                       int32_t *cpu, int64_t *mem, int *num, int *milli, char *errmsg);

/* ---- per-run state --------------------------------------------------- */

struct stk__sim_node {
  int32_t cpu_left;
  uint32_t version; /* bumped on every change; score caches key on it */
  int64_t mem_left;
  int32_t gpu_left; /* sum of gpu[] */
  uint8_t ngpu, nfree, model, naff;
  int16_t gpu[STK_SIM_MAX_GPUS];      /* milli-GPU left per physical GPU */
  int16_t sorted[STK_SIM_MAX_GPUS];   /* the same, ascending */
  uint16_t aff[STK_SIM_MAX_GPUS + 1]; /* pods by GPU affinity: [0] shared, [k] k whole GPUs */
  double frag;                        /* fragmentation (milli-GPU) against the typical pods */
};

/* Where a pod went: node (the run's index; st->order maps it to the
 * cluster's), and the GPUs it took (bit i: physical GPU i). */
struct stk__sim_bind {
  int32_t node;
  uint32_t gpus;
};

struct stk__sim_cache_ent {
  uint32_t version;
  int16_t score;
  int8_t gpu;
  int8_t pad;
};

struct stk_sim_policy_ops;

struct stk__sim_state {
  const struct stk_sim_cluster *c;
  const struct stk_sim_workload *w;
  const struct stk_sim_policy_ops *pol;
  struct stk__sim_node *node;
  struct stk__sim_hot *hot; /* node[i]'s hot fields, kept in step by bind/unbind */
  struct stk_rng rng;       /* scheduling stream: ties, random choices */
  double frag_sum;          /* sum of node frag */
  int64_t idle_milli, used_milli, total_milli;
  struct stk__sim_cache_ent *cache; /* [slot][node] */
  uint32_t cache_specs;
  int32_t *tree;        /* [kind rank][2 * tree_p]: best node per subtree */
  uint32_t tree_p;      /* leaves per tree, a power of two */
  uint32_t tree_kinds;  /* kinds of rank below this have a tree */
  uint64_t *tree_stamp; /* [kind rank]: changes already played into the tree */
  uint32_t *log;        /* ring of the last log_cap changed nodes */
  uint32_t log_cap;
  uint64_t changes;
  uint32_t *order; /* node i of the run is cluster node order[i]: a
                      seeded order, which breaks score ties */
  uint32_t *cand;
  int8_t *rawgpu;
  uint64_t decisions;
};

int stk__sim_state_init(struct stk__sim_state *st, const struct stk_sim_cluster *c,
                        const struct stk_sim_workload *w, const struct stk_sim_policy_ops *pol,
                        uint64_t seed);
/* The same with tournament trees forced on (1), off (0) or chosen by
 * cluster size (-1); the choice never changes a decision, only its cost. */
int stk__sim_state_init_trees(struct stk__sim_state *st, const struct stk_sim_cluster *c,
                              const struct stk_sim_workload *w,
                              const struct stk_sim_policy_ops *pol, uint64_t seed, int trees);
void stk__sim_state_free(struct stk__sim_state *st);

/* Fragmentation of a node state (the artifact's NodeGpuShareFragAmount,
 * summed over all categories but "satisfied"): for each typical pod, the
 * idle milli-GPU the pod could not use there, weighted by its share.
 * sorted holds ngpu milli-GPU values ascending. */
double stk__sim_frag(const struct stk_sim_workload *w, uint32_t model, int32_t cpu_left,
                     const int16_t *sorted, int ngpu);
/* Fragmentation after hypothetically placing spec sp, taking GPU gpu (a
 * physical index, for shared pods) or the first whole free GPUs. */
double stk__sim_frag_after(const struct stk__sim_state *st, const struct stk__sim_node *n,
                           const struct stk__sim_spec *sp, int gpu);

/* The part of a node every placement decision reads, packed so that a scan
 * over all nodes stays in the first-level cache. */
struct stk__sim_hot {
  int64_t mem_left;
  int32_t cpu_left;
  uint32_t version;
  int16_t max_left; /* most milli-GPU left on one GPU */
  uint8_t nfree, model;
};

/* Whether spec sp with mem fits a node now. */
static inline int stk__sim_fits(const struct stk__sim_hot *h, const struct stk__sim_spec *sp,
                                int64_t mem) {
  if (h->cpu_left < sp->cpu || h->mem_left < mem) return 0;
  if (sp->num == 0) return 1;
  if (!((sp->mask >> h->model) & 1)) return 0;
  if (sp->share) return h->max_left >= sp->milli;
  return h->nfree >= sp->num;
}

/* Choose a node for a pod of kind k (and its GPU for a shared pod) by the
 * run's policy: 0 with *b filled, or STK_ENOSPC when no node fits. */
int stk__sim_schedule(struct stk__sim_state *st, uint32_t kind, struct stk__sim_bind *b);
/* Apply or undo a placement. */
void stk__sim_bind(struct stk__sim_state *st, uint32_t kind, const struct stk__sim_bind *b);
void stk__sim_unbind(struct stk__sim_state *st, uint32_t kind, const struct stk__sim_bind *b);

/* ---- policies -------------------------------------------------------- */

enum {
  STK_SIM_POLICY_CACHE = 1,   /* scores depend on (node state, spec) only: cache them */
  STK_SIM_POLICY_UNIFORM = 2, /* no scores: a uniformly random node that fits */
};
enum stk_sim_gpusel {
  STK_SIM_GPUSEL_BEST = 0, /* shared pod: the GPU with least milli left that fits */
  STK_SIM_GPUSEL_RANDOM,   /* shared pod: a uniformly random GPU that fits */
  STK_SIM_GPUSEL_SCORE,    /* shared pod: the GPU the score hook chose */
};

/* A placement policy. score() is called for nodes that fit; higher wins,
 * ties go to the node first in the run's seeded node order. With STK_SIM_GPUSEL_SCORE it also
 * sets *gpu to the physical GPU a shared pod should take there. */
struct stk_sim_policy_ops {
  const char *name;
  const char *summary;
  unsigned flags;
  int gpusel;
  int (*score)(const struct stk__sim_state *st, const struct stk__sim_node *n,
               const struct stk__sim_spec *sp, int *gpu);
};

extern const struct stk_sim_policy_ops stk__sim_policy_random;
extern const struct stk_sim_policy_ops stk__sim_policy_dotprod;
extern const struct stk_sim_policy_ops stk__sim_policy_gpuclustering;
extern const struct stk_sim_policy_ops stk__sim_policy_gpupacking;
extern const struct stk_sim_policy_ops stk__sim_policy_bestfit;
extern const struct stk_sim_policy_ops stk__sim_policy_fgd;
/* NULL-terminated, in the paper's order. */
extern const struct stk_sim_policy_ops *const stk__sim_policies[];
const struct stk_sim_policy_ops *stk__sim_policy_get(const char *name);

/* CPU time of the calling thread in nanoseconds. */
uint64_t stk__sim_thread_ns(void);

/* Round half to even, as Python's round() does in the artifact's analysis. */
double stk__sim_round(double x);

#endif
