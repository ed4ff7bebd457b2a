/* The Prometheus text exposition: device metrics under dcgm-exporter's
 * names and labels, stoker's own under stoker_ (the JSON and the view of
 * `stoker top` are in view.c). The exposition is built at most once per
 * sample, at the first scrape after it, so a scrape only copies it. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "agent_impl.h"

void stk__ag_printf(struct ag_buf *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    size_t room = b->cap - b->len;
    int n = vsnprintf(b->p ? b->p + b->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < room) {
      b->len += (size_t)n;
      return;
    }
    size_t nc = b->cap ? b->cap * 2 : 16384;
    while (nc < b->len + (size_t)n + 1) nc *= 2;
    char *q = realloc(b->p, nc);
    if (!q) {
      b->oom = 1;
      return;
    }
    b->p = q;
    b->cap = nc;
  }
}

void stk__ag_label(struct ag_buf *b, const char *s) {
  char tmp[512];
  size_t o = 0;
  for (; *s && o + 3 < sizeof tmp; s++) {
    if (*s == '\\' || *s == '"') {
      tmp[o++] = '\\';
      tmp[o++] = *s;
    } else if (*s == '\n') {
      tmp[o++] = '\\';
      tmp[o++] = 'n';
    } else {
      tmp[o++] = *s;
    }
  }
  tmp[o] = 0;
  stk__ag_printf(b, "\"%s\"", tmp);
}

static void family(struct ag_buf *b, const char *name, const char *type, const char *help) {
  stk__ag_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void val(struct ag_buf *b, double v) {
  if (v == floor(v) && fabs(v) < 1e15)
    stk__ag_printf(b, " %.0f\n", v);
  else
    stk__ag_printf(b, " %.9g\n", v);
}

/* dcgm-exporter's labels for GPU i (4.x releases, default device mode),
 * in its order: gpu, UUID, pci_bus_id, device, modelName, Hostname, then
 * its label fields (DCGM_FI_DRIVER_VERSION) and its attributes sorted by
 * name (container, err_code, err_msg on the XID series, hpc_job where a
 * mapping names a job, namespace, pod where a pod holds the GPU). mig >= 0
 * names that MIG instance (GPU_I_PROFILE, GPU_I_ID after modelName); xid
 * >= 0 adds err_code and err_msg for that code; a (NULL: none) is the
 * job or pod the series is for. */
static void gpu_labels(struct stk_watch *w, struct ag_buf *b, unsigned i, int mig,
                       const struct ag_alloc *a, double xid) {
  struct ag_gpu *g = &w->gpus[i];
  stk__ag_printf(b, "{gpu=\"%u\",UUID=", i);
  stk__ag_label(b, g->uuid);
  stk__ag_printf(b, ",pci_bus_id=");
  stk__ag_label(b, g->pci);
  stk__ag_printf(b, ",device=\"nvidia%u\",modelName=", i);
  stk__ag_label(b, g->name);
  if (mig >= 0) {
    stk__ag_printf(b, ",GPU_I_PROFILE=");
    stk__ag_label(b, g->s.mig[mig].profile);
    stk__ag_printf(b, ",GPU_I_ID=\"%u\"", g->s.mig[mig].gi_id);
  }
  stk__ag_printf(b, ",Hostname=");
  stk__ag_label(b, w->hostname);
  const char *drv = w->nvml ? stk__nvml_driver(w->nvml) : "";
  if (drv[0]) {
    stk__ag_printf(b, ",DCGM_FI_DRIVER_VERSION=");
    stk__ag_label(b, drv);
  }
  if (a && a->pod) {
    stk__ag_printf(b, ",container=");
    stk__ag_label(b, a->pod->container);
  }
  if (xid >= 0) {
    unsigned code = xid < 4294967295.0 ? (unsigned)xid : 4294967295u;
    stk__ag_printf(b, ",err_code=\"%u\",err_msg=", code);
    stk__ag_label(b, stk__ag_xid_text(code));
  }
  if (a && !a->pod) {
    stk__ag_printf(b, ",hpc_job=");
    stk__ag_label(b, a->job);
  }
  if (a && a->pod) {
    stk__ag_printf(b, ",namespace=");
    stk__ag_label(b, a->pod->ns);
    stk__ag_printf(b, ",pod=");
    stk__ag_label(b, a->pod->pod);
  }
  stk__ag_printf(b, "}");
}

