/* Fuzz loader publication files as the metrics agent meets them: the input
 * becomes a file in the agent's runtime directory, which any local user can
 * write, and a long-lived agent samples it, sees it change (truncated,
 * grown, rewritten, replaced by another file) and samples it again, then
 * renders its exposition and JSON. Nothing in a file may crash the agent,
 * and nothing may reach the exposition but printable ASCII and valid UTF-8.
 *
 * Input: byte 0 is a set of flags, byte 1 a length; the rest is the file.
 *   flag 1: stamp this process's pid and start time into the file (so that
 *           it passes the liveness and owner checks and reaches the series)
 *   flag 2: between the samples, cut the file to byte 1 x 8 bytes
 *   flag 4: between the samples, grow it by byte 1 + 1 bytes
 *   flag 8: between the samples, put another file (the input reversed) in
 *           its place
 *   flag 16: between the samples, rewrite its counters and strings in place */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../src/base/publication.h"
#include "stoker/stoker.h"

static char dir[64];
static struct stk_watch *agent;
static FILE *devnull;

static void cleanup(void) {
  if (agent) stk_watch_close(agent);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd)) {
  }
}

static void setup(void) {
  snprintf(dir, sizeof dir, "/tmp/stoker-fuzz-pub.XXXXXX");
  if (!mkdtemp(dir)) abort();
  atexit(cleanup);
  stk_log_set_level(STK_LOG_ERROR);
  struct stk_watch_opts o = {.interval_s = 1, .fast_time = 1, .nvml_lib = "none",
                             .runtime_dir = dir, .hostname = "fuzz"};
  char err[STK_ERRMSG_MAX];
  if (stk_watch_open(&agent, &o, err) != 0) abort();
  devnull = fopen("/dev/null", "w");
  if (!devnull) abort();
}

static void write_at(const char *path, const uint8_t *p, size_t n, int flags) {
  int fd = open(path, O_WRONLY | O_CREAT | flags, 0644);
  if (fd < 0) abort();
  if (n && write(fd, p, n) != (ssize_t)n) abort();
  close(fd);
}

/* Printable ASCII, newlines and valid UTF-8 only. */
static void check_text(const unsigned char *s, size_t n) {
  for (size_t i = 0; i < n;) {
    unsigned c = s[i];
    if (c == '\n' || (c >= 0x20 && c < 0x7f)) {
      i++;
      continue;
    }
    size_t l = 0;
    if (c >= 0xc2 && c <= 0xdf)
      l = 2;
    else if (c >= 0xe0 && c <= 0xef)
      l = 3;
    else if (c >= 0xf0 && c <= 0xf4)
      l = 4;
    if (!l || i + l > n) abort();
    for (size_t k = 1; k < l; k++)
      if ((s[i + k] & 0xc0) != 0x80) abort();
    i += l;
  }
}

static void sample_and_render(void) {
  if (stk_watch_sample(agent) != 0) abort();
  char *buf;
  size_t len;
  if (stk_watch_prometheus(agent, &buf, &len) != 0) abort();
  check_text((const unsigned char *)buf, len);
  free(buf);
  struct stk_json j;
  stk_json_init(&j, devnull, 0);
  stk_watch_json(agent, &j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2 || size > 2 * STK_PUB_SIZE_MAX) return 0;
  if (!agent) setup();
  unsigned flags = data[0], arg = data[1];
  size_t n = size - 2;
  uint8_t *file = malloc(n + 8);
  if (!file) return 0;
  memcpy(file, data + 2, n);
  if ((flags & 1) && n >= 40) {
    uint32_t pid = (uint32_t)getpid();
    uint64_t start = stk__pid_start_ticks("/proc", getpid());
    memcpy(file + offsetof(struct stk_pub, pid), &pid, 4);
    memcpy(file + offsetof(struct stk_pub, pid_start_ticks), &start, 8);
  }
  static unsigned counter;
  char path[128], other[128];
  snprintf(path, sizeof path, "%s/loader-%d-%u.pub", dir, (int)getpid(), counter++);
  write_at(path, file, n, O_TRUNC);
  sample_and_render();
  /* The agent removes a stale file (its writer gone), so the file may be
   * missing by now: every change below allows for that. */
  if (flags & 2 && truncate(path, (off_t)arg * 8) != 0 && errno != ENOENT) abort();
  if (flags & 4) {
    static const uint8_t more[256];
    write_at(path, more, (size_t)arg + 1, O_APPEND);
  }
  if (flags & 8) {
    snprintf(other, sizeof other, "%s/other.tmp", dir);
    for (size_t i = 0; i < n / 2; i++) {
      uint8_t t = file[i];
      file[i] = file[n - 1 - i];
      file[n - 1 - i] = t;
    }
    write_at(other, file, n, O_TRUNC);
    if (rename(other, path) != 0) abort();
  }
  if (flags & 16 && n > 64) {
    /* Counters, then the strings, in place (the inode stays). */
    memset(file + 56, (int)arg, n - 56 < 128 ? n - 56 : 128);
    int fd = open(path, O_WRONLY);
    if (fd < 0 && errno != ENOENT) abort();
    if (fd >= 0) {
      if (pwrite(fd, file + 56, n - 56, 56) < 0) abort();
      close(fd);
    }
  }
  sample_and_render();
  sample_and_render();
  unlink(path);
  sample_and_render(); /* forgets it */
  free(file);
  return 0;
}
