/* Loader publication: each running loader keeps its counters in a small
 * shared-memory file (struct stk_pub, include/stoker/publication.h) so
 * that the metrics agent can read every loader on the node without asking
 * it anything. Publication never fails a loader: any error just leaves it
 * unpublished. Updates are rate-limited, since next() is hot. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../base/base.h"
#include "loader_impl.h"
#include "publish.h"
#include "stoker/publication.h"

#define UPDATE_EVERY_NS 50000000ull /* at most 20 updates a second */

struct stk__publish {
  struct stk_pub *p;
  char path[512];
  uint64_t last_ns;
};

static uint64_t unix_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

struct stk__publish *stk__publish_open(const char *dataset) {
  const char *off = getenv("STOKER_PUBLISH");
  if (off && !strcmp(off, "0")) return NULL;
  char dir[400];
  stk__runtime_dir(dir, sizeof dir);
  /* The default directory is shared by every user's loaders, like /tmp. */
  if (mkdir(dir, 01777) == 0 && !getenv("STOKER_RUNTIME_DIR")) chmod(dir, 01777);
  struct stk__publish *pb = calloc(1, sizeof *pb);
  if (!pb) return NULL;
  static _Atomic unsigned counter;
  int fd = -1;
  for (int tries = 0; tries < 16 && fd < 0; tries++) {
    snprintf(pb->path, sizeof pb->path, "%s/loader-%ld-%u.pub", dir, (long)getpid(),
             counter++);
    fd = open(pb->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    stk_log(STK_LOG_DEBUG, "loader: not published in %s: %s", dir, strerror(errno));
    free(pb);
    return NULL;
  }
  void *m = MAP_FAILED;
  if (ftruncate(fd, STK_PUB_SIZE) == 0)
    m = mmap(NULL, STK_PUB_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) {
    unlink(pb->path);
    free(pb);
    return NULL;
  }
  struct stk_pub *p = m;
  p->version = STK_PUB_VERSION;
  p->minor = STK_PUB_MINOR;
  p->size = STK_PUB_SIZE;
  p->pid = (uint32_t)getpid();
  p->pid_start_ticks = stk__pid_start_ticks("/proc", (long)getpid());
  p->open_unix_ns = p->update_unix_ns = unix_ns();
  static const char *const names[STK_PUB_STAGES] = {"read", "decode", "batch", "ring"};
  for (int i = 0; i < STK_PUB_STAGES; i++) snprintf(p->stage[i].name, 16, "%s", names[i]);
  const char *job = getenv("STOKER_JOB_ID");
  if (!job || !*job) job = getenv("SLURM_JOB_ID");
  snprintf(p->job, sizeof p->job, "%s", job ? job : "");
  snprintf(p->dataset, sizeof p->dataset, "%s", dataset ? dataset : "");
  /* The magic last (a release store): a reader never sees a half-initialized
   * file as valid. */
  uint64_t magic;
  memcpy(&magic, STK_PUB_MAGIC, 8);
  __atomic_store_n((uint64_t *)(void *)p->magic, magic, __ATOMIC_RELEASE);
  pb->p = p;
  return pb;
}

/* Release stores: each orders the odd sequence number before it, so a
 * reader that sees the new value also sees the writer had begun. */
static void st(uint64_t *field, uint64_t v) { __atomic_store_n(field, v, __ATOMIC_RELEASE); }

static void write_counters(struct stk__publish *pb, struct stk_loader *l, uint64_t waiting_since) {
  struct stk_loader_stats s;
  stk_loader_stats(l, &s);
  struct stk_pub *p = pb->p;
  uint64_t seq = __atomic_load_n(&p->seq, __ATOMIC_RELAXED);
  __atomic_store_n(&p->seq, seq + 1, __ATOMIC_RELAXED);
  st(&p->update_unix_ns, unix_ns());
  st(&p->wall_ns, s.wall_ns);
  st(&p->batches, s.batches);
  st(&p->samples, s.samples);
  st(&p->bytes, s.bytes);
  st(&p->skipped, s.skipped);
  st(&p->consumer_wait_ns, s.consumer_wait_ns);
  st(&p->waiting_since_unix_ns, waiting_since);
  if (s.has_cache) {
    st(&p->cache_hits, s.cache.ram.hits + s.cache.disk.hits);
    st(&p->cache_misses, s.cache.stalls);
    st(&p->cache_fetch_bytes, s.cache.fetch_bytes);
  }
  st(&p->ring_depth, s.ring_depth);
  st(&p->mem_bytes, s.mem_bytes);
  for (int i = 0; i < STK_PUB_STAGES && i < STK_STAGE_COUNT; i++) {
    st(&p->stage[i].busy_ns, s.stage[i].busy_ns);
    st(&p->stage[i].wait_in_ns, s.stage[i].wait_in_ns);
    st(&p->stage[i].wait_out_ns, s.stage[i].wait_out_ns);
    st(&p->stage[i].items, s.stage[i].items);
    st(&p->stage[i].bytes, s.stage[i].bytes);
    __atomic_store_n(&p->stage[i].threads, s.stage[i].threads, __ATOMIC_RELEASE);
  }
  __atomic_store_n(&p->seq, seq + 2, __ATOMIC_RELEASE);
}

void stk__publish_wait_begin(struct stk__publish *pb) {
  if (pb) __atomic_store_n(&pb->p->waiting_since_unix_ns, unix_ns(), __ATOMIC_RELAXED);
}

void stk__publish_tick(struct stk__publish *pb, struct stk_loader *l) {
  if (!pb) return;
  uint64_t now = stk_now_ns();
  if (now - pb->last_ns < UPDATE_EVERY_NS) {
    __atomic_store_n(&pb->p->waiting_since_unix_ns, 0, __ATOMIC_RELAXED);
    return;
  }
  pb->last_ns = now;
  write_counters(pb, l, 0);
}

void stk__publish_close(struct stk__publish *pb, struct stk_loader *l) {
  if (!pb) return;
  write_counters(pb, l, 0);
  __atomic_store_n(&pb->p->flags, STK_PUB_CLOSED, __ATOMIC_RELEASE);
  munmap(pb->p, STK_PUB_SIZE);
  unlink(pb->path);
  free(pb);
}
