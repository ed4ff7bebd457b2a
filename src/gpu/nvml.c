/* NVML through dlopen: the few types and entry points the agent needs are
 * declared with NVML's C ABI in nvml_abi.h (nvml.h is not needed to build;
 * `make check-headers` compares them with it where it is installed), each
 * entry point is looked up by name and may be absent (an older driver), in
 * which case its figures are absent too. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/base.h"
#include "nvml.h"
#include "nvml_abi.h"

#define MAX_DEV 64
#define NHEALTH 17 /* health_fields() */

/* GPM needs two samples of the same source: a ring of two per device and
 * per MIG instance slot (gi: the instance it holds samples of). */
struct gpm_ring {
  nv_gpm_sample gs[2];
  int cur, have;
  unsigned gi;
};

struct dev_state {
  nv_dev h;
  int gpm;               /* 1 supported, 0 unknown yet, -1 no */
  struct gpm_ring ring;
  struct gpm_ring mig[8];
  unsigned long long proc_util_seen;
  unsigned xid_count;
  double last_xid;
  int health_read;        /* its health counters were read at least once */
  double health[NHEALTH]; /* ... and their values then (health_fields order) */
};

struct stk__nvml {
  void *lib;
#define X(name, type) __typeof__(type) name;
  NV_FUNCS(X)
#undef X
  nv_evset events;
  unsigned ndev;
  struct dev_state dev[MAX_DEV];
  struct stk__gpu_proc *procs;
  unsigned procs_cap;
  struct nv_proc *raw;
  unsigned raw_cap;
  struct nv_proc_util *pu;
  unsigned pu_cap;
  uint64_t errors[STK__NVML_NCALLS];
  int health;                /* this round reads the health counters */
  char driver[80];
  struct nv_gpm_get gpm_get; /* large; reused by each GPM read */
};

const char *const stk__nvml_call_names[STK__NVML_NCALLS] = {
#define X(n) #n,
    STK__NVML_CALLS(X)
#undef X
};

static const char *errstr(struct stk__nvml *n, nv_ret r) {
  const char *s = n->nvmlErrorString ? n->nvmlErrorString(r) : NULL;
  return s ? s : "unknown error";
}

int stk__nvml_open(struct stk__nvml **out, const char *lib, char *why) {
  const char *path = lib && *lib ? lib : "libnvidia-ml.so.1";
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    snprintf(why, 256, "NVML not loaded (%s): %s; GPU metrics are off", path,
             e ? e : "cannot open");
    return STK_ENOENT;
  }
  struct stk__nvml *n = calloc(1, sizeof *n);
  if (!n) {
    dlclose(h);
    snprintf(why, 256, "out of memory");
    return STK_ENOMEM;
  }
  n->lib = h;
#define X(name, type) *(void **)(&n->name) = dlsym(h, #name);
  NV_FUNCS(X)
#undef X
  if (!n->nvmlInit_v2 || !n->nvmlDeviceGetCount_v2 || !n->nvmlDeviceGetHandleByIndex_v2) {
    snprintf(why, 256, "NVML not usable (%s): it lacks nvmlInit_v2; GPU metrics are off", path);
    dlclose(h);
    free(n);
    return STK_ENOTSUP;
  }
  nv_ret r = n->nvmlInit_v2();
  if (r != NV_SUCCESS) {
    snprintf(why, 256, "NVML did not initialize (%s): %s; GPU metrics are off", path, errstr(n, r));
    dlclose(h);
    free(n);
    return STK_EIO;
  }
  if (!n->nvmlSystemGetDriverVersion ||
      n->nvmlSystemGetDriverVersion(n->driver, sizeof n->driver) != NV_SUCCESS)
    n->driver[0] = 0;
  if (n->nvmlEventSetCreate && n->nvmlEventSetCreate(&n->events) != NV_SUCCESS) n->events = NULL;
  snprintf(why, 256, "NVML loaded (%s), driver %s", path, n->driver[0] ? n->driver : "unknown");
  *out = n;
  return 0;
}

