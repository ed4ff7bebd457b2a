/* A fake libnvidia-ml for the tests: the subset of NVML's C API that
 * stoker watch calls, driven by a scenario file ($FAKE_NVML_SCENARIO; the
 * format is in tests/tools/fakenvml/README.md). Each nvmlDeviceGetCount_v2
 * call begins the next step of the scenario, so a test that samples N times
 * sees steps 0..N-1 whatever the wall clock does. Built by the Makefile as
 * build/fakenvml/libnvidia-ml.so.1; never linked into stoker. Its types,
 * structs and codes are stoker's own (src/gpu/nvml_abi.h, which the header
 * check compares with nvml.h), and every entry point is declared from that
 * list before it is defined here, so the fake cannot drift from what
 * stoker calls. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../src/gpu/nvml_abi.h"

/* Each entry point stoker looks up, with stoker's type: a definition below
 * of another type does not compile. */
#define X(name, type) __typeof__(*(type)0) name;
NV_FUNCS(X)
#undef X

#define MAXG 16
#define MAXP 2048
#define MAXEV 1000000
#define MAXMIG 7

enum {
  OK = NV_SUCCESS, E_INVALID = NV_ERROR_INVALID_ARGUMENT, E_NOT_SUPPORTED = NV_ERROR_NOT_SUPPORTED,
  E_NOT_FOUND = NV_ERROR_NOT_FOUND, E_INSUFFICIENT = NV_ERROR_INSUFFICIENT_SIZE,
  E_TIMEOUT = NV_ERROR_TIMEOUT, E_UNKNOWN = NV_ERROR_UNKNOWN, E_LOST = NV_ERROR_GPU_IS_LOST
};

struct proc { unsigned pid; double used_mib, sm; int gi; };
struct mig { int kind; int gpu; unsigned gi; char profile[32]; double total_mib, used_mib, gr; };
struct gpu {
  int kind; /* 0: device, 1: MIG (the same first field as struct mig) */
  int index;
  char name[96], uuid[96], pci[32];
  double mem_total_mib, fb_used_mib, util, mem_util, power_w, temp, sm_clock, mem_clock;
  double smact, tensor, dram, gr, viol_power_ns, viol_thermal_ns, fb_reserved_mib;
  double ecc_sbe_vol, ecc_dbe_vol, ecc_sbe_agg, ecc_dbe_agg, retired_sbe, retired_dbe;
  double retired_pending, remap_corr, remap_unc, remap_pending, remap_failure, pcie_replay;
  double enc, dec, nvlinks, nvlink_crc_flit, nvlink_crc_data, nvlink_replay, nvlink_recovery;
  double mem_temp; /* < 0: the GPU has no memory sensor */
  double nvlink_tx_kib, nvlink_rx_kib; /* all links (only with nvlinks) */
  double pcie_tx_mib, pcie_rx_mib;     /* GPM: PCIe traffic, MiB/s */
  double vgpu_license;                 /* < 0: bare metal (licensing does not apply) */
  double gpm_no_pcie;                  /* nvmlGpmMetricsGet refuses a request with PCIe metrics */
  unsigned long long reasons;
  double energy_mj;
  int gpm, lost;
  struct proc procs[MAXP];
  unsigned nprocs;
  struct mig migs[MAXMIG];
  unsigned nmig;
  char fail[8][64];
  unsigned nfail;
};

struct event { int step, order; char *line; };

static int by_step(const void *a, const void *b) {
  const struct event *x = a, *y = b;
  if (x->step != y->step) return x->step < y->step ? -1 : 1;
  return x->order < y->order ? -1 : x->order > y->order;
}

static struct gpu gpus[MAXG];
static unsigned ngpus;
static struct event *events;
static unsigned nevents, next_event; /* events sorted by step; the next to run */
static int step = -1;
static double step_s = 1;
static char driver[64] = "999.99";
static int init_fail;
static char global_fail[8][64];
static unsigned nglobal_fail;
static struct { int gpu; unsigned long long xid; } xids[256];
static unsigned nxid;

static void die(const char *fmt, const char *a, int line) {
  fprintf(stderr, "fakenvml: scenario line %d: ", line);
  fprintf(stderr, fmt, a);
  fputc('\n', stderr);
  exit(3);
}

/* Split a line into tokens; "quoted strings" keep their spaces. */
static int tokens(char *s, char **tok, int max) {
  int n = 0;
  while (*s && n < max) {
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') s++;
    if (!*s || *s == '#') break;
    if (*s == '"') {
      tok[n++] = ++s;
      while (*s && *s != '"') s++;
    } else {
      tok[n++] = s;
      while (*s && *s != ' ' && *s != '\t' && *s != '\n' && *s != '\r') s++;
    }
    if (*s) *s++ = 0;
  }
  return n;
}