/* A device metric, and what a MIG GPU's instances show of it (as
 * dcgm-exporter's default "flex" mode: a MIG GPU is its instances, each
 * with the GPU's value of a whole-GPU field): DEV the GPU's value, INST
 * the instance's own (at moff in struct stk__mig), NONE nothing (NVML
 * gives no utilization with MIG on; reserved memory is the GPU's). */
enum { ON_MIG_DEV, ON_MIG_INST, ON_MIG_NONE };
struct dev_metric {
  const char *name, *type, *help;
  size_t off; /* offset of the double in struct stk__gpu_sample */
  int on_mig;
  size_t moff;
};
#define OFF(f) offsetof(struct stk__gpu_sample, f)
#define MOFF(f) offsetof(struct stk__mig, f)
static const struct dev_metric dev_metrics[] = {
    {"DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", OFF(util), ON_MIG_NONE, 0},
    {"DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", OFF(mem_util), ON_MIG_NONE, 0},
    {"DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", OFF(fb_used_mib), ON_MIG_INST, MOFF(fb_used_mib)},
    {"DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", OFF(fb_free_mib), ON_MIG_INST, MOFF(fb_free_mib)},
    {"DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).",
     OFF(fb_reserved_mib), ON_MIG_NONE, 0},
    {"DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", OFF(power_w), ON_MIG_DEV, 0},
    {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter",
     "Total energy consumption since boot (in mJ).", OFF(energy_mj), ON_MIG_DEV, 0},
    {"DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", OFF(temp_c), ON_MIG_DEV, 0},
    {"DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", OFF(mem_temp_c), ON_MIG_DEV, 0},
    {"DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", OFF(sm_clock_mhz), ON_MIG_DEV, 0},
    {"DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", OFF(mem_clock_mhz), ON_MIG_DEV, 0},
    {"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge",
     "Current clock event (throttle) reasons, NVML's bitmask.", OFF(reasons), ON_MIG_DEV, 0},
    {"DCGM_FI_DEV_POWER_VIOLATION", "counter",
     "Throttling duration due to power constraints (in ns).", OFF(viol_power_ns), ON_MIG_DEV, 0},
    {"DCGM_FI_DEV_THERMAL_VIOLATION", "counter",
     "Throttling duration due to thermal constraints (in ns).", OFF(viol_thermal_ns), ON_MIG_DEV, 0},
    {"DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", OFF(last_xid), ON_MIG_DEV, 0},
    {"DCGM_FI_DEV_ENC_UTIL", "gauge", "Video encoder utilization (in %).", OFF(enc_util), ON_MIG_DEV, 0},
    {"DCGM_FI_DEV_DEC_UTIL", "gauge", "Video decoder utilization (in %).", OFF(dec_util), ON_MIG_DEV, 0},
    {"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "PCIe replays (retried transfers).",
     OFF(pcie_replay), ON_MIG_DEV, 0},
    {"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter",
     "Single-bit (corrected) ECC errors since the driver loaded.", OFF(ecc_sbe_vol), ON_MIG_DEV, 0},
    {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter",
     "Double-bit (uncorrected) ECC errors since the driver loaded.", OFF(ecc_dbe_vol), ON_MIG_DEV, 0},
    {"DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "counter",
     "Single-bit (corrected) ECC errors over the device's life.", OFF(ecc_sbe_agg), ON_MIG_DEV, 0},
    {"DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "counter",
     "Double-bit (uncorrected) ECC errors over the device's life.", OFF(ecc_dbe_agg), ON_MIG_DEV, 0},
    {"DCGM_FI_DEV_RETIRED_SBE", "counter", "Pages retired for repeated single-bit ECC errors.",
     OFF(retired_sbe), ON_MIG_DEV, 0},
    {"DCGM_FI_DEV_RETIRED_DBE", "counter", "Pages retired for double-bit ECC errors.",
     OFF(retired_dbe), ON_MIG_DEV, 0},
    {"DCGM_FI_DEV_RETIRED_PENDING", "counter", /* dcgm-exporter's type for it */
     "1 when a page retirement waits for a reset.",
     OFF(retired_pending), ON_MIG_DEV, 0},
    {"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter",
     "Memory rows remapped for correctable errors.", OFF(remap_corr), ON_MIG_DEV, 0},
    {"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter",
     "Memory rows remapped for uncorrectable errors.", OFF(remap_unc), ON_MIG_DEV, 0},
    {"DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "1 when a row remapping failed.",
     OFF(remap_failure), ON_MIG_DEV, 0},
    {"DCGM_FI_DEV_ROW_REMAP_PENDING", "gauge", "1 when a row remapping waits for a reset.",
     OFF(remap_pending), ON_MIG_DEV, 0},
    {"DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "counter",
     "NVLink flow-control CRC errors, all links.", OFF(nvlink_crc_flit), ON_MIG_DEV, 0},
    {"DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "counter",
     "NVLink data CRC errors, all links.", OFF(nvlink_crc_data), ON_MIG_DEV, 0},
    {"DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "counter",
     "NVLink transmit replays, all links.", OFF(nvlink_replay), ON_MIG_DEV, 0},
    {"DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "counter",
     "NVLink link recoveries, all links.", OFF(nvlink_recovery), ON_MIG_DEV, 0},
    {"DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge",
     "1 when the vGPU software license is held (0 where vGPU licensing does not apply).",
     OFF(vgpu_license), ON_MIG_DEV, 0},
    {"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter",
     "NVLink data sent and received, all links, over the last interval (in MB/s, as DCGM).",
     OFF(nvlink_bw_total), ON_MIG_DEV, 0},
    {"DCGM_FI_PROF_PCIE_TX_BYTES", "gauge",
     "PCIe traffic from the GPU (in bytes/s; NVML GPM).", OFF(pcie_tx_bps), ON_MIG_DEV, 0},
    {"DCGM_FI_PROF_PCIE_RX_BYTES", "gauge",
     "PCIe traffic to the GPU (in bytes/s; NVML GPM).", OFF(pcie_rx_bps), ON_MIG_DEV, 0},
    {"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active.",
     OFF(gr_active), ON_MIG_INST, MOFF(gr_active)},
    {"DCGM_FI_PROF_SM_ACTIVE", "gauge", "The ratio of cycles an SM has at least 1 warp assigned.",
     OFF(sm_active), ON_MIG_INST, MOFF(sm_active)},
    {"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge",
     "Ratio of cycles the tensor (HMMA) pipe is active.", OFF(tensor_active), ON_MIG_INST, MOFF(tensor_active)},
    {"DCGM_FI_PROF_DRAM_ACTIVE", "gauge",
     "Ratio of cycles the device memory interface is active sending or receiving data.",
     OFF(dram_active), ON_MIG_INST, MOFF(dram_active)},
};

