/* The portable I/O engine: a pool of threads doing blocking pread. Used
 * where io_uring is missing or disabled (containers often forbid it), and
 * a fair ceiling for page-cache reads, which are memory copies that a
 * thread per core does as fast as anything. */
#include <errno.h>
#include <unistd.h>

#include "io.h"

/* Read len bytes, or to end of file when at least need bytes came. */
int stk__io_read_req(const struct stk_io_req *r) {
  uint64_t got = 0, need = r->need ? r->need : r->len;
  while (got < r->len) {
    ssize_t n = pread(r->fd, r->buf + got, r->len - got, (off_t)(r->off + got));
    if (n < 0) {
      if (errno == EINTR) continue;
      return stk__from_errno(errno);
    }
    if (n == 0) return got >= need ? 0 : STK_ETRUNC;
    got += (uint64_t)n;
  }
  return 0;
}

static int pread_op(void *ctx, struct stk_io_req *r) {
  (void)ctx;
  return stk__io_read_req(r);
}

static int pread_open(struct stk_io **out, const struct stk_io_opts *o, char *err) {
  return stk__io_pool_open(out, o, pread_op, NULL, 0, "pread", err);
}

const struct stk_io_ops stk__io_pread = {
    .name = "pread",
    .inline_hook = 1,
    .open = pread_open,
    .submit = stk__io_pool_submit,
    .reap = stk__io_pool_reap,
    .close = stk__io_pool_close,
};
