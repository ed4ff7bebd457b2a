/* stoker watch on Kubernetes (issue 21, §2 and §3): the pods that hold a
 * GPU, from the kubelet's pod-resources API, with or without a process on
 * it, against a fake kubelet speaking HTTP/2 and gRPC on a unix socket
 * (a thread here: it checks the request's frames and path, and answers
 * the way grpc-go does, with SETTINGS, a PING and the message split over
 * a padded and a plain DATA frame); the reaper naming the pod by name;
 * and the reaper sparing a Slurm job that runs on other nodes too (a
 * fake squeue on PATH). */
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "../src/agent/agent_impl.h"
#include "test_watch.h"

/* ---- a protobuf writer ---- */

struct pbw {
  uint8_t b[4096];
  size_t n;
};

static void pbw_varint(struct pbw *w, uint64_t v) {
  while (v >= 0x80) w->b[w->n++] = (uint8_t)(v | 0x80), v >>= 7;
  w->b[w->n++] = (uint8_t)v;
}

static void pbw_bytes(struct pbw *w, unsigned field, const void *p, size_t n) {
  pbw_varint(w, (uint64_t)field << 3 | 2);
  pbw_varint(w, n);
  memcpy(w->b + w->n, p, n);
  w->n += n;
}

static void pbw_str(struct pbw *w, unsigned field, const char *s) { pbw_bytes(w, field, s, strlen(s)); }

static void pbw_msg(struct pbw *w, unsigned field, const struct pbw *m) { pbw_bytes(w, field, m->b, m->n); }

/* A PodResources message: one container holding devices of resource res. */
static void pod_msg(struct pbw *out, const char *ns, const char *name, const char *container,
                    const char *res, const char *const *ids) {
  struct pbw dev = {0}, ctr = {0}, pod = {0};
  pbw_str(&dev, 1, res);
  for (; *ids; ids++) pbw_str(&dev, 2, *ids);
  pbw_varint(&dev, 3 << 3 | 0), pbw_varint(&dev, 7); /* an unknown varint: skipped */
  pbw_str(&ctr, 1, container);
  pbw_msg(&ctr, 2, &dev);
  pbw_varint(&ctr, 3 << 3 | 0), pbw_varint(&ctr, 4); /* cpu_ids: 4 */
  pbw_str(&pod, 1, name);
  pbw_str(&pod, 2, ns);
  pbw_msg(&pod, 3, &ctr);
  pbw_msg(out, 1, &pod);
}

/* ---- the fake kubelet ---- */

struct kubelet {
  int lfd;
  int stop; /* set by kubelet_stop, read by its thread: atomic */
  int calls, bad;
  volatile int garbage; /* answer a message that is not a ListPodResourcesResponse */
  struct pbw answer;
  pthread_t th;
};

static int full(int fd, void *p, size_t n, int wr) {
  uint8_t *q = p;
  while (n) {
    ssize_t r = wr ? send(fd, q, n, MSG_NOSIGNAL) : recv(fd, q, n, 0);
    if (r <= 0) return -1;
    q += r, n -= (size_t)r;
  }
  return 0;
}

