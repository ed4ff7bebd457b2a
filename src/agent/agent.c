/* The metrics agent's sample loop: read every source, attribute each GPU and
 * process to a job, derive the per-job figures for the interval since the
 * previous sample (GPU-seconds allocated, busy, idle; throttled seconds by
 * reason; energy; the goodput buckets), run the idle-job reaper (reaper.c)
 * and rebuild the exposition. One thread samples; readers copy under the lock. */
#include <ctype.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../base/publication.h"
#include "agent_impl.h"

const struct ag_reason ag_reasons[AG_NREASONS] = {
    {STK__REASON_SW_POWER_CAP, "sw_power_cap"},   {STK__REASON_HW_SLOWDOWN, "hw_slowdown"},
    {STK__REASON_SYNC_BOOST, "sync_boost"},       {STK__REASON_SW_THERMAL, "sw_thermal"},
    {STK__REASON_HW_THERMAL, "hw_thermal"},       {STK__REASON_HW_POWER_BRAKE, "hw_power_brake"},
};

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

static double mono_s(void) { return (double)stk_now_ns() / 1e9; }

/* Publications are believed only for their owners' processes, whoever owns
 * the directory; but a directory where one user may remove or replace
 * another's files lets that user hide the other's loaders. Say so once. */
static void check_runtime_dir(const char *dir) {
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return;
  if ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX))
    stk_log(STK_LOG_WARN,
            "watch: runtime directory %s is writable by every user without the sticky bit: "
            "anyone can remove others' loader publications (chmod 1777 %s)", dir, dir);
  else if (st.st_uid != 0 && st.st_uid != geteuid() && (st.st_mode & (S_IWGRP | S_IWOTH)))
    stk_log(STK_LOG_WARN,
            "watch: runtime directory %s belongs to uid %u, who can remove others' loader "
            "publications; let root create it (mode 1777)", dir, (unsigned)st.st_uid);
}

void stk_watch_opts_init_sized(struct stk_watch_opts *o, size_t size) {
  stk__opts_init(o, sizeof *o, size);
}

