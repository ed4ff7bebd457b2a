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
STK_EXPORT int stk_workload_load_yaml(const char *path, struct stk_workload *w, char *unknown,
                           size_t unknown_cap, char *ignored, size_t ignored_cap, char *err);

/* ---- checkpoints: DLIO's sizes ------------------------------------------- */

/* One file of one rank's checkpoint, named as DLIO names it inside the
 * checkpoint's folder ("model_0_model_states.pt"). */
struct stk_ckpt_file {
  char name[96];
  uint64_t bytes; /* tensor bytes, as DLIO sizes them (torch.save adds a few KiB) */
};

/* The files rank `rank` of `ranks` (DLIO's MPI ranks; here, emulated
 * accelerators across processes) writes per checkpoint of workload w, by
 * DLIO's arithmetic (src/bench/ckpt_size.c): a transformer's layers split
 * over pipeline stages and tensor ranks, optimizer state over data-parallel
 * ranks with ZeRO, or a model_size-byte state for other models. Up to cap
 * files go to out; *n is the rank's count (a rank that writes nothing has
 * 0). STK_EINVAL with err set when ranks is not a multiple of tensor x
 * pipeline parallelism or the shape is inconsistent; STK_ERANGE when sizes
 * overflow or cap is too small (*n says how many are needed). */
STK_EXPORT int stk_ckpt_rank_files(const struct stk_workload *w, uint32_t ranks, uint32_t rank,
                                   struct stk_ckpt_file *out, size_t cap, size_t *n, char *err);
/* Totals over all ranks: bytes and files per checkpoint, and the ranks that
 * write something. Errors as above. */
STK_EXPORT int stk_ckpt_size(const struct stk_workload *w, uint32_t ranks, uint64_t *bytes,
                             uint64_t *files, uint32_t *writers, char *err);
/* Tensor x pipeline parallelism (1 without a transformer): the fewest
 * ranks a checkpoint needs (data parallelism 1). */
STK_EXPORT uint32_t stk_ckpt_model_parallel(const struct stk_workload *w);

/* ---- the all-reduce model ----------------------------------------------- */

/* Ring all-reduce time for p participants: 2(p-1)/p x bytes / bus_bw +
 * 2(p-1) x alpha. */
struct stk_network {
  const char *name;
  double bus_bytes_per_s;
  double alpha_s;
};
/* Presets "nvlink4", "ib400", "roce100"; STK_ENOENT otherwise. */
STK_EXPORT int stk_network_preset(const char *name, struct stk_network *out);
STK_EXPORT double stk_allreduce_seconds(const struct stk_network *n, uint32_t p, double bytes);

/* ---- a run ---------------------------------------------------------------- */

enum stk_compute_dist { STK_COMPUTE_CONSTANT = 0, STK_COMPUTE_NORMAL, STK_COMPUTE_UNIFORM };

/* Set with stk_bench_opts_init(): the library reads only struct_size bytes
 * (later fields take their defaults) and refuses a larger struct, naming
 * it (docs/internals/api.md). */
