/* stoker bench: emulated accelerators on the real loader, DLIO / MLPerf
 * Storage compatible. With no arguments it runs a small ResNet-50-shaped
 * workload on a dataset it generates once, so a first run needs nothing. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cmd_bench.h"
#include "stoker/bench.h"

const char cmd_bench_usage[] =
    "usage: stoker bench [OPTIONS]\n"
    "\n"
    "Emulate accelerators that train on real data through the loader: each step\n"
    "takes a batch, computes for the workload's time, and waits at a barrier for\n"
    "the others. Reports accelerator utilization (AU) as DLIO computes it,\n"
    "throughput, the split of accelerator time and a verdict on what stalls.\n"
    "With no options: a ResNet-50-shaped workload (h100 compute time) on 4\n"
    "accelerators, over a 16,000-sample dataset generated once under $TMPDIR.\n"
    "\n"
    "workload:\n"
    "  --workload NAME      unet3d, resnet50, cosmoflow (DLIO's values); gpt8b (an 8B\n"
    "                       LLM's token windows of 8193 tokens from a Megatron corpus,\n"
    "                       one per step at NVIDIA's published H100 rate)\n"
    "  --accel A            a100, h100, b200 (unet3d) (default h100)\n"
    "  --config FILE.yaml   a DLIO workload config; unknown keys are reported\n"
    "  --accelerators N     emulated accelerators (default 4)\n"
    "  --files N            files in the dataset    --samples-per-file N\n"
    "  --record-size SIZE   mean sample size        --record-stdev SIZE\n"
    "  --batch N            samples per step        --epochs N\n"
    "  --read-threads N     loader decode workers\n"
    "  --compute-s X        compute time per batch  --compute-stdev X\n"
    "                       (0: no AU, the run measures throughput only)\n"
    "  --compute-dist D     constant, normal, uniform (default constant)\n"
    "  --busy-compute       spin instead of sleeping during compute\n"
    "  --au X               AU threshold (0..1)\n"
    "  --allreduce-bytes SIZE  add a modelled ring all-reduce of SIZE per step\n"
    "  --network NET        nvlink4, ib400, roce100 (default ib400)\n"
    "checkpoints (DLIO's checkpoint section; sizes as DLIO computes them):\n"
    "  --checkpoint         write checkpoints with the workload's settings (unet3d:\n"
    "                       after epoch 5, every 2 epochs, 499 MB); on when a\n"
    "                       config's workflow.checkpoint is True\n"
    "  --no-checkpoint      write none, whatever the config says\n"
    "  --checkpoint-dir DIR where they go (default: the config's checkpoint_folder,\n"
    "                       else ./checkpoints); removed after the run unless\n"
    "  --keep-checkpoints   is given\n"
    "  --checkpoint-scale X write X (0 < X <= 1) of each file's size, so a llama\n"
    "                       config fits this disk; the report gives both sizes\n"
    "  --checkpoint-io tier|torch  how files are written and read. tier (default):\n"
    "                       stoker's writer, large aligned writes, the ranks at\n"
    "                       once: what this storage does with a good writer.\n"
    "                       torch: as DLIO's PyTorch backend (torch.save through\n"
    "                       a Python file): one write per tensor from the state\n"
    "                       held in memory, after its CRC32; what a job calling\n"
    "                       torch.save sees, as DLIO reports it (no --direct)\n"
    "  --checkpoint-writes N  --checkpoint-reads N  --checkpoint-interval S\n"
    "                       checkpoint-only workloads (workflow.train False): saves,\n"
    "                       loads, and the compute seconds before each\n"
    "                       (num_checkpoints_write/read, time_between_checkpoints)\n"
    "                       Ranks are the emulated accelerators (default: tensor x\n"
    "                       pipeline parallelism, one data-parallel copy)\n"
    "data:\n"
    "  --data DIR|URL       dataset folder; generated there if empty or missing\n"
    "                       (default: a folder under $TMPDIR per workload shape;\n"
    "                       its total is shown first, refused without the room);\n"
    "                       or a URL (http(s)://, s3://, file://) read through the\n"
    "                       shard cache (see the cache options below)\n"
    "  --direct             O_DIRECT reads (storage, not the page cache)\n"
    "  --drop-caches        drop the page cache before the run (root only)\n"
    "  --no-verify          do not check stored checksums\n"
    "  --engine E           auto, io_uring, pread, mmap, mapcopy\n"
    "  --seed S             shuffle and compute-jitter seed (default 0)\n"
    "search:\n"
    "  --find-max           find the largest accelerator count that meets the AU\n"
    "                       threshold (as MLPerf Storage submissions report); not\n"
    "                       across processes: it varies the count, mpirun fixes it;\n"
    "                       --json FILE records every trial\n"
    "across processes and hosts:\n"
    "  --mpi                one emulation per MPI rank, implied under `mpirun -np N`\n"
    "                       (N > 1): N x --accelerators (default 1 per process),\n"
    "                       one report from rank 0; needs stoker built with Open MPI\n"
    "                       (libopenmpi-dev); a rank that fails stops every rank\n"
    CLI_CACHE_USAGE
    "output:\n"
    "  --json FILE          every figure, per accelerator and per epoch\n"
    "  --svg FILE           chart of throughput and time split over the run\n"
    "  -q, --quiet          no progress line\n";

enum {
  O_WORKLOAD = 256, O_ACCEL, O_CONFIG, O_ACCS, O_FILES, O_SPF, O_RECORD, O_RECORD_SD, O_BATCH,
  O_EPOCHS, O_RT, O_COMPUTE, O_COMPUTE_SD, O_DIST, O_BUSY, O_AU, O_AR_BYTES, O_NETWORK, O_DATA,
  O_DIRECT, O_DROP, O_NOVERIFY, O_ENGINE, O_SEED, O_FINDMAX, O_JSON, O_SVG, O_MPI, O_CKPT,
  O_NOCKPT, O_CKPT_DIR, O_CKPT_SCALE, O_CKPT_KEEP, O_CKPT_W, O_CKPT_R, O_CKPT_INT,
  O_CKPT_IO
};

static const struct option options[] = {
    {"workload", 1, 0, O_WORKLOAD}, {"accel", 1, 0, O_ACCEL}, {"config", 1, 0, O_CONFIG},
    {"accelerators", 1, 0, O_ACCS}, {"files", 1, 0, O_FILES}, {"samples-per-file", 1, 0, O_SPF},
    {"record-size", 1, 0, O_RECORD}, {"record-stdev", 1, 0, O_RECORD_SD}, {"batch", 1, 0, O_BATCH},
    {"epochs", 1, 0, O_EPOCHS}, {"read-threads", 1, 0, O_RT}, {"compute-s", 1, 0, O_COMPUTE},
    {"compute-stdev", 1, 0, O_COMPUTE_SD}, {"compute-dist", 1, 0, O_DIST},
    {"busy-compute", 0, 0, O_BUSY}, {"au", 1, 0, O_AU}, {"allreduce-bytes", 1, 0, O_AR_BYTES},
    {"network", 1, 0, O_NETWORK}, {"data", 1, 0, O_DATA}, {"direct", 0, 0, O_DIRECT},
    {"drop-caches", 0, 0, O_DROP}, {"no-verify", 0, 0, O_NOVERIFY}, {"engine", 1, 0, O_ENGINE},
    {"seed", 1, 0, O_SEED}, {"find-max", 0, 0, O_FINDMAX}, {"json", 1, 0, O_JSON},
    {"svg", 1, 0, O_SVG}, {"quiet", 0, 0, 'q'}, {"mpi", 0, 0, O_MPI}, {"checkpoint", 0, 0, O_CKPT},
    {"no-checkpoint", 0, 0, O_NOCKPT}, {"checkpoint-dir", 1, 0, O_CKPT_DIR},
    {"checkpoint-scale", 1, 0, O_CKPT_SCALE}, {"keep-checkpoints", 0, 0, O_CKPT_KEEP},
    {"checkpoint-writes", 1, 0, O_CKPT_W}, {"checkpoint-reads", 1, 0, O_CKPT_R},
    {"checkpoint-interval", 1, 0, O_CKPT_INT}, {"checkpoint-io", 1, 0, O_CKPT_IO}, CLI_CACHE_OPTIONS, {0, 0, 0, 0}};

static int int_opt(const char *opt, const char *v, uint64_t min, uint64_t max, int64_t *out) {
  uint64_t x;
  if (cli_u64("bench", opt, v, min, max, &x)) return -1;
  *out = (int64_t)x;
  return 0;
}

static int dbl_opt(const char *opt, const char *v, double min, double max, double *out) {
  return cli_double("bench", opt, v, min, max, out);
}

static int size_opt(const char *opt, const char *v, double *out) {
  uint64_t x;
  if (cli_size("bench", opt, v, &x)) return -1;
  *out = (double)x;
  return 0;
}

static int parse_option(struct bench_args *a, int c, const char *v) {
  int k = cli_cache_option("bench", c, v, &a->cache);
  if (k <= 0) return k;
  switch (c) {
    case O_WORKLOAD: a->workload = v; return 0;
    case O_ACCEL: a->accel = v; return 0;
    case O_CONFIG: a->config = v; return 0;
    case O_ACCS: return int_opt("--accelerators", v, 1, 4096, &a->accelerators);
    case O_FILES: return int_opt("--files", v, 1, UINT32_MAX, &a->files);
    case O_SPF: return int_opt("--samples-per-file", v, 1, UINT32_MAX, &a->spf);
    case O_RECORD: return size_opt("--record-size", v, &a->record);
    case O_RECORD_SD: return size_opt("--record-stdev", v, &a->record_sd);
    case O_BATCH: return int_opt("--batch", v, 1, 1u << 20, &a->batch);
    case O_EPOCHS: return int_opt("--epochs", v, 1, 100000, &a->epochs);
    case O_RT: return int_opt("--read-threads", v, 1, 1024, &a->read_threads);
    case O_COMPUTE: return dbl_opt("--compute-s", v, 0, 3600, &a->compute);
    case O_COMPUTE_SD: return dbl_opt("--compute-stdev", v, 0, 3600, &a->compute_sd);
    case O_DIST:
      if (!strcmp(v, "constant")) a->o.compute_dist = STK_COMPUTE_CONSTANT;
      else if (!strcmp(v, "normal")) a->o.compute_dist = STK_COMPUTE_NORMAL;
      else if (!strcmp(v, "uniform")) a->o.compute_dist = STK_COMPUTE_UNIFORM;
      else {
        cli_error("bench", "--compute-dist: '%s' is not one of constant, normal, uniform", v);
        return -1;
      }
      return 0;
    case O_BUSY: a->o.busy_compute = 1; return 0;
    case O_AU: return dbl_opt("--au", v, 0, 1, &a->au);
    case O_AR_BYTES: return cli_size("bench", "--allreduce-bytes", v, &a->allreduce_bytes);
    case O_NETWORK: a->network = v; return 0;
    case O_DATA:
      if (strlen(v) >= sizeof a->data) {
        cli_error("bench", "--data: too long");
        return -1;
      }
      snprintf(a->data, sizeof a->data, "%s", v);
      a->data_given = 1;
      return 0;
    case O_DIRECT: a->o.direct = 1; return 0;
    case O_DROP: a->drop_caches = 1; return 0;
    case O_NOVERIFY: a->o.skip_verify = 1; return 0;
    case O_ENGINE: a->o.io_engine = v; return 0;
    case O_SEED: return cli_u64("bench", "--seed", v, 0, UINT64_MAX, &a->o.seed);
    case O_FINDMAX: a->find_max = 1; return 0;
    case O_JSON: a->json = v; return cli_out_check("bench", "--json", v); /* before the run */
    case O_SVG: a->svg = v; return cli_out_check("bench", "--svg", v);
    case 'q': a->quiet = 1; return 0;
    case O_MPI: return 0; /* seen before parsing: see cmd_bench_run() */
    case O_CKPT: a->ckpt_on = 1; return 0;
    case O_NOCKPT: a->ckpt_off = 1; return 0;
    case O_CKPT_DIR: a->o.ckpt_dir = v; return 0;
    case O_CKPT_SCALE:
      if (dbl_opt("--checkpoint-scale", v, 0, 1, &a->o.ckpt_scale)) return -1;
      if (a->o.ckpt_scale > 0) return 0;
      cli_error("bench", "--checkpoint-scale: must be more than 0");
      return -1;
    case O_CKPT_KEEP: a->o.keep_checkpoints = 1; return 0;
    case O_CKPT_W: return int_opt("--checkpoint-writes", v, 0, 1000000, &a->ckpt_writes);
    case O_CKPT_R: return int_opt("--checkpoint-reads", v, 0, 1000000, &a->ckpt_reads);
    case O_CKPT_INT: return dbl_opt("--checkpoint-interval", v, 0, 86400, &a->ckpt_interval);
    case O_CKPT_IO:
      if (!strcmp(v, "tier")) a->o.ckpt_io = STK_CKPT_IO_TIER;
      else if (!strcmp(v, "torch")) a->o.ckpt_io = STK_CKPT_IO_TORCH;
      else {
        cli_error("bench", "--checkpoint-io: '%s' is not one of tier, torch", v);
        return -1;
      }
      return 0;
    default: return -1;
  }
}

