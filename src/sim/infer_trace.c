/* Azure's LLM inference traces (AzurePublicDataset, 2023): one request a
 * row, TIMESTAMP "YYYY-MM-DD HH:MM:SS.fffffff", ContextTokens (prompt),
 * GeneratedTokens. Times become seconds from the first request. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jobs_impl.h"
#include "sim_impl.h"
#include "stoker/infer.h"

/* "YYYY-MM-DD HH:MM:SS" with an optional fraction of a second. */
static int parse_stamp(const char *s, double *out) {
  char head[20];
  size_t n = strlen(s);
  if (n < 19) return STK_EFORMAT;
  memcpy(head, s, 19);
  head[19] = 0;
  int valid = 0;
  if (!stk__sim_parse_date(head, out, &valid) || !valid) return STK_EFORMAT;
  if (n == 19) return 0;
  if (s[19] != '.' || n == 20) return STK_EFORMAT;
  double frac = 0, scale = 0.1;
  for (size_t i = 20; i < n; i++, scale /= 10) {
    if (s[i] < '0' || s[i] > '9') return STK_EFORMAT;
    frac += (s[i] - '0') * scale;
  }
  *out += frac;
  return 0;
}

static int by_time(const void *a, const void *b) {
  double x = ((const struct stk_infer_req *)a)->t, y = ((const struct stk_infer_req *)b)->t;
  return x < y ? -1 : x > y;
}

int stk_infer_trace_load(struct stk_infer_trace **out, const char *csv, char *errmsg) {
  *out = NULL;
  struct stk__sim_csv r;
  int rc = stk__sim_csv_open(&r, csv, errmsg);
  if (rc) return rc;
  int ct = stk__sim_csv_col(&r, "TIMESTAMP"), cp = stk__sim_csv_col(&r, "ContextTokens"),
      cg = stk__sim_csv_col(&r, "GeneratedTokens");
  if (ct < 0 || cp < 0 || cg < 0) {
    rc = stk__errf(errmsg, STK_EFORMAT,
                   "%s: needs the columns TIMESTAMP, ContextTokens and GeneratedTokens (an Azure "
                   "LLM inference trace)",
                   csv);
    stk__sim_csv_close(&r);
    return rc;
  }
  struct stk_infer_trace *t = calloc(1, sizeof *t);
  size_t cap = 0;
  if (!t) {
    rc = STK_ENOMEM;
    goto out;
  }
  while ((rc = stk__sim_csv_next(&r, errmsg)) == 0) {
    double when;
    int64_t p, g;
    if (parse_stamp(stk__sim_csv_get(&r, ct), &when)) {
      rc = stk__errf(errmsg, STK_EFORMAT, "%s:%llu: TIMESTAMP '%s' is not YYYY-MM-DD HH:MM:SS[.f]",
                     csv, (unsigned long long)r.line, stk__sim_csv_get(&r, ct));
      goto out;
    }
    if ((rc = stk__sim_csv_int(&r, cp, 1, 1 << 24, 0, 0, &p, errmsg)) ||
        (rc = stk__sim_csv_int(&r, cg, 0, 1 << 24, 0, 0, &g, errmsg)))
      goto out;
    if (t->n == cap) {
      cap = cap ? 2 * cap : 1024;
      struct stk_infer_req *nr = realloc(t->r, sizeof *nr * cap);
      if (!nr) {
        rc = STK_ENOMEM;
        goto out;
      }
      t->r = nr;
    }
    t->r[t->n++] = (struct stk_infer_req){when, (uint32_t)p, (uint32_t)(g ? g : 1)};
  }
  if (rc != STK_EOF) goto out;
  rc = 0;
  if (!t->n) {
    rc = stk__errf(errmsg, STK_EEMPTY, "%s has no requests", csv);
    goto out;
  }
  qsort(t->r, t->n, sizeof *t->r, by_time);
  double t0 = t->r[0].t;
  for (size_t i = 0; i < t->n; i++) {
    t->r[i].t -= t0;
    t->mean_prompt += t->r[i].prompt;
    t->mean_gen += t->r[i].gen;
  }
  t->mean_prompt /= (double)t->n;
  t->mean_gen /= (double)t->n;
  t->span = t->r[t->n - 1].t;
  *out = t;
  t = NULL;
out:
  stk__sim_csv_close(&r);
  stk_infer_trace_free(t);
  return rc;
}

void stk_infer_trace_free(struct stk_infer_trace *t) {
  if (!t) return;
  free(t->r);
  free(t);
}