void stk__nvml_close(struct stk__nvml *n) {
  if (!n) return;
  for (unsigned i = 0; i < MAX_DEV; i++)
    for (int r = 0; r < 9; r++) {
      struct gpm_ring *g = r ? &n->dev[i].mig[r - 1] : &n->dev[i].ring;
      for (int k = 0; k < 2; k++)
        if (g->gs[k] && n->nvmlGpmSampleFree) n->nvmlGpmSampleFree(g->gs[k]);
    }
  if (n->events && n->nvmlEventSetFree) n->nvmlEventSetFree(n->events);
  if (n->nvmlShutdown) n->nvmlShutdown();
  dlclose(n->lib);
  free(n->procs);
  free(n->raw);
  free(n->pu);
  free(n);
}

void stk__nvml_health(struct stk__nvml *n, int on) {
  if (n) n->health = on;
}

uint64_t stk__nvml_errors(const struct stk__nvml *n, enum stk__nvml_call c) { return n->errors[c]; }
const char *stk__nvml_driver(const struct stk__nvml *n) { return n->driver; }

/* Account a call's result: 1 when the value is good. A lost GPU marks the
 * sample lost; an unsupported call is not an error. */
static int ok(struct stk__nvml *n, struct stk__gpu_sample *s, enum stk__nvml_call c, nv_ret r) {
  if (r == NV_SUCCESS) return 1;
  if (r == NV_ERROR_GPU_IS_LOST) s->lost = 1;
  if (r != NV_ERROR_NOT_SUPPORTED && r != NV_ERROR_FUNCTION_NOT_FOUND) n->errors[c]++;
  return 0;
}

/* Drain pending XID events into the per-device counters. */
static void drain_events(struct stk__nvml *n) {
  if (!n->events || !n->nvmlEventSetWait_v2) return;
  for (int k = 0; k < 1024; k++) {
    struct nv_event e;
    memset(&e, 0, sizeof e);
    nv_ret r = n->nvmlEventSetWait_v2(n->events, &e, 0);
    if (r != NV_SUCCESS) {
      if (r != NV_ERROR_TIMEOUT && r != NV_ERROR_NOT_SUPPORTED) n->errors[STK__NVML_events]++;
      return;
    }
    if (!(e.type & NV_EVENT_XID)) continue;
    for (unsigned i = 0; i < n->ndev && i < MAX_DEV; i++)
      if (n->dev[i].h == e.dev) {
        n->dev[i].xid_count++;
        n->dev[i].last_xid = (double)e.data;
      }
  }
}

int stk__nvml_count(struct stk__nvml *n, unsigned *count) {
  unsigned c = 0;
  nv_ret r = n->nvmlDeviceGetCount_v2(&c);
  if (r != NV_SUCCESS) return STK_EIO;
  if (c > MAX_DEV) c = MAX_DEV;
  for (unsigned i = n->ndev; i < c; i++) {
    n->dev[i].last_xid = NAN;
    if (n->nvmlDeviceGetHandleByIndex_v2(i, &n->dev[i].h) != NV_SUCCESS) {
      n->dev[i].h = NULL;
      continue;
    }
    /* With XID events watched, "no XID yet" is a known 0, as DCGM says. */
    if (n->events && n->nvmlDeviceRegisterEvents &&
        n->nvmlDeviceRegisterEvents(n->dev[i].h, NV_EVENT_XID, n->events) == NV_SUCCESS)
      n->dev[i].last_xid = 0;
  }
  if (c > n->ndev) n->ndev = c;
  drain_events(n);
  *count = c;
  return 0;
}

static int grow(void **p, unsigned *cap, unsigned need, size_t elem) {
  if (need <= *cap) return 0;
  unsigned nc = *cap ? *cap : 64;
  while (nc < need) nc *= 2;
  void *q = realloc(*p, (size_t)nc * elem);
  if (!q) return -1;
  *p = q;
  *cap = nc;
  return 0;
}

