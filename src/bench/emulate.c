/* The accelerator emulator. In synchronous data-parallel training every
 * accelerator runs the same step in lockstep: take a batch, compute, meet
 * the others at the all-reduce. So one driver thread emulates all N of
 * them exactly: each step it hands each accelerator its batch (an
 * accelerator whose batch is already in the ring gets it at once; one that
 * must wait is charged that wait as data stall), gives each its own compute
 * interval, and sleeps once, until the slowest accelerator's compute ends
 * (the barrier; everyone else's remaining time is sync stall). Sleep
 * overshoot and the driver's own work show up as sync stall too, so the
 * emulator's overhead lowers AU rather than hiding.
 *
 * Why not a thread per accelerator: on a small host N threads woken at
 * every barrier queue up for the cores, and that queueing (about 150 us per
 * step at N = 64 on two cores) is charged to the accelerators. The driver
 * costs a few microseconds per accelerator per step, so one host can stand
 * in for many accelerators.
 *
 * Why one loader for N accelerators: DLIO gives each rank its own reader
 * threads, which is what limits how many ranks one host can emulate. Here
 * the host's read and decode threads serve all emulated accelerators. In
 * aggregate the data read per epoch is the same: steps x accelerators x
 * batch samples, steps = floor(samples / batch / accelerators) as in DLIO.
 *
 * AU follows DLIO: per accelerator and epoch, compute time over wall time,
 * leaving out the first step's load and compute; averaged over accelerators
 * and epochs.
 *
 * Warm-up: before the first epoch's clock starts, the loader is left to
 * fill its ring (the 2N + 2 batches it prepares before any is taken). That
 * fill allocates and first touches every batch buffer: on a VM whose host
 * backs guest memory lazily, first touch ran at 0.1-0.5 GB/s here (2N + 2
 * batches of 57 MB for resnet50 is seconds), against a first epoch of a
 * few seconds. Counted in epoch 1, that one-time cost decided PASS or FAIL
 * by chance; it is reported beside AU instead (warmup_s). DLIO leaves out
 * only each epoch's first step, which covered its own workers' start. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "../base/base.h"
#include "bench_impl.h"
#include "stoker/bench.h"
#include "stoker/tokens.h"

#define TIMELINE_MAX (1u << 20)

struct run {
  const struct stk_bench_opts *o;
  struct stk_bench_result *r;
  struct stk_loader *l;
  struct stk_tokens *tk; /* a token workload's windows (w.seq_len), else NULL */
  uint64_t steps;
  uint32_t nacc, epochs;
  uint64_t t0;
  uint64_t ntimeline;
  uint64_t global_calls; /* completed cross-process barriers */
  int global_rc;         /* nonzero once one reported a stopped peer */
  uint64_t margin;       /* ns before a deadline the driver stops sleeping */
  uint32_t fill;         /* batches the loader prepares before any is taken */
  struct stk__ckpt *ck;  /* checkpoints within training, or NULL */
  uint64_t next_ckpt_epoch; /* DLIO's epoch number (from 1) of the next epoch-end save */
  int err;
  char errmsg[STK_ERRMSG_MAX];
};

/* Per accelerator, during one epoch. */
struct acc {
  struct stk_rng rng;
  struct stk_batch *batch;
  uint64_t got, end; /* when it had its batch; when its compute ends */
  double step0, compute, compute_all, load, sync, sync_jitter, sync_wake, ckpt;
};

static void run_fail(struct run *run, int code, const char *msg) {
  if (run->err) return;
  run->err = code;
  snprintf(run->errmsg, sizeof run->errmsg, "%s", msg);
}

static int cancelled(const struct run *run) {
  return run->o->cancel && __atomic_load_n(run->o->cancel, __ATOMIC_RELAXED);
}

static int stopping(const struct run *run) { return run->err || run->global_rc || cancelled(run); }

static double draw_compute(const struct stk_bench_opts *o, struct stk_rng *rng) {
  double mean = o->w->compute_s, sd = o->w->compute_stdev, t = mean;
  if (o->compute_dist == STK_COMPUTE_NORMAL)
    t = mean + sd * stk_rng_normal(rng);
  else if (o->compute_dist == STK_COMPUTE_UNIFORM)
    t = mean + sd * sqrt(3.0) * (2.0 * stk_rng_double(rng) - 1.0); /* same stdev */
  return t > 0 ? t : 0;
}

