/* Fuzz the MDS reader: the input is "<index.json>\0<shard>" (no NUL: all
 * of it is index.json and the shard is empty). The shard is
 * shard.00000.mds, or shard.00000.mds.zstd when index.json names zstd
 * compression (then decompressed by the reader, beside it, each run). */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *sep = memchr(data, 0, size);
  size_t jl = sep ? (size_t)(sep - data) : size;
  int zst = memmem(data, jl, "\"zstd", 5) != NULL;
  fuzz_write("index.json", data, jl);
  fuzz_unlink("shard.00000.mds");
  fuzz_write(zst ? "shard.00000.mds.zstd" : "shard.00000.mds", sep ? sep + 1 : data,
             sep ? size - jl - 1 : 0);
  fuzz_read_all("index.json", "mds");
  fuzz_unlink("shard.00000.mds");
  fuzz_unlink("shard.00000.mds.zstd");
  return 0;
}
