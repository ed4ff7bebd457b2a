/* Pinned batch buffers for library users (the Python binding's
 * pin_memory=True): a struct stk_allocator over the CUDA runtime that
 * cuda.c loads at run time, so nothing links against CUDA and a machine
 * without a GPU gets a clear STK_ENOTSUP instead of a failed link.
 *
 * It also fences reuse: a pinned batch handed to the GPU with an
 * asynchronous copy may be released by its consumer while the copy is
 * still reading it, and the loader would then write the next batch into
 * memory in flight. stk_pinned_release records an event on the consumer's
 * stream and a fence thread gives the batch back to its loader only once
 * the event has completed; the consumer never waits. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"
#include "stoker/loader.h"

/* A release waiting for its event; ev NULL: wait for the whole device. */
struct fenced {
  struct fenced *next;
  struct stk_loader *l;
  struct stk_batch *b;
  cu_event ev;
  int dev;
};

struct pinned {
  struct stk__cuda *cu;
  int device;
  pthread_mutex_t mu;
  pthread_cond_t cv_work, cv_done;
  struct fenced *head, *tail; /* FIFO of releases to complete */
  struct fenced *spare;       /* finished entries, their events kept for reuse */
  long pending;               /* entries queued or being waited on */
  int thread_on, stop, warned;
  pthread_t thread;
};

static void *pinned_alloc(void *ctx, size_t size) {
  struct pinned *p = ctx;
  char err[STK_ERRMSG_MAX];
  /* Loader threads never chose a device: without this every rank would
   * make a context on device 0 at its first pinned buffer. */
  if (stk__cuda_use_device(p->cu, p->device, err)) {
    stk_log(STK_LOG_ERROR, "pinned memory: %s", err);
    return NULL;
  }
  void *mem = stk__cuda_host_alloc(p->cu, size, err);
  if (!mem) stk_log(STK_LOG_ERROR, "pinned memory: %s", err); /* the loader says only ENOMEM */
  return mem;
}

static void pinned_free(void *ctx, void *mem, size_t size) {
  (void)size;
  struct pinned *p = ctx;
  stk__cuda_host_free(p->cu, mem);
}

static struct pinned *pinned_of(const struct stk_allocator *a) {
  return a && a->alloc == pinned_alloc ? a->ctx : NULL;
}

/* -1: LOCAL_RANK (torchrun, mpirun wrappers, SLURM launchers set it) modulo
 * the devices visible, so that ranks each given one device by
 * CUDA_VISIBLE_DEVICES use theirs; else device 0. */
static int default_device(int ndev) {
  const char *s = getenv("LOCAL_RANK");
  if (!s || !*s) return 0;
  char *end;
  long r = strtol(s, &end, 10);
  if (*end || r < 0 || r > 1 << 20) return 0;
  return (int)(r % ndev);
}

int stk_pinned_allocator_open_device(struct stk_allocator *a, int device, char *errmsg) {
  if (!a) return stk__errf(errmsg, STK_EINVAL, "no allocator to fill");
  memset(a, 0, sizeof *a);
  struct stk__cuda *c = NULL;
  int rc = stk__cuda_open(&c, errmsg);
  if (rc) return rc;
  int ndev = stk__cuda_device_count(c);
  if (device < 0) device = default_device(ndev);
  if (device >= ndev) {
    stk__cuda_close(c);
    return stk__errf(errmsg, STK_EINVAL, "pinned memory on CUDA device %d: the runtime sees %d",
                     device, ndev);
  }
  struct pinned *p = calloc(1, sizeof *p);
  if (!p) {
    stk__cuda_close(c);
    return stk__errf(errmsg, STK_ENOMEM, "out of memory");
  }
  p->cu = c;
  p->device = device;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv_work, NULL);
  pthread_cond_init(&p->cv_done, NULL);
  a->alloc = pinned_alloc;
  a->free = pinned_free;
  a->ctx = p;
  return 0;
}

int stk_pinned_allocator_open(struct stk_allocator *a, char *errmsg) {
  return stk_pinned_allocator_open_device(a, -1, errmsg);
}

int stk_pinned_allocator_device(const struct stk_allocator *a) {
  struct pinned *p = pinned_of(a);
  return p ? p->device : -1;
}

/* The fence thread: completes releases in the order they were made. */
static void *fence_main(void *arg) {
  struct pinned *p = arg;
  char err[STK_ERRMSG_MAX];
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->head && !p->stop) pthread_cond_wait(&p->cv_work, &p->mu);
    struct fenced *f = p->head;
    if (!f) break; /* stopped, nothing left */
    p->head = f->next;
    if (!p->head) p->tail = NULL;
    pthread_mutex_unlock(&p->mu);
    /* The event's own device current, so this thread makes no context on
     * device 0 either. */
    int rc = stk__cuda_use_device(p->cu, f->dev, err);
    if (!rc)
      rc = f->ev ? stk__cuda_event_wait(p->cu, f->ev, err) : stk__cuda_device_sync(p->cu, err);
    /* A failed wait means a broken context (the runtime's errors are
     * sticky): the process's CUDA work is lost anyway, and holding the
     * buffer forever would hang the loader instead of letting the error
     * surface where the consumer calls CUDA next. */
    if (rc) stk_log(STK_LOG_ERROR, "pinned memory: %s; releasing the batch anyway", err);
    stk_batch_release(f->l, f->b);
    pthread_mutex_lock(&p->mu);
    f->l = NULL;
    f->b = NULL;
    f->next = p->spare;
    p->spare = f;
    p->pending--;
    pthread_cond_broadcast(&p->cv_done);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