static double num(const char *s, int line) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || *end) die("'%s' is not a number", s, line);
  return v;
}

/* Apply "key value ..." pairs to a GPU. */
static void apply(struct gpu *g, char **t, int n, int line) {
  for (int i = 0; i < n; i++) {
    const char *k = t[i];
    const char *v = i + 1 < n ? t[i + 1] : NULL;
#define NUMKEY(name, field) \
  if (!strcmp(k, name)) { if (!v) die("%s needs a value", k, line); g->field = num(v, line); i++; continue; }
    NUMKEY("util", util) NUMKEY("mem_util", mem_util) NUMKEY("fb_used_mib", fb_used_mib)
    NUMKEY("mem_total_mib", mem_total_mib) NUMKEY("power_w", power_w) NUMKEY("temp", temp)
    NUMKEY("sm_clock", sm_clock) NUMKEY("mem_clock", mem_clock) NUMKEY("smact", smact)
    NUMKEY("tensor", tensor) NUMKEY("dram", dram) NUMKEY("gr", gr)
    NUMKEY("energy_mj", energy_mj) NUMKEY("viol_power_ns", viol_power_ns)
    NUMKEY("viol_thermal_ns", viol_thermal_ns) NUMKEY("fb_reserved_mib", fb_reserved_mib)
    NUMKEY("ecc_sbe_vol", ecc_sbe_vol) NUMKEY("ecc_dbe_vol", ecc_dbe_vol)
    NUMKEY("ecc_sbe_agg", ecc_sbe_agg) NUMKEY("ecc_dbe_agg", ecc_dbe_agg)
    NUMKEY("retired_sbe", retired_sbe) NUMKEY("retired_dbe", retired_dbe)
    NUMKEY("retired_pending", retired_pending) NUMKEY("remap_corr", remap_corr)
    NUMKEY("remap_unc", remap_unc) NUMKEY("remap_pending", remap_pending)
    NUMKEY("remap_failure", remap_failure) NUMKEY("pcie_replay", pcie_replay)
    NUMKEY("enc", enc) NUMKEY("dec", dec) NUMKEY("nvlinks", nvlinks)
    NUMKEY("nvlink_crc_flit", nvlink_crc_flit) NUMKEY("nvlink_crc_data", nvlink_crc_data)
    NUMKEY("nvlink_replay", nvlink_replay) NUMKEY("nvlink_recovery", nvlink_recovery)
    NUMKEY("mem_temp", mem_temp) NUMKEY("nvlink_tx_kib", nvlink_tx_kib)
    NUMKEY("nvlink_rx_kib", nvlink_rx_kib) NUMKEY("pcie_tx_mib", pcie_tx_mib)
    NUMKEY("pcie_rx_mib", pcie_rx_mib) NUMKEY("vgpu_license", vgpu_license)
    NUMKEY("gpm_no_pcie", gpm_no_pcie)
#undef NUMKEY
    if (!strcmp(k, "name") && v) { snprintf(g->name, sizeof g->name, "%s", v); i++; continue; }
    if (!strcmp(k, "uuid") && v) { snprintf(g->uuid, sizeof g->uuid, "%s", v); i++; continue; }
    if (!strcmp(k, "pci") && v) { snprintf(g->pci, sizeof g->pci, "%s", v); i++; continue; }
    if (!strcmp(k, "gpm") && v) { g->gpm = (int)num(v, line); i++; continue; }
    if (!strcmp(k, "reasons") && v) { g->reasons = strtoull(v, NULL, 0); i++; continue; }
    if (!strcmp(k, "lost")) { g->lost = 1; continue; }
    if (!strcmp(k, "fail") && v) {
      if (g->nfail < 8) snprintf(g->fail[g->nfail++], 64, "%s", v);
      i++;
      continue;
    }
    if (!strcmp(k, "xid") && v) {
      if (nxid < 256) { xids[nxid].gpu = g->index; xids[nxid++].xid = (unsigned long long)num(v, line); }
      i++;
      continue;
    }
    if (!strcmp(k, "proc") && v) { /* proc PID [used_mib X] [sm X] [gi N] */
      unsigned pid = (unsigned)num(v, line);
      i++;
      struct proc *p = NULL;
      for (unsigned j = 0; j < g->nprocs; j++)
        if (g->procs[j].pid == pid) p = &g->procs[j];
      if (!p) {
        if (g->nprocs >= MAXP) die("too many processes%s", "", line);
        p = &g->procs[g->nprocs++];
        memset(p, 0, sizeof *p);
        p->pid = pid;
        p->gi = -1;
        p->sm = -1;
      }
      while (i + 2 < n) {
        if (!strcmp(t[i + 1], "used_mib") && i + 2 < n) { p->used_mib = num(t[i + 2], line); i += 2; }
        else if (!strcmp(t[i + 1], "sm") && i + 2 < n) { p->sm = num(t[i + 2], line); i += 2; }
        else if (!strcmp(t[i + 1], "gi") && i + 2 < n) { p->gi = (int)num(t[i + 2], line); i += 2; }
        else break;
      }
      continue;
    }
    if (!strcmp(k, "proc_end") && v) {
      unsigned pid = (unsigned)num(v, line);
      i++;
      for (unsigned j = 0; j < g->nprocs; j++)
        if (g->procs[j].pid == pid) g->procs[j] = g->procs[--g->nprocs];
      continue;
    }
    if (!strcmp(k, "mig") && i + 4 < n) { /* mig GI PROFILE TOTAL_MIB USED_MIB */
      if (g->nmig >= MAXMIG) die("too many MIG instances%s", "", line);
      struct mig *m = &g->migs[g->nmig++];
      m->kind = 1;
      m->gpu = g->index;
      m->gi = (unsigned)num(t[i + 1], line);
      snprintf(m->profile, sizeof m->profile, "%s", t[i + 2]);
      m->total_mib = num(t[i + 3], line);
      m->used_mib = num(t[i + 4], line);
      m->gr = -1;
      i += 4;
      continue;
    }
    if (!strcmp(k, "mig_gr") && i + 2 < n) { /* mig_gr GI PERCENT: the instance's GPM graphics activity */
      unsigned gi = (unsigned)num(t[i + 1], line);
      struct mig *m = NULL;
      for (unsigned j = 0; j < g->nmig; j++)
        if (g->migs[j].gi == gi) m = &g->migs[j];
      if (!m) die("mig_gr: no MIG instance %s", t[i + 1], line);
      m->gr = num(t[i + 2], line);
      i += 2;
      continue;
    }
    die("unknown key '%s'", k, line);
  }
}

