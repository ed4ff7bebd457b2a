/* The thread pool behind the blocking engines (pread, mmap): submitted
 * requests wait in a FIFO, each worker runs the engine's operation on one
 * and then the request's on_read hook in the same thread (while its bytes
 * are in that core's cache), and finished requests wait to be reaped. */
#include <pthread.h>
#include <stdlib.h>

#include "io.h"

struct stk_io {
  int (*op)(const struct stk_io_req *r);
  pthread_mutex_t mu;
  pthread_cond_t work, done_cv;
  struct stk_io_req *queue, *queue_tail; /* submitted, not started */
  struct stk_io_req *done;               /* completed, not reaped */
  uint32_t inflight;
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
    pthread_mutex_unlock(&p->mu);
    r->res = p->op(r);
    if (r->res == 0 && r->on_read) r->on_read(r);
    pthread_mutex_lock(&p->mu);
    r->next = p->done;
    p->done = r;
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
                      int (*op)(const struct stk_io_req *r), const char *what, char *err) {
  struct stk_io *p = calloc(1, sizeof *p);
  uint32_t n = o->threads ? o->threads : 4;
  if (p) p->threads = calloc(n, sizeof *p->threads);
  if (!p || !p->threads) {
    free(p);
    return stk__errf(err, STK_ENOMEM, "out of memory for the %s pool", what);
  }
  p->op = op;
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
  pthread_cond_signal(&p->work);
  pthread_mutex_unlock(&p->mu);
  return 0;
}

int stk__io_pool_reap(struct stk_io *p, struct stk_io_req **done, int max, int block) {
  int n = 0;
  pthread_mutex_lock(&p->mu);
  while (block && !p->done && p->inflight > 0) pthread_cond_wait(&p->done_cv, &p->mu);
  while (p->done && n < max) {
    done[n++] = p->done;
    p->done = p->done->next;
  }
  p->inflight -= (uint32_t)n;
  pthread_mutex_unlock(&p->mu);
  return n;
}
