/* Sia's integer program, one round (jpol_sia.c), open to tests. */
#ifndef STOKER_SIM_JPOL_SIA_H
#define STOKER_SIM_JPOL_SIA_H

#include <stddef.h>
#include <stdint.h>

#define STK__SIA_LAMBDA_N 1.1 /* the price of a job left without GPUs */

/* A configuration: GPU type, nodes, GPUs. */
struct stk__sia_cfg {
  int type, nodes, gpus;
};

/* Solves the round's program with GLPK (branch and cut, presolve, relative
 * gap 1e-4): column k * C + c is job k in configuration cfg[c] (binary,
 * cost[k * C + c]), objective 1.1 na plus the chosen costs; a row per job
 * (at most one configuration; exactly hold[k] when hold[k] >= 0) and a row
 * per type (at most tgpus[t] GPUs). pick[k] is job k's configuration, or
 * -1 for none and for every job when GLPK found no solution. A search that
 * stops at the gap with a solution keeps it. glp_rc, when not NULL, gets
 * glp_intopt's return code, or -1 when GLPK was not called: a program
 * whose optimum is unique by more than the gap is solved by dynamic
 * programming, which gives GLPK's answer (jpol_sia_ilp.c says why).
 * Returns 0 or STK_ENOMEM. */
int stk__sia_solve(const struct stk__sia_cfg *cfg, int C, const int *tgpus, int T, size_t na,
                   const double *cost, const int *hold, int *pick, int *glp_rc);

/* 1 (the default): solve by dynamic programming first where that gives
 * GLPK's answer; 0: always GLPK (for tests that compare the two). */
extern int stk__sia_dp_first;

/* The same program solved exactly in integer cents (Sia's costs are whole
 * cents) by dynamic programming, ties broken by a stated rule: jobs choose
 * in order, each the first option that keeps an optimum, in the order
 * prefer[k] (may be NULL or -1), the configurations in list order, none
 * (jpol_sia_exact.c). *obj_cents (may be NULL) gets the objective x 100.
 * Returns 0, 1 when no solution exists (every pick -1), -1 when it does not
 * apply (costs not in cents: picks untouched; too many states),
 * STK_ERANGE when its own table is found inconsistent at the traceback (a
 * bug: the policy falls back to GLPK, check mode counts it bad), or
 * STK_ENOMEM. */
/* ws (may be NULL: this call allocates its own) is the caller's workspace,
 * zeroed before its first use, kept across calls and grown only when a
 * program needs more; free it with stk__sia_ws_free. */
struct stk__sia_ws {
  char *buf[2];  /* the options and job lists; the table */
  size_t cap[2]; /* bytes */
  size_t grows;  /* allocations made (tests) */
};
int stk__sia_exact(const struct stk__sia_cfg *cfg, int C, const int *tgpus, int T, size_t na,
                   const double *cost, const int *hold, const int *prefer, int *pick,
                   int64_t *obj_cents, struct stk__sia_ws *ws);
void stk__sia_ws_free(struct stk__sia_ws *ws);
/* The most states (the product over GPU types of their GPUs + 1) the exact
 * solver's table takes; policy sia refuses a larger cluster at its start
 * (stk__sia_exact_fits) rather than hand its rounds to GLPK unasked. */
#define STK__SIA_EXACT_MAX_STATES 65536

/* Check mode: while stk__sia_checking is set, every program Sia solves is
 * also solved by both solvers (stk__sia_exact and stk__sia_solve) and the
 * answers compared here. GLPK's objective may exceed the exact optimum by
 * its relative gap (1e-4) and no more; below it is a fault. */
#define STK__SIA_CHECK_TOL 1e-4
struct stk__sia_check {
  size_t programs;    /* programs compared */
  size_t glpk_called; /* of them, those GLPK searched (not the unique-optimum DP) */
  size_t same;        /* identical allocations */
  size_t ties;        /* equal objectives, allocations differ (a tie broken otherwise) */
  size_t gap;         /* GLPK stopped at its gap, above the optimum within tolerance */
  size_t bad;         /* objectives differ beyond tolerance, or a solver failed */
  size_t declined;    /* the exact solver declined (costs not in cents): GLPK's answer taken */
  double max_rel;     /* largest (GLPK - exact) / |GLPK| */
};
extern struct stk__sia_check *stk__sia_checking;
void stk__sia_check_round(const struct stk__sia_cfg *cfg, int C, const int *tgpus, int T,
                          size_t na, const double *cost, const int *hold, const int *prefer);

#endif