int stk_watch_open(struct stk_watch **out, const struct stk_watch_opts *opts, char *errmsg) {
  struct stk_watch_opts o;
  int orc = stk__opts_take(&o, sizeof o, opts, "stk_watch_opts", errmsg);
  if (orc) return orc;
  if (o.interval_s == 0) o.interval_s = 1;
  if (!(o.interval_s >= 0.01 && o.interval_s <= 3600))
    return stk__errf(errmsg, STK_EINVAL, "interval %g s is out of range (0.01..3600)", o.interval_s);
  if (o.job_ttl_s == 0) o.job_ttl_s = 300;
  if (o.price_per_kwh < 0 || o.carbon_g_per_kwh < 0 || o.reap_after_s < 0 || o.reap_warn_s < 0)
    return stk__errf(errmsg, STK_EINVAL, "prices, intensities and reaper times cannot be negative");
  if (o.reap_after_s > 0 && !o.reap_command && !o.reap_dry_run)
    return stk__errf(errmsg, STK_EINVAL, "the reaper needs a command (or a dry run)");
  if (o.reap_after_s > 0 && o.reap_warn_s == 0) o.reap_warn_s = o.reap_after_s / 2;
  if (o.reap_warn_s > o.reap_after_s) o.reap_warn_s = o.reap_after_s;
  if (o.reap_prometheus) {
    /* It goes into a shell command between single quotes. */
    if (strncmp(o.reap_prometheus, "http://", 7) && strncmp(o.reap_prometheus, "https://", 8))
      return stk__errf(errmsg, STK_EINVAL, "--reap-prometheus '%s': expected an http:// or https:// URL",
                       o.reap_prometheus);
    for (const char *c = o.reap_prometheus; *c; c++)
      if (!isalnum((unsigned char)*c) && !strchr(":/._-@%+=&?~[]", *c))
        return stk__errf(errmsg, STK_EINVAL, "--reap-prometheus: '%c' cannot be in the URL", *c);
  }
  struct stk_watch *w = calloc(1, sizeof *w);
  if (!w) return stk__errf(errmsg, STK_ENOMEM, "out of memory");
  w->o = o;
  pthread_mutex_init(&w->mu, NULL);
  pthread_mutex_init(&w->web_mu, NULL);
  char rd[400];
  w->nvml_lib = dup_or_null(o.nvml_lib);
  w->mapping_dir = dup_or_null(o.mapping_dir);
  w->podres_socket = o.pod_resources_socket && o.pod_resources_socket[0]
                         ? strdup(o.pod_resources_socket)
                         : NULL;
  w->runtime_dir = strdup(o.runtime_dir ? o.runtime_dir : stk__runtime_dir(rd, sizeof rd));
  w->proc_root = strdup(o.proc_root ? o.proc_root : "/proc");
  char host[256] = "";
  if (!o.hostname) gethostname(host, sizeof host - 1);
  w->hostname = strdup(o.hostname ? o.hostname : host);
  w->reap_command = dup_or_null(o.reap_command);
  w->reap_warn_command = dup_or_null(o.reap_warn_command);
  w->reap_prometheus = dup_or_null(o.reap_prometheus);
  size_t ne = 0;
  while (o.reap_exempt && o.reap_exempt[ne]) ne++;
  w->exempt = calloc(ne + 1, sizeof *w->exempt);
  for (size_t i = 0; w->exempt && i < ne; i++) w->exempt[i] = strdup(o.reap_exempt[i]);
  w->o.reap_exempt = NULL;
  w->clk_tck = sysconf(_SC_CLK_TCK);
  /* Stat descriptors kept open: at most half the descriptor limit. */
  struct rlimit rl;
  w->pc_fd_max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                     ? (unsigned)(rl.rlim_cur / 2)
                     : 4096;
  if (w->clk_tck <= 0) w->clk_tck = 100;
  if (!w->runtime_dir || !w->proc_root || !w->hostname || !w->exempt) {
    stk_watch_close(w);
    return stk__errf(errmsg, STK_ENOMEM, "out of memory");
  }
  check_runtime_dir(w->runtime_dir);
  for (unsigned i = 0; i < AG_MAX_GPUS; i++) w->gpus[i].prev_energy_mj = NAN;
  w->host.cpu_busy = w->host.cpu_steal = NAN;
  if (w->nvml_lib && !strcmp(w->nvml_lib, "none"))
    snprintf(w->nvml_status, sizeof w->nvml_status, "NVML off (--nvml none); GPU metrics are off");
  else
    stk__nvml_open(&w->nvml, w->nvml_lib, w->nvml_status);
  w->t_start_real = mono_s();
  w->now = w->prev = 0;
  *out = w;
  return 0;
}

void stk_watch_close(struct stk_watch *w) {
  if (!w) return;
  stk__ag_http_stop(w);
  stk__nvml_close(w->nvml);
  stk__ag_loaders_free(w);
  for (unsigned i = 0; i < AG_MAX_GPUS; i++) {
    free(w->gpus[i].procs);
    free(w->gpus[i].alloc);
  }
  free(w->map_jobs);
  free(w->jobs);
  stk__ag_proc_cache_free(w);
  free(w->expo);
  free(w->expo_gz);
  for (size_t i = 0; w->exempt && w->exempt[i]; i++) free(w->exempt[i]);
  free(w->exempt);
  free(w->nvml_lib);
  free(w->mapping_dir);
  free(w->podres_socket);
  free(w->pods);
  free(w->runtime_dir);
  free(w->proc_root);
  free(w->hostname);
  free(w->reap_command);
  free(w->reap_warn_command);
  free(w->reap_prometheus);
  pthread_mutex_destroy(&w->mu);
  pthread_mutex_destroy(&w->web_mu);
  /* Wait for the reaper's commands still running (scancel, kubectl). */
  for (unsigned i = 0; i < w->nkids; i++) waitpid(w->kids[i], NULL, 0);
  free(w);
}