/* The workload: preset (or the built-in default), then the config file,
 * then command-line overrides. */
static int build_workload(struct bench_args *a) {
  struct stk_workload *w = &a->w;
  const char *name = a->workload ? a->workload : "resnet50";
  if (stk_workload_preset(name, a->accel, w) != 0) {
    cli_error("bench", "no workload '%s' for accelerator '%s' (unet3d: a100, h100, b200; resnet50 "
              "and cosmoflow: a100, h100; gpt8b: h100)", name, a->accel ? a->accel : "h100");
    return -1;
  }
  if (!a->workload && !a->config) { /* the first-run default: small enough for a minute */
    w->files = 64;
    w->samples_per_file = 250;
    w->epochs = 3;
    if (a->accelerators < 0) a->accelerators = 4;
  }
  if (a->config) {
    char unknown[4096], ignored[4096], err[STK_ERRMSG_MAX];
    if (stk_workload_load_yaml(a->config, w, unknown, sizeof unknown, ignored, sizeof ignored, err)) {
      cli_error("bench", "%s", err);
      return -1;
    }
    for (char *p = unknown, *nl; *p; p = nl + 1) {
      nl = strchr(p, '\n');
      *nl = 0;
      cli_error("bench", "%s: unknown key %s: not used", a->config, p);
    }
    if (*ignored && !a->quiet) {
      fprintf(stderr, "stoker bench: %s: understood but not emulated:", a->config);
      for (char *p = ignored; *p; p++) fputc(*p == '\n' ? (p[1] ? ',' : '\n') : *p, stderr);
    }
  }
  if (a->files >= 0) w->files = (uint64_t)a->files;
  if (a->spf >= 0) w->samples_per_file = (uint64_t)a->spf;
  if (a->batch >= 0) w->batch = (uint32_t)a->batch;
  if (a->epochs >= 0) w->epochs = (uint32_t)a->epochs;
  if (a->read_threads >= 0) w->read_threads = (uint32_t)a->read_threads;
  if (!isnan(a->record)) w->record_bytes = a->record;
  if (!isnan(a->record_sd)) w->record_stdev = a->record_sd;
  if (!isnan(a->compute)) w->compute_s = a->compute;
  if (!isnan(a->compute_sd)) w->compute_stdev = a->compute_sd;
  if (!isnan(a->au)) w->au_min = a->au;
  if (a->ckpt_on && a->ckpt_off) {
    cli_error("bench", "--checkpoint and --no-checkpoint contradict each other");
    return -1;
  }
  if (a->ckpt_on) w->ckpt.enabled = 1;
  if (a->ckpt_off) w->ckpt.enabled = 0;
  if (a->ckpt_writes >= 0) w->ckpt.num_write = (uint32_t)a->ckpt_writes;
  if (a->ckpt_reads >= 0) w->ckpt.num_read = (uint32_t)a->ckpt_reads;
  if (!isnan(a->ckpt_interval)) w->ckpt.time_between_s = a->ckpt_interval;
  if (w->ckpt.no_train && !w->ckpt.enabled) {
    cli_error("bench", "%s: workflow.train is False and no checkpoints are asked for: nothing to "
              "emulate", a->config ? a->config : "the workload");
    return -1;
  }
  /* The config's dataset.data_folder is where the data is (generated there
   * when missing), as DLIO reads it; --data overrides it. */
  if (!a->data_given && w->data_folder[0] && !w->ckpt.no_train) {
    snprintf(a->data, sizeof a->data, "%s", w->data_folder);
    size_t n = strlen(a->data);
    while (n > 1 && a->data[n - 1] == '/') a->data[--n] = 0;
    a->data_given = 1;
  }
  if (w->record_bytes < 1) {
    cli_error("bench", "record size must be at least 1 byte");
    return -1;
  }
  a->o.accelerators = a->accelerators > 0 ? (uint32_t)a->accelerators : 1;
  if (w->ckpt.no_train && a->accelerators <= 0) /* one data-parallel copy of the model */
    a->o.accelerators = stk_ckpt_model_parallel(w);
  return 0;
}

