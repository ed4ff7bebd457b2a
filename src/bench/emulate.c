/* The accelerator emulator: N threads share one loader; each step every
 * accelerator takes a batch, "computes" for the workload's time, and waits
 * at a barrier for the others (the emulated all-reduce). AU follows DLIO:
 * per accelerator and epoch, compute time over wall time, leaving out the
 * first step's load and compute; averaged over accelerators and epochs.
 *
 * Why one loader for N accelerators: DLIO gives each rank its own reader
 * threads, which is what limits how many ranks one host can emulate. Here
 * the host's read and decode threads serve all emulated accelerators, so an
 * emulated accelerator costs one mostly sleeping thread. In aggregate the
 * data read per epoch is the same: steps x accelerators x batch samples,
 * steps = floor(samples / batch / accelerators) as in DLIO. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../base/base.h"
#include "bench_impl.h"
#include "stoker/bench.h"

#define TIMELINE_MAX (1u << 20)

/* A barrier that a failure can break, so no accelerator waits forever for
 * a peer that has stopped. The last thread to arrive runs the cross-process
 * barrier (MPI) before releasing the others; when that reports a stopped
 * peer, the barrier breaks for this step's waiters too. */
struct barrier {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint32_t n, waiting;
  uint64_t gen;
  int broken;
  int (*global)(void *, int);
  void *global_ctx;
  uint64_t global_calls; /* completed cross-process barriers */
  atomic_int global_rc;  /* nonzero once one reported a stopped peer */
};

static void barrier_break(struct barrier *b) {
  pthread_mutex_lock(&b->mu);
  b->broken = 1;
  pthread_cond_broadcast(&b->cv);
  pthread_mutex_unlock(&b->mu);
}

/* 0 when everyone arrived; -1 when the barrier was broken. */
static int barrier_wait(struct barrier *b) {
  pthread_mutex_lock(&b->mu);
  if (b->broken) {
    pthread_mutex_unlock(&b->mu);
    return -1;
  }
  uint64_t gen = b->gen;
  if (++b->waiting == b->n) {
    if (b->global) {
      pthread_mutex_unlock(&b->mu);
      int rc = b->global(b->global_ctx, 0);
      pthread_mutex_lock(&b->mu);
      b->global_calls++;
      if (rc) {
        atomic_store(&b->global_rc, rc);
        b->broken = 1; /* gen stays: every thread of this step returns -1 */
        pthread_cond_broadcast(&b->cv);
        pthread_mutex_unlock(&b->mu);
        return -1;
      }
    }
    b->waiting = 0;
    b->gen++;
    pthread_cond_broadcast(&b->cv);
  } else {
    while (gen == b->gen && !b->broken) pthread_cond_wait(&b->cv, &b->mu);
  }
  int rc = b->broken && gen == b->gen ? -1 : 0;
  pthread_mutex_unlock(&b->mu);
  return rc;
}

struct run {
  const struct stk_bench_opts *o;
  struct stk_bench_result *r;
  struct stk_loader *l;
  pthread_mutex_t next_mu; /* the loader has one consumer at a time */
  struct barrier bar;
  uint64_t steps;
  uint32_t nacc, epochs;
  uint64_t t0;
  atomic_uint_fast64_t ntimeline;
  atomic_int failed;
  int err;
  char errmsg[STK_ERRMSG_MAX];
  pthread_mutex_t err_mu;
};

struct acc {
  struct run *run;
  uint32_t id;
  pthread_t th;
};

static void run_fail(struct run *run, int code, const char *msg) {
  pthread_mutex_lock(&run->err_mu);
  if (!run->err) {
    run->err = code;
    snprintf(run->errmsg, sizeof run->errmsg, "%s", msg);
  }
  pthread_mutex_unlock(&run->err_mu);
  atomic_store(&run->failed, 1);
  barrier_break(&run->bar);
}

static int stopping(struct run *run) {
  return atomic_load(&run->failed) || atomic_load(&run->bar.global_rc) ||
         (run->o->cancel && *run->o->cancel);
}

static double draw_compute(const struct stk_bench_opts *o, struct stk_rng *rng) {
  double mean = o->w.compute_s, sd = o->w.compute_stdev, t = mean;
  if (o->compute_dist == STK_COMPUTE_NORMAL)
    t = mean + sd * stk_rng_normal(rng);
  else if (o->compute_dist == STK_COMPUTE_UNIFORM)
    t = mean + sd * sqrt(3.0) * (2.0 * stk_rng_double(rng) - 1.0); /* same stdev */
  return t > 0 ? t : 0;
}

