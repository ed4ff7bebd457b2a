/* stoker bench: emulated accelerators fed by the real loader, measured with
 * DLIO's accelerator-utilization (AU) metric, plus a verdict on what stalls
 * them. Each accelerator, each step: take a batch (its load time), compute
 * for the workload's time (a sleep), wait at a barrier with every other
 * accelerator (the emulated all-reduce), optionally spend a modelled
 * all-reduce time. */
#ifndef STOKER_BENCH_H
#define STOKER_BENCH_H

#include <stdint.h>
#include <stdio.h>

#include "stoker/loader.h"
#include "stoker/util.h"
#include "stoker/workload.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- DLIO workload configs ---------------------------------------------- */

/* Read a DLIO workload YAML file into *w (starting from w's current values,
 * so a preset can be the base). Keys stoker does not know are appended to
 * `unknown` (one "section.key (line N)" per line, NUL-terminated, at most
 * cap bytes); keys it knows but does not emulate (checkpoint, ...) go to
 * `ignored` the same way. Returns 0, or STK_EFORMAT / STK_ENOENT / STK_ERANGE
 * with err naming the file, line and key. */
int stk_workload_load_yaml(const char *path, struct stk_workload *w, char *unknown,
                           size_t unknown_cap, char *ignored, size_t ignored_cap, char *err);

/* ---- the all-reduce model ----------------------------------------------- */

/* Ring all-reduce time for p participants: 2(p-1)/p x bytes / bus_bw +
 * 2(p-1) x alpha. */
struct stk_network {
  const char *name;
  double bus_bytes_per_s;
  double alpha_s;
};
/* Presets "nvlink4", "ib400", "roce100"; STK_ENOENT otherwise. */
int stk_network_preset(const char *name, struct stk_network *out);
double stk_allreduce_seconds(const struct stk_network *n, uint32_t p, double bytes);

/* ---- a run ---------------------------------------------------------------- */

enum stk_compute_dist { STK_COMPUTE_CONSTANT = 0, STK_COMPUTE_NORMAL, STK_COMPUTE_UNIFORM };

struct stk_bench_opts {
  struct stk_workload w;
  const char *data;          /* dataset directory (must exist) */
  uint32_t accelerators;     /* emulated in this process; 0 = 1 */
  uint32_t rank, world;      /* this process among `world` (MPI); world 0 = 1 */
  int compute_dist;          /* enum stk_compute_dist (stdev from w.compute_stdev) */
  int busy_compute;          /* spin instead of sleeping (costs a core each) */
  double allreduce_s;        /* modelled all-reduce time per step (0 = none) */
  uint32_t read_threads;     /* loader decode workers; 0 = w.read_threads */
  int direct;                /* O_DIRECT reads */
  int skip_verify;
  const char *io_engine;
  uint64_t seed;
  volatile int *cancel;      /* set nonzero to stop; the partial result stays valid */
  /* Across processes (MPI): a barrier over all `world` processes, called by
   * one thread per process after the local barrier; returns nonzero when a
   * peer failed. NULL in a single process. */
  int (*global_barrier)(void *ctx);
  void *global_ctx;
  /* Called about every 250 ms from the first accelerator's thread. */
  void (*progress)(void *ctx, uint64_t epoch, uint64_t step, uint64_t steps, double au_so_far);
  void *progress_ctx;
};

/* One accelerator's epoch. */
struct stk_bench_epoch {
  double au;            /* 0..1, DLIO's definition */
  double samples_per_s; /* this accelerator, excluding the first step */
  double wall_s;
  double compute_s;     /* excluding the first step (the AU numerator) */
  double compute_all_s; /* including it (for the time split) */
  double load_s, sync_s, comm_s;
  uint64_t steps;
};

/* A step on the timeline (for the chart). */
struct stk_bench_step {
  float t_end;   /* seconds since start */
  float load_s, compute_s, sync_s;
  uint16_t acc;
  uint16_t epoch;
};

struct stk_bench_result {
  uint32_t accelerators, epochs;
  uint64_t steps_per_epoch;
  double au;              /* mean over accelerators and epochs, 0..1 */
  double au_min;
  int pass;
  double samples_per_s;   /* all accelerators, mean over epochs */
  double mib_per_s;       /* samples_per_s x record bytes */
  double wall_s;
  double data_stall_frac, sync_stall_frac, comm_frac, compute_frac; /* of accelerator time */
  struct stk_bench_epoch *per; /* [epochs][accelerators], owned */
  struct stk_bench_step *timeline; /* steps, owned */
  uint64_t ntimeline;
  struct stk_loader_stats loader;
  uint64_t cpu_ns;        /* process CPU time over the run */
  int interrupted;
  char verdict[512];      /* one line: "fed: ...", "storage-bound: ...", ... */
  char bottleneck[16];    /* "none", "storage", "decode", "batch", "ring", "sync", "cpu" */
};

/* Run the emulation. Returns 0 (also when interrupted: r->interrupted), or
 * a code with err set (invalid values, dataset too small for one batch per
 * accelerator, a loader failure naming file and offset). Free r with
 * stk_bench_result_free(). */
int stk_bench_run(const struct stk_bench_opts *o, struct stk_bench_result *r, char *err);
void stk_bench_result_free(struct stk_bench_result *r);

/* Reports. */
void stk_bench_json(const struct stk_bench_opts *o, const struct stk_bench_result *r, FILE *f);
void stk_bench_svg(const struct stk_bench_opts *o, const struct stk_bench_result *r, FILE *f);

#ifdef __cplusplus
}
#endif
#endif
