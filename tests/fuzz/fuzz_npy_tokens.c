/* Fuzz npy token files (src/format/npy_tokens.c): their header checks
 * differ from npy's (dtype kind and byte order, Fortran order, one
 * dimension, the data's length, one dtype per folder). The input is one
 * file, or two when a second "\x93NUMPY" follows the first one's magic:
 * each is written as a .npy and the folder is opened as npy-tokens, so the
 * dtype agreement between files runs too. */
#include "fuzz_common.h"

/* Warnings (bytes after the array data) are expected of many inputs. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  stk_log_set_level(STK_LOG_ERROR);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  size_t cut = size;
  for (size_t i = 6; i + 6 <= size; i++)
    if (!memcmp(data + i, "\x93NUMPY", 6)) {
      cut = i;
      break;
    }
  fuzz_write("a.npy", data, cut);
  if (cut < size) fuzz_write("b.npy", data + cut, size - cut);
  else fuzz_unlink("b.npy");
  fuzz_read_all("a.npy", "npy-tokens");
  fuzz_read_all(".", "npy-tokens");
  return 0;
}
