/* The loader publication's shared pieces (struct stk_pub, stoker/watch.h):
 * where the files live, how a reader takes a consistent snapshot of one
 * while its writer runs, and which process wrote it. The loader writes
 * (src/loader/publish.c) and the metrics agent reads (src/agent); both
 * stand on base, so neither includes the other. */
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base.h"
#include "publication.h"
#include "stoker/watch.h"

_Static_assert(sizeof(struct stk_pub) == STK_PUB_SIZE, "stk_pub layout");
_Static_assert(offsetof(struct stk_pub, stage) == 192, "stk_pub layout");
_Static_assert(offsetof(struct stk_pub, job) == 448, "stk_pub layout");

uint64_t stk__pid_start_ticks(const char *proc_root, long pid) {
  char path[600], buf[1024];
  snprintf(path, sizeof path, "%s/%ld/stat", proc_root, pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  /* Fields after the command name, which may hold spaces and ')'. */
  char *s = strrchr(buf, ')');
  if (!s) return 0;
  s++;
  for (int field = 3; field < 22 && s; field++) s = strchr(s + 1, ' ');
  return s ? strtoull(s + 1, NULL, 10) : 0;
}

const char *stk__runtime_dir(char *buf, size_t n) {
  const char *d = getenv("STOKER_RUNTIME_DIR");
  snprintf(buf, n, "%s", d && *d ? d : "/dev/shm/stoker");
  return buf;
}

int stk__pub_read(const void *mapped, struct stk_pub *out) {
  const struct stk_pub *p = mapped;
  uint64_t magic, want;
  memcpy(&want, STK_PUB_MAGIC, 8);
  magic = __atomic_load_n((const uint64_t *)(const void *)p->magic, __ATOMIC_ACQUIRE);
  if (magic != want) return STK_EFORMAT;
  if (p->version != STK_PUB_VERSION || p->size != STK_PUB_SIZE) return STK_ENOTSUP;
  for (int tries = 0; tries < 100; tries++) {
    uint64_t s1 = __atomic_load_n(&p->seq, __ATOMIC_ACQUIRE);
    if (s1 & 1) continue;
    /* Word by word with acquire loads (the writer may be running): the
     * second look at seq comes after them all. */
    const uint64_t *src = (const uint64_t *)(const void *)p;
    uint64_t *dst = (uint64_t *)(void *)out;
    for (size_t i = 0; i < STK_PUB_SIZE / 8; i++) dst[i] = __atomic_load_n(&src[i], __ATOMIC_ACQUIRE);
    if (__atomic_load_n(&p->seq, __ATOMIC_RELAXED) == s1) {
      out->job[sizeof out->job - 1] = 0;
      out->dataset[sizeof out->dataset - 1] = 0;
      for (int i = 0; i < STK_PUB_STAGES; i++) out->stage[i].name[15] = 0;
      return 0;
    }
  }
  return STK_EBUSY;
}
