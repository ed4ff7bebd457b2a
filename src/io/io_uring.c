/* The io_uring engine (liburing): one ring owned by the submitting thread.
 * Reads are queued as SQEs and flushed together at reap time, so a batch of
 * reads costs one system call. Buffered reads are flagged IOSQE_ASYNC so
 * that page-cache copies run on the kernel's worker threads in parallel
 * instead of inline in the submitter. Short reads are resubmitted for the
 * remainder; a read at end of file completes with STK_ETRUNC. */
#include <errno.h>
#include <liburing.h>
#include <stdlib.h>

#include "io.h"

struct stk_io {
  struct io_uring ring;
  uint32_t depth, inflight, unsubmitted;
};

static int ur_open(struct stk_io **out, const struct stk_io_opts *o, char *err) {
  struct stk_io *io = calloc(1, sizeof *io);
  if (!io) return stk__errf(err, STK_ENOMEM, "out of memory for io_uring");
  io->depth = o->depth ? o->depth : 64;
  int rc = io_uring_queue_init(io->depth, &io->ring, 0);
  if (rc < 0) {
    free(io);
    return stk__errf(err, rc == -ENOSYS || rc == -EPERM ? STK_ENOTSUP : stk__from_errno(-rc),
                     "io_uring_queue_init: %s", stk_strerror(stk__from_errno(-rc)));
  }
  if (o->threads) {
    unsigned int workers[2] = {o->threads, 0}; /* bounded, unbounded */
    io_uring_register_iowq_max_workers(&io->ring, workers);
  }
  *out = io;
  return 0;
}

static void ur_close(struct stk_io *io) {
  io_uring_queue_exit(&io->ring);
  free(io);
}

static int queue_read(struct stk_io *io, struct stk_io_req *r) {
  struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);
  if (!sqe) {
    io_uring_submit(&io->ring);
    io->unsubmitted = 0;
    sqe = io_uring_get_sqe(&io->ring);
    if (!sqe) return STK_EBUSY;
  }
  /* r->next counts bytes already read when a short read is resumed. */
  uint64_t done = (uint64_t)(uintptr_t)r->next;
  io_uring_prep_read(sqe, r->fd, r->buf + done, (unsigned)STK__MIN(r->len - done, 1u << 30),
                     r->off + done);
  sqe->flags |= IOSQE_ASYNC;
  io_uring_sqe_set_data(sqe, r);
  io->unsubmitted++;
  return 0;
}

static int ur_submit(struct stk_io *io, struct stk_io_req *r) {
  r->next = NULL;
  int rc = queue_read(io, r);
  if (rc == 0) io->inflight++;
  return rc;
}

static int ur_reap(struct stk_io *io, struct stk_io_req **done, int max, int block) {
  if (io->unsubmitted) {
    io_uring_submit(&io->ring);
    io->unsubmitted = 0;
  }
  int n = 0;
  while (n < max && io->inflight > 0) {
    struct io_uring_cqe *cqe;
    int rc = (block && n == 0) ? io_uring_wait_cqe(&io->ring, &cqe) : io_uring_peek_cqe(&io->ring, &cqe);
    if (rc == -EAGAIN) break;
    if (rc == -EINTR) continue;
    if (rc < 0) return stk__from_errno(-rc);
    struct stk_io_req *r = io_uring_cqe_get_data(cqe);
    int res = cqe->res;
    io_uring_cqe_seen(&io->ring, cqe);
    uint64_t got = (uint64_t)(uintptr_t)r->next;
    if (res < 0) {
      if (res == -EINTR || res == -EAGAIN) { /* retry the same read */
        queue_read(io, r);
        io_uring_submit(&io->ring);
        io->unsubmitted = 0;
        continue;
      }
      r->res = stk__from_errno(-res);
    } else if (res == 0 && got < r->len) {
      r->res = got >= (r->need ? r->need : r->len) ? 0 : STK_ETRUNC;
    } else if (got + (uint64_t)res < r->len) { /* short read: continue */
      r->next = (struct stk_io_req *)(uintptr_t)(got + (uint64_t)res);
      queue_read(io, r);
      io_uring_submit(&io->ring);
      io->unsubmitted = 0;
      continue;
    } else {
      r->res = 0;
    }
    r->next = NULL;
    io->inflight--;
    done[n++] = r;
  }
  return n;
}

const struct stk_io_ops stk__io_uring = {
    .name = "io_uring",
    .open = ur_open,
    .submit = ur_submit,
    .reap = ur_reap,
    .close = ur_close,
};