static void sample_procs(struct stk__nvml *n, struct dev_state *d, struct stk__gpu_sample *s) {
  if (!n->nvmlDeviceGetComputeRunningProcesses_v3) return;
  unsigned cnt = n->raw_cap;
  nv_ret r;
  for (int tries = 0; tries < 4; tries++) {
    cnt = n->raw_cap;
    r = n->nvmlDeviceGetComputeRunningProcesses_v3(d->h, &cnt, n->raw);
    if (r != NV_ERROR_INSUFFICIENT_SIZE) break;
    if (grow((void **)&n->raw, &n->raw_cap, cnt + 16, sizeof *n->raw)) return;
  }
  if (!ok(n, s, STK__NVML_procs, r)) return;
  if (grow((void **)&n->procs, &n->procs_cap, cnt + 1, sizeof *n->procs)) return;
  for (unsigned i = 0; i < cnt; i++) {
    struct stk__gpu_proc *p = &n->procs[i];
    p->pid = n->raw[i].pid;
    p->gpu_instance = n->raw[i].gi;
    p->used_bytes = n->raw[i].used == NV_VALUE_NOT_AVAILABLE_ULL ? NAN : (double)n->raw[i].used;
    p->sm_util = NAN;
  }
  s->procs = n->procs;
  s->nprocs = cnt;
  if (!n->nvmlDeviceGetProcessUtilization || !cnt) return;
  unsigned pc = 0;
  r = n->nvmlDeviceGetProcessUtilization(d->h, NULL, &pc, d->proc_util_seen);
  if (r != NV_SUCCESS && r != NV_ERROR_INSUFFICIENT_SIZE) {
    if (r != NV_ERROR_NOT_FOUND) ok(n, s, STK__NVML_proc_util, r);
    return;
  }
  if (!pc || grow((void **)&n->pu, &n->pu_cap, pc, sizeof *n->pu)) return;
  r = n->nvmlDeviceGetProcessUtilization(d->h, n->pu, &pc, d->proc_util_seen);
  if (!ok(n, s, STK__NVML_proc_util, r)) return;
  /* Several samples per process: keep the newest. */
  unsigned long long newest = d->proc_util_seen;
  for (unsigned i = 0; i < cnt; i++) {
    unsigned long long best = 0;
    for (unsigned k = 0; k < pc; k++)
      if (n->pu[k].pid == n->procs[i].pid && n->pu[k].ts >= best) {
        best = n->pu[k].ts;
        n->procs[i].sm_util = n->pu[k].sm;
      }
  }
  for (unsigned k = 0; k < pc; k++)
    if (n->pu[k].ts > newest) newest = n->pu[k].ts;
  d->proc_util_seen = newest;
}

/* Memory in MiB: v2 where the driver has it (used without the reserved
 * memory, reserved apart, as DCGM reads them), else v1 (used with it,
 * reserved NaN). Returns 0 when neither answers. */
static int read_memory(struct stk__nvml *n, struct stk__gpu_sample *s, nv_dev h, double *total,
                       double *free_, double *used, double *reserved) {
  if (n->nvmlDeviceGetMemoryInfo_v2) {
    struct nv_memory_v2 m2;
    memset(&m2, 0, sizeof m2);
    m2.version = NV_MEMORY_V2;
    nv_ret r = n->nvmlDeviceGetMemoryInfo_v2(h, &m2);
    if (r == NV_SUCCESS) {
      *total = (double)m2.total / 1048576.0;
      *free_ = (double)m2.free / 1048576.0;
      *used = (double)m2.used / 1048576.0;
      *reserved = (double)m2.reserved / 1048576.0;
      return 1;
    }
    if (r == NV_ERROR_GPU_IS_LOST) return ok(n, s, STK__NVML_memory, r);
    /* Any other answer (an older driver, a MIG handle without v2): v1. */
  }
  struct nv_memory m;
  if (!n->nvmlDeviceGetMemoryInfo || !ok(n, s, STK__NVML_memory, n->nvmlDeviceGetMemoryInfo(h, &m)))
    return 0;
  *total = (double)m.total / 1048576.0;
  *free_ = (double)m.free / 1048576.0;
  *used = (double)m.used / 1048576.0;
  return 1;
}

/* GPM is usable on this device (asked once). */
static int gpm_ok(struct stk__nvml *n, struct dev_state *d) {
  if (d->gpm < 0 || !n->nvmlGpmQueryDeviceSupport || !n->nvmlGpmSampleAlloc ||
      !n->nvmlGpmSampleGet || !n->nvmlGpmMetricsGet)
    return 0;
  if (d->gpm == 0) {
    struct nv_gpm_support sup = {NV_GPM_SUPPORT_VERSION, 0};
    d->gpm = n->nvmlGpmQueryDeviceSupport(d->h, &sup) == NV_SUCCESS && sup.supported ? 1 : -1;
  }
  return d->gpm > 0;
}

