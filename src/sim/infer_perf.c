/* Splitwise's measured LLM inference performance (perf_model.csv, ISCA'24
 * artifact) as a separable model of prefill and decode iterations; see
 * stoker/infer.h. The file varies one factor at a time around prompt 512,
 * batch 1, 128 generated tokens, five repeats a point: prompt sizes at
 * batch 1 give P1 and T1, batch sizes at prompt 512 give PB, TB and the
 * power curve. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim_impl.h"
#include "stoker/infer.h"

#define MAXPTS 64

struct curve {
  double x[MAXPTS], y[MAXPTS];
  int n;
};

struct stk_infer_perf {
  struct stk_infer_point pt[MAXPTS * 4];
  int cnt[MAXPTS * 4];
  size_t npt;
  struct curve p1, t1, pb, tb, pw;
};

/* Piecewise linear through the points (sorted by x), proportional to x
 * past the last one and flat before the first. */
static double curve_at(const struct curve *c, double x) {
  if (c->n == 0) return NAN;
  if (x <= c->x[0]) return c->y[0];
  for (int i = 1; i < c->n; i++)
    if (x <= c->x[i]) {
      double f = (x - c->x[i - 1]) / (c->x[i] - c->x[i - 1]);
      return c->y[i - 1] + f * (c->y[i] - c->y[i - 1]);
    }
  return c->y[c->n - 1] * x / c->x[c->n - 1];
}

static void curve_add(struct curve *c, double x, double y) {
  if (c->n == MAXPTS) return;
  int i = c->n++;
  for (; i > 0 && c->x[i - 1] > x; i--) {
    c->x[i] = c->x[i - 1];
    c->y[i] = c->y[i - 1];
  }
  c->x[i] = x;
  c->y[i] = y;
}

static int add_row(struct stk_infer_perf *p, unsigned prompt, unsigned batch, unsigned tokens,
                   double ps, double ts, double es, double power, double *pw_sum, int *pw_n) {
  size_t i = 0;
  for (; i < p->npt; i++)
    if (p->pt[i].prompt == prompt && p->pt[i].batch == batch && p->pt[i].tokens == tokens) break;
  if (i == p->npt) {
    if (p->npt == MAXPTS * 4) return STK_ERANGE;
    p->npt++;
    memset(&p->pt[i], 0, sizeof p->pt[i]);
    p->pt[i] = (struct stk_infer_point){prompt, batch, tokens, 0, 0, 0};
    p->cnt[i] = 0;
    pw_sum[i] = 0;
    pw_n[i] = 0;
  }
  struct stk_infer_point *q = &p->pt[i];
  q->prompt_s += ps;
  q->token_s += ts;
  q->e2e_s += es;
  p->cnt[i]++;
  if (power > 0) { /* the file has 0.0 where power was not measured */
    pw_sum[i] += power;
    pw_n[i]++;
  }
  return 0;
}

