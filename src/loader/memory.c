/* The loader's job buffers within its memory cap. The cap is a hard limit
 * on the bytes of job buffers: a job whose batch needs more than the
 * buffers it has first takes a large enough buffer from an idle job, then
 * frees idle jobs' buffers, and otherwise waits for the consumer to
 * release a batch (the reader's stk__job_memory says which). Jobs
 * themselves are made here and recycled by the ring (batch.c). */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "pipeline_impl.h"

/* Large buffers are aligned to 2 MiB and asked to use transparent huge
 * pages: a 146 MB sample then costs 70 page faults instead of 36,000 when
 * a buffer is first filled (the kernel still clears each page once). */
static void *default_alloc(void *ctx, size_t size) {
  (void)ctx;
  void *p = NULL;
  size_t a = size >= HUGE_ALIGN ? HUGE_ALIGN : ALIGN;
  if (posix_memalign(&p, a, size) != 0) return NULL;
  if (a == HUGE_ALIGN) madvise(p, size & ~(size_t)(HUGE_ALIGN - 1), MADV_HUGEPAGE);
  return p;
}
static void default_free(void *ctx, void *p, size_t size) {
  (void)ctx;
  (void)size;
  free(p);
}
const struct stk_allocator stk__default_allocator = {default_alloc, default_free, NULL};

/* Count delta bytes of buffers allocated (or freed, negative) and keep the
 * peak. */
static void mem_add(struct stk_loader *l, int64_t delta) {
  uint64_t now = atomic_fetch_add(&l->mem_bytes, (uint64_t)delta) + (uint64_t)delta;
  uint64_t peak = atomic_load(&l->mem_peak);
  while (now > peak && !atomic_compare_exchange_weak(&l->mem_peak, &peak, now)) {
  }
}

static size_t round_buf(size_t n) { return (n + ALIGN - 1) & ~(size_t)(ALIGN - 1); }

/* Grow a pooled buffer to at least need bytes (content not kept). Grows by
 * up to a quarter more than asked (so a run settles after a few batches),
 * as far as the memory cap allows. */
int stk__buf_reserve(struct stk_loader *l, uint8_t **buf, size_t *cap, size_t need) {
  if (*cap >= need) return 0;
  size_t ncap = round_buf(need + need / 4), min = round_buf(need);
  uint64_t used = atomic_load(&l->mem_bytes) - *cap;
  if (used + ncap > l->o.mem_cap) ncap = used + min > l->o.mem_cap ? min : l->o.mem_cap - used;
  ncap = round_buf(ncap);
  uint8_t *nb = l->o.alloc->alloc(l->o.alloc->ctx, ncap);
  if (!nb) return STK_ENOMEM;
  if (*buf) l->o.alloc->free(l->o.alloc->ctx, *buf, *cap);
  mem_add(l, (int64_t)ncap - (int64_t)*cap);
  *buf = nb;
  *cap = ncap;
  return 0;
}

static void buf_drop(struct stk_loader *l, uint8_t **buf, size_t *cap) {
  if (!*buf) return;
  l->o.alloc->free(l->o.alloc->ctx, *buf, *cap);
  mem_add(l, -(int64_t)*cap);
  *buf = NULL;
  *cap = 0;
}

void stk__job_free(struct stk_loader *l, struct job *j) {
  if (l->rd.maps)
    stk__io_region_free(j->raw, j->raw_cap);
  else if (j->raw)
    l->o.alloc->free(l->o.alloc->ctx, j->raw, j->raw_cap);
  if (j->out) l->o.alloc->free(l->o.alloc->ctx, j->out, j->out_cap);
  free(j->slots);
  free(j->offsets);
  free(j->lens);
  free(j->ids);
  free(j->labels);
  free(j->reqs);
  free(j->order);
  free(j->req_lo);
  free(j->req_hi);
  pthread_mutex_destroy(&j->err_mu);
  free(j);
}

struct job *stk__job_new(struct stk_loader *l) {
  uint32_t b = l->o.batch_size;
  struct job *j = calloc(1, sizeof *j);
  if (!j) return NULL;
  j->slots = calloc(b, sizeof *j->slots);
  j->offsets = calloc(b, sizeof *j->offsets);
  j->lens = calloc(b, sizeof *j->lens);
  j->ids = calloc(b, sizeof *j->ids);
  j->labels = calloc(b, sizeof *j->labels);
  j->reqs_cap = b;
  j->reqs = calloc(b, sizeof *j->reqs);
  j->order = calloc(b, sizeof *j->order);
  j->req_lo = calloc(b, sizeof *j->req_lo);
  j->req_hi = calloc(b, sizeof *j->req_hi);
  j->loader = l;
  pthread_mutex_init(&j->err_mu, NULL);
  if (!j->slots || !j->offsets || !j->lens || !j->ids || !j->labels || !j->reqs || !j->order ||
      !j->req_lo || !j->req_hi) {
    stk__job_free(l, j);
    return NULL;
  }
  return j;
}

/* Take a buffer of at least need bytes from an idle job (swapping in ours),
 * the smallest that fits; under l->mu. Returns 1 if one was taken. */
