/* stoker's own ParvaGPU allocator, the plan around both methods, and the
 * plan check. Packed: each service gets the fewest compute slices whose
 * segments cover its rate under the same latency bound (an unbounded
 * knapsack over the best point of each instance size), the composition
 * with fewest 3g instances among those; then an exact search packs the
 * instances onto K GPUs, K from the bound ceil(slices / 7) up. A GPU takes
 * any set of sizes summing to at most 7 except two 3g with anything else
 * (NVIDIA's A100 geometry: a 3g at slot 0 leaves no memory slice of its
 * half). When K equals the bound, no plan under the rule needs fewer. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "parva_impl.h"

#define MAX_SLICES 100000
#define SEARCH_NODES 2000000L

unsigned stk__parva_min_slices(const struct parva_svc *s) {
  double best[8] = {0}; /* best[g % 8]: most throughput from g slices */
  for (unsigned g = 1; g <= MAX_SLICES; g++) {
    double b = best[(g - 1) % 8];
    for (int k = 0; k < PARVA_NSIZES; k++) {
      unsigned sz = stk__parva_sizes[k];
      if (s->best[k] && sz <= g) {
        double v = best[(g - sz) % 8] + s->best[k]->trp;
        if (v > b) b = v;
      }
    }
    best[g % 8] = b;
    if (b >= s->rate) return g;
  }
  return 0;
}

/* The composition of exactly g slices covering the rate with fewest 3g,
 * then most throughput; counts per size index into n. 0, or -1 if g is
 * too large to enumerate (the caller then uses greedy fill). */
static int compose(const struct parva_svc *s, unsigned g, unsigned n[PARVA_NSIZES]) {
  if (g > 70) return -1;
  double t[PARVA_NSIZES];
  for (int k = 0; k < PARVA_NSIZES; k++) t[k] = s->best[k] ? s->best[k]->trp : -1;
  int found = 0;
  unsigned best3 = 0;
  double bestcap = 0;
  for (unsigned a = 0; a * 7 <= g; a++)
    for (unsigned b = 0; a * 7 + b * 4 <= g; b++)
      for (unsigned c = 0; a * 7 + b * 4 + c * 3 <= g; c++)
        for (unsigned d = 0; a * 7 + b * 4 + c * 3 + d * 2 <= g; d++) {
          unsigned e = g - a * 7 - b * 4 - c * 3 - d * 2;
          unsigned cnt[PARVA_NSIZES] = {e, d, c, b, a};
          double cap = 0;
          int ok = 1;
          for (int k = 0; k < PARVA_NSIZES && ok; k++) {
            if (cnt[k] && t[k] < 0) ok = 0;
            cap += cnt[k] * (t[k] > 0 ? t[k] : 0);
          }
          if (!ok || cap < s->rate) continue;
          if (!found || c < best3 || (c == best3 && cap > bestcap)) {
            found = 1;
            best3 = c;
            bestcap = cap;
            memcpy(n, cnt, sizeof cnt);
          }
        }
  return found ? 0 : -1;
}

struct pitem {
  uint16_t model;
  const struct parva_point *pt;
};

static int cmp_item(const void *x, const void *y) {
  const struct pitem *a = x, *b = y;
  if (a->pt->size != b->pt->size) return b->pt->size - a->pt->size;
  return a->model - b->model;
}

struct packer {
  const struct pitem *it;
  size_t n;
  unsigned k;
  uint8_t used[4096], n3[4096];
  uint16_t bin[8192];
  long nodes;
};

static int fits(const struct packer *p, unsigned b, unsigned size) {
  if (p->used[b] + size > STK_MIG_COMPUTE_SLICES) return 0;
  if (p->n3[b] == 2) return 0;
  if (size == 3 && p->n3[b] == 1) return p->used[b] == 3;
  return 1;
}

static int search(struct packer *p, size_t i, unsigned rest) {
  if (i == p->n) return 1;
  if (++p->nodes > SEARCH_NODES) return 0;
  unsigned free_ = 0;
  for (unsigned b = 0; b < p->k; b++) free_ += STK_MIG_COMPUTE_SLICES - p->used[b];
  if (rest > free_) return 0;
  unsigned size = p->it[i].pt->size;
  for (unsigned b = 0; b < p->k; b++) {
    if (!fits(p, b, size)) continue;
    int seen = 0; /* a bin in the same state was tried already */
    for (unsigned c = 0; c < b && !seen; c++)
      seen = p->used[c] == p->used[b] && p->n3[c] == p->n3[b];
    if (seen) continue;
    p->used[b] += size;
    p->n3[b] += size == 3;
    p->bin[i] = (uint16_t)b;
    if (search(p, i + 1, rest - size)) return 1;
    p->used[b] -= size;
    p->n3[b] -= size == 3;
  }
  return 0;
}

