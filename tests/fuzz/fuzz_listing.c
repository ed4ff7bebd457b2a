/* Fuzz the HTTP directory listing parser (nginx autoindex HTML and JSON,
 * Apache mod_autoindex, Python's http.server: pages from the network).
 * Every name it hands out must stay inside the listed folder. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/cache/http_impl.h"

static int check(void *arg, const char *name, int is_dir, uint64_t size) {
  size_t *n = arg;
  if (!*name || *name == '/' || strstr(name, "://") || !strcmp(name, "..") ||
      !strncmp(name, "../", 3) || strstr(name, "/../") || strchr(name, '?'))
    abort(); /* a name escaping the folder */
  *n += strlen(name) + (size_t)is_dir + (size & 1);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[STK_ERRMSG_MAX];
  size_t n = 0;
  stk__listing_parse((const char *)data, size, check, &n, err);
  return 0;
}
