/* Sia's integer program of one round solved exactly by dynamic programming
 * over the GPUs left of each type, with a stated tie-break (jpol_sia.h).
 *
 * Sia's costs are round(G^-0.5, 2) - 1.1: whole cents. The program is
 * solved in integer cents, so every sum is exact and two optima tie only
 * when their objectives are equal to the cent; no rounding of a sum can
 * make one of them look better. A held job takes its configuration
 * outright and the table is over the GPUs the held jobs leave. h_k(y) is
 * the least cost of the free jobs k.. with y GPUs left of each type
 * (h_na = 0), over each job's options: none or a configuration that fits. A configuration of a
 * positive cost is never in an optimum of a job not held (the same
 * solution without it is cheaper and uses fewer GPUs), so it is left out;
 * a job with nothing else left is left out of the table. The optimum is
 * h_0(all GPUs). Ties: the jobs choose in order (the order of the
 * program's jobs), each the first of its options, in the order: the
 * configuration it is asked to prefer (Sia: the one it has, so a tie never
 * costs a restart), then the configurations in list order, then none,
 * that still leaves the rest an optimum. The answer is thus the
 * lexicographically first optimum in that order, whatever the machine. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jobs_impl.h"
#include "jpol_sia.h"

#define EX_MAX_STATES STK__SIA_EXACT_MAX_STATES
#define EX_INF (INT32_C(1) << 29) /* no solution; far above any sum of costs */

/* One option of a job: its configuration and GPUs' index step, cost. */
struct opt {
  int c, t, g;
  size_t step;
  int32_t w;
};

/* out[i] = min(out[i], w + in[i]) for i < n: the whole table's work, in
 * vectors of 8 (two SSE2 ones by default, one AVX2 one where the CPU has
 * it). */
typedef int32_t v8si __attribute__((vector_size(32)));
/* AVX2 and plain clones of the table kernels, chosen at load time by an
 * ifunc resolver. Not under the sanitizers: the resolver runs while the
 * dynamic loader relocates, before their runtimes start, and their
 * instrumentation of it crashes there (ThreadSanitizer: SIGSEGV in
 * minadd16's resolver before main). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define EX_CLONES 1
#endif
#ifdef EX_CLONES
__attribute__((target_clones("avx2", "default")))
#endif
static void minadd(int32_t *restrict out, const int32_t *restrict in, int32_t w, size_t n) {
  size_t i = 0;
  v8si vw = {w, w, w, w, w, w, w, w};
  for (; i + 8 <= n; i += 8) {
    v8si a, b;
    memcpy(&a, in + i, sizeof a);
    memcpy(&b, out + i, sizeof b);
    a += vw;
    v8si lt = a < b;
    b = (a & lt) | (b & ~lt);
    memcpy(out + i, &b, sizeof b);
  }
  for (; i < n; i++) {
    int32_t v = in[i] + w;
    out[i] = v < out[i] ? v : out[i];
  }
}

/* out[y] = min(out[y], w + in[y - step]) over every y with at least g GPUs
 * of type t left. In a block of the states whose counts of the types past
 * t are fixed (block = stride[t + 1] states), those are the block's states
 * from g * stride[t] = step on: one run each. */
static void relax(int32_t *out, const int32_t *in, const struct opt *o, size_t S, size_t block,
                  size_t lo) {
  if (o->step >= block) return;
  for (size_t b = lo / block * block; b < S; b += block) {
    size_t i = b + o->step > lo ? b + o->step : lo;
    if (i < b + block) minadd(out + i, in + i - o->step, o->w, b + block - i);
  }
}

/* The same in 16-bit integers, 16 to a vector: used where every sum of
 * the table fits (free jobs' costs are at most 0 cents; their least sum
 * at least INT16_MIN), so every value is the same as in 32 bits. */
typedef int16_t v16hi __attribute__((vector_size(32)));
#ifdef EX_CLONES
__attribute__((target_clones("avx2", "default")))
#endif
static void minadd16(int16_t *restrict out, const int16_t *restrict in, int16_t w, size_t n) {
  size_t i = 0;
  v16hi vw = {w, w, w, w, w, w, w, w, w, w, w, w, w, w, w, w};
  for (; i + 16 <= n; i += 16) {
    v16hi a, b;
    memcpy(&a, in + i, sizeof a);
    memcpy(&b, out + i, sizeof b);
    a += vw;
    v16hi lt = a < b;
    b = (a & lt) | (b & ~lt);
    memcpy(out + i, &b, sizeof b);
  }
  for (; i < n; i++) {
    int16_t v = (int16_t)(in[i] + w);
    out[i] = v < out[i] ? v : out[i];
  }
}