/* The GPM metrics read, in the order of gpm_read's out: the four activity
 * percentages (as ratios), then PCIe traffic from and to the GPU (MiB/s,
 * as bytes/s; the device's sample only). */
static const struct {
  unsigned id;
  double scale;
} gpm_metrics[6] = {
    {NV_GPM_METRIC_GRAPHICS_UTIL, 0.01},      {NV_GPM_METRIC_SM_UTIL, 0.01},
    {NV_GPM_METRIC_ANY_TENSOR_UTIL, 0.01},    {NV_GPM_METRIC_DRAM_BW_UTIL, 0.01},
    {NV_GPM_METRIC_PCIE_TX_PER_SEC, 1048576}, {NV_GPM_METRIC_PCIE_RX_PER_SEC, 1048576}};

/* Take a sample into ring r (of the device, or of MIG instance gi when
 * mig) and, from the second on, the first nout of gpm_metrics (NaN each
 * that NVML does not give). 0 when there were none. */
static int gpm_read(struct stk__nvml *n, struct dev_state *d, struct gpm_ring *r, int mig,
                    unsigned gi, struct stk__gpu_sample *s, double *out[], unsigned nout) {
  for (int k = 0; k < 2; k++)
    if (!r->gs[k] && n->nvmlGpmSampleAlloc(&r->gs[k]) != NV_SUCCESS) return 0;
  if (mig && r->gi != gi) r->have = 0, r->gi = gi; /* another instance in this slot */
  int cur = r->cur;
  nv_ret rc = mig ? n->nvmlGpmMigSampleGet(d->h, gi, r->gs[cur]) : n->nvmlGpmSampleGet(d->h, r->gs[cur]);
  if (!ok(n, s, STK__NVML_gpm, rc)) {
    r->have = 0;
    return 0;
  }
  r->cur ^= 1;
  if (!r->have) {
    r->have = 1;
    return 0;
  }
  struct nv_gpm_get *gp = &n->gpm_get;
  memset(gp, 0, sizeof *gp);
  gp->version = NV_GPM_METRICS_GET_VERSION;
  gp->num = nout;
  gp->s1 = r->gs[cur ^ 1];
  gp->s2 = r->gs[cur];
  for (unsigned i = 0; i < nout; i++) gp->metrics[i].id = gpm_metrics[i].id;
  nv_ret mr = n->nvmlGpmMetricsGet(gp);
  if (mr != NV_SUCCESS && nout > 4) {
    /* NVML answers each metric's support in its own return code; should a
     * driver refuse the whole request over the PCIe ones, the four
     * activity ratios still come. */
    gp->num = nout = 4;
    mr = n->nvmlGpmMetricsGet(gp);
  }
  if (!ok(n, s, STK__NVML_gpm, mr)) return 0;
  for (unsigned i = 0; i < nout; i++)
    if (gp->metrics[i].ret == NV_SUCCESS) *out[i] = gp->metrics[i].value * gpm_metrics[i].scale;
  return 1;
}

static void sample_gpm(struct stk__nvml *n, struct dev_state *d, struct stk__gpu_sample *s) {
  if (!gpm_ok(n, d)) return;
  double *dst[6] = {&s->gr_active,   &s->sm_active,   &s->tensor_active,
                    &s->dram_active, &s->pcie_tx_bps, &s->pcie_rx_bps};
  gpm_read(n, d, &d->ring, 0, 0, s, dst, 6);
}

