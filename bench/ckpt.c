/* K1 and K2 of issue 20 on one disk, one process: a state of SIZE bytes in
 * OBJECTS objects saved by the checkpoint tier into DIR, against the raw
 * sequential write of the same bytes (one stream, 8 MiB O_DIRECT writes,
 * fsync; save_over_raw is the save's rate over it), each with fsync. K1
 * itself is the save over `stoker doctor`'s seq_write, which sweeps depth
 * and jobs for its ceiling (bench/ceilings.sh). Then the blocking time of an asynchronous save of the same state
 * (the copy into host memory; the first save's, which also allocates the
 * staging buffer, and the next one's) against the synchronous save. One
 * JSON line. The file system is synced (untimed) before the raw write and
 * before the save: see settle().
 *   ckpt DIR [SIZE] [OBJECTS] [THREADS]   (SIZE as e.g. 1GiB) */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "stoker/ckpt.h"
#include "stoker/util.h"

static double now_s(void) { return (double)stk_now_ns() / 1e9; }

/* One stream of 8 MiB O_DIRECT writes of buf, then fsync; seconds. */
static double raw_write(const char *path, const uint8_t *buf, uint64_t size) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644);
  if (fd < 0) fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return -1;
  double t0 = now_s();
  const uint64_t blk = 8u << 20;
  int bad = 0;
  for (uint64_t off = 0; off < size && !bad; off += blk) {
    size_t n = (size_t)(size - off < blk ? size - off : blk);
    bad = pwrite(fd, buf + off, n, (off_t)off) != (ssize_t)n;
  }
  bad |= fsync(fd) != 0;
  double s = now_s() - t0;
  close(fd);
  unlink(path);
  return bad ? -1 : s;
}

/* Commit the file system's journal before a timed write: on a file system
 * mounted with online discard (ext4 -o discard) the commit after an unlink
 * discards the freed blocks and the next fsync waits for it (about 1 s per
 * GiB on the disk K1 was measured on). Untimed, so neither the raw write
 * nor the save pays for a file the other, or an earlier run, removed. */
static void settle(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  syncfs(fd);
  close(fd);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: ckpt DIR [SIZE] [OBJECTS] [THREADS]\n");
    return 2;
  }
  uint64_t size = 1ull << 30, nobj = 4, threads = 4;
  if ((argc > 2 && stk_parse_size(argv[2], &size)) || (argc > 3 && stk_parse_u64(argv[3], &nobj)) ||
      (argc > 4 && stk_parse_u64(argv[4], &threads)) || nobj == 0 || size % (nobj * 4096)) {
    fprintf(stderr, "ckpt: bad SIZE, OBJECTS or THREADS (SIZE a multiple of OBJECTS x 4 KiB)\n");
    return 2;
  }
  uint8_t *state = aligned_alloc(4096, size);
  struct stk_rng r;
  stk_rng_seed(&r, 1);
  stk_rng_fill(&r, state, size);
  struct stk_ckpt_obj *objs = calloc(nobj, sizeof *objs);
  char (*names)[32] = calloc(nobj, 32);
  for (uint64_t i = 0; i < nobj; i++) {
    snprintf(names[i], 32, "tensor.%llu", (unsigned long long)i);
    objs[i] = (struct stk_ckpt_obj){names[i], state + i * (size / nobj), size / nobj};
  }
  char raw[4096];
  snprintf(raw, sizeof raw, "%s/raw-write.tmp", argv[1]);
  /* the raw write goes in DIR, which the tier creates only later: mkdir -p */
  for (char *p = strchr(argv[1] + 1, '/'); p; p = strchr(p + 1, '/')) {
    *p = 0;
    mkdir(argv[1], 0755);
    *p = '/';
  }
  if (mkdir(argv[1], 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "ckpt: mkdir %s: %s\n", argv[1], strerror(errno));
    return 1;
  }
  settle(argv[1]);
  double raw_s = raw_write(raw, state, size);
  if (raw_s < 0) {
    fprintf(stderr, "ckpt: raw write of %s failed: %s\n", raw, strerror(errno));
    return 1;
  }
  settle(argv[1]); /* the raw file's blocks are freed here, not in the save's fsync */

  struct stk_ckpt_opts o;
  stk_ckpt_opts_init(&o);
  o.dir = argv[1];
  o.threads = (uint32_t)threads;
  o.keep_last = 1;
  struct stk_ckpt *c;
  char err[STK_ERRMSG_MAX];
  if (stk_ckpt_open(&c, &o, err)) {
    fprintf(stderr, "ckpt: %s\n", err);
    return 1;
  }
  uint64_t step = (uint64_t)time(NULL) * 10;
  double t0 = now_s();
  if (stk_ckpt_save(c, step, objs, nobj, err)) {
    fprintf(stderr, "ckpt: %s\n", err);
    return 1;
  }
  double sync_s = now_s() - t0;
  /* The first asynchronous save allocates (and faults in) the staging
   * buffer; the next ones reuse it, as every save of a training run after
   * its first does. Both are reported. */
  double block_s = 0, first_block_s = 0, async_total_s = 0;
  for (int k = 0; k < 2; k++) {
    t0 = now_s();
    if (stk_ckpt_save_async(c, step + 1 + (uint64_t)k, objs, nobj, STK_CKPT_WAIT, err)) {
      fprintf(stderr, "ckpt: %s\n", err);
      return 1;
    }
    block_s = now_s() - t0;
    if (k == 0) first_block_s = block_s;
    if (stk_ckpt_save_wait(c, err)) {
      fprintf(stderr, "ckpt: %s\n", err);
      return 1;
    }
    async_total_s = now_s() - t0;
  }
  struct stk_ckpt_stats st;
  stk_ckpt_stats(c, &st);
  stk_ckpt_close(c);
  double gib = (double)size / (1u << 30);
  printf("{\"bytes\": %llu, \"objects\": %llu, \"threads\": %llu, "
         "\"raw_write_gib_s\": %.3f, \"save_gib_s\": %.3f, \"save_over_raw\": %.3f, "
         "\"direct_writes\": %llu, \"sync_save_s\": %.3f, \"async_first_block_s\": %.4f, \"async_block_s\": %.4f, "
         "\"async_total_s\": %.3f, \"k2_ratio\": %.4f}\n",
         (unsigned long long)size, (unsigned long long)nobj, (unsigned long long)threads,
         gib / raw_s, gib / sync_s, raw_s / sync_s, (unsigned long long)st.direct_writes, sync_s,
         first_block_s, block_s, async_total_s, block_s / sync_s);
  free(objs);
  free(names);
  free(state);
  return 0;
}
