/* Option structs that can grow (every public options struct a caller
 * fills starts with size_t struct_size): the caller's init function records
 * the size it was built with, and the library reads only that prefix, so
 * a field added to the end in a later release takes its default (zero)
 * for programs built before it. A struct larger than this library's comes
 * from a program built against a newer header, whose fields this library
 * cannot honour: refused, naming the struct. Results the library fills
 * (stk__result_give) carry a struct_size too, which the caller sets: the
 * library writes no further than it. */
#include <string.h>

#include "base.h"

void stk__opts_init(void *o, size_t have, size_t size) {
  if (!o) return;
  /* A newer program's larger struct: only the fields known here are cleared. */
  memset(o, 0, size < have ? size : have);
  memcpy(o, &size, sizeof size);
}

void stk__result_give(void *out, const void *full, size_t have) {
  size_t n;
  memcpy(&n, out, sizeof n);
  if (n == 0 || n > have) n = have;
  if (n <= sizeof n) return; /* nothing past the size field, or not even that */
  memcpy((char *)out + sizeof n, (const char *)full + sizeof n, n - sizeof n);
}

void stk__result_take(void *dst, size_t have, const void *src) {
  size_t n;
  memcpy(&n, src, sizeof n);
  if (n == 0 || n > have) n = have;
  memset(dst, 0, have);
  if (n > sizeof n) memcpy(dst, src, n);
  memcpy(dst, &have, sizeof have);
}

int stk__opts_take(void *dst, size_t have, const void *src, const char *what, char *err) {
  size_t n = 0;
  memset(dst, 0, have);
  if (src) memcpy(&n, src, sizeof n);
  if (n > have)
    return stk__errf(err, STK_EINVAL,
                     "%s: struct_size %zu is larger than this libstoker's %zu (a program built "
                     "against a newer stoker header: link it with a libstoker as new)",
                     what, n, have);
  if (src && n != 0 && n < sizeof n)
    return stk__errf(err, STK_EINVAL, "%s: struct_size %zu is smaller than its own field", what,
                     n);
  if (src) memcpy(dst, src, n ? n : have);
  memcpy(dst, &have, sizeof have);
  return 0;
}