static void frame(int fd, uint32_t len, uint8_t type, uint8_t flags, uint32_t stream, const void *p) {
  uint8_t h[9] = {(uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len, type, flags,
                  (uint8_t)(stream >> 24), (uint8_t)(stream >> 16), (uint8_t)(stream >> 8), (uint8_t)stream};
  full(fd, h, 9, 1);
  if (len) full(fd, (void *)p, len, 1);
}

static void serve_one(struct kubelet *k, int fd) {
  char pre[24];
  if (full(fd, pre, 24, 0) || memcmp(pre, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24)) return;
  /* Read frames until stream 1 ends; keep its header block. */
  uint8_t hb[512];
  size_t hbl = 0;
  int ended = 0, acked = 0;
  while (!ended) {
    uint8_t h[9], p[1024];
    if (full(fd, h, 9, 0)) return;
    uint32_t len = (uint32_t)h[0] << 16 | (uint32_t)h[1] << 8 | h[2];
    if (len > sizeof p || full(fd, p, len, 0)) return;
    if (h[3] == 1 && h[8] == 1 && hbl + len <= sizeof hb) memcpy(hb + hbl, p, len), hbl += len;
    if ((h[3] == 0 || h[3] == 1) && h[8] == 1 && (h[4] & 1)) ended = 1;
    if (h[3] == 4 && (h[4] & 1)) acked = 1;
  }
  int ok = memmem(hb, hbl, "/v1.PodResourcesLister/List", 27) &&
           memmem(hb, hbl, "application/grpc", 16);
  /* SETTINGS (MAX_CONCURRENT_STREAMS 100), then a PING; :status 200
   * (static index 8). */
  uint8_t set[6] = {0, 3, 0, 0, 0, 100}, ping[8] = {1, 2, 3, 4, 5, 6, 7, 8}, st = 0x88;
  frame(fd, 6, 4, 0, 0, set);
  frame(fd, 8, 6, 0, 0, ping);
  frame(fd, 1, 1, 0x4, 1, &st);
  if (ok) {
    /* The message in two DATA frames, the first padded. */
    uint8_t msg[4200], *m = msg;
    static const uint8_t junk[2] = {0x0b, 0x0c}; /* wire types 3 and 4: refused */
    const uint8_t *src = k->garbage ? junk : k->answer.b;
    size_t n = k->garbage ? sizeof junk : k->answer.n;
    m[0] = 0, m[1] = (uint8_t)(n >> 24), m[2] = (uint8_t)(n >> 16), m[3] = (uint8_t)(n >> 8),
    m[4] = (uint8_t)n;
    memcpy(m + 5, src, n);
    size_t half = (n + 5) / 2;
    uint8_t pad[2100];
    pad[0] = 3;
    memcpy(pad + 1, m, half);
    memset(pad + 1 + half, 0, 3);
    frame(fd, (uint32_t)(half + 4), 0, 0x8, 1, pad);
    frame(fd, (uint32_t)(n + 5 - half), 0, 0, 1, m + half);
  } else {
    k->bad++;
  }
  /* Trailers, END_STREAM: grpc-status 0 (12: unimplemented) as a literal. */
  uint8_t tr[32] = {0x00, 11};
  memcpy(tr + 2, "grpc-status", 11);
  tr[13] = 1, tr[14] = ok ? '0' : '2';
  frame(fd, 15, 1, 0x5, 1, tr);
  /* Read until the client closes: it must have acknowledged our SETTINGS. */
  for (int i = 0; i < 40; i++) {
    uint8_t h[9], p[64];
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (poll(&pf, 1, 100) <= 0 || full(fd, h, 9, 0)) break;
    uint32_t len = (uint32_t)h[0] << 16 | (uint32_t)h[1] << 8 | h[2];
    if (len > sizeof p || full(fd, p, len, 0)) break;
    if (h[3] == 4 && (h[4] & 1)) acked = 1;
  }
  if (!acked) k->bad++;
}

static void *kubelet_main(void *arg) {
  struct kubelet *k = arg;
  while (!__atomic_load_n(&k->stop, __ATOMIC_ACQUIRE)) {
    struct pollfd pf = {.fd = k->lfd, .events = POLLIN};
    if (poll(&pf, 1, 50) <= 0) continue;
    int fd = accept(k->lfd, NULL, NULL);
    if (fd < 0) continue;
    k->calls++;
    serve_one(k, fd);
    close(fd);
  }
  return NULL;
}

static void kubelet_start(struct kubelet *k, const char *path) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
  unlink(path);
  k->lfd = socket(AF_UNIX, SOCK_STREAM, 0);
  CHECK(k->lfd >= 0);
  CHECK(bind(k->lfd, (struct sockaddr *)&sa, sizeof sa) == 0);
  CHECK(listen(k->lfd, 8) == 0);
  CHECK(pthread_create(&k->th, NULL, kubelet_main, k) == 0);
}

