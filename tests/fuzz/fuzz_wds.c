/* Fuzz the WebDataset tar index (header walk, long names, pax) and parser. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_write("a.tar", data, size);
  fuzz_read_all("a.tar", "wds");
  return 0;
}