/* Wait until deadline. A sleep alone wakes late by the scheduler's
 * latency (100-200 us on a busy VM), which would be charged to every
 * accelerator as sync stall; so the driver sleeps until `margin` before the
 * deadline and spins the rest. The margin follows twice the lateness seen
 * recently (20 us to 2 ms), so the spin costs little CPU. --busy-compute
 * spins all the way. */
static void wait_until(struct run *run, uint64_t deadline, int busy) {
  uint64_t now = stk_now_ns();
  if (!busy && deadline > now + run->margin) {
    uint64_t target = deadline - run->margin;
    struct timespec ts = {(time_t)(target / 1000000000ull), (long)(target % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
    }
    uint64_t late = stk_now_ns() - target;
    uint64_t m = (run->margin * 7 + 2 * late) / 8;
    run->margin = STK__MAX(20000u, STK__MIN(m, 2000000u));
  }
  while (stk_now_ns() < deadline) {
  }
}

static void record_step(struct run *run, uint32_t acc, uint64_t epoch, uint64_t t_end, double load,
                        double compute, double sync) {
  if (run->ntimeline >= TIMELINE_MAX || !run->r->timeline) return;
  run->r->timeline[run->ntimeline++] = (struct stk_bench_step){
      (float)((double)(t_end - run->t0) / 1e9), (float)load, (float)compute, (float)sync,
      (uint16_t)acc, (uint16_t)epoch};
}

/* Hand every accelerator its batch for this step. Returns 0, or nonzero
 * when the run must stop (the batches taken are released). */
static int take_batches(struct run *run, struct acc *a, uint64_t ts) {
  for (uint32_t i = 0; i < run->nacc; i++) {
    int rc = stk_loader_try_next(run->l, &a[i].batch);
    a[i].got = ts; /* ready in the ring: the accelerator had it at once */
    if (rc == STK_EAGAIN) {
      rc = stk_loader_next(run->l, &a[i].batch);
      a[i].got = stk_now_ns();
    }
    if (rc) {
      for (uint32_t k = 0; k < i; k++) stk_batch_release(run->l, a[k].batch);
      if (rc != STK_ECANCELED)
        run_fail(run, rc == STK_EOF ? STK_EIO : rc,
                 rc == STK_EOF ? "the loader ran out of batches before the epoch's steps ended"
                               : stk_loader_errmsg(run->l));
      return -1;
    }
    a[i].end = a[i].got + (uint64_t)(draw_compute(run->o, &a[i].rng) * 1e9);
  }
  return 0;
}

/* The cross-process barrier (MPI) after this process's accelerators met. */
static int global_barrier(struct run *run) {
  const struct stk_bench_opts *o = run->o;
  if (!o->global_barrier) return 0;
  int rc = o->global_barrier(o->global_ctx, 0);
  run->global_calls++;
  if (rc) run->global_rc = rc;
  return rc;
}

/* One step of every accelerator. Returns 0 when it completed, 1 when it
 * completed but a peer process stopped the job, -1 when it could not run. */
static int step(struct run *run, struct acc *a, uint32_t e, uint64_t s) {
  const struct stk_bench_opts *o = run->o;
  uint64_t ts = stk_now_ns();
  if (take_batches(run, a, ts)) return -1;
  uint64_t last = 0;
  for (uint32_t i = 0; i < run->nacc; i++) last = STK__MAX(last, a[i].end);
  wait_until(run, last, o->busy_compute);
  /* How late the driver itself got back: scheduler latency, or a core
   * taken by another process. Every accelerator waits for it. */
  double woke_late = (double)(stk_now_ns() - last) / 1e9;
  for (uint32_t i = 0; i < run->nacc; i++) stk_batch_release(run->l, a[i].batch);
  int rc = global_barrier(run);
  uint64_t tb = stk_now_ns(), maxc = 0;
  for (uint32_t i = 0; i < run->nacc; i++) maxc = STK__MAX(maxc, a[i].end - a[i].got);
  for (uint32_t i = 0; i < run->nacc; i++) {
    double load = (double)(a[i].got - ts) / 1e9, c = (double)(a[i].end - a[i].got) / 1e9;
    double sync = (double)(tb - a[i].end) / 1e9;
    /* Had every batch been on time, this accelerator would have waited
     * only for the longest compute (within this process). */
    double jit = STK__MIN(sync, (double)maxc / 1e9 - c);
    a[i].sync_jitter += jit;
    a[i].sync_wake += STK__MIN(sync - jit, woke_late);
    if (s == 0)
      a[i].step0 = load + c;
    else
      a[i].compute += c;
    a[i].compute_all += c;
    a[i].load += load;
    a[i].sync += sync;
    record_step(run, i, e, tb, load, c, sync);
  }
  if (rc) return 1;
  if (o->allreduce_s > 0) wait_until(run, tb + (uint64_t)(o->allreduce_s * 1e9), o->busy_compute);
  return 0;
}

static void epoch_result(struct run *run, struct acc *a, uint32_t e, uint64_t steps, double wall,
                         double comm) {
  for (uint32_t i = 0; i < run->nacc; i++) {
    struct stk_bench_epoch *ep = &run->r->per[(size_t)e * run->nacc + i];
    double metric = wall - a[i].step0;
    ep->steps = steps;
    ep->wall_s = wall;
    ep->compute_s = a[i].compute;
    ep->compute_all_s = a[i].compute_all;
    ep->first_step_s = a[i].step0;
    ep->load_s = a[i].load;
    ep->sync_s = a[i].sync;
    ep->sync_jitter_s = a[i].sync_jitter;
    ep->sync_wake_s = a[i].sync_wake;
    ep->comm_s = comm;
    ep->ckpt_s = a[i].ckpt;
    /* An epoch cut short (Ctrl-C) still reports what it measured. */
    ep->au = steps > 1 && metric > 0 ? a[i].compute / metric : NAN;
    ep->samples_per_s = steps > 1 && metric > 0 ? (double)(steps - 1) * run->o->w->batch / metric : NAN;
  }
}

uint32_t stk__bench_fill(uint32_t prefetch, uint64_t mem_cap, double batch_bytes) {
  double fits = batch_bytes > 0 ? (double)mem_cap / batch_bytes : 1e9;
  uint32_t want = prefetch + 2; /* the ring's depth and the two beyond it (pipeline.c) */
  if (fits < want) want = fits >= 2 ? (uint32_t)fits - 1 : 1;
  return want;
}

/* Let the loader fill its ring before the clock starts (see the top of
 * the file). Batches put in the ring count in the batch stage's items,
 * failed ones too, so a loader that fails still ends the wait; so do a
 * cancel and the end of the data. */
static void warm_up(struct run *run) {
  uint64_t t0 = stk_now_ns(), total = run->steps * run->epochs * run->nacc, want = run->fill;
  if (want > total) want = total;
  struct stk_loader_stats st;
  uint64_t last = 0, since = t0;
  for (;;) {
    stk_loader_stats(run->l, &st);
    uint64_t items = st.stage[STK_STAGE_BATCH].items, now = stk_now_ns();
    if (items >= want || cancelled(run)) break;
    /* A loader that makes no batch for 10 s while its buffers fill the
     * memory cap can make no more: the warm-up ends with what it has
     * (reported), rather than wait for a fill that cannot come. */
    if (items != last) last = items, since = now;
    else if (now - since > 10000000000ull && st.mem_bytes * 4 >= st.mem_cap * 3) break;
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
  }
  run->r->warmup_s = (double)(stk_now_ns() - t0) / 1e9;
  run->r->warmup_batches = (uint32_t)STK__MIN(st.stage[STK_STAGE_BATCH].items, want);
}

/* A checkpoint within training: every accelerator stands still while this
 * process's ranks write their shares (DLIO's epoch and step numbers name
 * it). */
static void checkpoint(struct run *run, struct acc *a, uint64_t epoch, uint64_t step) {
  double secs;
  char err[STK_ERRMSG_MAX];
  if (stk__ckpt_save(run->ck, epoch, step, &secs, err)) {
    run_fail(run, STK_EIO, err);
    return;
  }
  for (uint32_t i = 0; i < run->nacc; i++) a[i].ckpt += secs;
}

/* The whole run: epochs of lockstep steps. */
static void drive(struct run *run, struct acc *a) {
  const struct stk_bench_opts *o = run->o;
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0); /* wake within a microsecond, not 50 */
  uint64_t last_progress = 0;
  for (uint32_t e = 0; e < run->epochs && !stopping(run); e++) {
    for (uint32_t i = 0; i < run->nacc; i++) {
      struct stk_rng keep = a[i].rng;
      memset(&a[i], 0, sizeof a[i]);
      a[i].rng = keep;
    }
    uint64_t t_epoch = stk_now_ns(), done = 0;
    for (uint64_t s = 0; s < run->steps && !stopping(run); s++) {
      int rc = step(run, a, e, s);
      if (rc >= 0) done++;
      if (rc) break;
      uint64_t every = o->w->ckpt.steps_between;
      if (run->ck && every && (s + 1) % every == 0) checkpoint(run, a, e + 1, s + 1);
      uint64_t now = stk_now_ns();
      if (o->progress && now - last_progress > 250000000ull) {
        last_progress = now;
        double metric = (double)(now - t_epoch) / 1e9 - a[0].step0;
        o->progress(o->progress_ctx, e, s + 1, run->steps,
                    metric > 0 && s > 0 ? a[0].compute / metric : NAN);
      }
    }
    if (run->ck && !o->w->ckpt.steps_between && e + 1 == run->next_ckpt_epoch && !stopping(run)) {
      checkpoint(run, a, e + 1, done + 1);
      run->next_ckpt_epoch += o->w->ckpt.epochs_between ? o->w->ckpt.epochs_between : 1;
    }
    double wall = (double)(stk_now_ns() - t_epoch) / 1e9;
    epoch_result(run, a, e, done, wall, o->allreduce_s * (double)done);
  }
  if (stopping(run)) stk_loader_cancel(run->l);
}

