/* Internals shared by the files of src/bench. */
#ifndef STOKER_BENCH_IMPL_H
#define STOKER_BENCH_IMPL_H

#include "stoker/bench.h"

/* Fill r->verdict and r->bottleneck from the run's figures and the
 * loader's stage stats. */
void stk__bench_verdict(const struct stk_bench_opts *o, struct stk_bench_result *r);

#endif
