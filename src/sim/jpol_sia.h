/* Sia's integer program, one round (jpol_sia.c), open to tests. */
#ifndef STOKER_SIM_JPOL_SIA_H
#define STOKER_SIM_JPOL_SIA_H

#include <stddef.h>

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

#endif
