/* dcgm-exporter's default counters that need more than one NVML call per
 * figure: NVLINK_BANDWIDTH_TOTAL (derived from two samples of NVML's NVLink
 * data counters, as DCGM derives it), the PCIe traffic rates
 * (DCGM_FI_PROF_PCIE_TX_BYTES/RX_BYTES, from GPM), and what stoker shows of
 * the DCGM_FI_PROF_* family on a GPU without GPM (an A100): nothing. The
 * whole default list is compared with dcgm-exporter's in
 * tests/tools/dcgm_compat.py. */
#include "test_watch.h"

static const char *const H100_LABELS =
    "{gpu=\"0\",UUID=\"GPU-aaaa\",pci_bus_id=\"00000000:17:00.0\",device=\"nvidia0\","
    "modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node1\",DCGM_FI_DRIVER_VERSION=\"550.54.15\"}";

/* DCGM: (rx + tx KiB now - at the previous sample) / seconds / 1000,
 * truncated; 0 at the first sample. 15 s samples here. */
TEST(watch_nvlink_bandwidth_total_as_dcgm) {
  write_str("sc.txt",
            "driver 550.54.15\n"
            "gpu 0 name \"NVIDIA H100 80GB HBM3\" uuid GPU-aaaa pci 00000000:17:00.0 "
            "nvlinks 18 nvlink_tx_kib 1000 nvlink_rx_kib 3\n"
            "gpu 1 name \"NVIDIA A100-SXM4-40GB\" uuid GPU-bbbb\n"
            /* +3,000,000 KiB in 15 s: 200,000 KiB/s, DCGM's 200 */
            "at 1 gpu 0 nvlink_tx_kib 2001000 nvlink_rx_kib 1000003\n"
            /* +10,000 KiB in 15 s: 666.7 KiB/s, DCGM's 0 (truncated) */
            "at 2 gpu 0 nvlink_tx_kib 2011000\n"
            /* +45,000 KiB: 3 */
            "at 3 gpu 0 nvlink_rx_kib 1045003\n"
            /* the counters reset (a driver reload): 0, not negative */
            "at 4 gpu 0 nvlink_tx_kib 5 nvlink_rx_kib 5\n");
  struct stk_watch_opts o = {0};
  o.interval_s = 15;
  struct stk_watch *w = agent("sc.txt", &o);
  static const double want[5] = {0, 200, 0, 3, 0};
  char line[512];
  for (int step = 0; step < 5; step++) {
    CHECK_OK(stk_watch_sample(w));
    char *t = expo(w);
    snprintf(line, sizeof line, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL%s %g\n", H100_LABELS,
             want[step]);
    CHECK_CONTAINS(t, line);
    /* dcgm-exporter's type for it (though DCGM's value is a rate) */
    CHECK_CONTAINS(t, "# TYPE DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL counter\n");
    /* the A100 here has no NVLink: absent, not 0 */
    CHECK(strstr(t, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{gpu=\"1\"") == NULL);
    free(t);
  }
  stk_watch_close(w);
}

/* GPM's PCIe traffic (MiB/s) as DCGM_FI_PROF_PCIE_TX_BYTES/RX_BYTES
 * (bytes/s, gauges), from the second sample (GPM compares two). */
TEST(watch_pcie_bytes_from_gpm) {
  write_str("sc.txt",
            "driver 550.54.15\n"
            "gpu 0 name \"NVIDIA H100 80GB HBM3\" uuid GPU-aaaa pci 00000000:17:00.0 gpm 1 "
            "pcie_tx_mib 100 pcie_rx_mib 2.5\n"
            "gpu 1 name \"NVIDIA A100-SXM4-40GB\" uuid GPU-bbbb\n");
  struct stk_watch *w = agent("sc.txt", NULL);
  CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  CHECK(strstr(t, "DCGM_FI_PROF_PCIE_TX_BYTES{") == NULL); /* one GPM sample: no figure yet */
  free(t);
  CHECK_OK(stk_watch_sample(w));
  t = expo(w);
  char line[512];
  snprintf(line, sizeof line, "DCGM_FI_PROF_PCIE_TX_BYTES%s 104857600\n", H100_LABELS);
  CHECK_CONTAINS(t, line);
  snprintf(line, sizeof line, "DCGM_FI_PROF_PCIE_RX_BYTES%s 2621440\n", H100_LABELS);
  CHECK_CONTAINS(t, line);
  CHECK_CONTAINS(t, "# TYPE DCGM_FI_PROF_PCIE_TX_BYTES gauge\n");
  CHECK(strstr(t, "DCGM_FI_PROF_PCIE_TX_BYTES{gpu=\"1\"") == NULL);
  free(t);
  stk_watch_close(w);
}

/* A driver that refuses a whole GPM request naming the PCIe metrics still
 * gives the four activity ratios (asked again without them). */
TEST(watch_gpm_without_pcie_keeps_activity) {
  write_str("sc.txt", "gpu 0 gpm 1 smact 80 tensor 30 gpm_no_pcie 1 pcie_tx_mib 100\n");
  struct stk_watch *w = agent("sc.txt", NULL);
  for (int s = 0; s < 2; s++) CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  CHECK_NEAR(metric(t, "DCGM_FI_PROF_SM_ACTIVE{gpu=\"0\""), 0.8);
  CHECK_NEAR(metric(t, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{gpu=\"0\""), 0.3);
  CHECK(strstr(t, "DCGM_FI_PROF_PCIE_TX_BYTES{") == NULL);
  free(t);
  stk_watch_close(w);
}

/* An A100 (no GPM), whole and with MIG on: no DCGM_FI_PROF_* series and
 * no family header for them, as dcgm-exporter where DCGM's profiling is
 * unavailable; nothing approximated from NVML's utilization under a DCGM
 * name. Its NVML figures stay (GPU_UTIL where MIG is off), and a MIG
 * instance's time is "unknown" (docs/watch.md). */
TEST(watch_prof_absent_without_gpm) {
  write_str("sc.txt",
            "driver 550.54.15\n"
            "gpu 0 name \"NVIDIA A100-SXM4-80GB\" uuid GPU-aaaa pci 00000000:17:00.0 util 80 "
            "mem_util 40 smact 70 tensor 30 dram 20 gr 80 pcie_tx_mib 10\n"
            "gpu 1 name \"NVIDIA A100-SXM4-40GB\" uuid GPU-bbbb smact 70 gr 80\n"
            "at 0 gpu 1 mig 1 3g.20gb 19968 100\n"
            "at 0 gpu 1 mig 2 3g.20gb 19968 100\n");
  struct stk_watch *w = agent("sc.txt", NULL);
  for (int s = 0; s < 3; s++) CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  CHECK(strstr(t, "DCGM_FI_PROF_") == NULL);
  CHECK_NEAR(metric(t, "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\""), 80);
  CHECK_NEAR(metric(t, "DCGM_FI_DEV_MEM_COPY_UTIL{gpu=\"0\""), 40);
  CHECK(strstr(t, "DCGM_FI_DEV_GPU_UTIL{gpu=\"1\"") == NULL);  /* MIG on: NVML has none */
  CHECK_NEAR(metric(t, "DCGM_FI_DEV_FB_USED{gpu=\"1\""), 100); /* the instances are there */
  CHECK_NEAR(metric(t, "stoker_watch_nvml_errors_total{call=\"gpm\"}"), 0);
  free(t);
  stk_watch_close(w);
}

/* DCGM's VGPU_LICENSE_STATUS: 0 on bare metal (licensing does not apply,
 * as DCGM answers), else whether the vGPU license is held. */
TEST(watch_vgpu_license_status) {
  write_str("sc.txt",
            "driver 550.54.15\n"
            "gpu 0 name \"NVIDIA H100 80GB HBM3\" uuid GPU-aaaa pci 00000000:17:00.0\n"
            "gpu 1 vgpu_license 1\n"
            "gpu 2 vgpu_license 0\n"
            "gpu 3 fail nvmlDeviceGetGridLicensableFeatures_v4\n");
  struct stk_watch *w = agent("sc.txt", NULL);
  CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  char line[512];
  snprintf(line, sizeof line, "DCGM_FI_DEV_VGPU_LICENSE_STATUS%s 0\n", H100_LABELS);
  CHECK_CONTAINS(t, line);
  CHECK_CONTAINS(t, "# TYPE DCGM_FI_DEV_VGPU_LICENSE_STATUS gauge\n");
  CHECK_NEAR(metric(t, "DCGM_FI_DEV_VGPU_LICENSE_STATUS{gpu=\"1\""), 1);
  CHECK_NEAR(metric(t, "DCGM_FI_DEV_VGPU_LICENSE_STATUS{gpu=\"2\""), 0);
  CHECK(
      isnan(metric(t, "DCGM_FI_DEV_VGPU_LICENSE_STATUS{gpu=\"3\""))); /* the call failed: absent */
  CHECK_NEAR(metric(t, "stoker_watch_nvml_errors_total{call=\"license\"}"), 1);
  free(t);
  stk_watch_close(w);
}
