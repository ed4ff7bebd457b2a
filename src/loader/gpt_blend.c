/* Megatron-LM's BlendedDataset in C: which source each blended sample comes
 * from and which of that source's samples it is (helpers.cpp's
 * build_blending_indices and build_exhaustive_blending_indices), and the
 * sizes BlendedMegatronDatasetBuilder asks of each source. The choice is
 * not random: each sample goes to the source furthest behind its weight,
 * so the same weights and size always give the same order. Contracts in
 * gpt_index.h. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../base/base.h"
#include "gpt_index.h"

#define MAX_SOURCES 32766 /* Megatron asserts fewer than 32767 datasets (int16 ids) */

/* NumPy's float64 sum of a contiguous array: plain below 8 elements,
 * eight interleaved accumulators up to 128, halves (cut at a multiple of
 * 8) beyond. Same order of additions, so the same rounding. */
static double numpy_sum(const double *a, int64_t n) {
  if (n < 8) {
    double s = 0.;
    for (int64_t i = 0; i < n; i++) s += a[i];
    return s;
  }
  if (n <= 128) {
    double r[8];
    for (int j = 0; j < 8; j++) r[j] = a[j];
    int64_t i;
    for (i = 8; i < n - (n % 8); i += 8)
      for (int j = 0; j < 8; j++) r[j] += a[i + j];
    double s = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; i++) s += a[i];
    return s;
  }
  int64_t h = n / 2;
  h -= h % 8;
  return numpy_sum(a, h) + numpy_sum(a + h, n - h);
}

static int check_sources(int n, char *err) {
  if (n < 1) return stk__errf(err, STK_EINVAL, "a blend needs at least one source (got %d)", n);
  if (n > MAX_SOURCES)
    return stk__errf(err, STK_ERANGE, "a blend has at most %d sources (got %d)", MAX_SOURCES, n);
  return 0;
}

static int check_weights(const double *w, int n, char *err) {
  int rc = check_sources(n, err);
  if (rc) return rc;
  if (!w) return stk__errf(err, STK_EINVAL, "no blend weights");
  for (int i = 0; i < n; i++)
    if (!isfinite(w[i]) || !(w[i] > 0))
      return stk__errf(err, STK_EINVAL,
                       "blend weight %d is %g; weights must be finite and positive", i, w[i]);
  return 0;
}

int stk__gpt_blend_normalize(const double *w, int n, double *out, char *err) {
  int rc = check_weights(w, n, err);
  if (rc) return rc;
  double sum = 0. + numpy_sum(w, n);
  if (!isfinite(sum)) return stk__errf(err, STK_ERANGE, "the blend weights sum to %g", sum);
  for (int i = 0; i < n; i++) out[i] = w[i] / sum;
  return 0;
}

int stk__gpt_blend_build(const double *weights, int n, uint64_t size, int16_t *dataset_index,
                         int64_t *dataset_sample_index, uint64_t *counts, char *err) {
  int rc = check_weights(weights, n, err);
  if (rc) return rc;
  if (size > (uint64_t)INT64_MAX)
    return stk__errf(err, STK_ERANGE, "a blend of %" PRIu64 " samples is too large", size);
  if (size && (!dataset_index || !dataset_sample_index))
    return stk__errf(err, STK_EINVAL, "no arrays for the blend indices");
  int64_t *taken = calloc((size_t)(unsigned)n, sizeof *taken);
  if (!taken) return stk__errf(err, STK_ENOMEM, "blend counts for %d sources", n);
  for (uint64_t i = 0; i < size; i++) {
    /* Megatron measures the lag at max(i, 1), so sample 0 and 1 see the
     * same targets. */
    double at = i > 1 ? (double)i : 1.0;
    int best = 0;
    double lag = weights[0] * at - (double)taken[0];
    for (int s = 1; s < n; s++) {
      double e = weights[s] * at - (double)taken[s];
      if (e > lag) lag = e, best = s;
    }
    dataset_index[i] = (int16_t)best;
    dataset_sample_index[i] = taken[best]++;
  }
  if (counts)
    for (int s = 0; s < n; s++) counts[s] = (uint64_t)taken[s];
  free(taken);
  return 0;
}

int stk__gpt_blend_build_exhaustive(const int64_t *sizes, int n, int16_t *dataset_index,
                                    int64_t *dataset_sample_index, char *err) {
  int rc = check_sources(n, err);
  if (rc) return rc;
  int64_t total = 0;
  for (int s = 0; s < n; s++) {
    if (sizes[s] < 1)
      return stk__errf(err, STK_EINVAL, "source %d has %" PRId64 " samples; every source needs one",
                       s, sizes[s]);
    if (sizes[s] > INT64_MAX - total)
      return stk__errf(err, STK_ERANGE, "the sources' sample counts overflow");
    total += sizes[s];
  }
  size_t ns = (size_t)(unsigned)n;
  double *w = malloc(ns * sizeof *w);
  int64_t *taken = calloc(ns, sizeof *taken);
  /* Sources not yet spent, in ascending order (Megatron walks a std::set). */
  int *live = malloc(ns * sizeof *live);
  if (!w || !taken || !live) {
    free(w), free(taken), free(live);
    return stk__errf(err, STK_ENOMEM, "blend state for %d sources", n);
  }
  for (int s = 0; s < n; s++) w[s] = (double)sizes[s] / (double)total, live[s] = s;
  int n_live = n;
  for (int64_t i = 0; n_live > 0; i++) {
    double at = i > 1 ? (double)i : 1.0;
    int best = -1, best_k = -1;
    double lag = -INFINITY;
    for (int k = 0; k < n_live; k++) {
      int s = live[k];
      double e = w[s] * at - (double)taken[s];
      /* -DBL_MAX is Megatron's start; any finite lag beats it, and a lag
       * is finite here, so -INFINITY gives the same choice. */
      if (e > lag || best < 0) lag = e, best = s, best_k = k;
    }
    dataset_index[i] = (int16_t)best;
    dataset_sample_index[i] = taken[best]++;
    if (taken[best] == sizes[best]) {
      memmove(live + best_k, live + best_k + 1, (size_t)(n_live - best_k - 1) * sizeof *live);
      n_live--;
    }
  }
  free(w), free(taken), free(live);
  return 0;
}

int stk__gpt_blend_plan(const double *weights, int n, uint64_t target, double surplus,
                        double *norm_weights, uint64_t *source_samples, uint64_t *blend_size,
                        char *err) {
  if (!isfinite(surplus) || surplus < 0)
    return stk__errf(err, STK_EINVAL, "the blend surplus is %g; it must be finite and >= 0",
                     surplus);
  if (target > (1ull << 53))
    return stk__errf(err, STK_ERANGE, "a blend of %" PRIu64 " samples is too large", target);
  double *once = malloc((size_t)(n > 0 ? n : 1) * sizeof *once);
  if (!once) return stk__errf(err, STK_ENOMEM, "blend weights");
  int rc = stk__gpt_blend_normalize(weights, n, once, err);
  if (rc == 0) rc = stk__gpt_blend_normalize(once, n, norm_weights, err);
  if (rc) {
    free(once);
    return rc;
  }
  uint64_t sum = 0;
  for (int s = 0; s < n; s++) {
    double want = ceil((double)target * once[s]);
    source_samples[s] = (uint64_t)ceil(want * (1.0 + surplus));
    sum += (uint64_t)want;
  }
  free(once);
  *blend_size = sum;
  return 0;
}
