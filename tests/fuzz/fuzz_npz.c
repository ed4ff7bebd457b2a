/* Fuzz the .npz reader: end records, zip64, central directory, local
 * headers, stored CRC32 and the inflate check of deflated members. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_write("a.npz", data, size);
  fuzz_read_all("a.npz", "npz");
  return 0;
}