static double sval(const struct ag_gpu *g, size_t off) {
  return *(const double *)(const void *)((const char *)&g->s + off);
}

/* One device series per job of unit (GPU i's whole, or MIG instance
 * mig) where a mapping names them (dcgm-exporter's hpc_job) or per pod
 * holding it (its pod, namespace, container), else one. */
static void dev_series(struct stk_watch *w, struct ag_buf *b, const struct dev_metric *dm,
                       unsigned i, int mig, double v, int *any) {
  const struct ag_gpu *g = &w->gpus[i];
  if (!(*any)++) family(b, dm->name, dm->type, dm->help);
  double xid = dm->off == OFF(last_xid) ? v : -1;
  if (!w->o.no_job_labels && (stk__ag_unit_mapped(g, mig) || stk__ag_unit_kube(g, mig))) {
    for (unsigned k = 0; k < g->nalloc; k++)
      if (g->alloc[k].unit == mig) {
        stk__ag_printf(b, "%s", dm->name);
        gpu_labels(w, b, i, mig, &g->alloc[k], xid);
        val(b, v);
      }
    return;
  }
  stk__ag_printf(b, "%s", dm->name);
  gpu_labels(w, b, i, mig, NULL, xid);
  val(b, v);
}

static void device_metrics(struct stk_watch *w, struct ag_buf *b) {
  for (size_t m = 0; m < STK__ARRAY_LEN(dev_metrics); m++) {
    const struct dev_metric *dm = &dev_metrics[m];
    int any = 0;
    for (unsigned i = 0; i < w->ngpus; i++) {
      struct ag_gpu *g = &w->gpus[i];
      if (!g->seen || g->lost) continue;
      if (!g->s.nmig) {
        double v = sval(g, dm->off);
        if (!isnan(v)) dev_series(w, b, dm, i, -1, v, &any);
        continue;
      }
      if (dm->on_mig == ON_MIG_NONE) continue;
      for (unsigned mi = 0; mi < g->s.nmig && mi < 8; mi++) {
        double v = dm->on_mig == ON_MIG_DEV
                       ? sval(g, dm->off)
                       : *(const double *)(const void *)((const char *)&g->s.mig[mi] + dm->moff);
        if (!isnan(v)) dev_series(w, b, dm, i, (int)mi, v, &any);
      }
    }
  }
}

