/* The portable I/O engine: a pool of threads doing blocking pread. Used
 * where io_uring is missing or disabled (containers often forbid it), and
 * a fair ceiling for page-cache reads, which are memory copies that a
 * thread per core does as fast as anything. */
#include <errno.h>
#include <pthread.h>
#include <unistd.h>
#include <stdlib.h>

#include "io.h"

struct stk_io {
  pthread_mutex_t mu;
  pthread_cond_t work, done_cv;
  struct stk_io_req *queue, *queue_tail; /* submitted, not started */
  struct stk_io_req *done;               /* completed, not reaped */
  uint32_t inflight;
  int stop;
  uint32_t nthreads;
  pthread_t *threads;
};

/* Read len bytes, or to end of file when at least need bytes came. */
static int read_req(const struct stk_io_req *r) {
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

static void *worker(void *arg) {
  struct stk_io *io = arg;
  pthread_mutex_lock(&io->mu);
  for (;;) {
    while (!io->queue && !io->stop) pthread_cond_wait(&io->work, &io->mu);
    if (!io->queue) break;
    struct stk_io_req *r = io->queue;
    io->queue = r->next;
    if (!io->queue) io->queue_tail = NULL;
    pthread_mutex_unlock(&io->mu);
    r->res = read_req(r);
    if (r->res == 0 && r->on_read) r->on_read(r);
    pthread_mutex_lock(&io->mu);
    r->next = io->done;
    io->done = r;
    pthread_cond_signal(&io->done_cv);
  }
  pthread_mutex_unlock(&io->mu);
  return NULL;
}

static void pool_close(struct stk_io *io) {
  pthread_mutex_lock(&io->mu);
  io->stop = 1;
  pthread_cond_broadcast(&io->work);
  pthread_mutex_unlock(&io->mu);
  for (uint32_t i = 0; i < io->nthreads; i++) pthread_join(io->threads[i], NULL);
  pthread_mutex_destroy(&io->mu);
  pthread_cond_destroy(&io->work);
  pthread_cond_destroy(&io->done_cv);
  free(io->threads);
  free(io);
}

static int pool_open(struct stk_io **out, const struct stk_io_opts *o, char *err) {
  struct stk_io *io = calloc(1, sizeof *io);
  if (!io) return stk__errf(err, STK_ENOMEM, "out of memory for the pread pool");
  uint32_t n = o->threads ? o->threads : 4;
  io->threads = calloc(n, sizeof *io->threads);
  if (!io->threads) {
    free(io);
    return stk__errf(err, STK_ENOMEM, "out of memory for the pread pool");
  }
  pthread_mutex_init(&io->mu, NULL);
  pthread_cond_init(&io->work, NULL);
  pthread_cond_init(&io->done_cv, NULL);
  for (; io->nthreads < n; io->nthreads++)
    if (pthread_create(&io->threads[io->nthreads], NULL, worker, io) != 0) {
      pool_close(io);
      return stk__errf(err, STK_ESYS, "cannot start pread threads");
    }
  *out = io;
  return 0;
}

static int pool_submit(struct stk_io *io, struct stk_io_req *r) {
  r->next = NULL;
  pthread_mutex_lock(&io->mu);
  if (io->queue_tail)
    io->queue_tail->next = r;
  else
    io->queue = r;
  io->queue_tail = r;
  io->inflight++;
  pthread_cond_signal(&io->work);
  pthread_mutex_unlock(&io->mu);
  return 0;
}

static int pool_reap(struct stk_io *io, struct stk_io_req **done, int max, int block) {
  int n = 0;
  pthread_mutex_lock(&io->mu);
  while (block && !io->done && io->inflight > 0) pthread_cond_wait(&io->done_cv, &io->mu);
  while (io->done && n < max) {
    done[n++] = io->done;
    io->done = io->done->next;
  }
  io->inflight -= (uint32_t)n;
  pthread_mutex_unlock(&io->mu);
  return n;
}

const struct stk_io_ops stk__io_pread = {
    .name = "pread",
    .inline_hook = 1,
    .open = pool_open,
    .submit = pool_submit,
    .reap = pool_reap,
    .close = pool_close,
};
