/* Checkpoint objects written to S3. */
#include "../cache/cache_impl.h"
#include "ckpt_impl.h"

int stk__ckpt_s3_put_file(struct stk_origin *o, const char *name, int fd, uint64_t size, char *err) {
  (void)fd;
  (void)size;
  return stk__errf(err, STK_ENOTSUP, "%s/%s: draining checkpoints to S3 is not built yet",
                   stk__origin_url(o), name);
}

int stk__ckpt_s3_put_mem(struct stk_origin *o, const char *name, const char *text, size_t len,
                         char *err) {
  (void)text;
  (void)len;
  return stk__errf(err, STK_ENOTSUP, "%s/%s: draining checkpoints to S3 is not built yet",
                   stk__origin_url(o), name);
}
