/* ParvaGPU (SC'24) reproduced: the segment configurator (per service, the
 * point of best throughput per compute slice whose latency is under half
 * the SLO less 10%, as many whole copies as the rate needs and the smallest
 * last segment that covers the rest) and the segment allocator (segments
 * largest first, each onto the GPU it leaves fullest, then the GPUs at most
 * 4/7 used emptied from the last down and their services refilled with 2g
 * and 1g segments). The method is read from the artifact's public source
 * for facts only; the placement here is NVIDIA's real A100 80 GB geometry
 * (stoker/mig.h) where the artifact tracks only a start slot. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "parva_impl.h"

const uint8_t stk__parva_sizes[PARVA_NSIZES] = {1, 2, 3, 4, 7};

static const struct stk_mig_geometry *geom(void) { return stk_mig_geometry_find("a100-80gb"); }
const struct stk_mig_geometry *stk__parva_geom(void) { return geom(); }

int stk__parva_profile_of(unsigned size) {
  static const char *names[8] = {NULL, "1g", "2g", "3g", "4g", NULL, NULL, "7g"};
  return size < 8 && names[size] ? stk_mig_profile_find(geom(), names[size]) : -1;
}

static int size_index(unsigned size) {
  for (int i = 0; i < PARVA_NSIZES; i++)
    if (stk__parva_sizes[i] == size) return i;
  return -1;
}

void stk__parva_service(const struct stk_parva *p, unsigned scen, unsigned m,
                        struct parva_svc *s) {
  memset(s, 0, sizeof *s);
  size_t at = (size_t)scen * p->nmodels + m;
  if (isnan(p->rate[at])) return;
  s->active = 1;
  s->rate = p->rate[at];
  s->rate_i = (float)trunc(p->rate[at]); /* the artifact reads them with atoi */
  s->slo_i = (float)trunc(p->slo[at]);
  s->bound = (float)((double)(s->slo_i / 2) * 0.9);
  float best[PARVA_NSIZES];
  for (int k = 0; k < PARVA_NSIZES; k++) best[k] = FLT_MIN;
  for (size_t i = 0; i < p->npts[m]; i++) {
    const struct parva_point *pt = &p->pts[m][i];
    int k = size_index(pt->size);
    float per = pt->trp / (float)pt->size;
    if (pt->ltc < s->bound && per > best[k]) {
      best[k] = per;
      s->best[k] = pt;
    }
  }
}

/* ---- GPUs ---------------------------------------------------------------- */

int stk__parva_put(struct parva_gpu *g, unsigned model, const struct parva_point *pt, int start) {
  /* the artifact's slot order per size; it puts a 3g only at slot 4, so at
   * most one 3g per GPU; PARVA_ANY_SLOT also tries slot 0 for a 3g */
  static const int8_t order[8][8] = {
      [1] = {0, 6, 4, 1, 2, 3, 5, -1}, [2] = {0, 4, 2, -1}, [3] = {4, -1, 0, -1},
      [4] = {0, -1},                   [7] = {0, -1},
  };
  int prof = stk__parva_profile_of(pt->size);
  if (prof < 0) return -1;
  unsigned n = g->layout.n;
  int ok = -1;
  if (start >= 0)
    ok = stk_mig_layout_add(geom(), &g->layout, prof, start, NULL);
  else
    for (int i = 0; i < 8 && ok; i++) {
      int s = order[pt->size][i];
      if (s < 0 && (start != PARVA_ANY_SLOT || pt->size != 3 || i > 1)) break;
      if (s >= 0) ok = stk_mig_layout_add(geom(), &g->layout, prof, s, NULL);
    }
  if (ok) return -1;
  g->pt[n] = pt;
  g->model[n] = (uint16_t)model;
  g->used += pt->size;
  return 0;
}

static void drop(struct parva_gpu *g, unsigned k) {
  g->used -= g->pt[k]->size;
  for (unsigned i = k + 1; i < g->layout.n; i++) {
    g->layout.inst[i - 1] = g->layout.inst[i];
    g->pt[i - 1] = g->pt[i];
    g->model[i - 1] = g->model[i];
  }
  g->layout.n--;
}

struct parva_gpu *stk__parva_grow(struct parva_fleet *f) {
  if (f->n == f->cap) {
    size_t cap = f->cap ? f->cap * 2 : 16;
    struct parva_gpu *g = realloc(f->gpu, cap * sizeof *g);
    if (!g) return NULL;
    f->gpu = g;
    f->cap = cap;
  }
  memset(&f->gpu[f->n], 0, sizeof *f->gpu);
  return &f->gpu[f->n++];
}

/* ---- the artifact's allocator --------------------------------------------- */

struct item {
  uint16_t model;
  const struct parva_point *pt;
};
struct queue {
  struct item *it;
  size_t head, n, cap;
};

static int push(struct queue *q, unsigned model, const struct parva_point *pt) {
  if (q->n == q->cap) {
    size_t cap = q->cap ? q->cap * 2 : 16;
    struct item *it = realloc(q->it, cap * sizeof *it);
    if (!it) return STK_ENOMEM;
    q->it = it;
    q->cap = cap;
  }
  q->it[q->n++] = (struct item){(uint16_t)model, pt};
  return 0;
}

/* The GPU an instance of size leaves with the fewest free slices (the
 * first such), among those where it has a valid place; a new GPU if none. */
static struct parva_gpu *fit(struct parva_fleet *f, const struct parva_point *pt) {
  struct parva_gpu *best = NULL;
  int min = 1 << 30;
  for (size_t i = 0; i < f->n; i++) {
    struct parva_gpu *g = &f->gpu[i];
    int diff = STK_MIG_COMPUTE_SLICES - (int)g->used - pt->size;
    if (diff < 0 || diff >= min) continue;
    struct parva_gpu t = *g;
    if (stk__parva_put(&t, 0, pt, PARVA_ARTIFACT_SLOT)) continue;
    best = g;
    min = diff;
  }
  return best ? best : stk__parva_grow(f);
}

