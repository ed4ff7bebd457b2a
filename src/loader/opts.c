/* Option structs that can grow: a program records the size of the struct
 * it was built with (stk_loader_opts_init), and the library reads only
 * that prefix, so fields added to the end of struct stk_loader_opts in a
 * later release take their defaults for older programs instead of being
 * read from past the end of the caller's memory. */
#include <string.h>

#include "loader_impl.h"

void stk_loader_opts_init_sized(struct stk_loader_opts *o, size_t size) {
  if (!o) return;
  /* A program built against a newer header passes a larger size: only the
   * fields this library knows are cleared; the rest is the caller's. */
  memset(o, 0, size < sizeof *o ? size : sizeof *o);
  o->struct_size = size;
}

void stk__loader_opts_copy(struct stk_loader_opts *dst, const struct stk_loader_opts *src) {
  size_t n = src->struct_size;
  if (n == 0 || n > sizeof *dst) n = sizeof *dst;
  if (n < offsetof(struct stk_loader_opts, batch_size)) n = 0; /* not even the size field */
  memset(dst, 0, sizeof *dst);
  memcpy(dst, src, n);
  dst->struct_size = sizeof *dst;
}