/* The loader's counters of the timed epochs: the warm-up's taken out.
 * Levels (ring depth, memory, percentiles of the consumer's waits, which
 * start with the first epoch) stay as they are. */
static void stats_since(struct stk_loader_stats *st, const struct stk_loader_stats *w) {
  for (int i = 0; i < STK_STAGE_COUNT; i++) {
    struct stk_stage_stats *s = &st->stage[i];
    const struct stk_stage_stats *b = &w->stage[i];
    s->busy_ns -= STK__MIN(s->busy_ns, b->busy_ns);
    s->wait_in_ns -= STK__MIN(s->wait_in_ns, b->wait_in_ns);
    s->wait_out_ns -= STK__MIN(s->wait_out_ns, b->wait_out_ns);
    s->items -= STK__MIN(s->items, b->items);
    s->bytes -= STK__MIN(s->bytes, b->bytes);
  }
  st->wall_ns -= STK__MIN(st->wall_ns, w->wall_ns);
  st->read_ops -= STK__MIN(st->read_ops, w->read_ops);
  st->read_bytes -= STK__MIN(st->read_bytes, w->read_bytes);
}

static int validate(const struct stk_bench_opts *o, char *err) {
  const struct stk_workload *w = o->w;
  if (w->batch == 0) return stk__errf(err, STK_EINVAL, "batch size must be at least 1");
  if (!(w->compute_s >= 0) || !isfinite(w->compute_s))
    return stk__errf(err, STK_EINVAL, "compute time %g s is invalid (must be 0 or more)", w->compute_s);
  if (!(w->compute_stdev >= 0)) return stk__errf(err, STK_EINVAL, "compute stdev must be 0 or more");
  if (w->epochs == 0) return stk__errf(err, STK_EINVAL, "epochs must be at least 1");
  if (!(w->au_min >= 0 && w->au_min <= 1))
    return stk__errf(err, STK_EINVAL, "AU threshold %g is outside 0..1", w->au_min);
  if (o->accelerators > 4096) return stk__errf(err, STK_EINVAL, "%u accelerators in one process is too many (4096 at most)", o->accelerators);
  if (!(o->allreduce_s >= 0)) return stk__errf(err, STK_EINVAL, "all-reduce time must be 0 or more");
  return 0;
}