static int steal_idle(struct stk_loader *l, struct job *j, int out, size_t need) {
  struct job *best = NULL;
  for (struct job *f = l->free_jobs; f; f = f->next) {
    size_t c = out ? f->out_cap : f->raw_cap;
    if (c >= need && (!best || c < (out ? best->out_cap : best->raw_cap))) best = f;
  }
  if (!best) return 0;
  uint8_t **a = out ? &j->out : &j->raw, **b = out ? &best->out : &best->raw;
  size_t *ac = out ? &j->out_cap : &j->raw_cap, *bc = out ? &best->out_cap : &best->raw_cap;
  uint8_t *tp = *a;
  size_t tc = *ac;
  *a = *b;
  *ac = *bc;
  *b = tp;
  *bc = tc;
  return 1;
}

static uint64_t grow_by(size_t cap, uint64_t need) { return need > cap ? round_buf(need) - cap : 0; }

/* The allocator refused a buffer below the cap (pinned memory runs out
 * before the cap does where the driver limits it): with other batches
 * holding memory, free the idle jobs' buffers and wait for a release, as
 * for the cap, instead of failing the run; 1 if so. Once the consumer has
 * forced this batch through (it holds every other one), or nothing else is
 * outstanding, the failure stands. Under no lock; takes l->mu. */
static int alloc_failed_wait(struct stk_loader *l, int forced) {
  pthread_mutex_lock(&l->mu);
  for (struct job *f = l->free_jobs; f; f = f->next) {
    if (!l->rd.maps) buf_drop(l, &f->raw, &f->raw_cap);
    buf_drop(l, &f->out, &f->out_cap);
  }
  int wait = !forced && l->outstanding > 1, first = wait && !l->alloc_waited;
  if (wait) {
    l->mem_wait_rel = l->releases;
    l->alloc_waited = 1;
  }
  pthread_mutex_unlock(&l->mu);
  if (first)
    stk_log(STK_LOG_WARN, "the batch allocator refused a buffer below the memory cap; batches "
                          "wait for released ones from now on (lower mem_cap to avoid it)");
  return wait;
}

/* Buffers for a filled job within the memory cap: 0, STK_EAGAIN when it
 * must wait for the consumer to release a batch, or a code with
 * j->errmsg set. The reader's. */
int stk__job_memory(struct stk_loader *l, struct job *j, uint64_t raw, uint64_t out) {
  if (l->rd.maps) { /* raw is address space the shards are mapped into: not memory */
    int rc = raw > j->raw_cap ? stk__io_region_reserve(&j->raw, &j->raw_cap, raw + raw / 4)
             : j->mapped      ? stk__io_region_reset(j->raw, j->raw_cap)
                              : 0;
    if (rc) {
      char b[32];
      return stk__errf(j->errmsg, rc, "cannot reserve %s of address space for a batch",
                       stk_fmt_bytes(raw, b, sizeof b));
    }
    j->mapped = 0;
    raw = 0;
  }
  pthread_mutex_lock(&l->mu);
  if (raw && j->raw_cap < raw) steal_idle(l, j, 0, raw);
  if (out && j->out_cap < out) steal_idle(l, j, 1, out);
  uint64_t extra = grow_by(j->raw_cap, raw) + grow_by(j->out_cap, out);
  /* Idle jobs' buffers go first; a released batch's job is reused. */
  for (struct job *f = l->free_jobs; f && extra && atomic_load(&l->mem_bytes) + extra > l->o.mem_cap;
       f = f->next) {
    if (!l->rd.maps) buf_drop(l, &f->raw, &f->raw_cap);
    buf_drop(l, &f->out, &f->out_cap);
  }
  int rc = 0;
  if (extra && atomic_load(&l->mem_bytes) + extra > l->o.mem_cap) {
    if (l->outstanding <= 1 && round_buf(raw) + round_buf(out) > l->o.mem_cap) {
      char need[32], cap[32];
      rc = stk__errf(j->errmsg, STK_ENOMEM,
                     "a batch of %u samples needs %s of buffers, more than the memory cap of %s "
                     "(raise --mem-cap or lower --batch)",
                     j->n, stk_fmt_bytes(round_buf(raw) + round_buf(out), need, sizeof need),
                     stk_fmt_bytes(l->o.mem_cap, cap, sizeof cap));
    } else if (l->outstanding > 1 && !l->mem_force) {
      rc = STK_EAGAIN;
      l->mem_wait_rel = l->releases;
    } else if (l->outstanding > 1) {
      atomic_fetch_add(&l->mem_over, 1); /* the consumer holds every other batch */
    }
  }
  int forced = l->mem_force;
  l->mem_force = 0;
  pthread_mutex_unlock(&l->mu);
  if (rc) return rc;
  /* Our own old buffers are freed before the new ones count. */
  if (raw > j->raw_cap) buf_drop(l, &j->raw, &j->raw_cap);
  if (out > j->out_cap) buf_drop(l, &j->out, &j->out_cap);
  /* A token batch is written straight into out: no staging buffer (one
   * used to be made and left out of the cap's check). */
  if (!l->rd.maps && (raw || !l->tok))
    rc = stk__buf_reserve(l, &j->raw, &j->raw_cap, raw ? raw : 1);
  if (!rc && out) rc = stk__buf_reserve(l, &j->out, &j->out_cap, out);
  if (rc == STK_ENOMEM && alloc_failed_wait(l, forced)) return STK_EAGAIN;
  if (rc) {
    char b[32];
    stk__errf(j->errmsg, rc, "out of memory for a %s batch", stk_fmt_bytes(raw + out, b, sizeof b));
  }
  return rc;
}