struct stk_bench_opts {
  size_t struct_size; /* set by stk_bench_opts_init(); 0 = this header's */
  /* The workload, its own sized struct (never embedded: a field added to
   * it would move every option after it); read by the run and the
   * reports, so it must live until they return. */
  const struct stk_workload *w;
  const char *data;          /* dataset directory (must exist), or a URL */
  const struct stk_cache_opts *cache; /* cache tiers for a URL; NULL = defaults */
  uint32_t accelerators;     /* emulated in this process; 0 = 1 */
  uint32_t rank, world;      /* this process among `world` (MPI); world 0 = 1 */
  int compute_dist;          /* enum stk_compute_dist (stdev from w.compute_stdev) */
  int busy_compute;          /* spin instead of sleeping (costs a core each) */
  double allreduce_s;        /* modelled all-reduce time per step (0 = none) */
  uint32_t read_threads;     /* loader decode workers; 0 = w.read_threads */
  int direct;                /* O_DIRECT reads (and checkpoint writes and reads) */
  /* Checkpoints (w.ckpt.enabled): where they go (NULL: w.ckpt.folder, or
   * "checkpoints"), and the share of DLIO's size written (0 = 1: all of
   * it; 0.001 lets a llama config run on a small disk). Files are removed
   * after the run unless keep_checkpoints. */
  const char *ckpt_dir;
  double ckpt_scale;
  int keep_checkpoints;
  int skip_verify;
  const char *io_engine;
  uint64_t seed;
  volatile int *cancel;      /* set nonzero to stop; the partial result stays valid */
  /* Across processes (MPI): a barrier over all `world` processes that also
   * carries each one's status. Called by one thread per process after the
   * local barrier of every step with status 0; and, by a process that stops
   * before its last step (a failure: the error code; Ctrl-C: STK_ECANCELED),
   * once more with that status, unless an earlier call already reported a
   * stop, so that no peer waits for it forever. Every process therefore
   * makes the same number of calls, which is why all must run the same
   * workload (steps are computed from files x samples per file when world
   * > 1). Returns 0 to go on, STK_ECANCELED when a peer was interrupted,
   * another code when a peer failed. NULL in a single process; see
   * stk_bench_mpi_attach(). */
  int (*global_barrier)(void *ctx, int status);
  void *global_ctx;
  /* Called about every 250 ms from the first accelerator's thread. */
  void (*progress)(void *ctx, uint64_t epoch, uint64_t step, uint64_t steps, double au_so_far);
  void *progress_ctx;
  /* How checkpoints are written and read (enum stk_ckpt_io). */
  int ckpt_io;
  /* Of `world`, the processes on this host, which share its memory (set
   * by stk_bench_mpi_attach; 0 = 1). The torch mode holds each one's
   * state, so its memory check counts them all. 64 bits so that it starts
   * past the struct's earlier end: a 32-bit field would sit in the tail
   * padding after ckpt_io, which an older program's struct_size counts. */
  uint64_t host_procs;
};

/* STK_CKPT_IO_TIER: stoker's writer (large aligned chunks from one buffer
 * per thread, the ranks of a process at once): what the storage can do
 * with a good writer. STK_CKPT_IO_TORCH: what DLIO's PyTorch backend does
 * (torch.save through a Python file): per file, the tensors in the state's
 * order, each CRC32'd (torch's zip writer) and written in one write() from
 * its own memory (the rank's whole state is held, as DLIO holds it),
 * tensors smaller than 8 KiB gathered into an 8 KiB buffer; loads read
 * each tensor in one read() into new memory. Same bytes as the tier
 * (torch's zip headers are left out). */
enum stk_ckpt_io { STK_CKPT_IO_TIER = 0, STK_CKPT_IO_TORCH = 1 };
#define stk_bench_opts_init(o) stk_bench_opts_init_sized((o), sizeof *(o))
STK_EXPORT void stk_bench_opts_init_sized(struct stk_bench_opts *o, size_t size);

/* One accelerator's epoch. */
struct stk_bench_epoch {
  double au;            /* 0..1, DLIO's definition */
  double samples_per_s; /* this accelerator, excluding the first step */
  double wall_s;
  double compute_s;     /* excluding the first step (the AU numerator) */
  double compute_all_s; /* including it (for the time split) */
  double load_s, sync_s, comm_s;
  double sync_jitter_s; /* the part of sync_s that compute jitter explains
                           (max c - own c each step); the rest waited on a
                           peer's late batch or on the emulator */
  double sync_wake_s;   /* the part of sync_s the emulator's driver woke late
                           after the last compute ended (scheduler latency or
                           a core taken by another process) */
  double first_step_s;  /* load + compute of step 0, left out of AU */
  double ckpt_s;        /* stood still while checkpoints were written or read (in wall_s,
                           and so in AU: see docs/bench.md on DLIO's difference) */
  uint64_t steps;
};

/* What the rest of the machine did during the run, read from /proc before
 * and after it, so the verdict can tell a pipeline that is too slow from
 * one that was not given the CPU, and data read from a device from data
 * read from the page cache. A figure that could not be read is marked
 * invalid, never taken as 0. */
