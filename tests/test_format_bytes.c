/* A format's index hook reads a shard's bytes (struct stk__bytes), never a
 * descriptor, so whatever serves them indexes the same: a shard held in
 * memory (stk__bytes_mem) gives the ranges the dataset layer's reads of the
 * file gave, and bytes cut short are refused as a cut file is. */
#include <stdlib.h>

#include "stoker/format.h"
#include "test.h"
#include "test_format.h"

static uint8_t *slurp(const char *path, uint64_t *n) {
  FILE *f = fopen(path, "rb");
  CHECK_MSG(f != NULL, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  *n = (uint64_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *p = malloc(*n ? *n : 1);
  CHECK_EQ(fread(p, 1, *n, f), *n);
  fclose(f);
  return p;
}

/* Index shard 0 of a written dataset from memory; its ranges must be the
 * ones the opened dataset has. Returns the shard's bytes (caller frees). */
static uint8_t *same_index(const char *fmt, uint64_t *n) {
  write_ds(fmt, "d", 40, "bin", 0, 0);
  struct stk_dataset *ds = open_ds("d", NULL);
  struct stk_shard_info info;
  CHECK_OK(stk_dataset_shard_info(ds, 0, &info));
  uint8_t *p = slurp(info.path, n);
  struct stk__bytes b;
  stk__bytes_mem(&b, p, *n);
  struct stk_shard sh = {.path = "mem", .label = -1, .file_bytes = UINT64_MAX};
  char err[STK_ERRMSG_MAX];
  int rc = stk__format_find(fmt)->index(NULL, &sh, &b, err);
  CHECK_MSG(rc == 0, "%s from memory: %s", fmt, err);
  CHECK_EQ(sh.count, info.count);
  for (uint64_t k = 0; k < sh.count; k++) {
    uint64_t len = 0;
    CHECK_OK(stk_dataset_sample_bytes(ds, info.first + k, &len));
    CHECK_EQ(sh.idx[k].len, len);
  }
  free(sh.idx);
  stk_dataset_close(ds);
  return p;
}

TEST(format_bytes_tfrecord_from_memory) {
  uint64_t n;
  uint8_t *p = same_index("tfrecord", &n);
  /* The last record's data checksum cut off: a truncated shard, named by
   * the shard's path, wherever its bytes came from. */
  struct stk__bytes b;
  stk__bytes_mem(&b, p, n - 3);
  struct stk_shard sh = {.path = "mem", .label = -1, .file_bytes = UINT64_MAX};
  char err[STK_ERRMSG_MAX];
  CHECK_EQ(stk__format_find("tfrecord")->index(NULL, &sh, &b, err), STK_ETRUNC);
  CHECK_CONTAINS(err, "mem: offset");
  CHECK(sh.idx == NULL);
  free(p);
}

TEST(format_bytes_wds_from_memory) {
  uint64_t n;
  free(same_index("wds", &n));
}
