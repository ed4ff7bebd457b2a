/* Job lists for the job-level simulator: the Pollux artifact's workload
 * CSVs (jobs of measured applications with a GPU count and batch size) and
 * duration traces such as the Philly-derived one (a submit time, a GPU
 * count and a duration). Times are shifted so the first job arrives at the
 * earliest submit time of the file (workloads) or at 0 (traces with
 * wall-clock timestamps). The openb pod lists read as duration traces
 * (num_gpu GPUs from creation_time to deletion_time; CPU pods skipped). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jobs_impl.h"
#include "sim_impl.h"

static int parse_time(const struct stk__sim_csv *r, int col, double *out, char *errmsg) {
  const char *s = stk__sim_csv_get(r, col);
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (*s && !*end && errno != ERANGE && isfinite(v) && v >= 0) {
    *out = v;
    return 0;
  }
  struct tm tm;
  memset(&tm, 0, sizeof tm);
  const char *e = strptime(s, "%Y-%m-%d %H:%M:%S", &tm);
  if (e && !*e) {
    *out = (double)timegm(&tm);
    return 0;
  }
  return stk__errf(errmsg, STK_EFORMAT, "%s:%llu: %s '%s' is not seconds or YYYY-MM-DD HH:MM:SS",
                   r->path, (unsigned long long)r->line, r->hdr[col], s);
}

struct jidx {
  struct stk__jspec s;
  size_t i;
};

static int cmp_submit(const void *x, const void *y) {
  const struct jidx *a = x, *b = y;
  if (a->s.submit != b->s.submit) return (a->s.submit > b->s.submit) - (a->s.submit < b->s.submit);
  return (a->i > b->i) - (a->i < b->i);
}

int stk_sim_jobs_load(struct stk_sim_jobs **out, const struct stk_sim_apps *apps, const char *path,
                      char *errmsg) {
  *out = NULL;
  struct stk__sim_csv r;
  int rc = stk__sim_csv_open(&r, path, errmsg);
  if (rc) return rc;
  struct stk_sim_jobs *J = calloc(1, sizeof *J);
  if (!J) {
    stk__sim_csv_close(&r);
    return STK_ENOMEM;
  }
  snprintf(J->path, sizeof J->path, "%s", path);
  int c_name = stk__sim_csv_col(&r, "name");
  if (c_name < 0) c_name = stk__sim_csv_col(&r, "jobid");
  int c_time = stk__sim_csv_col(&r, "time");
  if (c_time < 0) c_time = stk__sim_csv_col(&r, "submit_time");
  if (c_time < 0) c_time = stk__sim_csv_col(&r, "timestamp");
  if (c_time < 0) c_time = stk__sim_csv_col(&r, "creation_time");
  /* openb pod lists: num_gpu, creation_time and deletion_time; pods with
   * no GPU are skipped */
  int c_del = stk__sim_csv_col(&r, "deletion_time");
  int openb = 0;
  int c_app = stk__sim_csv_col(&r, "application");
  int c_rep = stk__sim_csv_col(&r, "num_replicas");
  if (c_rep < 0) c_rep = stk__sim_csv_col(&r, "num_gpus");
  if (c_rep < 0 && (c_rep = stk__sim_csv_col(&r, "num_gpu")) >= 0) openb = 1;
  int c_bsz = stk__sim_csv_col(&r, "batch_size");
  int c_dur = stk__sim_csv_col(&r, "duration");
  int c_status = stk__sim_csv_col(&r, "status");
  if (c_time < 0 || c_rep < 0)
    rc = stk__errf(errmsg, STK_EFORMAT,
                   "%s: a job list needs a time (or submit_time, timestamp) and a num_replicas "
                   "(or num_gpus) column",
                   path);
  else if (c_app < 0 && c_dur < 0 && c_del < 0)
    rc = stk__errf(errmsg, STK_EFORMAT, "%s: a job list needs an application or a duration column",
                   path);
  else if (c_app >= 0 && !apps)
    rc = stk__errf(errmsg, STK_EINVAL,
                   "%s: jobs of measured applications need the application traces (--traces)",
                   path);
  size_t cap = 0;
  while (!rc && (rc = stk__sim_csv_next(&r, errmsg)) == 0) {
    struct stk__jspec s;
    memset(&s, 0, sizeof s);
    int64_t rep;
    rc = parse_time(&r, c_time, &s.submit, errmsg);
    if (!rc) rc = stk__sim_csv_int(&r, c_rep, openb ? 0 : 1, 1 << 20, 0, 0, &rep, errmsg);
    if (rc) break;
    if (rep == 0) continue;
    s.replicas = (int)rep;
    if (c_status >= 0) {
      const char *st = stk__sim_csv_get(&r, c_status);
      if (*st && strcmp(st, "Pass") && strcmp(st, "Killed") && strcmp(st, "Failed") &&
          strcmp(st, "COMPLETED") && strcmp(st, "completed"))
        continue;
    }
    if (c_app >= 0) {
      const char *an = stk__sim_csv_get(&r, c_app);
      s.app = stk__japp_find(apps, an);
      if (!s.app) {
        rc = stk__errf(errmsg, STK_EFORMAT, "%s:%llu: unknown application '%s'", path,
                       (unsigned long long)r.line, an);
        break;
      }
      int64_t b = s.app->init_bsz;
      if (c_bsz >= 0) rc = stk__sim_csv_int(&r, c_bsz, 1, 1 << 30, 1, s.app->init_bsz, &b, errmsg);
      if (rc) break;
      s.bsz = (int)b;
    } else if (c_dur >= 0) {
      rc = stk__sim_csv_num(&r, c_dur, 0, &s.duration, errmsg);
      if (rc) break;
    } else {
      double del;
      rc = stk__sim_csv_num(&r, c_del, s.submit, &del, errmsg);
      if (rc) break;
      s.duration = del - s.submit;
    }
    char nb[32];
    const char *nm = c_name >= 0 ? stk__sim_csv_get(&r, c_name) : "";
    if (!*nm) {
      snprintf(nb, sizeof nb, "job-%zu", J->n);
      nm = nb;
    }
    s.name = strdup(nm);
    if (!s.name) {
      rc = STK_ENOMEM;
      break;
    }
    if (J->n == cap) {
      cap = cap ? 2 * cap : 256;
      struct stk__jspec *nj = realloc(J->job, sizeof *nj * cap);
      if (!nj) {
        free(s.name);
        rc = STK_ENOMEM;
        break;
      }
      J->job = nj;
    }
    J->job[J->n++] = s;
  }
  if (rc == STK_EOF) rc = 0;
  stk__sim_csv_close(&r);
  if (!rc && J->n == 0) rc = stk__errf(errmsg, STK_EEMPTY, "%s: no jobs after the header", path);
  if (rc) {
    stk_sim_jobs_free(J);
    return rc;
  }
  /* stable order by arrival: rows of equal time keep file order */
  int sorted = 1;
  for (size_t i = 1; i < J->n; i++)
    if (J->job[i].submit < J->job[i - 1].submit) sorted = 0;
  if (!sorted) {
    /* qsort is not stable: ties are broken by the original index */
    struct jidx *t = malloc(sizeof *t * J->n);
    if (!t) {
      stk_sim_jobs_free(J);
      return STK_ENOMEM;
    }
    for (size_t i = 0; i < J->n; i++) {
      t[i].s = J->job[i];
      t[i].i = i;
    }
    qsort(t, J->n, sizeof *t, cmp_submit);
    for (size_t i = 0; i < J->n; i++) J->job[i] = t[i].s;
    free(t);
  }
  /* wall-clock traces start at 0 */
  if (J->job[0].submit > 1e8) {
    double t0 = J->job[0].submit;
    for (size_t i = 0; i < J->n; i++) J->job[i].submit -= t0;
  }
  *out = J;
  return 0;
}

void stk_sim_jobs_free(struct stk_sim_jobs *J) {
  if (!J) return;
  for (size_t i = 0; i < J->n; i++) free(J->job[i].name);
  free(J->job);
  free(J);
}

size_t stk_sim_jobs_count(const struct stk_sim_jobs *J) { return J ? J->n : 0; }