static void sample_mig(struct stk__nvml *n, struct dev_state *d, struct stk__gpu_sample *s) {
  unsigned cur = 0, pend = 0, max = 0;
  if (!n->nvmlDeviceGetMigMode || n->nvmlDeviceGetMigMode(d->h, &cur, &pend) != NV_SUCCESS ||
      cur != NV_DEVICE_MIG_ENABLE)
    return;
  if (!n->nvmlDeviceGetMaxMigDeviceCount || !n->nvmlDeviceGetMigDeviceHandleByIndex ||
      !ok(n, s, STK__NVML_mig, n->nvmlDeviceGetMaxMigDeviceCount(d->h, &max)))
    return;
  for (unsigned i = 0; i < max && s->nmig < STK__ARRAY_LEN(s->mig); i++) {
    nv_dev m;
    nv_ret r = n->nvmlDeviceGetMigDeviceHandleByIndex(d->h, i, &m);
    if (r == NV_ERROR_NOT_FOUND) continue;
    if (!ok(n, s, STK__NVML_mig, r)) continue;
    struct stk__mig *mi = &s->mig[s->nmig];
    unsigned gi = 0;
    if (!n->nvmlDeviceGetGpuInstanceId || n->nvmlDeviceGetGpuInstanceId(m, &gi) != NV_SUCCESS)
      continue;
    mi->gi_id = gi;
    char name[96] = "";
    mi->profile[0] = 0;
    if (n->nvmlDeviceGetName && n->nvmlDeviceGetName(m, name, sizeof name) == NV_SUCCESS) {
      const char *p = strstr(name, "MIG ");
      snprintf(mi->profile, sizeof mi->profile, "%.31s", p ? p + 4 : name);
    }
    /* Its own UUID: what Kubernetes' device plugin names it by. */
    mi->uuid[0] = 0;
    if (n->nvmlDeviceGetUUID && n->nvmlDeviceGetUUID(m, mi->uuid, sizeof mi->uuid) != NV_SUCCESS)
      mi->uuid[0] = 0;
    double rs = NAN;
    mi->fb_used_mib = mi->fb_free_mib = mi->fb_total_mib = NAN;
    read_memory(n, s, m, &mi->fb_total_mib, &mi->fb_free_mib, &mi->fb_used_mib, &rs);
    /* NVML gives no utilization with MIG on: the instance's own GPM
     * sample (Hopper and later) is the only source, as DCGM's
     * DCGM_FI_PROF_* are dcgm-exporter's for MIG. */
    mi->gr_active = mi->sm_active = mi->tensor_active = mi->dram_active = NAN;
    if (n->nvmlGpmMigSampleGet && gpm_ok(n, d)) {
      double *dst[4] = {&mi->gr_active, &mi->sm_active, &mi->tensor_active, &mi->dram_active};
      gpm_read(n, d, &d->mig[s->nmig], 1, gi, s, dst, 4);
    }
    s->nmig++;
  }
}

/* A field value as a number, by its type (NaN for a type not known). */
static double field_number(const struct nv_field_value *f) {
  switch (f->value_type) {
  case NV_VALUE_TYPE_DOUBLE: return f->value.d;
  case NV_VALUE_TYPE_UNSIGNED_INT: return f->value.ui;
  case NV_VALUE_TYPE_UNSIGNED_LONG: return (double)f->value.ul;
  case NV_VALUE_TYPE_UNSIGNED_LONG_LONG: return (double)f->value.ull;
  case NV_VALUE_TYPE_SIGNED_LONG_LONG: return (double)f->value.sll;
  case NV_VALUE_TYPE_SIGNED_INT: return f->value.si;
  case NV_VALUE_TYPE_UNSIGNED_SHORT: return f->value.us;
  default: return NAN;
  }
}

/* The health counters of a sample, in the order dev_state keeps them. */
static void health_fields(struct stk__gpu_sample *s, double *f[NHEALTH]) {
  double *l[NHEALTH] = {&s->ecc_sbe_vol,     &s->ecc_dbe_vol,     &s->ecc_sbe_agg,
                        &s->ecc_dbe_agg,     &s->retired_sbe,     &s->retired_dbe,
                        &s->retired_pending, &s->remap_corr,      &s->remap_unc,
                        &s->remap_pending,   &s->remap_failure,   &s->pcie_replay,
                        &s->nvlink_crc_flit, &s->nvlink_crc_data, &s->nvlink_replay,
                        &s->nvlink_recovery, &s->vgpu_license};
  memcpy(f, l, sizeof l);
}