const char *stk_watch_nvml_status(const struct stk_watch *w) { return w->nvml_status; }

struct ag_job *stk__ag_job(struct stk_watch *w, const char *id) {
  for (unsigned i = 0; i < w->njobs; i++)
    if (!strcmp(w->jobs[i].id, id)) return &w->jobs[i];
  if (w->njobs == w->jobs_cap) {
    unsigned nc = w->jobs_cap ? w->jobs_cap * 2 : 16;
    void *q = realloc(w->jobs, nc * sizeof *w->jobs);
    if (!q) return NULL;
    w->jobs = q;
    w->jobs_cap = nc;
  }
  struct ag_job *j = &w->jobs[w->njobs++];
  memset(j, 0, sizeof *j);
  snprintf(j->id, sizeof j->id, "%s", id);
  j->last_seen = w->now;
  return j;
}

int stk__ag_gpu_add_job(struct ag_gpu *g, int unit, const char *job) {
  for (unsigned k = 0; k < g->nalloc; k++)
    if (g->alloc[k].unit == unit && !strcmp(g->alloc[k].job, job)) return 0;
  if (g->nalloc == g->alloc_cap) {
    unsigned nc = g->alloc_cap ? g->alloc_cap * 2 : 8;
    void *q = realloc(g->alloc, nc * sizeof *g->alloc);
    if (!q) return -1;
    g->alloc = q;
    g->alloc_cap = nc;
  }
  struct ag_alloc *a = &g->alloc[g->nalloc++];
  snprintf(a->job, sizeof a->job, "%s", job);
  a->unit = unit;
  a->pod = NULL;
  return 0;
}

unsigned stk__ag_unit_jobs(const struct ag_gpu *g, int unit) {
  unsigned n = 0;
  for (unsigned k = 0; k < g->nalloc; k++) n += g->alloc[k].unit == unit;
  return n;
}

int stk__ag_unit_mapped(const struct ag_gpu *g, int unit) {
  return unit < 0 ? g->mapped : unit < 8 && g->mig_mapped[unit];
}

int stk__ag_unit_kube(const struct ag_gpu *g, int unit) {
  return unit < 0 ? g->kube : unit < 8 && g->mig_kube[unit];
}

/* The unit (MIG instance index, or -1) of a process in GPU instance gi. */
static int proc_unit(const struct ag_gpu *g, uint32_t gi) {
  if (gi == UINT32_MAX) return -1;
  for (unsigned m = 0; m < g->s.nmig && m < 8; m++)
    if (g->s.mig[m].gi_id == gi) return (int)m;
  return -1;
}

/* The job of a process on unit `unit` of GPU g: the mapping's (its
 * instance's, else its GPU's), else the pod's holding the GPU, else its
 * cgroup's, else its own. */
static void proc_job(const struct ag_gpu *g, int unit, uint32_t pid, const char *cgroup_job,
                     char *job) {
  int from = stk__ag_unit_mapped(g, unit) || stk__ag_unit_kube(g, unit) ? unit
             : g->mapped || g->kube                                       ? -1
                                                                          : -2;
  for (unsigned k = 0; from > -2 && k < g->nalloc; k++)
    if (g->alloc[k].unit == from) {
      snprintf(job, AG_JOB_LEN, "%s", g->alloc[k].job);
      return;
    }
  if (cgroup_job && cgroup_job[0]) {
    snprintf(job, AG_JOB_LEN, "%s", cgroup_job);
    return;
  }
  snprintf(job, AG_JOB_LEN, "pid-%u", pid);
}

