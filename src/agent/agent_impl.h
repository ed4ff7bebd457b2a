/* Internals of the metrics agent shared by its files: agent.c (the sample
 * loop and attribution), sources.c (/proc, cgroups, the job
 * mapping directory, loader publications), reaper.c, podres.c (Kubernetes
 * pods), webcfg.c (TLS and basic auth), expo.c (Prometheus text), view.c (JSON,
 * the view for `stoker top`) and http.c (libmicrohttpd). */
#ifndef STOKER_AGENT_IMPL_H
#define STOKER_AGENT_IMPL_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "../base/base.h"
#include "../gpu/nvml.h"
#include "stoker/publication.h"
#include "stoker/watch.h"

#define AG_MAX_GPUS 64
#define AG_JOB_LEN 64
#define AG_MAP_MAX_JOBS 2048 /* job ids one mapping file can hold (4 KiB of 1-character lines) */
#define AG_NREASONS 6
#define AG_MAX_PUB_FILES 1024 /* publication files tracked at once (live or rejected) */
#define AG_MAX_PUB_PER_UID 256 /* ... of them owned by one user: none can crowd out the rest */
#define AG_MAX_POD_DIRS 64     /* pods' own publication directories read a sample */
#define AG_PUB_NEW_SAMPLES 5   /* samples a file may stay unfinished (no magic yet) */
#define AG_PUB_BUSY_SAMPLES 3  /* samples in a row a file may give no consistent copy */
#define AG_PODS_S 10.0         /* the kubelet's pod resources are read this often */
#define AG_MAX_PODS 4096       /* GPU devices held by pods, at most */
#define AG_HEALTH_S 10.0       /* health counters (ECC, rows, NVLink) are read this often */

/* The throttle reasons counted by name (NVML bit, label). */
extern const struct ag_reason { uint64_t bit; const char *name; } ag_reasons[AG_NREASONS];

/* A GPU device a pod's container holds (the kubelet's pod resources). */
struct ag_pod {
  char dev[96];        /* device id: a GPU UUID or index, maybe "::N" suffixed */
  char ns[64], pod[256], container[64];
};

struct ag_proc {
  uint32_t pid;
  uint32_t gpu_instance;
  double used_bytes, sm_util, cpu_s; /* NaN: unknown */
  char job[AG_JOB_LEN];
  char cgjob[AG_JOB_LEN]; /* its cgroup's job ("" when none) */
};

/* A job on a GPU: on the whole GPU (unit -1) or on MIG instance `unit`
 * (an index into s.mig). A GPU has any number of them. */
struct ag_alloc {
  char job[AG_JOB_LEN];
  int unit;
  const struct ag_pod *pod; /* the pod holding it (into w->pods), or NULL */
};

struct ag_gpu {
  int seen;                      /* sampled at least once */
  int lost;                      /* fell off the bus */
  struct stk__gpu_sample s;      /* latest; s.procs is not used */
  char uuid[96], name[96], pci[32]; /* kept from before a loss */
  struct ag_proc *procs;
  unsigned nprocs, procs_cap;
  struct ag_alloc *alloc;        /* the jobs it is allocated to, per unit */
  unsigned nalloc, alloc_cap;
  int mapped;                    /* the whole GPU's jobs come from the mapping directory */
  int mig_mapped[8];             /* ... instance m's, from a "GPU.GI" file */
  int kube;                      /* the whole GPU's jobs are the pods holding it */
  int mig_kube[8];               /* ... instance m's (by its MIG UUID) */
  double prev_energy_mj;         /* NaN until read */
  double nvlink_prev_kib, nvlink_prev_t; /* NVLink data (rx + tx, KiB) at the last read */
  int nvlink_have;               /* ... which there was */
  double xid_total;
};

/* A publication file's state (sources.c): NEW until a first good read,
 * LIVE while it reads well for a live process of its owner, REJECTED
 * (counted once, not read again while that inode has that name), GONE
 * (forgotten at the end of the sample). */
enum { AG_PUB_NEW, AG_PUB_LIVE, AG_PUB_REJECTED, AG_PUB_GONE };

/* Why a publication file was skipped: the reason label of
 * stoker_watch_loader_errors_total. */
