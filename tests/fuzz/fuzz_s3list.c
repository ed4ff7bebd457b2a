/* Fuzz the S3 ListObjectsV2 page parser (XML from the network). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/cache/http_impl.h"

static int count(void *arg, const char *key, const struct stk_obj_info *info) {
  size_t *n = arg;
  *n += strlen(key) + (info->size & 1) + strlen(info->etag);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[STK_ERRMSG_MAX], *token = NULL;
  int truncated = 0;
  size_t n = 0;
  stk__s3_parse_list((const char *)data, size, count, &n, &truncated, &token, err);
  free(token);
  return 0;
}