static void load(void) {
  static int loaded;
  if (loaded) return;
  loaded = 1;
  const char *path = getenv("FAKE_NVML_SCENARIO");
  if (!path) { fprintf(stderr, "fakenvml: FAKE_NVML_SCENARIO is not set\n"); exit(3); }
  FILE *f = fopen(path, "r");
  if (!f) { fprintf(stderr, "fakenvml: cannot open %s\n", path); exit(3); }
  char buf[512];
  int line = 0;
  size_t cap = 1024;
  events = calloc(cap, sizeof *events);
  while (fgets(buf, sizeof buf, f)) {
    line++;
    char copy[512];
    snprintf(copy, sizeof copy, "%s", buf);
    char *t[64];
    int n = tokens(buf, t, 64);
    if (!n) continue;
    if (!strcmp(t[0], "step_s") && n == 2) step_s = num(t[1], line);
    else if (!strcmp(t[0], "driver") && n == 2) snprintf(driver, sizeof driver, "%s", t[1]);
    else if (!strcmp(t[0], "init_fail") && n == 2) init_fail = (int)num(t[1], line);
    else if (!strcmp(t[0], "gpu") && n >= 2) {
      unsigned i = (unsigned)num(t[1], line);
      if (i >= MAXG) die("gpu index %s too large", t[1], line);
      if (i + 1 > ngpus) ngpus = i + 1;
      struct gpu *g = &gpus[i];
      g->index = (int)i;
      if (!g->uuid[0]) { /* first declared: the defaults */
        snprintf(g->uuid, sizeof g->uuid, "GPU-fake-%04u", i);
        g->mem_temp = -1;
        g->vgpu_license = -1;
      }
      if (!g->pci[0]) snprintf(g->pci, sizeof g->pci, "00000000:%02X:00.0", 0x10 + i);
      if (!g->name[0]) snprintf(g->name, sizeof g->name, "Fake GPU");
      apply(g, t + 2, n - 2, line);
    } else if (!strcmp(t[0], "at") && n >= 3) {
      if (nevents >= MAXEV) die("too many events%s", "", line);
      if (nevents == cap) {
        struct event *ne = realloc(events, (cap *= 2) * sizeof *events);
        if (!ne) die("out of memory%s", "", line);
        events = ne;
      }
      struct event *e = &events[nevents++];
      e->step = (int)num(t[1], line);
      e->order = (int)nevents;
      e->line = strdup(copy);
      if (!e->line) die("out of memory%s", "", line);
    } else
      die("cannot read '%s'", t[0], line);
  }
  fclose(f);
  /* By step, file order within a step: each step runs only its own. */
  qsort(events, nevents, sizeof *events, by_step);
}

