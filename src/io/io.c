/* The I/O engine table and the automatic choice (see io.h): io_uring when
 * the kernel and sandbox allow it, else the pread pool. The mapping engines
 * come last: they are chosen by name (the loader does so by sample size). */
#include <string.h>

#include "io.h"

const struct stk_io_ops *const stk__io_engines[] = {&stk__io_uring, &stk__io_pread, &stk__io_mmap,
                                                   &stk__io_mapcopy, NULL};

int stk__io_open(const char *name, int direct, const struct stk_io_opts *o,
                 const struct stk_io_ops **ops, struct stk_io **io, char *err) {
  int autoselect = !name || !*name || strcmp(name, "auto") == 0;
  int rc = STK_EINVAL;
  (void)direct;
  for (int i = 0; stk__io_engines[i]; i++) {
    const struct stk_io_ops *e = stk__io_engines[i];
    if (!autoselect && strcmp(e->name, name) != 0) continue;
    rc = e->open(io, o, err);
    if (rc == 0) {
      *ops = e;
      return 0;
    }
    if (!autoselect) return rc;
    stk_log(STK_LOG_INFO, "I/O engine %s unavailable (%s); trying the next", e->name, err);
  }
  if (!autoselect) return stk__errf(err, STK_EINVAL, "unknown I/O engine '%s' (io_uring, pread, mmap, mapcopy, auto)", name);
  return rc;
}
