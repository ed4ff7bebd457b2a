/* The MIG resource model: every GPU of nodes x gpn is an A100 80 GB cut
 * into MIG instances (mig_gpus.h, the online MIG experiment's GPUs). A job
 * of one GPU takes one instance of a chosen profile (default 2g, as
 * `sim mig --online --one-gpu`); a job of k GPUs takes k whole-GPU (7g)
 * instances on k GPUs, since MIG instances have no peer-to-peer path
 * between them. Places are chosen as the mig-aware policy chooses them:
 * the least fragmentation added, then reuse an idle instance, create one
 * in free slices, or destroy idle instances to make room (a
 * reconfiguration; a busy instance never changes). Instances stay, idle,
 * when their job leaves. Capacity is counted in compute slices, 7 per GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs_impl.h"
#include "mig_gpus.h"
#include "resource.h"

struct mig {
  struct stk__mig_gpus m;
  unsigned one, whole; /* profiles of a one-GPU job and of a whole GPU */
  size_t njobs;
  uint32_t **at;  /* per job: the GPUs of its instances, NULL when not placed */
  int *nat;
  size_t *placed, nplaced, *pos; /* the placed jobs; each one's index in placed */
  uint32_t *mark, epoch;
  struct stk__mig_cand *cand;
  /* fail[p]: the fewest instances of profile p found not to fit since the
   * last release (0: none). Placing only takes room, and k instances that
   * do not fit mean k + 1 do not either, so a queue of waiting jobs costs
   * one search per profile until something leaves. */
  unsigned fail[STK__MIG_MAX_PROFILES];
};

int stk__sim_res_is_mig(const char *placer) {
  return placer && !strncmp(placer, "mig", 3) && (!placer[3] || placer[3] == ':');
}

static unsigned profile_of(const struct mig *M, int want) { return want == 1 ? M->one : M->whole; }

static int g_units(const struct stk__sim_res *r, int want) {
  const struct mig *M = r->impl;
  return want * M->m.g->profiles[profile_of(M, want)].compute;
}

static void count_free(struct stk__sim_res *r) {
  struct mig *M = r->impl;
  for (int n = 0; n < r->nodes; n++) r->free_gpus[n] = 0;
  for (uint32_t gi = 0; gi < M->m.n; gi++)
    if (!M->m.gpu[gi].busy) r->free_gpus[gi / (uint32_t)r->gpn]++;
}

static void release(struct mig *M, size_t job) {
  for (int k = 0; k < M->nat[job]; k++) stk__mig_release(&M->m, M->at[job][k], (int32_t)job);
  memset(M->fail, 0, sizeof M->fail);
  free(M->at[job]);
  M->at[job] = NULL;
  M->nat[job] = 0;
  size_t x = M->pos[job], last = M->placed[--M->nplaced];
  M->placed[x] = last;
  M->pos[last] = x;
}

/* The jobs placed here that stand keep their instances; the rest leave. */
static int g_hold(struct stk__sim_res *r, uint8_t *const *alloc, const int *n, const size_t *idx,
                  size_t count) {
  struct mig *M = r->impl;
  (void)alloc;
  M->epoch++;
  for (size_t k = 0; k < count; k++) {
    size_t j = idx[k];
    if (!n[j]) continue;
    if (j >= M->njobs || M->nat[j] != n[j]) { /* cannot happen: not placed by this model */
      snprintf(r->why, sizeof r->why,
               "MIG: job %zu stands with %d GPUs, but this model placed it on %d", j, n[j],
               j < M->njobs ? M->nat[j] : 0);
      return STK_EINVAL;
    }
    M->mark[j] = M->epoch;
  }
  for (size_t x = M->nplaced; x-- > 0;)
    if (M->mark[M->placed[x]] != M->epoch) release(M, M->placed[x]);
  count_free(r);
  return 0;
}

static int cmp_gpu(const void *a, const void *b) {
  uint32_t x = ((const struct stk__mig_cand *)a)->gpu, y = ((const struct stk__mig_cand *)b)->gpu;
  return (x > y) - (x < y);
}