static void run_event(struct event *e) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s", e->line);
  char *t[64];
  int n = tokens(buf, t, 64);
  if (n >= 4 && !strcmp(t[2], "fail") && nglobal_fail < 8) {
    snprintf(global_fail[nglobal_fail++], 64, "%s", t[3]);
    return;
  }
  if (n < 4 || strcmp(t[2], "gpu")) die("'at' needs 'gpu I' or 'fail NAME'%s", "", 0);
  unsigned i = (unsigned)num(t[3], 0);
  if (i >= ngpus) die("no gpu %s", t[3], 0);
  apply(&gpus[i], t + 4, n - 4, 0);
}

static int failing(const struct gpu *g, const char *fn) {
  for (unsigned i = 0; i < nglobal_fail; i++)
    if (!strcmp(global_fail[i], fn)) return 1;
  for (unsigned i = 0; g && i < g->nfail; i++)
    if (!strcmp(g->fail[i], fn)) return 1;
  return 0;
}

#define DEV_CHECK(fn)                                     \
  struct gpu *g = (struct gpu *)(void *)dev;              \
  if (!g || g->kind != 0) return E_INVALID;               \
  if (g->lost) return E_LOST;                             \
  if (failing(g, fn)) return E_UNKNOWN;

nv_ret nvmlInit_v2(void) {
  load();
  if (init_fail) nvmlShutdown(); /* no shutdown follows a failed init */
  return (nv_ret)init_fail;
}
nv_ret nvmlShutdown(void) {
  for (unsigned i = 0; i < nevents && events; i++) free(events[i].line);
  free(events);
  events = NULL;
  nevents = 0;
  return OK;
}
const char *nvmlErrorString(nv_ret r) {
  switch (r) {
  case OK: return "Success";
  case E_NOT_SUPPORTED: return "Not Supported";
  case E_LOST: return "GPU is lost";
  case NV_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
  default: return "Unknown Error";
  }
}
nv_ret nvmlSystemGetDriverVersion(char *v, unsigned len) {
  snprintf(v, len, "%s", driver);
  return OK;
}

nv_ret nvmlDeviceGetCount_v2(unsigned *count) {
  step++;
  while (next_event < nevents && events[next_event].step <= step) run_event(&events[next_event++]);
  for (unsigned i = 0; i < ngpus; i++)
    if (!gpus[i].lost) gpus[i].energy_mj += gpus[i].power_w * step_s * 1000.0;
  *count = ngpus;
  return OK;
}
nv_ret nvmlDeviceGetHandleByIndex_v2(unsigned i, nv_dev *dev) {
  if (i >= ngpus) return E_INVALID;
  if (gpus[i].lost) return E_LOST;
  *dev = (nv_dev)(void *)&gpus[i];
  return OK;
}
nv_ret nvmlDeviceGetName(nv_dev dev, char *name, unsigned len) {
  struct mig *m = (struct mig *)(void *)dev;
  if (m && m->kind == 1) {
    snprintf(name, len, "%s MIG %s", gpus[m->gpu].name, m->profile);
    return OK;
  }
  DEV_CHECK("nvmlDeviceGetName");
  snprintf(name, len, "%s", g->name);
  return OK;
}
nv_ret nvmlDeviceGetUUID(nv_dev dev, char *uuid, unsigned len) {
  struct mig *m = (struct mig *)(void *)dev;
  if (m && m->kind == 1) { /* MIG-<the GPU's UUID without GPU->-<GI> */
    const char *u = gpus[m->gpu].uuid;
    snprintf(uuid, len, "MIG-%s-%u", strncmp(u, "GPU-", 4) ? u : u + 4, m->gi);
    return OK;
  }
  DEV_CHECK("nvmlDeviceGetUUID");
  snprintf(uuid, len, "%s", g->uuid);
  return OK;
}
nv_ret nvmlDeviceGetPciInfo_v3(nv_dev dev, struct nv_pci *p) {
  DEV_CHECK("nvmlDeviceGetPciInfo_v3");
  memset(p, 0, sizeof *p);
  snprintf(p->bus_id, sizeof p->bus_id, "%s", g->pci);
  return OK;
}
/* As the driver: no utilization of a GPU with MIG on (dcgm-exporter has
 * no DCGM_FI_DEV_GPU_UTIL there either). */