void stk__bench_aggregate(const struct stk_bench_opts *o, struct stk_bench_result *r) {
  double au = 0, sps = 0, load = 0, sync = 0, jitter = 0, wake = 0, comm = 0, compute = 0,
         acc_time = 0, ckpt = 0;
  uint32_t n_au = 0, n_ep = 0;
  for (uint32_t e = 0; e < r->epochs; e++) {
    double ep_sps = 0;
    int any = 0;
    for (uint32_t i = 0; i < r->accelerators; i++) {
      struct stk_bench_epoch *p = &r->per[(size_t)e * r->accelerators + i];
      if (p->steps == 0) continue;
      load += p->load_s;
      sync += p->sync_s;
      jitter += p->sync_jitter_s;
      wake += p->sync_wake_s;
      comm += p->comm_s;
      ckpt += p->ckpt_s;
      compute += p->compute_all_s;
      acc_time += p->wall_s;
      if (isfinite(p->au)) {
        au += p->au;
        n_au++;
        ep_sps += p->samples_per_s;
        any = 1;
      }
    }
    if (any) {
      sps += ep_sps;
      n_ep++;
    }
  }
  r->au = n_au ? au / n_au : NAN;
  r->samples_per_s = n_ep ? sps / n_ep : NAN;
  /* Bytes per sample as delivered, not the workload's nominal record size
   * (a dataset of other sizes would be misreported). */
  double per_sample = r->loader.samples ? (double)r->loader.bytes / (double)r->loader.samples : NAN;
  r->mib_per_s = r->samples_per_s * per_sample / 1048576.0;
  /* With no compute at all AU (compute over wall time) is 0 whatever the
   * data path does: the run measures throughput only, and neither passes
   * nor fails. */
  r->throughput_only = !r->ckpt_only && o->w->compute_s == 0 && o->w->compute_stdev == 0;
  if (r->throughput_only) r->au = NAN;
  r->pass = n_au && r->au >= r->au_min;
  r->data_stall_frac = acc_time > 0 ? load / acc_time : NAN;
  r->sync_stall_frac = acc_time > 0 ? sync / acc_time : NAN;
  r->sync_jitter_frac = acc_time > 0 ? jitter / acc_time : NAN;
  r->sync_wake_frac = acc_time > 0 ? wake / acc_time : NAN;
  r->comm_frac = acc_time > 0 ? comm / acc_time : NAN;
  r->compute_frac = acc_time > 0 ? compute / acc_time : NAN;
  r->ckpt_frac = acc_time > 0 ? ckpt / acc_time : NAN;
}

