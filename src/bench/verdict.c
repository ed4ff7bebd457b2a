/* The one-line verdict: are the accelerators fed, and if not, what is in
 * the way and what to change. It is a function of the figures recorded in
 * the result alone (time split, the loader's stage stats of the timed
 * epochs, the process's CPU time, and what /proc said about the rest of the
 * machine), so the same run always gets the same verdict, and the JSON
 * report holds every input. docs/bench.md lists the rules; in order:
 *
 *   checkpoint  a checkpoint-only workload: the saves' and loads' figures;
 *               or in training, checkpoints took more accelerator time
 *               than data and jitter did (and at least 5%)
 *   fed         AU met and every stall under 5%
 *   wakeup      the largest loss is the emulator's driver waking late
 *               after compute (a busy machine, or scheduler latency)
 *   sync        compute jitter explains more barrier time than data did
 *   contention  other processes (or the hypervisor: steal) took a large
 *               share of the CPU while the machine was saturated: the
 *               pipeline was not given the CPU it needed
 *   decode      the decode workers were busy nearly all the time
 *   storage     the reader was saturated, decode idle, and the reads went
 *               to a block device (or a remote origin through the cache)
 *   read        the reader was saturated but the data came from the page
 *               cache (copying and checksums are the limit, not storage),
 *               or it cannot be told where it came from
 *   cpu         the process itself used nearly every core
 *   storage     (again) nothing saturated, batches were late, and a share
 *               of the reads went to a device (or the origin): stoker's
 *               own latency cannot be told apart from the device's
 *   latency     nothing saturated, yet batches were late */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#include "../base/base.h"
#include "bench_impl.h"

#define SATURATED 0.85  /* a stage busy this share of the wall time is the limit */
#define STALL_OK 0.05   /* stall shares below this leave an accelerator "fed" */
#define CONTENDED 0.20  /* others' CPU + steal, as a share of all cores */
#define STEAL_HIGH 0.10 /* steal alone, as a share of all cores */
#define DEVICE_SHARE 0.25 /* device reads / bytes read that make the reads "storage" */
#define CACHE_SHARE 0.02  /* at most this share from a device: "from the page cache" */

static void say(struct stk_bench_result *r, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void say(struct stk_bench_result *r, const char *what, const char *fmt, ...) {
  snprintf(r->bottleneck, sizeof r->bottleneck, "%s", what);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->verdict, sizeof r->verdict, fmt, ap);
  va_end(ap);
}

/* The machine during the timed epochs, as shares of all its cores. */
struct machine {
  int known;        /* /proc/stat read, and one host (MPI across hosts: unknown) */
  uint32_t cores;
  double own, others, steal;
};

static struct machine machine_of(const struct stk_bench_result *r) {
  struct machine m = {0};
  const struct stk_bench_host *h = &r->host;
  m.cores = h->cores;
  double wall = r->wall_s > 0 ? r->wall_s : (double)r->loader.wall_ns / 1e9;
  if (!h->cpu_valid || h->cores == 0 || !(wall > 0) || r->hosts > 1) return m;
  double all = wall * h->cores, own = (double)r->cpu_ns / 1e9;
  m.known = 1;
  m.own = own / all;
  m.others = h->busy_cpu_s > own ? (h->busy_cpu_s - own) / all : 0;
  m.steal = h->steal_cpu_s / all;
  return m;
}

static int contended(const struct machine *m) {
  if (!m->known) return 0;
  return m->steal >= STEAL_HIGH ||
         (m->others + m->steal >= CONTENDED && m->own + m->others + m->steal >= SATURATED);
}

static void contention_verdict(struct stk_bench_result *r, const struct machine *m,
                               const char *what, double lost) {
  say(r, "contention",
      "cpu-contended: other processes used %.0f%% of the %u cores and the hypervisor took %.0f%% "
      "(steal) while stoker used %.0f%%; %s %.1f%% of the time; the pipeline was not given the "
      "CPU it needed: rerun on an idle machine (or dedicated cores) before changing anything else",
      100 * m->others, m->cores, 100 * m->steal, 100 * m->own, what, 100 * lost);
}

/* Where the reads came from: 1 a device (or a remote origin), 0 the page
 * cache, 2 both in earnest (a cache that was cold at the start: part of a
 * run came from storage), -1 unknown. */
static int reads_from_device(const struct stk_bench_result *r, double *dev_mib) {
  const struct stk_loader_stats *st = &r->loader;
  *dev_mib = (double)r->host.device_read_bytes / 1048576.0;
  if (st->has_cache && st->cache.fetch_bytes > 0) return 1;
  if (!r->host.io_valid) return -1;
  double dev = (double)r->host.device_read_bytes, bytes = (double)st->read_bytes;
  if (dev >= DEVICE_SHARE * bytes) return 1;
  return dev > CACHE_SHARE * bytes ? 2 : 0;
}