nv_ret nvmlDeviceGetUtilizationRates(nv_dev dev, struct nv_util *u) {
  DEV_CHECK("nvmlDeviceGetUtilizationRates");
  if (g->nmig) return E_NOT_SUPPORTED;
  u->gpu = (unsigned)g->util;
  u->memory = (unsigned)g->mem_util;
  return OK;
}
nv_ret nvmlDeviceGetMemoryInfo(nv_dev dev, struct nv_memory *m) {
  struct mig *mi = (struct mig *)(void *)dev;
  if (mi && mi->kind == 1) {
    m->total = (unsigned long long)(mi->total_mib * 1048576);
    m->used = (unsigned long long)(mi->used_mib * 1048576);
    m->free = m->total - m->used;
    return OK;
  }
  DEV_CHECK("nvmlDeviceGetMemoryInfo");
  /* v1: used includes the reserved memory, as real drivers give it. */
  m->total = (unsigned long long)(g->mem_total_mib * 1048576);
  m->used = (unsigned long long)((g->fb_used_mib + g->fb_reserved_mib) * 1048576);
  m->free = m->total > m->used ? m->total - m->used : 0;
  return OK;
}
/* v2: used without the reserved memory, reserved apart; a wrong version
 * is refused as NVML does. */
nv_ret nvmlDeviceGetMemoryInfo_v2(nv_dev dev, struct nv_memory_v2 *m) {
  if (!m || m->version != NV_MEMORY_V2) return E_INVALID;
  struct mig *mi = (struct mig *)(void *)dev;
  if (mi && mi->kind == 1) {
    m->total = (unsigned long long)(mi->total_mib * 1048576);
    m->used = (unsigned long long)(mi->used_mib * 1048576);
    m->reserved = 0;
    m->free = m->total - m->used;
    return OK;
  }
  DEV_CHECK("nvmlDeviceGetMemoryInfo_v2");
  m->total = (unsigned long long)(g->mem_total_mib * 1048576);
  m->reserved = (unsigned long long)(g->fb_reserved_mib * 1048576);
  m->used = (unsigned long long)(g->fb_used_mib * 1048576);
  unsigned long long taken = m->used + m->reserved;
  m->free = m->total > taken ? m->total - taken : 0;
  return OK;
}
nv_ret nvmlDeviceGetPowerUsage(nv_dev dev, unsigned *mw) {
  DEV_CHECK("nvmlDeviceGetPowerUsage");
  *mw = (unsigned)(g->power_w * 1000 + 0.5);
  return OK;
}
nv_ret nvmlDeviceGetTotalEnergyConsumption(nv_dev dev, unsigned long long *mj) {
  DEV_CHECK("nvmlDeviceGetTotalEnergyConsumption");
  *mj = (unsigned long long)(g->energy_mj + 0.5);
  return OK;
}
nv_ret nvmlDeviceGetTemperature(nv_dev dev, unsigned sensor, unsigned *t) {
  DEV_CHECK("nvmlDeviceGetTemperature");
  if (sensor != NV_TEMPERATURE_GPU) return E_NOT_SUPPORTED;
  *t = (unsigned)g->temp;
  return OK;
}
nv_ret nvmlDeviceGetClockInfo(nv_dev dev, unsigned type, unsigned *mhz) {
  DEV_CHECK("nvmlDeviceGetClockInfo");
  if (type == NV_CLOCK_SM) *mhz = (unsigned)g->sm_clock;
  else if (type == NV_CLOCK_MEM) *mhz = (unsigned)g->mem_clock;
  else return E_NOT_SUPPORTED;
  return OK;
}
nv_ret nvmlDeviceGetCurrentClocksEventReasons(nv_dev dev, unsigned long long *r) {
  DEV_CHECK("nvmlDeviceGetCurrentClocksEventReasons");
  *r = g->reasons;
  return OK;
}
nv_ret nvmlDeviceGetViolationStatus(nv_dev dev, unsigned policy, struct nv_violation *v) {
  DEV_CHECK("nvmlDeviceGetViolationStatus");
  v->ref_time = (unsigned long long)step * 1000000ull;
  if (policy == NV_PERF_POLICY_POWER) v->violation_ns = (unsigned long long)g->viol_power_ns;
  else if (policy == NV_PERF_POLICY_THERMAL)
    v->violation_ns = (unsigned long long)g->viol_thermal_ns;
  else return E_NOT_SUPPORTED;
  return OK;
}
nv_ret nvmlDeviceGetComputeRunningProcesses_v3(nv_dev dev, unsigned *count, struct nv_proc *out) {
  DEV_CHECK("nvmlDeviceGetComputeRunningProcesses_v3");
  if (*count < g->nprocs || (!out && g->nprocs)) {
    *count = g->nprocs;
    return E_INSUFFICIENT;
  }
  for (unsigned i = 0; i < g->nprocs; i++) {
    out[i].pid = g->procs[i].pid;
    out[i].used = (unsigned long long)(g->procs[i].used_mib * 1048576);
    out[i].gi = g->procs[i].gi < 0 ? 0xFFFFFFFFu : (unsigned)g->procs[i].gi;
    out[i].ci = out[i].gi;
  }
  *count = g->nprocs;
  return OK;
}
nv_ret nvmlDeviceGetProcessUtilization(nv_dev dev, struct nv_proc_util *out, unsigned *count,
                                       unsigned long long last_seen) {
  DEV_CHECK("nvmlDeviceGetProcessUtilization");
  if (g->nmig) return E_NOT_SUPPORTED; /* none per process with MIG on either */
  unsigned long long ts = (unsigned long long)(step + 1) * 1000000ull;
  unsigned n = 0;
  for (unsigned i = 0; i < g->nprocs; i++)
    if (g->procs[i].sm >= 0 && ts > last_seen) n++;
  if (!n) return E_NOT_FOUND;
  if (!out || *count < n) {
    *count = n;
    return E_INSUFFICIENT;
  }
  n = 0;
  for (unsigned i = 0; i < g->nprocs; i++)
    if (g->procs[i].sm >= 0) {
      memset(&out[n], 0, sizeof out[n]);
      out[n].pid = g->procs[i].pid;
      out[n].ts = ts;
      out[n++].sm = (unsigned)g->procs[i].sm;
    }
  *count = n;
  return OK;
}