static void gpu_id_labels(struct stk_watch *w, struct ag_buf *b, unsigned i) {
  stk__ag_printf(b, "gpu=\"%u\",UUID=", i);
  stk__ag_label(b, w->gpus[i].uuid);
}

/* The build, as other exporters' *_build_info: the commit where the build
 * passed -DSTOKER_COMMIT="..." (else "unknown"), the compiler, and the
 * flags that change behaviour (optimized or not, sanitizers, assertions). */
#ifndef STOKER_COMMIT
#define STOKER_COMMIT "unknown"
#endif
#if defined(__SANITIZE_ADDRESS__)
#define BI_ASAN ",asan"
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BI_ASAN ",asan"
#endif
#endif
#ifndef BI_ASAN
#define BI_ASAN ""
#endif
#ifdef __OPTIMIZE__
#define BI_OPT "optimized"
#else
#define BI_OPT "debug"
#endif
#ifdef NDEBUG
#define BI_NDEBUG ",ndebug"
#else
#define BI_NDEBUG ""
#endif

static void build_info(struct ag_buf *b) {
  family(b, "stoker_build_info", "gauge",
         "Always 1; labels: stoker's version, commit, compiler and build flags.");
  stk__ag_printf(b, "stoker_build_info{version=");
  stk__ag_label(b, stk_version());
  stk__ag_printf(b, ",commit=");
  stk__ag_label(b, STOKER_COMMIT);
#ifdef __VERSION__
  stk__ag_printf(b, ",compiler=");
  stk__ag_label(b, __VERSION__);
#endif
  stk__ag_printf(b, ",flags=");
  stk__ag_label(b, BI_OPT BI_ASAN BI_NDEBUG);
  stk__ag_printf(b, "} 1\n");
}