/* ---- output ------------------------------------------------------------------ */

static void progress(void *ctx, uint64_t epoch, uint64_t step, uint64_t steps, double au) {
  const struct bench_args *a = ctx;
  if (isfinite(au))
    fprintf(stderr, "\r  epoch %" PRIu64 "/%u  step %" PRIu64 "/%" PRIu64 "  AU %.3f   ", epoch + 1,
            a->w.epochs, step, steps, au);
  else
    fprintf(stderr, "\r  epoch %" PRIu64 "/%u  step %" PRIu64 "/%" PRIu64 "   ", epoch + 1,
            a->w.epochs, step, steps);
}

/* Where checkpoint figures come from, said before the run as for reads. */
static void ckpt_cache_warning(const struct bench_args *a) {
  const struct stk_ckpt_spec *c = &a->w.ckpt;
  if (!c->enabled || a->o.direct || a->quiet) return;
  fprintf(stderr, "stoker bench: warning: checkpoint %s the page cache%s; use --direct for "
          "storage figures\n", c->fsync ? "loads may read" : "saves without fsync land in, and loads read,",
          c->fsync ? " (the saves are fsynced)" : "");
}

static void ckpt_summary(const struct stk_bench_result *r) {
  const struct stk_bench_ckpt *c = &r->ckpt;
  if (!c->saves && !c->loads && !r->ckpt_only) return;
  char b1[32], b2[32];
  printf("  checkpoint  %s per checkpoint in %" PRIu64 " files from %u ranks (DLIO's size for this "
         "config)", stk_fmt_bytes(c->dlio_bytes, b1, sizeof b1), c->files, c->ranks);
  const char *who = r->processes > 1 ? "the job's" : "this process's";
  if (c->scale < 1)
    printf(";\n              written at scale %g: %s by %s %u writing ranks", c->scale,
           stk_fmt_bytes(c->bytes, b2, sizeof b2), who, c->writers);
  else
    printf("; %s %u writing ranks: %s", who, c->writers, stk_fmt_bytes(c->bytes, b2, sizeof b2));
  printf("\n              in %s (%s%s%s)\n", c->dir, c->direct ? "O_DIRECT" : "page cache",
         c->fsync ? ", fsync per file" : ", no fsync",
         c->io == STK_CKPT_IO_TORCH ? ", written as torch.save" : "");
  if (c->saves)
    printf("  saves       %u, %.3f s each (longest %.3f s), write %.2f GiB/s\n", c->saves,
           c->save_s / c->saves, c->save_max_s, (double)c->bytes * c->saves / c->save_s / 1073741824.0);
  if (c->loads)
    printf("  loads       %u, %.3f s each (longest %.3f s), read %.2f GiB/s\n", c->loads,
           c->load_s / c->loads, c->load_max_s, (double)c->bytes * c->loads / c->load_s / 1073741824.0);
}