static int g_place(struct stk__sim_res *r, size_t job, int want, uint8_t *alloc) {
  struct mig *M = r->impl;
  if (job >= M->njobs || M->at[job] || want <= 0 || (uint32_t)want > M->m.n) return STK_ENOSPC;
  unsigned p = profile_of(M, want);
  double cost;
  if (M->fail[p] && (unsigned)want >= M->fail[p]) return STK_ENOSPC;
  if (!stk__mig_choose(&M->m, p, (unsigned)want, M->cand, &cost)) {
    if (!M->fail[p] || (unsigned)want < M->fail[p]) M->fail[p] = (unsigned)want;
    return STK_ENOSPC;
  }
  if (!(M->at[job] = malloc(sizeof **M->at * (size_t)want))) return STK_ENOMEM;
  qsort(M->cand, (size_t)want, sizeof *M->cand, cmp_gpu);
  int created = 0, rc = 0;
  for (int k = 0; k < want && !rc; k++) {
    rc = stk__mig_apply(&M->m, &M->cand[k], p, (int32_t)job, &created, NULL);
    M->at[job][k] = M->cand[k].gpu;
    alloc[k] = (uint8_t)(M->cand[k].gpu / (uint32_t)r->gpn);
    M->nat[job] = k + 1;
  }
  M->pos[job] = M->nplaced;
  M->placed[M->nplaced++] = job;
  if (rc) release(M, job); /* an invalid layout: an internal error */
  count_free(r);
  return rc;
}

static void g_fini(struct stk__sim_res *r) {
  struct mig *M = r->impl;
  if (!M) return;
  for (size_t j = 0; M->at && j < M->njobs; j++) free(M->at[j]);
  free(M->at);
  free(M->nat);
  free(M->placed);
  free(M->pos);
  free(M->mark);
  free(M->cand);
  free(M->m.gpu);
  free(M);
}

static const struct stk__sim_res_ops mig_ops = {
    .name = "mig",
    .hold = g_hold,
    .place = g_place,
    .units = g_units,
    .fini = g_fini,
};

int stk__sim_res_mig(struct stk__sim_res **out, int nodes, int gpn, const struct stk_sim_jobs *J,
                     const char *spec, char *errmsg) {
  *out = NULL;
  const struct stk_mig_geometry *g = stk_mig_geometry_find("a100-80gb");
  const char *name = spec[3] == ':' ? spec + 4 : "2g";
  int one = stk_mig_profile_find(g, name), whole = stk_mig_profile_find(g, "7g");
  if (one < 0)
    return stk__errf(errmsg, STK_EINVAL,
                     "--placer %s: no MIG profile '%s' on the A100 80 GB (1g, 1g.20gb, 2g, 3g, "
                     "4g, 7g, or a full name such as 3g.40gb)",
                     spec, name);
  for (size_t i = 0; i < J->n; i++)
    if (J->job[i].app)
      return stk__errf(errmsg, STK_EINVAL,
                       "--placer %s: %s has jobs of measured applications, whose throughput was "
                       "measured on whole GPUs; MIG placement takes a duration trace",
                       spec, J->path);
  int rc = stk__sim_res_whole(out, nodes, gpn, errmsg);
  if (rc) return rc;
  struct stk__sim_res *r = *out;
  struct mig *M = calloc(1, sizeof *M);
  r->impl = M;
  r->ops = &mig_ops;
  r->unit = STK_MIG_COMPUTE_SLICES;
  size_t n = J->n, gpus = (size_t)nodes * (size_t)gpn;
  if (M) {
    M->m.g = g;
    M->m.n = (uint32_t)gpus;
    M->m.policy = STK_MIG_AWARE;
    M->m.w_frag = 1;
    M->one = (unsigned)one;
    M->whole = (unsigned)whole;
    M->njobs = n;
    M->m.gpu = calloc(gpus, sizeof *M->m.gpu);
    M->at = calloc(n + 1, sizeof *M->at);
    M->nat = calloc(n + 1, sizeof *M->nat);
    M->placed = malloc((n + 1) * sizeof *M->placed);
    M->pos = malloc((n + 1) * sizeof *M->pos);
    M->mark = calloc(n + 1, sizeof *M->mark);
    M->cand = malloc(gpus * sizeof *M->cand);
  }
  if (!M || !M->m.gpu || !M->at || !M->nat || !M->placed || !M->pos || !M->mark || !M->cand) {
    stk__sim_res_free(r);
    *out = NULL;
    return stk__errf(errmsg, STK_ENOMEM, "out of memory");
  }
  /* fragmentation is weighed against the profiles the jobs ask for */
  for (size_t i = 0; i < n; i++)
    if (J->job[i].replicas > 0) M->m.w[profile_of(M, J->job[i].replicas)] += 1.0 / (double)n;
  count_free(r);
  return 0;
}
