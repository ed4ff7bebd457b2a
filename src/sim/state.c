/* The cluster model's mutable half, one copy per run: per node the CPU and
 * memory left and every GPU's free milli-GPU, the fragmentation measure of
 * the FGD paper kept current per node, placement and release of pods, and
 * the scheduling step that filters nodes, scores them by the run's policy
 * (through a per-node score cache where the policy allows) and breaks ties
 * by a seeded node order, as the artifact's patched kube-scheduler does. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim_impl.h"

/* Score-cache budget in entries per run (8 bytes each), and tournament-tree
 * budget (4 bytes each). */
#define CACHE_ENTRIES (4u << 20)
#define TREE_ENTRIES (8u << 20)
#define TREE_MIN_NODES 2048

static void sort_gpus(int16_t *v, int n) {
  for (int i = 1; i < n; i++) {
    int16_t x = v[i];
    int j = i;
    for (; j > 0 && v[j - 1] > x; j--) v[j] = v[j - 1];
    v[j] = x;
  }
}

double stk__sim_frag(const struct stk_sim_workload *w, uint32_t model, int32_t cpu_left,
                     const int16_t *sorted, int ngpu) {
  int32_t total = 0;
  for (int i = 0; i < ngpu; i++) total += sorted[i];
  if (total == 0) return 0;
  /* For each milli threshold (ascending): how many GPUs have less left than
   * it, and how much those hold, the part a pod of that size cannot use. */
  uint8_t below[STK__SIM_MILLI];
  int32_t small[STK__SIM_MILLI];
  int g = 0;
  int32_t sum = 0;
  for (uint32_t k = 0; k < w->nth; k++) {
    while (g < ngpu && sorted[g] < w->th[k]) sum += sorted[g++];
    below[k] = (uint8_t)g;
    small[k] = sum;
  }
  double f = (double)total * w->p_cpu; /* CPU-only pods use no GPU at all */
  for (uint32_t i = 0; i < w->ntyp; i++) {
    const struct stk__sim_typical *t = &w->typ[i];
    int ok = ((t->mask >> model) & 1) && ngpu - below[t->th] >= t->num && cpu_left >= t->cpu;
    f += t->p * (double)(ok ? small[t->th] : total);
  }
  return f;
}

double stk__sim_frag_after(const struct stk__sim_state *st, const struct stk__sim_node *n,
                           const struct stk__sim_spec *sp, int gpu) {
  int16_t v[STK_SIM_MAX_GPUS];
  int ng = n->ngpu;
  memcpy(v, n->sorted, (size_t)ng * sizeof *v);
  if (sp->num > 0) {
    if (sp->share) {
      int16_t old = n->gpu[gpu];
      int i = 0;
      while (v[i] != old) i++;
      v[i] = (int16_t)(old - sp->milli);
      for (; i > 0 && v[i - 1] > v[i]; i--) {
        int16_t t = v[i];
        v[i] = v[i - 1];
        v[i - 1] = t;
      }
    } else {
      /* Whole GPUs come from the fully free ones, which sort last. */
      for (int k = 0; k < sp->num; k++) v[ng - 1 - k] = 0;
      sort_gpus(v, ng);
    }
  }
  return stk__sim_frag(st->w, n->model, n->cpu_left - sp->cpu_nz, v, ng);
}

/* Recompute a node's derived fields after its GPUs or CPU changed. */
static void refresh(struct stk__sim_state *st, uint32_t i) {
  struct stk__sim_node *n = &st->node[i];
  memcpy(n->sorted, n->gpu, n->ngpu * sizeof *n->gpu);
  sort_gpus(n->sorted, n->ngpu);
  int32_t total = 0;
  uint8_t nfree = 0;
  for (int g = 0; g < n->ngpu; g++) {
    total += n->gpu[g];
    nfree += n->gpu[g] == STK__SIM_MILLI;
  }
  n->gpu_left = total;
  n->nfree = nfree;
  n->version++;
  double f = stk__sim_frag(st->w, n->model, n->cpu_left, n->sorted, n->ngpu);
  st->frag_sum += f - n->frag;
  n->frag = f;
  struct stk__sim_hot *h = &st->hot[i];
  h->mem_left = n->mem_left;
  h->cpu_left = n->cpu_left;
  h->version = n->version;
  h->max_left = n->ngpu ? n->sorted[n->ngpu - 1] : 0;
  h->nfree = n->nfree;
  h->model = n->model;
  if (st->log) st->log[st->changes & (st->log_cap - 1)] = i;
  st->changes++;
}