enum ag_pub_reject {
  AG_REJ_SIZE,    /* truncated, grown, or a size out of bounds */
  AG_REJ_FORMAT,  /* not a publication (garbage, or never finished) */
  AG_REJ_VERSION, /* a major version this agent does not know */
  AG_REJ_BUSY,    /* no consistent copy in AG_PUB_BUSY_SAMPLES samples in a row */
  AG_REJ_IO,      /* the read failed */
  AG_REJ_OWNER,   /* names a process of another user */
  AG_REJ_SWAPPED, /* another file put in a tracked one's place */
  AG_REJ_TYPE,    /* not a regular file (a link, a FIFO, ...) */
  AG_REJ_LIMIT,   /* left out: too many tracked, or too many of its owner's
                     (counted at each sample it is left out) */
  AG_REJ_N
};
extern const char *const ag_pub_reject_names[AG_REJ_N];

struct ag_loader {
  char name[256];                /* file name in the runtime directory, or
                                    "pod-PID/NAME" in a pod's (PID: the GPU
                                    process it was seen through) */
  int fd;                        /* kept open while NEW or LIVE; else -1 */
  int state;                     /* AG_PUB_* */
  uint64_t ino;                  /* the file judged under that name */
  uint32_t uid;                  /* its owner */
  unsigned tries;                /* samples it has been NEW */
  unsigned busy;                 /* samples in a row without a consistent copy */
  struct stk_pub pub;            /* latest consistent copy (LIVE) */
  char job[AG_JOB_LEN];
  double prev_wait_s;            /* effective wait at the previous sample */
  int have_prev, seen;
};

struct ag_job {
  char id[AG_JOB_LEN];
  double last_seen;
  unsigned gpus, loaders;        /* now */
  double power_w;                /* now */
  double allocated_s, busy_s, idle_s;
  double productive_s, input_stalled_s, idle_bucket_s, throttled_s, unknown_s;
  double throttle_s[AG_NREASONS];
  double energy_j;
  double loader_wait_s;          /* its loaders' consumer wait, summed deltas */
  double input_wait_ratio;       /* in the last interval */
  double idle_streak_s;          /* all its GPUs idle in every sample since */
  int all_idle;                  /* scratch for one interval */
  int warned, acted;
};

/* What is kept per process between samples: its cgroup's job is read once
 * per process (pid and start time), its stat every sample. */
struct ag_pcache {
  uint32_t pid;
  int fd;               /* PROC/PID/stat kept open, or -1 */
  uint64_t start;
  double cpu_s;
  char job[AG_JOB_LEN]; /* from the cgroup, or "" */
};

struct ag_host {
  uint64_t cpu_prev[2];          /* total, busy jiffies */
  uint64_t steal_prev;
  double cpu_busy, cpu_steal;    /* ratios over the last interval; NaN unknown */
  double cpu_s[3];               /* busy, steal, idle seconds since boot */
  double mem_total, mem_avail;   /* bytes; NaN unknown */
  double psi_avg10[3][2];        /* cpu, memory, io x some, full; ratio */
  double psi_total_s[3][2];
};