/* DCGM's NVLINK_BANDWIDTH_TOTAL, computed as DCGM computes it: NVML's
 * NVLink data counters (rx + tx, KiB, all links) since the previous
 * sample, per second, over 1000 ("MB/s"), truncated to an integer; 0 at
 * the first sample (and after a counter reset). NaN without NVLink. */
static void nvlink_bandwidth(struct stk_watch *w, struct ag_gpu *g) {
  double kib = (g->s.nvlink_tx_bytes + g->s.nvlink_rx_bytes) / 1024.0;
  if (isnan(kib)) {
    g->nvlink_have = 0;
    return;
  }
  double bw = 0;
  if (g->nvlink_have && w->now > g->nvlink_prev_t && kib >= g->nvlink_prev_kib)
    bw = trunc((kib - g->nvlink_prev_kib) / (w->now - g->nvlink_prev_t) / 1000.0);
  g->s.nvlink_bw_total = bw;
  g->nvlink_prev_kib = kib;
  g->nvlink_prev_t = w->now;
  g->nvlink_have = 1;
}

static void sample_gpus(struct stk_watch *w) {
  unsigned n = 0;
  if (w->nvml) {
    /* The health counters change rarely and NVLink's cost a call per link:
     * read every AG_HEALTH_S, repeated in between. */
    int due = !w->samples || w->now - w->health_at >= AG_HEALTH_S - 1e-9;
    if (due) w->health_at = w->now;
    stk__nvml_health(w->nvml, due);
  }
  if (!w->nvml || stk__nvml_count(w->nvml, &n) != 0) n = 0;
  if (n > AG_MAX_GPUS) n = AG_MAX_GPUS;
  w->ngpus = n > w->ngpus ? n : w->ngpus;
  for (unsigned i = 0; i < n; i++) {
    struct ag_gpu *g = &w->gpus[i];
    struct stk__gpu_sample s;
    stk__nvml_sample(w->nvml, i, &s);
    if (!s.lost || !g->seen) {
      if (s.uuid[0]) snprintf(g->uuid, sizeof g->uuid, "%s", s.uuid);
      if (s.name[0]) snprintf(g->name, sizeof g->name, "%s", s.name);
      if (s.pci[0]) snprintf(g->pci, sizeof g->pci, "%s", s.pci);
    }
    if (s.lost && !g->lost)
      stk_log(STK_LOG_WARN, "watch: GPU %u (%s) is lost: its series stop", i,
              g->uuid[0] ? g->uuid : "no UUID");
    g->lost = s.lost;
    g->seen = 1;
    g->xid_total += s.xid_count;
    /* Keep the processes: the nvml handle reuses its array. */
    if (s.nprocs > g->procs_cap) {
      void *q = realloc(g->procs, s.nprocs * sizeof *g->procs);
      if (q) {
        g->procs = q;
        g->procs_cap = s.nprocs;
      }
    }
    g->nprocs = s.nprocs <= g->procs_cap ? s.nprocs : 0;
    for (unsigned k = 0; k < g->nprocs; k++) {
      g->procs[k].pid = s.procs[k].pid;
      g->procs[k].gpu_instance = s.procs[k].gpu_instance;
      g->procs[k].used_bytes = s.procs[k].used_bytes;
      g->procs[k].sm_util = s.procs[k].sm_util;
      g->procs[k].cpu_s = NAN;
    }
    s.procs = NULL;
    s.nprocs = g->nprocs;
    g->s = s;
    nvlink_bandwidth(w, g);
  }
}

/* A loader's own word for its job (its environment's job id) counts only
 * where it cannot speak for another user: not for a job whose GPU
 * processes all belong to other users than the publication's owner. */
static int job_claim_ok(struct stk_watch *w, const struct ag_loader *L) {
  int others = 0;
  for (unsigned gi = 0; gi < w->ngpus; gi++)
    for (unsigned k = 0; k < w->gpus[gi].nprocs; k++) {
      const struct ag_proc *p = &w->gpus[gi].procs[k];
      if (strcmp(p->job, L->pub.job)) continue;
      if (stk__ag_pid_has_uid(w, p->pid, L->uid) == 1) return 1;
      others = 1;
    }
  return !others;
}