static void data_verdict(struct stk_bench_result *r, double stall) {
  const struct stk_loader_stats *st = &r->loader;
  struct machine m = machine_of(r);
  double wall = (double)st->wall_ns;
  if (wall <= 0) wall = 1;
  const struct stk_stage_stats *rd = &st->stage[STK_STAGE_READ], *dec = &st->stage[STK_STAGE_DECODE];
  /* Stats gathered from several processes (MPI) are sums: per reader and
   * per host, as for one process. */
  double procs = r->processes > 1 ? r->processes : 1;
  double read_util = (double)rd->busy_ns / (wall * (rd->threads ? rd->threads : 1) * procs);
  double dec_util = dec->threads ? (double)dec->busy_ns / (wall * dec->threads * procs) : 0;
  double dec_idle = dec->threads ? (double)dec->wait_in_ns / (wall * dec->threads * procs) : 0;
  double gib_s = (double)st->read_bytes / (wall / 1e9) / 1073741824.0;
  double dev_mib;
  int dev = reads_from_device(r, &dev_mib);
  if (contended(&m)) {
    contention_verdict(r, &m, "accelerators waited for data", stall);
    return;
  }
  stall *= 100;
  if (dec_util >= SATURATED)
    say(r, "decode",
        "decode-bound: the %u decode workers were busy %.0f%% of the time (parse, checksums, "
        "decode); accelerators waited %.1f%% for data; with idle cores (stoker used %.0f%% of "
        "%u) raise --read-threads, else more cores or cheaper decoding (--no-verify skips "
        "checksums) will help",
        dec->threads, 100 * dec_util, stall, 100 * m.own, m.cores);
  else if (read_util >= SATURATED && dec_idle > 0.3 && dev == 1)
    say(r, "storage",
        "storage-bound: reads saturated at %.2f GiB/s (%.0f MiB from the device%s) while decode "
        "workers sat idle %.0f%% of the time; accelerators waited %.1f%% for data; more read "
        "threads will not help, faster storage or a cache (stoker cache) will",
        gib_s, dev_mib, st->has_cache && st->cache.fetch_bytes ? " or the origin" : "",
        100 * dec_idle, stall);
  else if (read_util >= SATURATED && dec_idle > 0.3 && dev == 0)
    say(r, "read",
        "read-bound on memory: reads saturated at %.2f GiB/s but came from the page cache (%.0f "
        "MiB from a device), so storage is not the limit: the reading threads' copying and "
        "checksum checks are; accelerators waited %.1f%% for data; --no-verify or another "
        "--engine (now %s) may help, faster storage will not",
        gib_s, dev_mib, stall, r->engine[0] ? r->engine : "auto");
  else if (read_util >= SATURATED && dec_idle > 0.3 && dev == 2)
    say(r, "storage",
        "read-bound, partly on storage: reads saturated at %.2f GiB/s and %.0f of their %.0f MiB "
        "came from a device (the page cache held the rest: it was cold when the run began); "
        "accelerators waited %.1f%% for data; a run on warm data (run it again) shows the "
        "page-cache figure; for storage figures use --direct; faster storage or a cache "
        "(stoker cache) will help the cold part",
        gib_s, dev_mib, (double)st->read_bytes / 1048576.0, stall);
  else if (read_util >= SATURATED && dec_idle > 0.3)
    say(r, "read",
        "read-bound: reads saturated at %.2f GiB/s while decode workers sat idle %.0f%% of the "
        "time; accelerators waited %.1f%% for data; whether from a device or the page cache is "
        "unknown (/proc/self/io unreadable): rerun with --direct to measure the device",
        gib_s, 100 * dec_idle, stall);
  else if (m.known && m.own >= SATURATED)
    say(r, "cpu",
        "cpu-bound: the process used %.0f%% of %u cores (reads at %.2f GiB/s); accelerators "
        "waited %.1f%% for data; fewer emulated accelerators per host or more cores would help",
        100 * m.own, m.cores, gib_s, stall);
  else if (dev >= 1) /* reads went to storage: stoker's latency cannot be told apart */
    say(r, "storage",
        "late batches with reads from storage: no stage saturated (reads %.2f GiB/s, decode busy "
        "%.0f%%, stoker %.0f%% of the CPU), but %.0f of the %.0f MiB read came from a device%s, "
        "whose slow moments left batches late (consumer wait p99 %.1f ms); accelerators waited "
        "%.1f%% for data; run it again on warm data for the page-cache figure, or with --direct "
        "for storage figures; faster storage or a cache (stoker cache) will help",
        gib_s, 100 * dec_util, 100 * m.own, dev_mib, (double)st->read_bytes / 1048576.0,
        st->has_cache && st->cache.fetch_bytes ? " or the origin" : "",
        (double)st->wait_p99_ns / 1e6, stall);
  else
    say(r, "latency",
        "latency-bound: no stage saturated (reads %.2f GiB/s, decode busy %.0f%%, stoker %.0f%% "
        "of the CPU) yet batches were late (consumer wait p99 %.1f ms; the ring grew to %u); "
        "accelerators waited %.1f%% for data; this is stoker's to fix, not your storage's: a "
        "longer run (--epochs) shows whether it settles; report it with the --json output",
        gib_s, 100 * dec_util, 100 * m.own, (double)st->wait_p99_ns / 1e6, st->ring_depth_max,
        stall);
}