int stk__sim_state_init(struct stk__sim_state *st, const struct stk_sim_cluster *c,
                        const struct stk_sim_workload *w, const struct stk_sim_policy_ops *pol,
                        uint64_t seed) {
  return stk__sim_state_init_trees(st, c, w, pol, seed, -1);
}

int stk__sim_state_init_trees(struct stk__sim_state *st, const struct stk_sim_cluster *c,
                              const struct stk_sim_workload *w,
                              const struct stk_sim_policy_ops *pol, uint64_t seed, int trees) {
  memset(st, 0, sizeof *st);
  st->c = c;
  st->w = w;
  st->pol = pol;
  stk_rng_seed(&st->rng, stk_mix64(seed, 0x5c4ed));
  st->node = calloc(c->n, sizeof *st->node);
  st->hot = calloc(c->n, sizeof *st->hot);
  st->cand = malloc(c->n * sizeof *st->cand);
  st->rawgpu = malloc(c->n);
  st->order = malloc(c->n * sizeof *st->order);
  if (!st->node || !st->hot || !st->cand || !st->rawgpu || !st->order) goto nomem;
  /* The seeded node order that breaks ties: a random permutation, as the
   * artifact prefixes node names with one before sorting them. Nodes are
   * kept in that order, so the first best node found wins. */
  for (uint32_t i = 0; i < c->n; i++) st->order[i] = i;
  for (uint32_t i = c->n; i > 1; i--) {
    uint32_t j = (uint32_t)stk_rng_below(&st->rng, i);
    uint32_t t = st->order[i - 1];
    st->order[i - 1] = st->order[j];
    st->order[j] = t;
  }
  if (pol->flags & STK_SIM_POLICY_CACHE) {
    uint32_t per = CACHE_ENTRIES / c->n;
    st->cache_specs = per < w->nspec ? per : w->nspec;
    if (st->cache_specs) {
      st->cache = calloc((size_t)c->n * st->cache_specs, sizeof *st->cache);
      if (!st->cache) goto nomem;
    }
    if (trees < 0) trees = c->n >= TREE_MIN_NODES; /* below, a scan is as fast */
    if (st->cache_specs && trees) {
      st->tree_p = 1;
      while (st->tree_p < c->n) st->tree_p *= 2;
      uint32_t per_tree = 2 * st->tree_p;
      st->tree_kinds = TREE_ENTRIES / per_tree < w->nkind ? TREE_ENTRIES / per_tree : w->nkind;
      st->tree = malloc(((size_t)st->tree_kinds * per_tree + 1) * sizeof *st->tree);
      st->tree_stamp = calloc(st->tree_kinds + 1, sizeof *st->tree_stamp);
      st->log_cap = 1;
      while (st->log_cap < c->n / 8 + 64) st->log_cap *= 2;
      st->log = malloc(st->log_cap * sizeof *st->log);
      if (!st->tree || !st->tree_stamp || !st->log) goto nomem;
    }
  }
  for (uint32_t i = 0; i < c->n; i++) {
    struct stk__sim_node *n = &st->node[i];
    uint32_t ci = st->order[i];
    n->cpu_left = c->cpu[ci];
    n->mem_left = c->mem[ci];
    n->ngpu = c->ngpu[ci];
    n->model = c->model[ci];
    for (int g = 0; g < n->ngpu; g++) n->gpu[g] = STK__SIM_MILLI;
    refresh(st, i);
    st->total_milli += (int64_t)n->ngpu * STK__SIM_MILLI;
  }
  st->idle_milli = st->total_milli;
  return 0;
nomem:
  stk__sim_state_free(st);
  return STK_ENOMEM;
}

void stk__sim_state_free(struct stk__sim_state *st) {
  free(st->node);
  free(st->hot);
  free(st->cand);
  free(st->rawgpu);
  free(st->order);
  free(st->cache);
  free(st->tree);
  free(st->tree_stamp);
  free(st->log);
  memset(st, 0, sizeof *st);
}

/* The GPU a shared pod takes on node n when the policy has no opinion. */
static int pick_gpu(struct stk__sim_state *st, const struct stk__sim_node *n, int milli) {
  int best = -1, cnt = 0;
  if (st->pol->gpusel == STK_SIM_GPUSEL_RANDOM) {
    for (int g = 0; g < n->ngpu; g++) cnt += n->gpu[g] >= milli;
    if (!cnt) return -1;
    int k = (int)stk_rng_below(&st->rng, (uint64_t)cnt);
    for (int g = 0; g < n->ngpu; g++)
      if (n->gpu[g] >= milli && k-- == 0) return g;
    return -1;
  }
  for (int g = 0; g < n->ngpu; g++) /* tightest fit, lowest index on ties */
    if (n->gpu[g] >= milli && (best < 0 || n->gpu[g] < n->gpu[best])) best = g;
  return best;
}

