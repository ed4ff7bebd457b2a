/* The agent's state for other readers than Prometheus: the JSON of
 * `stoker watch --once --json` and the view `stoker top` draws. Both copy
 * under the agent's lock, like a scrape. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "agent_impl.h"

/* ---- JSON ---- */

static void kd(struct stk_json *j, const char *k, double v) {
  stk_json_key(j, k);
  if (isnan(v))
    stk_json_null(j);
  else
    stk_json_dbl(j, v);
}

void stk_watch_json(struct stk_watch *w, struct stk_json *j) {
  pthread_mutex_lock(&w->mu);
  stk_json_obj_begin(j);
  stk_json_kstr(j, "hostname", w->hostname);
  stk_json_kstr(j, "nvml", w->nvml_status);
  stk_json_ku64(j, "samples", w->samples);
  stk_json_kdbl(j, "interval_s", w->o.interval_s);
  stk_json_kdbl(j, "elapsed_s", w->now);
  stk_json_key(j, "gpus");
  stk_json_arr_begin(j);
  for (unsigned i = 0; i < w->ngpus; i++) {
    struct ag_gpu *g = &w->gpus[i];
    stk_json_obj_begin(j);
    stk_json_ku64(j, "index", i);
    stk_json_kstr(j, "uuid", g->uuid);
    stk_json_kstr(j, "model", g->name);
    stk_json_kstr(j, "pci_bus_id", g->pci);
    stk_json_key(j, "lost");
    stk_json_bool(j, g->lost);
    kd(j, "util_pct", g->lost ? NAN : g->s.util);
    kd(j, "mem_util_pct", g->lost ? NAN : g->s.mem_util);
    kd(j, "fb_used_mib", g->lost ? NAN : g->s.fb_used_mib);
    kd(j, "fb_total_mib", g->lost ? NAN : g->s.fb_total_mib);
    kd(j, "power_w", g->lost ? NAN : g->s.power_w);
    kd(j, "energy_mj", g->lost ? NAN : g->s.energy_mj);
    kd(j, "temp_c", g->lost ? NAN : g->s.temp_c);
    kd(j, "sm_clock_mhz", g->lost ? NAN : g->s.sm_clock_mhz);
    kd(j, "mem_clock_mhz", g->lost ? NAN : g->s.mem_clock_mhz);
    kd(j, "clock_event_reasons", g->lost ? NAN : g->s.reasons);
    kd(j, "sm_active", g->lost ? NAN : g->s.sm_active);
    kd(j, "tensor_active", g->lost ? NAN : g->s.tensor_active);
    kd(j, "last_xid", g->s.last_xid);
    kd(j, "xid_errors", g->xid_total);
    stk_json_key(j, "jobs");
    stk_json_arr_begin(j);
    for (unsigned k = 0; k < g->nalloc && !g->lost; k++)
      if (g->alloc[k].unit < 0 || !g->s.nmig) stk_json_str(j, g->alloc[k].job);
    stk_json_arr_end(j);
    stk_json_key(j, "processes");
    stk_json_arr_begin(j);
    for (unsigned k = 0; k < g->nprocs; k++) {
      stk_json_obj_begin(j);
      stk_json_ku64(j, "pid", g->procs[k].pid);
      stk_json_kstr(j, "job", g->procs[k].job);
      kd(j, "used_bytes", g->procs[k].used_bytes);
      kd(j, "sm_util_pct", g->procs[k].sm_util);
      kd(j, "cpu_s", g->procs[k].cpu_s);
      stk_json_obj_end(j);
    }
    stk_json_arr_end(j);
    stk_json_key(j, "mig");
    stk_json_arr_begin(j);
    for (unsigned m = 0; m < g->s.nmig && !g->lost; m++) {
      stk_json_obj_begin(j);
      stk_json_ku64(j, "gpu_instance", g->s.mig[m].gi_id);
      stk_json_kstr(j, "profile", g->s.mig[m].profile);
      kd(j, "fb_used_mib", g->s.mig[m].fb_used_mib);
      kd(j, "fb_free_mib", g->s.mig[m].fb_free_mib);
      kd(j, "gr_active", g->s.mig[m].gr_active);
      stk_json_key(j, "jobs");
      stk_json_arr_begin(j);
      for (unsigned k = 0; k < g->nalloc; k++)
        if (g->alloc[k].unit == (int)m) stk_json_str(j, g->alloc[k].job);
      stk_json_arr_end(j);
      stk_json_obj_end(j);
    }
    stk_json_arr_end(j);
    stk_json_obj_end(j);
  }
  stk_json_arr_end(j);
  struct ag_host *h = &w->host;
  stk_json_key(j, "host");
  stk_json_obj_begin(j);
  kd(j, "cpu_busy_ratio", h->cpu_busy);
  kd(j, "cpu_steal_ratio", h->cpu_steal);
  kd(j, "mem_total_bytes", h->mem_total);
  kd(j, "mem_available_bytes", h->mem_avail);
  kd(j, "psi_cpu_some_ratio", h->psi_avg10[0][0]);
  kd(j, "psi_memory_some_ratio", h->psi_avg10[1][0]);
  kd(j, "psi_io_some_ratio", h->psi_avg10[2][0]);
  stk_json_obj_end(j);
  stk_json_key(j, "loaders");
  stk_json_arr_begin(j);
  for (unsigned i = 0; i < w->nloaders; i++) {
    struct ag_loader *L = &w->loaders[i];
    stk_json_obj_begin(j);
    stk_json_ku64(j, "pid", L->pub.pid);
    stk_json_kstr(j, "job", L->job);
    stk_json_kstr(j, "dataset", L->pub.dataset);
    stk_json_ku64(j, "batches", L->pub.batches);
    stk_json_ku64(j, "samples", L->pub.samples);
    stk_json_kdbl(j, "consumer_wait_s", (double)L->pub.consumer_wait_ns / 1e9);
    stk_json_key(j, "stages");
    stk_json_obj_begin(j);
    for (int s = 0; s < STK_PUB_STAGES; s++) {
      stk_json_key(j, L->pub.stage[s].name);
      stk_json_obj_begin(j);
      stk_json_kdbl(j, "busy_s", (double)L->pub.stage[s].busy_ns / 1e9);
      stk_json_kdbl(j, "wait_in_s", (double)L->pub.stage[s].wait_in_ns / 1e9);
      stk_json_kdbl(j, "wait_out_s", (double)L->pub.stage[s].wait_out_ns / 1e9);
      stk_json_obj_end(j);
    }
    stk_json_obj_end(j);
    stk_json_obj_end(j);
  }
  stk_json_arr_end(j);
  stk_json_key(j, "jobs");
  stk_json_arr_begin(j);
  for (unsigned i = 0; i < w->njobs; i++) {
    struct ag_job *jb = &w->jobs[i];
    stk_json_obj_begin(j);
    stk_json_kstr(j, "job", jb->id);
    stk_json_ku64(j, "gpus", jb->gpus);
    stk_json_ku64(j, "loaders", jb->loaders);
    stk_json_kdbl(j, "gpu_allocated_s", jb->allocated_s);
    stk_json_kdbl(j, "gpu_busy_s", jb->busy_s);
    stk_json_kdbl(j, "gpu_idle_s", jb->idle_s);
    stk_json_key(j, "throttled_s");
    stk_json_obj_begin(j);
    for (int r = 0; r < AG_NREASONS; r++) stk_json_kdbl(j, ag_reasons[r].name, jb->throttle_s[r]);
    stk_json_obj_end(j);
    stk_json_kdbl(j, "energy_j", jb->energy_j);
    kd(j, "energy_cost", w->o.price_per_kwh > 0 ? jb->energy_j / 3.6e6 * w->o.price_per_kwh : NAN);
    kd(j, "carbon_g", w->o.carbon_g_per_kwh > 0 ? jb->energy_j / 3.6e6 * w->o.carbon_g_per_kwh : NAN);
    stk_json_kdbl(j, "power_w", jb->power_w);
    stk_json_kdbl(j, "input_wait_s", jb->loader_wait_s);
    stk_json_kdbl(j, "input_wait_ratio", jb->input_wait_ratio);
    stk_json_kdbl(j, "idle_streak_s", jb->idle_streak_s);
    stk_json_key(j, "goodput_s");
    stk_json_obj_begin(j);
    stk_json_kdbl(j, "productive", jb->productive_s);
    stk_json_kdbl(j, "input_stalled", jb->input_stalled_s);
    stk_json_kdbl(j, "idle", jb->idle_bucket_s);
    stk_json_kdbl(j, "throttled", jb->throttled_s);
    stk_json_kdbl(j, "unknown", jb->unknown_s);
    stk_json_obj_end(j);
    stk_json_obj_end(j);
  }
  stk_json_arr_end(j);
  stk_json_obj_end(j);
  pthread_mutex_unlock(&w->mu);
}