/* XID events: one set, events queued by "xid N" in the scenario. */
static int evset_token;
nv_ret nvmlEventSetCreate(nv_evset *set) { *set = (nv_evset)(void *)&evset_token; return OK; }
nv_ret nvmlDeviceRegisterEvents(nv_dev dev, unsigned long long types, nv_evset set) {
  (void)types;
  (void)set;
  DEV_CHECK("nvmlDeviceRegisterEvents");
  return OK;
}
nv_ret nvmlEventSetWait_v2(nv_evset set, struct nv_event *d, unsigned timeout_ms) {
  (void)set;
  (void)timeout_ms;
  if (!nxid) return E_TIMEOUT;
  d->dev = (nv_dev)(void *)&gpus[xids[0].gpu];
  d->type = NV_EVENT_XID;
  d->data = xids[0].xid;
  d->gi = d->ci = 0xFFFFFFFFu;
  memmove(&xids[0], &xids[1], --nxid * sizeof xids[0]);
  return OK;
}
nv_ret nvmlEventSetFree(nv_evset set) { (void)set; return OK; }

nv_ret nvmlDeviceGetMigMode(nv_dev dev, unsigned *cur, unsigned *pend) {
  DEV_CHECK("nvmlDeviceGetMigMode");
  *cur = *pend = g->nmig ? NV_DEVICE_MIG_ENABLE : 0;
  return OK;
}
nv_ret nvmlDeviceGetMaxMigDeviceCount(nv_dev dev, unsigned *count) {
  DEV_CHECK("nvmlDeviceGetMaxMigDeviceCount");
  *count = g->nmig ? MAXMIG : 0;
  return OK;
}
nv_ret nvmlDeviceGetMigDeviceHandleByIndex(nv_dev dev, unsigned i, nv_dev *mig) {
  DEV_CHECK("nvmlDeviceGetMigDeviceHandleByIndex");
  if (i >= g->nmig) return E_NOT_FOUND;
  *mig = (nv_dev)(void *)&g->migs[i];
  return OK;
}
nv_ret nvmlDeviceGetGpuInstanceId(nv_dev dev, unsigned *id) {
  struct mig *m = (struct mig *)(void *)dev;
  if (!m || m->kind != 1) return E_INVALID;
  *id = m->gi;
  return OK;
}

/* GPM: a sample (NVML's opaque struct, defined here) records the activity
 * figures at the step it was taken. */
struct nvmlGpmSample_st { double smact, tensor, dram, gr, pcie_tx, pcie_rx, no_pcie; };
nv_ret nvmlGpmQueryDeviceSupport(nv_dev dev, struct nv_gpm_support *s) {
  DEV_CHECK("nvmlGpmQueryDeviceSupport");
  s->supported = g->gpm ? 1 : 0;
  return OK;
}
nv_ret nvmlGpmSampleAlloc(nv_gpm_sample *s) {
  *s = calloc(1, sizeof **s);
  return *s ? OK : E_UNKNOWN;
}
nv_ret nvmlGpmSampleFree(nv_gpm_sample s) { free(s); return OK; }
nv_ret nvmlGpmSampleGet(nv_dev dev, nv_gpm_sample s) {
  DEV_CHECK("nvmlGpmSampleGet");
  if (!g->gpm) return E_NOT_SUPPORTED;
  s->smact = g->smact;
  s->tensor = g->tensor;
  s->dram = g->dram;
  s->gr = g->gr;
  s->pcie_tx = g->pcie_tx_mib;
  s->pcie_rx = g->pcie_rx_mib;
  s->no_pcie = g->gpm_no_pcie;
  return OK;
}
/* A MIG instance's sample (Hopper and later): its own graphics activity
 * (mig_gr), the GPU's other figures; unsupported where the GPU has no GPM
 * or the instance no mig_gr. */