static void agent_metrics(struct stk_watch *w, struct ag_buf *b) {
  build_info(b);
  family(b, "stoker_watch_nvml_up", "gauge", "1 when NVML is loaded and answering, else 0.");
  stk__ag_printf(b, "stoker_watch_nvml_up %d\n", w->nvml ? 1 : 0);
  family(b, "stoker_watch_samples_total", "counter", "Samples taken by the agent.");
  stk__ag_printf(b, "stoker_watch_samples_total %llu\n", (unsigned long long)w->samples);
  family(b, "stoker_watch_sample_cpu_seconds", "gauge", "CPU time the last sample took.");
  stk__ag_printf(b, "stoker_watch_sample_cpu_seconds %.6f\n", w->sample_cost_s);
  family(b, "stoker_watch_render_cpu_seconds", "gauge",
         "CPU time the previous exposition took to build (once per scraped sample).");
  stk__ag_printf(b, "stoker_watch_render_cpu_seconds %.6f\n", w->render_cost_s);
  if (w->ngpus) {
    family(b, "stoker_gpu_lost", "gauge", "1 when the GPU fell off the bus; its other series stop.");
    for (unsigned i = 0; i < w->ngpus; i++) {
      stk__ag_printf(b, "stoker_gpu_lost{");
      gpu_id_labels(w, b, i);
      stk__ag_printf(b, "} %d\n", w->gpus[i].lost);
    }
    family(b, "stoker_gpu_xid_errors_total", "counter", "XID errors seen since the agent started.");
    for (unsigned i = 0; i < w->ngpus; i++) {
      stk__ag_printf(b, "stoker_gpu_xid_errors_total{");
      gpu_id_labels(w, b, i);
      stk__ag_printf(b, "} %.0f\n", w->gpus[i].xid_total);
    }
  }
  int any = 0;
  for (unsigned i = 0; i < w->ngpus; i++) {
    const struct ag_gpu *g = &w->gpus[i];
    if (g->lost || isnan(g->s.nvlink_tx_bytes) || isnan(g->s.nvlink_rx_bytes)) continue;
    if (!any++)
      family(b, "stoker_gpu_nvlink_data_bytes_total", "counter",
             "NVLink data (payload) bytes, all links, by direction (NVML's throughput fields).");
    for (int d = 0; d < 2; d++) {
      stk__ag_printf(b, "stoker_gpu_nvlink_data_bytes_total{");
      gpu_id_labels(w, b, i);
      stk__ag_printf(b, ",direction=\"%s\"}", d ? "rx" : "tx");
      val(b, d ? g->s.nvlink_rx_bytes : g->s.nvlink_tx_bytes);
    }
  }
  if (w->nvml) {
    family(b, "stoker_watch_nvml_errors_total", "counter", "NVML calls that failed, by call.");
    for (int c = 0; c < STK__NVML_NCALLS; c++)
      stk__ag_printf(b, "stoker_watch_nvml_errors_total{call=\"%s\"} %llu\n",
                     stk__nvml_call_names[c],
                     (unsigned long long)stk__nvml_errors(w->nvml, (enum stk__nvml_call)c));
  }
  family(b, "stoker_watch_mapping_errors_total", "counter",
         "Job-mapping files skipped as malformed (counted at each sample).");
  stk__ag_printf(b, "stoker_watch_mapping_errors_total %llu\n", (unsigned long long)w->mapping_errors);
  if (w->podres_socket) {
    family(b, "stoker_watch_pod_resources_errors_total", "counter",
           "Failed reads of the kubelet's pod resources (the last good answer is kept).");
    stk__ag_printf(b, "stoker_watch_pod_resources_errors_total %llu\n",
                   (unsigned long long)w->podres_errors);
  }
  family(b, "stoker_watch_loader_errors_total", "counter",
         "Loader publication files skipped, by reason (docs/watch.md).");
  for (int r = 0; r < AG_REJ_N; r++)
    stk__ag_printf(b, "stoker_watch_loader_errors_total{reason=\"%s\"} %llu\n",
                   ag_pub_reject_names[r], (unsigned long long)w->loader_errors[r]);
  family(b, "stoker_reaper_actions_total", "counter", "Idle-job reaper actions, by kind.");
  stk__ag_printf(b, "stoker_reaper_actions_total{action=\"warn\"} %llu\n",
                 (unsigned long long)w->reaper_warn);
  stk__ag_printf(b, "stoker_reaper_actions_total{action=\"act\"} %llu\n",
                 (unsigned long long)w->reaper_act);
  stk__ag_printf(b, "stoker_reaper_actions_total{action=\"dry_run\"} %llu\n",
                 (unsigned long long)w->reaper_dry);
}

static void host_metrics(struct stk_watch *w, struct ag_buf *b) {
  struct ag_host *h = &w->host;
  static const char *const modes[3] = {"busy", "steal", "idle"};
  if (!isnan(h->cpu_s[0])) {
    family(b, "stoker_host_cpu_seconds_total", "counter", "Host CPU time by mode, all cores.");
    for (int m = 0; m < 3; m++)
      stk__ag_printf(b, "stoker_host_cpu_seconds_total{mode=\"%s\"} %.2f\n", modes[m], h->cpu_s[m]);
  }
  if (!isnan(h->cpu_busy)) {
    family(b, "stoker_host_cpu_busy_ratio", "gauge", "Share of host CPU time busy in the last interval.");
    stk__ag_printf(b, "stoker_host_cpu_busy_ratio %.4f\n", h->cpu_busy);
    family(b, "stoker_host_cpu_steal_ratio", "gauge", "Share of host CPU time stolen by the hypervisor.");
    stk__ag_printf(b, "stoker_host_cpu_steal_ratio %.4f\n", h->cpu_steal);
  }
  if (!isnan(h->mem_total)) {
    family(b, "stoker_host_memory_total_bytes", "gauge", "Host memory (MemTotal).");
    stk__ag_printf(b, "stoker_host_memory_total_bytes %.0f\n", h->mem_total);
  }
  if (!isnan(h->mem_avail)) {
    family(b, "stoker_host_memory_available_bytes", "gauge", "Host memory available (MemAvailable).");
    stk__ag_printf(b, "stoker_host_memory_available_bytes %.0f\n", h->mem_avail);
  }
  static const char *const res[3] = {"cpu", "memory", "io"};
  static const char *const kinds[2] = {"some", "full"};
  int any = 0;
  for (int r = 0; r < 3; r++)
    for (int k = 0; k < 2; k++) {
      if (isnan(h->psi_avg10[r][k])) continue;
      if (!any++) family(b, "stoker_host_pressure_ratio", "gauge",
                         "Pressure stall information, 10 s average, as a ratio.");
      stk__ag_printf(b, "stoker_host_pressure_ratio{resource=\"%s\",kind=\"%s\"} %.4f\n", res[r],
                     kinds[k], h->psi_avg10[r][k]);
    }
  any = 0;
  for (int r = 0; r < 3; r++)
    for (int k = 0; k < 2; k++) {
      if (isnan(h->psi_total_s[r][k])) continue;
      if (!any++) family(b, "stoker_host_pressure_stall_seconds_total", "counter",
                         "Pressure stall time since boot.");
      stk__ag_printf(b, "stoker_host_pressure_stall_seconds_total{resource=\"%s\",kind=\"%s\"} %.6f\n",
                     res[r], kinds[k], h->psi_total_s[r][k]);
    }
}