struct stk_watch {
  struct stk_watch_opts o;
  char *nvml_lib, *mapping_dir, *runtime_dir, *proc_root, *hostname, *reap_command,
      *reap_warn_command, *reap_prometheus;
  char **exempt;
  pthread_mutex_t mu;            /* guards everything below against readers */
  struct stk__nvml *nvml;
  char nvml_status[256];
  double t_start_real;           /* monotonic seconds at open */
  double now, prev;              /* the agent's clock (fast or real) */
  uint64_t samples;
  double health_at;              /* when the health counters were last read */
  struct ag_gpu gpus[AG_MAX_GPUS];
  unsigned ngpus;
  struct ag_job *jobs;
  unsigned njobs, jobs_cap;
  struct ag_loader *loaders;     /* the LIVE ones first: [0, nloaders) */
  unsigned nloaders, ntracked, loaders_cap;
  struct ag_host host;
  uint64_t mapping_errors, reaper_warn, reaper_act, reaper_dry;
  uint64_t loader_errors[AG_REJ_N]; /* publication files skipped, by reason */
  char mapping_err_last[256];
  char (*map_jobs)[AG_JOB_LEN];  /* scratch for one mapping file: AG_MAP_MAX_JOBS */
  long clk_tck;
  struct ag_pcache *pc_prev, *pc_cur; /* last sample's (sorted by pid), this one's */
  unsigned npc_prev, npc_cur, pc_cap_prev, pc_cap_cur;
  unsigned pc_fds, pc_fd_max;         /* stat descriptors kept open, and the cap */
  char *expo;                    /* latest exposition */
  size_t expo_len;
  int expo_stale;                /* a sample came after it was built */
  char *expo_gz;                 /* ... gzipped, built at the first scrape that asks */
  size_t expo_gz_len;
  double sample_cost_s;          /* CPU time of the last sample */
  double render_cost_s;          /* ... and of the last exposition */
  char *podres_socket;           /* the kubelet's pod-resources socket, or NULL */
  struct ag_pod *pods;           /* its last good answer: GPU devices held */
  unsigned npods, pods_cap;
  double pods_at;                /* when last asked */
  int pods_polled, podres_failing;
  uint64_t podres_errors;
  void *httpd;                   /* struct MHD_Daemon */
  unsigned httpd_flags;          /* its MHD flags, but TLS */
  pthread_mutex_t web_mu;        /* guards web, web_bad, web_err against requests */
  struct ag_webcfg *web;         /* TLS and basic auth while serving, or NULL */
  int web_bad;                   /* the file changed and cannot be used: answer 500 */
  char web_err[STK_ERRMSG_MAX];  /* ... why (logged once per reason) */
  int kids[64];                  /* reaper commands still running */
  unsigned nkids;
};

/* agent.c: add job to unit (-1: the whole GPU, else a MIG instance) of
 * g unless it is there; -1 when out of memory. */
int stk__ag_gpu_add_job(struct ag_gpu *g, int unit, const char *job);
/* The jobs of unit u of g, and how many. */
unsigned stk__ag_unit_jobs(const struct ag_gpu *g, int unit);
/* Utilization (percent, NaN unknown) of unit u: the GPU's; a MIG
 * instance's GPM graphics activity; a MIG GPU's whole (u = -1), its
 * instances' slice-weighted mean. */
double stk__ag_unit_util(const struct ag_gpu *g, int unit);
/* Whether the device series of unit u carry hpc_job (a mapping names its
 * jobs: dcgm-exporter's rule). */
int stk__ag_unit_mapped(const struct ag_gpu *g, int unit);
/* Whether unit u's jobs are the pods holding it (pod labels). */
int stk__ag_unit_kube(const struct ag_gpu *g, int unit);

/* reaper.c: warn about and act on jobs idle for the window (each sample). */
void stk__ag_reaper(struct stk_watch *w);

/* sources.c */
void stk__ag_host_sample(struct stk_watch *w, double dt);
/* Job of a process from its cgroup (Slurm, Kubernetes); 0 when found. */
int stk__ag_cgroup_job(const struct stk_watch *w, uint32_t pid, char *job);
/* A process's CPU seconds (utime+stime, NaN when unknown; cpu_s may be
 * NULL) and its cgroup's job ("" when none), cached across samples. */
const char *stk__ag_proc_info(struct stk_watch *w, uint32_t pid, double *cpu_s);
/* End of a sample's attribution: this sample's processes become the cache. */
void stk__ag_proc_cache_swap(struct stk_watch *w);
void stk__ag_proc_cache_free(struct stk_watch *w);
/* The parsers, on text already read (also the fuzz target's entry points):
 * a cgroup file's job (0 when found); a mapping file's job ids (0, or -1
 * with why set; buf is modified); utime+stime and start time from a
 * /proc/PID/stat line (0 when well-formed). */
int stk__ag_parse_cgroup(const char *buf, char *job);
int stk__ag_parse_map(const char *path, char *buf, char jobs[][AG_JOB_LEN], unsigned max,
                      unsigned *n, char *why, size_t whyn);
int stk__ag_parse_stat(const char *buf, uint64_t *cpu_ticks, uint64_t *start);
/* The four user ids (real, effective, saved, fs) of a /proc/PID/status
 * text's "Uid:" line; 0 when found. */
int stk__ag_parse_uids(const char *buf, uint32_t uids[4]);
/* 1 when uid is one of PID's user ids (real, effective, saved, fs: the
 * process can act as each), 0 when none, -1 when PID cannot be read. */
int stk__ag_pid_has_uid(const struct stk_watch *w, uint32_t pid, uint32_t uid);
/* Read the mapping directory into the GPUs' jobs (mapped = 1 where a file
 * names jobs); malformed files are counted and skipped. */
