/* stoker watch against the fake NVML (tests/tools/fakenvml, driven by a
 * scenario file written here): every derived per-job figure (allocated,
 * busy and idle GPU-seconds, throttle seconds by reason, energy, goodput
 * buckets) is checked against the scenario it came from; device metrics
 * keep dcgm-exporter's names and labels; faults (NVML missing, a GPU lost,
 * a failing call, a malformed mapping file) leave the agent running. */
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_watch.h"


/* Two GPUs: GPU 0 runs job A with a utilization and power series, GPU 1
 * runs job B, throttled (SW thermal, then SW power cap + HW slowdown). */
#define NSTEPS 8
static const double util0[NSTEPS] = {100, 100, 50, 0, 0, 25, 100, 0};
static const double power0[NSTEPS] = {300, 310, 200, 70, 70, 150, 400, 65};
static const double util1[NSTEPS] = {90, 90, 90, 90, 60, 60, 60, 60};
static const double power1[NSTEPS] = {250, 250, 250, 250, 240, 240, 240, 240};
static const char *const reasons1[NSTEPS] = {"0x0", "0x20", "0x20", "0x0", "0xc", "0xc", "0x0", "0x1"};

static void write_two_gpu_scenario(void) {
  FILE *f = fopen("sc.txt", "w");
  CHECK(f != NULL);
  fprintf(f, "step_s 1\ndriver 550.54.15\n"
             "gpu 0 name \"NVIDIA H100 80GB HBM3\" uuid GPU-aaaa pci 00000000:17:00.0 "
             "mem_total_mib 81559 gpm 1 temp 45 sm_clock 1980 mem_clock 2619\n"
             "gpu 1 name \"NVIDIA A100-SXM4-40GB\" uuid GPU-bbbb pci 00000000:31:00.0 "
             "mem_total_mib 40960 temp 60\n");
  for (int s = 0; s < NSTEPS; s++) {
    fprintf(f, "at %d gpu 0 util %g power_w %g fb_used_mib %d smact %d tensor %d\n", s, util0[s],
            power0[s], 1000 + s, 50 + s, 20 + s);
    fprintf(f, "at %d gpu 1 util %g power_w %g reasons %s\n", s, util1[s], power1[s], reasons1[s]);
  }
  fclose(f);
  mkdir("map", 0755);
  write_str("map/0", "A\n");
  write_str("map/1", "B\n");
}

