/* Fuzz the parser of the kubelet's pod-resources answer (a
 * ListPodResourcesResponse in protobuf): any bytes give 0 or -1, every
 * device entry NUL-terminated within its fields, never a read past the
 * input. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/agent/agent_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct ag_pod *pods = NULL;
  unsigned n = 0, cap = 0;
  int rc = stk__ag_parse_podres(data, size, &pods, &n, &cap);
  if (rc != 0 && rc != -1) abort();
  if (n > AG_MAX_PODS || n > cap) abort();
  for (unsigned i = 0; i < n; i++)
    if (strlen(pods[i].dev) >= sizeof pods[i].dev || strlen(pods[i].ns) >= sizeof pods[i].ns ||
        strlen(pods[i].pod) >= sizeof pods[i].pod ||
        strlen(pods[i].container) >= sizeof pods[i].container)
      abort();
  free(pods);
  return 0;
}
