/* The workload: a pod list streamed row by row into a histogram of pod
 * kinds (resource spec plus memory) and the "typical pods" that the FGD
 * fragmentation measure is taken against: the most popular specs covering
 * 95% of all pods, each weighted by its popularity, as in the artifact. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jobs_impl.h"
#include "sim_impl.h"

#define TYPICAL_COVER 95.0 /* percent of pods the typical specs must cover */

struct table {
  uint32_t *slot; /* index + 1, 0 = empty */
  uint32_t cap;   /* power of two */
};

struct stk__sim_builder {
  struct stk_sim_workload *w;
  const struct stk_sim_cluster *c;
  struct table specs, kinds;
  uint32_t capspec, capkind;
};

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static uint64_t spec_hash(int32_t cpu, int milli, int num, const char *gs) {
  return stk_mix64(stk_mix64((uint64_t)(uint32_t)cpu, (uint64_t)milli << 8 | (uint64_t)num),
                   hash_str(gs));
}

static int table_grow(struct table *t, uint32_t n, uint64_t (*key)(const void *, uint32_t),
                      const void *ctx) {
  if (t->cap && (uint64_t)n * 2 < t->cap) return 0;
  uint32_t cap = t->cap ? t->cap * 2 : 256;
  uint32_t *slot = calloc(cap, sizeof *slot);
  if (!slot) return STK_ENOMEM;
  for (uint32_t i = 0; i < t->cap; i++) {
    if (!t->slot[i]) continue;
    uint64_t h = key(ctx, t->slot[i] - 1);
    uint32_t j = (uint32_t)h & (cap - 1);
    while (slot[j]) j = (j + 1) & (cap - 1);
    slot[j] = t->slot[i];
  }
  free(t->slot);
  t->slot = slot;
  t->cap = cap;
  return 0;
}

static uint64_t spec_key(const void *ctx, uint32_t i) {
  const struct stk_sim_workload *w = ctx;
  const struct stk__sim_spec *s = &w->spec[i];
  return spec_hash(s->cpu, s->milli, s->num, s->gpu_spec);
}

static uint64_t kind_key(const void *ctx, uint32_t i) {
  const struct stk_sim_workload *w = ctx;
  return stk_mix64(w->kind[i].spec, (uint64_t)w->kind[i].mem);
}

int stk__sim_builder_new(struct stk__sim_builder **out, struct stk_sim_workload *w,
                         const struct stk_sim_cluster *c) {
  struct stk__sim_builder *b = calloc(1, sizeof *b);
  if (!b) return STK_ENOMEM;
  b->w = w;
  b->c = c;
  w->cluster = c;
  *out = b;
  return 0;
}

void stk__sim_builder_free(struct stk__sim_builder *b) {
  if (!b) return;
  free(b->specs.slot);
  free(b->kinds.slot);
  free(b);
}

/* Note an unknown model name once in the info's list. */
static void note_unknown(struct stk_sim_workload *w, const char *name, size_t len) {
  char *list = w->info.unknown_models;
  size_t have = strlen(list);
  const char *p = list;
  while (*p) {
    const char *e = strchr(p, ',');
    size_t l = e ? (size_t)(e - p) : strlen(p);
    if (l == len && !memcmp(p, name, len)) return;
    p = e ? e + 1 : p + l;
  }
  if (have + len + 2 >= sizeof w->info.unknown_models) return;
  if (have) list[have++] = ',';
  memcpy(list + have, name, len);
  list[have + len] = 0;
}

/* The constraint without empty parts, and its model mask; *unknown is set
 * when it names a model the cluster lacks. */