TEST(watch_derived_figures_match_scenario) {
  write_two_gpu_scenario();
  struct stk_watch_opts o = {.mapping_dir = "map", .price_per_kwh = 0.30, .carbon_g_per_kwh = 400};
  struct stk_watch *w = agent("sc.txt", &o);
  for (int s = 0; s < NSTEPS; s++) CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  /* Interval k (1..NSTEPS-1) is judged by the values read at step k. */
  double busyA = 0, idleA = 0, eA = 0, busyB = 0, idleB = 0, eB = 0, thrB = 0;
  double sw_thermal = 0, power_cap = 0, hw_slow = 0;
  for (int k = 1; k < NSTEPS; k++) {
    busyA += util0[k] / 100;
    idleA += 1 - util0[k] / 100;
    eA += power0[k];
    busyB += util1[k] / 100;
    idleB += 1 - util1[k] / 100;
    eB += power1[k];
    unsigned long r = strtoul(reasons1[k], NULL, 0);
    if (r & 0x20) sw_thermal += 1;
    if (r & 0x4) power_cap += 1;
    if (r & 0x8) hw_slow += 1;
    if (r & 0xfc) thrB += util1[k] / 100;
  }
  CHECK_NEAR(metric(t, "stoker_job_gpu_allocated_seconds_total{hpc_job=\"A\""), NSTEPS - 1);
  CHECK_NEAR(metric(t, "stoker_job_gpu_busy_seconds_total{hpc_job=\"A\""), busyA);
  CHECK_NEAR(metric(t, "stoker_job_gpu_idle_seconds_total{hpc_job=\"A\""), idleA);
  CHECK_NEAR(metric(t, "stoker_job_energy_joules_total{hpc_job=\"A\""), eA);
  CHECK_NEAR(metric(t, "stoker_job_energy_cost_total{hpc_job=\"A\""), eA / 3.6e6 * 0.30);
  CHECK_NEAR(metric(t, "stoker_job_carbon_grams_total{hpc_job=\"A\""), eA / 3.6e6 * 400);
  CHECK_NEAR(metric(t, "stoker_job_gpu_busy_seconds_total{hpc_job=\"B\""), busyB);
  CHECK_NEAR(metric(t, "stoker_job_gpu_idle_seconds_total{hpc_job=\"B\""), idleB);
  CHECK_NEAR(metric(t, "stoker_job_energy_joules_total{hpc_job=\"B\""), eB);
  CHECK_NEAR(metric(t, "stoker_job_gpu_throttled_seconds_total{hpc_job=\"B\",Hostname=\"node1\",reason=\"sw_thermal\"}"), sw_thermal);
  CHECK_NEAR(metric(t, "stoker_job_gpu_throttled_seconds_total{hpc_job=\"B\",Hostname=\"node1\",reason=\"sw_power_cap\"}"), power_cap);
  CHECK_NEAR(metric(t, "stoker_job_gpu_throttled_seconds_total{hpc_job=\"B\",Hostname=\"node1\",reason=\"hw_slowdown\"}"), hw_slow);
  CHECK_NEAR(metric(t, "stoker_job_gpu_throttled_seconds_total{hpc_job=\"A\",Hostname=\"node1\",reason=\"sw_thermal\"}"), 0);
  /* Goodput: no loader, so idle time is "idle"; busy time while throttled
   * is "throttled"; the buckets add up to the allocated time. */
  CHECK_NEAR(metric(t, "stoker_job_goodput_seconds_total{hpc_job=\"B\",Hostname=\"node1\",bucket=\"throttled\"}"), thrB);
  CHECK_NEAR(metric(t, "stoker_job_goodput_seconds_total{hpc_job=\"B\",Hostname=\"node1\",bucket=\"productive\"}"), busyB - thrB);
  CHECK_NEAR(metric(t, "stoker_job_goodput_seconds_total{hpc_job=\"A\",Hostname=\"node1\",bucket=\"idle\"}"), idleA);
  CHECK_NEAR(metric(t, "stoker_job_goodput_seconds_total{hpc_job=\"A\",Hostname=\"node1\",bucket=\"input_stalled\"}"), 0);
  /* Idle streak: A's GPU was idle at the last step only. */
  CHECK_NEAR(metric(t, "stoker_job_idle_streak_seconds{hpc_job=\"A\""), 1);
  free(t);
  stk_watch_close(w);
}

