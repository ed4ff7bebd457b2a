/* Fuzz opening a remote dataset's stoker-manifest.json: the input is the
 * manifest, served by a file origin through a RAM-tier cache. Opening reads
 * only the manifest (shard counts come from it), so every input exercises
 * the manifest reader and its name checks, never the network. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stoker/stoker.h"

static char dir[64], url[96], path[128];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!dir[0]) {
    strcpy(dir, "/tmp/stoker-fuzz-manifest-XXXXXX");
    if (!mkdtemp(dir)) abort();
    snprintf(url, sizeof url, "file://%s", dir);
    snprintf(path, sizeof path, "%s/stoker-manifest.json", dir);
    stk_log_set_level(STK_LOG_ERROR);
  }
  FILE *f = fopen(path, "wb");
  if (!f) abort();
  fwrite(data, 1, size, f);
  fclose(f);
  struct stk_cache_opts co = {.ram_bytes = 1 << 20, .prefetch_bytes = -1};
  struct stk_dataset_opts o = {.cache = &co};
  struct stk_dataset *ds;
  char err[STK_ERRMSG_MAX];
  if (stk_dataset_open(&ds, url, &o, err) == 0) {
    struct stk_shard_info si;
    for (size_t i = 0; i < stk_dataset_num_shards(ds) && i < 4; i++) stk_dataset_shard_info(ds, i, &si);
    stk_dataset_close(ds);
  }
  return 0;
}
