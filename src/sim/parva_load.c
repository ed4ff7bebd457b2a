/* ParvaGPU's inputs: prof_data/MODEL.csv (Mig instance, Batch size,
 * Workload Number, Throughput, Latency; throughput per MPS process, latency
 * in seconds) for each model, models in the alphabetical order of their
 * files, and SLO/SLO_req_rate.csv and SLO/SLO_latency.csv: one scenario a
 * row, one model a column, N/A where a model is absent. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parva_impl.h"

#define MAX_MODELS 64
#define MAX_SCEN 64

static int cmp_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Read a whole small text file; NULL and errmsg on failure. */
static char *slurp(const char *path, char *errmsg) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    stk__errf(errmsg, stk__from_errno(errno), "%s: %s", path, strerror(errno));
    return NULL;
  }
  size_t cap = 4096, n = 0;
  char *b = malloc(cap);
  size_t got;
  while (b && (got = fread(b + n, 1, cap - n - 1, f)) > 0) {
    n += got;
    if (n + 1 == cap) {
      char *nb = cap < (64u << 20) ? realloc(b, cap * 2) : NULL;
      if (!nb) free(b);
      b = nb;
      cap *= 2;
    }
  }
  int bad = ferror(f);
  fclose(f);
  if (!b || bad) {
    free(b);
    stk__errf(errmsg, b ? STK_EIO : STK_ENOMEM, "%s: %s", path,
              b ? "read failed" : "out of memory or over 64 MiB");
    return NULL;
  }
  b[n] = 0;
  return b;
}

/* Split text into lines in place (\n or \r\n); blank lines skipped. */
static size_t lines(char *text, char **out, size_t max) {
  size_t n = 0;
  for (char *s = text; *s && n < max;) {
    char *e = strchr(s, '\n');
    if (e) *e = 0;
    size_t len = strlen(s);
    if (len && s[len - 1] == '\r') s[len - 1] = 0;
    if (*s) out[n++] = s;
    if (!e) break;
    s = e + 1;
  }
  return n;
}

static int number(const char *s, double *v) {
  char *end;
  errno = 0;
  *v = strtod(s, &end);
  while (*end == ' ') end++;
  return end != s && !*end && errno == 0 && isfinite(*v);
}

static int load_profile(struct stk_parva *p, unsigned m, const char *path, char *errmsg) {
  char *text = slurp(path, errmsg);
  if (!text) return STK_EIO;
  size_t cap = 4096;
  char **ln = malloc(cap * sizeof *ln);
  size_t nl = ln ? lines(text, ln, cap) : 0;
  int rc = 0;
  p->pts[m] = calloc(nl ? nl : 1, sizeof **p->pts);
  if (!ln || !p->pts[m]) {
    rc = stk__errf(errmsg, STK_ENOMEM, "%s: out of memory", path);
    goto out;
  }
  if (nl < 2 || strncmp(ln[0], "Mig instance,", 13)) {
    rc = stk__errf(errmsg, STK_EFORMAT,
                   "%s:1: expected the header Mig instance,Batch size,Workload Number,"
                   "Throughput,Latency",
                   path);
    goto out;
  }
  for (size_t i = 1; i < nl; i++) {
    double v[5];
    int k = 0;
    for (char *save = NULL, *f = strtok_r(ln[i], ",", &save); f; f = strtok_r(NULL, ",", &save)) {
      if (k == 5 || !number(f, &v[k])) {
        k = -1;
        break;
      }
      k++;
    }
    if (k != 5 || stk__parva_profile_of((unsigned)v[0]) < 0 || v[0] != floor(v[0]) ||
        v[1] < 1 || v[1] > 65535 || v[1] != floor(v[1]) || v[2] < 1 || v[2] > 64 ||
        v[2] != floor(v[2]) || v[3] < 0 || v[4] < 0) {
      rc = stk__errf(errmsg, STK_EFORMAT,
                     "%s:%zu: expected instance size 1, 2, 3, 4 or 7, batch, processes, "
                     "throughput >= 0, latency >= 0",
                     path, i + 1);
      goto out;
    }
    if (v[3] == 0) continue; /* not measured (out of memory) */
    for (unsigned j = 0; j < p->npts[m]; j++) { /* one measurement per point */
      const struct parva_point *q = &p->pts[m][j];
      if (q->size == v[0] && q->batch == v[1] && q->procs == v[2]) {
        rc = stk__errf(errmsg, STK_EFORMAT,
                       "%s:%zu: instance size %.0f, batch %.0f, processes %.0f measured twice",
                       path, i + 1, v[0], v[1], v[2]);
        goto out;
      }
    }
    struct parva_point *pt = &p->pts[m][p->npts[m]++];
    pt->size = (uint8_t)v[0];
    pt->batch = (uint16_t)v[1];
    pt->procs = (uint8_t)v[2];
    pt->trp = (float)v[3] * (float)pt->procs;
    pt->ltc = (float)v[4] * 1000.0f;
  }
out:
  free(ln);
  free(text);
  return rc;
}