struct stk_bench_host {
  uint32_t cores;           /* online CPUs */
  int cpu_valid;            /* /proc/stat was read at both ends */
  double busy_cpu_s;        /* CPU-seconds all processes ran (user, system, irq; not idle,
                               iowait or steal) */
  double steal_cpu_s;       /* CPU-seconds the hypervisor gave our vCPUs to other guests */
  int io_valid;             /* /proc/self/io was read at both ends */
  uint64_t device_read_bytes; /* bytes this process caused to be read from a block device */
};

/* A step on the timeline (for the chart). */
struct stk_bench_step {
  float t_end;   /* seconds since start */
  float load_s, compute_s, sync_s;
  uint16_t acc;
  uint16_t epoch;
};

/* Checkpoints of the run: DLIO's sizes, what this process wrote and read,
 * and how long it took. Bandwidths are bytes over the wall time of the
 * saves (or loads) of all this process's ranks together. */
struct stk_bench_ckpt {
  uint32_t ranks;        /* DLIO ranks of the job: accelerators x processes */
  uint32_t writers;      /* of this process's ranks, those that write a share */
  uint64_t dlio_bytes;   /* per checkpoint, all ranks, DLIO's size for this config */
  uint64_t files;        /* per checkpoint, all ranks */
  uint64_t bytes;        /* per checkpoint, written by this process (after the scale) */
  double scale;
  uint32_t saves, loads; /* completed */
  double save_s, load_s; /* summed over saves / loads */
  double save_max_s, load_max_s;
  int fsync, direct;
  char dir[1024];
  int io; /* enum stk_ckpt_io */
};

struct stk_bench_result {
  uint32_t accelerators, epochs; /* accelerators: all that `per` covers */
  uint32_t processes, hosts; /* 1 and 1 from stk_bench_run (this process's own accelerators,
                              * even under MPI); the job's after stk_bench_mpi_gather */
  uint64_t steps_per_epoch;
  double au;              /* mean over accelerators and epochs, 0..1 */
  double au_min;
  int pass;
  double samples_per_s;   /* all accelerators, mean over epochs */
  double mib_per_s;       /* samples_per_s x the mean bytes of a delivered sample */
  int throughput_only;    /* compute time 0: AU is undefined (NAN), pass 0, and the verdict
                             reports the loader's throughput */
  double wall_s;
  double data_stall_frac, sync_stall_frac, comm_frac, compute_frac; /* of accelerator time */
  double ckpt_frac;       /* accelerator time lost to checkpoints (a stall class) */
  struct stk_bench_ckpt ckpt; /* ckpt.saves + ckpt.loads 0: none */
  int ckpt_only;          /* a checkpoint-only workload (workflow.train False): no data read */
  double sync_jitter_frac; /* the part of sync_stall_frac due to compute jitter */
  double sync_wake_frac;   /* the part due to the driver's late wake-ups */
  struct stk_bench_epoch *per; /* [epochs][accelerators], owned */
  struct stk_bench_step *timeline; /* steps, owned */
  uint64_t ntimeline;
  struct stk_loader_stats loader;
  uint64_t cpu_ns;        /* process CPU time over the run */
  /* Warm-up: before the first epoch's clock starts, the loader fills its
   * ring (the batches it prepares before any is taken: 2N + 2). That fill
   * allocates and first touches every batch buffer, a one-time cost that a
   * long training run amortizes; it is reported here, not in AU. */
  double warmup_s;
  uint32_t warmup_batches;
  struct stk_bench_host host; /* the machine during the run (the verdict's input) */
  int interrupted;
  char verdict[512];      /* one line: "fed: ...", "storage-bound: ...", ... */
  char bottleneck[16];    /* "none", "wakeup", "sync", "contention", "decode", "storage",
                             "read", "cpu", "latency" (docs/bench.md) */
  char engine[16];        /* the loader's I/O engine */
};

/* A checkpoint-only workload (w.ckpt.no_train): per DLIO, num_write saves
 * each after time_between_s of compute, then num_read loads of them, by
 * every emulated accelerator (rank) at once, each its own share. AU is the
 * compute over the wall time; r->ckpt holds the bandwidths. No dataset is
 * read. Returns 0 or a code with err set (a folder that cannot be written,
 * a rank count the model's parallelism does not divide). */
STK_EXPORT int stk_bench_ckpt_run(const struct stk_bench_opts *o, struct stk_bench_result *r, char *err);

