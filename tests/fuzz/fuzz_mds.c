/* Fuzz the MDS reader: the input is "<index.json>\0<shard.00000.mds>" (no
 * NUL: all of it is index.json and the shard is empty). */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *sep = memchr(data, 0, size);
  size_t jl = sep ? (size_t)(sep - data) : size;
  fuzz_write("index.json", data, jl);
  fuzz_write("shard.00000.mds", sep ? sep + 1 : data, sep ? size - jl - 1 : 0);
  fuzz_read_all("index.json", "mds");
  return 0;
}