static void process_metrics(struct stk_watch *w, struct ag_buf *b) {
  if (w->o.no_process_series) return;
  static const char *const names[3] = {"stoker_gpu_process_memory_bytes",
                                       "stoker_gpu_process_sm_util_ratio",
                                       "stoker_process_cpu_seconds_total"};
  static const char *const types[3] = {"gauge", "gauge", "counter"};
  static const char *const helps[3] = {"GPU memory used by a process.",
                                       "Share of the GPU's SMs a process used (NVML, last sample).",
                                       "CPU time of a process that uses a GPU."};
  for (int m = 0; m < 3; m++) {
    int any = 0;
    for (unsigned i = 0; i < w->ngpus; i++) {
      struct ag_gpu *g = &w->gpus[i];
      if (g->lost) continue;
      for (unsigned k = 0; k < g->nprocs; k++) {
        struct ag_proc *p = &g->procs[k];
        double v = m == 0 ? p->used_bytes : m == 1 ? p->sm_util / 100.0 : p->cpu_s;
        if (isnan(v)) continue;
        if (!any++) family(b, names[m], types[m], helps[m]);
        stk__ag_printf(b, "%s{", names[m]);
        gpu_id_labels(w, b, i);
        stk__ag_printf(b, ",pid=\"%u\",hpc_job=", p->pid);
        stk__ag_label(b, p->job);
        stk__ag_printf(b, "}");
        val(b, v);
      }
    }
  }
}

/* A loader's number within its process: N of its file loader-PID-N.pub
 * (one process may run several loaders; without it their series would be
 * identical, and Prometheus would drop all but one). Digits only. */
static const char *loader_number(const struct ag_loader *L) {
  static __thread char n[24];
  const char *dash = strrchr(L->name, '-');
  size_t k = 0;
  for (const char *c = dash ? dash + 1 : ""; *c >= '0' && *c <= '9' && k + 1 < sizeof n; c++) n[k++] = *c;
  n[k] = 0;
  if (!k) snprintf(n, sizeof n, "0");
  return n;
}