/* Attribute processes and GPUs to jobs (after the mapping is read). */
static void attribute(struct stk_watch *w) {
  for (unsigned i = 0; i < w->ngpus; i++) {
    struct ag_gpu *g = &w->gpus[i];
    if (g->lost) {
      g->nprocs = 0;
      continue;
    }
    for (unsigned k = 0; k < g->nprocs; k++) {
      struct ag_proc *p = &g->procs[k];
      const char *cg = stk__ag_proc_info(w, p->pid, &p->cpu_s);
      int unit = proc_unit(g, p->gpu_instance);
      snprintf(p->cgjob, sizeof p->cgjob, "%s", cg ? cg : "");
      proc_job(g, unit, p->pid, cg, p->job);
      if (!stk__ag_unit_mapped(g, unit) && !stk__ag_unit_kube(g, unit) && !g->mapped && !g->kube)
        stk__ag_gpu_add_job(g, unit, p->job);
    }
  }
  for (unsigned i = 0; i < w->nloaders; i++) {
    struct ag_loader *L = &w->loaders[i];
    L->job[0] = 0;
    /* A loader inside a process that uses a GPU belongs to that GPU's job. */
    for (unsigned gi = 0; gi < w->ngpus && !L->job[0]; gi++)
      for (unsigned k = 0; k < w->gpus[gi].nprocs; k++)
        if (w->gpus[gi].procs[k].pid == L->pub.pid) {
          snprintf(L->job, AG_JOB_LEN, "%s", w->gpus[gi].procs[k].job);
          break;
        }
    const char *cg = L->job[0] ? NULL : stk__ag_proc_info(w, L->pub.pid, NULL);
    /* Else the job of a GPU process of its cgroup (a pod's GPU processes
     * take the pod's name, where the cgroup gives only its UID), else
     * the cgroup's. */
    for (unsigned gi = 0; cg && cg[0] && gi < w->ngpus && !L->job[0]; gi++)
      for (unsigned k = 0; k < w->gpus[gi].nprocs; k++)
        if (!strcmp(w->gpus[gi].procs[k].cgjob, cg)) {
          snprintf(L->job, AG_JOB_LEN, "%s", w->gpus[gi].procs[k].job);
          break;
        }
    if (!L->job[0] && cg && cg[0]) snprintf(L->job, AG_JOB_LEN, "%s", cg);
    if (!L->job[0]) {
      if (L->pub.job[0] && job_claim_ok(w, L))
        snprintf(L->job, AG_JOB_LEN, "%s", L->pub.job);
      else
        snprintf(L->job, AG_JOB_LEN, "pid-%u", L->pub.pid);
    }
  }
}

/* Compute slices of a MIG profile ("1g.10gb", "1c.3g.40gb": 1, 3); 1
 * when the name says none. */
static unsigned profile_slices(const char *p) {
  for (const char *q = p; q && *q;) {
    char *end;
    unsigned long v = strtoul(q, &end, 10);
    if (end != q && *end == 'g' && (end[1] == '.' || !end[1]) && v >= 1 && v <= 8) return (unsigned)v;
    q = strchr(q, '.');
    if (q) q++;
  }
  return 1;
}

/* The share of GPU g that unit stands for: a MIG instance its compute
 * slices of the GPU's (7; 4 on an A30); the whole GPU 1, or on a MIG GPU
 * what its instances with jobs leave. */
