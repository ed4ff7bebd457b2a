/* Option structs that can grow: a program records the size of the struct
 * it was built with (stk_loader_opts_init), and the library reads only
 * that prefix, so fields added to the end of struct stk_loader_opts in a
 * later release take their defaults for older programs instead of being
 * read from past the end of the caller's memory. The sampler and decode
 * options are their own sized structs, pointed at from the loader's. */
#include <string.h>

#include "loader_impl.h"

void stk_loader_opts_init_sized(struct stk_loader_opts *o, size_t size) {
  stk__opts_init(o, sizeof *o, size);
}

void stk_sampler_opts_init_sized(struct stk_sampler_opts *o, size_t size) {
  stk__opts_init(o, sizeof *o, size);
}

void stk_decode_cfg_init_sized(struct stk_decode_cfg *o, size_t size) {
  stk__opts_init(o, sizeof *o, size);
}

int stk__loader_opts_take(struct stk_loader_opts *dst, struct stk_sampler_opts *sampler,
                          struct stk_decode_cfg *decode, const struct stk_loader_opts *src,
                          char *err) {
  int rc = stk__opts_take(dst, sizeof *dst, src, "stk_loader_opts", err);
  if (!rc) rc = stk__opts_take(sampler, sizeof *sampler, dst->sampler, "stk_sampler_opts", err);
  if (!rc) rc = stk__opts_take(decode, sizeof *decode, dst->decode, "stk_decode_cfg", err);
  /* From here on the loader reads its own copies. */
  dst->sampler = sampler;
  dst->decode = decode;
  return rc;
}
