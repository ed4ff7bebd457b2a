/* Fuzz the .npy header check (magic, version, dictionary, shape). */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_write("a.npy", data, size);
  fuzz_read_all("a.npy", "npy");
  return 0;
}
