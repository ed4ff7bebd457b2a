/* The modelled all-reduce: a ring all-reduce moves 2(p-1)/p of the
 * gradient bytes through each link and pays 2(p-1) latency hops. Presets
 * are per-GPU bus bandwidths of common fabrics. */
#include <string.h>

#include "../base/base.h"
#include "stoker/bench.h"

static const struct stk_network nets[] = {
    {"nvlink4", 450e9, 2e-6},  /* NVLink 4: 900 GB/s bidirectional per GPU */
    {"ib400", 50e9, 5e-6},     /* 400 Gb/s InfiniBand NDR per GPU */
    {"roce100", 12.5e9, 10e-6}, /* 100 Gb/s RoCE per GPU */
};

int stk_network_preset(const char *name, struct stk_network *out) {
  for (size_t i = 0; i < STK__ARRAY_LEN(nets); i++)
    if (strcmp(nets[i].name, name) == 0) {
      *out = nets[i];
      return 0;
    }
  return STK_ENOENT;
}

double stk_allreduce_seconds(const struct stk_network *n, uint32_t p, double bytes) {
  if (p < 2 || n->bus_bytes_per_s <= 0) return 0;
  return 2.0 * (p - 1) / p * bytes / n->bus_bytes_per_s + 2.0 * (p - 1) * n->alpha_s;
}