/* A checkpoint-only workload (the llama configs): saves and loads. */
static void ckpt_only_summary(const struct bench_args *a, const struct stk_bench_result *r) {
  const struct stk_workload *w = &a->w;
  if (r->processes > 1)
    printf("stoker bench: across %u processes on %u host(s) (MPI)\n", r->processes, r->hosts);
  printf("stoker bench: %s (checkpoint only), %u ranks, %u saves and %u loads, %g s of compute "
         "before each%s\n", w->name, r->ckpt.ranks, w->ckpt.num_write, w->ckpt.num_read,
         w->ckpt.time_between_s, r->interrupted ? " (interrupted)" : "");
  if (isfinite(r->au))
    printf("  AU          %.4f (compute over wall time; DLIO reports none here)\n", r->au);
  ckpt_summary(r);
  printf("  time split  compute %.1f%%, checkpoint %.1f%%, other %.1f%%\n", 100 * r->compute_frac,
         100 * r->ckpt_frac, 100 * r->sync_stall_frac);
  printf("  verdict     %s\n", r->verdict);
}

static void summary(const struct bench_args *a, const struct stk_bench_result *r) {
  const struct stk_workload *w = &a->w;
  if (r->processes > 1)
    printf("stoker bench: across %u processes on %u host(s) (MPI)\n", r->processes, r->hosts);
  printf("stoker bench: %s (%s), %u accelerators, %u epochs x %" PRIu64 " steps, batch %u, compute %g s%s\n",
         w->name, w->accel[0] ? w->accel : "config", r->accelerators, w->epochs, r->steps_per_epoch,
         w->batch, w->compute_s, r->interrupted ? " (interrupted)" : "");
  printf("  data        %s (%s%s)\n", a->data, w->format, a->o.direct ? ", O_DIRECT" : "");
  if (r->throughput_only)
    printf("  AU          n/a (compute time 0: the run measures throughput only)\n");
  else
    printf("  AU          %.4f  %s (threshold %.2f)\n", r->au, r->pass ? "PASS" : "FAIL", r->au_min);
  printf("  warm-up     %.2f s before epoch 1: the loader filled its ring (%u batches); not in AU\n",
         r->warmup_s, r->warmup_batches);
  printf("  throughput  %.1f samples/s, %.1f MiB/s\n", r->samples_per_s, r->mib_per_s);
  printf("  time split  compute %.1f%%, data stall %.1f%%, sync stall %.1f%%", 100 * r->compute_frac,
         100 * r->data_stall_frac, 100 * r->sync_stall_frac);
  if (a->o.allreduce_s > 0) printf(", all-reduce %.1f%%", 100 * r->comm_frac);
  if (r->ckpt.saves) printf(", checkpoint %.1f%%", 100 * r->ckpt_frac);
  if (r->loader.has_cache) {
    printf("\n");
    cli_cache_report(stdout, &r->loader.cache);
  }
  printf("\n");
  ckpt_summary(r);
  printf("  verdict     %s\n", r->verdict);
  printf("  AU by epoch");
  for (uint32_t e = 0; e < r->epochs && !r->throughput_only; e++) {
    double s = 0;
    int n = 0;
    for (uint32_t i = 0; i < r->accelerators; i++) {
      double v = r->per[(size_t)e * r->accelerators + i].au;
      if (isfinite(v)) s += v, n++;
    }
    if (n)
      printf(" %.3f", s / n);
    else
      printf(" -"); /* not run, or stopped before its second step */
  }
  if (r->throughput_only) printf(" n/a");
  printf("\n  loader      %u read threads, %.2f CPU-s per 1000 samples, consumer wait p99 %.1f ms\n",
         r->loader.stage[STK_STAGE_DECODE].threads,
         r->loader.samples ? (double)r->cpu_ns / 1e6 / (double)r->loader.samples : NAN,
         (double)r->loader.wait_p99_ns / 1e6);
}