static inline int score_node(struct stk__sim_state *st, uint32_t i, const struct stk__sim_spec *sp,
                             int cached, int *gpu) {
  const struct stk__sim_node *n = &st->node[i];
  if (cached) {
    struct stk__sim_cache_ent *e = &st->cache[(size_t)(uint32_t)sp->slot * st->c->n + i];
    if (e->version == st->hot[i].version) {
      *gpu = e->gpu;
      return e->score;
    }
    int g = -1, s = st->pol->score(st, n, sp, &g);
    e->version = n->version;
    e->score = (int16_t)(s < INT16_MIN ? INT16_MIN : s > INT16_MAX ? INT16_MAX : s);
    e->gpu = (int8_t)g;
    *gpu = g;
    return e->score;
  }
  *gpu = -1;
  return st->pol->score(st, n, sp, gpu);
}

/* The nodes a pod fits, into cand; branch-free, since whether a node fits
 * is close to a coin toss in a full cluster. */
static uint32_t filter(const struct stk__sim_state *st, const struct stk__sim_spec *sp, int64_t mem,
                       uint32_t *cand) {
  const struct stk__sim_hot *h = st->hot;
  const uint32_t n = st->c->n;
  const int32_t cpu = sp->cpu;
  const uint64_t mask = sp->mask;
  uint32_t nf = 0;
  if (sp->num == 0) {
    for (uint32_t i = 0; i < n; i++) {
      cand[nf] = i;
      nf += (h[i].cpu_left >= cpu) & (h[i].mem_left >= mem);
    }
  } else if (sp->share) {
    const int16_t milli = sp->milli;
    for (uint32_t i = 0; i < n; i++) {
      cand[nf] = i;
      nf += (h[i].cpu_left >= cpu) & (h[i].mem_left >= mem) & (h[i].max_left >= milli) &
            (uint32_t)((mask >> h[i].model) & 1);
    }
  } else {
    const uint8_t num = sp->num;
    for (uint32_t i = 0; i < n; i++) {
      cand[nf] = i;
      nf += (h[i].cpu_left >= cpu) & (h[i].mem_left >= mem) & (h[i].nfree >= num) &
            (uint32_t)((mask >> h[i].model) & 1);
    }
  }
  return nf;
}

/* ---- per-kind tournament trees ---------------------------------------
 * For a policy whose scores are cached, each popular pod kind keeps a
 * binary tree over the nodes whose leaves are the nodes the kind fits and
 * whose inner entries hold the better child: higher score, then lower
 * index. Only nodes changed since the kind was last placed are re-scored
 * and re-played up the tree (a log of changed nodes tells which), so a
 * decision costs those changes times log(nodes) instead of a scan of every
 * node; a tree too far behind is rebuilt in one pass. */

static inline int32_t better(const struct stk__sim_cache_ent *e, int32_t a, int32_t b) {
  if (a < 0) return b;
  if (b < 0) return a;
  if (e[a].score != e[b].score) return e[a].score > e[b].score ? a : b;
  return a < b ? a : b;
}

static void tree_leaf(struct stk__sim_state *st, const struct stk__sim_spec *sp, int64_t mem,
                      int32_t *t, uint32_t i) {
  int g;
  if (stk__sim_fits(&st->hot[i], sp, mem)) {
    score_node(st, i, sp, 1, &g);
    t[st->tree_p + i] = (int32_t)i;
  } else {
    t[st->tree_p + i] = -1;
  }
}

/* Bring kind k's tree up to date; returns its best node or -1. */
static int32_t tree_best(struct stk__sim_state *st, const struct stk__sim_kind *k,
                         const struct stk__sim_spec *sp) {
  const uint32_t P = st->tree_p, n = st->c->n;
  int32_t *t = st->tree + (size_t)k->rank * 2 * P;
  const struct stk__sim_cache_ent *e = st->cache + (size_t)(uint32_t)sp->slot * n;
  uint64_t *stamp = &st->tree_stamp[k->rank];
  uint64_t behind = st->changes - *stamp;
  if (behind >= st->log_cap || behind * 8 >= n) {
    for (uint32_t i = 0; i < n; i++) tree_leaf(st, sp, k->mem, t, i);
    for (uint32_t i = n; i < P; i++) t[P + i] = -1;
    for (uint32_t j = P - 1; j >= 1; j--) t[j] = better(e, t[2 * j], t[2 * j + 1]);
  } else {
    for (uint64_t c = *stamp; c < st->changes; c++) {
      uint32_t i = st->log[c & (st->log_cap - 1)];
      tree_leaf(st, sp, k->mem, t, i);
      for (uint32_t j = (P + i) / 2; j >= 1; j /= 2) t[j] = better(e, t[2 * j], t[2 * j + 1]);
    }
  }
  *stamp = st->changes;
  return t[1];
}