void stk__ag_read_mapping(struct stk_watch *w);
/* Discover, read (by copy, checked) and drop loader publications; only
 * those of live processes of their files' owners end up in
 * w->loaders[0 .. nloaders). Bad files are counted in loader_errors. */
void stk__ag_loaders_sample(struct stk_watch *w);
void stk__ag_loaders_free(struct stk_watch *w);

/* podres.c: the kubelet's List answer (a ListPodResourcesResponse) for
 * the socket; 0, or -1 with why set. *msg is malloc'd. */
int stk__ag_podres_call(const char *sock, uint8_t **msg, size_t *len, char *why, size_t whyn);
/* Parse such an answer into the GPU devices pods hold (resources named
 * nvidia.com/...), growing *pods; 0, or -1 when malformed. Also the fuzz
 * target's entry point. */
int stk__ag_parse_podres(const uint8_t *msg, size_t len, struct ag_pod **pods, unsigned *n,
                         unsigned *cap);
/* Ask the kubelet when due (every AG_PODS_S) and give each GPU a pod
 * holds, and no mapping file names, that pod's job ("NAMESPACE/POD"). */
void stk__ag_read_pods(struct stk_watch *w);
void stk__ag_pod_job(const struct ag_pod *p, char *job);
/* The pod whose job id is job, or NULL. */
const struct ag_pod *stk__ag_job_pod(const struct stk_watch *w, const char *job);

/* webcfg.c: exporter-toolkit's web configuration file (TLS certificate
 * and key, bcrypt basic-auth users); 0, or an error naming the key. */
struct ag_webcfg;
int stk__ag_webcfg_load(const char *path, struct ag_webcfg **out, char *errmsg);
void stk__ag_webcfg_free(struct ag_webcfg *c);
const char *stk__ag_webcfg_cert(const struct ag_webcfg *c); /* PEM, or NULL: no TLS */
const char *stk__ag_webcfg_key(const struct ag_webcfg *c);
int stk__ag_webcfg_auth(const struct ag_webcfg *c);          /* users are configured */
/* 1 when user and pass match a configured user's bcrypt hash. */
int stk__ag_webcfg_check(struct ag_webcfg *c, const char *user, const char *pass);
/* 1 when a file c was read from (the file, its certificate or key) is not
 * as it was when read: changed, replaced, gone or back. */
int stk__ag_webcfg_changed(const struct ag_webcfg *c);
/* Whether a and b serve the same TLS (certificate and key, or none). */
int stk__ag_webcfg_same_tls(const struct ag_webcfg *a, const struct ag_webcfg *b);
/* A configuration is freed when its last holder lets go (a load gives
 * one hold; stk__ag_webcfg_free frees at once). */
struct ag_webcfg *stk__ag_webcfg_ref(struct ag_webcfg *c);
void stk__ag_webcfg_unref(struct ag_webcfg *c);

/* http.c: stop serving (no-op when not serving). */
void stk__ag_http_stop(struct stk_watch *w);
/* Re-read the web configuration file if it or its certificate or key
 * changed; called at each sample, without w->mu held. */
void stk__ag_http_refresh(struct stk_watch *w);
/* Whether an Accept-Encoding header value (NULL: none) accepts gzip. */
int stk__ag_accepts_gzip(const char *v);

/* expo.c: rebuild w->expo from the state (called with w->mu held). */
void stk__ag_build_expo(struct stk_watch *w);
/* Rebuild w->expo if a sample came after it (dropping its gzipped copy);
 * called with w->mu held. */
void stk__ag_expo_fresh(struct stk_watch *w);
/* A job by id, created when absent (NULL on allocation failure). */
struct ag_job *stk__ag_job(struct stk_watch *w, const char *id);

/* CPU time of the calling thread (ns). */
static inline uint64_t stk__ag_thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A growable text buffer. */
struct ag_buf {
  char *p;
  size_t len, cap;
  int oom;
};
void stk__ag_printf(struct ag_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append s as a Prometheus label value (escaped). */
void stk__ag_label(struct ag_buf *b, const char *s);
/* dcgm-exporter's err_msg for an XID code (xid.c); a static string. */
const char *stk__ag_xid_text(unsigned code);

#endif
