/* Fuzz the DLIO workload config reader (libyaml underneath), then size a
 * checkpoint of whatever model it read, on a few rank counts: any crash,
 * leak, overflow or unbounded walk (aliases) is a bug. */
#include <stdint.h>
#include <string.h>

#include "../../src/base/base.h"
#include "../../src/bench/bench_impl.h"
#include "stoker/bench.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct stk_workload w;
  memset(&w, 0, sizeof w);
  char unknown[1024], ignored[1024], err[STK_ERRMSG_MAX];
  if (stk__workload_parse_yaml((const char *)data, size, "fuzz.yaml", &w, unknown, sizeof unknown,
                               ignored, sizeof ignored, err) != 0)
    return 0;
  if (w.ckpt.num_layers > 4096) return 0; /* sizing walks every layer of every rank */
  static const uint32_t ranks[] = {1, 2, 8, 64};
  for (size_t i = 0; i < sizeof ranks / sizeof ranks[0]; i++) {
    uint64_t bytes, files;
    uint32_t writers;
    stk_ckpt_size(&w, ranks[i], &bytes, &files, &writers, err);
  }
  return 0;
}