static void kubelet_stop(struct kubelet *k) {
  __atomic_store_n(&k->stop, 1, __ATOMIC_RELEASE);
  pthread_join(k->th, NULL);
  close(k->lfd);
}

static const char *const dev0[] = {"GPU-aaaa", NULL};
static const char *const dev1a[] = {"GPU-bbbb::0", NULL};
static const char *const dev1b[] = {"GPU-bbbb::1", NULL};
static const char *const nic[] = {"GPU-cccc", NULL};

TEST(watch_k8s_pod_resources) {
  /* GPU 0: held by ml/train-0 with no process on it; GPU 1: time-sliced
   * between two pods; GPU 2: a device of another resource with a GPU's
   * name (ignored), and a process of a pod the kubelet does not list. */
  write_str("sc.txt", "gpu 0 uuid GPU-aaaa util 0\ngpu 1 uuid GPU-bbbb util 50\n"
                      "gpu 2 uuid GPU-cccc util 10\n");
  struct kubelet k = {0};
  pod_msg(&k.answer, "ml", "train-0", "trainer", "nvidia.com/gpu", dev0);
  pod_msg(&k.answer, "ml", "a", "c", "nvidia.com/gpu", dev1a);
  pod_msg(&k.answer, "research", "b", "c", "nvidia.com/gpu", dev1b);
  pod_msg(&k.answer, "net", "nic-user", "c", "example.com/nic", nic);
  kubelet_start(&k, "kubelet.sock");
  struct stk_watch_opts o = {.pod_resources_socket = "kubelet.sock", .reap_after_s = 8,
                             .reap_command = "echo {namespace} {pod} >> reaped.txt"};
  struct stk_watch *w = agent("sc.txt", &o);
  for (int s = 0; s < 12; s++) CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  /* Asked at the first sample and every 10 s after: samples 0 and 10. */
  CHECK_EQ(k.calls, 2);
  CHECK_EQ(k.bad, 0);
  CHECK_CONTAINS(t, "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-aaaa\",pci_bus_id=\"00000000:10:00.0\","
                    "device=\"nvidia0\",modelName=\"Fake GPU\",Hostname=\"node1\","
                    "DCGM_FI_DRIVER_VERSION=\"999.99\",container=\"trainer\",namespace=\"ml\","
                    "pod=\"train-0\"} 0\n");
  CHECK_CONTAINS(t, "DCGM_FI_DRIVER_VERSION=\"999.99\",container=\"c\",namespace=\"ml\",pod=\"a\"} 50\n");
  CHECK_CONTAINS(t, "DCGM_FI_DRIVER_VERSION=\"999.99\",container=\"c\",namespace=\"research\",pod=\"b\"} 50\n");
  CHECK(strstr(t, "nic-user") == NULL);
  const char *g2 = strstr(t, "DCGM_FI_DEV_GPU_UTIL{gpu=\"2\",UUID=\"GPU-cccc\"");
  CHECK(g2 != NULL);
  CHECK(!strncmp(strstr(g2, "DCGM_FI_DRIVER_VERSION="), "DCGM_FI_DRIVER_VERSION=\"999.99\"} 10\n", 36));
  /* A pod's GPU without a process is allocated and idle: waste, charged
   * to the pod by name; a time-sliced GPU is shared by its pods. */
  CHECK_NEAR(metric(t, "stoker_job_gpu_allocated_seconds_total{hpc_job=\"ml/train-0\""), 11);
  CHECK_NEAR(metric(t, "stoker_job_gpu_idle_seconds_total{hpc_job=\"ml/train-0\""), 11);
  CHECK_NEAR(metric(t, "stoker_job_gpu_allocated_seconds_total{hpc_job=\"ml/a\""), 5.5);
  CHECK_NEAR(metric(t, "stoker_job_gpu_busy_seconds_total{hpc_job=\"research/b\""), 2.75);
  CHECK_NEAR(metric(t, "stoker_reaper_actions_total{action=\"act\"}"), 1);
  CHECK_NEAR(metric(t, "stoker_watch_pod_resources_errors_total"), 0);
  free(t);
  stk_watch_close(w); /* waits for the reaper's command */
  /* --no-job-labels: one series per GPU, no pod labels; the pods are
   * still charged. */
  struct stk_watch_opts o2 = {.pod_resources_socket = "kubelet.sock", .no_job_labels = 1};
  w = agent("sc.txt", &o2);
  for (int s = 0; s < 2; s++) CHECK_OK(stk_watch_sample(w));
  t = expo(w);
  CHECK(strstr(t, "pod=\"") == NULL);
  CHECK_NEAR(metric(t, "stoker_job_gpu_allocated_seconds_total{hpc_job=\"ml/train-0\""), 1);
  free(t);
  stk_watch_close(w);
  kubelet_stop(&k);
  CHECK_EQ(k.calls, 3);
  size_t n;
  char *r = (char *)test_read_file("reaped.txt", &n);
  CHECK(r != NULL);
  CHECK_STR(r, "ml train-0\n");
  free(r);
}

