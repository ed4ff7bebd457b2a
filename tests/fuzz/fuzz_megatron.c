/* Fuzz the Megatron .idx checks against a .bin: the input's first two
 * bytes (little-endian) give the length of the .idx, which follows; the
 * rest is the .bin. The pair is opened as a prefix, so detection by
 * prefix runs too. */
#include "fuzz_common.h"

/* Warnings (bytes after the last sequence) are expected of most inputs. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  stk_log_set_level(STK_LOG_ERROR);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  size_t il = (size_t)data[0] | (size_t)data[1] << 8;
  if (il > size - 2) il = size - 2;
  fuzz_write("a.idx", data + 2, il);
  fuzz_write("a.bin", data + 2 + il, size - 2 - il);
  fuzz_read_all("a", NULL);
  fuzz_read_all("a", "megatron");
  return 0;
}