/* The packer found `found` GPUs, over the bound lb: search every plan on
 * lb .. found-1 GPUs. A plan found is placed in f (*other = 1); none
 * proves found the fewest (f->proven). */
static int prove(const struct stk_parva *p, unsigned scen, unsigned lb, unsigned found,
                 struct parva_fleet *f, int *other) {
  struct parva_svc *sv = calloc(p->nmodels, sizeof *sv);
  uint16_t *mid = calloc(p->nmodels, sizeof *mid);
  uint8_t(*comp)[PARVA_NSIZES] = calloc(p->nmodels, sizeof *comp);
  uint8_t(*gpu)[PARVA_NSIZES] = calloc(found, sizeof *gpu);
  int rc = sv && mid && comp && gpu ? 0 : STK_ENOMEM, r = 0;
  unsigned ns = 0, k = lb;
  for (unsigned m = 0; m < p->nmodels && !rc; m++) {
    stk__parva_service(p, scen, m, &sv[ns]);
    if (sv[ns].active) mid[ns++] = (uint16_t)m;
  }
  for (; !rc && k < found; k++)
    if ((r = stk__parva_fits(sv, ns, k, comp, gpu)) != 0) break;
  if (!rc && r == 0) f->proven = found;
  if (!rc && r == 1) { /* fill each GPU's sizes from the services' segments */
    unsigned svc_at[PARVA_NSIZES] = {0}, used_at[PARVA_NSIZES] = {0};
    for (unsigned g = 0; g < k && !rc; g++) {
      struct parva_gpu *dst = stk__parva_grow(f);
      if (!dst) rc = STK_ENOMEM;
      for (int z = PARVA_NSIZES - 1; z >= 0 && !rc; z--)
        for (unsigned c = 0; c < gpu[g][z] && !rc; c++) {
          while (svc_at[z] < ns && used_at[z] >= comp[svc_at[z]][z]) {
            svc_at[z]++;
            used_at[z] = 0;
          }
          if (svc_at[z] == ns ||
              stk__parva_put(dst, mid[svc_at[z]], sv[svc_at[z]].best[z], PARVA_ANY_SLOT))
            rc = STK_EINVAL;
          used_at[z]++;
        }
    }
    *other = 1;
  }
  free(sv);
  free(mid);
  free(comp);
  free(gpu);
  return rc;
}

