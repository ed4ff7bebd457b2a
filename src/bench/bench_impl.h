/* Internals shared by the files of src/bench. */
#ifndef STOKER_BENCH_IMPL_H
#define STOKER_BENCH_IMPL_H

#include "stoker/bench.h"

/* Fill r->verdict and r->bottleneck from the run's figures and the
 * loader's stage stats. */
void stk__bench_verdict(struct stk_bench_result *r);

/* Fill AU, throughput and the time split of r from r->per ([epochs]
 * [accelerators]); used after a run and after gathering runs (MPI). */
void stk__bench_aggregate(const struct stk_bench_opts *o, struct stk_bench_result *r);

#endif
