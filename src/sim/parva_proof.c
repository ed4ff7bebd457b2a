/* Whether any ParvaGPU plan fits on K GPUs, by exhaustive search: every
 * service takes one of its minimal compositions (counts of 1g, 2g, 3g, 4g
 * and 7g segments of its best point per size that cover its rate, none
 * removable) within the slices K GPUs hold; each sum of compositions is
 * tested for packing onto K GPUs over every valid MIG set of sizes per GPU
 * (sum <= 7, two 3g alone), with failed states remembered. A "no" for K
 * one under a plan found proves that plan's GPU count the fewest. */
#include <stdlib.h>
#include <string.h>

#include "parva_impl.h"

#define MAX_COMPS 256
#define MEMO_BITS 22

typedef uint8_t vec[PARVA_NSIZES]; /* counts of 1g, 2g, 3g, 4g, 7g */

struct proof {
  unsigned nsvc, k;
  uint8_t (*comp)[MAX_COMPS][PARVA_NSIZES];
  unsigned *ncomp;
  vec bins[64];
  unsigned nbins;
  uint64_t *memo; /* failed (vector, GPUs left) states, open addressing */
  long steps;
  int found;
  unsigned pick[256];
  uint8_t chosen[4096]; /* the set of sizes of each GPU on the way to a fit */
};

static unsigned slices(const uint8_t *v) {
  unsigned s = 0;
  for (int k = 0; k < PARVA_NSIZES; k++) s += v[k] * stk__parva_sizes[k];
  return s;
}

/* Minimal compositions of a service within maxs slices; -1 if too many. */
static int compositions(const struct parva_svc *s, unsigned maxs, uint8_t out[][PARVA_NSIZES],
                        unsigned *n) {
  *n = 0;
  double t[PARVA_NSIZES];
  for (int k = 0; k < PARVA_NSIZES; k++) t[k] = s->best[k] ? s->best[k]->trp : 0;
  if (maxs > 70) return -1;
  for (unsigned a = 0; a * 7 <= maxs; a++)
    for (unsigned b = 0; a * 7 + b * 4 <= maxs; b++)
      for (unsigned c = 0; a * 7 + b * 4 + c * 3 <= maxs; c++)
        for (unsigned d = 0; a * 7 + b * 4 + c * 3 + d * 2 <= maxs; d++)
          for (unsigned e = 0; a * 7 + b * 4 + c * 3 + d * 2 + e <= maxs; e++) {
            unsigned cnt[PARVA_NSIZES] = {e, d, c, b, a};
            double cap = 0, least = 1e300;
            int ok = 1;
            for (int k = 0; k < PARVA_NSIZES; k++) {
              if (cnt[k] && !s->best[k]) ok = 0;
              cap += cnt[k] * t[k];
              if (cnt[k] && t[k] < least) least = t[k];
            }
            if (!ok || cap < s->rate || cap - least >= s->rate) continue;
            if (*n == MAX_COMPS) return -1;
            for (int k = 0; k < PARVA_NSIZES; k++) out[*n][k] = (uint8_t)cnt[k];
            (*n)++;
          }
  return 0;
}

static uint64_t key(const uint8_t *v, unsigned k) {
  return ((uint64_t)v[0] << 40 | (uint64_t)v[1] << 32 | (uint64_t)v[2] << 24 |
          (uint64_t)v[3] << 16 | (uint64_t)v[4] << 8 | k) + 1;
}

static int memo_has(struct proof *p, uint64_t x, int insert) {
  size_t mask = ((size_t)1 << MEMO_BITS) - 1, i = (size_t)(x * 0x9E3779B97F4A7C15ull >> 20) & mask;
  for (size_t n = 0; n <= mask; n++, i = (i + 1) & mask) {
    if (p->memo[i] == x) return 1;
    if (!p->memo[i]) {
      if (insert) p->memo[i] = x;
      return 0;
    }
  }
  return 0;
}

static int pack(struct proof *p, uint8_t *v, unsigned k) {
  unsigned s = slices(v);
  if (!s) return 1;
  if (!k || s > STK_MIG_COMPUTE_SLICES * k) return 0;
  uint64_t x = key(v, k);
  if (memo_has(p, x, 0)) return 0;
  p->steps++;
  int big = PARVA_NSIZES - 1;
  while (!v[big]) big--;
  for (unsigned b = 0; b < p->nbins; b++) {
    const uint8_t *m = p->bins[b];
    int fits = m[big] > 0;
    for (int j = 0; j < PARVA_NSIZES && fits; j++) fits = m[j] <= v[j];
    if (!fits) continue;
    for (int j = 0; j < PARVA_NSIZES; j++) v[j] -= m[j];
    int ok = pack(p, v, k - 1);
    for (int j = 0; j < PARVA_NSIZES; j++) v[j] += m[j];
    if (ok) {
      p->chosen[p->k - k] = (uint8_t)b;
      return 1;
    }
  }
  memo_has(p, x, 1);
  return 0;
}

/* The sums of one composition per service, as levels of distinct count
 * vectors (a vector reached twice is kept once, with the first way to it),
 * pruned where the slices already chosen plus the fewest the remaining
 * services need pass what k GPUs hold. */
struct node {
  vec v;
  uint16_t comp;
  uint32_t parent;
};

static int level_has(uint64_t *set, size_t mask, uint64_t x) {
  size_t i = (size_t)(x * 0x9E3779B97F4A7C15ull >> 17) & mask;
  for (;; i = (i + 1) & mask) {
    if (set[i] == x) return 1;
    if (!set[i]) {
      set[i] = x;
      return 0;
    }
  }
}

#define LEVEL_MAX (1u << 20)

