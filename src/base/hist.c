/* A latency histogram with log-linear buckets (see base.h). */
#include "base.h"

/* Bucket of ns: group g holds [2^(g+9), 2^(g+10)) ns split into SUB parts;
 * group 0 also takes everything below 1 µs. */
static size_t bucket(uint64_t ns) {
  if (ns < 1024) return 0;
  int lg = 63 - __builtin_clzll(ns); /* >= 10 */
  int g = lg - 9;
  if (g >= STK_HIST_GROUPS) return STK_HIST_GROUPS * STK_HIST_SUB - 1;
  uint64_t sub = (ns >> (lg - 5)) & (STK_HIST_SUB - 1);
  return (size_t)g * STK_HIST_SUB + sub;
}

static uint64_t bucket_mid(size_t i) {
  if (i == 0) return 512;
  size_t g = i / STK_HIST_SUB, sub = i % STK_HIST_SUB;
  int lg = (int)g + 9;
  uint64_t lo = (1ull << lg) + ((uint64_t)sub << (lg - 5));
  return lo + (1ull << (lg - 6));
}

void stk__hist_add(struct stk_hist *h, uint64_t ns) {
  h->b[bucket(ns)]++;
  h->count++;
  if (ns > h->max) h->max = ns;
}

uint64_t stk__hist_quantile(const struct stk_hist *h, double q) {
  if (!h->count) return 0;
  uint64_t rank = (uint64_t)(q * (double)(h->count - 1)) + 1, seen = 0;
  for (size_t i = 0; i < STK_HIST_GROUPS * STK_HIST_SUB; i++) {
    seen += h->b[i];
    if (seen >= rank) return STK__MIN(bucket_mid(i), h->max);
  }
  return h->max;
}
