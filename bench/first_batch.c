/* B5: time from nothing to the first batch in hand: open the dataset
 * (listing and indexing every shard), start the loader, take one batch.
 * usage: first_batch DATASET  -> one JSON line with the split. */
#include <stdio.h>

#include "stoker/stoker.h"

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: first_batch DATASET\n");
    return 2;
  }
  char err[STK_ERRMSG_MAX];
  uint64_t t0 = stk_now_ns();
  struct stk_dataset *ds;
  if (stk_dataset_open(&ds, argv[1], NULL, err)) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  uint64_t t1 = stk_now_ns();
  struct stk_loader_opts o = {.batch_size = 64, .threads = 2};
  struct stk_loader *l;
  if (stk_loader_open(&l, ds, &o, err)) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  struct stk_batch *b;
  if (stk_loader_next(l, &b)) {
    fprintf(stderr, "%s\n", stk_loader_errmsg(l));
    return 1;
  }
  uint64_t t2 = stk_now_ns();
  printf("{\"shards\": %zu, \"samples\": %llu, \"open_ms\": %.3f, \"first_batch_ms\": %.3f}\n",
         stk_dataset_num_shards(ds), (unsigned long long)stk_dataset_num_samples(ds),
         (double)(t1 - t0) / 1e6, (double)(t2 - t0) / 1e6);
  stk_batch_release(l, b);
  stk_loader_close(l);
  stk_dataset_close(ds);
  return 0;
}
