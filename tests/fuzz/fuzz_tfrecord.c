/* Fuzz the TFRecord index (header scan and .idx files) and parser. An
 * input starting with "IDX" is "IDX<.idx text>\0<shard>", else a shard. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *sep = size > 3 && !memcmp(data, "IDX", 3) ? memchr(data, 0, size) : NULL;
  if (sep) {
    fuzz_write("a.tfrecord.idx", data + 3, (size_t)(sep - data - 3));
    fuzz_write("a.tfrecord", sep + 1, size - (size_t)(sep + 1 - data));
  } else {
    fuzz_unlink("a.tfrecord.idx");
    fuzz_write("a.tfrecord", data, size);
  }
  fuzz_read_all("a.tfrecord", "tfrecord");
  return 0;
}
