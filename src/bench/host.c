/* What the rest of the machine did during a bench run, from /proc: the CPU
 * time every process used and the time the hypervisor took away (steal),
 * from /proc/stat; and the bytes this process made the kernel read from a
 * block device, from /proc/self/io. The verdict needs both to tell a slow
 * pipeline from a busy machine, and storage from the page cache. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bench_impl.h"

/* The aggregate "cpu" line: user nice system idle iowait irq softirq steal
 * (guest time is already inside user). */
static int read_stat(const char *root, struct stk__host_snap *s) {
  char path[512], line[512];
  snprintf(path, sizeof path, "%s/stat", root);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  int ok = 0;
  if (fgets(line, sizeof line, f) && strncmp(line, "cpu ", 4) == 0) {
    uint64_t v[8] = {0};
    int n = sscanf(line + 4, "%" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64
                   " %" SCNu64 " %" SCNu64, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
    if (n >= 7) {
      s->busy_ticks = v[0] + v[1] + v[2] + v[5] + v[6];
      s->steal_ticks = n >= 8 ? v[7] : 0;
      ok = 1;
    }
  }
  fclose(f);
  return ok;
}

static int read_io(const char *root, struct stk__host_snap *s) {
  char path[512], line[256];
  snprintf(path, sizeof path, "%s/self/io", root);
  FILE *f = fopen(path, "r");
  if (!f) return 0; /* absent without CONFIG_TASK_IO_ACCOUNTING, or not readable */
  int ok = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "read_bytes: %" SCNu64, &s->read_bytes) == 1) ok = 1;
  fclose(f);
  return ok;
}

void stk__bench_host_snap(const char *root, struct stk__host_snap *s) {
  memset(s, 0, sizeof *s);
  s->cpu_ok = read_stat(root, s);
  s->io_ok = read_io(root, s);
}

void stk__bench_host_delta(const struct stk__host_snap *a, const struct stk__host_snap *b,
                           uint32_t cores, struct stk_bench_host *h) {
  memset(h, 0, sizeof *h);
  h->cores = cores;
  long hz = sysconf(_SC_CLK_TCK);
  if (hz <= 0) hz = 100;
  h->cpu_valid = a->cpu_ok && b->cpu_ok && b->busy_ticks >= a->busy_ticks &&
                 b->steal_ticks >= a->steal_ticks;
  if (h->cpu_valid) {
    h->busy_cpu_s = (double)(b->busy_ticks - a->busy_ticks) / (double)hz;
    h->steal_cpu_s = (double)(b->steal_ticks - a->steal_ticks) / (double)hz;
  }
  h->io_valid = a->io_ok && b->io_ok && b->read_bytes >= a->read_bytes;
  if (h->io_valid) h->device_read_bytes = b->read_bytes - a->read_bytes;
}
