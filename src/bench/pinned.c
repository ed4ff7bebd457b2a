/* Pinned batch buffers for library users (the Python binding's
 * pin_memory=True): a struct stk_allocator over the CUDA runtime that
 * cuda.c loads at run time, so nothing links against CUDA and a machine
 * without a GPU gets a clear STK_ENOTSUP instead of a failed link. */
#include <string.h>

#include "cuda.h"
#include "stoker/loader.h"

int stk_pinned_allocator_open(struct stk_allocator *a, char *errmsg) {
  if (!a) return stk__errf(errmsg, STK_EINVAL, "no allocator to fill");
  memset(a, 0, sizeof *a);
  struct stk__cuda *c = NULL;
  int rc = stk__cuda_open(&c, errmsg);
  if (rc) return rc;
  a->alloc = stk__cuda_alloc_hook;
  a->free = stk__cuda_free_hook;
  a->ctx = c;
  return 0;
}

void stk_pinned_allocator_close(struct stk_allocator *a) {
  if (!a || !a->ctx) return;
  stk__cuda_close(a->ctx);
  memset(a, 0, sizeof *a);
}
