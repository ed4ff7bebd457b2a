/* stoker watch: the metrics agent. It samples every GPU through NVML (loaded
 * at run time), the host through /proc and every stoker loader on the node
 * through the small shared-memory files the loaders publish, attributes GPU
 * time, throttling and input stalls to jobs, and serves the figures to
 * Prometheus under dcgm-exporter's names. docs/watch.md lists every metric.
 *
 * This header also fixes the loader publication format (struct stk_pub),
 * so that other publishers (the Python binding, other loaders) can write
 * the same files. */
#ifndef STOKER_WATCH_H
#define STOKER_WATCH_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the loader publication file (format version 1) -------------------
 *
 * Each running loader keeps one file of exactly STK_PUB_SIZE bytes, mapped
 * shared, in the runtime directory ($STOKER_RUNTIME_DIR, else
 * /dev/shm/stoker), named "loader-PID-N.pub". All integers are in the
 * host's byte order. Strings are NUL-terminated and written once before the
 * first counter update. Counters are written under a sequence lock: the
 * writer makes seq odd, writes, then makes it even again; a reader copies
 * the counters and retries while seq was odd or changed. A reader must
 * check magic, version and size, and treat a file whose pid is gone (or
 * whose pid_start_ticks no longer match /proc/PID/stat) as stale.
 * Setting STOKER_PUBLISH=0 turns publication off. */
#define STK_PUB_MAGIC "STKLOAD\0"
#define STK_PUB_VERSION 1u
#define STK_PUB_SIZE 1024u
#define STK_PUB_STAGES 4
#define STK_PUB_CLOSED 1u /* flags: the loader has closed (final counters) */

struct stk_pub_stage {
  char name[16];         /* "read", "decode", "batch", "ring" */
  uint64_t busy_ns;      /* summed over the stage's threads */
  uint64_t wait_in_ns;   /* blocked waiting for input */
  uint64_t wait_out_ns;  /* blocked because the next stage was full */
  uint64_t items, bytes;
  uint32_t threads, pad;
};

struct stk_pub {
  char magic[8];                  /*   0 STK_PUB_MAGIC */
  uint32_t version;               /*   8 STK_PUB_VERSION */
  uint32_t size;                  /*  12 STK_PUB_SIZE */
  uint64_t seq;                   /*  16 sequence lock */
  uint32_t pid;                   /*  24 the publishing process */
  uint32_t flags;                 /*  28 STK_PUB_CLOSED */
  uint64_t pid_start_ticks;       /*  32 field 22 of /proc/PID/stat */
  uint64_t open_unix_ns;          /*  40 when the loader opened */
  uint64_t update_unix_ns;        /*  48 last counter update */
  uint64_t wall_ns;               /*  56 since open */
  uint64_t batches, samples;      /*  64 delivered to the consumer */
  uint64_t bytes, skipped;        /*  80 */
  uint64_t consumer_wait_ns;      /*  96 total time the consumer waited */
  uint64_t waiting_since_unix_ns; /* 104 the consumer is waiting since; 0 not */
  uint64_t cache_hits;            /* 112 reads served from a cache tier */
  uint64_t cache_misses;          /* 120 reads that waited for the origin */
  uint64_t cache_fetch_bytes;     /* 128 bytes fetched from the origin */
  uint64_t ring_depth;            /* 136 prefetch ring depth now */
  uint64_t mem_bytes;             /* 144 batch buffers allocated */
  uint64_t reserved[5];           /* 152 zero */
  struct stk_pub_stage stage[STK_PUB_STAGES]; /* 192 */
  char job[64];                   /* 448 job id from the environment, or "" */
  char dataset[512];              /* 512 the dataset's root or URL */
};

/* ---- the agent -------------------------------------------------------- */