static int write_reports(const struct bench_args *a, const struct stk_bench_result *r) {
  struct stk_outfile *f;
  if (a->json) {
    if (cli_out_open("bench", "--json", a->json, &f)) return -1;
    stk_bench_json(&a->o, r, stk_outfile_stream(f));
    if (cli_out_commit("bench", "--json", f)) return -1;
  }
  if (a->svg) {
    if (cli_out_open("bench", "--svg", a->svg, &f)) return -1;
    stk_bench_svg(&a->o, r, stk_outfile_stream(f));
    if (cli_out_commit("bench", "--svg", f)) return -1;
  }
  return 0;
}

static int run_once(struct bench_args *a, struct stk_bench_result *r, int show) {
  char err[STK_ERRMSG_MAX];
  a->o.progress = show ? progress : NULL;
  a->o.progress_ctx = a;
  int rc = stk_bench_run(&a->o, r, err);
  if (show) fputs("\r\033[K", stderr);
  int failed = a->mpi ? stk_bench_mpi_failed_rank(a->mpi) : -1;
  if (rc && (failed < 0 || failed == (int)stk_bench_mpi_rank(a->mpi)))
    cli_error(a->who, "%s", err);
  else if (rc && stk_bench_mpi_rank(a->mpi) == 0) /* a peer failed and said why */
    cli_error(a->who, "stopped: rank %d of %u failed", failed, stk_bench_mpi_size(a->mpi));
  return rc;
}