/* out[i] = min(out[i], w + in[i]) where col[i] >= g: the first type's
 * options (stride 1, so its runs are only a row long) in one pass over the
 * table, col[i] the first type's count at state i. */
#ifdef EX_CLONES
__attribute__((target_clones("avx2", "default")))
#endif
static void minadd16_col(int16_t *restrict out, const int16_t *restrict in,
                         const int16_t *restrict col, int16_t g, int16_t w, size_t n) {
  size_t i = 0;
  v16hi vw = {w, w, w, w, w, w, w, w, w, w, w, w, w, w, w, w};
  v16hi vg = {g, g, g, g, g, g, g, g, g, g, g, g, g, g, g, g};
  for (; i + 16 <= n; i += 16) {
    v16hi a, b, c;
    memcpy(&a, in + i, sizeof a);
    memcpy(&b, out + i, sizeof b);
    memcpy(&c, col + i, sizeof c);
    a += vw;
    v16hi lt = (a < b) & (c >= vg);
    b = (a & lt) | (b & ~lt);
    memcpy(out + i, &b, sizeof b);
  }
  for (; i < n; i++) {
    int16_t v = (int16_t)(in[i] + w);
    if (col[i] >= g && v < out[i]) out[i] = v;
  }
}

static void relax16(int16_t *out, const int16_t *in, const int16_t *col, const struct opt *o,
                    size_t S, size_t block, size_t lo) {
  if (o->step >= block) return;
  if (o->t == 0 && col) {
    size_t i = o->step > lo ? o->step : lo;
    if (i < S)
      minadd16_col(out + i, in + i - o->step, col + i, (int16_t)o->g, (int16_t)o->w, S - i);
    return;
  }
  for (size_t b = lo / block * block; b < S; b += block) {
    size_t i = b + o->step > lo ? b + o->step : lo;
    if (i < b + block) minadd16(out + i, in + i - o->step, (int16_t)o->w, b + block - i);
  }
}

/* h's value at i, in whichever width it was made */
static int32_t hval(const void *h, int narrow, size_t i) {
  return narrow ? ((const int16_t *)h)[i] : ((const int32_t *)h)[i];
}

/* Room for n bytes at *off in the workspace's layout, 64-byte aligned. */
static size_t ws_take(size_t *off, size_t n) {
  size_t at = (*off + 63) & ~(size_t)63;
  *off = at + n;
  return at;
}

/* Block b of the workspace with room for need bytes: kept, or grown. */
static char *ws_room(struct stk__sia_ws *ws, int b, size_t need) {
  if (need <= ws->cap[b]) return ws->buf[b];
  size_t cap = ws->cap[b] ? ws->cap[b] : 4096;
  while (cap < need) cap *= 2;
  char *p = malloc(cap);
  if (!p) return NULL;
  free(ws->buf[b]);
  ws->buf[b] = p;
  ws->cap[b] = cap;
  ws->grows++;
  return p;
}

void stk__sia_ws_free(struct stk__sia_ws *ws) {
  free(ws->buf[0]);
  free(ws->buf[1]);
  memset(ws, 0, sizeof *ws);
}