/* Place every queued segment, largest size first, queues left empty. */
static int drain(struct parva_fleet *f, struct queue q[PARVA_NSIZES], char *errmsg) {
  for (int k = PARVA_NSIZES - 1; k >= 0; k--) {
    for (; q[k].head < q[k].n; q[k].head++) {
      struct item *it = &q[k].it[q[k].head];
      struct parva_gpu *g = fit(f, it->pt);
      if (!g || stk__parva_put(g, it->model, it->pt, PARVA_ARTIFACT_SLOT))
        return stk__errf(errmsg, STK_ENOMEM, "parvagpu: out of memory placing segments");
    }
    q[k].head = q[k].n = 0;
  }
  return 0;
}

/* Refill a service whose segments were taken off an underused GPU: the
 * artifact's choice between 2g and 1g segments for the rate acc owes. */
static int refill(const struct parva_svc *s, unsigned m, const struct parva_point *taken,
                  float *acc, struct queue q[PARVA_NSIZES]) {
  const struct parva_point *one = s->best[0], *two = s->best[1];
  int rc = 0;
  if (!one && !two) { /* the artifact drops the segment here; stoker puts it back */
    *acc -= taken->trp;
    return push(&q[size_index(taken->size)], m, taken);
  }
  if (two && (!one || two->trp / 2 > one->trp)) {
    int n2 = one ? (int)floor(*acc / two->trp) : (int)ceil(*acc / two->trp);
    for (int i = 0; i < n2 && !rc; i++, *acc -= two->trp) rc = push(&q[1], m, two);
    if (!one) return rc;
  }
  int n1 = (int)ceil(*acc / one->trp);
  for (int i = 0; i < n1 && !rc; i++, *acc -= one->trp) rc = push(&q[0], m, one);
  return rc;
}

int stk__parva_artifact(const struct stk_parva *p, unsigned scen, struct parva_fleet *f,
                        char *errmsg) {
  struct queue q[PARVA_NSIZES] = {{0}};
  struct parva_svc *svc = calloc(p->nmodels, sizeof *svc);
  float *acc = calloc(p->nmodels, sizeof *acc);
  int rc = svc && acc ? 0 : stk__errf(errmsg, STK_ENOMEM, "parvagpu: out of memory");
  for (unsigned m = 0; m < p->nmodels && !rc; m++) {
    struct parva_svc *s = &svc[m];
    stk__parva_service(p, scen, m, s);
    if (!s->active) continue;
    const struct parva_point *opt = NULL;
    float max = FLT_MIN;
    for (size_t i = 0; i < p->npts[m]; i++) {
      const struct parva_point *pt = &p->pts[m][i];
      float per = pt->trp / (float)pt->size;
      if (pt->ltc < s->bound && per > max) {
        max = per;
        opt = pt;
      }
    }
    if (!opt) {
      rc = stk__errf(errmsg, STK_EINVAL,
                     "parvagpu: scenario %u, %s: no profiled segment meets the latency SLO "
                     "(%.1f ms: every latency is over SLO / 2 x 0.9 = %.1f ms)",
                     scen + 1, p->names[m], (double)s->slo_i, (double)s->bound);
      break;
    }
    if (s->rate_i / opt->trp > 100000) {
      rc = stk__errf(errmsg, STK_ERANGE,
                     "parvagpu: scenario %u, %s: %.0f requests/s needs over 100000 segments",
                     scen + 1, p->names[m], (double)s->rate_i);
      break;
    }
    int n = (int)floor(s->rate_i / opt->trp);
    if (fmod(s->rate_i, opt->trp) == 0) n--;
    float rest = s->rate_i - opt->trp * (float)n;
    const struct parva_point *last = NULL;
    for (int k = 0; k < PARVA_NSIZES && !last; k++)
      if (s->best[k] && rest <= s->best[k]->trp) last = s->best[k];
    if (!last) {
      rc = stk__errf(errmsg, STK_EINVAL,
                     "parvagpu: scenario %u, %s: no segment covers the last %.1f requests/s",
                     scen + 1, p->names[m], (double)rest);
      break;
    }
    for (int i = 0; i < n && !rc; i++) rc = push(&q[size_index(opt->size)], m, opt);
    if (!rc) rc = push(&q[size_index(last->size)], m, last);
  }
  if (!rc) rc = drain(f, q, errmsg);
  /* the optimisation: empty each GPU at most 4/7 used, last first */
  for (size_t i = f->n; !rc && i-- > 0;) {
    if (f->gpu[i].used > 4) continue;
    for (unsigned slot = 0; slot < STK_MIG_MEMORY_SLICES && !rc; slot++) {
      struct parva_gpu *g = &f->gpu[i];
      unsigned k = 0;
      while (k < g->layout.n && g->layout.inst[k].start != slot) k++;
      if (k == g->layout.n) continue;
      unsigned m = g->model[k];
      const struct parva_point *taken = g->pt[k];
      acc[m] += taken->trp;
      drop(g, k);
      rc = refill(&svc[m], m, taken, &acc[m], q);
      if (!rc) rc = drain(f, q, errmsg);
    }
  }
  if (rc == STK_ENOMEM && errmsg && !*errmsg) stk__errf(errmsg, rc, "parvagpu: out of memory");
  for (int k = 0; k < PARVA_NSIZES; k++) free(q[k].it);
  free(svc);
  free(acc);
  return rc;
}
