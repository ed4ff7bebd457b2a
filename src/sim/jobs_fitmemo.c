/* A run's memo of Pollux model fits (jobs_impl.h): the fit is a pure
 * function of its rows, and jobs of one application that run the same
 * configurations in the same order give it the same rows (their step
 * times come from the application's measurements), so a fit of rows equal
 * bit for bit to an earlier one's is that one's answer. Nothing is
 * approximated: a row that differs in any bit is a miss. */
#include <stdlib.h>
#include <string.h>

#include "jobs_impl.h"

struct fm_entry {
  uint64_t hash;
  int n;
  unsigned char *key; /* the rows as given: n ints x 3, n doubles x 2 */
  struct stk__perf perf;
};

struct stk__fitmemo {
  struct fm_entry *e;
  size_t cap, used;
  uint64_t hits, misses;
};

static size_t key_len(int n) { return (size_t)n * (3 * sizeof(int) + 2 * sizeof(double)); }

static void key_make(unsigned char *k, int n, const int *nodes, const int *reps, const int *bsz,
                     const double *accum, const double *step) {
  size_t in = sizeof(int) * (size_t)n, dn = sizeof(double) * (size_t)n;
  memcpy(k, nodes, in);
  memcpy(k + in, reps, in);
  memcpy(k + 2 * in, bsz, in);
  memcpy(k + 3 * in, accum, dn);
  memcpy(k + 3 * in + dn, step, dn);
}

static uint64_t fnv(const unsigned char *k, size_t len, int n) {
  uint64_t h = 1469598103934665603ull ^ (uint64_t)n;
  for (size_t i = 0; i < len; i++) h = (h ^ k[i]) * 1099511628211ull;
  return h;
}

static int grow(struct stk__fitmemo *m) {
  size_t cap = m->cap ? m->cap * 2 : 256;
  struct fm_entry *e = calloc(cap, sizeof *e);
  if (!e) return -1;
  for (size_t i = 0; i < m->cap; i++) {
    if (!m->e[i].key) continue;
    size_t s = (size_t)m->e[i].hash & (cap - 1);
    while (e[s].key) s = (s + 1) & (cap - 1);
    e[s] = m->e[i];
  }
  free(m->e);
  m->e = e;
  m->cap = cap;
  return 0;
}

void stk__perf_fit_memo(struct stk__fitmemo **mp, struct stk__perf *p, int n, const int *nodes,
                        const int *reps, const int *bsz, const double *accum,
                        const double *step) {
  struct stk__fitmemo *m = *mp;
  size_t len = key_len(n);
  unsigned char stack[16 * (3 * sizeof(int) + 2 * sizeof(double))];
  unsigned char *k = n <= 0 ? NULL : n <= 16 ? stack : malloc(len);
  if (!m && k && (m = calloc(1, sizeof *m))) *mp = m;
  if (!m || !k) { /* out of memory, or no rows */
    if (k != stack) free(k);
    stk__perf_fit(p, n, nodes, reps, bsz, accum, step);
    return;
  }
  key_make(k, n, nodes, reps, bsz, accum, step);
  uint64_t h = fnv(k, len, n);
  if (m->cap) {
    for (size_t s = (size_t)h & (m->cap - 1); m->e[s].key; s = (s + 1) & (m->cap - 1))
      if (m->e[s].hash == h && m->e[s].n == n && !memcmp(m->e[s].key, k, len)) {
        *p = m->e[s].perf;
        m->hits++;
        if (k != stack) free(k);
        return;
      }
  }
  stk__perf_fit(p, n, nodes, reps, bsz, accum, step);
  m->misses++;
  unsigned char *kk = k;
  if (k == stack && (kk = malloc(len))) memcpy(kk, k, len);
  if (!kk || ((m->used + 1) * 2 > m->cap && grow(m) != 0)) {
    if (kk != stack) free(kk);
    return;
  }
  size_t s = (size_t)h & (m->cap - 1);
  while (m->e[s].key) s = (s + 1) & (m->cap - 1);
  m->e[s] = (struct fm_entry){h, n, kk, *p};
  m->used++;
}

void stk__fitmemo_free(struct stk__fitmemo *m) {
  if (!m) return;
  for (size_t i = 0; i < m->cap; i++) free(m->e[i].key);
  free(m->e);
  free(m);
}