TEST(watch_dcgm_names_and_labels) {
  write_two_gpu_scenario();
  /* GPU 1 cannot read its temperature: the series is absent, not 0. */
  FILE *f = fopen("sc.txt", "a");
  fprintf(f, "at 0 gpu 1 fail nvmlDeviceGetTemperature\n");
  fclose(f);
  struct stk_watch_opts o = {.mapping_dir = "map"};
  struct stk_watch *w = agent("sc.txt", &o);
  for (int s = 0; s < 3; s++) CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  const char *lab0 = "{gpu=\"0\",UUID=\"GPU-aaaa\",pci_bus_id=\"00000000:17:00.0\",device=\"nvidia0\","
                     "modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node1\","
                     "DCGM_FI_DRIVER_VERSION=\"550.54.15\",hpc_job=\"A\"}";
  char want[1024];
  snprintf(want, sizeof want, "DCGM_FI_DEV_GPU_UTIL%s %g\n", lab0, util0[2]);
  CHECK_CONTAINS(t, want);
  snprintf(want, sizeof want, "DCGM_FI_DEV_POWER_USAGE%s %g\n", lab0, power0[2]);
  CHECK_CONTAINS(t, want);
  snprintf(want, sizeof want, "DCGM_FI_DEV_FB_USED%s %d\n", lab0, 1002);
  CHECK_CONTAINS(t, want);
  /* The energy counter in mJ: the fake integrates power over its steps. */
  snprintf(want, sizeof want, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION%s %.0f\n", lab0,
           (power0[0] + power0[1] + power0[2]) * 1000);
  CHECK_CONTAINS(t, want);
  CHECK_CONTAINS(t, "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n");
  snprintf(want, sizeof want, "DCGM_FI_DEV_GPU_TEMP%s 45\n", lab0);
  CHECK_CONTAINS(t, want);
  CHECK(strstr(t, "DCGM_FI_DEV_GPU_TEMP{gpu=\"1\"") == NULL);
  CHECK(metric(t, "stoker_watch_nvml_errors_total{call=\"temp\"}") >= 3);
  /* GPM figures (ratios) on the GPU that has GPM, absent on the other. */
  CHECK_NEAR(metric(t, "DCGM_FI_PROF_SM_ACTIVE{gpu=\"0\""), 0.52);
  CHECK_NEAR(metric(t, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{gpu=\"0\""), 0.22);
  CHECK(isnan(metric(t, "DCGM_FI_PROF_SM_ACTIVE{gpu=\"1\"")));
  CHECK_NEAR(metric(t, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{gpu=\"1\""), 0x20);
  CHECK_NEAR(metric(t, "stoker_watch_nvml_up"), 1);
  free(t);
  stk_watch_close(w);
}

TEST(watch_gpu_lost_and_xid) {
  write_str("sc.txt", "gpu 0 uuid GPU-aaaa\ngpu 1 uuid GPU-bbbb\n"
                      "at 0 gpu 0 util 100 power_w 300\nat 0 gpu 1 util 100 power_w 300\n"
                      "at 2 gpu 0 xid 79\nat 3 gpu 1 lost\n");
  mkdir("map", 0755);
  write_str("map/0", "A\n");
  write_str("map/1", "B\n");
  struct stk_watch_opts o = {.mapping_dir = "map"};
  struct stk_watch *w = agent("sc.txt", &o);
  for (int s = 0; s < 6; s++) CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  CHECK(isnan(metric(t, "DCGM_FI_DEV_GPU_UTIL{gpu=\"1\"")));
  CHECK_NEAR(metric(t, "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\""), 100);
  CHECK_NEAR(metric(t, "stoker_gpu_lost{gpu=\"1\",UUID=\"GPU-bbbb\"}"), 1);
  CHECK_NEAR(metric(t, "stoker_gpu_lost{gpu=\"0\",UUID=\"GPU-aaaa\"}"), 0);
  /* B got its GPU for intervals 1 and 2 only; A for all five. */
  CHECK_NEAR(metric(t, "stoker_job_gpu_allocated_seconds_total{hpc_job=\"B\""), 2);
  CHECK_NEAR(metric(t, "stoker_job_gpu_allocated_seconds_total{hpc_job=\"A\""), 5);
  CHECK_NEAR(metric(t, "DCGM_FI_DEV_XID_ERRORS{gpu=\"0\""), 79);
  CHECK_NEAR(metric(t, "stoker_gpu_xid_errors_total{gpu=\"0\""), 1);
  free(t);
  stk_watch_close(w);
}

/* dcgm-exporter's XID series: 0 with err_code "0" / err_msg "No Error"
 * before the first XID (so changes() sees the first one), then the last
 * XID with its code and dcgm-exporter's message for it. */
TEST(watch_xid_zero_then_err_labels) {
  write_str("sc.txt", "driver 550.54.15\ngpu 0 uuid GPU-aaaa pci 00000000:17:00.0 name H100\n"
                      "at 0 gpu 0 util 10\nat 2 gpu 0 xid 79\nat 4 gpu 0 xid 48\n");
  struct stk_watch *w = agent("sc.txt", NULL);
  const char *lab = "DCGM_FI_DEV_XID_ERRORS{gpu=\"0\",UUID=\"GPU-aaaa\",pci_bus_id=\"00000000:17:00.0\","
                    "device=\"nvidia0\",modelName=\"H100\",Hostname=\"node1\","
                    "DCGM_FI_DRIVER_VERSION=\"550.54.15\",";
  char want[1024];
  CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  snprintf(want, sizeof want, "%serr_code=\"0\",err_msg=\"No Error\"} 0\n", lab);
  CHECK_CONTAINS(t, want);
  free(t);
  for (int s = 0; s < 2; s++) CHECK_OK(stk_watch_sample(w));
  t = expo(w);
  snprintf(want, sizeof want, "%serr_code=\"79\",err_msg=\"GPU has fallen off the bus\"} 79\n", lab);
  CHECK_CONTAINS(t, want);
  CHECK(strstr(t, "err_code=\"0\"") == NULL);
  free(t);
  for (int s = 0; s < 2; s++) CHECK_OK(stk_watch_sample(w));
  t = expo(w);
  snprintf(want, sizeof want, "%serr_code=\"48\",err_msg=\"Double Bit ECC Error\"} 48\n", lab);
  CHECK_CONTAINS(t, want);
  CHECK_NEAR(metric(t, "stoker_gpu_xid_errors_total{gpu=\"0\""), 2);
  free(t);
  stk_watch_close(w);
}

/* Violation counters in ns, as DCGM's (NVML's violationTime, unscaled). */
TEST(watch_violation_counters_in_ns) {
  write_str("sc.txt", "gpu 0 uuid GPU-aaaa\n"
                      "at 0 gpu 0 viol_power_ns 123456789 viol_thermal_ns 5000\n");
  struct stk_watch *w = agent("sc.txt", NULL);
  CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  CHECK_NEAR(metric(t, "DCGM_FI_DEV_POWER_VIOLATION{gpu=\"0\""), 123456789);
  CHECK_NEAR(metric(t, "DCGM_FI_DEV_THERMAL_VIOLATION{gpu=\"0\""), 5000);
  free(t);
  stk_watch_close(w);
}

/* FB_USED without the driver's reserved memory (NVML v2, as DCGM), and
 * FB_RESERVED; a driver without v2 falls back to v1 (used with reserved,
 * no FB_RESERVED series). An idle A100 40GB: 8 MiB used, 892 reserved. */
TEST(watch_fb_used_excludes_reserved) {
  write_str("sc.txt", "gpu 0 uuid GPU-aaaa mem_total_mib 40960 fb_used_mib 8 fb_reserved_mib 892\n"
                      "gpu 1 uuid GPU-bbbb mem_total_mib 40960 fb_used_mib 8 fb_reserved_mib 892\n"
                      "at 0 gpu 1 fail nvmlDeviceGetMemoryInfo_v2\n");
  struct stk_watch *w = agent("sc.txt", NULL);
  CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  CHECK_NEAR(metric(t, "DCGM_FI_DEV_FB_USED{gpu=\"0\""), 8);
  CHECK_NEAR(metric(t, "DCGM_FI_DEV_FB_RESERVED{gpu=\"0\""), 892);
  CHECK_NEAR(metric(t, "DCGM_FI_DEV_FB_FREE{gpu=\"0\""), 40960 - 900);
  CHECK_CONTAINS(t, "# TYPE DCGM_FI_DEV_FB_RESERVED gauge\n");
  CHECK_NEAR(metric(t, "DCGM_FI_DEV_FB_USED{gpu=\"1\""), 900);
  CHECK(isnan(metric(t, "DCGM_FI_DEV_FB_RESERVED{gpu=\"1\"")));
  CHECK_NEAR(metric(t, "DCGM_FI_DEV_FB_FREE{gpu=\"1\""), 40960 - 900);
  CHECK_NEAR(metric(t, "stoker_watch_nvml_errors_total{call=\"memory\"}"), 0);
  free(t);
  stk_watch_close(w);
}

/* stoker_build_info, as exporters have: 1, labelled with the version. */
TEST(watch_build_info) {
  write_str("sc.txt", "gpu 0\n");
  struct stk_watch *w = agent("sc.txt", NULL);
  CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  char want[256];
  snprintf(want, sizeof want, "stoker_build_info{version=\"%s\",commit=\"", stk_version());
  CHECK_CONTAINS(t, want);
  CHECK_CONTAINS(t, "# TYPE stoker_build_info gauge\n");
  CHECK_CONTAINS(t, ",flags=\"");
  CHECK_NEAR(metric(t, "stoker_build_info{"), 1);
  free(t);
  stk_watch_close(w);
}

TEST(watch_nvml_init_fails) {
  write_str("sc.txt", "init_fail 9\ngpu 0\n");
  struct stk_watch *w = agent("sc.txt", NULL);
  CHECK_CONTAINS(stk_watch_nvml_status(w), "NVML did not initialize");
  CHECK_CONTAINS(stk_watch_nvml_status(w), "Driver Not Loaded");
  CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  CHECK_NEAR(metric(t, "stoker_watch_nvml_up"), 0);
  free(t);
  stk_watch_close(w);
}

/* This process's open descriptors, counted in-process: a shell's `ls`
 * raced popen(), which may not yet have closed its end of the pipe. */
static int count_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  CHECK(d != NULL);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n - 1; /* not the directory's own */
}

/* Processes come and go: a process's series end with it; a job seen only
 * through a process that left is forgotten after the TTL. */
TEST(watch_processes_come_and_go) {
  write_str("sc.txt", "gpu 0\nat 0 gpu 0 util 50 proc 301 used_mib 10\nat 1 gpu 0 proc 302 used_mib 20\n"
                      "at 3 gpu 0 proc_end 301\nat 5 gpu 0 proc_end 302\n");
  /* Their /proc entries (the agent keeps each stat file open while the
   * process is listed, and must close it when it leaves). */
  mkdir("proc", 0755);
  mkdir("proc/301", 0755);
  mkdir("proc/302", 0755);
  write_str("proc/301/stat", "301 (a) S 1 1 1 0 -1 0 0 0 0 0 10 0 0 0 20 0 1 0 500 0 0\n");
  write_str("proc/302/stat", "302 (b) S 1 1 1 0 -1 0 0 0 0 0 20 0 0 0 20 0 1 0 600 0 0\n");
  struct stk_watch_opts o = {.job_ttl_s = 2, .proc_root = "proc"};
  struct stk_watch *w = agent("sc.txt", &o);
  int fds0 = count_fds();
  for (int s = 0; s < 3; s++) CHECK_OK(stk_watch_sample(w));
  CHECK_EQ(count_fds(), fds0 + 2);
  char *t = expo(w);
  CHECK_NEAR(metric(t, "stoker_gpu_process_memory_bytes{gpu=\"0\",UUID=\"GPU-fake-0000\",pid=\"301\""), 10485760);
  CHECK_NEAR(metric(t, "stoker_gpu_process_memory_bytes{gpu=\"0\",UUID=\"GPU-fake-0000\",pid=\"302\""), 20971520);
  /* Two processes, two jobs (their own), each charged half the GPU. */
  CHECK_NEAR(metric(t, "stoker_job_gpu_allocated_seconds_total{hpc_job=\"pid-302\""), 1.0);
  free(t);
  for (int s = 3; s < 5; s++) CHECK_OK(stk_watch_sample(w));
  t = expo(w);
  CHECK(isnan(metric(t, "stoker_gpu_process_memory_bytes{gpu=\"0\",UUID=\"GPU-fake-0000\",pid=\"301\"")));
  CHECK_NEAR(metric(t, "stoker_job_gpu_allocated_seconds_total{hpc_job=\"pid-302\""), 3.0);
  free(t);
  for (int s = 5; s < 9; s++) CHECK_OK(stk_watch_sample(w));
  t = expo(w);
  CHECK(strstr(t, "hpc_job=\"pid-301\"") == NULL);
  CHECK(strstr(t, "hpc_job=\"pid-302\"") == NULL);
  free(t);
  CHECK_EQ(count_fds(), fds0);
  stk_watch_close(w);
}

TEST(watch_nvml_missing_serves_host_metrics) {
  struct stk_watch_opts o = {.nvml_lib = "./no-such-libnvidia-ml.so.1"};
  struct stk_watch *w = agent("none.txt", &o);
  CHECK_CONTAINS(stk_watch_nvml_status(w), "NVML not loaded");
  CHECK_OK(stk_watch_sample(w));
  CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  CHECK_NEAR(metric(t, "stoker_watch_nvml_up"), 0);
  CHECK(strstr(t, "DCGM_FI_") == NULL);
  CHECK(metric(t, "stoker_host_memory_total_bytes") > 0);
  free(t);
  stk_watch_close(w);
}

/* A fake /proc: processes whose cgroups name a Slurm job and a pod. */
TEST(watch_jobs_from_cgroups) {
  write_str("sc.txt", "gpu 0\ngpu 1\n"
                      "at 0 gpu 0 util 40 power_w 100 proc 101 used_mib 100 sm 40\n"
                      "at 0 gpu 1 util 0 power_w 50 proc 202 used_mib 100\n");
  mkdir("proc", 0755);
  mkdir("proc/101", 0755);
  mkdir("proc/202", 0755);
  write_str("proc/101/cgroup", "0::/system.slice/slurmstepd.scope/job_4711/step_0/user/task_0\n");
  write_str("proc/202/cgroup",
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
            "0a1b2c3d_4e5f_6789_abcd_ef0123456789.slice/cri-containerd-1234.scope\n");
  write_str("proc/101/stat", "101 (python3) S 1 101 101 0 -1 4194560 0 0 0 0 250 50 0 0 20 0 1 0 1000 0 0\n");
  struct stk_watch_opts o = {.proc_root = "proc"};
  struct stk_watch *w = agent("sc.txt", &o);
  for (int s = 0; s < 3; s++) CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  CHECK_NEAR(metric(t, "stoker_job_gpu_busy_seconds_total{hpc_job=\"4711\""), 0.8);
  CHECK_NEAR(metric(t, "stoker_job_gpu_idle_seconds_total{hpc_job=\"pod-0a1b2c3d-4e5f-6789-abcd-ef0123456789\""), 2);
  CHECK_CONTAINS(t, "hpc_job=\"4711\"}");
  /* Process CPU from its stat (300 ticks), absent where stat is. */
  double ticks = (double)sysconf(_SC_CLK_TCK);
  CHECK_NEAR(metric(t, "stoker_process_cpu_seconds_total{gpu=\"0\",UUID=\"GPU-fake-0000\",pid=\"101\""), 300 / ticks);
  CHECK(isnan(metric(t, "stoker_process_cpu_seconds_total{gpu=\"1\"")));
  CHECK_NEAR(metric(t, "stoker_gpu_process_sm_util_ratio{gpu=\"0\",UUID=\"GPU-fake-0000\",pid=\"101\""), 0.4);
  /* No /proc/stat in the fake root: host CPU is absent, never 0. */
  CHECK(strstr(t, "stoker_host_cpu_seconds_total") == NULL);
  free(t);
  stk_watch_close(w);
}

TEST(watch_mig_instances) {
  write_str("sc.txt", "gpu 0 name \"NVIDIA H100 80GB HBM3\"\n"
                      "at 0 gpu 0 util 30 mig 1 1g.10gb 9856 1024 mig 2 3g.40gb 40192 8000\n");
  mkdir("map", 0755);
  write_str("map/0.1", "m1\n");
  write_str("map/0.2", "m2\n");
  struct stk_watch_opts o = {.mapping_dir = "map"};
  struct stk_watch *w = agent("sc.txt", &o);
  for (int s = 0; s < 2; s++) CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  CHECK_CONTAINS(t, "GPU_I_PROFILE=\"1g.10gb\",GPU_I_ID=\"1\",Hostname=\"node1\",DCGM_FI_DRIVER_VERSION=\"999.99\",hpc_job=\"m1\"} 1024\n");
  CHECK_CONTAINS(t, "GPU_I_PROFILE=\"3g.40gb\",GPU_I_ID=\"2\",Hostname=\"node1\",DCGM_FI_DRIVER_VERSION=\"999.99\",hpc_job=\"m2\"} 8000\n");
  /* Each instance's job gets its compute slices' share of the GPU. */
  CHECK_NEAR(metric(t, "stoker_job_gpu_allocated_seconds_total{hpc_job=\"m1\""), 1.0 / 7);
  CHECK_NEAR(metric(t, "stoker_job_gpu_allocated_seconds_total{hpc_job=\"m2\""), 3.0 / 7);
  free(t);
  stk_watch_close(w);
}

TEST(watch_malformed_mapping_file) {
  write_str("sc.txt", "gpu 0\ngpu 1\nat 0 gpu 0 util 10\nat 0 gpu 1 util 20\n");
  mkdir("map", 0755);
  test_write_file("map/0", "job\x01\xff\n", 6);
  write_str("map/1", "good-job\n");
  write_str("map/notes.txt", "ignored: not a GPU index\n");
  struct stk_watch_opts o = {.mapping_dir = "map"};
  struct stk_watch *w = agent("sc.txt", &o);
  for (int s = 0; s < 3; s++) CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  CHECK(metric(t, "stoker_watch_mapping_errors_total") >= 1);
  CHECK_NEAR(metric(t, "stoker_job_gpu_allocated_seconds_total{hpc_job=\"good-job\""), 2);
  CHECK(strstr(t, "job\x01") == NULL);
  free(t);
  stk_watch_close(w);
}


TEST(watch_reaper_acts_once_and_spares_exempt) {
  write_str("sc.txt", "gpu 0\ngpu 1\ngpu 2\nat 0 gpu 0 util 0\nat 0 gpu 1 util 0\nat 0 gpu 2 util 5\n");
  mkdir("map", 0755);
  write_str("map/0", "idle-job\n");
  write_str("map/1", "keep-me\n");
  write_str("map/2", "busy-job\n");
  const char *ex[] = {"keep-*", NULL};
  struct stk_watch_opts o = {.mapping_dir = "map", .interval_s = 60, .reap_after_s = 300,
                             .reap_warn_s = 120, .reap_command = "echo {job} >> reaped.txt",
                             .reap_warn_command = "echo {job} {minutes} >> warned.txt",
                             .reap_exempt = ex};
  struct stk_watch *w = agent("sc.txt", &o);
  for (int s = 0; s < 10; s++) CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  CHECK_NEAR(metric(t, "stoker_reaper_actions_total{action=\"act\"}"), 1);
  CHECK_NEAR(metric(t, "stoker_reaper_actions_total{action=\"warn\"}"), 1);
  CHECK_NEAR(metric(t, "stoker_job_idle_streak_seconds{hpc_job=\"idle-job\""), 540);
  CHECK_NEAR(metric(t, "stoker_job_idle_streak_seconds{hpc_job=\"busy-job\""), 0);
  free(t);
  stk_watch_close(w); /* waits for the command */
  size_t n;
  char *r = (char *)test_read_file("reaped.txt", &n);
  CHECK(r != NULL);
  CHECK_STR(r, "idle-job\n");
  free(r);
  r = (char *)test_read_file("warned.txt", &n);
  CHECK(r != NULL);
  CHECK_STR(r, "idle-job 2\n");
  free(r);
}

TEST(watch_json_once) {
  write_two_gpu_scenario();
  char *out = NULL;
  int rc = test_sh(&out, "FAKE_NVML_SCENARIO=sc.txt %s watch --nvml %s --fast-time --once --json "
                         "--mapping-dir map --runtime-dir . -q | /usr/bin/python3 -c 'import json,sys; "
                         "d=json.load(sys.stdin); j={x[\"job\"]: x for x in d[\"jobs\"]}; "
                         "print(d[\"samples\"], len(d[\"gpus\"]), float(j[\"A\"][\"gpu_allocated_s\"]), "
                         "float(j[\"A\"][\"goodput_s\"][\"productive\"]), int(d[\"gpus\"][1][\"util_pct\"]))'",
                   test_stoker_bin(), fake_nvml());
  CHECK_MSG(rc == 0, "%s", out);
  CHECK_STR(out, "2 2 1.0 1.0 90\n");
  free(out);
}


TEST(watch_host_metrics_from_proc) {
  fake_proc_host(1000, 3000, 0);
  struct stk_watch_opts o = {.nvml_lib = "none", .proc_root = "proc"};
  struct stk_watch *w = agent("none.txt", &o);
  CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  CHECK(isnan(metric(t, "stoker_host_cpu_busy_ratio"))); /* one reading: no ratio yet */
  free(t);
  fake_proc_host(1300, 3600, 100); /* +300 busy, +600 idle, +100 steal */
  CHECK_OK(stk_watch_sample(w));
  t = expo(w);
  CHECK_NEAR(metric(t, "stoker_host_cpu_busy_ratio"), 0.3);
  CHECK_NEAR(metric(t, "stoker_host_cpu_steal_ratio"), 0.1);
  double tick = (double)sysconf(_SC_CLK_TCK);
  CHECK_NEAR(metric(t, "stoker_host_cpu_seconds_total{mode=\"busy\"}"), 1300 / tick);
  CHECK_NEAR(metric(t, "stoker_host_memory_total_bytes"), 1024000);
  CHECK_NEAR(metric(t, "stoker_host_memory_available_bytes"), 256000);
  CHECK_NEAR(metric(t, "stoker_host_pressure_ratio{resource=\"io\",kind=\"some\"}"), 0.125);
  CHECK_NEAR(metric(t, "stoker_host_pressure_stall_seconds_total{resource=\"io\",kind=\"full\"}"), 1);
  CHECK(isnan(metric(t, "stoker_host_pressure_ratio{resource=\"cpu\"")));
  free(t);
  stk_watch_close(w);
}

/* Every metric the shipped dashboard and rules query is one the agent
 * exports (the test names each missing one). */
static void check_names_in(const char *path, const char *text) {
  size_t n;
  char *f = (char *)test_read_file(path, &n);
  CHECK_MSG(f != NULL, "cannot read %s", path);
  int found = 0;
  for (char *p = f; *p; p++) {
    int dcgm = !strncmp(p, "DCGM_FI_", 8), own = !strncmp(p, "stoker_", 7);
    if (!dcgm && !own) continue;
    if (p > f && (p[-1] == '_' || (p[-1] >= 'a' && p[-1] <= 'z') || (p[-1] >= 'A' && p[-1] <= 'Z'))) continue;
    char name[128];
    size_t l = 0;
    while (l < sizeof name - 1 && (p[l] == '_' || (p[l] >= 'a' && p[l] <= 'z') ||
                                   (p[l] >= 'A' && p[l] <= 'Z') || (p[l] >= '0' && p[l] <= '9')))
      name[l] = p[l], l++;
    name[l] = 0;
    char want[160];
    snprintf(want, sizeof want, "# TYPE %s ", name);
    CHECK_MSG(strstr(text, want) != NULL, "%s queries %s, which the agent does not export", path, name);
    found++;
    p += l - 1;
  }
  CHECK_MSG(found >= 5, "%s: only %d metric names found", path, found);
  free(f);
}

TEST(watch_dashboard_and_rules_use_exported_metrics) {
  const char *root = getenv("STOKER_ROOT");
  if (!root) SKIP("STOKER_ROOT is not set (run through make test)");
  FILE *f = fopen("sc.txt", "w");
  fprintf(f, "gpu 0 name \"NVIDIA H100 80GB HBM3\" gpm 1\n"
             "at 0 gpu 0 util 50 power_w 300 temp 50 sm_clock 1980 mem_clock 2619 fb_used_mib 10 "
             "smact 40 tensor 20 dram 10 gr 45 reasons 0x20 viol_power_ns 1000 viol_thermal_ns 2000 nvlinks 4 "
             "proc %d used_mib 100 sm 50\nat 1 gpu 0 xid 13\n", (int)getpid());
  fclose(f);
  mkdir("map", 0755);
  write_str("map/0", "J\n");
  mkdir("rt", 0755);
  struct stk_pub *p = fake_pub("rt", 100);
  struct stk_watch_opts o = {.mapping_dir = "map", .runtime_dir = "rt", .price_per_kwh = 0.2,
                             .carbon_g_per_kwh = 300, .proc_root = "proc"};
  struct stk_watch *w = agent("sc.txt", &o);
  for (int s = 0; s < 3; s++) {
    fake_proc_host(1000 + 100 * (unsigned long)s, 3000 + 100 * (unsigned long)s, (unsigned long)s);
    CHECK_OK(stk_watch_sample(w));
  }
  char *t = expo(w);
  char path[4096];
  snprintf(path, sizeof path, "%s/deploy/grafana/stoker-watch-dashboard.json", root);
  check_names_in(path, t);
  snprintf(path, sizeof path, "%s/deploy/prometheus/stoker-rules.yml", root);
  check_names_in(path, t);
  free(t);
  stk_watch_close(w);
  munmap(p, STK_PUB_SIZE);
}
