/* The thread pool behind the blocking engines (pread, mmap, mapcopy):
 * submitted requests wait in a FIFO, each worker runs the engine's
 * operation on one and then the request's on_read hook in the same thread
 * (while its bytes are in that core's cache), and finished requests wait
 * to be reaped.
 *
 * A reaper blocked in reap is woken when it has work: when the queue is
 * down to what the workers can start at once (it must refill it), or
 * WAKE_AFTER requests have completed (a job whose reads are done should
 * reach its decoders without waiting for the whole queue). Waking it on
 * every completion cost two context switches per request: with 128 KiB
 * records from the page cache (bench B1) the futex wakes and switches were
 * 12-18% of the loader's CPU on 2 cores. */
#include <pthread.h>
#include <stdlib.h>

#include "io.h"

#define WAKE_AFTER 8

struct stk_io {
  int (*op)(void *ctx, struct stk_io_req *r);
  void *ctx;  /* the engine's, for op */
  int copies; /* op runs a request's on_copy (and then on_read is not called) */
  pthread_mutex_t mu;
  pthread_cond_t work, done_cv;
  struct stk_io_req *queue, *queue_tail; /* submitted, not started */
  struct stk_io_req *done;               /* completed, not reaped */
  uint32_t inflight;
  uint32_t queued;       /* in the queue, not started */
  uint32_t ndone;        /* in done */
  int reaper_waiting;
  int stop;
  uint32_t nthreads;
  pthread_t *threads;
};

static void *worker(void *arg) {
  struct stk_io *p = arg;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->queue && !p->stop) pthread_cond_wait(&p->work, &p->mu);
    if (!p->queue) break;
    struct stk_io_req *r = p->queue;
    p->queue = r->next;
    if (!p->queue) p->queue_tail = NULL;
    p->queued--;
    pthread_mutex_unlock(&p->mu);
    r->res = p->op(p->ctx, r);
    if (r->res == 0 && r->on_read && !(p->copies && r->on_copy)) r->on_read(r);
    pthread_mutex_lock(&p->mu);
    r->next = p->done;
    p->done = r;
    p->ndone++;
    if (p->reaper_waiting && (p->queued <= p->nthreads || p->ndone >= WAKE_AFTER))
      pthread_cond_signal(&p->done_cv);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

void stk__io_pool_close(struct stk_io *p) {
  pthread_mutex_lock(&p->mu);
  p->stop = 1;
  pthread_cond_broadcast(&p->work);
  pthread_mutex_unlock(&p->mu);
  for (uint32_t i = 0; i < p->nthreads; i++) pthread_join(p->threads[i], NULL);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->work);
  pthread_cond_destroy(&p->done_cv);
  free(p->threads);
  free(p);
}

int stk__io_pool_open(struct stk_io **out, const struct stk_io_opts *o,
                      int (*op)(void *ctx, struct stk_io_req *r), void *ctx, int copies,
                      const char *what, char *err) {
  struct stk_io *p = calloc(1, sizeof *p);
  uint32_t n = o->threads ? o->threads : 4;
  if (p) p->threads = calloc(n, sizeof *p->threads);
  if (!p || !p->threads) {
    free(p);
    return stk__errf(err, STK_ENOMEM, "out of memory for the %s pool", what);
  }
  p->op = op;
  p->ctx = ctx;
  p->copies = copies;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->work, NULL);
  pthread_cond_init(&p->done_cv, NULL);
  for (; p->nthreads < n; p->nthreads++)
    if (pthread_create(&p->threads[p->nthreads], NULL, worker, p) != 0) {
      stk__io_pool_close(p);
      return stk__errf(err, STK_ESYS, "cannot start %s threads", what);
    }
  *out = p;
  return 0;
}

int stk__io_pool_submit(struct stk_io *p, struct stk_io_req *r) {
  r->next = NULL;
  pthread_mutex_lock(&p->mu);
  if (p->queue_tail)
    p->queue_tail->next = r;
  else
    p->queue = r;
  p->queue_tail = r;
  p->inflight++;
  p->queued++;
  pthread_cond_signal(&p->work);
  pthread_mutex_unlock(&p->mu);
  return 0;
}

int stk__io_pool_reap(struct stk_io *p, struct stk_io_req **done, int max, int block) {
  int n = 0;
  pthread_mutex_lock(&p->mu);
  while (block && !p->done && p->inflight > 0) {
    p->reaper_waiting = 1;
    pthread_cond_wait(&p->done_cv, &p->mu);
    p->reaper_waiting = 0;
  }
  while (p->done && n < max) {
    done[n++] = p->done;
    p->done = p->done->next;
  }
  p->ndone -= (uint32_t)n;
  p->inflight -= (uint32_t)n;
  pthread_mutex_unlock(&p->mu);
  return n;
}

void *stk__io_pool_ctx(struct stk_io *p) { return p->ctx; }
