/* Sia's integer program of one round (jpol_sia.h): by GLPK, or, when its
 * optimum is unique by more than GLPK's gap, by dynamic programming.
 *
 * GLPK stops at a solution within a relative gap of 1e-4 of its bound, or
 * at a proven optimum; which of several tied optima it returns depends on
 * its search, so only GLPK can give GLPK's answer then. But when every
 * other solution is worse than the optimum z1 by more than the gap (the
 * runner-up z2 has z2 - z1 > 1e-4 |z2|), no other solution can satisfy
 * GLPK's gap test against a bound of at most z1, and none survives a full
 * search: GLPK returns the optimum, whatever its path. The dynamic program
 * over the GPUs used of each type finds z1, z2 and the optimum exactly, in
 * milliseconds, where GLPK's search can take minutes (one round of newTrace
 * workload 1, whose optimum is unique, took 3,052 s under load). */
#include <glpk.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jobs_impl.h"
#include "jpol_sia.h"

int stk__sia_dp_first = 1;

#define DP_MAX_STATES 65536 /* GPUs-used states a program may have */
#define MIP_GAP 1e-4        /* GLPK's relative gap, as Sia sets it */

/* Keeps the two lowest of the values offered; *a the choice of the lowest. */
static inline void low2(double *b1, double *b2, int16_t *a, double x, int c) {
  if (x < *b1) {
    *b2 = *b1;
    *b1 = x;
    *a = (int16_t)c;
  } else if (x < *b2) {
    *b2 = x;
  }
}

/* The optimum's picks when every other solution is worse by more than the
 * gap; -1 when not (ties, or too close), when the states are too many or
 * none is feasible, or out of memory. Per state, the two lowest costs of
 * distinct partial solutions and the choice that gave the lowest. A job
 * not held may go without, so a configuration costing more than the gap's
 * slack makes a solution worse than the same without it by more than that,
 * and is left out. */
static int dp_unique(const struct stk__sia_cfg *cfg, int C, const int *tgpus, int T, size_t na,
                     const double *cost, const int *hold, int *pick) {
  if (T < 1 || T > STK__JOBS_MAX_TYPES || C > 32000) return -1;
  size_t S = 1, stride[STK__JOBS_MAX_TYPES];
  for (int t = 0; t < T; t++) {
    if (tgpus[t] < 0) return -1;
    stride[t] = S;
    S *= (size_t)tgpus[t] + 1;
    if (S > DP_MAX_STATES) return -1;
  }
  double cst = STK__SIA_LAMBDA_N * (double)na;
  double *v = malloc(sizeof(double) * S * 4);
  int *used = malloc(sizeof(int) * S * (size_t)T);
  int16_t *arg = malloc(sizeof(int16_t) * S * (na ? na : 1));
  int rc = -1;
  if (!v || !used || !arg) goto out;
  double *c1 = v, *c2 = v + S, *n1 = v + 2 * S, *n2 = v + 3 * S;
  double worst = cst; /* no solution's |objective| is above this */
  for (size_t k = 0; k < na; k++) {
    double m = 0;
    for (int c = 0; c < C; c++) m = fmax(m, fabs(cost[k * (size_t)C + (size_t)c]));
    worst += m;
  }
  double slack = MIP_GAP * worst + 1e-9 * (1 + worst);
  for (size_t s = 0; s < S; s++) {
    c1[s] = c2[s] = INFINITY;
    for (int t = 0; t < T; t++)
      used[s * (size_t)T + (size_t)t] = (int)(s / stride[t] % ((size_t)tgpus[t] + 1));
  }
  c1[0] = 0;
  for (size_t k = 0; k < na; k++) {
    int held = hold[k];
    int16_t *a = arg + k * S;
    for (size_t s = 0; s < S; s++) {
      n1[s] = held >= 0 ? INFINITY : c1[s];
      n2[s] = held >= 0 ? INFINITY : c2[s];
      a[s] = -1;
    }
    for (int c = 0; c < C; c++) {
      double w = cost[k * (size_t)C + (size_t)c];
      if (held >= 0 ? c != held : !(w <= slack)) continue;
      int t = cfg[c].type, g = cfg[c].gpus;
      if (t < 0 || t >= T || g < 0) goto out;
      size_t step = (size_t)g * stride[t];
      for (size_t s = 0; s < S; s++) {
        if (c1[s] == INFINITY || used[s * (size_t)T + (size_t)t] + g > tgpus[t]) continue;
        low2(&n1[s + step], &n2[s + step], &a[s + step], c1[s] + w, c);
        low2(&n1[s + step], &n2[s + step], &a[s + step], c2[s] + w, c);
      }
    }
    double *x1 = c1, *x2 = c2;
    c1 = n1, c2 = n2, n1 = x1, n2 = x2;
  }
  double b1 = INFINITY, b2 = INFINITY;
  size_t best = 0;
  for (size_t s = 0; s < S; s++) {
    if (c1[s] < b1) {
      b2 = fmin(b1, c2[s]);
      b1 = c1[s];
      best = s;
    } else {
      b2 = fmin(b2, c1[s]);
    }
  }
  if (b1 == INFINITY) goto out;
  double z1 = b1 + cst, z2 = b2 + cst;
  /* unique by more than the gap, rounding aside */
  if (!(z2 - z1 > MIP_GAP * fabs(z2) + 1e-9 * (1 + fabs(z2)))) goto out;
  for (size_t k = na; k-- > 0;) {
    int c = arg[k * S + best];
    pick[k] = c;
    if (c >= 0) best -= (size_t)cfg[c].gpus * stride[cfg[c].type];
  }
  rc = 0;
out:
  free(v);
  free(used);
  free(arg);
  return rc;
}