/* A token workload's windows: the corpus at o->data in Megatron
 * GPTDataset's order of windows of seq_len + 1 tokens; *n their count. */
static int open_windows(struct run *run, uint64_t *n, char *err) {
  const struct stk_bench_opts *o = run->o;
  char derr[STK_ERRMSG_MAX];
  struct stk_dataset_opts dopts = {.cache = o->cache};
  struct stk_tokens_opts to;
  stk_tokens_opts_init(&to);
  to.seq_len = o->w->seq_len;
  to.dataset = &dopts;
  int rc = stk_tokens_open(&run->tk, 1, &o->data, NULL, &to, derr);
  if (rc) return stk__errf(err, rc, "%s", derr);
  *n = stk_tokens_num_windows(run->tk);
  return 0;
}

static int open_loader(struct run *run, struct stk_dataset **ds, char *err) {
  const struct stk_bench_opts *o = run->o;
  char derr[STK_ERRMSG_MAX];
  struct stk_dataset_opts dopts = {.cache = o->cache};
  uint32_t world = o->world ? o->world : 1;
  uint64_t total_acc = (uint64_t)run->nacc * world, n = 0;
  int rc;
  if (o->w->seq_len) {
    if ((rc = open_windows(run, &n, err)) != 0) return rc;
    goto steps;
  }
  rc = stk_dataset_open(ds, o->data, &dopts, derr);
  if (rc) return stk__errf(err, rc, "%s", derr);
  if (o->w->format[0] && strcmp(stk_dataset_format(*ds), o->w->format) != 0) {
    rc = stk__errf(err, STK_EINVAL, "%s holds %s data but the workload's dataset.format is %s",
                   o->data, stk_dataset_format(*ds), o->w->format);
    stk_dataset_close(*ds);
    return rc;
  }
  /* The steps per epoch follow from the sample count: a remote dataset
   * without a manifest is counted (its shards staged) first. */
  if ((rc = stk_dataset_count(*ds, (const int *)o->cancel, derr)) != 0) {
    stk_dataset_close(*ds);
    return stk__errf(err, rc, "%s", derr);
  }
  n = stk_dataset_num_samples(*ds);
  uint64_t want = o->w->files * o->w->samples_per_file;
  if (want && n < want) {
    stk_dataset_close(*ds);
    return stk__errf(err, STK_EINVAL,
                     "%s has %llu samples but the workload asks for %llu (%llu files x %llu per file); "
                     "lower --files, or give --data a new folder and bench generates the "
                     "dataset there",
                     o->data, (unsigned long long)n, (unsigned long long)want,
                     (unsigned long long)o->w->files, (unsigned long long)o->w->samples_per_file);
  }
  if (!want && world > 1) {
    stk_dataset_close(*ds);
    return stk__errf(err, STK_EINVAL,
                     "across processes the workload must give the dataset size (files x samples "
                     "per file), so that every process runs the same steps");
  }
  if (want) n = want; /* use the configured dataset size, as DLIO does */
steps:
  run->steps = n / o->w->batch / total_acc;
  if (run->steps < 2) {
    stk_dataset_close(*ds); /* (the windows are closed by the caller) */
    return stk__errf(err, STK_EINVAL,
                     "%llu samples give %llu accelerators %llu step(s) of batch %u per epoch; AU leaves "
                     "out each epoch's first step, so at least 2 are needed (fewer accelerators, a "
                     "smaller batch or more data)",
                     (unsigned long long)n, (unsigned long long)total_acc,
                     (unsigned long long)run->steps, o->w->batch);
  }
  struct stk_loader_opts lo;
  stk_loader_opts_init(&lo);
  struct stk_sampler_opts so;
  stk_sampler_opts_init(&so);
  so.seed = o->seed;
  so.rank = o->rank;
  so.world = world;
  lo.sampler = &so;
  lo.batch_size = o->w->batch;
  lo.threads = o->read_threads ? o->read_threads : (o->w->read_threads ? o->w->read_threads : 0);
  lo.epochs = o->w->epochs;
  lo.drop_last = 1;
  lo.epoch_samples = run->steps * run->nacc * o->w->batch;
  lo.io_engine = o->io_engine;
  lo.direct = o->direct;
  lo.skip_verify = o->skip_verify;
  /* A benchmark stops at a bad sample: a skipped one would cost nothing
   * and flatter the figures. */
  lo.on_error = STK_ON_ERROR_FAIL;
  /* Every accelerator holds a batch while it computes, and the next step
   * needs one ready for each: depth 2N lets the loader prepare a whole
   * step ahead. */
  lo.prefetch = 2 * run->nacc;
  lo.prefetch_max = STK__MAX(16, 4 * run->nacc);
  double batch_bytes = o->w->seq_len ? o->w->batch * (o->w->seq_len + 1.0) * 4
                                    : o->w->batch * (o->w->record_bytes + 3 * o->w->record_stdev);
  double cap = batch_bytes * (lo.prefetch_max + 4);
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  double ram = pages > 0 && psz > 0 ? (double)pages * (double)psz : 8e9;
  lo.mem_cap = (uint64_t)STK__MAX(1073741824.0, STK__MIN(cap, ram / 2));
  rc = run->tk ? stk_loader_open_tokens(&run->l, run->tk, &lo, derr)
               : stk_loader_open(&run->l, *ds, &lo, derr);
  if (rc) {
    stk_dataset_close(*ds);
    return stk__errf(err, rc, "%s", derr);
  }
  /* Batches mapped from the page cache take no buffer memory: the whole
   * ring fills whatever the cap (a batch that must be copied still stops
   * the fill at the cap: see warm_up). */
  run->fill = strcmp(stk_loader_engine(run->l), "mmap") == 0
                  ? lo.prefetch + 2
                  : stk__bench_fill(lo.prefetch, lo.mem_cap, batch_bytes);
  return 0;
}