nv_ret nvmlGpmMigSampleGet(nv_dev dev, unsigned gi, nv_gpm_sample s) {
  DEV_CHECK("nvmlGpmMigSampleGet");
  if (!g->gpm) return E_NOT_SUPPORTED;
  for (unsigned i = 0; i < g->nmig; i++)
    if (g->migs[i].gi == gi) {
      if (g->migs[i].gr < 0) return E_NOT_SUPPORTED;
      s->smact = g->smact;
      s->tensor = g->tensor;
      s->dram = g->dram;
      s->gr = g->migs[i].gr;
      s->pcie_tx = s->pcie_rx = -1; /* PCIe is the GPU's: not in an instance's sample */
      return OK;
    }
  return E_NOT_FOUND;
}
nv_ret nvmlGpmMetricsGet(struct nv_gpm_get *g) {
  if (g->version != NV_GPM_METRICS_GET_VERSION || !g->s2) return E_INVALID;
  for (unsigned i = 0; g->s2->no_pcie && i < g->num && i < NV_GPM_METRIC_MAX; i++)
    if (g->metrics[i].id == NV_GPM_METRIC_PCIE_TX_PER_SEC ||
        g->metrics[i].id == NV_GPM_METRIC_PCIE_RX_PER_SEC)
      return E_NOT_SUPPORTED; /* the whole request, as a stricter driver might */
  for (unsigned i = 0; i < g->num && i < NV_GPM_METRIC_MAX; i++) {
    struct nv_gpm_metric *m = &g->metrics[i];
    m->ret = OK;
    switch (m->id) {
    case NV_GPM_METRIC_GRAPHICS_UTIL: m->value = g->s2->gr; break;
    case NV_GPM_METRIC_SM_UTIL: m->value = g->s2->smact; break;
    case NV_GPM_METRIC_ANY_TENSOR_UTIL: m->value = g->s2->tensor; break;
    case NV_GPM_METRIC_DRAM_BW_UTIL: m->value = g->s2->dram; break;
    case NV_GPM_METRIC_PCIE_TX_PER_SEC: m->value = g->s2->pcie_tx; break;
    case NV_GPM_METRIC_PCIE_RX_PER_SEC: m->value = g->s2->pcie_rx; break;
    default: m->ret = E_NOT_SUPPORTED;
    }
    if (m->ret == OK && m->value < 0) m->ret = E_NOT_SUPPORTED; /* not in this sample */
  }
  return OK;
}

/* Health counters. Remapped rows are refused with MIG on, as the driver
 * does; NVLink has `nvlinks` active links, each with the counters given
 * (none: link 0 answers not supported). */