int stk__sim_schedule(struct stk__sim_state *st, uint32_t kind, struct stk__sim_bind *b) {
  const struct stk__sim_kind *k = &st->w->kind[kind];
  const struct stk__sim_spec *sp = &st->w->spec[k->spec];
  int cached = st->cache && sp->slot >= 0 && (uint32_t)sp->slot < st->cache_specs;
  int64_t pick = -1;
  int best = INT_MIN;
  st->decisions++;
  if (cached && k->rank < st->tree_kinds) {
    int32_t top = tree_best(st, k, sp);
    if (top < 0) return STK_ENOSPC;
    pick = top;
    st->rawgpu[top] = st->cache[(size_t)(uint32_t)sp->slot * st->c->n + (uint32_t)top].gpu;
    goto chosen;
  }
  if (st->pol->flags & STK_SIM_POLICY_UNIFORM) {
    /* Draw nodes until one fits: uniform over the nodes that fit. After
     * many misses the scan below draws among them instead, which is still
     * uniform, and cheap, as then few fit. */
    const uint32_t n = st->c->n;
    for (int tries = 0; tries < 48; tries++) {
      uint32_t i = (uint32_t)stk_rng_below(&st->rng, n);
      if (stk__sim_fits(&st->hot[i], sp, k->mem)) {
        pick = i;
        goto chosen;
      }
    }
  }
  uint32_t nf = filter(st, sp, k->mem, st->cand);
  /* The highest score wins; among equal scores the node that comes first
   * in the run's seeded node order, as the artifact's scheduler picks the
   * lexicographically smallest of its randomly prefixed node names. */
  if (st->pol->flags & STK_SIM_POLICY_UNIFORM) {
    if (nf) pick = st->cand[nf == 1 ? 0 : stk_rng_below(&st->rng, nf)];
  } else {
    for (uint32_t j = 0; j < nf; j++) {
      uint32_t i = st->cand[j];
      int g, s = score_node(st, i, sp, cached, &g);
      if (s > best) {
        best = s, pick = i;
        st->rawgpu[i] = (int8_t)g;
      }
    }
  }
  if (pick < 0) return STK_ENOSPC;
chosen:;
  const struct stk__sim_node *nd = &st->node[pick];
  b->node = (int32_t)pick;
  b->gpus = 0;
  if (sp->share) {
    int g = st->pol->gpusel == STK_SIM_GPUSEL_SCORE ? st->rawgpu[pick] : -1;
    if (g < 0 || nd->gpu[g] < sp->milli) g = pick_gpu(st, nd, sp->milli);
    b->gpus = 1u << g;
  } else if (sp->num) {
    int need = sp->num;
    for (int g = 0; g < nd->ngpu && need; g++) /* first fully free GPUs by index */
      if (nd->gpu[g] == STK__SIM_MILLI) b->gpus |= 1u << g, need--;
  }
  return 0;
}

static void apply(struct stk__sim_state *st, uint32_t kind, const struct stk__sim_bind *b,
                  int sign) {
  const struct stk__sim_kind *k = &st->w->kind[kind];
  const struct stk__sim_spec *sp = &st->w->spec[k->spec];
  struct stk__sim_node *n = &st->node[b->node];
  n->cpu_left -= sign * sp->cpu;
  n->mem_left -= sign * k->mem;
  if (sp->num) {
    int64_t milli = 0;
    for (int g = 0; g < n->ngpu; g++)
      if (b->gpus >> g & 1) {
        n->gpu[g] = (int16_t)(n->gpu[g] - sign * sp->milli);
        milli += sp->milli;
      }
    st->used_milli += sign * milli;
    st->idle_milli -= sign * milli;
    int tag = sp->share ? 0 : sp->num;
    if (sign > 0 && n->aff[tag]++ == 0) n->naff++;
    if (sign < 0 && --n->aff[tag] == 0) n->naff--;
  }
  refresh(st, (uint32_t)b->node);
}

void stk__sim_bind(struct stk__sim_state *st, uint32_t kind, const struct stk__sim_bind *b) {
  apply(st, kind, b, 1);
}

void stk__sim_unbind(struct stk__sim_state *st, uint32_t kind, const struct stk__sim_bind *b) {
  apply(st, kind, b, -1);
}

double stk__sim_round(double x) { return nearbyint(x); }

uint64_t stk__sim_thread_ns(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)) return 0;
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