static double unit_weight(const struct ag_gpu *g, int unit) {
  unsigned nmig = g->s.nmig < 8 ? g->s.nmig : 8, total = strstr(g->name, "A30") ? 4 : 7, sum = 0;
  for (unsigned m = 0; m < nmig; m++) sum += profile_slices(g->s.mig[m].profile);
  if (sum > total) total = sum;
  if (unit >= 0) return (double)profile_slices(g->s.mig[unit].profile) / total;
  if (!nmig) return 1;
  double rest = 1;
  for (unsigned m = 0; m < nmig; m++)
    if (stk__ag_unit_jobs(g, (int)m)) rest -= (double)profile_slices(g->s.mig[m].profile) / total;
  return rest > 0 ? rest : 0;
}

/* Utilization (percent) of a unit: the GPU's; a MIG instance's graphics
 * activity from its GPM sample (NVML has no other with MIG on); the whole
 * of a MIG GPU, its instances' slice-weighted mean. NaN when unknown. */
double stk__ag_unit_util(const struct ag_gpu *g, int unit) {
  if (unit >= 0) return g->s.mig[unit].gr_active * 100;
  if (!g->s.nmig) return g->s.util;
  double num = 0, den = 0;
  for (unsigned m = 0; m < g->s.nmig && m < 8; m++) {
    double sl = profile_slices(g->s.mig[m].profile);
    num += sl * g->s.mig[m].gr_active * 100;
    den += sl;
  }
  return den > 0 ? num / den : NAN;
}

/* Charge job j its share wgt of GPU g for the interval dt, at utilization
 * u (NaN unknown), de_j joules used by the GPU in it. */
static void charge(struct ag_job *j, const struct ag_gpu *g, double dt, double wgt, double u,
                   double de_j, int throttled, double now) {
  j->gpus++;
  j->last_seen = now;
  if (!isnan(g->s.power_w)) j->power_w += g->s.power_w * wgt;
  if (isnan(u) || u > 0) j->all_idle = 0;
  if (!(dt > 0)) return;
  double share = dt * wgt;
  j->allocated_s += share;
  if (!isnan(de_j)) j->energy_j += de_j * wgt;
  if (!isnan(g->s.reasons))
    for (int r = 0; r < AG_NREASONS; r++)
      if ((uint64_t)g->s.reasons & ag_reasons[r].bit) j->throttle_s[r] += share;
  if (isnan(u)) {
    j->unknown_s += share;
    return;
  }
  double busy = share * (u > 100 ? 1 : u / 100.0);
  double idle = share - busy;
  j->busy_s += busy;
  j->idle_s += idle;
  if (throttled)
    j->throttled_s += busy;
  else
    j->productive_s += busy;
  double stall = share * j->input_wait_ratio;
  if (stall > idle) stall = idle;
  j->input_stalled_s += stall;
  j->idle_bucket_s += idle - stall;
}