/* One SLO file into vals[scen * nmodels + m] (NAN for N/A). */
static int load_slo(const char *path, unsigned nmodels, double *vals, unsigned *nscen,
                    char *errmsg) {
  char *text = slurp(path, errmsg);
  if (!text) return STK_EIO;
  char *ln[MAX_SCEN + 1];
  size_t nl = lines(text, ln, MAX_SCEN + 1);
  int rc = 0;
  if (nl == 0 || nl > MAX_SCEN) {
    rc = stk__errf(errmsg, STK_EFORMAT, "%s: expected 1 to %d scenario rows, found %zu", path,
                   MAX_SCEN, nl);
    goto out;
  }
  for (size_t r = 0; r < nl; r++) {
    unsigned k = 0;
    for (char *save = NULL, *f = strtok_r(ln[r], ",", &save); f; f = strtok_r(NULL, ",", &save)) {
      double v = NAN;
      if (k >= nmodels || (strcmp(f, "N/A") && (!number(f, &v) || v <= 0))) {
        rc = stk__errf(errmsg, STK_EFORMAT,
                       "%s:%zu: column %u: expected %u positive values or N/A, one per profile "
                       "in prof_data",
                       path, r + 1, k + 1, nmodels);
        goto out;
      }
      vals[r * nmodels + k++] = v;
    }
    if (k != nmodels) {
      rc = stk__errf(errmsg, STK_EFORMAT, "%s:%zu: %u columns, prof_data has %u models", path,
                     r + 1, k, nmodels);
      goto out;
    }
  }
  *nscen = (unsigned)nl;
out:
  free(text);
  return rc;
}

int stk_parva_load(struct stk_parva **out, const char *dir, char *errmsg) {
  *out = NULL;
  char path[4096];
  snprintf(path, sizeof path, "%s/prof_data", dir);
  DIR *d = opendir(path);
  if (!d) return stk__errf(errmsg, stk__from_errno(errno), "%s: %s", path, strerror(errno));
  struct stk_parva *p = calloc(1, sizeof *p);
  char *names[MAX_MODELS];
  unsigned n = 0;
  int rc = 0;
  struct dirent *e;
  while (p && (e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (len < 5 || strcmp(e->d_name + len - 4, ".csv")) continue;
    if (n == MAX_MODELS) {
      rc = stk__errf(errmsg, STK_ERANGE, "%s: more than %d profiles", path, MAX_MODELS);
      break;
    }
    names[n] = strdup(e->d_name);
    if (!names[n]) break;
    n++;
  }
  closedir(d);
  if (!p || rc) {
    for (unsigned i = 0; i < n; i++) free(names[i]);
    free(p);
    return rc ? rc : stk__errf(errmsg, STK_ENOMEM, "%s: out of memory", path);
  }
  if (n == 0) {
    free(p);
    return stk__errf(errmsg, STK_EEMPTY, "%s: no MODEL.csv profiles", path);
  }
  qsort(names, n, sizeof *names, cmp_name);
  p->nmodels = n;
  p->names = calloc(n, sizeof *p->names);
  p->pts = calloc(n, sizeof *p->pts);
  p->npts = calloc(n, sizeof *p->npts);
  p->rate = calloc((size_t)n * MAX_SCEN, sizeof *p->rate);
  p->slo = calloc((size_t)n * MAX_SCEN, sizeof *p->slo);
  if (!p->names || !p->pts || !p->npts || !p->rate || !p->slo) {
    for (unsigned i = 0; i < n; i++) free(names[i]);
    stk_parva_free(p);
    return stk__errf(errmsg, STK_ENOMEM, "%s: out of memory", dir);
  }
  for (unsigned i = 0; i < n; i++) {
    p->names[i] = names[i];
    names[i][strlen(names[i]) - 4] = 0;
  }
  for (unsigned i = 0; i < n && !rc; i++) {
    snprintf(path, sizeof path, "%s/prof_data/%s.csv", dir, p->names[i]);
    rc = load_profile(p, i, path, errmsg);
  }
  unsigned s1 = 0, s2 = 0;
  if (!rc) {
    snprintf(path, sizeof path, "%s/SLO/SLO_req_rate.csv", dir);
    rc = load_slo(path, n, p->rate, &s1, errmsg);
  }
  if (!rc) {
    snprintf(path, sizeof path, "%s/SLO/SLO_latency.csv", dir);
    rc = load_slo(path, n, p->slo, &s2, errmsg);
  }
  for (unsigned i = 0; !rc && i < (s1 < s2 ? s1 : s2) * n; i++)
    if (isnan(p->rate[i]) != isnan(p->slo[i]))
      rc = stk__errf(errmsg, STK_EFORMAT,
                     "%s/SLO: scenario %u, %s: N/A in one of SLO_req_rate.csv and "
                     "SLO_latency.csv but not the other",
                     dir, i / n + 1, p->names[i % n]);
  if (!rc && s1 != s2)
    rc = stk__errf(errmsg, STK_EFORMAT,
                   "%s/SLO: SLO_req_rate.csv has %u scenarios, SLO_latency.csv %u", dir, s1, s2);
  if (rc) {
    stk_parva_free(p);
    return rc;
  }
  p->nscen = s1;
  *out = p;
  return 0;
}

void stk_parva_free(struct stk_parva *p) {
  if (!p) return;
  for (unsigned i = 0; i < p->nmodels; i++) {
    if (p->names) free(p->names[i]);
    if (p->pts) free(p->pts[i]);
  }
  free(p->names);
  free(p->pts);
  free(p->npts);
  free(p->rate);
  free(p->slo);
  free(p);
}

unsigned stk_parva_scenarios(const struct stk_parva *p) { return p->nscen; }
unsigned stk_parva_models(const struct stk_parva *p) { return p->nmodels; }
const char *stk_parva_model(const struct stk_parva *p, unsigned m) {
  return m < p->nmodels ? p->names[m] : NULL;
}
