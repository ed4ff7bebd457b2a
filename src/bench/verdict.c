/* The one-line verdict: are the accelerators fed, and if not, what is in
 * the way. Accelerator time splits into compute, data stall (waiting for a
 * batch), sync stall (waiting at the barrier for slower peers) and modelled
 * communication. When data stall dominates, the loader's stage stats say
 * which stage saturated:
 *   storage  the reader had reads in flight nearly all the time while the
 *            decode workers sat idle waiting for input;
 *   decode   the decode workers (parse, checksums, decode) were busy nearly
 *            all the time;
 *   cpu      the whole process used nearly every core without one stage
 *            standing out;
 *   ring     no stage saturated, yet batches were not ready in time: the
 *            prefetch ring was too shallow for the consumer's jitter. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "../base/base.h"
#include "bench_impl.h"

#define SATURATED 0.85 /* a stage busy this share of the wall time is the limit */
#define STALL_OK 0.05  /* stall shares below this leave an accelerator "fed" */

static void say(struct stk_bench_result *r, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void say(struct stk_bench_result *r, const char *what, const char *fmt, ...) {
  snprintf(r->bottleneck, sizeof r->bottleneck, "%s", what);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->verdict, sizeof r->verdict, fmt, ap);
  va_end(ap);
}

static void data_verdict(struct stk_bench_result *r, double stall) {
  const struct stk_loader_stats *st = &r->loader;
  double wall = (double)st->wall_ns;
  if (wall <= 0) wall = 1;
  const struct stk_stage_stats *rd = &st->stage[STK_STAGE_READ], *dec = &st->stage[STK_STAGE_DECODE];
  /* Stats gathered from several processes (MPI) are sums: per reader and
   * per host, as for one process. */
  double read_util = (double)rd->busy_ns / (wall * (rd->threads ? rd->threads : 1));
  double dec_util = dec->threads ? (double)dec->busy_ns / (wall * dec->threads) : 0;
  double dec_idle = dec->threads ? (double)dec->wait_in_ns / (wall * dec->threads) : 0;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  double hosts = r->hosts > 1 ? r->hosts : 1;
  double cpu_util = cores > 0 ? (double)r->cpu_ns / (wall * (double)cores * hosts) : 0;
  double gib_s = (double)st->read_bytes / (wall / 1e9) / 1073741824.0;
  stall *= 100;
  if (dec_util >= SATURATED)
    say(r, "decode",
        "decode-bound: %u decode workers were busy %.0f%% of the time (parse, checksums, "
        "decode); accelerators waited %.1f%% for data; more cores or cheaper decoding would help",
        dec->threads, 100 * dec_util, stall);
  else if (read_util >= SATURATED && dec_idle > 0.3)
    say(r, "storage",
        "storage-bound: reads saturated at %.2f GiB/s while decode workers sat idle %.0f%% of the "
        "time; accelerators waited %.1f%% for data; more read threads will not help, faster "
        "storage or a cache will",
        gib_s, 100 * dec_idle, stall);
  else if (cpu_util >= SATURATED)
    say(r, "cpu",
        "cpu-bound: the process used %.0f%% of %ld cores (reads at %.2f GiB/s); accelerators "
        "waited %.1f%% for data; fewer emulated accelerators per host or more cores would help",
        100 * cpu_util, cores, gib_s, stall);
  else
    say(r, "ring",
        "ring-bound: no stage saturated (reads %.2f GiB/s, decode busy %.0f%%) but batches were "
        "late; the prefetch ring (depth %u, at most %u) ran dry under jitter; accelerators waited "
        "%.1f%% for data",
        gib_s, 100 * dec_util, st->ring_depth, st->ring_depth_max, stall);
}

void stk__bench_verdict(struct stk_bench_result *r) {
  double data = r->data_stall_frac, sync = r->sync_stall_frac;
  double jitter = isfinite(r->sync_jitter_frac) ? r->sync_jitter_frac : sync;
  /* Barrier time that compute jitter does not explain was spent waiting
   * for a peer whose batch was late: data stall seen from its neighbours. */
  double late = sync > jitter ? sync - jitter : 0;
  if (!isfinite(r->au)) {
    say(r, "none", "no verdict: no epoch ran past its first step");
    return;
  }
  if (r->pass && data < STALL_OK && sync < STALL_OK) {
    say(r, "none", "fed: AU %.3f >= %.2f; data stall %.1f%%, sync stall %.1f%%", r->au,
        r->au_min, 100 * data, 100 * sync);
    return;
  }
  if (jitter > data + late) {
    say(r, "sync",
        "sync-bound: accelerators waited %.1f%% of the time at the barrier for peers with longer "
        "compute (jitter), %.1f%% for data (their own batch or a late peer's)",
        100 * jitter, 100 * (data + late));
    return;
  }
  data_verdict(r, data + late);
}
