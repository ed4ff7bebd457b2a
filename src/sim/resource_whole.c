/* The whole-GPU resource models: a count of free GPUs per node, and the
 * most-free placement of the Pollux artifact's baselines; on a cluster of
 * GPU types (hetero) the same, with capacity counted per physical machine
 * and each placement kept to one type. Both refuse a hold of placements
 * the cluster cannot have, saying which job and node. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/base.h"
#include "resource.h"

void stk__jplace_most_free(int *free_gpus, int nodes, int want, uint8_t *out) {
  int got = 0;
  while (got < want) {
    int best = 0;
    for (int i = 1; i < nodes; i++)
      if (free_gpus[i] > free_gpus[best]) best = i;
    int take = STK__MIN(free_gpus[best], want - got);
    if (take <= 0) break; /* callers check capacity first */
    for (int k = 0; k < take; k++) out[got++] = (uint8_t)best;
    free_gpus[best] -= take;
  }
}

static void release_all(struct stk__sim_res *r) {
  for (int node = 0; node < r->nodes; node++) r->free_gpus[node] = r->gpn;
}

/* Whether GPU g of job `job` names a node of the cluster. */
static int node_ok(struct stk__sim_res *r, size_t job, int node) {
  if (node < r->nodes) return 1;
  snprintf(r->why, sizeof r->why, "%s GPUs: job %zu holds a GPU on node %d; the cluster has %d",
           r->ops->name, job, node, r->nodes);
  return 0;
}

static int w_hold(struct stk__sim_res *r, uint8_t *const *alloc, const int *n, const size_t *idx,
                  size_t count) {
  release_all(r);
  for (size_t k = 0; k < count; k++)
    for (int g = 0; g < n[idx[k]]; g++) {
      int node = alloc[idx[k]][g];
      if (!node_ok(r, idx[k], node)) goto bad;
      if (--r->free_gpus[node] < 0) {
        snprintf(r->why, sizeof r->why,
                 "whole GPUs: job %zu takes more GPUs on node %d than the %d it has (the "
                 "standing placements hold %d there)",
                 idx[k], node, r->gpn, r->gpn - r->free_gpus[node]);
        release_all(r);
        return STK_ENOSPC;
      }
    }
  return 0;
bad:
  release_all(r);
  return STK_EINVAL;
}

static int w_place(struct stk__sim_res *r, size_t job, int want, uint8_t *alloc) {
  (void)job;
  int left = 0;
  for (int n = 0; n < r->nodes; n++) left += r->free_gpus[n];
  if (want > left) return STK_ENOSPC;
  stk__jplace_most_free(r->free_gpus, r->nodes, want, alloc);
  return 0;
}

static const struct stk__sim_res_ops whole_ops = {
    .name = "whole",
    .hold = w_hold,
    .place = w_place,
};

/* ---- hetero ------------------------------------------------------------ */

/* A machine's capacity, by machine number (the model's impl). */
struct het {
  int nmach;
  int cap[]; /* GPUs of each machine */
};

static int h_hold(struct stk__sim_res *r, uint8_t *const *alloc, const int *n, const size_t *idx,
                  size_t count) {
  struct het *H = r->impl;
  int used[STK__SIM_RES_MAX_NODES] = {0}; /* by machine */
  release_all(r);
  for (size_t k = 0; k < count; k++) {
    size_t i = idx[k];
    for (int g = 0; g < n[i]; g++) {
      int node = alloc[i][g];
      if (!node_ok(r, i, node)) goto bad;
      int t0 = r->type[alloc[i][0]], m = r->phys[node];
      if (r->type[node] != t0) {
        snprintf(r->why, sizeof r->why,
                 "hetero GPUs: job %zu holds GPUs of two types (nodes %d and %d); a placement "
                 "stays on one type",
                 i, alloc[i][0], node);
        goto bad;
      }
      if (++used[m] > H->cap[m]) {
        snprintf(r->why, sizeof r->why,
                 "hetero GPUs: job %zu takes more GPUs on machine %d (node %d) than the %d it "
                 "has (the standing placements hold %d there)",
                 i, m, node, H->cap[m], used[m]);
        release_all(r);
        return STK_ENOSPC;
      }
      r->free_gpus[node]--;
    }
  }
  /* a node written with more than its GPUs (Sia and Gavel write a
   * machine's GPUs on its first node) takes the rest from the machine's
   * other nodes, in order */
  int over[STK__SIM_RES_MAX_NODES] = {0}; /* by machine */
  for (int v = 0; v < r->nodes; v++)
    if (r->free_gpus[v] < 0) {
      over[r->phys[v]] -= r->free_gpus[v];
      r->free_gpus[v] = 0;
    }
  for (int v = 0; v < r->nodes; v++) {
    int take = STK__MIN(over[r->phys[v]], r->free_gpus[v]);
    r->free_gpus[v] -= take;
    over[r->phys[v]] -= take;
  }
  return 0;
bad:
  release_all(r);
  return STK_EINVAL;
}

