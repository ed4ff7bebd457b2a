/* Internals shared by the files of src/bench. */
#ifndef STOKER_BENCH_IMPL_H
#define STOKER_BENCH_IMPL_H

#include "stoker/bench.h"

/* Fill r->verdict and r->bottleneck from the run's figures and the
 * loader's stage stats. */
void stk__bench_verdict(struct stk_bench_result *r);
/* How many batches the warm-up waits for: the ring's depth and the two
 * beyond it, but no more than fit the loader's memory cap with every batch
 * at its largest (batch_bytes), so that the wait can always end. At least 1. */
uint32_t stk__bench_fill(uint32_t prefetch, uint64_t mem_cap, double batch_bytes);

/* Fill AU, throughput and the time split of r from r->per ([epochs]
 * [accelerators]); used after a run and after gathering runs (MPI). */
void stk__bench_aggregate(const struct stk_bench_opts *o, struct stk_bench_result *r);

/* /proc figures at one moment: the machine's CPU time (ticks of all CPUs)
 * and this process's device reads. root is "/proc" (tests pass a folder
 * with stat and self/io of their own). A file that cannot be read leaves
 * its *_ok at 0. */
struct stk__host_snap {
  int cpu_ok, io_ok;
  uint64_t busy_ticks, steal_ticks; /* summed over the "cpu" line's fields */
  uint64_t read_bytes;              /* self/io read_bytes */
};
void stk__bench_host_snap(const char *root, struct stk__host_snap *s);
/* The run's figures from two snapshots (cores: online CPUs). */
void stk__bench_host_delta(const struct stk__host_snap *a, const struct stk__host_snap *b,
                           uint32_t cores, struct stk_bench_host *h);

#endif