int stk__parva_packed(const struct stk_parva *p, unsigned scen, struct parva_fleet *f,
                      char *errmsg) {
  size_t cap = 1024, n = 0;
  struct pitem *it = malloc(cap * sizeof *it);
  unsigned slices = 0;
  int rc = it ? 0 : STK_ENOMEM;
  for (unsigned m = 0; m < p->nmodels && !rc; m++) {
    struct parva_svc s;
    stk__parva_service(p, scen, m, &s);
    if (!s.active) continue;
    unsigned g = stk__parva_min_slices(&s), cnt[PARVA_NSIZES] = {0};
    int any = 0;
    for (int k = 0; k < PARVA_NSIZES; k++) any |= s.best[k] != NULL;
    if (!g && any) {
      rc = stk__errf(errmsg, STK_ERANGE,
                     "parvagpu: scenario %u, %s: %.0f requests/s needs over %d compute slices",
                     scen + 1, p->names[m], s.rate, MAX_SLICES);
      break;
    }
    if (!g) {
      rc = stk__errf(errmsg, STK_EINVAL,
                     "parvagpu: scenario %u, %s: no profiled segment meets the latency SLO "
                     "(%.1f ms: every latency is over SLO / 2 x 0.9 = %.1f ms)",
                     scen + 1, p->names[m], (double)s.slo_i, (double)s.bound);
      break;
    }
    if (compose(&s, g, cnt)) { /* too many slices to enumerate: the largest size, then
                                  the smallest size that covers the rest */
      int big = PARVA_NSIZES - 1;
      while (!s.best[big]) big--; /* g > 0: some size has a point */
      double got = 0;
      while (got < s.rate) {
        int k = big;
        for (int j = 0; j < big; j++)
          if (s.best[j] && s.best[j]->trp >= s.rate - got) {
            k = j;
            break;
          }
        cnt[k]++;
        got += s.best[k]->trp;
      }
    }
    for (int k = 0; k < PARVA_NSIZES && !rc; k++)
      for (unsigned c = 0; c < cnt[k] && !rc; c++) {
        if (n == cap) {
          struct pitem *t = n < 8192 / 2 ? realloc(it, cap * 2 * sizeof *it) : NULL;
          if (!t) {
            rc = stk__errf(errmsg, STK_ERANGE, "parvagpu: more than 4096 segments");
            break;
          }
          it = t;
          cap *= 2;
        }
        it[n++] = (struct pitem){(uint16_t)m, s.best[k]};
        slices += stk__parva_sizes[k];
      }
  }
  struct packer *pk = rc ? NULL : calloc(1, sizeof *pk);
  if (!rc && !pk) rc = STK_ENOMEM;
  if (!rc) {
    qsort(it, n, sizeof *it, cmp_item);
    pk->it = it;
    pk->n = n;
    int done = 0;
    for (pk->k = (slices + 6) / 7; !done && pk->k <= n && pk->k < 4096; pk->k++) {
      memset(pk->used, 0, sizeof pk->used);
      memset(pk->n3, 0, sizeof pk->n3);
      pk->nodes = 0;
      done = search(pk, 0, slices);
      if (done) break;
    }
    if (!done) rc = stk__errf(errmsg, STK_ERANGE, "parvagpu: packing search gave up");
  }
  int other = 0; /* a plan on fewer GPUs found by the exhaustive search */
  if (!rc && pk->k > (slices + 6) / 7) rc = prove(p, scen, (slices + 6) / 7, pk->k, f, &other);
  for (unsigned b = 0; !rc && !other && b < pk->k; b++)
    if (!stk__parva_grow(f)) rc = STK_ENOMEM;
  for (size_t i = 0; !rc && !other && i < n; i++)
    if (stk__parva_put(&f->gpu[pk->bin[i]], it[i].model, it[i].pt, PARVA_ANY_SLOT))
      rc = stk__errf(errmsg, STK_EINVAL, "parvagpu: a packed GPU has no valid MIG layout");
  if (rc == STK_ENOMEM && errmsg && !*errmsg) stk__errf(errmsg, rc, "parvagpu: out of memory");
  free(pk);
  free(it);
  return rc;
}

/* ---- plans -------------------------------------------------------------- */

static int cmp_seg(const void *x, const void *y) {
  const struct stk_parva_segment *a = x, *b = y;
  if (a->gpu != b->gpu) return a->gpu < b->gpu ? -1 : 1;
  return a->start - b->start;
}

int stk__parva_emit(const struct stk_parva *p, unsigned scen, const struct parva_fleet *f,
                    struct stk_parva_plan *out, char *errmsg) {
  size_t nseg = 0;
  for (size_t i = 0; i < f->n; i++) nseg += f->gpu[i].layout.n;
  out->seg = calloc(nseg ? nseg : 1, sizeof *out->seg);
  out->svc = calloc(p->nmodels, sizeof *out->svc);
  if (!out->seg || !out->svc) return stk__errf(errmsg, STK_ENOMEM, "parvagpu: out of memory");
  out->models = p->nmodels;
  unsigned lb = 0;
  for (unsigned m = 0; m < p->nmodels; m++) {
    struct parva_svc s;
    stk__parva_service(p, scen, m, &s);
    out->svc[m].active = s.active;
    if (!s.active) continue;
    out->svc[m].rate = s.rate;
    out->svc[m].slo_ms = p->slo[(size_t)scen * p->nmodels + m];
    lb += stk__parva_min_slices(&s);
  }
  out->lower_bound = (lb + 6) / 7;
  if (f->proven > out->lower_bound) out->lower_bound = f->proven;
  for (size_t i = 0; i < f->n; i++) {
    const struct parva_gpu *g = &f->gpu[i];
    if (!g->layout.n) continue;
    for (unsigned k = 0; k < g->layout.n; k++) {
      struct stk_parva_segment *s = &out->seg[out->nseg++];
      s->model = g->model[k];
      s->size = g->pt[k]->size;
      s->procs = g->pt[k]->procs;
      s->batch = g->pt[k]->batch;
      s->start = g->layout.inst[k].start;
      s->gpu = out->gpus;
      s->rate = g->pt[k]->trp;
      s->latency_ms = g->pt[k]->ltc;
      out->slices += s->size;
      struct stk_parva_service *v = &out->svc[s->model];
      v->capacity += s->rate;
      if (s->latency_ms > v->worst_ms) v->worst_ms = s->latency_ms;
    }
    out->gpus++;
  }
  qsort(out->seg, out->nseg, sizeof *out->seg, cmp_seg);
  return 0;
}