static void h_fini(struct stk__sim_res *r) {
  free(r->impl);
  free(r->type);
  free(r->phys);
}

static const struct stk__sim_res_ops hetero_ops = {
    .name = "hetero",
    .hold = h_hold,
    .place = w_place,
    .fini = h_fini,
};

int stk__sim_res_hetero(struct stk__sim_res **out, int nodes, int gpn, const int *vtype,
                        const int *vphys, char *errmsg) {
  if (nodes < 1 || nodes > STK__SIM_RES_MAX_NODES)
    return stk__errf(errmsg, STK_EINVAL, "hetero GPUs: %d nodes (1 to %d)", nodes,
                     STK__SIM_RES_MAX_NODES);
  for (int v = 1; v < nodes; v++)
    if (vphys[v] != vphys[v - 1] && vphys[v] != vphys[v - 1] + 1)
      return stk__errf(errmsg, STK_EINVAL, "hetero GPUs: node %d's machine is out of order", v);
  int rc = stk__sim_res_whole(out, nodes, gpn, errmsg);
  if (rc) return rc;
  struct stk__sim_res *r = *out;
  int nmach = vphys[nodes - 1] + 1;
  struct het *H = calloc(1, sizeof *H + sizeof(int) * (size_t)nmach);
  r->type = malloc(sizeof(int) * (size_t)nodes);
  r->phys = malloc(sizeof(int) * (size_t)nodes);
  if (!H || !r->type || !r->phys) {
    free(H);
    free(r->type);
    free(r->phys);
    r->type = r->phys = NULL;
    stk__sim_res_free(r);
    *out = NULL;
    return stk__errf(errmsg, STK_ENOMEM, "out of memory");
  }
  H->nmach = nmach;
  for (int v = 0; v < nodes; v++) {
    r->type[v] = vtype[v];
    r->phys[v] = vphys[v];
    H->cap[vphys[v]] += gpn;
  }
  r->impl = H;
  r->ops = &hetero_ops;
  return 0;
}

/* ---- for every model ---------------------------------------------------- */

int stk__sim_res_release_all(struct stk__sim_res *r) {
  return r->ops->hold(r, NULL, NULL, NULL, 0);
}

int stk__sim_res_free_type(const struct stk__sim_res *r, int t) {
  int f = 0;
  for (int v = 0; v < r->nodes; v++)
    if (!r->type || r->type[v] == t) f += r->free_gpus[v];
  return f;
}

int stk__sim_res_free_machine(const struct stk__sim_res *r, int v) {
  if (!r->phys) return r->free_gpus[v];
  int f = 0;
  for (int u = 0; u < r->nodes; u++)
    if (r->phys[u] == r->phys[v]) f += r->free_gpus[u];
  return f;
}

int stk__sim_res_whole(struct stk__sim_res **out, int nodes, int gpn, char *errmsg) {
  struct stk__sim_res *r = calloc(1, sizeof *r);
  if (r) r->free_gpus = calloc((size_t)nodes, sizeof(int));
  if (!r || !r->free_gpus) {
    free(r);
    return stk__errf(errmsg, STK_ENOMEM, "out of memory");
  }
  r->ops = &whole_ops;
  r->nodes = nodes;
  r->gpn = gpn;
  r->unit = 1;
  release_all(r);
  *out = r;
  return 0;
}

void stk__sim_res_free(struct stk__sim_res *r) {
  if (!r) return;
  if (r->ops->fini) r->ops->fini(r);
  free(r->free_gpus);
  free(r);
}