/* Derive the per-job figures for the interval dt that just ended. */
static void derive(struct stk_watch *w, double dt) {
  for (unsigned i = 0; i < w->njobs; i++) {
    struct ag_job *j = &w->jobs[i];
    j->gpus = j->loaders = 0;
    j->power_w = 0;
    j->all_idle = 1;
    j->input_wait_ratio = 0;
  }
  /* Loaders first: each job's input-wait share of the interval. */
  for (unsigned i = 0; i < w->nloaders; i++) {
    struct ag_loader *L = &w->loaders[i];
    struct ag_job *j = stk__ag_job(w, L->job);
    if (!j) continue;
    j->loaders++;
    j->last_seen = w->now;
    double wait = (double)L->pub.consumer_wait_ns / 1e9;
    if (L->pub.waiting_since_unix_ns) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      double nowu = (double)ts.tv_sec + ts.tv_nsec / 1e9;
      double since = (double)L->pub.waiting_since_unix_ns / 1e9;
      if (nowu > since) wait += nowu - since;
    }
    if (L->have_prev > 0 && dt > 0) {
      double d = wait - L->prev_wait_s;
      if (d > 0) {
        j->loader_wait_s += d;
        j->input_wait_ratio += d;
      }
    }
    L->prev_wait_s = wait;
    L->have_prev = 1;
  }
  for (unsigned i = 0; i < w->njobs; i++) {
    struct ag_job *j = &w->jobs[i];
    if (j->loaders && dt > 0) {
      double r = j->input_wait_ratio / (dt * j->loaders);
      j->input_wait_ratio = r > 1 ? 1 : r;
    }
  }
  for (unsigned gi = 0; gi < w->ngpus; gi++) {
    struct ag_gpu *g = &w->gpus[gi];
    if (g->lost) {
      g->prev_energy_mj = NAN;
      continue;
    }
    double de_j = NAN;
    if (!isnan(g->s.energy_mj)) {
      if (!isnan(g->prev_energy_mj) && g->s.energy_mj >= g->prev_energy_mj)
        de_j = (g->s.energy_mj - g->prev_energy_mj) / 1000.0;
      g->prev_energy_mj = g->s.energy_mj;
    } else if (!isnan(g->s.power_w)) {
      de_j = g->s.power_w * dt;
    }
    if (!g->nalloc) continue;
    int throttled = !isnan(g->s.reasons) && ((uint64_t)g->s.reasons & STK__REASONS_THROTTLE);
    int nmig = g->s.nmig < 8 ? (int)g->s.nmig : 8;
    for (int unit = -1; unit < nmig; unit++) {
      unsigned n = stk__ag_unit_jobs(g, unit);
      if (!n) continue;
      double wgt = unit_weight(g, unit) / n;
      double u = stk__ag_unit_util(g, unit);
      for (unsigned k = 0; k < g->nalloc; k++) {
        if (g->alloc[k].unit != unit) continue;
        struct ag_job *j = stk__ag_job(w, g->alloc[k].job);
        if (!j) continue;
        charge(j, g, dt, wgt, u, de_j, throttled, w->now);
      }
    }
  }
  for (unsigned i = 0; i < w->njobs;) {
    struct ag_job *j = &w->jobs[i];
    if (j->gpus && j->all_idle && dt > 0)
      j->idle_streak_s += dt;
    else if (!j->gpus || !j->all_idle)
      j->idle_streak_s = 0;
    if (w->now - j->last_seen > w->o.job_ttl_s) {
      w->jobs[i] = w->jobs[--w->njobs];
      continue;
    }
    i++;
  }
}

int stk_watch_sample(struct stk_watch *w) {
  stk__ag_http_refresh(w); /* before w->mu: a restart waits for requests, which take it */
  uint64_t cpu0 = stk__ag_thread_cpu_ns();
  pthread_mutex_lock(&w->mu);
  w->prev = w->now;
  if (w->o.fast_time)
    w->now = w->samples ? w->now + w->o.interval_s : 0;
  else
    w->now = mono_s() - w->t_start_real;
  double dt = w->samples ? w->now - w->prev : 0;
  sample_gpus(w);
  stk__ag_read_mapping(w);
  stk__ag_read_pods(w);
  stk__ag_host_sample(w, dt);
  stk__ag_loaders_sample(w);
  attribute(w);
  stk__ag_proc_cache_swap(w);
  derive(w, dt);
  stk__ag_reaper(w);
  w->samples++;
  w->expo_stale = 1; /* built at the next scrape: most samples are never scraped */
  w->sample_cost_s = (double)(stk__ag_thread_cpu_ns() - cpu0) / 1e9;
  pthread_mutex_unlock(&w->mu);
  return 0;
}

int stk_watch_wait(struct stk_watch *w, volatile int *stop) {
  if (w->o.fast_time) return stop && __atomic_load_n(stop, __ATOMIC_RELAXED) ? 1 : 0;
  double due = w->t_start_real + w->now + w->o.interval_s;
  for (;;) {
    if (stop && __atomic_load_n(stop, __ATOMIC_RELAXED)) return 1;
    double left = due - mono_s();
    if (left <= 0) return 0;
    stk_sleep_ns((uint64_t)((left < 0.1 ? left : 0.1) * 1e9));
  }
}