/* Run the emulation. Returns 0 (also when interrupted: r->interrupted), or
 * a code with err set (invalid values, dataset too small for one batch per
 * accelerator, a loader failure naming file and offset). Free r with
 * stk_bench_result_free(). */
STK_EXPORT int stk_bench_run(const struct stk_bench_opts *o, struct stk_bench_result *r, char *err);
STK_EXPORT void stk_bench_result_free(struct stk_bench_result *r);

/* ---- across processes and hosts (MPI) ------------------------------------ */

/* One emulation per MPI process (rank), joined by the global barrier above
 * and gathered into one result on rank 0. Available when stoker is built
 * with Open MPI; otherwise stk_bench_mpi_init() fails with STK_ENOTSUP and
 * says so. Every call below except built/launched/init is collective: all
 * processes make it, in the same order. */
struct stk_bench_mpi;

/* Whether this build has MPI. */
STK_EXPORT int stk_bench_mpi_built(void);
/* Whether mpirun started this process as one of several (Open MPI sets
 * OMPI_COMM_WORLD_SIZE); true in builds without MPI too, so they can refuse. */
STK_EXPORT int stk_bench_mpi_launched(void);
/* Join the job (MPI_Init). One per process; free with
 * stk_bench_mpi_finalize(). STK_ENOTSUP with err set in a build without MPI. */
STK_EXPORT int stk_bench_mpi_init(struct stk_bench_mpi **out, char *err);
STK_EXPORT void stk_bench_mpi_finalize(struct stk_bench_mpi *m);
STK_EXPORT uint32_t stk_bench_mpi_rank(const struct stk_bench_mpi *m);
STK_EXPORT uint32_t stk_bench_mpi_size(const struct stk_bench_mpi *m);
/* Whether this is the lowest rank on its host (it prepares node-local data). */
STK_EXPORT int stk_bench_mpi_host_leader(const struct stk_bench_mpi *m);
/* The rank whose failure stopped the job, or -1: this process's own rank
 * when it failed itself, else the highest that failed. */
STK_EXPORT int stk_bench_mpi_failed_rank(const struct stk_bench_mpi *m);

/* Set o->rank, o->world and the global barrier for this job. Returns 0, or
 * STK_EINVAL with err set when o's struct_size cannot hold those fields or
 * is larger than this library's struct (o is then left as it was). */
STK_EXPORT int stk_bench_mpi_attach(struct stk_bench_mpi *m, struct stk_bench_opts *o, char *err);

/* A check point: every process passes its status (0, STK_ECANCELED, or an
 * error code) and a fingerprint of what must be the same everywhere (the
 * workload's shape). Returns 0 when all are fine and agree; else the same
 * code on every process, with err naming the rank: STK_EIO (a process
 * failed), STK_ECANCELED (one was interrupted), STK_EINVAL (fingerprints
 * differ). */
STK_EXPORT int stk_bench_mpi_agree(struct stk_bench_mpi *m, int status, uint64_t fingerprint, char *err);

/* After every process's stk_bench_run succeeded (check with
 * stk_bench_mpi_agree first): on rank 0, r becomes the job's result:
 * per-epoch figures of all size x accelerators (rank r's accelerator a is
 * number r x accelerators + a), the timeline of all (capped), loader stats
 * summed (maxima and percentiles: the largest), CPU time summed, wall time
 * the longest; then AU, time split and verdict are recomputed. Other ranks'
 * r is left as it was. o is read no further than its struct_size. Returns
 * 0, or the same code on every process with err set (shapes differ, out of
 * memory on rank 0, a bad struct_size on any). */
STK_EXPORT int stk_bench_mpi_gather(struct stk_bench_mpi *m, const struct stk_bench_opts *o,
                         struct stk_bench_result *r, char *err);

/* Reports. A gathered result (r->processes > 1) covers the whole job; one
 * process's own result is reported as its share (o->rank of o->world). */
STK_EXPORT void stk_bench_json(const struct stk_bench_opts *o, const struct stk_bench_result *r, FILE *f);
STK_EXPORT void stk_bench_svg(const struct stk_bench_opts *o, const struct stk_bench_result *r, FILE *f);

#ifdef __cplusplus
}
#endif
#endif
