/* Resource models: what a scheduler asks of a cluster's GPUs, whichever
 * way the GPUs are shared underneath. A model answers two questions:
 * which placements stand now (hold), and where a job that starts goes
 * (place); it keeps the whole GPUs free on each node in free_gpus. A
 * placement is written as the job engine keeps it: one node index per
 * GPU.
 *
 * Four models exist:
 * - whole: a count of free GPUs per node; a job takes its GPUs one at a
 *   time from the node with the most free (the Pollux artifact's baselines);
 * - hetero: the same on a cluster of GPU types, seen as virtual nodes of
 *   gpn GPUs (an 8-GPU machine is two 4-GPU nodes); capacity is counted
 *   per physical machine. hold refuses a placement over two types;
 *   place is whole's and may spread a job over types, which the engine
 *   trims to one type (stk__jhet_repair) before its last hold;
 * - pods: the placement replay's node state (state.c) with one of its
 *   policies (FGD, BestFit, ...). A job of up to a node's GPUs is one pod
 *   of whole GPUs on one node; a wider one takes whole nodes, plus one pod
 *   for the rest. FGD measures fragmentation against the jobs' own sizes.
 * - mig: each GPU cut into MIG instances (mig_gpus.h); a job of one GPU
 *   takes one instance of a chosen profile, a job of k GPUs k whole-GPU
 *   (7g) instances on k GPUs, placed as the online MIG experiment's
 *   mig-aware policy places them, reconfiguring only idle instances.
 * Nothing here is part of the public API. */
#ifndef STOKER_SIM_RESOURCE_H
#define STOKER_SIM_RESOURCE_H

#include <stddef.h>
#include <stdint.h>

struct stk__sim_res;
struct stk_sim_jobs;

#define STK__SIM_RES_MAX_NODES 256 /* nodes a model counts on its stack */

struct stk__sim_res_ops {
  const char *name;
  /* The placements that stand are exactly alloc[idx[k]], of n[idx[k]]
   * GPUs each (alloc[i][g]: node of GPU g), k < count; any other is
   * released. 0, or a negative code: out of memory, or placements the
   * model cannot hold (a fault in the caller: more GPUs on a node than it
   * has, a node that does not exist, a placement over two GPU types),
   * with r->why saying which. Policies that choose their own placements
   * (optimus, pollux, gavel, sia) have the job engine hold what they
   * chose, so an impossible allocation ends the run with that reason. */
  int (*hold)(struct stk__sim_res *r, uint8_t *const *alloc, const int *n, const size_t *idx,
              size_t count);
  /* Choose and take want GPUs for job `job`: 0 with alloc filled,
   * STK_ENOSPC (nothing taken) when the model finds no room for them. */
  int (*place)(struct stk__sim_res *r, size_t job, int want, uint8_t *alloc);
  /* Capacity units a placement of want GPUs holds (NULL: want); the
   * cluster has `unit` of them per GPU. */
  int (*units)(const struct stk__sim_res *r, int want);
  void (*fini)(struct stk__sim_res *r);
};

struct stk__sim_res {
  const struct stk__sim_res_ops *ops;
  int nodes, gpn;
  int *free_gpus; /* whole GPUs free per node, kept by every model */
  int unit;       /* capacity units per GPU: 1, or 7 compute slices on MIG */
  /* hetero only (NULL elsewhere): each node's GPU type and physical
   * machine (numbered across types; a machine's nodes are adjacent) */
  int *type, *phys;
  void *impl;     /* the model's own state */
  char why[160];  /* hold's reason for a failure other than out of memory */
};

/* Whole GPUs on nodes x gpn. */
int stk__sim_res_whole(struct stk__sim_res **out, int nodes, int gpn, char *errmsg);
/* Whole GPUs on the virtual nodes of a cluster of GPU types: node v is
 * of type vtype[v] on machine vphys[v]. */
int stk__sim_res_hetero(struct stk__sim_res **out, int nodes, int gpn, const int *vtype,
                        const int *vphys, char *errmsg);
/* The placement replay's state with policy `policy` on nodes x gpn GPUs,
 * the jobs' sizes as its workload (for FGD's typical pods), ties broken by
 * a node order drawn from seed. STK_EINVAL names an unknown policy. */
int stk__sim_res_pods(struct stk__sim_res **out, int nodes, int gpn, const struct stk_sim_jobs *J,
                      const char *policy, uint64_t seed, char *errmsg);
/* The same from the GPUs each of n jobs asks for (want), source naming
 * them in messages. The pods model knows no jobs: a placement of k whole
 * GPUs is k / gpn node-wide pods and one of k mod gpn, and FGD's typical
 * pods are those the asks cut into. stk__sim_res_pods (jobs_work.c) takes
 * the asks through the jobs' workload models. */
int stk__sim_res_pods_of(struct stk__sim_res **out, int nodes, int gpn, const int *want, size_t n,
                         const char *source, const char *policy, uint64_t seed, char *errmsg);
/* MIG instances on nodes x gpn GPUs (an A100 80 GB's geometry). spec is
 * "mig" or "mig:PROFILE", the profile a one-GPU job takes (default 2g).
 * STK_EINVAL names an unknown profile or jobs of measured applications. */
int stk__sim_res_mig(struct stk__sim_res **out, int nodes, int gpn, const struct stk_sim_jobs *J,
                     const char *spec, char *errmsg);
/* Whether a placer names the MIG model. */
int stk__sim_res_is_mig(const char *placer);
void stk__sim_res_free(struct stk__sim_res *r);

/* Units held by a placement of want GPUs. */
static inline int stk__sim_res_units(const struct stk__sim_res *r, int want) {
  return r->ops->units ? r->ops->units(r, want) : want;
}

/* Release every placement: a policy that replans every GPU each round
 * (optimus, pollux, gavel, sia) then reads what is free from the model. */
int stk__sim_res_release_all(struct stk__sim_res *r);
/* Whole GPUs free of type t (every node when the model has no types). */
int stk__sim_res_free_type(const struct stk__sim_res *r, int t);
/* Whole GPUs free on node v's machine (node v alone without types). */
int stk__sim_res_free_machine(const struct stk__sim_res *r, int v);

/* Give `want` GPUs, one node at a time from the node with the most free
 * GPUs (ties to the lowest index), as the artifact's baselines; free_gpus
 * is updated. Callers check capacity first. */
void stk__jplace_most_free(int *free_gpus, int nodes, int want, uint8_t *out);

#endif