/* Sleep (or spin) until deadline: a sleep is what DLIO does; the tail is
 * spun to keep the step's overhead within a few microseconds. */
static void compute_until(uint64_t deadline, int busy) {
  for (;;) {
    uint64_t now = stk_now_ns();
    if (now >= deadline) return;
    uint64_t left = deadline - now;
    if (!busy && left > 200000)
      stk_sleep_ns(left - 100000);
    else if (!busy && left > 20000)
      stk_sleep_ns(left / 2);
  }
}

static void record_step(struct run *run, uint32_t acc, uint64_t epoch, uint64_t t_end, double load,
                        double compute, double sync) {
  uint64_t i = atomic_fetch_add(&run->ntimeline, 1);
  if (i >= TIMELINE_MAX || !run->r->timeline) return;
  run->r->timeline[i] = (struct stk_bench_step){(float)((double)(t_end - run->t0) / 1e9), (float)load,
                                                (float)compute, (float)sync, (uint16_t)acc,
                                                (uint16_t)epoch};
}

static void *acc_main(void *arg) {
  struct acc *a = arg;
  struct run *run = a->run;
  const struct stk_bench_opts *o = run->o;
  struct stk_rng rng;
  stk_rng_seed(&rng, stk_mix64(o->seed ^ 0xacce1, (uint64_t)o->rank * 65536 + a->id));
  uint64_t last_progress = 0;
  for (uint32_t e = 0; e < run->epochs && !stopping(run); e++) {
    struct stk_bench_epoch *ep = &run->r->per[(size_t)e * run->nacc + a->id];
    uint64_t t_epoch = stk_now_ns(), step0_proc = 0;
    double compute = 0, compute_all = 0, load = 0, sync = 0, comm = 0;
    uint64_t s;
    for (s = 0; s < run->steps && !stopping(run); s++) {
      uint64_t ts = stk_now_ns();
      struct stk_batch *b;
      pthread_mutex_lock(&run->next_mu);
      int rc = stk_loader_next(run->l, &b);
      pthread_mutex_unlock(&run->next_mu);
      if (rc) {
        char msg[STK_ERRMSG_MAX + 64];
        if (rc == STK_ECANCELED) break;
        snprintf(msg, sizeof msg, "%s", rc == STK_EOF ? "the loader ran out of batches before the epoch's steps ended" : stk_loader_errmsg(run->l));
        run_fail(run, rc == STK_EOF ? STK_EIO : rc, msg);
        break;
      }
      uint64_t tl = stk_now_ns();
      compute_until(tl + (uint64_t)(draw_compute(o, &rng) * 1e9), o->busy_compute);
      uint64_t tc = stk_now_ns();
      stk_batch_release(run->l, b);
      if (s == 0)
        step0_proc = tc - ts;
      else
        compute += (double)(tc - tl) / 1e9;
      compute_all += (double)(tc - tl) / 1e9;
      load += (double)(tl - ts) / 1e9;
      if (barrier_wait(&run->bar) != 0) break;
      uint64_t tb = stk_now_ns();
      sync += (double)(tb - tc) / 1e9;
      if (o->allreduce_s > 0) {
        compute_until(tb + (uint64_t)(o->allreduce_s * 1e9), o->busy_compute);
        comm += (double)(stk_now_ns() - tb) / 1e9;
      }
      record_step(run, a->id, e, stk_now_ns(), (double)(tl - ts) / 1e9, (double)(tc - tl) / 1e9,
                  (double)(tb - tc) / 1e9);
      if (a->id == 0 && o->progress && tb - last_progress > 250000000ull) {
        last_progress = tb;
        double metric = (double)(tb - t_epoch - step0_proc) / 1e9;
        o->progress(o->progress_ctx, e, s + 1, run->steps, metric > 0 && s > 0 ? compute / metric : NAN);
      }
    }
    double wall = (double)(stk_now_ns() - t_epoch) / 1e9;
    double metric = wall - (double)step0_proc / 1e9;
    ep->steps = s;
    ep->wall_s = wall;
    ep->compute_s = compute;
    ep->compute_all_s = compute_all;
    ep->first_step_s = (double)step0_proc / 1e9;
    ep->load_s = load;
    ep->sync_s = sync;
    ep->comm_s = comm;
    /* An epoch cut short (Ctrl-C) still reports what it measured. */
    ep->au = s > 1 && metric > 0 ? compute / metric : NAN;
    ep->samples_per_s = s > 1 && metric > 0 ? (double)(s - 1) * o->w.batch / metric : NAN;
  }
  if (stopping(run)) { /* release peers at the barrier and in the loader */
    barrier_break(&run->bar);
    stk_loader_cancel(run->l);
  }
  return NULL;
}