static double gib_s(uint64_t bytes, uint32_t n, double secs) {
  return secs > 0 ? (double)bytes * n / secs / 1073741824.0 : NAN;
}

static void ckpt_verdict(struct stk_bench_result *r, const char *what) {
  const struct stk_bench_ckpt *c = &r->ckpt;
  char b[32];
  stk_fmt_bytes(c->bytes, b, sizeof b);
  say(r, r->ckpt_frac >= STALL_OK ? "checkpoint" : "none",
      "%s: %u save(s) of %s (%s%s) at %.2f GiB/s, %.2f s each; %u load(s) at %.2f GiB/s; "
      "accelerators stood still %.1f%% of the time for checkpoints%s",
      what, c->saves, b, c->direct ? "O_DIRECT" : "page cache", c->fsync ? ", fsync" : "",
      gib_s(c->bytes, c->saves, c->save_s), c->saves ? c->save_s / c->saves : NAN, c->loads,
      gib_s(c->bytes, c->loads, c->load_s), 100 * r->ckpt_frac,
      r->ckpt_frac >= STALL_OK ? "; faster storage for checkpoints, or saving less often, will help"
                               : "");
}

void stk__bench_verdict(struct stk_bench_result *r) {
  double ckpt = isfinite(r->ckpt_frac) ? r->ckpt_frac : 0;
  if (r->ckpt_only) {
    ckpt_verdict(r, "checkpoint-only");
    return;
  }
  double data = r->data_stall_frac, sync = r->sync_stall_frac;
  double jitter = isfinite(r->sync_jitter_frac) ? r->sync_jitter_frac : sync;
  double wake = isfinite(r->sync_wake_frac) ? r->sync_wake_frac : 0;
  /* Barrier time that neither compute jitter nor the driver's own late
   * wake-up explains was spent waiting for a peer whose batch was late:
   * data stall seen from its neighbours. */
  double late = sync > jitter + wake ? sync - jitter - wake : 0;
  if (r->throughput_only) {
    say(r, "none",
        "throughput only: with compute time 0, AU (compute over wall time) is undefined; the "
        "loader delivered %.0f samples/s (%.1f MiB/s) to the accelerators; give --compute-s for "
        "AU and a verdict",
        r->samples_per_s, r->mib_per_s);
    return;
  }
  if (!isfinite(r->au)) {
    say(r, "none", "no verdict: no epoch ran past its first step");
    return;
  }
  if (r->pass && data < STALL_OK && sync < STALL_OK && ckpt < STALL_OK) {
    say(r, "none", "fed: AU %.3f >= %.2f; data stall %.1f%%, sync stall %.1f%%", r->au,
        r->au_min, 100 * data, 100 * sync);
    return;
  }
  if (ckpt >= STALL_OK && ckpt > jitter && ckpt > data + late && ckpt > wake) {
    ckpt_verdict(r, "checkpoint-bound");
    return;
  }
  if (wake > jitter && wake > data + late) {
    struct machine m = machine_of(r);
    if (contended(&m)) {
      contention_verdict(r, &m, "the emulator's driver woke late after compute", wake);
      return;
    }
    say(r, "wakeup",
        "wakeup-bound: the emulator's driver woke late after compute %.1f%% of the time "
        "(scheduler latency; other processes used %.0f%% of the CPU), more than accelerators "
        "waited for data (%.1f%%); --busy-compute spins instead of sleeping (one core)",
        100 * wake, 100 * m.others, 100 * (data + late));
    return;
  }
  if (jitter > data + late) {
    say(r, "sync",
        "sync-bound: accelerators waited %.1f%% of the time at the barrier for peers with longer "
        "compute (the workload's jitter, --compute-stdev), %.1f%% for data (their own batch or a "
        "late peer's)",
        100 * jitter, 100 * (data + late));
    return;
  }
  data_verdict(r, data + late);
}