/* Read the health counters (each NaN where NVML does not give it). */
static void read_health(struct stk__nvml *n, nv_dev h, struct stk__gpu_sample *s) {
  unsigned long long e;
  static const unsigned ecc[4][2] = {{NV_MEMORY_ERROR_CORRECTED, NV_VOLATILE_ECC},
                                     {NV_MEMORY_ERROR_UNCORRECTED, NV_VOLATILE_ECC},
                                     {NV_MEMORY_ERROR_CORRECTED, NV_AGGREGATE_ECC},
                                     {NV_MEMORY_ERROR_UNCORRECTED, NV_AGGREGATE_ECC}};
  double *ecc_dst[4] = {&s->ecc_sbe_vol, &s->ecc_dbe_vol, &s->ecc_sbe_agg, &s->ecc_dbe_agg};
  for (int k = 0; k < 4 && n->nvmlDeviceGetTotalEccErrors; k++)
    if (ok(n, s, STK__NVML_ecc, n->nvmlDeviceGetTotalEccErrors(h, ecc[k][0], ecc[k][1], &e)))
      *ecc_dst[k] = (double)e;
  /* Retired pages: a zero-length query answers the count (with
   * INSUFFICIENT_SIZE when there are some). */
  static const unsigned cause[2] = {NV_RETIRE_SBE, NV_RETIRE_DBE};
  double *ret_dst[2] = {&s->retired_sbe, &s->retired_dbe};
  for (int k = 0; k < 2 && n->nvmlDeviceGetRetiredPages; k++) {
    unsigned cnt = 0;
    nv_ret r = n->nvmlDeviceGetRetiredPages(h, cause[k], &cnt, NULL);
    if (r == NV_ERROR_INSUFFICIENT_SIZE || ok(n, s, STK__NVML_retired, r)) *ret_dst[k] = cnt;
  }
  unsigned v, a, b, c;
  if (n->nvmlDeviceGetRetiredPagesPendingStatus &&
      ok(n, s, STK__NVML_retired, n->nvmlDeviceGetRetiredPagesPendingStatus(h, &v)))
    s->retired_pending = v == NV_FEATURE_ENABLED;
  if (n->nvmlDeviceGetRemappedRows &&
      ok(n, s, STK__NVML_remap, n->nvmlDeviceGetRemappedRows(h, &a, &b, &c, &v))) {
    s->remap_corr = a;
    s->remap_unc = b;
    s->remap_pending = c != 0;
    s->remap_failure = v != 0;
  }
  if (n->nvmlDeviceGetPcieReplayCounter &&
      ok(n, s, STK__NVML_pcie, n->nvmlDeviceGetPcieReplayCounter(h, &v)))
    s->pcie_replay = v;
  /* vGPU licensing, as DCGM reads it: 0 where it does not apply (bare
   * metal), else whether the vGPU feature is licensed. */
  struct nv_grid_features gf;
  memset(&gf, 0, sizeof gf);
  if (n->nvmlDeviceGetGridLicensableFeatures_v4 &&
      ok(n, s, STK__NVML_license, n->nvmlDeviceGetGridLicensableFeatures_v4(h, &gf))) {
    s->vgpu_license = 0;
    for (unsigned k = 0; gf.supported && k < gf.count && k < NV_GRID_LICENSE_FEATURE_MAX_COUNT; k++)
      if (gf.features[k].code == NV_GRID_LICENSE_FEATURE_CODE_VGPU) {
        s->vgpu_license = gf.features[k].state != 0;
        break;
      }
  }
  /* NVLink: errors summed over the active links; none where link 0
   * answers that the GPU has no NVLink. */
  if (!n->nvmlDeviceGetNvLinkState || !n->nvmlDeviceGetNvLinkErrorCounter) return;
  static const unsigned ctr[4] = {NV_NVLINK_ERROR_DL_CRC_FLIT, NV_NVLINK_ERROR_DL_CRC_DATA,
                                  NV_NVLINK_ERROR_DL_REPLAY, NV_NVLINK_ERROR_DL_RECOVERY};
  double *nl_dst[4] = {&s->nvlink_crc_flit, &s->nvlink_crc_data, &s->nvlink_replay,
                       &s->nvlink_recovery};
  double sum[4] = {0, 0, 0, 0};
  int got[4] = {0, 0, 0, 0}, active = 0;
  for (unsigned link = 0; link < NV_NVLINK_MAX_LINKS; link++) {
    unsigned on = 0;
    nv_ret r = n->nvmlDeviceGetNvLinkState(h, link, &on);
    if (r != NV_SUCCESS) {
      if (r != NV_ERROR_NOT_SUPPORTED && r != NV_ERROR_INVALID_ARGUMENT) ok(n, s, STK__NVML_nvlink, r);
      if (link == 0) return;
      continue;
    }
    if (on != NV_FEATURE_ENABLED) continue;
    active++;
    for (int k = 0; k < 4; k++)
      if (ok(n, s, STK__NVML_nvlink, n->nvmlDeviceGetNvLinkErrorCounter(h, link, ctr[k], &e)))
        sum[k] += (double)e, got[k] = 1;
  }
  for (int k = 0; k < 4; k++)
    if (active && got[k]) *nl_dst[k] = sum[k];
}