/* ---- the view for `stoker top` ---- */

int stk_watch_view(struct stk_watch *w, struct stk_watch_view *v) {
  memset(v, 0, sizeof *v);
  pthread_mutex_lock(&w->mu);
  v->gpus = calloc(w->ngpus + 1, sizeof *v->gpus);
  v->jobs = calloc(w->njobs + 1, sizeof *v->jobs);
  if (!v->gpus || !v->jobs) {
    pthread_mutex_unlock(&w->mu);
    stk_watch_view_free(v);
    return STK_ENOMEM;
  }
  v->ngpus = w->ngpus;
  for (unsigned i = 0; i < w->ngpus; i++) {
    struct ag_gpu *g = &w->gpus[i];
    struct stk_watch_gpu_view *gv = &v->gpus[i];
    gv->index = i;
    snprintf(gv->uuid, sizeof gv->uuid, "%s", g->uuid);
    snprintf(gv->model, sizeof gv->model, "%s", g->name);
    snprintf(gv->job, sizeof gv->job, "%s", g->nalloc && !g->lost ? g->alloc[0].job : "");
    gv->lost = g->lost;
    gv->util = g->lost ? NAN : stk__ag_unit_util(g, -1); /* MIG: its instances' mean */
    gv->power_w = g->lost ? NAN : g->s.power_w;
    gv->mem_used_mib = g->lost ? NAN : g->s.fb_used_mib;
    gv->mem_total_mib = g->lost ? NAN : g->s.fb_total_mib;
    gv->temp_c = g->lost ? NAN : g->s.temp_c;
    gv->reasons = isnan(g->s.reasons) || g->lost ? 0 : (uint64_t)g->s.reasons;
    gv->throttled = (gv->reasons & STK__REASONS_THROTTLE) != 0;
    gv->nprocs = g->nprocs;
  }
  v->njobs = w->njobs;
  for (unsigned i = 0; i < w->njobs; i++) {
    struct ag_job *j = &w->jobs[i];
    struct stk_watch_job_view *jv = &v->jobs[i];
    snprintf(jv->job, sizeof jv->job, "%s", j->id);
    jv->gpus = j->gpus;
    jv->loaders = j->loaders;
    jv->allocated_s = j->allocated_s;
    jv->busy_s = j->busy_s;
    jv->idle_s = j->idle_s;
    jv->productive_s = j->productive_s;
    jv->input_stalled_s = j->input_stalled_s;
    jv->idle_bucket_s = j->idle_bucket_s;
    jv->throttled_s = j->throttled_s;
    jv->unknown_s = j->unknown_s;
    jv->energy_j = j->energy_j;
    jv->idle_streak_s = j->idle_streak_s;
    jv->power_w = j->power_w;
    jv->input_wait_ratio = j->input_wait_ratio;
  }
  v->cpu_busy = w->host.cpu_busy;
  v->cpu_steal = w->host.cpu_steal;
  v->mem_used_ratio = isnan(w->host.mem_total) || isnan(w->host.mem_avail) || w->host.mem_total <= 0
                          ? NAN
                          : 1 - w->host.mem_avail / w->host.mem_total;
  snprintf(v->nvml_status, sizeof v->nvml_status, "%s", w->nvml_status);
  pthread_mutex_unlock(&w->mu);
  return 0;
}

void stk_watch_view_free(struct stk_watch_view *v) {
  free(v->gpus);
  free(v->jobs);
  v->gpus = NULL;
  v->jobs = NULL;
}