static int validate(const struct stk_bench_opts *o, char *err) {
  const struct stk_workload *w = &o->w;
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
  double au = 0, sps = 0, load = 0, sync = 0, comm = 0, compute = 0, acc_time = 0;
  uint32_t n_au = 0, n_ep = 0;
  for (uint32_t e = 0; e < r->epochs; e++) {
    double ep_sps = 0;
    int any = 0;
    for (uint32_t i = 0; i < r->accelerators; i++) {
      struct stk_bench_epoch *p = &r->per[(size_t)e * r->accelerators + i];
      if (p->steps == 0) continue;
      load += p->load_s;
      sync += p->sync_s;
      comm += p->comm_s;
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
  r->mib_per_s = r->samples_per_s * o->w.record_bytes / 1048576.0;
  r->pass = n_au && r->au >= r->au_min;
  r->data_stall_frac = acc_time > 0 ? load / acc_time : NAN;
  r->sync_stall_frac = acc_time > 0 ? sync / acc_time : NAN;
  r->comm_frac = acc_time > 0 ? comm / acc_time : NAN;
  r->compute_frac = acc_time > 0 ? compute / acc_time : NAN;
}

static int open_loader(struct run *run, struct stk_dataset **ds, char *err) {
  const struct stk_bench_opts *o = run->o;
  char derr[STK_ERRMSG_MAX];
  int rc = stk_dataset_open(ds, o->data, NULL, derr);
  if (rc) return stk__errf(err, rc, "%s", derr);
  if (o->w.format[0] && strcmp(stk_dataset_format(*ds), o->w.format) != 0) {
    rc = stk__errf(err, STK_EINVAL, "%s holds %s data but the workload's dataset.format is %s",
                   o->data, stk_dataset_format(*ds), o->w.format);
    stk_dataset_close(*ds);
    return rc;
  }
  uint64_t n = stk_dataset_num_samples(*ds);
  uint32_t world = o->world ? o->world : 1;
  uint64_t total_acc = (uint64_t)run->nacc * world;
  uint64_t want = o->w.files * o->w.samples_per_file;
  if (want && n < want) {
    stk_dataset_close(*ds);
    return stk__errf(err, STK_EINVAL,
                     "%s has %llu samples but the workload asks for %llu (%llu files x %llu per file); "
                     "generate it with `stoker bench --generate` or lower --files",
                     o->data, (unsigned long long)n, (unsigned long long)want,
                     (unsigned long long)o->w.files, (unsigned long long)o->w.samples_per_file);
  }
  if (!want && world > 1) {
    stk_dataset_close(*ds);
    return stk__errf(err, STK_EINVAL,
                     "across processes the workload must give the dataset size (files x samples "
                     "per file), so that every process runs the same steps");
  }
  if (want) n = want; /* use the configured dataset size, as DLIO does */
  run->steps = n / o->w.batch / total_acc;
  if (run->steps < 2) {
    stk_dataset_close(*ds);
    return stk__errf(err, STK_EINVAL,
                     "%llu samples give %llu accelerators %llu step(s) of batch %u per epoch; AU leaves "
                     "out each epoch's first step, so at least 2 are needed (fewer accelerators, a "
                     "smaller batch or more data)",
                     (unsigned long long)n, (unsigned long long)total_acc,
                     (unsigned long long)run->steps, o->w.batch);
  }
  struct stk_loader_opts lo = {0};
  lo.batch_size = o->w.batch;
  lo.threads = o->read_threads ? o->read_threads : (o->w.read_threads ? o->w.read_threads : 0);
  lo.epochs = o->w.epochs;
  lo.drop_last = 1;
  lo.epoch_samples = run->steps * run->nacc * o->w.batch;
  lo.sampler.seed = o->seed;
  lo.sampler.rank = o->rank;
  lo.sampler.world = world;
  lo.io_engine = o->io_engine;
  lo.direct = o->direct;
  lo.skip_verify = o->skip_verify;
  lo.prefetch = run->nacc < 2 ? 2 : run->nacc;
  lo.prefetch_max = lo.prefetch * 2 < 16 ? 16 : lo.prefetch * 2;
  double batch_bytes = o->w.batch * (o->w.record_bytes + 3 * o->w.record_stdev);
  double cap = batch_bytes * (lo.prefetch_max + 4);
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  double ram = pages > 0 && psz > 0 ? (double)pages * (double)psz : 8e9;
  lo.mem_cap = (uint64_t)STK__MAX(1073741824.0, STK__MIN(cap, ram / 2));
  rc = stk_loader_open(&run->l, *ds, &lo, derr);
  if (rc) {
    stk_dataset_close(*ds);
    return stk__errf(err, rc, "%s", derr);
  }
  return 0;
}

/* A process that stops before its last step (or before its first) makes one
 * more cross-process barrier call carrying why, unless one already reported
 * a stop: its peers are waiting in that call, or will be. One that finished
 * every step must not: its peers made the same number of calls. */
static void leave_job(struct run *run, int rc) {
  const struct stk_bench_opts *o = run->o;
  if (!o->global_barrier || atomic_load(&run->bar.global_rc)) return;
  if (run->steps && run->bar.global_calls == run->steps * run->epochs) return;
  o->global_barrier(o->global_ctx, rc ? rc : STK_ECANCELED);
}

int stk_bench_run(const struct stk_bench_opts *o, struct stk_bench_result *r, char *err) {
  memset(r, 0, sizeof *r);
  struct run run;
  memset(&run, 0, sizeof run);
  run.o = o;
  run.r = r;
  run.nacc = o->accelerators ? o->accelerators : 1;
  run.epochs = o->w.epochs;
  pthread_mutex_init(&run.next_mu, NULL);
  pthread_mutex_init(&run.err_mu, NULL);
  pthread_mutex_init(&run.bar.mu, NULL);
  pthread_cond_init(&run.bar.cv, NULL);
  run.bar.n = run.nacc;
  run.bar.global = o->global_barrier;
  run.bar.global_ctx = o->global_ctx;
  struct stk_dataset *ds = NULL;
  int rc = validate(o, err);
  if (rc) goto out;
  rc = open_loader(&run, &ds, err);
  if (rc) goto out;
  r->accelerators = run.nacc;
  r->processes = r->hosts = 1;
  r->epochs = run.epochs;
  r->steps_per_epoch = run.steps;
  r->au_min = o->w.au_min;
  r->per = calloc((size_t)run.epochs * run.nacc, sizeof *r->per);
  uint64_t tl = STK__MIN((uint64_t)TIMELINE_MAX, run.steps * run.epochs * run.nacc);
  r->timeline = calloc(tl, sizeof *r->timeline);
  struct acc *accs = calloc(run.nacc, sizeof *accs);
  if (!r->per || !r->timeline || !accs) {
    free(accs);
    rc = stk__errf(err, STK_ENOMEM, "out of memory for %u accelerators", run.nacc);
    goto out_loader;
  }
  uint64_t cpu0 = stk_cpu_ns();
  run.t0 = stk_now_ns();
  uint32_t started = 0;
  for (; started < run.nacc; started++) {
    accs[started] = (struct acc){&run, started, 0};
    if (pthread_create(&accs[started].th, NULL, acc_main, &accs[started]) != 0) {
      run_fail(&run, STK_ESYS, "cannot start accelerator threads");
      break;
    }
  }
  for (uint32_t i = 0; i < started; i++) pthread_join(accs[i].th, NULL);
  free(accs);
  r->wall_s = (double)(stk_now_ns() - run.t0) / 1e9;
  r->cpu_ns = stk_cpu_ns() - cpu0;
  r->ntimeline = STK__MIN(atomic_load(&run.ntimeline), tl);
  int peer = atomic_load(&run.bar.global_rc);
  if (peer && peer != STK_ECANCELED)
    run_fail(&run, peer, "another process of the job failed and stopped the run");
  r->interrupted = !run.err && ((o->cancel && *o->cancel) || peer == STK_ECANCELED);
  stk_loader_stats(run.l, &r->loader);
  stk__bench_aggregate(o, r);
  stk__bench_verdict(o, r);
  rc = run.err;
  if (rc) stk__errf(err, rc, "%s", run.errmsg);
out_loader:
  stk_loader_close(run.l);
  stk_dataset_close(ds);
out:
  leave_job(&run, rc);
  pthread_mutex_destroy(&run.next_mu);
  pthread_mutex_destroy(&run.err_mu);
  pthread_mutex_destroy(&run.bar.mu);
  pthread_cond_destroy(&run.bar.cv);
  if (rc) stk_bench_result_free(r);
  return rc;
}

void stk_bench_result_free(struct stk_bench_result *r) {
  free(r->per);
  free(r->timeline);
  r->per = NULL;
  r->timeline = NULL;
}
