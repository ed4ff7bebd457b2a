/* B4: resident memory of a loader process at the end of each epoch.
 * usage: epoch_rss DATASET EPOCHS BATCH THREADS [jpeg]
 * Prints one JSON line with rss_bytes per epoch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stoker/stoker.h"

static unsigned long long rss_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long long size = 0, rss = 0;
  if (f) {
    if (fscanf(f, "%llu %llu", &size, &rss) != 2) rss = 0;
    fclose(f);
  }
  return rss * (unsigned long long)sysconf(_SC_PAGESIZE);
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: epoch_rss DATASET EPOCHS BATCH THREADS [jpeg]\n");
    return 2;
  }
  char err[STK_ERRMSG_MAX];
  struct stk_dataset *ds;
  if (stk_dataset_open(&ds, argv[1], NULL, err)) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  struct stk_loader_opts o = {.batch_size = (uint32_t)atoi(argv[3]), .threads = (uint32_t)atoi(argv[4]),
                              .epochs = (uint32_t)atoi(argv[2])};
  if (argc > 5 && strcmp(argv[5], "jpeg") == 0) {
    struct stk_decode_cfg dc = {0};
    o.decode = &dc;
    dc.kind = STK_DECODE_JPEG;
    dc.train = 1;
  }
  struct stk_loader *l;
  if (stk_loader_open(&l, ds, &o, err)) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  unsigned long long rss[1024];
  uint64_t epoch = 0;
  struct stk_batch *b;
  int rc;
  while ((rc = stk_loader_next(l, &b)) == 0) {
    if (b->epoch != epoch && epoch < 1024) rss[epoch++] = rss_bytes();
    stk_batch_release(l, b);
  }
  if (epoch < 1024) rss[epoch++] = rss_bytes();
  stk_loader_close(l);
  stk_dataset_close(ds);
  printf("{\"rss_bytes\": [");
  for (uint64_t e = 0; e < epoch; e++) printf("%s%llu", e ? ", " : "", rss[e]);
  printf("]}\n");
  return rc == STK_EOF ? 0 : 1;
}