/* One --find-max trial, kept for the JSON report. */
struct trial {
  uint32_t n;
  int ran, pass;
  double au, samples_per_s, mib_per_s, warmup_s, data_stall, sync_stall;
  char bottleneck[16], verdict[512];
};

static void find_max_json(const struct bench_args *a, const struct trial *t, size_t nt,
                          uint32_t largest, FILE *f) {
  struct stk_json j;
  stk_json_init(&j, f, 2);
  stk_json_obj_begin(&j);
  stk_json_kstr(&j, "workload", a->w.name);
  stk_json_kstr(&j, "accelerator", a->w.accel);
  stk_json_kstr(&j, "data", a->o.data);
  stk_json_kdbl(&j, "au_threshold", a->w.au_min);
  stk_json_ku64(&j, "largest_passing", largest);
  stk_json_key(&j, "trials");
  stk_json_arr_begin(&j);
  for (size_t i = 0; i < nt; i++) {
    stk_json_obj_begin(&j);
    stk_json_ku64(&j, "accelerators", t[i].n);
    stk_json_key(&j, "ran");
    stk_json_bool(&j, t[i].ran);
    stk_json_key(&j, "pass");
    stk_json_bool(&j, t[i].pass);
    stk_json_kdbl(&j, "au", t[i].ran ? t[i].au : NAN);
    stk_json_kdbl(&j, "samples_per_s", t[i].ran ? t[i].samples_per_s : NAN);
    stk_json_kdbl(&j, "mib_per_s", t[i].ran ? t[i].mib_per_s : NAN);
    stk_json_kdbl(&j, "warmup_s", t[i].ran ? t[i].warmup_s : NAN);
    stk_json_kdbl(&j, "data_stall", t[i].ran ? t[i].data_stall : NAN);
    stk_json_kdbl(&j, "sync_stall", t[i].ran ? t[i].sync_stall : NAN);
    stk_json_kstr(&j, "bottleneck", t[i].bottleneck);
    stk_json_kstr(&j, t[i].ran ? "verdict" : "error", t[i].verdict);
    stk_json_obj_end(&j);
  }
  stk_json_arr_end(&j);
  stk_json_obj_end(&j);
}

/* Largest N meeting the threshold: double until a count fails (or the data
 * cannot give it two steps per epoch), then bisect. Every trial narrows
 * [lo, hi): lo passed, hi did not. With --json, every trial is written. */
static int find_max(struct bench_args *a) {
  uint32_t lo = 0, hi = 0, n = 1;
  struct trial t[64]; /* doubling and bisecting 1..4096 takes at most 25 */
  size_t nt = 0;
  printf("stoker bench --find-max: %s (%s), AU threshold %.2f\n", a->w.name, a->w.accel, a->w.au_min);
  printf("  %12s %8s %6s %14s %9s  %s\n", "accelerators", "AU", "", "samples/s", "warm-up", "verdict");
  for (;;) {
    if (cli_stop_requested()) return CLI_INTERRUPTED;
    a->o.accelerators = n;
    struct stk_bench_result r;
    char err[STK_ERRMSG_MAX];
    struct trial *tr = &t[nt < 64 ? nt++ : 63];
    memset(tr, 0, sizeof *tr);
    tr->n = n;
    if (stk_bench_run(&a->o, &r, err) != 0) {
      printf("  %12u  not run: %s\n", n, err);
      snprintf(tr->verdict, sizeof tr->verdict, "%s", err);
    } else {
      tr->ran = 1;
      tr->pass = r.pass;
      tr->au = r.au;
      tr->samples_per_s = r.samples_per_s;
      tr->mib_per_s = r.mib_per_s;
      tr->warmup_s = r.warmup_s;
      tr->data_stall = r.data_stall_frac;
      tr->sync_stall = r.sync_stall_frac;
      snprintf(tr->bottleneck, sizeof tr->bottleneck, "%s", r.bottleneck);
      snprintf(tr->verdict, sizeof tr->verdict, "%s", r.verdict);
      printf("  %12u %8.4f %6s %14.1f %8.2fs  %s\n", n, r.au, r.pass ? "pass" : "fail", r.samples_per_s,
             r.warmup_s, r.verdict);
      stk_bench_result_free(&r);
    }
    if (tr->pass)
      lo = n;
    else
      hi = n;
    if (!hi)
      n *= 2;
    else if (hi - lo > 1)
      n = lo + (hi - lo) / 2;
    else
      break;
  }
  if (lo)
    printf("largest accelerator count meeting AU >= %.2f: %u\n", a->w.au_min, lo);
  else
    printf("no accelerator count meets AU >= %.2f (1 accelerator fails)\n", a->w.au_min);
  if (a->json) {
    struct stk_outfile *f;
    if (cli_out_open("bench", "--json", a->json, &f)) return CLI_FAIL;
    find_max_json(a, t, nt, lo, stk_outfile_stream(f));
    if (cli_out_commit("bench", "--json", f)) return CLI_FAIL;
  }
  return lo ? CLI_OK : CLI_FAIL;
}