nv_ret nvmlDeviceGetTotalEccErrors(nv_dev dev, unsigned type, unsigned counter, unsigned long long *n) {
  DEV_CHECK("nvmlDeviceGetTotalEccErrors");
  int unc = type == NV_MEMORY_ERROR_UNCORRECTED, agg = counter == NV_AGGREGATE_ECC;
  *n = (unsigned long long)(agg ? (unc ? g->ecc_dbe_agg : g->ecc_sbe_agg)
                                : (unc ? g->ecc_dbe_vol : g->ecc_sbe_vol));
  return OK;
}
nv_ret nvmlDeviceGetRetiredPages(nv_dev dev, unsigned cause, unsigned *count, unsigned long long *addr) {
  DEV_CHECK("nvmlDeviceGetRetiredPages");
  unsigned have = (unsigned)(cause == NV_RETIRE_DBE ? g->retired_dbe : g->retired_sbe);
  if (*count < have || (!addr && have)) {
    *count = have;
    return E_INSUFFICIENT;
  }
  for (unsigned i = 0; i < have; i++) addr[i] = 0x1000ull * (i + 1);
  *count = have;
  return OK;
}
nv_ret nvmlDeviceGetRetiredPagesPendingStatus(nv_dev dev, unsigned *pending) {
  DEV_CHECK("nvmlDeviceGetRetiredPagesPendingStatus");
  *pending = g->retired_pending != 0 ? NV_FEATURE_ENABLED : 0;
  return OK;
}
nv_ret nvmlDeviceGetRemappedRows(nv_dev dev, unsigned *corr, unsigned *unc, unsigned *pending,
                                 unsigned *failure) {
  DEV_CHECK("nvmlDeviceGetRemappedRows");
  if (g->nmig) return E_NOT_SUPPORTED;
  *corr = (unsigned)g->remap_corr;
  *unc = (unsigned)g->remap_unc;
  *pending = (unsigned)g->remap_pending;
  *failure = (unsigned)g->remap_failure;
  return OK;
}
nv_ret nvmlDeviceGetPcieReplayCounter(nv_dev dev, unsigned *v) {
  DEV_CHECK("nvmlDeviceGetPcieReplayCounter");
  *v = (unsigned)g->pcie_replay;
  return OK;
}
nv_ret nvmlDeviceGetEncoderUtilization(nv_dev dev, unsigned *u, unsigned *period_us) {
  DEV_CHECK("nvmlDeviceGetEncoderUtilization");
  *u = (unsigned)g->enc;
  *period_us = 167000;
  return OK;
}
nv_ret nvmlDeviceGetDecoderUtilization(nv_dev dev, unsigned *u, unsigned *period_us) {
  DEV_CHECK("nvmlDeviceGetDecoderUtilization");
  *u = (unsigned)g->dec;
  *period_us = 167000;
  return OK;
}
nv_ret nvmlDeviceGetNvLinkState(nv_dev dev, unsigned link, unsigned *active) {
  DEV_CHECK("nvmlDeviceGetNvLinkState");
  if (!g->nvlinks) return E_NOT_SUPPORTED;
  if (link >= NV_NVLINK_MAX_LINKS) return E_INVALID;
  *active = link < (unsigned)g->nvlinks ? NV_FEATURE_ENABLED : 0;
  return OK;
}
nv_ret nvmlDeviceGetNvLinkErrorCounter(nv_dev dev, unsigned link, unsigned counter,
                                       unsigned long long *v) {
  DEV_CHECK("nvmlDeviceGetNvLinkErrorCounter");
  if (link >= (unsigned)g->nvlinks) return E_INVALID;
  switch (counter) {
  case NV_NVLINK_ERROR_DL_CRC_FLIT: *v = (unsigned long long)g->nvlink_crc_flit; break;
  case NV_NVLINK_ERROR_DL_CRC_DATA: *v = (unsigned long long)g->nvlink_crc_data; break;
  case NV_NVLINK_ERROR_DL_REPLAY: *v = (unsigned long long)g->nvlink_replay; break;
  case NV_NVLINK_ERROR_DL_RECOVERY: *v = (unsigned long long)g->nvlink_recovery; break;
  default: return E_INVALID;
  }
  return OK;
}

/* Field values: the memory temperature (unsigned int) where the GPU has
 * the sensor, NVLink data throughput (KiB, all links: scope UINT_MAX)
 * where it has NVLink; each other field "not supported" in its own
 * return code, the call itself succeeding, as NVML does. */
nv_ret nvmlDeviceGetFieldValues(nv_dev dev, int count, struct nv_field_value *v) {
  DEV_CHECK("nvmlDeviceGetFieldValues");
  for (int i = 0; i < count; i++) {
    int nvl = v[i].field_id == NV_FI_DEV_NVLINK_THROUGHPUT_DATA_TX ||
              v[i].field_id == NV_FI_DEV_NVLINK_THROUGHPUT_DATA_RX;
    if (v[i].field_id == NV_FI_DEV_MEMORY_TEMP && g->mem_temp >= 0) {
      v[i].ret = OK;
      v[i].value_type = NV_VALUE_TYPE_UNSIGNED_INT;
      v[i].value.ui = (unsigned)g->mem_temp;
    } else if (nvl && g->nvlinks && v[i].scope_id == 0xFFFFFFFFu) { /* all links */
      v[i].ret = OK;
      v[i].value_type = NV_VALUE_TYPE_UNSIGNED_LONG_LONG;
      v[i].value.ull = (unsigned long long)(v[i].field_id == NV_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
                                                ? g->nvlink_tx_kib
                                                : g->nvlink_rx_kib);
    } else {
      v[i].ret = E_NOT_SUPPORTED;
    }
  }
  return OK;
}

/* vGPU licensing: on bare metal (the default) it does not apply; a vGPU
 * guest (vgpu_license 0 or 1) lists the vGPU feature, licensed or not. */
nv_ret nvmlDeviceGetGridLicensableFeatures_v4(nv_dev dev, struct nv_grid_features *f) {
  DEV_CHECK("nvmlDeviceGetGridLicensableFeatures_v4");
  memset(f, 0, sizeof *f);
  if (g->vgpu_license < 0) return OK;
  f->supported = 1;
  f->count = 1;
  f->features[0].code = NV_GRID_LICENSE_FEATURE_CODE_VGPU;
  f->features[0].state = g->vgpu_license > 0;
  f->features[0].enabled = 1;
  return OK;
}