struct stk_watch_opts {
  double interval_s;         /* sampling period (default 1) */
  int fast_time;             /* each sample advances the clock by interval_s
                                without sleeping (tests, W3) */
  const char *nvml_lib;      /* NVML library (default libnvidia-ml.so.1);
                                "none" disables NVML */
  const char *mapping_dir;   /* dcgm-exporter HPC job-mapping dir, or NULL */
  const char *runtime_dir;   /* loader publications (default as above) */
  const char *proc_root;     /* default "/proc" */
  const char *hostname;      /* default gethostname() */
  double price_per_kwh;      /* energy price (default 0: no cost figures) */
  double carbon_g_per_kwh;   /* carbon intensity (default 0: none) */
  double job_ttl_s;          /* forget a job unseen this long (default 300) */
  /* The idle-job reaper (off unless reap_after_s > 0). */
  double reap_after_s;       /* act on a job idle in every sample this long */
  double reap_warn_s;        /* warn this long before acting (default 1/2) */
  const char *reap_command;  /* "{job}" is replaced by the job id */
  const char *reap_warn_command; /* optional; "{job}" and "{minutes}" */
  const char *const *reap_exempt; /* fnmatch patterns, NULL-terminated */
  int reap_dry_run;          /* log what would be done, run nothing */
};

struct stk_watch;

/* Open an agent. Fails (errmsg, STK_ERRMSG_MAX bytes) only on bad options;
 * a missing NVML is not an error: stk_watch_nvml_status() says why. */
STK_EXPORT int stk_watch_open(struct stk_watch **out, const struct stk_watch_opts *opts, char *errmsg);
STK_EXPORT void stk_watch_close(struct stk_watch *w);
/* Take one sample (GPUs, host, loaders), derive the per-job figures for
 * the interval since the previous one, run the reaper and rebuild the
 * exposition. The first sample only sets the baseline for the counters. */
STK_EXPORT int stk_watch_sample(struct stk_watch *w);
/* Sleep until the next sample is due (returns at once in fast time);
 * returns early, with 1, when *stop becomes non-zero. */
STK_EXPORT int stk_watch_wait(struct stk_watch *w, volatile int *stop);
/* One line saying whether NVML was loaded and, if not, why (static). */
STK_EXPORT const char *stk_watch_nvml_status(const struct stk_watch *w);

/* The latest Prometheus text exposition (format 0.0.4), copied into a
 * malloc'ed buffer the caller frees. Thread-safe against sampling. */
STK_EXPORT int stk_watch_prometheus(struct stk_watch *w, char **buf, size_t *len);
/* The latest sample and the per-job figures as one JSON object. */
STK_EXPORT void stk_watch_json(struct stk_watch *w, struct stk_json *j);

/* Serve /metrics over HTTP (libmicrohttpd) on "HOST:PORT" or ":PORT" (port
 * 0 picks one; *port_out gets it). Bounded: at most 64 connections, 10 s
 * idle timeout, 32 KiB per connection besides the response. */
STK_EXPORT int stk_watch_serve(struct stk_watch *w, const char *listen, int *port_out, char *errmsg);

/* A compact view for `stoker top`, copied under the agent's lock. */
struct stk_watch_gpu_view {
  unsigned index;
  char uuid[96], model[96], job[64];
  int lost;
  double util, power_w, mem_used_mib, mem_total_mib, temp_c; /* NaN: unknown */
  uint64_t reasons;          /* clock event reasons now */
  int throttled;             /* a performance-limiting reason is active */
  unsigned nprocs;
};
struct stk_watch_job_view {
  char job[64];
  unsigned gpus, loaders;
  double allocated_s, busy_s, idle_s, productive_s, input_stalled_s, idle_bucket_s,
      throttled_s, unknown_s, energy_j, idle_streak_s, power_w, input_wait_ratio;
};
struct stk_watch_view {
  unsigned ngpus, njobs;
  struct stk_watch_gpu_view *gpus;
  struct stk_watch_job_view *jobs;
  double cpu_busy, cpu_steal, mem_used_ratio; /* NaN: unknown */
  char nvml_status[256];
};
/* Fill *v (free with stk_watch_view_free). */
STK_EXPORT int stk_watch_view(struct stk_watch *w, struct stk_watch_view *v);
STK_EXPORT void stk_watch_view_free(struct stk_watch_view *v);

#ifdef __cplusplus
}
#endif
#endif