/* A process that stops before its last step (or before its first) makes one
 * more cross-process barrier call carrying why, unless one already reported
 * a stop: its peers are waiting in that call, or will be. One that finished
 * every step must not: its peers made the same number of calls. */
static void leave_job(struct run *run, int rc) {
  const struct stk_bench_opts *o = run->o;
  if (!o->global_barrier || run->global_rc) return;
  if (run->steps && run->global_calls == run->steps * run->epochs) return;
  o->global_barrier(o->global_ctx, rc ? rc : STK_ECANCELED);
}

void stk_bench_opts_init_sized(struct stk_bench_opts *o, size_t size) {
  stk__opts_init(o, sizeof *o, size);
}

int stk__bench_opts_take(struct stk_bench_opts *own, struct stk_workload *w,
                         const struct stk_bench_opts *o, char *err) {
  int rc = stk__opts_take(own, sizeof *own, o, "stk_bench_opts", err);
  if (!rc && !own->w) rc = stk__errf(err, STK_EINVAL, "stk_bench_opts: no workload (w is NULL)");
  if (!rc) rc = stk__workload_take(w, own->w, err);
  own->w = w;
  return rc;
}

int stk_bench_run(const struct stk_bench_opts *oin, struct stk_bench_result *r, char *err) {
  memset(r, 0, sizeof *r);
  struct stk_bench_opts own; /* an older caller's structs are read only to their ends */
  struct stk_workload wl;
  int trc = stk__bench_opts_take(&own, &wl, oin, err);
  if (trc) return trc;
  const struct stk_bench_opts *o = &own;
  struct run run;
  memset(&run, 0, sizeof run);
  run.o = o;
  run.r = r;
  run.nacc = o->accelerators ? o->accelerators : 1;
  run.epochs = o->w->epochs;
  run.margin = 200000;
  struct stk_dataset *ds = NULL;
  struct acc *accs = NULL;
  int rc = validate(o, err);
  if (rc) goto out;
  rc = open_loader(&run, &ds, err);
  if (rc) goto out;
  r->accelerators = run.nacc;
  r->processes = r->hosts = 1;
  r->epochs = run.epochs;
  r->steps_per_epoch = run.steps;
  r->au_min = o->w->au_min;
  r->per = calloc((size_t)run.epochs * run.nacc, sizeof *r->per);
  uint64_t tl = STK__MIN((uint64_t)TIMELINE_MAX, run.steps * run.epochs * run.nacc);
  r->timeline = calloc(tl, sizeof *r->timeline);
  accs = calloc(run.nacc, sizeof *accs);
  if (!r->per || !r->timeline || !accs) {
    rc = stk__errf(err, STK_ENOMEM, "out of memory for %u accelerators", run.nacc);
    goto out_loader;
  }
  for (uint32_t i = 0; i < run.nacc; i++)
    stk_rng_seed(&accs[i].rng, stk_mix64(o->seed ^ 0xacce1, (uint64_t)o->rank * 65536 + i));
  if (o->w->ckpt.enabled) {
    const struct stk_ckpt_spec *c = &o->w->ckpt;
    run.next_ckpt_epoch = c->after_epoch ? c->after_epoch : 1;
    uint64_t saves = 0, every = c->epochs_between ? c->epochs_between : 1;
    if (c->steps_between)
      saves = run.steps / c->steps_between * run.epochs;
    else if (run.next_ckpt_epoch <= run.epochs)
      saves = (run.epochs - run.next_ckpt_epoch) / every + 1;
    rc = stk__ckpt_open(&run.ck, o, run.nacc, (uint32_t)STK__MIN(saves, 1u << 20), &r->ckpt, err);
    if (rc) goto out_loader;
  }
  warm_up(&run);
  /* Every figure below covers the timed epochs only. */
  struct stk_loader_stats warm;
  struct stk__host_snap h0, h1;
  stk_loader_stats(run.l, &warm);
  stk__bench_host_snap("/proc", &h0);
  uint64_t cpu0 = stk_cpu_ns();
  run.t0 = stk_now_ns();
  drive(&run, accs);
  r->wall_s = (double)(stk_now_ns() - run.t0) / 1e9;
  r->cpu_ns = stk_cpu_ns() - cpu0;
  stk__bench_host_snap("/proc", &h1);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  stk__bench_host_delta(&h0, &h1, cores > 0 ? (uint32_t)cores : 1, &r->host);
  r->ntimeline = STK__MIN(run.ntimeline, tl);
  if (run.global_rc && run.global_rc != STK_ECANCELED)
    run_fail(&run, run.global_rc, "another process of the job failed and stopped the run");
  r->interrupted = !run.err && (cancelled(&run) || run.global_rc == STK_ECANCELED);
  stk_loader_stats(run.l, &r->loader);
  stats_since(&r->loader, &warm);
  snprintf(r->engine, sizeof r->engine, "%s", stk_loader_engine(run.l));
  stk__bench_aggregate(o, r);
  stk__bench_verdict(r);
  rc = run.err;
  if (rc) stk__errf(err, rc, "%s", run.errmsg);
out_loader:
  stk__ckpt_close(run.ck);
  stk_loader_close(run.l);
  stk_dataset_close(ds);
out:
  stk_tokens_close(run.tk);
  free(accs);
  leave_job(&run, rc);
  if (rc) stk_bench_result_free(r);
  return rc;
}

