/* Fuzz the checkpoint manifest parser (src/ckpt/manifest.c): what an origin
 * sends back when a checkpoint is listed or re-staged. A manifest that
 * parses is rendered again and must parse to the same objects. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/ckpt/ckpt_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct ckpt_manifest m, m2;
  char err[STK_ERRMSG_MAX];
  if (stk__ckpt_manifest_parse((const char *)data, size, &m, "fuzz", err)) return 0;
  char *text = NULL;
  size_t len = 0;
  if (stk__ckpt_manifest_text(&m, &text, &len) == 0 &&
      stk__ckpt_manifest_parse(text, len, &m2, "fuzz again", err) == 0) {
    if (m2.n != m.n || m2.step != m.step || m2.rank != m.rank || m2.world != m.world) abort();
    for (size_t i = 0; i < m.n; i++)
      if (strcmp(m.obj[i].name, m2.obj[i].name) || m.obj[i].size != m2.obj[i].size ||
          m.obj[i].crc != m2.obj[i].crc)
        abort();
    stk__ckpt_manifest_free(&m2);
  }
  free(text);
  stk__ckpt_manifest_free(&m);
  return 0;
}