int stk_parva_plan(const struct stk_parva *p, unsigned scenario, enum stk_parva_method method,
                   struct stk_parva_plan *out, char *errmsg) {
  memset(out, 0, sizeof *out);
  if (scenario < 1 || scenario > p->nscen)
    return stk__errf(errmsg, STK_EINVAL, "parvagpu: no scenario %u (the SLO files have 1 to %u)",
                     scenario, p->nscen);
  if (method != STK_PARVA_ARTIFACT && method != STK_PARVA_PACKED)
    return stk__errf(errmsg, STK_EINVAL, "parvagpu: unknown method %d", (int)method);
  struct parva_fleet f = {0};
  int rc = method == STK_PARVA_ARTIFACT ? stk__parva_artifact(p, scenario - 1, &f, errmsg)
                                        : stk__parva_packed(p, scenario - 1, &f, errmsg);
  if (!rc) rc = stk__parva_emit(p, scenario - 1, &f, out, errmsg);
  out->scenario = scenario;
  free(f.gpu);
  if (rc) stk_parva_plan_free(out);
  return rc;
}

void stk_parva_plan_free(struct stk_parva_plan *plan) {
  free(plan->seg);
  free(plan->svc);
  memset(plan, 0, sizeof *plan);
}

int stk_parva_check(const struct stk_parva *p, const struct stk_parva_plan *plan, char *errmsg) {
  const struct stk_mig_geometry *g = stk__parva_geom();
  if (plan->scenario < 1 || plan->scenario > p->nscen || plan->models != p->nmodels)
    return stk__errf(errmsg, STK_EINVAL, "parvagpu: the plan is not of these inputs");
  double *cap = calloc(p->nmodels, sizeof *cap);
  if (!cap) return stk__errf(errmsg, STK_ENOMEM, "parvagpu: out of memory");
  int rc = 0;
  struct stk_mig_layout l = {0};
  for (size_t i = 0; i < plan->nseg && !rc; i++) {
    const struct stk_parva_segment *s = &plan->seg[i];
    struct parva_svc v;
    if (s->model >= p->nmodels) {
      rc = stk__errf(errmsg, STK_EINVAL, "parvagpu: segment %zu: no model %u", i, s->model);
      break;
    }
    stk__parva_service(p, plan->scenario - 1, s->model, &v);
    const struct parva_point *pt = NULL;
    for (size_t k = 0; k < p->npts[s->model] && !pt; k++) {
      const struct parva_point *q = &p->pts[s->model][k];
      if (q->size == s->size && q->batch == s->batch && q->procs == s->procs) pt = q;
    }
    const char *name = p->names[s->model];
    if (!v.active)
      rc = stk__errf(errmsg, STK_EINVAL, "parvagpu: GPU %u: %s has no SLO in scenario %u", s->gpu,
                     name, plan->scenario);
    else if (!pt)
      rc = stk__errf(errmsg, STK_EINVAL, "parvagpu: GPU %u: %s %ug batch %u x %u: not profiled",
                     s->gpu, name, s->size, s->batch, s->procs);
    else if (!(pt->ltc < v.bound))
      rc = stk__errf(errmsg, STK_EINVAL,
                     "parvagpu: GPU %u: %s %ug batch %u x %u: latency %.1f ms is not under "
                     "SLO / 2 x 0.9 = %.1f ms",
                     s->gpu, name, s->size, s->batch, s->procs, (double)pt->ltc,
                     (double)v.bound);
    if (rc) break;
    cap[s->model] += pt->trp;
    if (i == 0 || s->gpu != plan->seg[i - 1].gpu) l.n = 0;
    char why[STK_ERRMSG_MAX];
    if (stk_mig_layout_add(g, &l, stk__parva_profile_of(s->size), s->start, why))
      rc = stk__errf(errmsg, STK_EINVAL, "parvagpu: GPU %u: %s", s->gpu, why);
  }
  for (unsigned m = 0; m < p->nmodels && !rc; m++) {
    struct parva_svc v;
    stk__parva_service(p, plan->scenario - 1, m, &v);
    if (v.active && cap[m] < v.rate)
      rc = stk__errf(errmsg, STK_EINVAL,
                     "parvagpu: %s: segments serve %.2f requests/s, the SLO asks %.2f",
                     p->names[m], cap[m], v.rate);
  }
  free(cap);
  return rc;
}

unsigned stk_parva_published_gpus(unsigned scenario) {
  static const unsigned gpus[] = {2, 3, 5, 7, 13, 16};
  return scenario >= 1 && scenario <= 6 ? gpus[scenario - 1] : 0;
}