/* ---- across processes (MPI) ---------------------------------------------------- */

/* --mpi, or started by mpirun as one of several processes. */
static int wants_mpi(int argc, char **argv) {
  for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
    if (!strcmp(argv[i], "--mpi")) return 1;
  return stk_bench_mpi_launched();
}

/* What every rank must agree on, or they would run different numbers of
 * steps (and barriers). */
static uint64_t workload_fingerprint(const struct bench_args *a) {
  const struct stk_workload *w = &a->w;
  const uint64_t f[] = {w->batch, w->files, w->samples_per_file, w->epochs, a->o.accelerators,
                        w->seq_len};
  uint64_t h = 1469598103934665603ull; /* FNV-1a over the values */
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) h = (h ^ f[i]) * 1099511628211ull;
  return h;
}

/* A check point between phases: every rank passes its exit code so far;
 * returns 0 to go on, else the code to exit with (on every rank). A rank
 * that failed has said why; rank 0 says which rank stopped the others.
 * Without MPI: status. */
static int job_check(struct bench_args *a, int status, uint64_t fingerprint) {
  if (!a->mpi) return status;
  char err[STK_ERRMSG_MAX];
  int st = status == CLI_OK ? 0 : status == CLI_INTERRUPTED ? STK_ECANCELED : STK_EIO;
  int rc = stk_bench_mpi_agree(a->mpi, st, fingerprint, err);
  if (!rc) return CLI_OK;
  if (!status && stk_bench_mpi_rank(a->mpi) == 0) cli_error(a->who, "stopped: %s", err);
  return status ? status : rc == STK_ECANCELED ? CLI_INTERRUPTED : CLI_FAIL;
}

/* After the run: rank 0 gathers every rank's figures into r. Returns 0, or
 * the exit code (r then freed). */
static int gather_results(struct bench_args *a, struct stk_bench_result *r, int status) {
  int rc = job_check(a, status, 0);
  if (rc || !a->mpi) {
    if (rc && !status) stk_bench_result_free(r);
    return rc;
  }
  char err[STK_ERRMSG_MAX];
  if (stk_bench_mpi_gather(a->mpi, &a->o, r, err)) {
    if (stk_bench_mpi_rank(a->mpi) == 0) cli_error(a->who, "%s", err);
    stk_bench_result_free(r);
    return CLI_FAIL;
  }
  return CLI_OK;
}

/* ---- the command ---------------------------------------------------------------- */

/* Options, workload and the all-reduce model: CLI_OK or CLI_USAGE. */
static int parse_args(struct bench_args *a, int argc, char **argv) {
  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "q", options, NULL)) != -1) {
    if (c == '?' || parse_option(a, c, optarg)) {
      if (c == '?') fprintf(stderr, "`stoker help bench` lists the options\n");
      return CLI_USAGE;
    }
  }
  if (optind < argc) {
    cli_error("bench", "unexpected argument '%s' (the dataset goes in --data DIR)", argv[optind]);
    return CLI_USAGE;
  }
  int accelerators_given = a->accelerators > 0;
  if (build_workload(a)) return CLI_USAGE;
  if (a->mpi) {
    if (a->find_max) {
      cli_error("bench", "--find-max cannot run across processes: it varies the accelerator "
                "count, which mpirun fixes at launch; run it without mpirun");
      return CLI_USAGE;
    }
    if (!accelerators_given) a->o.accelerators = 1;
    char aerr[256];
    if (stk_bench_mpi_attach(a->mpi, &a->o, aerr)) {
      cli_error("bench", "%s", aerr);
      return CLI_FAIL;
    }
  }
  struct stk_network net;
  const char *name = a->network ? a->network : "ib400";
  if (stk_network_preset(name, &net)) {
    cli_error("bench", "--network: '%s' is not one of nvlink4, ib400, roce100", name);
    return CLI_USAGE;
  }
  if (a->network && !a->allreduce_bytes && !a->quiet)
    fprintf(stderr, "stoker bench: note: --network models the all-reduce of --allreduce-bytes, "
                    "which is not given: no all-reduce is added\n");
  if (a->find_max && a->svg) {
    cli_error("bench", "--svg: --find-max draws no chart (--json FILE records every trial)");
    return CLI_USAGE;
  }
  if (a->find_max && a->w.compute_s == 0 && a->w.compute_stdev == 0) {
    cli_error("bench", "--find-max needs a compute time: with --compute-s 0, AU is undefined");
    return CLI_USAGE;
  }
  if (a->allreduce_bytes) {
    uint32_t participants = a->o.accelerators * stk_bench_mpi_size(a->mpi);
    a->o.allreduce_s = stk_allreduce_seconds(&net, participants, (double)a->allreduce_bytes);
  }
  return CLI_OK;
}

