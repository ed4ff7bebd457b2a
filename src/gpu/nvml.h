/* NVML, loaded at run time (dlopen of libnvidia-ml.so.1), so that stoker
 * builds and runs on machines without a GPU. One call samples one device
 * into plain numbers; a figure the device cannot give is NaN (absent),
 * never 0. Only the agent uses this. */
#ifndef STOKER_GPU_NVML_H
#define STOKER_GPU_NVML_H

#include <stdint.h>

/* The NVML calls the agent makes, for per-call error counters. */
#define STK__NVML_CALLS(X)                                                   \
  X(name) X(uuid) X(pci) X(util) X(memory) X(power) X(energy) X(temp)      \
  X(sm_clock) X(mem_clock) X(reasons) X(violation) X(procs) X(proc_util)   \
  X(events) X(mig) X(gpm) X(handle) X(ecc) X(retired) X(remap) X(pcie)    \
  X(enc_dec) X(nvlink) X(fields) X(license)
enum stk__nvml_call {
#define X(n) STK__NVML_##n,
  STK__NVML_CALLS(X)
#undef X
  STK__NVML_NCALLS
};
extern const char *const stk__nvml_call_names[STK__NVML_NCALLS];

/* Clock event (throttle) reasons, NVML's bits. */
#define STK__REASON_GPU_IDLE 0x1ull
#define STK__REASON_APP_CLOCKS 0x2ull
#define STK__REASON_SW_POWER_CAP 0x4ull
#define STK__REASON_HW_SLOWDOWN 0x8ull
#define STK__REASON_SYNC_BOOST 0x10ull
#define STK__REASON_SW_THERMAL 0x20ull
#define STK__REASON_HW_THERMAL 0x40ull
#define STK__REASON_HW_POWER_BRAKE 0x80ull
#define STK__REASON_DISPLAY_CLOCK 0x100ull
/* The reasons that slow work down (counted as throttled time). Not the
 * software power cap: a GPU at full load held at its power limit works
 * as it was set up to (its time is counted under its own reason). */
#define STK__REASONS_THROTTLE 0xf8ull

struct stk__gpu_proc {
  uint32_t pid;
  uint32_t gpu_instance; /* MIG GPU instance id, or UINT32_MAX */
  double used_bytes;     /* NaN when the driver does not say */
  double sm_util;        /* percent, NaN when unknown */
};

/* A MIG GPU instance. NVML has no utilization with MIG on; the instance's
 * activity comes from its GPM sample (Hopper and later), else is NaN. */
struct stk__mig {
  uint32_t gi_id;
  char profile[32]; /* "1g.10gb" */
  char uuid[96];    /* the MIG device's own UUID ("MIG-..."), or "" */
  double fb_used_mib, fb_free_mib, fb_total_mib;
  double sm_active, tensor_active, dram_active, gr_active; /* GPM ratios 0..1 */
};

struct stk__gpu_sample {
  unsigned index;
  char uuid[96], name[96], pci[32];
  int lost;          /* fell off the bus (NVML_ERROR_GPU_IS_LOST) */
  double util, mem_util;                  /* percent */
  /* Used excludes the reserved memory where the driver has
   * nvmlDeviceGetMemoryInfo_v2 (as DCGM's FB_USED); reserved is NaN and
   * used includes it where it has only the v1 call. */
  double fb_used_mib, fb_free_mib, fb_total_mib, fb_reserved_mib;
  double power_w, energy_mj, temp_c, sm_clock_mhz, mem_clock_mhz;
  double mem_temp_c;                      /* memory (HBM) temperature: a field value */
  double nvlink_tx_bytes, nvlink_rx_bytes; /* NVLink data sent, received, all links (counters) */
  double reasons;                         /* the bitmask, as a number */
  double viol_power_ns, viol_thermal_ns;  /* throttle time counters */
  double sm_active, tensor_active, dram_active, gr_active; /* GPM ratios 0..1 */
  double pcie_tx_bps, pcie_rx_bps;        /* GPM: PCIe traffic from, to the GPU (bytes/s) */
  /* DCGM's NVLINK_BANDWIDTH_TOTAL: not read here (NaN); the agent derives
   * it from two samples' nvlink_tx_bytes + nvlink_rx_bytes. */
  double nvlink_bw_total;
  double enc_util, dec_util;              /* video encoder, decoder: percent */
  /* Health counters, read at the rounds stk__nvml_health() asks for and
   * repeated in between (they change rarely; the NVLink ones cost a
   * call per link): ECC errors (single bit corrected, double bit
   * uncorrected; volatile since the driver loaded, aggregate for the
   * device's life), retired pages, row remapping (NVML has none with
   * MIG on), PCIe replays, NVLink errors summed over active links. */
  double ecc_sbe_vol, ecc_dbe_vol, ecc_sbe_agg, ecc_dbe_agg;
  double retired_sbe, retired_dbe, retired_pending;
  double remap_corr, remap_unc, remap_pending, remap_failure;
  double pcie_replay;
  double nvlink_crc_flit, nvlink_crc_data, nvlink_replay, nvlink_recovery;
  /* DCGM's VGPU_LICENSE_STATUS: 1 when vGPU licensing applies and the vGPU
   * feature is licensed, 0 otherwise (0 on bare metal, as DCGM). */
  double vgpu_license;
  unsigned xid_count;                     /* XIDs seen in this sample */
  double last_xid;                        /* the last XID; 0 before the first where
                                             XID events are registered, else NaN */
  unsigned nprocs;
  struct stk__gpu_proc *procs;            /* owned by the nvml handle */
  unsigned nmig;
  struct stk__mig mig[8];
};

struct stk__nvml;

/* Load the library (NULL: libnvidia-ml.so.1) and initialize it. Fails with
 * a one-line reason in why (256 bytes). */
int stk__nvml_open(struct stk__nvml **out, const char *lib, char *why);
void stk__nvml_close(struct stk__nvml *n);
/* Number of devices; begins a sampling round. */
int stk__nvml_count(struct stk__nvml *n, unsigned *count);
/* Sample device i. The procs array stays valid until the next call for any
 * device. Returns 0 (lost devices too: s->lost says so). */
int stk__nvml_sample(struct stk__nvml *n, unsigned i, struct stk__gpu_sample *s);
/* Whether the coming round (until the next stk__nvml_count) reads the
 * health counters afresh; between such rounds they repeat. */
void stk__nvml_health(struct stk__nvml *n, int on);
/* Failed calls so far, by call (NOT_SUPPORTED is not a failure). */
uint64_t stk__nvml_errors(const struct stk__nvml *n, enum stk__nvml_call c);
/* The driver version, or "". */
const char *stk__nvml_driver(const struct stk__nvml *n);

#endif