TEST(watch_k8s_pod_resources_failures) {
  write_str("sc.txt", "gpu 0 uuid GPU-aaaa util 0\n");
  /* No kubelet: counted, the GPU unallocated, the agent fine. */
  struct stk_watch_opts o = {.pod_resources_socket = "absent.sock"};
  struct stk_watch *w = agent("sc.txt", &o);
  for (int s = 0; s < 11; s++) CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  CHECK_NEAR(metric(t, "stoker_watch_pod_resources_errors_total"), 2);
  CHECK(strstr(t, "pod=") == NULL);
  free(t);
  stk_watch_close(w);
  /* A kubelet that answers well, then garbage: counted, and the last
   * good answer kept (a kubelet's bad moment does not free the GPUs). */
  struct kubelet k = {0};
  pod_msg(&k.answer, "ml", "train-0", "trainer", "nvidia.com/gpu", dev0);
  kubelet_start(&k, "kubelet.sock");
  struct stk_watch_opts o2 = {.pod_resources_socket = "kubelet.sock"};
  w = agent("sc.txt", &o2);
  CHECK_OK(stk_watch_sample(w));
  k.garbage = 1;
  for (int s = 0; s < 10; s++) CHECK_OK(stk_watch_sample(w));
  t = expo(w);
  CHECK_EQ(k.calls, 2);
  CHECK_NEAR(metric(t, "stoker_watch_pod_resources_errors_total"), 1);
  CHECK_CONTAINS(t, "namespace=\"ml\",pod=\"train-0\"} 0\n");
  free(t);
  stk_watch_close(w);
  kubelet_stop(&k);
  /* Malformed answers are refused by the parser, never read past. */
  struct ag_pod *pods = NULL;
  unsigned np = 0, cap = 0;
  struct pbw m = {0};
  pod_msg(&m, "ml", "p", "c", "nvidia.com/gpu", dev0);
  CHECK_EQ(stk__ag_parse_podres(m.b, m.n, &pods, &np, &cap), 0);
  CHECK_EQ(np, 1);
  CHECK_STR(pods[0].dev, "GPU-aaaa");
  CHECK_STR(pods[0].container, "c");
  for (size_t cut = 1; cut < m.n; cut++) {
    int rc = stk__ag_parse_podres(m.b, cut, &pods, &np, &cap);
    CHECK(rc == -1 || np == 0);
  }
  uint8_t group[] = {0x0b, 0x0c}; /* wire types 3 and 4 */
  CHECK_EQ(stk__ag_parse_podres(group, 2, &pods, &np, &cap), -1);
  free(pods);
}

/* A Slurm job idle on this node is acted on only where squeue says it
 * runs on this node alone. */
