/* stoker watch's attribution and series in a real fleet (issue 21, §2 and
 * §3): MIG GPUs as dcgm-exporter's default device mode shows them (one
 * series set per GPU instance, none for the whole GPU; utilization from
 * the instance's GPM where NVML has it, unknown where not: NVML gives
 * none with MIG on, and the fake NVML refuses it as the driver does);
 * hpc_job only where a mapping says so; any number of jobs per GPU and
 * per instance; the software power cap is not "throttled"; two loaders in
 * one process are two series. */
#include "test_watch.h"

/* Lines of text that start with prefix. */
static int count_lines(const char *text, const char *prefix) {
  int n = 0;
  size_t l = strlen(prefix);
  for (const char *p = text; p && *p;) {
    if (!strncmp(p, prefix, l)) n++;
    p = strchr(p, '\n');
    if (p) p++;
  }
  return n;
}

/* An H100 cut into seven 1g instances running nine jobs (three share
 * instance 1), and an A100 whose one 7g instance has no GPM. */
TEST(watch_mig_seven_instances_nine_jobs) {
  FILE *f = fopen("sc.txt", "w");
  CHECK(f != NULL);
  fprintf(f, "gpu 0 name \"NVIDIA H100 80GB HBM3\" uuid GPU-aaaa gpm 1 power_w 350 temp 40 util 77\n"
             "gpu 1 name \"NVIDIA A100-SXM4-40GB\" uuid GPU-bbbb power_w 100 util 55\n"
             "at 0 gpu 1 mig 1 7g.40gb 40192 2000\n");
  for (int i = 1; i <= 7; i++)
    fprintf(f, "at 0 gpu 0 mig %d 1g.10gb 9856 %d mig_gr %d %d\n", i, 100 * i, i, 10 * i);
  fclose(f);
  mkdir("map", 0755);
  write_str("map/0.1", "a\nb\nc\n");
  for (int i = 2; i <= 7; i++) {
    char path[32], job[16];
    snprintf(path, sizeof path, "map/0.%d", i);
    snprintf(job, sizeof job, "j%d\n", i);
    write_str(path, job);
  }
  write_str("map/1.1", "x\n");
  struct stk_watch_opts o = {.mapping_dir = "map"};
  struct stk_watch *w = agent("sc.txt", &o);
  for (int s = 0; s < 3; s++) CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  /* No whole-GPU series beside the instances' (dcgm-exporter's flex mode
   * shows a MIG GPU as its instances only): 9 series for 7 instances. */
  CHECK_EQ(count_lines(t, "DCGM_FI_DEV_POWER_USAGE{gpu=\"0\""), 9);
  CHECK_EQ(count_lines(t, "DCGM_FI_DEV_POWER_USAGE{gpu=\"0\",UUID=\"GPU-aaaa\",pci_bus_id=\"00000000:10:00.0\","
                          "device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\",GPU_I_PROFILE=\"1g.10gb\","), 9);
  CHECK_CONTAINS(t, "DCGM_FI_DEV_POWER_USAGE{gpu=\"0\",UUID=\"GPU-aaaa\",pci_bus_id=\"00000000:10:00.0\","
                    "device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\",GPU_I_PROFILE=\"1g.10gb\","
                    "GPU_I_ID=\"1\",Hostname=\"node1\",DCGM_FI_DRIVER_VERSION=\"999.99\",hpc_job=\"b\"} 350\n");
  /* NVML gives no utilization with MIG on: no GPU_UTIL, as dcgm-exporter;
   * the instance's graphics activity from its GPM sample instead. */
  CHECK(strstr(t, "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"") == NULL);
  CHECK(strstr(t, "DCGM_FI_DEV_GPU_UTIL{gpu=\"1\"") == NULL);
  CHECK_NEAR(metric(t, "DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu=\"0\",UUID=\"GPU-aaaa\",pci_bus_id=\"00000000:10:00.0\","
                       "device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\",GPU_I_PROFILE=\"1g.10gb\",GPU_I_ID=\"3\","), 0.3);
  CHECK_NEAR(metric(t, "DCGM_FI_DEV_FB_USED{gpu=\"0\",UUID=\"GPU-aaaa\",pci_bus_id=\"00000000:10:00.0\","
                       "device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\",GPU_I_PROFILE=\"1g.10gb\",GPU_I_ID=\"5\","), 500);
  /* Time: each instance is 1/7 of the GPU, shared by its jobs; utilization
   * is the instance's graphics activity. Two intervals. */
  CHECK_NEAR(metric(t, "stoker_job_gpu_allocated_seconds_total{hpc_job=\"a\""), 2.0 / 21);
  CHECK_NEAR(metric(t, "stoker_job_gpu_busy_seconds_total{hpc_job=\"a\""), 2.0 / 21 * 0.1);
  CHECK_NEAR(metric(t, "stoker_job_gpu_allocated_seconds_total{hpc_job=\"j7\""), 2.0 / 7);
  CHECK_NEAR(metric(t, "stoker_job_gpu_busy_seconds_total{hpc_job=\"j7\""), 2.0 / 7 * 0.7);
  CHECK_NEAR(metric(t, "stoker_job_energy_joules_total{hpc_job=\"j7\""), 2 * 350.0 / 7);
  double sum = 0;
  const char *jobs[9] = {"a", "b", "c", "j2", "j3", "j4", "j5", "j6", "j7"};
  for (int k = 0; k < 9; k++) {
    char pre[96];
    snprintf(pre, sizeof pre, "stoker_job_gpu_allocated_seconds_total{hpc_job=\"%s\"", jobs[k]);
    sum += metric(t, pre);
  }
  CHECK_NEAR(sum, 2);
  /* The A100's instance has no GPM: its time is unknown, not idle. */
  CHECK_NEAR(metric(t, "stoker_job_goodput_seconds_total{hpc_job=\"x\",Hostname=\"node1\",bucket=\"unknown\"}"), 2);
  CHECK_NEAR(metric(t, "stoker_job_gpu_idle_seconds_total{hpc_job=\"x\""), 0);
  free(t);
  /* stoker top shows a MIG GPU's utilization as its instances' mean
   * (10..70 %, equal slices), the A100's as unknown. */
  struct stk_watch_view v;
  CHECK_OK(stk_watch_view(w, &v));
  CHECK_NEAR(v.gpus[0].util, 40);
  CHECK(isnan(v.gpus[1].util));
  stk_watch_view_free(&v);
  stk_watch_close(w);
}

/* With no mapping directory, the device series carry no hpc_job (a
 * "pid-N" job would rename them at each process start), and two
 * processes on one GPU do not duplicate them. The jobs still get their
 * time, each its share. */
TEST(watch_no_mapping_no_job_label_on_device_series) {
  write_str("sc.txt", "gpu 0 uuid GPU-aaaa util 60 power_w 200\n"
                      "at 0 gpu 0 proc 301 used_mib 10 proc 302 used_mib 20\n");
  struct stk_watch *w = agent("sc.txt", NULL);
  for (int s = 0; s < 3; s++) CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  CHECK_EQ(count_lines(t, "DCGM_FI_DEV_GPU_UTIL{"), 1);
  CHECK_EQ(count_lines(t, "DCGM_FI_DEV_POWER_USAGE{"), 1);
  for (const char *p = strstr(t, "DCGM_FI_"); p; p = strstr(p + 1, "\nDCGM_FI_")) {
    const char *nl = strchr(p + 1, '\n');
    const char *hj = strstr(p, "hpc_job=");
    CHECK_MSG(!hj || (nl && hj > nl), "a device series with hpc_job: %.200s", p);
  }
  CHECK_NEAR(metric(t, "stoker_job_gpu_allocated_seconds_total{hpc_job=\"pid-301\""), 1);
  CHECK_NEAR(metric(t, "stoker_job_gpu_busy_seconds_total{hpc_job=\"pid-302\""), 0.6);
  free(t);
  stk_watch_close(w);
}

/* Five jobs in one mapping file (accepted), and six time-sliced processes
 * on another GPU: every job gets its share of the time and energy. */
TEST(watch_jobs_beyond_the_fourth) {
  write_str("sc.txt", "gpu 0 uuid GPU-aaaa util 50 power_w 100\ngpu 1 uuid GPU-bbbb util 30 power_w 60\n"
                      "at 0 gpu 1 proc 401 proc 402 proc 403 proc 404 proc 405 proc 406\n");
  mkdir("map", 0755);
  write_str("map/0", "j1\nj2\nj3\nj4\nj5\n");
  struct stk_watch_opts o = {.mapping_dir = "map"};
  struct stk_watch *w = agent("sc.txt", &o);
  for (int s = 0; s < 4; s++) CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  CHECK_NEAR(metric(t, "stoker_watch_mapping_errors_total"), 0);
  CHECK_NEAR(metric(t, "stoker_job_gpu_allocated_seconds_total{hpc_job=\"j5\""), 3.0 / 5);
  CHECK_NEAR(metric(t, "stoker_job_energy_joules_total{hpc_job=\"j5\""), 3 * 100.0 / 5);
  CHECK_EQ(count_lines(t, "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\""), 5);
  CHECK_CONTAINS(t, "hpc_job=\"j5\"} 50\n");
  CHECK_NEAR(metric(t, "stoker_job_gpu_allocated_seconds_total{hpc_job=\"pid-406\""), 3.0 / 6);
  CHECK_NEAR(metric(t, "stoker_job_gpu_busy_seconds_total{hpc_job=\"pid-405\""), 3.0 / 6 * 0.3);
  CHECK_NEAR(metric(t, "stoker_job_energy_joules_total{hpc_job=\"pid-401\""), 3 * 60.0 / 6);
  free(t);
  stk_watch_close(w);
}

/* A GPU at full load held at its power limit (SW power cap, NVML's 0x4)
 * is productive: the cap is counted under its own reason, not as
 * throttled time; a thermal slowdown still is. */
TEST(watch_power_cap_is_not_throttled) {
  write_str("sc.txt", "gpu 0 util 100 power_w 700 reasons 0x4\ngpu 1 util 100 power_w 700 reasons 0x24\n");
  mkdir("map", 0755);
  write_str("map/0", "capped\n");
  write_str("map/1", "hot\n");
  struct stk_watch_opts o = {.mapping_dir = "map"};
  struct stk_watch *w = agent("sc.txt", &o);
  for (int s = 0; s < 5; s++) CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  CHECK_NEAR(metric(t, "stoker_job_goodput_seconds_total{hpc_job=\"capped\",Hostname=\"node1\",bucket=\"productive\"}"), 4);
  CHECK_NEAR(metric(t, "stoker_job_goodput_seconds_total{hpc_job=\"capped\",Hostname=\"node1\",bucket=\"throttled\"}"), 0);
  CHECK_NEAR(metric(t, "stoker_job_gpu_throttled_seconds_total{hpc_job=\"capped\",Hostname=\"node1\",reason=\"sw_power_cap\"}"), 4);
  CHECK_NEAR(metric(t, "stoker_job_goodput_seconds_total{hpc_job=\"hot\",Hostname=\"node1\",bucket=\"throttled\"}"), 4);
  free(t);
  struct stk_watch_view v;
  CHECK_OK(stk_watch_view(w, &v));
  CHECK_EQ(v.gpus[0].throttled, 0);
  CHECK_EQ(v.gpus[1].throttled, 1);
  stk_watch_view_free(&v);
  stk_watch_close(w);
}

/* Two loaders in one process (two files, loader-PID-1 and -2) are two
 * series, told apart by the file's number: identical series would be
 * dropped by Prometheus. */
TEST(watch_two_loaders_in_one_process) {
  mkdir("rt", 0755);
  struct stk_pub *p1 = fake_pub_n("rt", 1, 1000000000ull);
  struct stk_pub *p2 = fake_pub_n("rt", 2, 3000000000ull);
  struct stk_watch_opts o = {.nvml_lib = "none", .runtime_dir = "rt"};
  struct stk_watch *w = agent("none.txt", &o);
  CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  char pre[128];
  snprintf(pre, sizeof pre, "stoker_loader_consumer_wait_seconds_total{pid=\"%d\",loader=\"1\",", (int)getpid());
  CHECK_NEAR(metric(t, pre), 1);
  snprintf(pre, sizeof pre, "stoker_loader_consumer_wait_seconds_total{pid=\"%d\",loader=\"2\",", (int)getpid());
  CHECK_NEAR(metric(t, pre), 3);
  snprintf(pre, sizeof pre, "stoker_loader_stage_busy_seconds_total{pid=\"%d\",loader=\"2\",stage=\"read\",", (int)getpid());
  CHECK_NEAR(metric(t, pre), 0);
  free(t);
  stk_watch_close(w);
  munmap(p1, STK_PUB_SIZE);
  munmap(p2, STK_PUB_SIZE);
}

/* Cardinality switches for a large fleet: no per-process series, and no
 * hpc_job on device series (one per GPU whatever its jobs); the per-job
 * figures keep their jobs. */
TEST(watch_cardinality_switches) {
  write_str("sc.txt", "gpu 0 uuid GPU-aaaa util 50\nat 0 gpu 0 proc 301 used_mib 10 sm 40\n");
  mkdir("map", 0755);
  write_str("map/0", "j1\nj2\nj3\n");
  struct stk_watch_opts o = {.mapping_dir = "map"};
  struct stk_watch *w = agent("sc.txt", &o);
  for (int s = 0; s < 2; s++) CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  CHECK_EQ(count_lines(t, "DCGM_FI_DEV_GPU_UTIL{"), 3);
  CHECK_EQ(count_lines(t, "stoker_gpu_process_memory_bytes{"), 1);
  free(t);
  stk_watch_close(w);
  o = (struct stk_watch_opts){.mapping_dir = "map", .no_process_series = 1, .no_job_labels = 1};
  w = agent("sc.txt", &o);
  for (int s = 0; s < 2; s++) CHECK_OK(stk_watch_sample(w));
  t = expo(w);
  CHECK_EQ(count_lines(t, "DCGM_FI_DEV_GPU_UTIL{"), 1);
  CHECK(strstr(t, "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-aaaa\"") != NULL);
  CHECK(strstr(t, "stoker_gpu_process_") == NULL);
  CHECK(strstr(t, "stoker_process_cpu_seconds_total") == NULL);
  CHECK_NEAR(metric(t, "stoker_job_gpu_allocated_seconds_total{hpc_job=\"j2\""), 1.0 / 3);
  free(t);
  stk_watch_close(w);
}

/* A MIG GPU without a mapping: each process is charged on the instance it
 * runs in (NVML's gpuInstanceId), time-sliced processes sharing it. */
TEST(watch_mig_processes_without_mapping) {
  write_str("sc.txt", "gpu 0 name \"NVIDIA H100 80GB HBM3\" gpm 1 power_w 140\n"
                      "at 0 gpu 0 mig 1 3g.40gb 40192 1000 mig_gr 1 60 mig 2 4g.40gb 40192 0 mig_gr 2 0\n"
                      "at 0 gpu 0 proc 501 gi 1 proc 502 gi 1 proc 503 gi 2\n");
  struct stk_watch *w = agent("sc.txt", NULL);
  for (int s = 0; s < 3; s++) CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  CHECK_NEAR(metric(t, "stoker_job_gpu_allocated_seconds_total{hpc_job=\"pid-501\""), 2 * 3.0 / 7 / 2);
  CHECK_NEAR(metric(t, "stoker_job_gpu_busy_seconds_total{hpc_job=\"pid-502\""), 2 * 3.0 / 7 / 2 * 0.6);
  CHECK_NEAR(metric(t, "stoker_job_gpu_idle_seconds_total{hpc_job=\"pid-503\""), 2 * 4.0 / 7);
  CHECK_NEAR(metric(t, "stoker_job_energy_joules_total{hpc_job=\"pid-503\""), 2 * 140 * 4.0 / 7);
  CHECK_NEAR(metric(t, "stoker_job_idle_streak_seconds{hpc_job=\"pid-503\""), 2);
  /* One series per instance, no hpc_job (no mapping). */
  CHECK_EQ(count_lines(t, "DCGM_FI_DEV_POWER_USAGE{gpu=\"0\""), 2);
  CHECK(strstr(t, "DCGM_FI_DEV_POWER_USAGE{gpu=\"0\",UUID=\"GPU-fake-0000\",pci_bus_id=\"00000000:10:00.0\","
                  "device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\",GPU_I_PROFILE=\"4g.40gb\",GPU_I_ID=\"2\","
                  "Hostname=\"node1\",DCGM_FI_DRIVER_VERSION=\"999.99\"} 140\n") != NULL);
  free(t);
  stk_watch_close(w);
}