static int parse_constraint(struct stk_sim_workload *w, const struct stk_sim_cluster *c,
                            const char *gs, char *norm, size_t normcap, uint64_t *mask,
                            int *unknown) {
  size_t n = 0;
  int parts = 0;
  *mask = 0;
  *unknown = 0;
  norm[0] = 0;
  for (const char *p = gs; *p;) {
    const char *e = strchr(p, '|');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    while (len && p[0] == ' ') p++, len--;
    while (len && p[len - 1] == ' ') len--;
    if (len) {
      if (n + len + 2 > normcap) return STK_EFORMAT;
      if (parts++) norm[n++] = '|';
      memcpy(norm + n, p, len);
      n += len;
      norm[n] = 0;
      uint32_t m = stk__sim_model_id(c, p, len);
      if (m)
        *mask |= 1ull << m;
      else {
        *unknown = 1;
        note_unknown(w, p, len);
      }
    }
    if (!e) break;
    p = e + 1;
  }
  if (!parts) *mask = ~0ull;
  return 0;
}

int stk__sim_builder_add(struct stk__sim_builder *b, int32_t cpu, int64_t mem, int num, int milli,
                         const char *gpu_spec, uint64_t count, char *errmsg, const char *where) {
  struct stk_sim_workload *w = b->w;
  if (num == 0 || milli <= 0) num = 0, milli = 0, gpu_spec = "";
  if (milli > STK__SIM_MILLI) milli = STK__SIM_MILLI; /* as the artifact's converter does */
  if (num > 1 && milli < STK__SIM_MILLI)
    return stk__errf(
        errmsg, STK_EFORMAT,
        "%s: num_gpu %d with gpu_milli %d: only a pod of one GPU may take a fraction of it", where,
        num, milli);
  char norm[512];
  uint64_t mask;
  int unknown;
  if (parse_constraint(w, b->c, gpu_spec, norm, sizeof norm, &mask, &unknown))
    return stk__errf(errmsg, STK_EFORMAT, "%s: gpu_spec is too long", where);
  /* spec */
  uint64_t h = spec_hash(cpu, milli, num, norm);
  uint32_t j = b->specs.cap ? (uint32_t)h & (b->specs.cap - 1) : 0, si = UINT32_MAX;
  while (b->specs.cap && b->specs.slot[j]) {
    const struct stk__sim_spec *s = &w->spec[b->specs.slot[j] - 1];
    if (s->cpu == cpu && s->milli == milli && s->num == num && !strcmp(s->gpu_spec, norm)) {
      si = b->specs.slot[j] - 1;
      break;
    }
    j = (j + 1) & (b->specs.cap - 1);
  }
  if (si == UINT32_MAX) {
    if (w->nspec == b->capspec) {
      uint32_t cap = b->capspec ? b->capspec * 2 : 64;
      struct stk__sim_spec *s = realloc(w->spec, cap * sizeof *s);
      if (!s) return stk__errf(errmsg, STK_ENOMEM, "out of memory");
      w->spec = s;
      b->capspec = cap;
    }
    struct stk__sim_spec *s = &w->spec[w->nspec];
    memset(s, 0, sizeof *s);
    s->cpu = cpu;
    s->cpu_nz = cpu ? cpu : 100;
    s->slot = -1;
    s->milli = (int16_t)milli;
    s->num = (uint8_t)num;
    s->share = num == 1 && milli < STK__SIM_MILLI;
    s->mask = mask;
    s->gpu_spec = strdup(norm);
    if (!s->gpu_spec) return stk__errf(errmsg, STK_ENOMEM, "out of memory");
    si = w->nspec++;
    if (table_grow(&b->specs, w->nspec, spec_key, w))
      return stk__errf(errmsg, STK_ENOMEM, "out of memory");
    j = (uint32_t)h & (b->specs.cap - 1);
    while (b->specs.slot[j]) j = (j + 1) & (b->specs.cap - 1);
    b->specs.slot[j] = si + 1;
  }
  w->spec[si].count += count;
  /* kind */
  h = stk_mix64(si, (uint64_t)mem);
  uint32_t ki = UINT32_MAX;
  j = b->kinds.cap ? (uint32_t)h & (b->kinds.cap - 1) : 0;
  while (b->kinds.cap && b->kinds.slot[j]) {
    const struct stk__sim_kind *k = &w->kind[b->kinds.slot[j] - 1];
    if (k->spec == si && k->mem == mem) {
      ki = b->kinds.slot[j] - 1;
      break;
    }
    j = (j + 1) & (b->kinds.cap - 1);
  }
  if (ki == UINT32_MAX) {
    if (w->nkind == b->capkind) {
      uint32_t cap = b->capkind ? b->capkind * 2 : 256;
      struct stk__sim_kind *k = realloc(w->kind, cap * sizeof *k);
      if (!k) return stk__errf(errmsg, STK_ENOMEM, "out of memory");
      w->kind = k;
      b->capkind = cap;
    }
    w->kind[w->nkind] = (struct stk__sim_kind){si, 0, mem, 0};
    ki = w->nkind++;
    if (table_grow(&b->kinds, w->nkind, kind_key, w))
      return stk__errf(errmsg, STK_ENOMEM, "out of memory");
    j = (uint32_t)h & (b->kinds.cap - 1);
    while (b->kinds.slot[j]) j = (j + 1) & (b->kinds.cap - 1);
    b->kinds.slot[j] = ki + 1;
  }
  w->kind[ki].count += count;
  /* info */
  struct stk_sim_workload_info *in = &w->info;
  in->pods += count;
  if (num == 0)
    in->cpu_pods += count;
  else if (num == 1 && milli < STK__SIM_MILLI)
    in->share_pods += count;
  else
    in->gpu_pods += count;
  in->gpu_milli += count * (uint64_t)num * (uint64_t)milli;
  if (unknown) in->unknown_model_pods += count;
  return (int)ki;
}

