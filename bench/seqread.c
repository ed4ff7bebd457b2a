/* The read ceiling for B1: T threads reading the given files with large
 * sequential preads (files dealt round-robin to threads). Each thread reads
 * into a destination of SPAN bytes, advancing through it block by block:
 * SPAN = BLOCK rereads one cache-resident buffer (the copy alone); a SPAN
 * of batches' size makes the destination memory traffic that of a loader,
 * whose batches must land in distinct buffers. Prints one JSON line:
 * bytes, seconds, bytes_per_s.
 *   seqread THREADS BLOCK [SPAN] FILE...   (SPAN given as e.g. 64MiB) */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "stoker/util.h"

struct arg {
  char **files;
  int nfiles, tid, nthreads;
  size_t block, span;
  unsigned long long bytes;
};

static void *reader(void *p) {
  struct arg *a = p;
  char *buf = aligned_alloc(4096, a->span);
  size_t pos = 0;
  for (int i = a->tid; i < a->nfiles; i += a->nthreads) {
    int fd = open(a->files[i], O_RDONLY);
    if (fd < 0) continue;
    ssize_t n;
    off_t off = 0;
    while ((n = pread(fd, buf + pos, a->block, off)) > 0) {
      off += n;
      a->bytes += (unsigned long long)n;
      pos += a->block;
      if (pos + a->block > a->span) pos = 0;
    }
    close(fd);
  }
  free(buf);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: seqread THREADS BLOCK [SPAN] FILE...\n");
    return 2;
  }
  int t = atoi(argv[1]);
  uint64_t block, span;
  if (t < 1 || stk_parse_size(argv[2], &block)) return 2;
  int first = 3;
  span = block;
  if (stk_parse_size(argv[3], &span) == 0) first = 4; /* a size, not a file */
  if (span < block) span = block;
  pthread_t th[64];
  struct arg a[64];
  uint64_t t0 = stk_now_ns();
  for (int i = 0; i < t && i < 64; i++) {
    a[i] = (struct arg){argv + first, argc - first, i, t, block, span, 0};
    pthread_create(&th[i], NULL, reader, &a[i]);
  }
  unsigned long long total = 0;
  for (int i = 0; i < t && i < 64; i++) {
    pthread_join(th[i], NULL);
    total += a[i].bytes;
  }
  double s = (double)(stk_now_ns() - t0) / 1e9;
  printf("{\"bytes\": %llu, \"seconds\": %.6f, \"bytes_per_s\": %.1f}\n", total, s, (double)total / s);
  return 0;
}