int stk_infer_perf_load(struct stk_infer_perf **out, const char *csv, const char *model,
                        const char *hardware, unsigned tp, char *errmsg) {
  *out = NULL;
  struct stk__sim_csv r;
  int rc = stk__sim_csv_open(&r, csv, errmsg);
  if (rc) return rc;
  const char *names[] = {"model",      "hardware",      "prompt_size", "batch_size",
                         "token_size", "average_power", "prompt_time", "token_time",
                         "e2e_time",   "tensor_parallel"};
  int col[10];
  for (int i = 0; i < 10; i++)
    if ((col[i] = stk__sim_csv_col(&r, names[i])) < 0) {
      rc = stk__errf(errmsg, STK_EFORMAT, "%s: no column %s (a Splitwise perf_model.csv?)", csv,
                     names[i]);
      stk__sim_csv_close(&r);
      return rc;
    }
  struct stk_infer_perf *p = calloc(1, sizeof *p);
  double *pw_sum = calloc(MAXPTS * 4, sizeof(double));
  int *pw_n = calloc(MAXPTS * 4, sizeof(int));
  if (!p || !pw_sum || !pw_n) {
    rc = STK_ENOMEM;
    goto out;
  }
  while ((rc = stk__sim_csv_next(&r, errmsg)) == 0) {
    if (strcmp(stk__sim_csv_get(&r, col[0]), model) || strcmp(stk__sim_csv_get(&r, col[1]), hardware))
      continue;
    int64_t v[4];
    double d[4];
    if ((rc = stk__sim_csv_int(&r, col[9], 1, 64, 0, 0, &v[3], errmsg))) goto out;
    if ((unsigned)v[3] != tp) continue;
    if ((rc = stk__sim_csv_int(&r, col[2], 1, 1 << 20, 0, 0, &v[0], errmsg)) ||
        (rc = stk__sim_csv_int(&r, col[3], 1, 4096, 0, 0, &v[1], errmsg)) ||
        (rc = stk__sim_csv_int(&r, col[4], 1, 1 << 20, 0, 0, &v[2], errmsg)) ||
        (rc = stk__sim_csv_num(&r, col[5], 0, &d[0], errmsg)) ||
        (rc = stk__sim_csv_num(&r, col[6], 1e-9, &d[1], errmsg)) ||
        (rc = stk__sim_csv_num(&r, col[7], 1e-9, &d[2], errmsg)) ||
        (rc = stk__sim_csv_num(&r, col[8], 1e-9, &d[3], errmsg)))
      goto out;
    if ((rc = add_row(p, (unsigned)v[0], (unsigned)v[1], (unsigned)v[2], d[1] / 1e3, d[2] / 1e3,
                      d[3] / 1e3, d[0], pw_sum, pw_n))) {
      rc = stk__errf(errmsg, rc, "%s: more than %d measured points for %s on %s", csv,
                     MAXPTS * 4, model, hardware);
      goto out;
    }
  }
  if (rc != STK_EOF) goto out;
  rc = 0;
  for (size_t i = 0; i < p->npt; i++) {
    struct stk_infer_point *q = &p->pt[i];
    q->prompt_s /= p->cnt[i];
    q->token_s /= p->cnt[i];
    q->e2e_s /= p->cnt[i];
    if (q->batch == 1 && q->tokens == 128) {
      curve_add(&p->p1, q->prompt, q->prompt_s);
      curve_add(&p->t1, q->prompt, q->token_s);
    }
    if (q->prompt == 512 && q->tokens == 128) {
      curve_add(&p->pb, q->batch, q->prompt_s);
      curve_add(&p->tb, q->batch, q->token_s);
      if (pw_n[i]) curve_add(&p->pw, q->batch, pw_sum[i] / pw_n[i]);
    }
  }
  if (!p->npt) {
    rc = stk__errf(errmsg, STK_ENOENT, "%s has no rows of model %s on %s at tensor parallelism %u",
                   csv, model, hardware, tp);
    goto out;
  }
  if (p->p1.n < 1 || p->pb.n < 1 || p->pb.x[0] != 1 || p->p1.x[0] > 512 ||
      curve_at(&p->p1, 512) <= 0) {
    rc = stk__errf(errmsg, STK_EFORMAT,
                   "%s: %s on %s (tp %u) lacks the prompt sweep at batch 1 or the batch sweep at "
                   "prompt 512 (128 tokens) the model needs",
                   csv, model, hardware, tp);
    goto out;
  }
  *out = p;
  p = NULL;
out:
  stk__sim_csv_close(&r);
  free(p);
  free(pw_sum);
  free(pw_n);
  return rc;
}

void stk_infer_perf_free(struct stk_infer_perf *p) { free(p); }

double stk_infer_prefill_s(const struct stk_infer_perf *p, double mean_prompt, unsigned k) {
  if (k == 0) return 0;
  return curve_at(&p->p1, mean_prompt) * curve_at(&p->pb, k) / p->pb.y[0]; /* pb.x[0] is 1 */
}

double stk_infer_tbt_s(const struct stk_infer_perf *p, double mean_prompt, unsigned b) {
  if (b == 0) return 0;
  return curve_at(&p->t1, mean_prompt) * curve_at(&p->tb, b) / p->tb.y[0];
}

double stk_infer_power_frac(const struct stk_infer_perf *p, unsigned b) {
  if (p->pw.n == 0) return 1;
  if (b >= p->pw.x[p->pw.n - 1]) return p->pw.y[p->pw.n - 1];
  return curve_at(&p->pw, b);
}

size_t stk_infer_perf_points(const struct stk_infer_perf *p, const struct stk_infer_point **points) {
  *points = p->pt;
  return p->npt;
}
