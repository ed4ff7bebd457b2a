/* Job lists for the job-level simulator: the Pollux artifact's workload
 * CSVs (jobs of measured applications with a GPU count and batch size) and
 * duration traces such as the Philly-derived one (a submit time, a GPU
 * count and a duration). Times in seconds are kept as they are; dated
 * times (YYYY-MM-DD HH:MM:SS, told apart by their syntax) are shifted so
 * the earliest job arrives at 0. The openb pod lists read as duration traces
 * (num_gpu GPUs from creation_time to deletion_time; CPU pods skipped). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jobs_impl.h"
#include "sim_impl.h"

/* A time column holds seconds or dates, decided by each field's syntax
 * (never by its size); one file holds one or the other. */
enum { TIME_UNSET, TIME_SECONDS, TIME_DATE };

static int digits(const char *s, int n, int *out) {
  int v = 0;
  for (int i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (s[i] - '0');
  }
  *out = v;
  return 0;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
 * days_from_civil), so a date before 1970 is as good as one after. */
static int64_t days_from_civil(int64_t y, int m, int d) {
  y -= m <= 2;
  int64_t era = (y >= 0 ? y : y - 399) / 400;
  int64_t yoe = y - era * 400;
  int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

/* "YYYY-MM-DD HH:MM:SS" exactly: 1 when s has that shape (*valid says
 * whether it names a real day and time, *out its seconds since 1970),
 * 0 when it does not look like a date at all. */
static int parse_date(const char *s, double *out, int *valid) {
  int y, mo, d, h, mi, se;
  if (strlen(s) != 19 || s[4] != '-' || s[7] != '-' || s[10] != ' ' || s[13] != ':' ||
      s[16] != ':' || digits(s, 4, &y) || digits(s + 5, 2, &mo) || digits(s + 8, 2, &d) ||
      digits(s + 11, 2, &h) || digits(s + 14, 2, &mi) || digits(s + 17, 2, &se))
    return 0;
  static const int mdays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  *valid = mo >= 1 && mo <= 12 && d >= 1 && d <= mdays[mo - 1] + (mo == 2 && leap) && h <= 23 &&
           mi <= 59 && se <= 59;
  if (*valid) *out = (double)days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + se;
  return 1;
}

/* Field col as a time: seconds (a plain decimal number >= 0) or a date;
 * *kind records which the file uses, and a row of the other kind fails. */
static int parse_time(const struct stk__sim_csv *r, int col, int *kind, double *out,
                      char *errmsg) {
  const char *s = stk__sim_csv_get(r, col);
  int valid = 0, k;
  if (stk__sim_decimal(s, out) == 0 && *out >= 0) {
    k = TIME_SECONDS;
  } else if (parse_date(s, out, &valid) && valid) {
    k = TIME_DATE;
  } else {
    return stk__errf(errmsg, STK_EFORMAT,
                     "%s:%llu: %s '%s' is not seconds or a date YYYY-MM-DD HH:MM:SS%s", r->path,
                     (unsigned long long)r->line, r->hdr[col], s,
                     valid || !parse_date(s, out, &valid) ? "" : " (no such day or time)");
  }
  if (*kind != TIME_UNSET && *kind != k)
    return stk__errf(errmsg, STK_EFORMAT,
                     k == TIME_SECONDS
                         ? "%s:%llu: %s '%s' is seconds, but the rows above give dates "
                           "(YYYY-MM-DD HH:MM:SS); use one or the other"
                         : "%s:%llu: %s '%s' is a date, but the rows above give seconds; use one "
                           "or the other",
                     r->path, (unsigned long long)r->line, r->hdr[col], s);
  *kind = k;
  return 0;
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
  /* a job's length comes from one place: a column beside it would be
   * ignored without a word */
  else if (c_app >= 0 && (c_dur >= 0 || c_del >= 0))
    rc = stk__errf(errmsg, STK_EFORMAT,
                   "%s: has both an application column (jobs of measured applications) and a "
                   "%s column (jobs of fixed length); give one",
                   path, c_dur >= 0 ? "duration" : "deletion_time");
  else if (c_dur >= 0 && c_del >= 0)
    rc = stk__errf(errmsg, STK_EFORMAT,
                   "%s: has both a duration and a deletion_time column; give one", path);
  else if (c_app >= 0 && !apps)
    rc = stk__errf(errmsg, STK_EINVAL,
                   "%s: jobs of measured applications need the application traces (--traces)",
                   path);
  size_t cap = 0;
  int kind = TIME_UNSET;
  while (!rc && (rc = stk__sim_csv_next(&r, errmsg)) == 0) {
    struct stk__jspec s;
    memset(&s, 0, sizeof s);
    int64_t rep;
    rc = parse_time(&r, c_time, &kind, &s.submit, errmsg);
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
      rc = parse_time(&r, c_del, &kind, &del, errmsg);
      if (!rc && del < s.submit)
        rc = stk__errf(errmsg, STK_EFORMAT, "%s:%llu: %s '%s' is before %s '%s'", r.path,
                       (unsigned long long)r.line, r.hdr[c_del], stk__sim_csv_get(&r, c_del),
                       r.hdr[c_time], stk__sim_csv_get(&r, c_time));
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
  /* dated traces start at 0, whatever their year; seconds are kept */
  if (kind == TIME_DATE) {
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

int stk__sim_parse_date(const char *s, double *out, int *valid) { return parse_date(s, out, valid); }