/* Health counters: read afresh on a health round (or a device's first
 * sample), else the last values read. */
static void sample_health(struct stk__nvml *n, struct dev_state *d, struct stk__gpu_sample *s) {
  double *f[NHEALTH];
  health_fields(s, f);
  if (n->health || !d->health_read) {
    read_health(n, d->h, s);
    for (int k = 0; k < NHEALTH; k++) d->health[k] = *f[k];
    d->health_read = 1;
  } else {
    for (int k = 0; k < NHEALTH; k++) *f[k] = d->health[k];
  }
}

int stk__nvml_sample(struct stk__nvml *n, unsigned i, struct stk__gpu_sample *s) {
  memset(s, 0, sizeof *s);
  s->index = i;
  double *nan_fields[] = {&s->util, &s->mem_util, &s->fb_used_mib, &s->fb_free_mib,
                          &s->fb_total_mib, &s->fb_reserved_mib, &s->power_w, &s->energy_mj,
                          &s->temp_c, &s->sm_clock_mhz, &s->mem_clock_mhz, &s->reasons,
                          &s->viol_power_ns, &s->viol_thermal_ns, &s->sm_active,
                          &s->tensor_active, &s->dram_active, &s->gr_active, &s->last_xid,
                          &s->enc_util, &s->dec_util, &s->mem_temp_c, &s->nvlink_tx_bytes,
                          &s->nvlink_rx_bytes, &s->pcie_tx_bps, &s->pcie_rx_bps,
                          &s->nvlink_bw_total};
  for (size_t k = 0; k < STK__ARRAY_LEN(nan_fields); k++) *nan_fields[k] = NAN;
  double *hf[NHEALTH];
  health_fields(s, hf);
  for (int k = 0; k < NHEALTH; k++) *hf[k] = NAN;
  if (i >= MAX_DEV) return STK_ERANGE;
  struct dev_state *d = &n->dev[i];
  if (!d->h) {
    nv_ret r = n->nvmlDeviceGetHandleByIndex_v2(i, &d->h);
    if (!ok(n, s, STK__NVML_handle, r)) {
      d->h = NULL;
      s->lost = 1;
      return 0;
    }
  }
  s->xid_count = d->xid_count;
  s->last_xid = d->last_xid;
  d->xid_count = 0;
  nv_dev h = d->h;
  if (n->nvmlDeviceGetName) ok(n, s, STK__NVML_name, n->nvmlDeviceGetName(h, s->name, sizeof s->name));
  if (n->nvmlDeviceGetUUID) ok(n, s, STK__NVML_uuid, n->nvmlDeviceGetUUID(h, s->uuid, sizeof s->uuid));
  struct nv_pci pci;
  if (n->nvmlDeviceGetPciInfo_v3 && ok(n, s, STK__NVML_pci, n->nvmlDeviceGetPciInfo_v3(h, &pci)))
    snprintf(s->pci, sizeof s->pci, "%.31s", pci.bus_id);
  if (s->lost) return 0;
  struct nv_util u;
  if (n->nvmlDeviceGetUtilizationRates &&
      ok(n, s, STK__NVML_util, n->nvmlDeviceGetUtilizationRates(h, &u))) {
    s->util = u.gpu;
    s->mem_util = u.memory;
  }
  read_memory(n, s, h, &s->fb_total_mib, &s->fb_free_mib, &s->fb_used_mib, &s->fb_reserved_mib);
  unsigned v;
  if (n->nvmlDeviceGetPowerUsage && ok(n, s, STK__NVML_power, n->nvmlDeviceGetPowerUsage(h, &v)))
    s->power_w = v / 1000.0;
  unsigned long long e;
  if (n->nvmlDeviceGetTotalEnergyConsumption &&
      ok(n, s, STK__NVML_energy, n->nvmlDeviceGetTotalEnergyConsumption(h, &e)))
    s->energy_mj = (double)e;
  if (n->nvmlDeviceGetTemperature &&
      ok(n, s, STK__NVML_temp, n->nvmlDeviceGetTemperature(h, NV_TEMPERATURE_GPU, &v)))
    s->temp_c = v;
  if (n->nvmlDeviceGetClockInfo &&
      ok(n, s, STK__NVML_sm_clock, n->nvmlDeviceGetClockInfo(h, NV_CLOCK_SM, &v)))
    s->sm_clock_mhz = v;
  if (n->nvmlDeviceGetClockInfo &&
      ok(n, s, STK__NVML_mem_clock, n->nvmlDeviceGetClockInfo(h, NV_CLOCK_MEM, &v)))
    s->mem_clock_mhz = v;
  nv_ret (*reasons)(nv_dev, unsigned long long *) = n->nvmlDeviceGetCurrentClocksEventReasons
                                                        ? n->nvmlDeviceGetCurrentClocksEventReasons
                                                        : n->nvmlDeviceGetCurrentClocksThrottleReasons;
  if (reasons && ok(n, s, STK__NVML_reasons, reasons(h, &e))) s->reasons = (double)e;
  struct nv_violation vt;
  if (n->nvmlDeviceGetViolationStatus) {
    if (ok(n, s, STK__NVML_violation,
           n->nvmlDeviceGetViolationStatus(h, NV_PERF_POLICY_POWER, &vt)))
      s->viol_power_ns = (double)vt.violation_ns;
    if (ok(n, s, STK__NVML_violation,
           n->nvmlDeviceGetViolationStatus(h, NV_PERF_POLICY_THERMAL, &vt)))
      s->viol_thermal_ns = (double)vt.violation_ns;
  }
  unsigned period;
  if (n->nvmlDeviceGetEncoderUtilization &&
      ok(n, s, STK__NVML_enc_dec, n->nvmlDeviceGetEncoderUtilization(h, &v, &period)))
    s->enc_util = v;
  if (n->nvmlDeviceGetDecoderUtilization &&
      ok(n, s, STK__NVML_enc_dec, n->nvmlDeviceGetDecoderUtilization(h, &v, &period)))
    s->dec_util = v;
  /* Memory temperature and NVLink data (KiB, summed over the links: scope
   * UINT_MAX): NVML has them only as field values, each with its own
   * return code (not supported without HBM or NVLink). */
  struct nv_field_value fv[3];
  memset(fv, 0, sizeof fv);
  fv[0].field_id = NV_FI_DEV_MEMORY_TEMP;
  fv[1].field_id = NV_FI_DEV_NVLINK_THROUGHPUT_DATA_TX;
  fv[2].field_id = NV_FI_DEV_NVLINK_THROUGHPUT_DATA_RX;
  fv[1].scope_id = fv[2].scope_id = UINT32_MAX;
  if (n->nvmlDeviceGetFieldValues &&
      ok(n, s, STK__NVML_fields, n->nvmlDeviceGetFieldValues(h, 3, fv))) {
    double *dst[3] = {&s->mem_temp_c, &s->nvlink_tx_bytes, &s->nvlink_rx_bytes};
    for (int k = 0; k < 3; k++)
      if (fv[k].ret == NV_SUCCESS) *dst[k] = field_number(&fv[k]) * (k ? 1024 : 1);
  }
  sample_health(n, d, s);
  sample_procs(n, d, s);
  sample_gpm(n, d, s);
  sample_mig(n, d, s);
  return 0;
}