/* ---- typical pods ---------------------------------------------------- */

/* Order of the artifact's typical-pod list: more pods first; among equally
 * popular specs the "larger" one (CPU, then milli-GPU, GPU count, model
 * string) first. */
struct rank {
  uint64_t count;
  int32_t cpu;
  int16_t milli;
  uint8_t num;
  const char *gs;
  uint32_t idx;
};
static int by_popularity(const void *a, const void *b) {
  const struct rank *x = a, *y = b;
  if (x->count != y->count) return x->count > y->count ? -1 : 1;
  if (x->cpu != y->cpu) return x->cpu > y->cpu ? -1 : 1;
  if (x->milli != y->milli) return x->milli > y->milli ? -1 : 1;
  if (x->num != y->num) return x->num > y->num ? -1 : 1;
  int c = strcmp(x->gs, y->gs);
  if (c) return -c;
  return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int typical_pods(struct stk_sim_workload *w) {
  struct rank *rk = malloc((w->nspec ? w->nspec : 1) * sizeof *rk);
  uint32_t *ord = malloc((w->nspec ? w->nspec : 1) * sizeof *ord);
  if (!rk || !ord) {
    free(rk);
    free(ord);
    return STK_ENOMEM;
  }
  for (uint32_t i = 0; i < w->nspec; i++) {
    const struct stk__sim_spec *s = &w->spec[i];
    rk[i] = (struct rank){s->count, s->cpu ? s->cpu : 100, s->milli, s->num, s->gpu_spec, i};
  }
  qsort(rk, w->nspec, sizeof *rk, by_popularity);
  for (uint32_t i = 0; i < w->nspec; i++) {
    ord[i] = rk[i].idx;
    w->spec[rk[i].idx].slot = (int32_t)i;
  }
  free(rk);
  double total = 0, cum = 0;
  for (uint32_t i = 0; i < w->nspec; i++) total += (double)w->spec[i].count;
  double expected = TYPICAL_COVER * total / 100.0;
  uint32_t n = 0;
  while (cum < expected && n < w->nspec) cum += (double)w->spec[ord[n++]].count;
  w->ntypical = n;
  w->typ = calloc(n ? n : 1, sizeof *w->typ);
  if (!w->typ) {
    free(ord);
    return STK_ENOMEM;
  }
  w->ntyp = 0;
  w->p_cpu = 0;
  w->nth = 0;
  for (uint32_t i = 0; i < n; i++) {
    const struct stk__sim_spec *s = &w->spec[ord[i]];
    double p = (double)s->count / cum;
    if (s->milli == 0) {
      w->p_cpu += p;
      continue;
    }
    struct stk__sim_typical *t = &w->typ[w->ntyp++];
    t->cpu = s->cpu_nz;
    t->milli = s->milli;
    t->num = s->num;
    t->mask = s->mask;
    t->p = p;
    uint32_t k = 0;
    while (k < w->nth && w->th[k] != s->milli) k++;
    if (k == w->nth) {
      w->th[w->nth++] = s->milli;
    }
    t->th = (uint16_t)k;
  }
  free(ord);
  /* Thresholds ascending, so one merge pass over a node's sorted GPUs
   * finds them all. */
  int16_t sorted[STK__SIM_MILLI];
  memcpy(sorted, w->th, w->nth * sizeof *sorted);
  for (uint32_t i = 1; i < w->nth; i++)
    for (uint32_t j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
      int16_t t = sorted[j];
      sorted[j] = sorted[j - 1];
      sorted[j - 1] = t;
    }
  for (uint32_t i = 0; i < w->ntyp; i++) {
    uint32_t k = 0;
    while (sorted[k] != w->th[w->typ[i].th]) k++;
    w->typ[i].th = (uint16_t)k;
  }
  memcpy(w->th, sorted, w->nth * sizeof *sorted);
  return 0;
}

/* ---- never-fit ------------------------------------------------------- */

static int kind_fits_empty(const struct stk_sim_cluster *c, const struct stk__sim_spec *s,
                           int64_t mem, const uint32_t *shape, uint32_t nshape) {
  for (uint32_t k = 0; k < nshape; k++) {
    uint32_t i = shape[k];
    if (c->cpu[i] < s->cpu || c->mem[i] < mem) continue;
    if (s->num == 0) return 1;
    if (!((s->mask >> c->model[i]) & 1)) continue;
    if (c->ngpu[i] >= s->num) return 1;
  }
  return 0;
}

static int by_count(const void *a, const void *b) {
  const uint64_t *x = a, *y = b; /* {count, index} */
  if (x[0] != y[0]) return x[0] > y[0] ? -1 : 1;
  return x[1] < y[1] ? -1 : x[1] > y[1];
}

int stk__sim_workload_finish(struct stk_sim_workload *w, const struct stk_sim_cluster *c) {
  int rc = typical_pods(w);
  if (rc) return rc;
  uint64_t *ord = malloc((w->nkind ? w->nkind : 1) * 2 * sizeof *ord);
  if (!ord) return STK_ENOMEM;
  for (uint32_t k = 0; k < w->nkind; k++) ord[2 * k] = w->kind[k].count, ord[2 * k + 1] = k;
  qsort(ord, w->nkind, 2 * sizeof *ord, by_count);
  for (uint32_t r = 0; r < w->nkind; r++) w->kind[ord[2 * r + 1]].rank = r;
  free(ord);
  /* Distinct node shapes, so the check costs kinds x shapes. */
  uint32_t *shape = malloc(c->n * sizeof *shape), nshape = 0;
  if (!shape) return STK_ENOMEM;
  for (uint32_t i = 0; i < c->n; i++) {
    uint32_t k = 0;
    for (; k < nshape; k++) {
      uint32_t j = shape[k];
      if (c->cpu[j] == c->cpu[i] && c->mem[j] == c->mem[i] && c->ngpu[j] == c->ngpu[i] &&
          c->model[j] == c->model[i])
        break;
    }
    if (k == nshape) shape[nshape++] = i;
  }
  w->info.never_fit = 0;
  for (uint32_t k = 0; k < w->nkind; k++) {
    struct stk__sim_kind *kd = &w->kind[k];
    kd->never_fit = !kind_fits_empty(c, &w->spec[kd->spec], kd->mem, shape, nshape);
    if (kd->never_fit) w->info.never_fit += kd->count;
  }
  free(shape);
  w->info.kinds = w->nkind;
  w->info.specs = w->nspec;
  w->info.typical = w->ntypical;
  w->total_milli = w->info.gpu_milli;
  return 0;
}

/* ---- pod rows -------------------------------------------------------- */

void stk__sim_podcols_find(const struct stk__sim_csv *r, struct stk__sim_podcols *pc) {
  pc->name = stk__sim_csv_col(r, "name");
  pc->cpu = stk__sim_csv_col(r, "cpu_milli");
  pc->mem = stk__sim_csv_col(r, "memory_mib");
  pc->num = stk__sim_csv_col(r, "num_gpu");
  pc->milli = stk__sim_csv_col(r, "gpu_milli");
  pc->spec = stk__sim_csv_col(r, "gpu_spec");
  pc->ctime = stk__sim_csv_col(r, "creation_time");
  pc->dtime = stk__sim_csv_col(r, "deletion_time");
}

int stk__sim_pod_parse(const struct stk__sim_csv *r, const struct stk__sim_podcols *pc,
                       int32_t *cpu, int64_t *mem, int *num, int *milli, char *errmsg) {
  int64_t v;
  int rc;
  if ((rc = stk__sim_csv_int(r, pc->cpu, 0, INT32_MAX, 0, 0, &v, errmsg))) return rc;
  *cpu = (int32_t)v;
  if ((rc = stk__sim_csv_int(r, pc->mem, 0, (int64_t)1 << 40, 1, 0, &v, errmsg))) return rc;
  *mem = v;
  if ((rc = stk__sim_csv_int(r, pc->num, 0, 255, 0, 0, &v, errmsg))) return rc;
  *num = (int)v;
  if (pc->milli < 0) {
    *milli = *num ? STK__SIM_MILLI : 0; /* no column: whole GPUs */
  } else {
    if ((rc = stk__sim_csv_int(r, pc->milli, 0, INT32_MAX, *num == 0, 0, &v, errmsg))) return rc;
    *milli = v > STK__SIM_MILLI ? STK__SIM_MILLI : (int)v;
  }
  return 0;
}

/* ---- public ---------------------------------------------------------- */

int stk__sim_pods_open(struct stk__sim_pods *p, const struct stk_sim_cluster *c, const char *path,
                       char *errmsg) {
  memset(p, 0, sizeof *p);
  int rc = stk__sim_csv_open(&p->r, path, errmsg);
  if (rc) return rc;
  p->w = calloc(1, sizeof *p->w);
  if (!p->w || stk__sim_builder_new(&p->b, p->w, c)) {
    free(p->w);
    stk__sim_csv_close(&p->r);
    return stk__errf(errmsg, STK_ENOMEM, "out of memory");
  }
  stk__sim_podcols_find(&p->r, &p->pc);
  if (p->pc.cpu < 0 || p->pc.num < 0) {
    stk__errf(errmsg, STK_EFORMAT,
              "%s: not a pod list: the header needs cpu_milli and num_gpu "
              "(and usually memory_mib, gpu_milli, gpu_spec)",
              p->r.path);
    stk__sim_pods_close(p);
    return STK_EFORMAT;
  }
  return 0;
}

int stk__sim_pods_add_row(struct stk__sim_pods *p, char *errmsg) {
  int32_t cpu;
  int64_t mem;
  int num, milli;
  int rc = stk__sim_pod_parse(&p->r, &p->pc, &cpu, &mem, &num, &milli, errmsg);
  if (rc) return rc;
  char where[300];
  snprintf(where, sizeof where, "%s:%llu", p->r.path, (unsigned long long)p->r.line);
  return stk__sim_builder_add(p->b, cpu, mem, num, milli, stk__sim_csv_get(&p->r, p->pc.spec), 1,
                              errmsg, where);
}

void stk__sim_pods_close(struct stk__sim_pods *p) {
  stk__sim_builder_free(p->b);
  stk__sim_csv_close(&p->r);
  stk_sim_workload_free(p->w);
  memset(p, 0, sizeof *p);
}

int stk__sim_is_job_trace(const char *path) {
  if (!strcmp(path, "-")) return 0;
  struct stk__sim_csv r;
  if (stk__sim_csv_open(&r, path, NULL)) return 0;
  int jobs = stk__sim_csv_col(&r, "cpu_milli") < 0 && stk__sim_csv_col(&r, "duration") >= 0;
  stk__sim_csv_close(&r);
  return jobs;
}

int stk__sim_workload_jobs(struct stk_sim_workload **out, const struct stk_sim_cluster *c,
                           const struct stk_sim_jobs *J, const char *path, uint32_t *kinds,
                           char *errmsg) {
  *out = NULL;
  struct stk_sim_workload *w = calloc(1, sizeof *w);
  struct stk__sim_builder *b = NULL;
  int rc = 0;
  if (!w || stk__sim_builder_new(&b, w, c)) {
    rc = stk__errf(errmsg, STK_ENOMEM, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < J->n && !rc; i++) {
    const struct stk__jspec *s = &J->job[i];
    char where[300];
    snprintf(where, sizeof where, "%s: job %s", path, s->name);
    if (s->replicas > 255) {
      rc = stk__errf(errmsg, STK_EFORMAT, "%s asks for %d GPUs; a pod has at most 255", where,
                     s->replicas);
      break;
    }
    int k = stk__sim_builder_add(b, 0, 0, s->replicas, STK__SIM_MILLI, "", 1, errmsg, where);
    if (k < 0) rc = k;
    if (kinds && k >= 0) kinds[i] = (uint32_t)k;
  }
  if (!rc && J->n == 0) rc = stk__errf(errmsg, STK_EEMPTY, "%s: no jobs after the header", path);
  if (!rc && (rc = stk__sim_workload_finish(w, c))) stk__errf(errmsg, rc, "out of memory");
  if (!rc) {
    *out = w;
    w = NULL;
  }
out:
  stk__sim_builder_free(b);
  stk_sim_workload_free(w);
  return rc;
}

int stk_sim_workload_load(struct stk_sim_workload **out, const struct stk_sim_cluster *c,
                          const char *path, char *errmsg) {
  *out = NULL;
  if (stk__sim_is_job_trace(path)) {
    struct stk_sim_jobs *J;
    int rc = stk_sim_jobs_load(&J, NULL, path, errmsg);
    if (rc) return rc;
    rc = stk__sim_workload_jobs(out, c, J, path, NULL, errmsg);
    stk_sim_jobs_free(J);
    return rc;
  }
  struct stk__sim_pods p;
  int rc = stk__sim_pods_open(&p, c, path, errmsg);
  if (rc) return rc;
  while ((rc = stk__sim_csv_next(&p.r, errmsg)) == 0)
    if ((rc = stk__sim_pods_add_row(&p, errmsg)) < 0) goto fail;
  if (rc != STK_EOF) goto fail;
  if (p.w->info.pods == 0) {
    rc = stk__errf(errmsg, STK_EEMPTY, "%s: no pods after the header", p.r.path);
    goto fail;
  }
  if ((rc = stk__sim_workload_finish(p.w, c))) {
    stk__errf(errmsg, rc, "%s: out of memory", p.r.path);
    goto fail;
  }
  *out = p.w;
  p.w = NULL; /* the caller's now */
  stk__sim_pods_close(&p);
  return 0;
fail:
  stk__sim_pods_close(&p);
  return rc;
}

void stk_sim_workload_free(struct stk_sim_workload *w) {
  if (!w) return;
  for (uint32_t i = 0; i < w->nspec; i++) free(w->spec[i].gpu_spec);
  free(w->spec);
  free(w->kind);
  free(w->typ);
  free(w);
}

void stk_sim_workload_info(const struct stk_sim_workload *w, struct stk_sim_workload_info *info) {
  *info = w->info;
}
