/* Heterogeneous clusters for the job engine, as the Sia SOSP'23 artifact
 * models them: nodes of several GPU types, each application measured on
 * each type (placements-TYPE.csv), a job running on one type at a time.
 * Type-blind policies see the cluster as virtual nodes of the smallest
 * GPUs-per-node (an 8-GPU node is two 4-GPU nodes), and a placement they
 * spread over types keeps only the GPUs of the type it has most of, ties
 * to the faster type (the artifact's repair for Pollux). Throughput is
 * looked up by physical node, so two virtual nodes of one 8-GPU machine
 * run as one 8-GPU placement. */
#include <string.h>

#include "jobs_impl.h"

/* The artifact's calibration: real runs were this much slower than its
 * simulator (fitted on rtx), so goodput is divided by it. */
static const struct {
  const char *name;
  double slowdown, rescale_s;
} sia_app[] = {
    {"cifar10", 1.8, 50},     {"imagenet", 1.2, 250}, {"yolov3", 1.2, 80},
    {"bert", 1.2, 120},       {"deepspeech2", 1.2, 25}, {"ncf", 1.5, 15},
};

/* Speed order for ties: A100 (dgx-ext, dgx), V100 (azure), Quadro RTX 6000
 * (quad), RTX 2080Ti (rtx), T4 (aws). */
static int speed_rank(const char *type) {
  static const struct {
    const char *name;
    int rank;
  } order[] = {{"dgx-ext", 0}, {"dgx", 0}, {"azure", 1}, {"quad", 2}, {"rtx", 3}, {"aws", 4}};
  for (size_t i = 0; i < STK__ARRAY_LEN(order); i++)
    if (!strcmp(order[i].name, type)) return order[i].rank;
  return 5;
}

int stk__jhet_init(struct stk__jrun *rn, char *errmsg) {
  const struct stk_sim_jobs_opts *o = rn->o;
  if (o->ntypes > STK__JOBS_MAX_TYPES)
    return stk__errf(errmsg, STK_EINVAL, "%u GPU types: at most %d", o->ntypes,
                     STK__JOBS_MAX_TYPES);
  int vg = 0;
  for (uint32_t t = 0; t < o->ntypes; t++) {
    const struct stk_sim_gpu_type *ty = &o->types[t];
    if (!ty->name || !ty->apps || !ty->nodes || !ty->gpus_per_node ||
        ty->gpus_per_node > STK__JOBS_MAX_GPN)
      return stk__errf(errmsg, STK_EINVAL,
                       "GPU type %u (%s): needs a name, measurements, nodes and 1 to %d GPUs "
                       "per node",
                       t, ty->name ? ty->name : "unnamed", STK__JOBS_MAX_GPN);
    if (!vg || (int)ty->gpus_per_node < vg) vg = (int)ty->gpus_per_node;
  }
  int nv = 0, phys = 0;
  for (uint32_t t = 0; t < o->ntypes; t++) {
    const struct stk_sim_gpu_type *ty = &o->types[t];
    if (ty->gpus_per_node % (uint32_t)vg)
      return stk__errf(errmsg, STK_EINVAL,
                       "GPU type %s: %u GPUs per node is not a multiple of %d (the smallest)",
                       ty->name, ty->gpus_per_node, vg);
    int per = (int)ty->gpus_per_node / vg;
    for (uint32_t n = 0; n < ty->nodes; n++, phys++)
      for (int k = 0; k < per; k++) {
        if (nv == STK__JOBS_MAX_NODES)
          return stk__errf(errmsg, STK_EINVAL, "heterogeneous cluster: more than %d nodes of %d GPUs",
                           STK__JOBS_MAX_NODES, vg);
        rn->vtype[nv] = (int)t;
        rn->vphys[nv++] = phys;
      }
    rn->type_rank[t] = speed_rank(ty->name);
  }
  rn->ntypes = (int)o->ntypes;
  rn->types = o->types;
  rn->nodes = nv;
  rn->gpn = vg;
  rn->gpus = nv * vg;
  for (size_t i = 0; i < rn->n; i++) {
    struct stk__jstate *j = &rn->js[i];
    const struct stk__japp *a = j->spec->app;
    if (!a)
      return stk__errf(errmsg, STK_EINVAL,
                       "%s: job %s has no application; a heterogeneous cluster needs each job's "
                       "measurements per GPU type",
                       rn->jobs->path, j->spec->name);
    for (int t = 0; t < rn->ntypes; t++) {
      j->by_type[t] = stk__japp_find(o->types[t].apps, a->name);
      if (!j->by_type[t])
        return stk__errf(errmsg, STK_EINVAL, "GPU type %s has no measurements of %s (job %s)",
                         o->types[t].name, a->name, j->spec->name);
    }
    j->calib = 1;
    j->rescale_s = 30;
    for (size_t k = 0; k < STK__ARRAY_LEN(sia_app); k++)
      if (!strcmp(sia_app[k].name, a->name)) {
        j->calib = 1 / sia_app[k].slowdown;
        j->rescale_s = sia_app[k].rescale_s;
      }
  }
  return 0;
}

int stk__jhet_repair(const struct stk__jrun *rn, uint8_t *alloc, int n) {
  if (!rn->ntypes || n == 0) return n;
  int cnt[STK__JOBS_MAX_TYPES] = {0};
  for (int i = 0; i < n; i++) cnt[rn->vtype[alloc[i]]]++;
  int best = -1;
  for (int t = 0; t < rn->ntypes; t++)
    if (cnt[t] && (best < 0 || cnt[t] > cnt[best] ||
                   (cnt[t] == cnt[best] && rn->type_rank[t] < rn->type_rank[best])))
      best = t;
  int m = 0;
  for (int i = 0; i < n; i++)
    if (rn->vtype[alloc[i]] == best) alloc[m++] = alloc[i];
  return m;
}

int stk__jhet_place(const struct stk__jrun *rn, const uint8_t *alloc, int n, int *place) {
  int seen[STK__JOBS_MAX_NODES], m = 0;
  for (int i = 0; i < n; i++) {
    int p = rn->vphys[alloc[i]], k = 0;
    while (k < m && seen[k] != p) k++;
    if (k == m) {
      seen[m] = p;
      place[m++] = 0;
    }
    place[k]++;
  }
  return m;
}
