/* stoker watch: the metrics agent. It samples every GPU through NVML (loaded
 * at run time), the host through /proc and every stoker loader on the node
 * through the small shared-memory files the loaders publish, attributes GPU
 * time, throttling and input stalls to jobs, and serves the figures to
 * Prometheus under dcgm-exporter's names. docs/watch.md lists every metric.
 * The files the loaders publish have their own header, the format's
 * contract with agents of other versions: stoker/publication.h. */
#ifndef STOKER_WATCH_H
#define STOKER_WATCH_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the agent -------------------------------------------------------- */

/* Set with stk_watch_opts_init(): it records struct_size, and the library reads
 * only that many bytes (options added later take their defaults); a
 * struct_size larger than the library's is refused. A struct left zeroed
 * (struct_size 0) is taken to be this header's. */
struct stk_watch_opts {
  size_t struct_size; /* set by stk_watch_opts_init(); 0 = this header's */
  double interval_s;         /* sampling period (default 1) */
  int fast_time;             /* each sample advances the clock by interval_s
                                without sleeping (tests, W3) */
  const char *nvml_lib;      /* NVML library (default libnvidia-ml.so.1);
                                "none" disables NVML */
  const char *mapping_dir;   /* dcgm-exporter HPC job-mapping dir, or NULL */
  const char *runtime_dir;   /* loader publications ($STOKER_RUNTIME_DIR,
                                else /dev/shm/stoker) */
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
  const char *reap_prometheus; /* Prometheus base URL: act only where it
                                shows the job idle on all its nodes */
  /* Cardinality (issue 21, §4): fewer series on a large fleet. */
  int no_process_series;     /* no per-process series (stoker_gpu_process_*,
                                stoker_process_cpu_seconds_total) */
  int no_job_labels;         /* no hpc_job on device (DCGM_FI_*) series: one
                                series per GPU or MIG instance whatever its
                                jobs (the stoker_job_* series keep them) */
  const char *pod_resources_socket; /* the kubelet's pod-resources socket
                                (/var/lib/kubelet/pod-resources/kubelet.sock),
                                or NULL: no Kubernetes pods */
  int pod_publications;      /* also read loader publications in each GPU
                                process's own /dev/shm/stoker (a pod's,
                                through /proc/PID/root): no hostPath */
  const char *web_config_file; /* TLS and basic auth for the endpoint, in
                                Prometheus exporter-toolkit's web
                                configuration format (YAML), or NULL */
};
#define stk_watch_opts_init(o) stk_watch_opts_init_sized((o), sizeof *(o))
STK_EXPORT void stk_watch_opts_init_sized(struct stk_watch_opts *o, size_t size);

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
