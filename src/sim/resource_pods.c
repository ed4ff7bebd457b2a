/* The pods resource model: the placement replay's node state (state.c)
 * and one of its policies, under the job engine. Each node is a node of
 * gpn whole GPUs of one model ("gpu") with CPU and memory the pods never
 * ask for. A placement's whole GPUs become pods: one pod when it fits a
 * node, else whole nodes plus one pod for the rest. The pods the jobs'
 * asks cut into (given by the caller; the model knows no jobs) are the
 * workload FGD measures fragmentation against. One state lives through the run (its node order, score caches
 * and random stream), and hold changes only the pods that changed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs_impl.h"
#include "resource.h"
#include "sim_impl.h"

struct placed {
  uint32_t kind;
  struct stk__sim_bind b;
};

struct pods {
  struct stk_sim_cluster *c;
  struct stk_sim_workload *w;
  struct stk__sim_state st;
  int have_st;
  uint32_t kind_of[STK__JOBS_MAX_GPN + 1]; /* pod kind by whole GPUs */
  int32_t *run_of;                         /* the state's node index of each cluster node */
  struct placed *p;
  size_t np, capp;
  const char *policy; /* its name, for messages */
};

static int remember(struct pods *P, uint32_t kind, const struct stk__sim_bind *b) {
  if (P->np == P->capp) {
    size_t cap = P->capp ? P->capp * 2 : 64;
    struct placed *q = realloc(P->p, cap * sizeof *q);
    if (!q) return STK_ENOMEM;
    P->p = q;
    P->capp = cap;
  }
  P->p[P->np].kind = kind;
  P->p[P->np++].b = *b;
  stk__sim_bind(&P->st, kind, b);
  return 0;
}

static void note_free(struct stk__sim_res *r, const struct stk__sim_bind *b, int sign) {
  struct pods *P = r->impl;
  int gpus = __builtin_popcount(b->gpus);
  r->free_gpus[P->st.order[b->node]] -= sign * gpus;
}

/* Release one placement: the last of p[] is moved into slot x. */
static void release(struct stk__sim_res *r, size_t x) {
  struct pods *P = r->impl;
  stk__sim_unbind(&P->st, P->p[x].kind, &P->p[x].b);
  note_free(r, &P->p[x].b, -1);
  P->p[x] = P->p[--P->np];
}

/* Pods of the same size on the same node are interchangeable, so only the
 * (node, size) pairs that changed since the last call are unbound or
 * bound: running jobs cost nothing from round to round. */
static int p_hold(struct stk__sim_res *r, uint8_t *const *alloc, const int *n, const size_t *idx,
                  size_t count) {
  struct pods *P = r->impl;
  /* want[node][size]: pods the standing placements make */
  static const int G = STK__JOBS_MAX_GPN + 1;
  int want[STK__JOBS_MAX_NODES][STK__JOBS_MAX_GPN + 1];
  memset(want, 0, sizeof want);
  for (size_t k = 0; k < count; k++) {
    int per[STK__JOBS_MAX_NODES] = {0};
    for (int g = 0; g < n[idx[k]]; g++) per[alloc[idx[k]][g]]++;
    for (int node = 0; node < r->nodes; node++)
      if (per[node]) want[node][STK__MIN(per[node], G - 1)]++;
  }
  for (size_t x = P->np; x-- > 0;) {
    int node = (int)P->st.order[P->p[x].b.node];
    int size = __builtin_popcount(P->p[x].b.gpus);
    if (want[node][size] > 0)
      want[node][size]--;
    else
      release(r, x);
  }
  for (int node = 0; node < r->nodes; node++)
    for (int size = 1; size < G; size++)
      while (want[node][size]-- > 0) {
        struct stk__sim_bind b = {.node = P->run_of[node], .gpus = 0};
        const struct stk__sim_node *nd = &P->st.node[b.node];
        int need = size;
        for (int g = 0; g < nd->ngpu && need; g++)
          if (nd->gpu[g] == STK__SIM_MILLI) b.gpus |= 1u << g, need--;
        if (need) { /* cannot happen: more GPUs held on a node than it has free */
          snprintf(r->why, sizeof r->why,
                   "placer %s: the standing placements hold more GPUs on node %d than it has "
                   "(%d more for a %d-GPU pod)",
                   P->policy, node, need, size);
          return STK_ENOSPC;
        }
        int rc = remember(P, P->kind_of[size], &b);
        if (rc) return rc;
        note_free(r, &b, 1);
      }
  return 0;
}

/* Whether want GPUs fit as pods: want / gpn empty nodes and, for the
 * rest, one more node with that many free. Exact, as the pods take whole
 * GPUs and ask nothing else, and much cheaper than asking the policy to
 * fail on every node for each waiting job. */
static int room(const struct stk__sim_res *r, int want) {
  int full = 0, part = 0, rest = want % r->gpn;
  for (int n = 0; n < r->nodes; n++) {
    if (r->free_gpus[n] == r->gpn)
      full++;
    else if (rest && r->free_gpus[n] >= rest)
      part = 1;
  }
  int q = want / r->gpn;
  return full >= q && (!rest || part || full > q);
}

static int p_place(struct stk__sim_res *r, size_t job, int want, uint8_t *alloc) {
  (void)job;
  struct pods *P = r->impl;
  if (!room(r, want)) return STK_ENOSPC;
  size_t mark = P->np;
  int got = 0, rc = 0;
  while (got < want && !rc) {
    int size = STK__MIN(want - got, r->gpn);
    uint32_t kind = P->kind_of[size];
    struct stk__sim_bind b;
    if ((rc = stk__sim_schedule(&P->st, kind, &b)) || (rc = remember(P, kind, &b))) break;
    note_free(r, &b, 1);
    for (int g = 0; g < size; g++) alloc[got++] = (uint8_t)P->st.order[b.node];
  }
  if (!rc) return 0;
  while (P->np > mark) release(r, P->np - 1); /* all or nothing */
  return rc;
}

