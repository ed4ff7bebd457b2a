/* The health counters dcgm-exporter users alert on (ECC, retired pages,
 * row remapping, PCIe replays, NVLink errors, encoder and decoder, memory
 * temperature), under
 * dcgm-exporter's names and labels, read through the dlopen'ed NVML (the
 * fake here): every AG_HEALTH_S (10 s), repeated in between; absent where
 * NVML has none (no NVLink; row remapping with MIG on). */
#include "test_watch.h"

TEST(watch_health_counters_dcgm_names) {
  write_str("sc.txt",
            "driver 550.54.15\n"
            "gpu 0 name \"NVIDIA H100 80GB HBM3\" uuid GPU-aaaa pci 00000000:17:00.0 "
            "ecc_sbe_vol 3 ecc_dbe_vol 1 ecc_sbe_agg 30 ecc_dbe_agg 2 retired_sbe 4 retired_dbe 1 "
            "retired_pending 1 remap_corr 5 remap_unc 2 remap_failure 1 pcie_replay 7 enc 12 dec 34 "
            "nvlinks 18 nvlink_crc_flit 2 nvlink_crc_data 1 nvlink_replay 3 nvlink_recovery 1 mem_temp 51 "
            "nvlink_tx_kib 1000 nvlink_rx_kib 3\n"
            "gpu 1 name \"NVIDIA A100-SXM4-40GB\" uuid GPU-bbbb remap_corr 9\n"
            "at 0 gpu 1 mig 1 7g.40gb 40192 100\n"
            "at 5 gpu 0 pcie_replay 9 ecc_dbe_vol 2\n");
  struct stk_watch *w = agent("sc.txt", NULL);
  CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  const char *lab = "{gpu=\"0\",UUID=\"GPU-aaaa\",pci_bus_id=\"00000000:17:00.0\",device=\"nvidia0\","
                    "modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node1\",DCGM_FI_DRIVER_VERSION=\"550.54.15\"}";
  static const struct { const char *name; double v; } want[] = {
      {"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", 3},         {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 1},
      {"DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", 30},        {"DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", 2},
      {"DCGM_FI_DEV_RETIRED_SBE", 4},               {"DCGM_FI_DEV_RETIRED_DBE", 1},
      {"DCGM_FI_DEV_RETIRED_PENDING", 1},           {"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", 5},
      {"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", 2}, {"DCGM_FI_DEV_ROW_REMAP_FAILURE", 1},
      {"DCGM_FI_DEV_ROW_REMAP_PENDING", 0},         {"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 7},
      {"DCGM_FI_DEV_ENC_UTIL", 12},                 {"DCGM_FI_DEV_DEC_UTIL", 34},
      {"DCGM_FI_DEV_MEMORY_TEMP", 51}, /* a field value (NVML_FI_DEV_MEMORY_TEMP) */
      /* NVLink: summed over the 18 active links. */
      {"DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", 36},
      {"DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", 18},
      {"DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", 54},
      {"DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", 18},
  };
  for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
    char line[512];
    snprintf(line, sizeof line, "%s%s %g\n", want[k].name, lab, want[k].v);
    CHECK_CONTAINS(t, line);
  }
  CHECK_CONTAINS(t, "# TYPE DCGM_FI_DEV_PCIE_REPLAY_COUNTER counter\n");
  CHECK_CONTAINS(t, "# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter\n");
  CHECK_CONTAINS(t, "# TYPE DCGM_FI_DEV_ROW_REMAP_FAILURE gauge\n");
  /* GPU 1: no NVLink (series absent, not 0); MIG on, so NVML has no row
   * remapping; the other counters on its instance, as dcgm-exporter. */
  CHECK(strstr(t, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL{gpu=\"1\"") == NULL);
  CHECK(strstr(t, "DCGM_FI_DEV_MEMORY_TEMP{gpu=\"1\"") == NULL); /* no sensor: absent */
  /* NVLink traffic (NVML's throughput fields, KiB) as a counter in bytes,
   * stoker's own name (DCGM's NVLINK_BANDWIDTH_TOTAL is a rate: test_watch_dcgm.c). */
  CHECK_CONTAINS(t, "stoker_gpu_nvlink_data_bytes_total{gpu=\"0\",UUID=\"GPU-aaaa\",direction=\"tx\"} 1024000\n");
  CHECK_CONTAINS(t, "stoker_gpu_nvlink_data_bytes_total{gpu=\"0\",UUID=\"GPU-aaaa\",direction=\"rx\"} 3072\n");
  CHECK(strstr(t, "stoker_gpu_nvlink_data_bytes_total{gpu=\"1\"") == NULL);
  CHECK(strstr(t, "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS{gpu=\"1\"") == NULL);
  CHECK_CONTAINS(t, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{gpu=\"1\",UUID=\"GPU-bbbb\",pci_bus_id=\"00000000:11:00.0\","
                    "device=\"nvidia1\",modelName=\"NVIDIA A100-SXM4-40GB\",GPU_I_PROFILE=\"7g.40gb\",GPU_I_ID=\"1\",");
  CHECK_NEAR(metric(t, "stoker_watch_nvml_errors_total{call=\"remap\"}"), 0);
  CHECK_NEAR(metric(t, "stoker_watch_nvml_errors_total{call=\"nvlink\"}"), 0);
  free(t);
  /* Changed at step 5: repeated until the next read, 10 s after the first. */
  for (int s = 1; s < 10; s++) CHECK_OK(stk_watch_sample(w));
  t = expo(w);
  CHECK_NEAR(metric(t, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER{gpu=\"0\""), 7);
  free(t);
  CHECK_OK(stk_watch_sample(w));
  t = expo(w);
  CHECK_NEAR(metric(t, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER{gpu=\"0\""), 9);
  CHECK_NEAR(metric(t, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu=\"0\""), 2);
  free(t);
  stk_watch_close(w);
}