static void loader_metrics(struct stk_watch *w, struct ag_buf *b) {
  if (!w->nloaders) return;
  struct lm {
    const char *name, *type, *help;
    size_t off;
    double scale;
  };
#define PO(f) offsetof(struct stk_pub, f)
  static const struct lm lms[] = {
      {"stoker_loader_batches_total", "counter", "Batches the loader handed to its consumer.",
       PO(batches), 1},
      {"stoker_loader_samples_total", "counter", "Samples handed to the consumer.", PO(samples), 1},
      {"stoker_loader_bytes_total", "counter", "Sample bytes handed to the consumer.", PO(bytes), 1},
      {"stoker_loader_consumer_wait_seconds_total", "counter",
       "Time the consumer waited for a batch (input stall).", PO(consumer_wait_ns), 1e-9},
      {"stoker_loader_cache_hits_total", "counter", "Reads served from a cache tier.",
       PO(cache_hits), 1},
      {"stoker_loader_cache_misses_total", "counter", "Reads that waited for the origin.",
       PO(cache_misses), 1},
      {"stoker_loader_ring_depth", "gauge", "Prefetch ring depth.", PO(ring_depth), 1},
  };
  for (size_t m = 0; m < STK__ARRAY_LEN(lms); m++) {
    family(b, lms[m].name, lms[m].type, lms[m].help);
    for (unsigned i = 0; i < w->nloaders; i++) {
      struct ag_loader *L = &w->loaders[i];
      uint64_t v = *(const uint64_t *)(const void *)((const char *)&L->pub + lms[m].off);
      stk__ag_printf(b, "%s{pid=\"%u\",loader=\"%s\",hpc_job=", lms[m].name, L->pub.pid,
                     loader_number(L));
      stk__ag_label(b, L->job);
      stk__ag_printf(b, "}");
      val(b, (double)v * lms[m].scale);
    }
  }
  static const char *const sn[3] = {"stoker_loader_stage_busy_seconds_total",
                                    "stoker_loader_stage_wait_in_seconds_total",
                                    "stoker_loader_stage_wait_out_seconds_total"};
  static const char *const sh[3] = {"Time a loader stage was busy, summed over its threads.",
                                    "Time a loader stage waited for input.",
                                    "Time a loader stage was blocked on a full next stage."};
  for (int m = 0; m < 3; m++) {
    family(b, sn[m], "counter", sh[m]);
    for (unsigned i = 0; i < w->nloaders; i++) {
      struct ag_loader *L = &w->loaders[i];
      for (int s = 0; s < STK_PUB_STAGES; s++) {
        const struct stk_pub_stage *st = &L->pub.stage[s];
        uint64_t v = m == 0 ? st->busy_ns : m == 1 ? st->wait_in_ns : st->wait_out_ns;
        stk__ag_printf(b, "%s{pid=\"%u\",loader=\"%s\",stage=", sn[m], L->pub.pid,
                       loader_number(L));
        stk__ag_label(b, st->name);
        stk__ag_printf(b, ",hpc_job=");
        stk__ag_label(b, L->job);
        stk__ag_printf(b, "}");
        val(b, (double)v / 1e9);
      }
    }
  }
}

/* A per-job counter of the job's energy in kWh times a configured factor
 * (a price, a carbon intensity); absent when the factor is not set. */
static void per_kwh_family(struct ag_buf *b, const struct stk_watch *w, const char *name,
                           const char *help, double per_kwh) {
  if (per_kwh <= 0) return;
  family(b, name, "counter", help);
  for (unsigned i = 0; i < w->njobs; i++) {
    stk__ag_printf(b, "%s{hpc_job=", name);
    stk__ag_label(b, w->jobs[i].id);
    stk__ag_printf(b, "}");
    val(b, w->jobs[i].energy_j / 3.6e6 * per_kwh);
  }
}