/* The integer program of one round (jpol_sia.h says what it solves). */
int stk__sia_solve(const struct stk__sia_cfg *cfg, int C, const int *tgpus, int T, size_t na,
                   const double *cost, const int *hold, int *pick, int *glp_rc) {
  if (stk__sia_dp_first && dp_unique(cfg, C, tgpus, T, na, cost, hold, pick) == 0) {
    if (glp_rc) *glp_rc = -1;
    return 0;
  }
  size_t nz = na * (size_t)C * 2;
  int *ia = malloc(sizeof(int) * (nz + 1)), *ja = malloc(sizeof(int) * (nz + 1));
  double *ar = malloc(sizeof(double) * (nz + 1));
  if (!ia || !ja || !ar) {
    free(ia);
    free(ja);
    free(ar);
    return STK_ENOMEM;
  }
  glp_prob *ip = glp_create_prob();
  glp_set_obj_dir(ip, GLP_MIN);
  glp_add_rows(ip, (int)na + T);
  glp_add_cols(ip, (int)na * C);
  int k2 = 0;
  for (size_t k = 0; k < na; k++) {
    if (hold[k] >= 0)
      glp_set_row_bnds(ip, (int)k + 1, GLP_FX, 1, 1);
    else
      glp_set_row_bnds(ip, (int)k + 1, GLP_UP, 0, 1);
    for (int c = 0; c < C; c++) {
      int col = (int)k * C + c + 1;
      glp_set_col_kind(ip, col, GLP_BV);
      if (hold[k] >= 0 && c != hold[k]) glp_set_col_bnds(ip, col, GLP_FX, 0, 0);
      glp_set_obj_coef(ip, col, cost[k * (size_t)C + c]);
      ++k2, ia[k2] = (int)k + 1, ja[k2] = col, ar[k2] = 1;
      ++k2, ia[k2] = (int)na + cfg[c].type + 1, ja[k2] = col, ar[k2] = cfg[c].gpus;
    }
  }
  glp_set_obj_coef(ip, 0, STK__SIA_LAMBDA_N * (double)na);
  for (int t = 0; t < T; t++) glp_set_row_bnds(ip, (int)na + t + 1, GLP_UP, 0, tgpus[t]);
  glp_load_matrix(ip, k2, ia, ja, ar);
  glp_iocp parm;
  glp_init_iocp(&parm);
  parm.msg_lev = GLP_MSG_OFF;
  parm.presolve = GLP_ON;
  parm.mip_gap = 1e-4;
  int grc = glp_intopt(ip, &parm);
  int st = glp_mip_status(ip);
  if (glp_rc) *glp_rc = grc;
  /* GLP_EMIPGAP: the search stopped at the gap tolerance with a solution
   * (status GLP_FEAS), as asked; reading it as a failure left every job
   * without GPUs for the round */
  int solved = (grc == 0 || grc == GLP_EMIPGAP) && (st == GLP_OPT || st == GLP_FEAS);
  for (size_t k = 0; k < na; k++) {
    pick[k] = -1;
    if (solved)
      for (int c = 0; c < C; c++)
        if (glp_mip_col_val(ip, (int)k * C + c + 1) > 0.5) pick[k] = c;
  }
  glp_delete_prob(ip);
  free(ia);
  free(ja);
  free(ar);
  return 0;
}