static void p_fini(struct stk__sim_res *r) {
  struct pods *P = r->impl;
  if (!P) return;
  if (P->have_st) stk__sim_state_free(&P->st);
  stk_sim_workload_free(P->w);
  stk_sim_cluster_free(P->c);
  free(P->run_of);
  free(P->p);
  free(P);
}

static const struct stk__sim_res_ops pods_ops = {
    .name = "pods",
    .hold = p_hold,
    .place = p_place,
    .fini = p_fini,
};

/* nodes x gpn GPUs of one model; CPU and memory as openb's largest node. */
static struct stk_sim_cluster *make_cluster(int nodes, int gpn) {
  struct stk_sim_cluster *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->cpu = calloc((size_t)nodes, sizeof *c->cpu);
  c->mem = calloc((size_t)nodes, sizeof *c->mem);
  c->ngpu = calloc((size_t)nodes, 1);
  c->model = calloc((size_t)nodes, 1);
  c->name = calloc((size_t)nodes, sizeof *c->name);
  c->model_name[1] = strdup("gpu");
  c->nmodels = 1;
  if (!c->cpu || !c->mem || !c->ngpu || !c->model || !c->name || !c->model_name[1]) {
    stk_sim_cluster_free(c);
    return NULL;
  }
  for (int i = 0; i < nodes; i++) {
    char nm[32];
    snprintf(nm, sizeof nm, "node-%d", i);
    if (!(c->name[i] = strdup(nm))) {
      stk_sim_cluster_free(c);
      return NULL;
    }
    c->n++;
    c->cpu[i] = STK__SIM_MAX_SPEC_CPU;
    c->mem[i] = (int64_t)1 << 20;
    c->ngpu[i] = (uint8_t)gpn;
    c->model[i] = 1;
    c->gpus += (uint64_t)gpn;
    c->cpu_total += STK__SIM_MAX_SPEC_CPU;
    c->mem_total += (uint64_t)1 << 20;
    c->gpu_nodes++;
  }
  return c;
}

/* The asks' pods as the workload; every size 1..gpn has a kind. */
static int make_workload(struct pods *P, int gpn, const int *want, size_t n, const char *source,
                         char *errmsg) {
  struct stk__sim_builder *b = NULL;
  P->w = calloc(1, sizeof *P->w);
  if (!P->w || stk__sim_builder_new(&b, P->w, P->c))
    return stk__errf(errmsg, STK_ENOMEM, "out of memory");
  uint64_t count[STK__JOBS_MAX_GPN + 1] = {0};
  for (size_t i = 0; i < n; i++) {
    int k = want[i];
    if (k <= 0) continue;
    count[gpn] += (uint64_t)(k / gpn);
    if (k % gpn) count[k % gpn]++;
  }
  int rc = 0;
  for (int s = 1; s <= gpn && rc >= 0; s++) {
    rc = stk__sim_builder_add(b, 0, 0, s, STK__SIM_MILLI, "", count[s], errmsg, source);
    if (rc >= 0) P->kind_of[s] = (uint32_t)rc;
  }
  stk__sim_builder_free(b);
  if (rc < 0) return rc;
  if ((rc = stk__sim_workload_finish(P->w, P->c))) return stk__errf(errmsg, rc, "out of memory");
  return 0;
}

int stk__sim_res_pods_of(struct stk__sim_res **out, int nodes, int gpn, const int *want, size_t n,
                         const char *source, const char *policy, uint64_t seed, char *errmsg) {
  *out = NULL;
  const struct stk_sim_policy_ops *pol = stk__sim_policy_get(policy);
  if (!pol)
    return stk__errf(errmsg, STK_EINVAL,
                     "no placement policy '%s' to place jobs with; `stoker sim --list-policies` "
                     "names them",
                     policy);
  if (nodes > STK__JOBS_MAX_NODES || gpn > STK__JOBS_MAX_GPN || gpn > STK_SIM_MAX_GPUS)
    return stk__errf(errmsg, STK_EINVAL, "cluster of %d nodes x %d GPUs: too large to place pods",
                     nodes, gpn);
  int rc = stk__sim_res_whole(out, nodes, gpn, errmsg);
  if (rc) return rc;
  struct stk__sim_res *r = *out;
  struct pods *P = calloc(1, sizeof *P);
  r->impl = P;
  r->ops = &pods_ops;
  if (P) P->policy = pol->name;
  if (!P || !(P->c = make_cluster(nodes, gpn)) ||
      !(P->run_of = malloc((size_t)nodes * sizeof *P->run_of))) {
    rc = stk__errf(errmsg, STK_ENOMEM, "out of memory");
    goto fail;
  }
  if ((rc = make_workload(P, gpn, want, n, source, errmsg))) goto fail;
  if ((rc = stk__sim_state_init_trees(&P->st, P->c, P->w, pol, seed, 0))) {
    stk__errf(errmsg, rc, "out of memory");
    goto fail;
  }
  P->have_st = 1;
  for (int i = 0; i < nodes; i++) P->run_of[P->st.order[i]] = i;
  return 0;
fail:
  stk__sim_res_free(r);
  *out = NULL;
  return rc;
}
