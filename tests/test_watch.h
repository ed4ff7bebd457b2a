/* Helpers shared by the watch tests (test_watch*.c): an agent in fast
 * time over a fake NVML scenario, its exposition, one series' value, and
 * fake publication files and /proc trees. */
#ifndef STOKER_TEST_WATCH_H
#define STOKER_TEST_WATCH_H

#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/loader/publish.h"
#include "stoker/stoker.h"
#include "test.h"

static __attribute__((unused)) const char *fake_nvml(void) {
  const char *p = getenv("STOKER_FAKE_NVML");
  if (!p || access(p, R_OK) != 0) SKIP("the fake NVML is not built (run through make test)");
  return p;
}

/* An agent in fast time over scenario file sc (written by the caller). */
static __attribute__((unused)) struct stk_watch *agent(const char *sc, struct stk_watch_opts *o) {
  setenv("FAKE_NVML_SCENARIO", sc, 1);
  struct stk_watch_opts d = {0};
  if (!o) o = &d;
  if (!o->nvml_lib) o->nvml_lib = fake_nvml();
  o->fast_time = 1;
  if (!o->interval_s) o->interval_s = 1;
  if (!o->hostname) o->hostname = "node1";
  if (!o->runtime_dir) {
    mkdir("rt", 0755);
    o->runtime_dir = "rt";
  }
  struct stk_watch *w;
  char err[STK_ERRMSG_MAX];
  int rc = stk_watch_open(&w, o, err);
  CHECK_MSG(rc == 0, "stk_watch_open: %s", err);
  return w;
}

static __attribute__((unused)) char *expo(struct stk_watch *w) {
  char *b;
  size_t n;
  CHECK_OK(stk_watch_prometheus(w, &b, &n));
  CHECK(strlen(b) == n);
  return b;
}

/* Value of the first series starting with prefix (name{labels...); NAN
 * when there is none. */
static __attribute__((unused)) double metric(const char *text, const char *prefix) {
  size_t l = strlen(prefix);
  for (const char *p = text; p && *p;) {
    if (!strncmp(p, prefix, l)) {
      /* The value follows the last space (label values may hold spaces). */
      const char *nl = strchr(p, '\n');
      const char *sp = NULL;
      for (const char *q = p; *q && q != nl; q++)
        if (*q == ' ') sp = q;
      if (sp) return strtod(sp + 1, NULL);
    }
    p = strchr(p, '\n');
    if (p) p++;
  }
  return NAN;
}

#define CHECK_NEAR(a, b)                                                                  \
  do {                                                                                    \
    double a_ = (a), b_ = (b);                                                            \
    if (!(fabs(a_ - b_) <= 1e-6 * (1 + fabs(b_))))                                         \
      test_fail(__FILE__, __LINE__, "%s == %s (%.9g != %.9g)", #a, #b, a_, b_);           \
  } while (0)

static __attribute__((unused)) void write_str(const char *path, const char *s) { test_write_file(path, s, strlen(s)); }

/* Write a publication file by hand, as another publisher would: mapped
 * shared, named loader-PID-N.pub. */
static __attribute__((unused)) struct stk_pub *fake_pub_n(const char *dir, int n, uint64_t wait_ns) {
  char path[256];
  snprintf(path, sizeof path, "%s/loader-%d-%d.pub", dir, (int)getpid(), n);
  int fd = open(path, O_RDWR | O_CREAT, 0644);
  CHECK(fd >= 0);
  CHECK(ftruncate(fd, STK_PUB_SIZE) == 0);
  struct stk_pub *p = mmap(NULL, STK_PUB_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  CHECK(p != MAP_FAILED);
  memcpy(p->magic, STK_PUB_MAGIC, 8);
  p->version = STK_PUB_VERSION;
  p->size = STK_PUB_SIZE;
  p->pid = (uint32_t)getpid();
  p->pid_start_ticks = stk__pid_start_ticks("/proc", getpid());
  p->consumer_wait_ns = wait_ns;
  snprintf(p->stage[0].name, 16, "read");
  return p;
}

static __attribute__((unused)) struct stk_pub *fake_pub(const char *dir, uint64_t wait_ns) { return fake_pub_n(dir, 99, wait_ns); }

/* A fake /proc with host files; cpu line from the given jiffies. */
static __attribute__((unused)) void fake_proc_host(unsigned long user, unsigned long idle, unsigned long steal) {
  mkdir("proc", 0755);
  mkdir("proc/pressure", 0755);
  char buf[512];
  snprintf(buf, sizeof buf, "cpu  %lu 0 0 %lu 0 0 0 %lu 0 0\ncpu0 1 0 0 1 0 0 0 0 0 0\n", user, idle, steal);
  write_str("proc/stat", buf);
  write_str("proc/meminfo", "MemTotal:       1000 kB\nMemFree:         100 kB\nMemAvailable:    250 kB\n");
  write_str("proc/pressure/io", "some avg10=12.50 avg60=1.00 avg300=0.00 total=3000000\n"
                                "full avg10=2.00 avg60=0.00 avg300=0.00 total=1000000\n");
  /* This process, so that its loader publications stay alive. */
  snprintf(buf, sizeof buf, "proc/%d", (int)getpid());
  mkdir(buf, 0755);
  char st[1024];
  FILE *f = fopen("/proc/self/stat", "r");
  CHECK(f != NULL);
  size_t n = fread(st, 1, sizeof st, f);
  fclose(f);
  snprintf(buf, sizeof buf, "proc/%d/stat", (int)getpid());
  test_write_file(buf, st, n);
  /* Its owner, which a publication must share to speak for it. */
  snprintf(buf, sizeof buf, "proc/%d/status", (int)getpid());
  snprintf(st, sizeof st, "Name:\tstoker-test\nUid:\t%u\t%u\t%u\t%u\n", (unsigned)getuid(),
           (unsigned)geteuid(), (unsigned)geteuid(), (unsigned)geteuid());
  write_str(buf, st);
}

#endif