/* The dataset (generated where missing) and the page cache. */
static int setup_data(struct bench_args *a) {
  int rc = bench_prepare_data(a, stk_bench_mpi_rank(a->mpi) == 0) ? CLI_FAIL : CLI_OK;
  if (rc && cli_stop_requested()) rc = CLI_INTERRUPTED;
  if ((rc = job_check(a, rc, 0))) return rc;
  if (a->mpi) { /* node-local folders on the other hosts */
    rc = bench_prepare_data(a, stk_bench_mpi_host_leader(a->mpi)) ? CLI_FAIL : CLI_OK;
    if (rc && cli_stop_requested()) rc = CLI_INTERRUPTED;
    if ((rc = job_check(a, rc, 0))) return rc;
  }
  a->o.data = a->data;
  a->o.cache = &a->cache;
  bench_page_cache_warning(a);
  return job_check(a, a->drop_caches && bench_drop_caches() ? CLI_FAIL : CLI_OK, 0);
}

/* A checkpoint-only workload: no dataset. */
static int ckpt_main(struct bench_args *a) {
  if (a->find_max) {
    cli_error("bench", "--find-max: a checkpoint-only workload has no data to feed");
    return CLI_USAGE;
  }
  ckpt_cache_warning(a);
  struct stk_bench_result r;
  char err[STK_ERRMSG_MAX];
  int rc = stk_bench_ckpt_run(&a->o, &r, err) ? CLI_FAIL : CLI_OK;
  if (rc) cli_error(a->who, "%s", err);
  if ((rc = gather_results(a, &r, rc))) return rc; /* rank 0: the job's bytes and times */
  rc = r.interrupted ? CLI_INTERRUPTED : CLI_OK;
  if (stk_bench_mpi_rank(a->mpi) == 0) {
    ckpt_only_summary(a, &r);
    if (write_reports(a, &r)) rc = CLI_FAIL;
  }
  stk_bench_result_free(&r);
  return rc;
}

static int bench_main(struct bench_args *a, int argc, char **argv) {
  int rc = parse_args(a, argc, argv);
  if ((rc = job_check(a, rc, workload_fingerprint(a)))) return rc;
  cli_catch_signals();
  a->o.cancel = &cli_interrupted;
  if (a->w.ckpt.no_train) return ckpt_main(a);
  ckpt_cache_warning(a);
  if ((rc = setup_data(a))) return rc;
  if (a->find_max) return find_max(a);
  int show = !a->quiet && cli_progress_enabled();
  struct stk_bench_result r;
  rc = run_once(a, &r, show) ? CLI_FAIL : CLI_OK;
  if ((rc = gather_results(a, &r, rc))) return rc;
  rc = r.interrupted ? CLI_INTERRUPTED : CLI_OK;
  if (stk_bench_mpi_rank(a->mpi) == 0) { /* one report for the whole job */
    summary(a, &r);
    if (write_reports(a, &r)) rc = CLI_FAIL;
  }
  stk_bench_result_free(&r);
  return rc;
}

int cmd_bench_run(int argc, char **argv) {
  struct bench_args a;
  memset(&a, 0, sizeof a);
  stk_bench_opts_init(&a.o);
  stk_workload_init(&a.w);
  a.o.w = &a.w;
  a.accelerators = a.files = a.spf = a.batch = a.epochs = a.read_threads = -1;
  a.record = a.record_sd = a.compute = a.compute_sd = a.au = a.ckpt_interval = NAN;
  a.ckpt_writes = a.ckpt_reads = -1;
  snprintf(a.who, sizeof a.who, "bench");
  if (wants_mpi(argc, argv)) { /* one process of a job: see src/bench/mpi.c */
    char err[STK_ERRMSG_MAX];
    if (stk_bench_mpi_init(&a.mpi, err)) {
      cli_error("bench", "%s", err);
      return CLI_FAIL;
    }
    uint32_t rank = stk_bench_mpi_rank(a.mpi);
    snprintf(a.who, sizeof a.who, "bench: rank %u of %u", rank, stk_bench_mpi_size(a.mpi));
    if (rank != 0) a.quiet = 1; /* rank 0 speaks for the job */
  }
  int rc = bench_main(&a, argc, argv);
  stk_bench_mpi_finalize(a.mpi);
  return rc;
}