/* A spare entry whose event lives on dev (made there if none), or NULL. */
static struct fenced *take_entry(struct pinned *p, int dev) {
  pthread_mutex_lock(&p->mu);
  struct fenced **pp = &p->spare, *f = NULL;
  for (; *pp; pp = &(*pp)->next)
    if ((*pp)->dev == dev) {
      f = *pp;
      *pp = f->next;
      break;
    }
  pthread_mutex_unlock(&p->mu);
  if (f) return f;
  if (!(f = calloc(1, sizeof *f))) return NULL;
  f->dev = dev;
  return f;
}

static void warn_once(struct pinned *p, const char *err) {
  pthread_mutex_lock(&p->mu);
  int first = !p->warned;
  p->warned = 1;
  pthread_mutex_unlock(&p->mu);
  if (first)
    stk_log(STK_LOG_WARN,
            "pinned memory: %s; batches are released after the whole device is idle instead", err);
}

void stk_pinned_release(const struct stk_allocator *a, struct stk_loader *l, struct stk_batch *b,
                        void *stream, int device) {
  struct pinned *p = pinned_of(a);
  if (!b) return;
  if (!p) { /* not a pinned allocator: nothing can be copying from it */
    stk_batch_release(l, b);
    return;
  }
  char err[STK_ERRMSG_MAX] = "";
  if (device < 0) device = p->device;
  struct fenced *f = take_entry(p, device);
  int rc = f ? stk__cuda_use_device(p->cu, device, err)
             : stk__errf(err, STK_ENOMEM, "out of memory for a release");
  if (!rc && !f->ev) rc = stk__cuda_event_new(p->cu, &f->ev, err);
  if (!rc) rc = stk__cuda_event_record(p->cu, f->ev, stream, err);
  if (rc) {
    warn_once(p, err);
    if (f && f->ev) {
      stk__cuda_event_free(p->cu, f->ev);
      f->ev = NULL;
    }
    if (!f) { /* no memory even for the entry: wait here */
      stk__cuda_device_sync(p->cu, NULL);
      stk_batch_release(l, b);
      return;
    }
  }
  f->l = l;
  f->b = b;
  f->next = NULL;
  pthread_mutex_lock(&p->mu);
  if (!p->thread_on && !p->stop) {
    if (pthread_create(&p->thread, NULL, fence_main, p) == 0) {
      p->thread_on = 1;
    } else { /* no thread: complete this release here */
      pthread_mutex_unlock(&p->mu);
      if (f->ev ? stk__cuda_event_wait(p->cu, f->ev, err) : stk__cuda_device_sync(p->cu, err))
        stk_log(STK_LOG_ERROR, "pinned memory: %s; releasing the batch anyway", err);
      stk_batch_release(l, b);
      pthread_mutex_lock(&p->mu);
      f->next = p->spare;
      p->spare = f;
      pthread_mutex_unlock(&p->mu);
      return;
    }
  }
  if (p->tail)
    p->tail->next = f;
  else
    p->head = f;
  p->tail = f;
  p->pending++;
  pthread_cond_signal(&p->cv_work);
  pthread_mutex_unlock(&p->mu);
}

void stk_pinned_flush(const struct stk_allocator *a) {
  struct pinned *p = pinned_of(a);
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  while (p->pending > 0) pthread_cond_wait(&p->cv_done, &p->mu);
  pthread_mutex_unlock(&p->mu);
}

void stk_pinned_allocator_close(struct stk_allocator *a) {
  struct pinned *p = pinned_of(a);
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->stop = 1;
  pthread_cond_signal(&p->cv_work);
  int joined = p->thread_on;
  pthread_mutex_unlock(&p->mu);
  if (joined) pthread_join(p->thread, NULL); /* it completes what is queued first */
  while (p->spare) {
    struct fenced *f = p->spare;
    p->spare = f->next;
    if (f->ev && !stk__cuda_use_device(p->cu, f->dev, NULL)) stk__cuda_event_free(p->cu, f->ev);
    free(f);
  }
  pthread_cond_destroy(&p->cv_work);
  pthread_cond_destroy(&p->cv_done);
  pthread_mutex_destroy(&p->mu);
  stk__cuda_close(p->cu);
  free(p);
  memset(a, 0, sizeof *a);
}