static int choose(struct proof *p, const unsigned *rest_min) {
  struct node **lv = calloc(p->nsvc + 1, sizeof *lv);
  size_t *n = calloc(p->nsvc + 1, sizeof *n);
  uint64_t *set = malloc((size_t)2 * LEVEL_MAX * sizeof *set);
  int rc = lv && n && set ? 0 : -1;
  if (!rc) lv[0] = calloc(1, sizeof **lv);
  if (!rc && !lv[0]) rc = -1;
  if (!rc) n[0] = 1;
  for (unsigned i = 0; i < p->nsvc && !rc; i++) {
    memset(set, 0, (size_t)2 * LEVEL_MAX * sizeof *set);
    size_t cap = 0;
    for (size_t j = 0; j < n[i] && !rc; j++)
      for (unsigned c = 0; c < p->ncomp[i] && !rc; c++) {
        struct node x = {.comp = (uint16_t)c, .parent = (uint32_t)j};
        for (int z = 0; z < PARVA_NSIZES; z++) x.v[z] = (uint8_t)(lv[i][j].v[z] + p->comp[i][c][z]);
        if (slices(x.v) + rest_min[i + 1] > STK_MIG_COMPUTE_SLICES * p->k) continue;
        if (level_has(set, (size_t)2 * LEVEL_MAX - 1, key(x.v, 0))) continue;
        if (n[i + 1] == cap) {
          struct node *t = cap < LEVEL_MAX ? realloc(lv[i + 1], (cap ? cap * 2 : 64) * sizeof *t)
                                           : NULL;
          if (!t) {
            rc = -1; /* too many sums to search, or no memory: not proven */
            break;
          }
          lv[i + 1] = t;
          cap = cap ? cap * 2 : 64;
        }
        lv[i + 1][n[i + 1]++] = x;
      }
  }
  for (size_t j = 0; !rc && j < n[p->nsvc] && !p->found; j++) {
    vec w;
    memcpy(w, lv[p->nsvc][j].v, sizeof w);
    if (!pack(p, w, p->k)) continue;
    p->found = 1;
    for (unsigned i = p->nsvc, at = (unsigned)j; i > 0; i--) {
      p->pick[i - 1] = lv[i][at].comp;
      at = lv[i][at].parent;
    }
  }
  for (unsigned i = 0; lv && i <= p->nsvc; i++) free(lv[i]);
  free(lv);
  free(n);
  free(set);
  return rc;
}

int stk__parva_fits(const struct parva_svc *svc, unsigned nsvc, unsigned k,
                    uint8_t (*comp_out)[PARVA_NSIZES], uint8_t (*gpu_out)[PARVA_NSIZES]) {
  if (nsvc > 256 || k > 4096) return -1;
  struct proof p = {.nsvc = nsvc, .k = k};
  p.comp = calloc(nsvc ? nsvc : 1, sizeof *p.comp);
  p.ncomp = calloc(nsvc ? nsvc : 1, sizeof *p.ncomp);
  p.memo = calloc((size_t)1 << MEMO_BITS, sizeof *p.memo);
  int rc = p.comp && p.ncomp && p.memo ? 0 : -1;
  unsigned need = 0;
  for (unsigned i = 0; i < nsvc && !rc; i++) need += stk__parva_min_slices(&svc[i]);
  for (unsigned i = 0; i < nsvc && !rc; i++) {
    unsigned own = stk__parva_min_slices(&svc[i]);
    if (need > STK_MIG_COMPUTE_SLICES * k) break; /* found stays 0 */
    rc = compositions(&svc[i], own + STK_MIG_COMPUTE_SLICES * k - need, p.comp[i], &p.ncomp[i]);
  }
  for (unsigned a = 0; a <= 1; a++)
    for (unsigned b = 0; a * 7 + b * 4 <= 7; b++)
      for (unsigned c = 0; a * 7 + b * 4 + c * 3 <= 7; c++)
        for (unsigned d = 0; a * 7 + b * 4 + c * 3 + d * 2 <= 7; d++)
          for (unsigned e = 0; a * 7 + b * 4 + c * 3 + d * 2 + e <= 7; e++) {
            if (c == 2 && a + b + d + e) continue; /* two 3g fill their halves */
            if (a + b + c + d + e == 0) continue;
            uint8_t *m = p.bins[p.nbins++];
            m[0] = (uint8_t)e, m[1] = (uint8_t)d, m[2] = (uint8_t)c, m[3] = (uint8_t)b,
            m[4] = (uint8_t)a;
          }
  unsigned rest_min[257] = {0};
  for (unsigned i = nsvc; i-- > 0;) rest_min[i] = rest_min[i + 1] + stk__parva_min_slices(&svc[i]);
  if (!rc && need <= STK_MIG_COMPUTE_SLICES * k) rc = choose(&p, rest_min);
  if (!rc && need <= STK_MIG_COMPUTE_SLICES * k) {
    if (p.found) {
      for (unsigned i = 0; i < nsvc; i++) memcpy(comp_out[i], p.comp[i][p.pick[i]], PARVA_NSIZES);
      /* GPUs past the last chosen one stay empty */
      unsigned used = 0, left = 0;
      for (unsigned i = 0; i < nsvc; i++) left += slices(comp_out[i]);
      for (; left && used < k; used++) {
        memcpy(gpu_out[used], p.bins[p.chosen[used]], PARVA_NSIZES);
        left -= slices(gpu_out[used]);
      }
      for (; used < k; used++) memset(gpu_out[used], 0, PARVA_NSIZES);
    }
  }
  free(p.comp);
  free(p.ncomp);
  free(p.memo);
  return rc ? -1 : p.found;
}