/* One compute interval (time_between_checkpoints) of every accelerator,
 * then the job's barrier. Returns 0 or nonzero to stop. */
static int ckpt_compute(struct run *run, double secs, double *compute) {
  const struct stk_bench_opts *o = run->o;
  uint64_t t = stk_now_ns();
  if (secs > 0) wait_until(run, t + (uint64_t)(secs * 1e9), o->busy_compute);
  *compute += (double)(stk_now_ns() - t) / 1e9;
  return cancelled(run) ? -1 : global_barrier(run);
}

int stk_bench_ckpt_run(const struct stk_bench_opts *oin, struct stk_bench_result *r, char *err) {
  memset(r, 0, sizeof *r);
  struct stk_bench_opts own;
  struct stk_workload wl;
  int trc = stk__bench_opts_take(&own, &wl, oin, err);
  if (trc) return trc;
  const struct stk_bench_opts *o = &own;
  struct run run;
  memset(&run, 0, sizeof run);
  run.o = o;
  run.r = r;
  run.nacc = o->accelerators ? o->accelerators : 1;
  run.epochs = 1;
  run.margin = 200000;
  const struct stk_ckpt_spec *c = &o->w->ckpt;
  int rc = 0;
  if (!(c->time_between_s >= 0) || !isfinite(c->time_between_s))
    return stk__errf(err, STK_EINVAL, "time between checkpoints %g s is invalid", c->time_between_s);
  if (c->num_read > c->num_write)
    return stk__errf(err, STK_EINVAL, "%u checkpoints to read but only %u written (DLIO refuses "
                     "it too)", c->num_read, c->num_write);
  r->ckpt_only = 1;
  r->accelerators = run.nacc;
  r->processes = r->hosts = 1;
  r->epochs = 1;
  r->steps_per_epoch = (uint64_t)c->num_write + c->num_read;
  r->au_min = o->w->au_min;
  r->per = calloc(run.nacc, sizeof *r->per);
  if (!r->per) return stk__errf(err, STK_ENOMEM, "out of memory for %u accelerators", run.nacc);
  if ((rc = stk__ckpt_open(&run.ck, o, run.nacc, c->num_write, &r->ckpt, err))) goto out;
  struct stk__host_snap h0, h1;
  stk__bench_host_snap("/proc", &h0);
  uint64_t cpu0 = stk_cpu_ns();
  run.t0 = stk_now_ns();
  double compute = 0, secs;
  uint64_t done = 0;
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  for (uint32_t i = 0; i < c->num_write + c->num_read && !rc; i++) {
    if (ckpt_compute(&run, c->time_between_s, &compute)) break;
    int load = i >= c->num_write;
    uint64_t step = load ? i - c->num_write + 1 : i + 1; /* DLIO: epoch 1, steps 1.. */
    rc = load ? stk__ckpt_load(run.ck, 1, step, &secs, err) : stk__ckpt_save(run.ck, 1, step, &secs, err);
    if (rc) break; /* the barrier at out tells the other processes */
    /* Under MPI the checkpoint is done when every rank's share is: its
     * time runs until the slowest process gets here. */
    uint64_t tb = stk_now_ns();
    if (global_barrier(&run)) break;
    stk__ckpt_extend(run.ck, load, (double)(stk_now_ns() - tb) / 1e9);
    done++;
    if (o->progress) o->progress(o->progress_ctx, 0, i + 1, r->steps_per_epoch, NAN);
  }
  r->wall_s = (double)(stk_now_ns() - run.t0) / 1e9;
  r->cpu_ns = stk_cpu_ns() - cpu0;
  stk__bench_host_snap("/proc", &h1);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  stk__bench_host_delta(&h0, &h1, cores > 0 ? (uint32_t)cores : 1, &r->host);
  r->interrupted = !rc && (cancelled(&run) || run.global_rc == STK_ECANCELED);
  if (!rc && run.global_rc && run.global_rc != STK_ECANCELED)
    rc = stk__errf(err, run.global_rc, "another process of the job failed and stopped the run");
  for (uint32_t i = 0; i < run.nacc; i++) {
    struct stk_bench_epoch *ep = &r->per[i];
    ep->steps = done;
    ep->wall_s = r->wall_s;
    ep->compute_s = ep->compute_all_s = compute;
    ep->ckpt_s = r->ckpt.save_s + r->ckpt.load_s;
    ep->sync_s = STK__MAX(0.0, r->wall_s - compute - ep->ckpt_s);
    ep->au = compute > 0 && r->wall_s > 0 ? compute / r->wall_s : NAN;
  }
  stk__bench_aggregate(o, r);
  stk__bench_verdict(r);
out:
  stk__ckpt_close(run.ck);
  if (o->global_barrier && !run.global_rc && (rc || r->interrupted))
    o->global_barrier(o->global_ctx, rc ? rc : STK_ECANCELED);
  if (rc) stk_bench_result_free(r);
  return rc;
}

void stk_bench_result_free(struct stk_bench_result *r) {
  free(r->per);
  free(r->timeline);
  r->per = NULL;
  r->timeline = NULL;
}
