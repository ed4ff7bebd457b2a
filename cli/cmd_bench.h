/* Shared by the files of stoker bench: cmd_bench.c (options, output,
 * the command) and cmd_bench_data.c (the dataset and the page cache). */
#ifndef STOKER_CMD_BENCH_H
#define STOKER_CMD_BENCH_H

#include <stdint.h>

#include "stoker/bench.h"

struct bench_args {
  struct stk_bench_opts o; /* o.w points at w */
  struct stk_workload w;
  struct stk_bench_mpi *mpi; /* NULL: one process */
  char who[48];              /* "bench", or "bench: rank R of N" under MPI */
  const char *config, *workload, *accel, *json, *svg, *network;
  char data[4096];
  struct stk_cache_opts cache;
  int data_given, find_max, quiet, drop_caches;
  int ckpt_on, ckpt_off;
  int64_t ckpt_writes, ckpt_reads;
  double ckpt_interval;
  uint64_t allreduce_bytes;
  /* overrides, applied after preset and config; -1 / NAN = not given */
  int64_t accelerators, files, spf, batch, epochs, read_threads;
  double record, record_sd, compute, compute_sd, au;
};

/* The dataset under a->data, generated when missing and may_generate (the
 * process that writes it); 0, or -1 after saying why. */
int bench_prepare_data(struct bench_args *a, int may_generate);
/* Warn when the data would fit the page cache (not with --direct). */
void bench_page_cache_warning(const struct bench_args *a);
/* --drop-caches: 0, or -1 after saying why. */
int bench_drop_caches(void);

#endif