TEST(watch_reaper_spares_multinode_slurm_job) {
  write_str("sc.txt", "gpu 0\ngpu 1\nat 0 gpu 0 util 0\nat 0 gpu 1 util 0\n");
  mkdir("map", 0755);
  write_str("map/0", "101\n"); /* squeue: 2 nodes */
  write_str("map/1", "202\n"); /* squeue: 1 node */
  mkdir("bin", 0755);
  write_str("bin/squeue", "#!/bin/sh\n"
                          "echo \"$*\" >> squeue.log\n"
                          "case \"$*\" in *101*) echo 2;; *202*) echo 1;; esac\n");
  chmod("bin/squeue", 0755);
  char cwd[1024], path[4096];
  CHECK(getcwd(cwd, sizeof cwd) != NULL);
  const char *old = getenv("PATH");
  char *saved = strdup(old ? old : "/usr/bin:/bin");
  snprintf(path, sizeof path, "%s/bin:%s", cwd, saved);
  setenv("PATH", path, 1);
  struct stk_watch_opts o = {.mapping_dir = "map", .interval_s = 60, .reap_after_s = 300,
                             .reap_command = "echo {job} >> reaped.txt"};
  struct stk_watch *w = agent("sc.txt", &o);
  for (int s = 0; s < 7; s++) CHECK_OK(stk_watch_sample(w));
  stk_watch_close(w); /* waits for the commands */
  setenv("PATH", saved, 1);
  free(saved);
  size_t n;
  char *r = (char *)test_read_file("reaped.txt", &n);
  CHECK(r != NULL);
  CHECK_STR(r, "202\n");
  free(r);
  r = (char *)test_read_file("squeue.log", &n);
  CHECK(r != NULL);
  CHECK_CONTAINS(r, "-h -j 101 -o %D");
  free(r);
}

/* MIG: the device plugin names each instance by its own MIG UUID; the
 * instance's series carry its pod, and the pod is charged its slices. */
TEST(watch_k8s_mig_pods) {
  write_str("sc.txt", "gpu 0 uuid GPU-aaaa gpm 1 power_w 300\n"
                      "at 0 gpu 0 mig 1 1g.10gb 9856 100 mig_gr 1 0\n"
                      "at 0 gpu 0 mig 2 3g.40gb 40192 200 mig_gr 2 50\n");
  struct kubelet k = {0};
  static const char *const m1[] = {"MIG-aaaa-1", NULL}, *const m2[] = {"MIG-aaaa-2", NULL};
  pod_msg(&k.answer, "ml", "small", "c", "nvidia.com/mig-1g.10gb", m1);
  pod_msg(&k.answer, "ml", "big", "c", "nvidia.com/mig-3g.40gb", m2);
  kubelet_start(&k, "kubelet.sock");
  struct stk_watch_opts o = {.pod_resources_socket = "kubelet.sock"};
  struct stk_watch *w = agent("sc.txt", &o);
  for (int s = 0; s < 8; s++) CHECK_OK(stk_watch_sample(w));
  char *t = expo(w);
  CHECK_CONTAINS(t, "GPU_I_PROFILE=\"1g.10gb\",GPU_I_ID=\"1\",Hostname=\"node1\","
                    "DCGM_FI_DRIVER_VERSION=\"999.99\",container=\"c\",namespace=\"ml\",pod=\"small\"} 100\n");
  CHECK_CONTAINS(t, "GPU_I_PROFILE=\"3g.40gb\",GPU_I_ID=\"2\",Hostname=\"node1\","
                    "DCGM_FI_DRIVER_VERSION=\"999.99\",container=\"c\",namespace=\"ml\",pod=\"big\"} 200\n");
  CHECK_NEAR(metric(t, "stoker_job_gpu_allocated_seconds_total{hpc_job=\"ml/small\""), 7.0 / 7);
  CHECK_NEAR(metric(t, "stoker_job_gpu_allocated_seconds_total{hpc_job=\"ml/big\""), 7.0 * 3 / 7);
  CHECK_NEAR(metric(t, "stoker_job_gpu_busy_seconds_total{hpc_job=\"ml/big\""), 7.0 * 3 / 7 / 2);
  free(t);
  stk_watch_close(w);
  kubelet_stop(&k);
}
