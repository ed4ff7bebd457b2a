/* Traces for online MIG scheduling: openb pod lists (fractions of a GPU)
 * and duration traces such as Philly's (whole GPUs), mapped to MIG
 * profiles (include/stoker/mig_online.h states the mapping). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jobs_impl.h"
#include "sim_impl.h"
#include "stoker/mig_online.h"

int stk_mig_profile_for(const struct stk_mig_geometry *g, int milli) {
  if (!g || milli < 1 || milli > STK__SIM_MILLI) return -1;
  int best = -1;
  for (size_t i = 0; i < g->nprofiles; i++) {
    const struct stk_mig_profile *p = &g->profiles[i];
    /* compute >= 7 f and memory >= 8 f, in whole numbers: f = milli / 1000 */
    if (p->media || 1000 * p->compute < STK_MIG_COMPUTE_SLICES * milli ||
        1000 * p->memory < STK_MIG_MEMORY_SLICES * milli)
      continue;
    const struct stk_mig_profile *b = best >= 0 ? &g->profiles[best] : NULL;
    if (!b || p->compute < b->compute || (p->compute == b->compute && p->memory < b->memory))
      best = (int)i;
  }
  return best;
}

static int whole_gpu(const struct stk_mig_geometry *g) {
  return stk_mig_profile_for(g, STK__SIM_MILLI);
}

static int push(struct stk_mig_trace *t, size_t *cap, struct stk_mig_req q) {
  if (t->n == *cap) {
    *cap = *cap ? 2 * *cap : 1024;
    struct stk_mig_req *n = realloc(t->req, sizeof *n * *cap);
    if (!n) return STK_ENOMEM;
    t->req = n;
  }
  t->req[t->n++] = q;
  if (q.profile < 16) t->by_profile[q.profile]++;
  return 0;
}

/* openb: one request per GPU pod; returns 0 or an error naming file:line. */
static int load_openb(struct stk_mig_trace *t, const struct stk_mig_geometry *g,
                      struct stk__sim_csv *r, char *errmsg) {
  struct stk__sim_podcols pc;
  stk__sim_podcols_find(r, &pc);
  if (pc.num < 0 || pc.ctime < 0 || pc.dtime < 0 || pc.cpu < 0)
    return stk__errf(errmsg, STK_EFORMAT,
                     "%s: an openb pod list needs cpu_milli, num_gpu, gpu_milli, creation_time "
                     "and deletion_time columns",
                     r->path);
  size_t cap = 0;
  double last = 0;
  int rc;
  while ((rc = stk__sim_csv_next(r, errmsg)) == 0) {
    int32_t cpu;
    int64_t mem, ct, dt;
    int num, milli;
    if ((rc = stk__sim_pod_parse(r, &pc, &cpu, &mem, &num, &milli, errmsg))) return rc;
    if ((rc = stk__sim_csv_int(r, pc.ctime, 0, INT64_MAX / 2, 0, 0, &ct, errmsg))) return rc;
    if ((rc = stk__sim_csv_int(r, pc.dtime, 0, INT64_MAX / 2, 1, -1, &dt, errmsg))) return rc;
    if (num == 0 || milli == 0) {
      t->cpu_only++;
      continue;
    }
    if (num > 1 && milli < STK__SIM_MILLI)
      return stk__errf(errmsg, STK_EFORMAT,
                       "%s:%llu: %d x %d milli-GPU: a pod may not take a fraction of more than "
                       "one GPU",
                       r->path, (unsigned long long)r->line, num, milli);
    if (dt >= 0 && dt < ct)
      return stk__errf(errmsg, STK_EFORMAT, "%s:%llu: deletion_time %lld is before creation_time %lld",
                       r->path, (unsigned long long)r->line, (long long)dt, (long long)ct);
    struct stk_mig_req q = {(double)ct, dt < 0 ? -1.0 : (double)(dt - ct),
                            milli / (double)STK__SIM_MILLI, (uint16_t)num,
                            (uint8_t)(num > 1 ? whole_gpu(g) : stk_mig_profile_for(g, milli))};
    if (dt > last) last = (double)dt;
    if (ct > last) last = (double)ct;
    if ((rc = push(t, &cap, q))) return rc;
  }
  if (rc != STK_EOF) return rc;
  /* a pod still running when the trace was taken runs to its last time */
  for (size_t i = 0; i < t->n; i++)
    if (t->req[i].duration < 0) t->req[i].duration = last - t->req[i].arrival;
  t->openb = 1;
  return 0;
}