int stk__sia_exact(const struct stk__sia_cfg *cfg, int C, const int *tgpus, int T, size_t na,
                   const double *cost, const int *hold, const int *prefer, int *pick,
                   int64_t *obj_cents, struct stk__sia_ws *ws) {
  if (T < 1 || T > STK__JOBS_MAX_TYPES || C < 0) return -1;
  size_t S = 1, stride[STK__JOBS_MAX_TYPES];
  for (int t = 0; t < T; t++) {
    if (tgpus[t] < 0) return -1;
    stride[t] = S;
    S *= (size_t)tgpus[t] + 1;
    if (S > EX_MAX_STATES) return -1;
  }
  for (int c = 0; c < C; c++)
    if (cfg[c].type < 0 || cfg[c].type >= T || cfg[c].gpus < 0) return -1;
  /* every cost in whole cents, or this solver does not apply; and every
   * sum far from EX_INF, so no sum overflows or passes for no solution */
  double span = 0;
  for (size_t k = 0; k < na; k++) {
    double most = 0;
    for (int c = 0; c < C; c++) {
      double x = cost[k * (size_t)C + (size_t)c] * 100;
      if (!(fabs(x) < 1e6) || fabs(x - nearbyint(x)) > 1e-6) return -1;
      most = fmax(most, fabs(x));
    }
    span += most;
  }
  if (span >= (double)(EX_INF / 4)) return -1;
  for (size_t k = 0; k < na; k++) pick[k] = -1;
  /* A held job has one option, so it takes its GPUs whatever the others
   * do, and a program's feasibility is only each type's sum: the table is
   * made over the GPUs the held jobs leave (fewer states), the held jobs
   * take their configurations outright, and the optimum and the tie-break
   * over the others are those of the whole program. */
  int left_t[STK__JOBS_MAX_TYPES];
  int64_t held_cents = 0;
  for (int t = 0; t < T; t++) left_t[t] = tgpus[t];
  for (size_t k = 0; k < na; k++) {
    if (hold[k] < 0) continue;
    if (hold[k] >= C) { /* held in no configuration there is */
      for (size_t i = 0; i < na; i++) pick[i] = -1;
      return 1;
    }
    left_t[cfg[hold[k]].type] -= cfg[hold[k]].gpus;
    held_cents += (int64_t)nearbyint(cost[k * (size_t)C + (size_t)hold[k]] * 100);
  }
  for (int t = 0; t < T; t++)
    if (left_t[t] < 0) return 1; /* the held jobs alone do not fit */
  S = 1;
  for (int t = 0; t < T; t++) {
    stride[t] = S;
    S *= (size_t)left_t[t] + 1;
  }
  /* the options and job lists (block 0), the table and its column index
   * (block 1): the caller's workspace, kept from round to round and grown
   * only when a program needs more (without one, this call's own) */
  struct stk__sia_ws own = {0};
  if (!ws) ws = &own;
  size_t off = 0, o_op = ws_take(&off, sizeof(struct opt) * (na * (size_t)C + 1));
  size_t o_first = ws_take(&off, sizeof(size_t) * (na + 1));
  size_t o_who = ws_take(&off, sizeof(size_t) * (na + 1));
  size_t o_lo = ws_take(&off, sizeof(size_t) * (na + 1));
  char *base = ws_room(ws, 0, off);
  void *h = NULL;
  int16_t *col = NULL;
  int rc = STK_ENOMEM;
  if (!base) goto out;
  struct opt *op = (struct opt *)(base + o_op);
  size_t *first = (size_t *)(base + o_first), *who = (size_t *)(base + o_who);
  size_t *lo = (size_t *)(base + o_lo);
  /* each free job's options in its tie order (none is implied, last) */
  size_t m = 0, no = 0;
  for (size_t k = 0; k < na; k++) {
    if (hold[k] >= 0) continue;
    size_t start = no;
    int pref = prefer ? prefer[k] : -1;
    for (int pass = 0; pass < 2; pass++)
      for (int c = 0; c < C; c++) {
        if (pass == 0 ? c != pref : c == pref) continue;
        int32_t w = (int32_t)nearbyint(cost[k * (size_t)C + (size_t)c] * 100);
        if (w > 0 || cfg[c].gpus > left_t[cfg[c].type]) continue; /* never in an optimum; never fits */
        op[no++] = (struct opt){c, cfg[c].type, cfg[c].gpus,
                                (size_t)cfg[c].gpus * stride[cfg[c].type], w};
      }
    if (no == start) continue; /* none is its only option */
    first[m] = start;
    who[m++] = k;
  }
  first[m] = no;
  /* Layer 0 is read at one state, all GPUs free (y). Layer q is made from
   * lo[q] on, and making it reads layer q + 1 at the same states and, for
   * each option, its GPUs' step below them: down to lo[q] less the
   * largest step of job q's options, which is where layer q + 1 starts.
   * Every value read is one made, as in the whole table, and the
   * traceback's states lie on such reads. (A first version started each
   * layer at the corner of the states reachable from all GPUs; a state in
   * that range but not reachable read a cell below the next layer's
   * corner, never made: review.) */
  lo[0] = S - 1; /* every GPU the held jobs leave */
  for (size_t q = 0; q < m; q++) {
    size_t down = 0;
    for (size_t o = first[q]; o < first[q + 1]; o++) down = op[o].step > down ? op[o].step : down;
    lo[q + 1] = lo[q] >= down ? lo[q] - down : 0;
  }
  size_t block[STK__JOBS_MAX_TYPES];
  for (int t = 0; t < T; t++) block[t] = t + 1 < T ? stride[t + 1] : S;
  /* the least sum of the free jobs' cheapest options: 16-bit when it fits */
  int64_t least = 0;
  for (size_t q = 0; q < m; q++) {
    int32_t cheap = 0;
    for (size_t o = first[q]; o < first[q + 1]; o++) cheap = op[o].w < cheap ? op[o].w : cheap;
    least += cheap;
  }
  int narrow = least >= INT16_MIN;
  size_t es = narrow ? sizeof(int16_t) : sizeof(int32_t);
  off = 0;
  size_t o_h = ws_take(&off, es * S * (m + 1)), o_col = ws_take(&off, sizeof(int16_t) * S);
  char *tab = ws_room(ws, 1, off);
  if (!tab) goto out;
  h = tab + o_h;
  col = narrow && T > 1 ? (int16_t *)(tab + o_col) : NULL; /* NULL: by rows */
  for (size_t i = 0; col && i < S; i++) col[i] = (int16_t)(i % ((size_t)left_t[0] + 1));
  memset((char *)h + es * S * m, 0, es * S);
  for (size_t q = m; q-- > 0;) {
    char *cur = (char *)h + es * S * q;
    memcpy(cur + es * lo[q], cur + es * (S + lo[q]), es * (S - lo[q])); /* none */
    for (size_t o = first[q]; o < first[q + 1]; o++) {
      if (narrow)
        relax16((int16_t *)cur, (const int16_t *)(cur + es * S), col, &op[o], S, block[op[o].t],
                lo[q]);
      else
        relax((int32_t *)cur, (const int32_t *)(cur + es * S), &op[o], S, block[op[o].t], lo[q]);
    }
  }
  size_t y = S - 1; /* every GPU the held jobs leave */
  int64_t z = hval(h, narrow, y) + held_cents;
  /* the tie-break: in job order, the first option that keeps the optimum */
  for (size_t k = 0; k < na; k++)
    if (hold[k] >= 0) pick[k] = hold[k];
  for (size_t q = 0; q < m; q++) {
    size_t nxt = S * (q + 1);
    int32_t want = hval(h, narrow, S * q + y);
    size_t k = who[q];
    for (size_t o = first[q]; o < first[q + 1]; o++) {
      size_t left = y / stride[op[o].t] % ((size_t)left_t[op[o].t] + 1);
      if ((int)left < op[o].g || hval(h, narrow, nxt + y - op[o].step) + op[o].w != want) continue;
      pick[k] = op[o].c;
      y -= op[o].step;
      break;
    }
    if (pick[k] < 0 && hval(h, narrow, nxt + y) != want) { /* cannot happen: the table says so */
      rc = STK_ERANGE; /* a broken table, not a program it declines: check mode counts it bad */
      goto out;
    }
  }
  if (obj_cents) *obj_cents = z + (int64_t)nearbyint(STK__SIA_LAMBDA_N * 100) * (int64_t)na;
  rc = 0;
out:
  if (rc != 0)
    for (size_t k = 0; k < na; k++) pick[k] = -1;
  if (ws == &own) stk__sia_ws_free(&own);
  return rc;
}

