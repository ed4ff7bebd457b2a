/* Internals of the loader shared by pipeline.c and stats.c. */
#ifndef STOKER_LOADER_IMPL_H
#define STOKER_LOADER_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "../format/format_impl.h"
#include "../io/io.h"
#include "decode.h"
#include "stoker/loader.h"

/* Per-batch consumer wait histogram: log-linear buckets, about 3% wide,
 * from 1 µs to hours, so p50/p99 cost fixed memory however long the run. */
#define STK_HIST_SUB 32
#define STK_HIST_GROUPS 40
struct stk_hist {
  uint64_t count;
  uint64_t max;
  uint64_t b[STK_HIST_GROUPS * STK_HIST_SUB];
};
void stk__hist_add(struct stk_hist *h, uint64_t ns);
uint64_t stk__hist_quantile(const struct stk_hist *h, double q);

/* Stage counters, updated by many threads with relaxed atomics. */
struct stage_ctr {
  _Atomic uint64_t busy_ns, wait_in_ns, wait_out_ns, items, bytes;
  uint32_t threads;
};

#endif