static void job_metrics(struct stk_watch *w, struct ag_buf *b) {
  if (!w->njobs) return;
  struct jm {
    const char *name, *type, *help;
    size_t off;
  };
#define JO(f) offsetof(struct ag_job, f)
  static const struct jm jms[] = {
      {"stoker_job_gpus", "gauge", "GPUs allocated to the job now.", 0},
      {"stoker_job_gpu_allocated_seconds_total", "counter", "GPU-seconds allocated to the job.",
       JO(allocated_s)},
      {"stoker_job_gpu_busy_seconds_total", "counter",
       "GPU-seconds busy (allocated time weighted by kernel utilization).", JO(busy_s)},
      {"stoker_job_gpu_idle_seconds_total", "counter", "GPU-seconds allocated but idle.", JO(idle_s)},
      {"stoker_job_energy_joules_total", "counter", "Energy its GPUs used (J).", JO(energy_j)},
      {"stoker_job_power_watts", "gauge", "Power its GPUs draw now (W).", JO(power_w)},
      {"stoker_job_input_wait_seconds_total", "counter",
       "Time its loaders' consumers waited for input.", JO(loader_wait_s)},
      {"stoker_job_input_wait_ratio", "gauge",
       "Share of the last interval its loaders' consumers waited for input.", JO(input_wait_ratio)},
      {"stoker_job_idle_streak_seconds", "gauge",
       "How long all of its GPUs have been idle in every sample.", JO(idle_streak_s)},
  };
  for (size_t m = 0; m < STK__ARRAY_LEN(jms); m++) {
    family(b, jms[m].name, jms[m].type, jms[m].help);
    for (unsigned i = 0; i < w->njobs; i++) {
      struct ag_job *j = &w->jobs[i];
      double v = m == 0 ? j->gpus : *(const double *)(const void *)((const char *)j + jms[m].off);
      stk__ag_printf(b, "%s{hpc_job=", jms[m].name);
      stk__ag_label(b, j->id);
      stk__ag_printf(b, ",Hostname=");
      stk__ag_label(b, w->hostname);
      stk__ag_printf(b, "}");
      val(b, v);
    }
  }
  family(b, "stoker_job_gpu_throttled_seconds_total", "counter",
         "GPU-seconds with a clock event (throttle) reason active, by reason.");
  for (unsigned i = 0; i < w->njobs; i++)
    for (int r = 0; r < AG_NREASONS; r++) {
      stk__ag_printf(b, "stoker_job_gpu_throttled_seconds_total{hpc_job=");
      stk__ag_label(b, w->jobs[i].id);
      stk__ag_printf(b, ",Hostname=");
      stk__ag_label(b, w->hostname);
      stk__ag_printf(b, ",reason=\"%s\"}", ag_reasons[r].name);
      val(b, w->jobs[i].throttle_s[r]);
    }
  family(b, "stoker_job_goodput_seconds_total", "counter",
         "Allocated GPU-seconds by bucket: productive, input_stalled, idle, throttled, unknown.");
  static const char *const buckets[5] = {"productive", "input_stalled", "idle", "throttled", "unknown"};
  for (unsigned i = 0; i < w->njobs; i++) {
    struct ag_job *j = &w->jobs[i];
    double v[5] = {j->productive_s, j->input_stalled_s, j->idle_bucket_s, j->throttled_s, j->unknown_s};
    for (int k = 0; k < 5; k++) {
      stk__ag_printf(b, "stoker_job_goodput_seconds_total{hpc_job=");
      stk__ag_label(b, j->id);
      stk__ag_printf(b, ",Hostname=");
      stk__ag_label(b, w->hostname);
      stk__ag_printf(b, ",bucket=\"%s\"}", buckets[k]);
      val(b, v[k]);
    }
  }
  per_kwh_family(b, w, "stoker_job_energy_cost_total",
                 "Energy cost at the configured price per kWh (in that currency).",
                 w->o.price_per_kwh);
  per_kwh_family(b, w, "stoker_job_carbon_grams_total",
                 "CO2-equivalent at the configured intensity (g per kWh).", w->o.carbon_g_per_kwh);
}

void stk__ag_build_expo(struct stk_watch *w) {
  struct ag_buf b = {0};
  if (w->expo) b.cap = 0;
  device_metrics(w, &b);
  agent_metrics(w, &b);
  host_metrics(w, &b);
  process_metrics(w, &b);
  loader_metrics(w, &b);
  job_metrics(w, &b);
  if (b.oom) {
    free(b.p);
    return; /* keep the previous exposition */
  }
  free(w->expo);
  w->expo = b.p;
  w->expo_len = b.len;
}

void stk__ag_expo_fresh(struct stk_watch *w) {
  if (!w->expo_stale && w->expo) return;
  uint64_t c0 = stk__ag_thread_cpu_ns();
  stk__ag_build_expo(w);
  w->expo_stale = 0;
  free(w->expo_gz); /* compressed again at the next scrape that asks */
  w->expo_gz = NULL;
  w->expo_gz_len = 0;
  w->render_cost_s = (double)(stk__ag_thread_cpu_ns() - c0) / 1e9;
}

int stk_watch_prometheus(struct stk_watch *w, char **buf, size_t *len) {
  pthread_mutex_lock(&w->mu);
  stk__ag_expo_fresh(w);
  size_t n = w->expo_len;
  char *p = malloc(n + 1);
  if (p) {
    if (n) memcpy(p, w->expo, n);
    p[n] = 0;
  }
  pthread_mutex_unlock(&w->mu);
  if (!p) return STK_ENOMEM;
  *buf = p;
  *len = n;
  return 0;
}