static int load_jobs(struct stk_mig_trace *t, const struct stk_mig_geometry *g, const char *path,
                     int one_gpu, char *errmsg) {
  struct stk_sim_jobs *J;
  int rc = stk_sim_jobs_load(&J, NULL, path, errmsg);
  if (rc) return rc;
  size_t cap = 0;
  for (size_t i = 0; i < J->n && !rc; i++) {
    const struct stk__jspec *s = &J->job[i];
    if (s->replicas > 65535) {
      rc = stk__errf(errmsg, STK_EFORMAT, "%s: job %s asks for %d GPUs", path, s->name,
                     s->replicas);
      break;
    }
    struct stk_mig_req q = {s->submit, s->duration, 1.0, (uint16_t)s->replicas,
                            (uint8_t)(s->replicas > 1 ? whole_gpu(g) : one_gpu)};
    if (s->replicas == 1) q.demand = g->profiles[one_gpu].compute / (double)STK_MIG_COMPUTE_SLICES;
    rc = push(t, &cap, q);
  }
  stk_sim_jobs_free(J);
  return rc;
}

struct tagged {
  struct stk_mig_req q;
  size_t i;
};

static int by_arrival(const void *x, const void *y) {
  const struct tagged *a = x, *b = y;
  if (a->q.arrival != b->q.arrival) return (a->q.arrival > b->q.arrival) - (a->q.arrival < b->q.arrival);
  return (a->i > b->i) - (a->i < b->i);
}

/* Stable order by arrival: qsort with ties broken by file position. */
static int sort_arrivals(struct stk_mig_trace *t) {
  for (size_t i = 1; i < t->n; i++)
    if (t->req[i].arrival < t->req[i - 1].arrival) goto unsorted;
  return 0;
unsorted:;
  struct tagged *w = malloc(sizeof *w * t->n);
  if (!w) return STK_ENOMEM;
  for (size_t i = 0; i < t->n; i++) w[i] = (struct tagged){t->req[i], i};
  qsort(w, t->n, sizeof *w, by_arrival);
  for (size_t i = 0; i < t->n; i++) t->req[i] = w[i].q;
  free(w);
  return 0;
}

int stk_mig_trace_load(struct stk_mig_trace **out, const struct stk_mig_geometry *g,
                       const char *path, int one_gpu_profile, double compress, char *errmsg) {
  *out = NULL;
  if (!g || one_gpu_profile < 0 || (size_t)one_gpu_profile >= g->nprofiles)
    return stk__errf(errmsg, STK_EINVAL, "mig trace: no profile %d on %s", one_gpu_profile,
                     g ? g->name : "(no GPU)");
  if (!(compress >= 1) || !isfinite(compress))
    return stk__errf(errmsg, STK_EINVAL, "mig trace: compress %g is not >= 1", compress);
  struct stk__sim_csv r;
  int rc = stk__sim_csv_open(&r, path, errmsg);
  if (rc) return rc;
  struct stk_mig_trace *t = calloc(1, sizeof *t);
  if (!t) {
    stk__sim_csv_close(&r);
    return STK_ENOMEM;
  }
  int openb = stk__sim_csv_col(&r, "gpu_milli") >= 0;
  if (openb) rc = load_openb(t, g, &r, errmsg);
  /* elastic jobs (Pollux workloads) have no fixed size to map to MIG */
  if (!openb && stk__sim_csv_col(&r, "application") >= 0)
    rc = stk__errf(errmsg, STK_EINVAL,
                   "%s: jobs of measured applications (an application column) size themselves; "
                   "MIG scheduling takes openb pods or a duration trace",
                   path);
  stk__sim_csv_close(&r);
  if (!openb && !rc) rc = load_jobs(t, g, path, one_gpu_profile, errmsg);
  if (!rc && t->n == 0) rc = stk__errf(errmsg, STK_EEMPTY, "%s: no GPU requests", path);
  if (rc) {
    stk_mig_trace_free(t);
    return rc;
  }
  if (sort_arrivals(t)) {
    stk_mig_trace_free(t);
    return STK_ENOMEM;
  }
  double t0 = t->req[0].arrival;
  for (size_t i = 0; i < t->n; i++) {
    t->req[i].arrival = (t->req[i].arrival - t0) / compress;
    if (t->req[i].arrival > STK_MIG_MAX_TIME_S || t->req[i].duration > STK_MIG_MAX_TIME_S) {
      stk__errf(errmsg, STK_EFORMAT, "%s: request %zu (by arrival) spans more than 1e12 s", path,
                i + 1);
      stk_mig_trace_free(t);
      return STK_EFORMAT;
    }
  }
  *out = t;
  return 0;
}

void stk_mig_trace_free(struct stk_mig_trace *t) {
  if (!t) return;
  free(t->req);
  free(t);
}