/* The objective of picks, in cents: 1.1 per job plus each chosen cost. */
static int64_t obj_of(int C, size_t na, const double *cost, const int *pick) {
  int64_t z = (int64_t)nearbyint(STK__SIA_LAMBDA_N * 100) * (int64_t)na;
  for (size_t k = 0; k < na; k++)
    if (pick[k] >= 0) z += (int64_t)nearbyint(cost[k * (size_t)C + (size_t)pick[k]] * 100);
  return z;
}

struct stk__sia_check *stk__sia_checking;

void stk__sia_check_round(const struct stk__sia_cfg *cfg, int C, const int *tgpus, int T,
                          size_t na, const double *cost, const int *hold, const int *prefer) {
  struct stk__sia_check *ck = stk__sia_checking;
  int *pe = malloc(sizeof(int) * (na + 1)), *pg = malloc(sizeof(int) * (na + 1)), grc = -1;
  int64_t ze = 0;
  ck->programs++;
  if (!pe || !pg) {
    ck->bad++;
    goto out;
  }
  int re = stk__sia_exact(cfg, C, tgpus, T, na, cost, hold, prefer, pe, &ze, NULL);
  if (stk__sia_solve(cfg, C, tgpus, T, na, cost, hold, pg, &grc) != 0 || (re < 0 && re != -1)) {
    ck->bad++; /* a solver failed */
    goto out;
  }
  if (grc != -1) ck->glpk_called++;
  if (re == -1) { /* the exact solver declines it (not in cents): GLPK's alone, nothing to compare */
    ck->declined++;
    goto out;
  }
  int g_none = 1, same = 1;
  for (size_t k = 0; k < na; k++) {
    if (pg[k] >= 0) g_none = 0;
    if (pg[k] != pe[k]) same = 0;
  }
  if (re == 1) { /* no solution: GLPK must have found none either */
    if (!g_none) ck->bad++;
    else ck->same++;
    goto out;
  }
  int64_t zg = obj_of(C, na, cost, pg);
  double rel = (double)(zg - ze) / fmax(1.0, fabs((double)zg));
  if (rel > ck->max_rel) ck->max_rel = rel;
  if (zg < ze || rel > STK__SIA_CHECK_TOL) /* better than exact: a fault; worse: out of tolerance */
    ck->bad++;
  else if (same)
    ck->same++;
  else if (zg == ze)
    ck->ties++;
  else
    ck->gap++;
out:
  free(pe);
  free(pg);
}
