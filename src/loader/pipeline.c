/* The loader pipeline: one reader thread turns sampler output into
 * coalesced reads on an I/O engine, a pool of decode workers parses and
 * decodes each sample into its batch's buffer, and finished batches wait
 * in a ring that hands them to the consumer in sequence order.
 *
 * A "job" is one batch on its way: it owns the sample slots, the read
 * staging buffer and the output buffer, and is recycled after release, so
 * the steady state allocates nothing. The number of jobs outstanding (in
 * flight plus ready plus held by the consumer) is the ring depth plus two,
 * which bounds memory by depth x batch bytes. Depth grows by one each time
 * the consumer has to wait, while the memory cap allows.
 *
 * The memory cap is a hard limit on the bytes of job buffers: a job whose
 * batch needs more than the buffers it has first takes a large enough
 * buffer from an idle job, then frees idle jobs' buffers, and otherwise
 * waits for the consumer to release a batch. Samples far larger than a
 * read (unet3d: 90-224 MB) are read in pieces of READ_CHUNK bytes by as
 * many requests as the in-flight budget allows, so the engine's threads
 * share one sample instead of one thread copying it alone. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../dataset/dataset_impl.h"
#include "loader_impl.h"
#include "publish.h"
#include "tokens_impl.h"

#define ALIGN 4096u
#define FD_CACHE 256
#define MAX_COALESCE (8u << 20) /* bytes per coalesced read */
#define READ_CHUNK (8u << 20)   /* a longer range is read by several requests */
#define MAP_CHUNK (64u << 20)   /* the same for a mapping engine (a multiple of 2 MiB) */
#define HUGE_ALIGN (2u << 20)   /* large buffers: transparent huge pages */
#define ALL_FAILED_LIMIT 64     /* failures in a row that stop a run: all_failed_check */

struct slot {
  uint64_t id;
  uint32_t shard;
  uint64_t off, len;   /* byte range in the shard */
  uint64_t raw_pos;    /* where the range starts in job->raw */
  struct stk_field field; /* the decoded field, kept for a copy phase */
  uint64_t out_off, out_len;
  int32_t label;
  int err;             /* 0, or the sample failed (skip mode) */
  int verified;        /* checksums already checked by the I/O thread */
};

struct job {
  uint64_t seq, epoch;
  uint32_t n;
  struct slot *slots;
  uint64_t *offsets, *lens, *ids;
  int32_t *labels;
  uint8_t *raw;   /* read staging; the batch data for in-place fields. With a
                     mapping engine, an address-space reservation that
                     the shards' pages are mapped into (no memory of ours) */
  size_t raw_cap;
  int mapped;     /* raw holds mappings of an earlier batch */
  uint8_t *out;   /* decode output for copies and fixed-size decodes */
  size_t out_cap;
  struct stk_io_req *reqs;
  struct slot **order;  /* slots in file order */
  /* Request i reads whole samples order[req_lo[i] .. req_hi[i]), or a piece
   * of one sample when lo == hi (that sample is checked by its decoder). */
  uint32_t *req_lo, *req_hi;
  uint32_t nreqs, reqs_cap, reqs_next, reads_pending;
  struct stk_loader *loader;
  atomic_uint tasks_pending;
  int phase;      /* 1: parse+decode, 2: copy into out */
  atomic_int copy; /* batch data lives in out (a copy phase is needed) */
  int err;
  char errmsg[STK_ERRMSG_MAX];
  pthread_mutex_t err_mu;
  uint32_t skipped;
  struct stk_sampler_state state_after;
  struct stk_batch batch;
  struct job *next;
};

struct task {
  struct job *job;
  uint32_t begin, end;
};

struct fdent {
  uint32_t shard;
  int fd;
  uint32_t inflight;
  uint64_t last_use;
};

struct stk_loader {
  struct stk_dataset *ds;
  struct stk_tokens *tok; /* token windows (tokens.c) instead of samples, or NULL */
  struct stk_loader_opts o;
  const struct stk_decode_ops *dec;
  uint64_t fixed_out; /* bytes per sample for fixed-size decoders, else 0 */
  uint64_t mean_sample; /* mean stored bytes of a sample; 0 = unknown */
  struct stk_sampler *sampler;
  const struct stk_io_ops *io_ops;
  struct stk_io *io;
  uint64_t *file_size; /* plain files: size once known, else UINT64_MAX */

  pthread_mutex_t mu; /* guards everything below that is not atomic */
  pthread_cond_t cv_free, cv_ready, cv_task;
  struct job **jobs;  /* all jobs ever made */
  uint32_t njobs, maxjobs;
  struct job *free_jobs;
  struct job **ready; /* by seq % maxjobs */
  uint64_t next_seq;  /* next batch the consumer gets */
  uint64_t made_seq;  /* batches the reader has started */
  uint64_t outstanding;
  uint32_t depth;
  int reader_done;    /* no more jobs will be made */
  int failed;         /* a job failed in fail mode: stop */
  int inline_verify;  /* the I/O engine checks checksums as it reads */
  int maps;           /* the I/O engine maps shards into job->raw (no copy) */
  uint64_t page;      /* the system's page size */
  atomic_int cancel;
  struct task *tasks; /* circular task queue */
  uint32_t tasks_cap, task_head, task_len;
  int stop_workers;
  atomic_uint_fast64_t max_job_bytes; /* largest job's buffers (reader writes) */
  uint64_t releases;  /* batches released so far */
  atomic_uint_fast64_t reader_idle_ns; /* reader blocked on a full ring */
  uint64_t grow_mark; /* reader_idle_ns when the ring last grew */
  struct job *mem_wait; /* filled job waiting for buffer memory (reader's) */
  uint64_t mem_wait_seq; /* its seq, valid while mem_wait_on */
  uint64_t mem_wait_rel; /* releases when it began to wait */
  int mem_wait_on;
  int mem_force;      /* the consumer waits for mem_wait and holds the rest:
                         let it exceed the cap rather than deadlock */

  /* Reader-private. */
  uint64_t epoch;
  uint64_t epoch_taken; /* samples drawn in this epoch (for epoch_samples) */
  uint64_t epoch_batches; /* batches this epoch has given */
  int epoch_whole;        /* this epoch began at its first sample (not resumed) */
  int sampler_eof;
  struct fdent fds[FD_CACHE];
  uint64_t fd_clock;
  uint64_t inflight_bytes;
  uint32_t inflight_reqs;
  struct job *reading[64]; /* jobs in their read phase, oldest first */
  uint32_t nreading;

  pthread_t reader;
  pthread_t *workers;
  uint32_t nworkers;

  struct stage_ctr st[STK_STAGE_COUNT];
  struct stk_hist wait_hist;  /* consumer thread only */
  uint64_t consumer_wait_ns;
  uint64_t t_open;
  uint64_t batches_out, samples_out, bytes_out, skipped_out;
  atomic_uint_fast64_t read_ops, read_bytes, mem_bytes, mem_peak, mem_over;
  uint32_t depth_max_seen;
  struct stk_sampler_state state;
  /* Look-ahead (datasets behind a cache): samples the reader has drawn,
   * and the thread that stages the shards it will need next. */
  atomic_uint_fast64_t taken_total;
  struct stk__lookahead *la;
  struct stk__publish *pub; /* counters for `stoker watch` (publish.c) */
  _Atomic uint64_t ds_fp;   /* stk_sampler_fingerprint, taken at the first save */
  /* on_error skip: samples skipped so far, failures in a row, and the
   * latest failure (note_skip, all_failed_check). */
  atomic_uint_fast64_t skips_seen, fail_streak;
  pthread_mutex_t skip_mu;
  int last_skip_code;
  char last_skip[STK_ERRMSG_MAX + 32];
  char err[STK_ERRMSG_MAX];
};

/* By kind; FIELDS packs whole samples (decode_fields.c) and copies like
 * raw where its own functions are not called. */
static const struct stk_decode_ops *const decoders[] = {&stk__dec_raw, &stk__dec_jpeg,
                                                         &stk__dec_npy, &stk__dec_raw};

static void ctr_add(_Atomic uint64_t *c, uint64_t v) {
  atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

/* ---- buffers ------------------------------------------------------------ */

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
static const struct stk_allocator default_allocator = {default_alloc, default_free, NULL};

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
static int buf_reserve(struct stk_loader *l, uint8_t **buf, size_t *cap, size_t need) {
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

static void job_free(struct stk_loader *l, struct job *j) {
  if (l->maps)
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

static struct job *job_new(struct stk_loader *l) {
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
    job_free(l, j);
    return NULL;
  }
  return j;
}

/* Record a job's first failure; in skip mode the sample is dropped instead
 * (the caller decides which). */
static void job_fail(struct job *j, int code, const char *msg) {
  pthread_mutex_lock(&j->err_mu);
  if (!j->err) {
    j->err = code;
    snprintf(j->errmsg, sizeof j->errmsg, "%s", msg);
  }
  pthread_mutex_unlock(&j->err_mu);
}

/* A sample left out under on_error skip (or the default): the first is
 * logged as a warning, the rest at info level; the latest is kept for
 * all_failed_check's message. */
static void note_skip(struct stk_loader *l, uint64_t id, int code, const char *msg) {
  pthread_mutex_lock(&l->skip_mu); /* callers may hold l->mu: its own lock */
  l->last_skip_code = code;
  snprintf(l->last_skip, sizeof l->last_skip, "sample %llu: %s", (unsigned long long)id, msg);
  pthread_mutex_unlock(&l->skip_mu);
  if (atomic_fetch_add(&l->skips_seen, 1) == 0) {
    stk_log(STK_LOG_WARN, "skipping sample %llu: %s (later ones are counted in the stats' "
            "skipped and logged at info level)", (unsigned long long)id, msg);
    return;
  }
  stk_log(STK_LOG_INFO, "skipping sample %llu: %s", (unsigned long long)id, msg);
}

/* Whether a failure leaves only its sample out. skip: every one. The
 * default: a bad sample (malformed, corrupt, truncated, undecodable, a
 * file gone or unreadable), not a failing source (an I/O error, an origin
 * down past its retries, memory or space exhausted), which no later sample
 * would escape: the run stops at once, naming it. */
static int skips(const struct stk_loader *l, int code) {
  if (l->o.on_error == STK_ON_ERROR_SKIP) return 1;
  if (l->o.on_error == STK_ON_ERROR_FAIL) return 0;
  switch (code) {
  case STK_EIO: case STK_ENET: case STK_ETIMEDOUT: case STK_ENOMEM: case STK_ENOSPC:
  case STK_ECANCELED: case STK_ESYS: case STK_EBUSY: case STK_EAGAIN: return 0;
  default: return 1;
  }
}

static void slot_fail(struct stk_loader *l, struct job *j, struct slot *s, int code,
                      const char *msg) {
  s->err = code;
  if (skips(l, code)) return note_skip(l, s->id, code, msg);
  job_fail(j, code, msg);
}

/* ---- file descriptors ---------------------------------------------------- */

static struct fdent *fd_get(struct stk_loader *l, uint32_t shard, char *err) {
  struct fdent *victim = NULL; /* a free entry, else the least recently used idle one */
  for (int i = 0; i < FD_CACHE; i++) {
    struct fdent *e = &l->fds[i];
    if (e->fd >= 0 && e->shard == shard) {
      e->last_use = ++l->fd_clock;
      return e;
    }
    if (e->inflight > 0 || (victim && victim->fd < 0)) continue;
    if (!victim || e->fd < 0 || e->last_use < victim->last_use) victim = e;
  }
  if (!victim) {
    stk__errf(err, STK_EBUSY, "too many shards with reads in flight");
    return NULL;
  }
  if (victim->fd >= 0) stk__shard_close(l->ds, victim->shard, victim->fd);
  victim->fd = -1;
  int fd;
  /* In place, or staged through the cache (blocking until fetched; counted
   * there): the dataset layer decides. */
  if (stk__shard_open(l->ds, shard, l->o.direct ? STK_SHARD_DIRECT : 0, &fd,
                      (const int *)&l->cancel, err) != 0)
    return NULL;
  victim->fd = fd;
  victim->shard = shard;
  victim->inflight = 0;
  victim->last_use = ++l->fd_clock;
  return victim;
}

/* ---- the reader ---------------------------------------------------------- */

/* Take the next sample of this epoch for this rank; STK_EOF at the epoch's
 * end (the caller moves to the next epoch), or a code with err set when
 * counting a streamed dataset's next shards failed. */
static int next_sample(struct stk_loader *l, uint64_t *id, uint64_t *epoch, char *err) {
  if (l->sampler_eof) return STK_EOF;
  if (l->o.epoch_samples && l->epoch_taken >= l->o.epoch_samples) return STK_EOF;
  int rc = stk_sampler_next(l->sampler, id);
  if (rc == STK_EOF) return rc; /* the epoch's end */
  if (rc) return stk__errf(err, rc, "%s", stk__sampler_errmsg(l->sampler));
  *epoch = l->epoch;
  l->epoch_taken++;
  atomic_fetch_add_explicit(&l->taken_total, 1, memory_order_relaxed);
  return 0;
}

static void advance_epoch(struct stk_loader *l) {
  l->epoch++;
  l->epoch_taken = 0;
  l->epoch_batches = 0;
  l->epoch_whole = 1;
  if (l->epoch >= l->o.epochs)
    l->sampler_eof = 1;
  else
    stk_sampler_set_epoch(l->sampler, l->epoch);
}

/* Resolve where sample id lies: shard, range, label. */
static int locate(struct stk_loader *l, uint64_t id, struct slot *s, char *err) {
  struct stk_dataset *ds = l->ds;
  if (l->tok) { /* a window: copied from the mapped tokens by a worker, nothing to read */
    memset(s, 0, sizeof *s);
    s->id = id;
    s->label = -1;
    return 0;
  }
  size_t sh = stk__dataset_shard_of(ds, id);
  struct stk_shard *shard = &ds->shards[sh];
  s->id = id;
  s->shard = (uint32_t)sh;
  s->label = shard->label;
  s->err = 0;
  s->verified = 0;
  if (stk__shard_pending(ds, sh) || (stk__dataset_staged(ds) && !shard->idx)) {
    /* Behind a cache: staging the shard builds its index (and tells its size). */
    if (!fd_get(l, (uint32_t)sh, err)) return STK_EIO;
    if (!shard->idx) l->file_size[sh] = stk__shard_size(ds, sh);
  }
  if (shard->idx) {
    s->off = shard->idx[id - shard->first].off;
    s->len = shard->idx[id - shard->first].len;
    return 0;
  }
  /* A plain file: its size is learned from the descriptor opened anyway. */
  if (l->file_size[sh] == UINT64_MAX) {
    struct fdent *e = fd_get(l, (uint32_t)sh, err);
    if (!e) return STK_EIO;
    struct stat st;
    if (fstat(e->fd, &st) != 0) return stk__errf(err, STK_EIO, "%s: fstat failed", shard->path);
    l->file_size[sh] = (uint64_t)st.st_size;
  }
  s->off = 0;
  s->len = l->file_size[sh];
  return 0;
}

/* The I/O thread's part when the engine runs hooks inline: check the
 * checksums of the samples of one read while the bytes are hot in this
 * core's cache; the decode worker then parses without verifying. */
static void verify_read(struct stk_io_req *r) {
  struct job *j = r->ctx;
  struct stk_loader *l = j->loader;
  uint32_t i = (uint32_t)(r - j->reqs);
  char err[STK_ERRMSG_MAX];
  struct stk_sample smp;
  for (uint32_t q = j->req_lo[i]; q < j->req_hi[i]; q++) {
    struct slot *s = j->order[q];
    const struct stk_shard *sh = &l->ds->shards[s->shard];
    smp.nfields = 0;
    smp.index = s->id;
    int rc = l->ds->fmt->parse(l->ds, sh, j->raw + s->raw_pos, s->len, s->off, 1, &smp, err);
    if (rc)
      slot_fail(l, j, s, rc, err);
    else
      s->verified = 1;
  }
}

static int cmp_slot_pos(const void *a, const void *b) {
  const struct slot *x = *(struct slot *const *)a, *y = *(struct slot *const *)b;
  if (x->shard != y->shard) return x->shard < y->shard ? -1 : 1;
  return x->off < y->off ? -1 : x->off > y->off;
}

/* The run of slots order[k..m) that one read covers: same shard, ranges
 * that touch or overlap, at most MAX_COALESCE bytes. Sets the read's
 * bounds [*start, *end) (start aligned down to a) and returns m. */
static uint32_t coalesce(struct slot **order, uint32_t n, uint32_t k, uint64_t a, uint64_t *start,
                         uint64_t *end) {
  struct slot *s = order[k];
  *start = s->off & ~(a - 1);
  *end = s->off + s->len;
  uint32_t m = k + 1;
  /* A range inside the read so far joins it whatever its size (samples of
   * one file that are each read with the whole file). */
  while (m < n && order[m]->shard == s->shard && order[m]->off <= *end &&
         (order[m]->off + order[m]->len <= *end ||
          order[m]->off + order[m]->len - *start <= MAX_COALESCE)) {
    *end = STK__MAX(*end, order[m]->off + order[m]->len);
    m++;
  }
  return m;
}

/* Room for n requests in a job. */
static int reqs_reserve(struct job *j, uint32_t n) {
  if (n <= j->reqs_cap) return 0;
  struct stk_io_req *r = realloc(j->reqs, n * sizeof *r);
  if (r) j->reqs = r;
  uint32_t *lo = realloc(j->req_lo, n * sizeof *lo);
  if (lo) j->req_lo = lo;
  uint32_t *hi = realloc(j->req_hi, n * sizeof *hi);
  if (hi) j->req_hi = hi;
  if (!r || !lo || !hi) return STK_ENOMEM;
  j->reqs_cap = n;
  return 0;
}

/* How reads are laid out in a job's staging buffer. A read's start in the
 * file and in the buffer is aligned to 4 KiB for O_DIRECT and to pages for
 * a mapping engine, which also places a range of 2 MiB or more at an
 * address congruent to its file offset modulo 2 MiB (so the page cache's
 * large folios map a PMD at a time); a range longer than a chunk is read
 * by several requests. */
static uint64_t read_align(const struct stk_loader *l) {
  if (l->maps) return STK__MAX((uint64_t)ALIGN, l->page);
  return l->o.direct ? ALIGN : 1;
}
static uint64_t read_chunk(const struct stk_loader *l) { return l->maps ? MAP_CHUNK : READ_CHUNK; }
static uint64_t place(const struct stk_loader *l, uint64_t pos, uint64_t start, uint64_t span) {
  uint64_t a = read_align(l);
  pos = (pos + a - 1) & ~(a - 1);
  if (l->maps && span >= STK_IO_MAP_ALIGN) pos += (start - pos) & (STK_IO_MAP_ALIGN - 1);
  return pos;
}

/* Sort the job's samples into file order; the staging bytes the reads
 * need and how many requests they take. */
static void plan_size(struct stk_loader *l, struct job *j, uint64_t *bytes, uint32_t *nreqs) {
  struct slot **order = j->order;
  for (uint32_t i = 0; i < j->n; i++) order[i] = &j->slots[i];
  qsort(order, j->n, sizeof *order, cmp_slot_pos);
  uint64_t pos = 0, a = read_align(l), chunk = read_chunk(l), start, end, n = 0;
  for (uint32_t k = 0; k < j->n;) {
    k = coalesce(order, j->n, k, a, &start, &end);
    uint64_t span = ((end + a - 1) & ~(a - 1)) - start;
    pos = place(l, pos, start, span) + span;
    n += (span + chunk - 1) / chunk;
  }
  *bytes = pos;
  *nreqs = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

/* Lay the job's samples out in its staging buffer (already reserved) in
 * file order and build the read requests, merging ranges that touch and
 * splitting ranges longer than READ_CHUNK. With O_DIRECT each read is
 * widened to aligned bounds and placed at an aligned position. */
static void plan_build(struct stk_loader *l, struct job *j) {
  struct slot **order = j->order;
  uint64_t pos = 0, a = read_align(l), chunk = read_chunk(l), start, end;
  j->nreqs = 0;
  j->mapped = l->maps;
  for (uint32_t k = 0; k < j->n;) {
    uint32_t m = coalesce(order, j->n, k, a, &start, &end);
    uint64_t aend = (end + a - 1) & ~(a - 1), span = aend - start;
    pos = place(l, pos, start, span);
    for (uint32_t q = k; q < m; q++) order[q]->raw_pos = pos + (order[q]->off - start);
    int whole = span <= chunk;
    for (uint64_t at = 0; at < span; at += chunk) {
      uint64_t len = STK__MIN(chunk, span - at);
      j->req_lo[j->nreqs] = whole ? k : 0;
      j->req_hi[j->nreqs] = whole ? m : 0;
      struct stk_io_req *r = &j->reqs[j->nreqs++];
      memset(r, 0, sizeof *r);
      r->fd = -1;
      r->off = start + at;
      r->len = len;
      r->need = STK__MIN(start + at + len, end) - (start + at);
      r->buf = j->raw + pos + at;
      r->user = j;
      r->ctx = j;
      r->on_read = l->inline_verify && whole ? verify_read : NULL;
      r->res = (int)order[k]->shard; /* shard until submitted; fd resolved then */
    }
    pos += span;
    k = m;
  }
  j->reqs_next = 0;
  j->reads_pending = j->nreqs;
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

/* Buffers for a filled job within the memory cap: 0, STK_EAGAIN when it
 * must wait for the consumer to release a batch, or a code with
 * j->errmsg set. The reader's. */
static int job_memory(struct stk_loader *l, struct job *j, uint64_t raw, uint64_t out) {
  if (l->maps) { /* raw is address space the shards are mapped into: not memory */
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
    if (!l->maps) buf_drop(l, &f->raw, &f->raw_cap);
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
  l->mem_force = 0;
  pthread_mutex_unlock(&l->mu);
  if (rc) return rc;
  /* Our own old buffers are freed before the new ones count. */
  if (raw > j->raw_cap) buf_drop(l, &j->raw, &j->raw_cap);
  if (out > j->out_cap) buf_drop(l, &j->out, &j->out_cap);
  if (!l->maps) rc = buf_reserve(l, &j->raw, &j->raw_cap, raw ? raw : 1);
  if (!rc && out) rc = buf_reserve(l, &j->out, &j->out_cap, out);
  if (rc) {
    char b[32];
    stk__errf(j->errmsg, rc, "out of memory for a %s batch", stk_fmt_bytes(raw + out, b, sizeof b));
  }
  return rc;
}

/* Buffers and read requests of a filled job: 0, STK_EAGAIN (wait for
 * memory), or a code with j->errmsg set. */
static int plan_job(struct stk_loader *l, struct job *j) {
  if (l->tok) {
    j->nreqs = j->reqs_next = j->reads_pending = 0;
    return job_memory(l, j, 0, stk__tokens_batch_bytes(l->tok, l->o.batch_size));
  }
  uint64_t raw;
  uint32_t nreqs;
  plan_size(l, j, &raw, &nreqs);
  int rc = reqs_reserve(j, nreqs);
  if (rc) return stk__errf(j->errmsg, rc, "out of memory for %u read requests", nreqs);
  rc = job_memory(l, j, raw, l->fixed_out ? (uint64_t)l->fixed_out * j->n : 0);
  if (rc) return rc;
  plan_build(l, j);
  return 0;
}

/* Fill a job with the next batch from the sampler. Returns 0, or STK_EOF
 * when nothing is left; a partial batch at an epoch end is kept unless
 * drop_last. */
static int fill_job(struct stk_loader *l, struct job *j) {
  for (;;) {
    j->n = 0;
    j->err = 0;
    j->skipped = 0;
    j->errmsg[0] = 0;
    j->epoch = l->epoch;
    while (j->n < l->o.batch_size) {
      uint64_t id, ep;
      int rc = next_sample(l, &id, &ep, j->errmsg);
      if (rc == STK_EOF) break;
      if (rc) { /* the dataset could not be counted further: the run ends */
        j->err = rc;
        break;
      }
      rc = locate(l, id, &j->slots[j->n], j->errmsg);
      if (rc) {
        if (skips(l, rc)) {
          note_skip(l, id, rc, j->errmsg);
          j->errmsg[0] = 0;
          j->skipped++;
          continue;
        }
        j->err = rc;
        break;
      }
      j->n++;
    }
    stk_sampler_save(l->sampler, &j->state_after);
    int epoch_end = j->n < l->o.batch_size && !j->err;
    if (j->err) return 0;
    if (epoch_end) {
      int partial = j->n > 0, keep = partial && !l->o.drop_last;
      /* A whole epoch that gave this rank no batch: so will every later one
       * (its share depends only on the sample count, rank, world and batch
       * size), so the run ends here instead of spinning through them. */
      int barren = l->epoch_whole && l->epoch_batches == 0 && !keep;
      if (!l->sampler_eof) advance_epoch(l);
      if (keep) return 0;
      if (barren && !l->sampler_eof) {
        stk_log(STK_LOG_WARN, "rank %u of %u gets no batch of an epoch (batch size %u%s): its "
                 "run ends", l->o.sampler.rank, l->o.sampler.world ? l->o.sampler.world : 1,
                 l->o.batch_size, l->o.drop_last ? ", drop_last" : "");
        l->sampler_eof = 1;
      }
      if (l->sampler_eof) return STK_EOF;
      continue;
    }
    l->epoch_batches++;
    return 0;
  }
}

/* ---- decode workers ------------------------------------------------------ */

static void push_tasks(struct stk_loader *l, struct job *j) {
  uint32_t chunks = STK__MIN(j->n, l->nworkers * 2);
  if (chunks == 0) chunks = 1;
  atomic_store(&j->tasks_pending, chunks);
  pthread_mutex_lock(&l->mu);
  for (uint32_t c = 0; c < chunks; c++) {
    uint32_t b = (uint32_t)((uint64_t)j->n * c / chunks), e = (uint32_t)((uint64_t)j->n * (c + 1) / chunks);
    l->tasks[(l->task_head + l->task_len) % l->tasks_cap] = (struct task){j, b, e};
    l->task_len++;
  }
  pthread_cond_broadcast(&l->cv_task);
  pthread_mutex_unlock(&l->mu);
}

static const struct stk_field *pick_field(const struct stk_loader *l, const struct stk_sample *smp) {
  if (smp->nfields == 0) return NULL;
  if (!l->o.decode.field) return &smp->fields[0];
  for (int i = 0; i < smp->nfields; i++)
    if (strcmp(smp->fields[i].name, l->o.decode.field) == 0) return &smp->fields[i];
  return NULL;
}

/* Phase 1 for one sample: parse (checksums) and decode, or find the bytes
 * in place. */
static void do_sample(struct stk_loader *l, struct job *j, uint32_t i, void **tls, char *err) {
  struct slot *s = &j->slots[i];
  if (s->err) return;
  if (l->tok) {
    int rc = stk__tokens_fill(l->tok, s->id, j->out, l->o.batch_size, i, err);
    if (rc) return slot_fail(l, j, s, rc, err);
    s->out_off = (uint64_t)i * l->fixed_out;
    s->out_len = l->fixed_out;
    return;
  }
  const struct stk_shard *sh = &l->ds->shards[s->shard];
  struct stk_sample smp;
  memset(&smp, 0, sizeof smp);
  smp.label = -1;
  smp.index = s->id; /* files of several samples (DLIO's npz) pick theirs by it */
  int verify = !l->o.skip_verify && !s->verified;
  int rc = l->ds->fmt->parse(l->ds, sh, j->raw + s->raw_pos, s->len, s->off, verify, &smp, err);
  if (rc) return slot_fail(l, j, s, rc, err);
  if (smp.label >= 0) s->label = smp.label;
  if (l->o.decode.kind == STK_DECODE_FIELDS) { /* packed in the copy phase */
    rc = stk__fields_size(&l->o.decode, &smp, &s->out_len, err);
    if (rc) {
      char msg[STK_ERRMSG_MAX + 64];
      snprintf(msg, sizeof msg, "%s: offset %llu: sample %llu: %s", sh->path,
               (unsigned long long)s->off, (unsigned long long)s->id, err);
      return slot_fail(l, j, s, rc, msg);
    }
    atomic_store_explicit(&j->copy, 1, memory_order_relaxed);
    return;
  }
  const struct stk_field *f = pick_field(l, &smp);
  if (!f) {
    stk__errf(err, STK_EFORMAT, "%s: offset %llu: sample %llu has no field '%s'", sh->path,
              (unsigned long long)s->off, (unsigned long long)s->id,
              l->o.decode.field ? l->o.decode.field : "(any)");
    return slot_fail(l, j, s, STK_EFORMAT, err);
  }
  s->field = *f;
  if (l->fixed_out) { /* decode straight into the batch */
    uint8_t *dst = j->out + (uint64_t)i * l->fixed_out;
    struct stk_rng rng;
    stk_rng_seed(&rng, stk_mix64(stk_mix64(l->o.sampler.seed, j->epoch), s->id));
    rc = l->dec->decode(&l->o.decode, &tls[l->o.decode.kind], f, dst, l->fixed_out, &s->out_len, &rng, err);
    if (rc) {
      char msg[STK_ERRMSG_MAX + 64];
      snprintf(msg, sizeof msg, "%s: offset %llu: %s", sh->path, (unsigned long long)s->off, err);
      return slot_fail(l, j, s, rc, msg);
    }
    s->out_off = (uint64_t)i * l->fixed_out;
    return;
  }
  uint64_t size;
  rc = l->dec->out_size(&l->o.decode, f, &size, err);
  if (rc == 0 && size > (f->encoding == STK_ENC_NONE ? f->len : f->raw_len))
    rc = stk__errf(err, STK_EFORMAT, "decoded size larger than the field");
  if (rc) {
    char msg[STK_ERRMSG_MAX + 64];
    snprintf(msg, sizeof msg, "%s: offset %llu: %s", sh->path, (unsigned long long)s->off, err);
    return slot_fail(l, j, s, rc, msg);
  }
  s->out_len = size;
  if (f->encoding == STK_ENC_NONE) /* in place: the payload is the field's tail */
    s->out_off = (uint64_t)(f->data + f->len - size - j->raw);
  else
    atomic_store_explicit(&j->copy, 1, memory_order_relaxed);
}

/* Phase 2 for one sample: copy or inflate into the output buffer. */
static void copy_sample(struct stk_loader *l, struct job *j, uint32_t i, void **tls, char *err) {
  struct slot *s = &j->slots[i];
  if (s->err) return;
  uint64_t got = 0;
  int rc;
  if (l->o.decode.kind == STK_DECODE_FIELDS) { /* parse again: the fields point into raw */
    const struct stk_shard *sh = &l->ds->shards[s->shard];
    struct stk_sample smp;
    memset(&smp, 0, sizeof smp);
    smp.label = -1;
    smp.index = s->id;
    rc = l->ds->fmt->parse(l->ds, sh, j->raw + s->raw_pos, s->len, s->off, 0, &smp, err);
    if (!rc) rc = stk__fields_pack(&l->o.decode, &smp, j->out + s->out_off, s->out_len, &got, err);
    if (rc) return slot_fail(l, j, s, rc, err);
    s->out_len = got;
    return;
  }
  if (s->field.encoding == STK_ENC_NONE) {
    memcpy(j->out + s->out_off, s->field.data + s->field.len - s->out_len, s->out_len);
    return;
  }
  rc = l->dec->decode(&l->o.decode, &tls[l->o.decode.kind], &s->field, j->out + s->out_off, s->out_len,
                      &got, NULL, err);
  if (rc) return slot_fail(l, j, s, rc, err);
  s->out_len = got;
}

static void ring_put(struct stk_loader *l, struct job *j);

/* Lay out a batch after phase 1; start the copy phase if one is needed. */
static void finish_phase1(struct stk_loader *l, struct job *j) {
  uint64_t t0 = stk_now_ns();
  if (!j->copy || j->err) {
    ctr_add(&l->st[STK_STAGE_BATCH].busy_ns, stk_now_ns() - t0);
    ring_put(l, j);
    return;
  }
  uint64_t total = 0;
  for (uint32_t i = 0; i < j->n; i++)
    if (!j->slots[i].err) {
      j->slots[i].out_off = total;
      total += (j->slots[i].out_len + 63) & ~63ull;
    }
  if (buf_reserve(l, &j->out, &j->out_cap, total ? total : 1) != 0) {
    job_fail(j, STK_ENOMEM, "out of memory for a batch's output buffer");
    ring_put(l, j);
    return;
  }
  j->phase = 2;
  ctr_add(&l->st[STK_STAGE_BATCH].busy_ns, stk_now_ns() - t0);
  push_tasks(l, j);
}

static void *worker_main(void *arg) {
  struct stk_loader *l = arg;
  void *tls[STK__ARRAY_LEN(decoders)] = {NULL};
  char err[STK_ERRMSG_MAX];
  pthread_mutex_lock(&l->mu);
  for (;;) {
    uint64_t t0 = stk_now_ns();
    while (!l->task_len && !l->stop_workers) pthread_cond_wait(&l->cv_task, &l->mu);
    ctr_add(&l->st[STK_STAGE_DECODE].wait_in_ns, stk_now_ns() - t0);
    if (!l->task_len) break;
    struct task t = l->tasks[l->task_head];
    l->task_head = (l->task_head + 1) % l->tasks_cap;
    l->task_len--;
    pthread_mutex_unlock(&l->mu);

    uint64_t t1 = stk_now_ns(), bytes = 0;
    struct job *j = t.job;
    int phase = j->phase; /* fixed until this job's last task of the phase */
    for (uint32_t i = t.begin; i < t.end; i++) {
      if (phase == 2)
        copy_sample(l, j, i, tls, err);
      else
        do_sample(l, j, i, tls, err);
      bytes += j->slots[i].out_len;
    }
    int stage = phase == 2 ? STK_STAGE_BATCH : STK_STAGE_DECODE;
    ctr_add(&l->st[stage].busy_ns, stk_now_ns() - t1);
    if (phase != 2) {
      ctr_add(&l->st[STK_STAGE_DECODE].items, t.end - t.begin);
      ctr_add(&l->st[STK_STAGE_DECODE].bytes, bytes);
    }
    if (atomic_fetch_sub(&j->tasks_pending, 1) == 1) {
      if (phase == 2)
        ring_put(l, j);
      else
        finish_phase1(l, j);
    }
    pthread_mutex_lock(&l->mu);
  }
  pthread_mutex_unlock(&l->mu);
  for (size_t k = 0; k < STK__ARRAY_LEN(decoders); k++)
    if (tls[k] && decoders[k]->thread_free) decoders[k]->thread_free(tls[k]);
  return NULL;
}

/* ---- the ring ------------------------------------------------------------ */

/* Under the default policy, ALL_FAILED_LIMIT samples in a row that fail
 * (counted by batch: one kept sample ends a streak), or as many as this
 * rank's whole epoch where that is fewer, stop the run with the latest
 * failure: a wrong dataset, field or decoder, or a dataset gone from under
 * the run, not a few bad files. kept: samples of j that made it. */
static void all_failed_check(struct stk_loader *l, struct job *j, uint32_t kept) {
  if (kept) {
    atomic_store(&l->fail_streak, 0);
    return;
  }
  uint64_t streak = atomic_fetch_add(&l->fail_streak, j->skipped) + j->skipped;
  if (l->o.on_error != STK_ON_ERROR_DEFAULT || j->err || !j->skipped) return;
  uint64_t limit = ALL_FAILED_LIMIT;
  if (!l->tok && l->ds->nsamples) { /* counted: a smaller epoch failed whole */
    uint32_t world = l->o.sampler.world ? l->o.sampler.world : 1;
    uint64_t share = stk__share_len(l->ds->nsamples, 0, l->o.sampler.rank, world, l->o.shares);
    if (l->o.epoch_samples && share > l->o.epoch_samples) share = l->o.epoch_samples;
    if (share && share < limit) limit = share;
  }
  if (streak < limit) return;
  pthread_mutex_lock(&l->skip_mu);
  j->err = l->last_skip_code ? l->last_skip_code : STK_EDECODE;
  snprintf(j->errmsg, sizeof j->errmsg,
           "%llu samples in a row failed (is the dataset, field or decoder right? "
           "on_error=skip goes on regardless); the latest: %.300s",
           (unsigned long long)streak, l->last_skip);
  pthread_mutex_unlock(&l->skip_mu);
}

/* Make the batch view and publish the job for the consumer. */
static void ring_put(struct stk_loader *l, struct job *j) {
  uint32_t k = 0;
  uint64_t bytes = 0;
  for (uint32_t i = 0; i < j->n; i++) {
    struct slot *s = &j->slots[i];
    if (s->err) {
      j->skipped++;
      continue;
    }
    j->offsets[k] = s->out_off;
    j->lens[k] = s->out_len;
    j->ids[k] = s->id;
    j->labels[k] = s->label;
    bytes += s->out_len;
    k++;
  }
  all_failed_check(l, j, k);
  struct stk_batch *b = &j->batch;
  b->n = k;
  b->epoch = j->epoch;
  b->seq = j->seq;
  b->data = (j->copy || l->fixed_out) ? j->out : j->raw;
  b->bytes = bytes;
  b->offsets = j->offsets;
  b->len = j->lens;
  b->indices = j->ids;
  b->labels = j->labels;
  b->skipped = j->skipped;
  ctr_add(&l->st[STK_STAGE_BATCH].items, 1);
  ctr_add(&l->st[STK_STAGE_BATCH].bytes, bytes);
  pthread_mutex_lock(&l->mu);
  l->ready[j->seq % l->maxjobs] = j;
  pthread_cond_broadcast(&l->cv_ready);
  pthread_mutex_unlock(&l->mu);
}

/* ---- the reader thread --------------------------------------------------- */

/* Get a free job if the ring has room (never blocks). */
static struct job *try_get_job(struct stk_loader *l) {
  struct job *j = NULL;
  pthread_mutex_lock(&l->mu);
  if (l->outstanding < (uint64_t)l->depth + 2 && !l->failed) {
    if (l->free_jobs) {
      j = l->free_jobs;
      l->free_jobs = j->next;
    } else if (l->njobs < l->maxjobs) {
      j = job_new(l);
      if (j) l->jobs[l->njobs++] = j;
    }
    if (j) l->outstanding++;
  }
  pthread_mutex_unlock(&l->mu);
  return j;
}

/* Fail each sample whose bytes overlap request q's part of the buffer. */
static void fail_range(struct stk_loader *l, struct job *j, struct stk_io_req *q, int code,
                       const char *msg) {
  for (uint32_t i = 0; i < j->n; i++) {
    struct slot *s = &j->slots[i];
    const uint8_t *b = j->raw + s->raw_pos;
    if (!s->err && b < q->buf + q->len && b + s->len > q->buf) slot_fail(l, j, s, code, msg);
  }
}

static void submit_some(struct stk_loader *l) {
  for (uint32_t r = 0; r < l->nreading; r++) {
    struct job *j = l->reading[r];
    while (j->reqs_next < j->nreqs) {
      struct stk_io_req *q = &j->reqs[j->reqs_next];
      /* Mapped bytes are the page cache's, not buffers: only requests count. */
      if (l->inflight_reqs >= l->o.io_depth ||
          (!l->maps && l->inflight_bytes > 0 && l->inflight_bytes + q->len > l->o.max_inflight))
        return;
      char err[STK_ERRMSG_MAX];
      struct fdent *e = fd_get(l, (uint32_t)q->res, err);
      if (!e) { /* e.g. a shard removed mid-run: its samples fail (or skip) */
        fail_range(l, j, q, STK_EIO, err);
        j->reqs_next++;
        j->reads_pending--;
        continue;
      }
      q->fd = e->fd;
      q->user = e;
      e->inflight++;
      l->io_ops->submit(l->io, q);
      l->inflight_reqs++;
      l->inflight_bytes += q->len;
      j->reqs_next++;
    }
  }
}

static struct job *job_of_req(struct stk_loader *l, struct stk_io_req *q) {
  for (uint32_t r = 0; r < l->nreading; r++) {
    struct job *j = l->reading[r];
    if (q >= j->reqs && q < j->reqs + j->nreqs) return j;
  }
  return NULL;
}

/* Report a failed read against each sample it covers (a piece of one). */
static void read_failed(struct stk_loader *l, struct job *j, struct stk_io_req *q) {
  for (uint32_t i = 0; i < j->n; i++) {
    struct slot *s = &j->slots[i];
    const uint8_t *b = j->raw + s->raw_pos;
    if (!s->err && b < q->buf + q->len && b + s->len > q->buf) {
      char msg[STK_ERRMSG_MAX];
      snprintf(msg, sizeof msg, "%s: offset %llu: read of %llu bytes failed: %s",
               l->ds->shards[s->shard].path, (unsigned long long)s->off,
               (unsigned long long)s->len,
               q->res == STK_ETRUNC ? "file is shorter than its index says" : stk_strerror(q->res));
      slot_fail(l, j, s, q->res, msg);
    }
  }
}

static void reap_some(struct stk_loader *l, int block) {
  struct stk_io_req *done[64];
  int n = l->io_ops->reap(l->io, done, 64, block);
  if (n < 0) {
    stk_log(STK_LOG_ERROR, "I/O engine failed: %s", stk_strerror(n));
    return;
  }
  for (int k = 0; k < n; k++) {
    struct stk_io_req *q = done[k];
    struct fdent *e = q->user;
    e->inflight--;
    struct job *j = job_of_req(l, q);
    l->inflight_reqs--;
    l->inflight_bytes -= q->len;
    ctr_add(&l->read_ops, 1);
    ctr_add(&l->read_bytes, q->len);
    q->user = j;
    if (q->res) read_failed(l, j, q);
    j->reads_pending--;
  }
  /* Hand finished jobs to the decoders, oldest first. */
  uint32_t w = 0;
  for (uint32_t r = 0; r < l->nreading; r++) {
    struct job *j = l->reading[r];
    if (j->reads_pending == 0 && j->reqs_next == j->nreqs) {
      uint64_t bytes = 0;
      for (uint32_t i = 0; i < j->n; i++) bytes += j->slots[i].len;
      ctr_add(&l->st[STK_STAGE_READ].items, j->n);
      ctr_add(&l->st[STK_STAGE_READ].bytes, bytes);
      if (j->n == 0 || j->err)
        ring_put(l, j);
      else
        push_tasks(l, j);
    } else {
      l->reading[w++] = j;
    }
  }
  l->nreading = w;
}

/* Plan a filled job's reads and put it in its read phase, or leave it in
 * l->mem_wait (STK_EAGAIN) until a released batch frees memory. */
static int plan_or_wait(struct stk_loader *l, struct job *j) {
  if (!j->err && j->n > 0) {
    int rc = plan_job(l, j);
    if (rc == STK_EAGAIN) {
      l->mem_wait = j;
      pthread_mutex_lock(&l->mu);
      l->mem_wait_seq = j->seq;
      l->mem_wait_on = 1;
      pthread_mutex_unlock(&l->mu);
      return rc;
    }
    if (rc && j->errmsg[0])
      j->err = rc; /* the message is in place (the reader owns the job here) */
    else if (rc)
      job_fail(j, rc, "out of memory for a batch");
  }
  if (l->mem_wait == j) {
    l->mem_wait = NULL;
    pthread_mutex_lock(&l->mu);
    l->mem_wait_on = 0;
    pthread_mutex_unlock(&l->mu);
  }
  if (j->err) {
    j->nreqs = j->reqs_next = j->reads_pending = 0;
  }
  uint64_t jb = (l->maps ? 0 : j->raw_cap) + j->out_cap; /* memory, not address space */
  if (jb > atomic_load_explicit(&l->max_job_bytes, memory_order_relaxed))
    atomic_store_explicit(&l->max_job_bytes, jb, memory_order_relaxed);
  l->reading[l->nreading++] = j;
  return 0;
}

/* Start a job: fill it, then plan its reads. */
static int start_job(struct stk_loader *l, struct job *j) {
  j->copy = 0;
  j->phase = 1;
  int rc = fill_job(l, j);
  if (rc == STK_EOF) return rc;
  j->seq = l->made_seq++;
  return plan_or_wait(l, j);
}

static void *reader_main(void *arg) {
  struct stk_loader *l = arg;
  uint64_t t_start = stk_now_ns(), blocked = 0;
  int eof = 0;
  while (!atomic_load(&l->cancel)) {
    if (l->mem_wait) plan_or_wait(l, l->mem_wait);
    /* Keep a few jobs in their read phase so I/O overlaps decode. */
    while (!eof && !l->mem_wait && l->nreading < 4 && l->nreading < STK__ARRAY_LEN(l->reading)) {
      struct job *j = try_get_job(l);
      if (!j) break;
      if (start_job(l, j) == STK_EOF) {
        pthread_mutex_lock(&l->mu);
        j->next = l->free_jobs;
        l->free_jobs = j;
        l->outstanding--;
        pthread_mutex_unlock(&l->mu);
        eof = 1;
      }
    }
    submit_some(l);
    if (l->inflight_reqs > 0) {
      reap_some(l, 1);
      continue;
    }
    if (l->nreading > 0) { /* jobs with nothing to read (errors, empty) */
      reap_some(l, 0);
      continue;
    }
    if (eof && !l->mem_wait) break;
    /* Nothing in flight and no free job (the ring is full), or no memory
     * for the next job's buffers until a batch is released. */
    uint64_t t0 = stk_now_ns();
    pthread_mutex_lock(&l->mu);
    if (l->mem_wait)
      while (l->releases == l->mem_wait_rel && !l->mem_force && !atomic_load(&l->cancel) && !l->failed)
        pthread_cond_wait(&l->cv_free, &l->mu);
    else
      while (l->outstanding >= (uint64_t)l->depth + 2 && !atomic_load(&l->cancel) && !l->failed)
        pthread_cond_wait(&l->cv_free, &l->mu);
    int failed = l->failed, mem = l->mem_wait != NULL;
    pthread_mutex_unlock(&l->mu);
    blocked += stk_now_ns() - t0;
    if (!mem) atomic_fetch_add(&l->reader_idle_ns, stk_now_ns() - t0);
    if (failed) break;
  }
  while (l->inflight_reqs > 0) reap_some(l, 1); /* never leave reads in flight */
  if (l->mem_wait) { /* stopped while it waited: it goes back unread */
    pthread_mutex_lock(&l->mu);
    l->mem_wait->next = l->free_jobs;
    l->free_jobs = l->mem_wait;
    l->outstanding--;
    l->mem_wait_on = 0;
    pthread_mutex_unlock(&l->mu);
    l->mem_wait = NULL;
  }
  ctr_add(&l->st[STK_STAGE_READ].wait_out_ns, blocked);
  ctr_add(&l->st[STK_STAGE_RING].wait_out_ns, blocked);
  ctr_add(&l->st[STK_STAGE_READ].busy_ns, stk_now_ns() - t_start - blocked);
  pthread_mutex_lock(&l->mu);
  l->reader_done = 1;
  pthread_cond_broadcast(&l->cv_ready);
  pthread_mutex_unlock(&l->mu);
  return NULL;
}

/* ---- public -------------------------------------------------------------- */

static long ncores(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? n : 1;
}

/* Buffered reads of samples at least this large go to the pread pool by
 * default: its threads check checksums right after copying the bytes, and
 * its per-request handoff is small against the copy. Smaller samples go to
 * io_uring, which batches submissions (docs/internals/loader.md). */
#define AUTO_PREAD_BYTES (64u << 10)
/* Samples larger than a read (unet3d's 90-224 MB) are mapped instead of
 * copied, unless the caller gave its own allocator (pinned memory: the
 * batches must live there) or asked for O_DIRECT. */
#define AUTO_MMAP_BYTES READ_CHUNK

/* Mean stored bytes of a sample, from the indexes (or the cache's shard
 * sizes); 0 when unknown without opening files (plain files). */
static uint64_t mean_sample_bytes(struct stk_dataset *ds) {
  uint64_t bytes = 0, n = 0;
  for (size_t i = 0; i < ds->nshards; i++) {
    const struct stk_shard *sh = &ds->shards[i];
    if (!stk__dataset_all_counted(ds) && i >= ds->counted) continue; /* not counted yet */
    if (sh->idx) {
      for (uint64_t k = 0; k < sh->count; k++) bytes += sh->idx[k].len;
    } else if (stk__dataset_staged(ds)) {
      uint64_t b = stk__shard_size(ds, i);
      if (b == UINT64_MAX) continue;
      bytes += b;
    } else {
      continue;
    }
    n += sh->count;
  }
  return n ? bytes / n : 0;
}

static int validate(struct stk_loader *l, char *err) {
  struct stk_loader_opts *o = &l->o;
  if (!o->batch_size) o->batch_size = 32;
  if (!o->threads) o->threads = (uint32_t)ncores();
  if (!o->epochs) o->epochs = 1;
  /* A streamed dataset has counted nothing yet: its first shard, which the
   * first batch needs anyway, tells the sample size the engine and the
   * budgets follow. */
  if (l->ds->streamed) {
    int rc = stk__dataset_count_through(l->ds, 1, 0, NULL, err);
    if (rc) return rc;
  }
  l->mean_sample = l->tok ? stk__tokens_batch_bytes(l->tok, 1) : mean_sample_bytes(l->ds);
  if (!o->io_depth) o->io_depth = 64;
  if (!o->prefetch) o->prefetch = 2;
  if (!o->prefetch_max) o->prefetch_max = 16;
  if (o->prefetch_max < o->prefetch) o->prefetch_max = o->prefetch;
  /* Defaults that follow the sample size: room for four batches (at least
   * 1 GiB, at most half the RAM), and reads of two samples in flight (at
   * least 64 MiB, at most half the cap). */
  uint64_t batch_bytes = l->mean_sample * o->batch_size;
  if (!o->mem_cap) {
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    uint64_t half = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz / 2 : 4ull << 30;
    o->mem_cap = STK__MAX(1ull << 30, STK__MIN(4 * batch_bytes, half));
  }
  if (!o->max_inflight)
    o->max_inflight = STK__MAX(64ull << 20, STK__MIN(2 * l->mean_sample, o->mem_cap / 2));
  if (stk__dataset_staged(l->ds)) {
    /* Whole shards are staged: a bounded shuffle keeps the look-ahead
     * useful (a full permutation touches every shard at once), and staged
     * copies are read through the page cache or from memory. */
    if (o->sampler.shuffle == STK_SHUFFLE_AUTO) o->sampler.shuffle = STK_SHUFFLE_BLOCK;
    o->direct = 0;
  }
  if (!o->alloc) o->alloc = &default_allocator;
  if (o->batch_size > (1u << 20))
    return stk__errf(err, STK_EINVAL, "batch size %u is larger than 1048576", o->batch_size);
  if (o->threads > 1024) return stk__errf(err, STK_EINVAL, "%u decode threads is too many", o->threads);
  if (o->decode.kind < 0 || o->decode.kind >= (int)STK__ARRAY_LEN(decoders))
    return stk__errf(err, STK_EINVAL, "unknown decode kind %d", o->decode.kind);
  if (o->decode.kind == STK_DECODE_JPEG) {
    struct stk_decode_cfg *c = &o->decode;
    if (!c->out_h) c->out_h = 224;
    if (!c->out_w) c->out_w = 224;
    if (c->out_h < 1 || c->out_w < 1 || c->out_h > 16384 || c->out_w > 16384)
      return stk__errf(err, STK_EINVAL, "output size %dx%d is out of range", c->out_w, c->out_h);
  }
  return 0;
}

static void loader_free(struct stk_loader *l) {
  for (uint32_t i = 0; i < l->njobs; i++) job_free(l, l->jobs[i]);
  for (int i = 0; i < FD_CACHE; i++)
    if (l->fds[i].fd >= 0) stk__shard_close(l->ds, l->fds[i].shard, l->fds[i].fd);
  if (l->io) l->io_ops->close(l->io);
  stk_sampler_close(l->sampler);
  free(l->jobs);
  free(l->ready);
  free(l->tasks);
  free(l->workers);
  free(l->file_size);
  pthread_mutex_destroy(&l->mu);
  pthread_mutex_destroy(&l->skip_mu);
  pthread_cond_destroy(&l->cv_free);
  pthread_cond_destroy(&l->cv_ready);
  pthread_cond_destroy(&l->cv_task);
  free(l);
}

static int loader_open(struct stk_loader **out, struct stk_dataset *ds, struct stk_tokens *tok,
                       const struct stk_loader_opts *opts, char *errmsg) {
  char err[STK_ERRMSG_MAX] = "";
  struct stk_loader *l = calloc(1, sizeof *l);
  if (!l) return stk__errf(errmsg, STK_ENOMEM, "out of memory");
  l->ds = ds;
  l->tok = tok;
  l->epoch_whole = 1;
  if (opts) stk__loader_opts_copy(&l->o, opts); /* an older caller's struct may be shorter */
  if (tok) { /* the order is the windows' own; each is copied from mapped tokens */
    l->o.sampler.shuffle = STK_SHUFFLE_NONE;
    l->o.sampler.seed = stk__tokens_seed(tok);
    l->o.decode.kind = STK_DECODE_RAW;
    l->o.io_engine = "pread";
    l->o.direct = 0;
    l->fixed_out = stk__tokens_row_bytes(tok);
  }
  pthread_mutex_init(&l->mu, NULL);
  pthread_mutex_init(&l->skip_mu, NULL);
  pthread_cond_init(&l->cv_free, NULL);
  pthread_cond_init(&l->cv_ready, NULL);
  pthread_cond_init(&l->cv_task, NULL);
  for (int i = 0; i < FD_CACHE; i++) l->fds[i].fd = -1;
  int rc = validate(l, err);
  if (!rc && !ds->streamed && ds->nsamples == 0)
    rc = stk__errf(err, STK_EEMPTY, "%s: the dataset has no samples", ds->root);
  /* A streamed dataset counts its shards as they arrive; a global shuffle
   * needs every count first. */
  if (!rc && ds->streamed && l->o.sampler.shuffle == STK_SHUFFLE_GLOBAL &&
      !stk__dataset_all_counted(ds)) {
    stk_log(STK_LOG_INFO, "%s: staging every shard to count its samples (--shuffle global)",
            ds->root);
    rc = stk_dataset_count(ds, NULL, err);
  }
  if (!rc && (l->o.on_error < STK_ON_ERROR_DEFAULT || l->o.on_error > STK_ON_ERROR_FAIL))
    rc = stk__errf(err, STK_EINVAL, "on_error: %d is not the default (0), skip (1) or fail (2)",
                   l->o.on_error);
  if (!rc && (l->o.shares < STK_SHARES_UNEVEN || l->o.shares > STK_SHARES_DROP))
    rc = stk__errf(err, STK_EINVAL, "shares: %d is not uneven (0), pad (1) or drop (2)",
                   l->o.shares);
  if (!rc) {
    rc = tok ? stk__sampler_open_n(&l->sampler, stk_tokens_num_windows(tok),
                                   stk_tokens_fingerprint(tok), stk__tokens_seed(tok), &l->o.sampler)
             : stk_sampler_open(&l->sampler, ds, &l->o.sampler);
    if (rc) stk__errf(err, rc, "cannot start the sampler: %s", stk_strerror(rc));
  }
  if (!rc) stk__sampler_set_cancel(l->sampler, (const int *)&l->cancel);
  if (!rc) stk__sampler_set_shares(l->sampler, l->o.shares);
  if (!rc && l->o.resume) {
    rc = stk_sampler_restore(l->sampler, l->o.resume);
    if (rc == STK_EINVAL)
      stk__errf(err, rc, "cannot resume: the saved state does not match this dataset or seed");
    else if (rc)
      stk__errf(err, rc, "cannot resume: %s", stk__sampler_errmsg(l->sampler));
    l->epoch = l->o.resume->epoch;
    uint32_t world = l->o.sampler.world ? l->o.sampler.world : 1;
    l->epoch_taken = l->o.resume->position / world;
    l->epoch_whole = l->o.resume->position == 0;
    if (!rc && l->epoch >= l->o.epochs) l->sampler_eof = 1;
  }
  l->dec = decoders[l->o.decode.kind];
  if (!rc && l->o.decode.kind == STK_DECODE_JPEG) rc = l->dec->out_size(&l->o.decode, NULL, &l->fixed_out, err);
  if (!rc) {
    l->file_size = malloc(ds->nshards * sizeof *l->file_size);
    if (!l->file_size) rc = stk__errf(err, STK_ENOMEM, "out of memory");
    for (size_t i = 0; !rc && i < ds->nshards; i++) l->file_size[i] = UINT64_MAX;
  }
  if (!rc) {
    struct stk_io_opts io = {.depth = l->o.io_depth, .threads = (uint32_t)STK__MAX(2, ncores())};
    const char *engine = l->o.io_engine;
    if ((!engine || !*engine || !strcmp(engine, "auto")) && !l->o.direct) {
      if (l->mean_sample >= AUTO_MMAP_BYTES && l->o.alloc == &default_allocator)
        engine = "mmap";
      else if (l->mean_sample >= AUTO_PREAD_BYTES)
        engine = "pread";
    }
    rc = stk__io_open(engine, l->o.direct, &io, &l->io_ops, &l->io, err);
    if (!rc && l->io_ops->maps && l->o.direct)
      rc = stk__errf(err, STK_EINVAL,
                     "the mmap engine reads through the page cache: it cannot be combined with "
                     "direct I/O");
  }
  if (rc) {
    loader_free(l);
    return stk__errf(errmsg, rc, "%s", err);
  }
  l->inline_verify = l->io_ops->inline_hook && !l->o.skip_verify;
  l->maps = l->io_ops->maps;
  long pg = sysconf(_SC_PAGESIZE);
  l->page = pg > 0 ? (uint64_t)pg : ALIGN;
  l->depth = l->o.prefetch;
  l->depth_max_seen = l->depth;
  l->maxjobs = l->o.prefetch_max + 2;
  l->jobs = calloc(l->maxjobs, sizeof *l->jobs);
  l->ready = calloc(l->maxjobs, sizeof *l->ready);
  l->tasks_cap = l->maxjobs * (l->o.threads * 2 + 1);
  l->tasks = calloc(l->tasks_cap, sizeof *l->tasks);
  l->nworkers = l->o.threads;
  l->workers = calloc(l->nworkers, sizeof *l->workers);
  if (!l->jobs || !l->ready || !l->tasks || !l->workers) {
    loader_free(l);
    return stk__errf(errmsg, STK_ENOMEM, "out of memory");
  }
  for (int i = 0; i < STK_STAGE_COUNT; i++) l->st[i].threads = 1;
  l->st[STK_STAGE_DECODE].threads = l->nworkers;
  stk_sampler_save(l->sampler, &l->state);
  l->t_open = stk_now_ns();
  if (!tok && stk__dataset_prefetch_budget(ds)) {
    rc = stk__lookahead_start(&l->la, ds, &l->o, l->o.resume, &l->taken_total, err);
    if (rc) {
      loader_free(l);
      return stk__errf(errmsg, rc, "%s", err);
    }
  }
  uint32_t started = 0;
  for (; started < l->nworkers; started++)
    if (pthread_create(&l->workers[started], NULL, worker_main, l) != 0) break;
  if (started < l->nworkers || pthread_create(&l->reader, NULL, reader_main, l) != 0) {
    pthread_mutex_lock(&l->mu);
    l->stop_workers = 1;
    pthread_cond_broadcast(&l->cv_task);
    pthread_mutex_unlock(&l->mu);
    for (uint32_t i = 0; i < started; i++) pthread_join(l->workers[i], NULL);
    stk__lookahead_stop(l->la);
    loader_free(l);
    return stk__errf(errmsg, STK_ESYS, "cannot start loader threads");
  }
  l->pub = stk__publish_open(ds->root);
  *out = l;
  return 0;
}

/* Grow the ring by one batch after the consumer waited (wait_ns), within
 * the memory cap (counting the two batches beyond depth that are always
 * outstanding), if the reader sat idle on a full ring since the ring last
 * grew for at least a quarter of that wait: then a deeper ring would have
 * been filled in that time. A reader that is busy all the time is the
 * limit itself; deepening the ring would only add batch buffers (for
 * unet3d, 1 GB each, every page of which the kernel clears on first use). */
static void maybe_grow(struct stk_loader *l, uint64_t wait_ns) {
  if (l->depth >= l->o.prefetch_max) return;
  uint64_t idle = atomic_load(&l->reader_idle_ns);
  if (idle - l->grow_mark < wait_ns / 4) return;
  l->grow_mark = idle;
  if ((uint64_t)(l->depth + 3) * atomic_load(&l->max_job_bytes) > l->o.mem_cap) return;
  l->depth++;
  if (l->depth > l->depth_max_seen) l->depth_max_seen = l->depth;
  pthread_cond_signal(&l->cv_free);
}

static int next_batch(struct stk_loader *l, struct stk_batch **out, int block) {
  uint64_t t0 = stk_now_ns();
  int waited = 0, rc = 0;
  pthread_mutex_lock(&l->mu);
  struct job *j = NULL;
  for (;;) {
    if (l->failed) { /* a failed loader stays failed */
      rc = l->failed;
      break;
    }
    struct job *r = l->ready[l->next_seq % l->maxjobs];
    if (r && r->seq == l->next_seq) {
      j = r;
      break;
    }
    if (atomic_load(&l->cancel)) {
      rc = STK_ECANCELED;
      break;
    }
    if (l->reader_done && l->next_seq >= l->made_seq) {
      rc = STK_EOF;
      break;
    }
    if (!block) {
      pthread_mutex_unlock(&l->mu);
      return STK_EAGAIN;
    }
    if (!waited) stk__publish_wait_begin(l->pub);
    /* The batch we wait for cannot get its buffers within the cap while we
     * hold every other batch: let it exceed the cap (counted) rather than
     * wait forever, once a wait has shown no release is coming. */
    if (waited && l->mem_wait_on && l->mem_wait_seq == l->next_seq && !l->mem_force &&
        stk_now_ns() - t0 > 100000000) {
      l->mem_force = 1;
      pthread_cond_broadcast(&l->cv_free);
    }
    waited = 1;
    /* Timed, so that a cancel from a signal handler is seen promptly. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100000000;
    if (ts.tv_nsec >= 1000000000) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&l->cv_ready, &l->mu, &ts);
  }
  int job_failed = 0;
  if (j) {
    l->ready[l->next_seq % l->maxjobs] = NULL;
    l->next_seq++;
    if (waited) maybe_grow(l, stk_now_ns() - t0);
    if (j->err) {
      rc = l->failed = j->err;
      job_failed = 1;
      snprintf(l->err, sizeof l->err, "%s", j->errmsg);
      pthread_cond_broadcast(&l->cv_free);
    }
  }
  pthread_mutex_unlock(&l->mu);
  uint64_t w = stk_now_ns() - t0;
  if (rc == 0 || rc == STK_EOF) {
    l->consumer_wait_ns += w;
    ctr_add(&l->st[STK_STAGE_RING].wait_in_ns, w);
  }
  if (rc) {
    stk__publish_tick(l->pub, l); /* also ends a published wait */
    if (job_failed) stk_batch_release(l, &j->batch);
    return rc;
  }
  stk__hist_add(&l->wait_hist, w);
  l->batches_out++;
  l->samples_out += j->batch.n;
  l->bytes_out += j->batch.bytes;
  l->skipped_out += j->batch.skipped;
  l->state = j->state_after;
  ctr_add(&l->st[STK_STAGE_RING].items, 1);
  ctr_add(&l->st[STK_STAGE_RING].bytes, j->batch.bytes);
  stk__publish_tick(l->pub, l);
  *out = &j->batch;
  return 0;
}

int stk_loader_next(struct stk_loader *l, struct stk_batch **out) { return next_batch(l, out, 1); }

int stk_loader_try_next(struct stk_loader *l, struct stk_batch **out) { return next_batch(l, out, 0); }

void stk_batch_release(struct stk_loader *l, struct stk_batch *b) {
  if (!b) return;
  struct job *j = (struct job *)((char *)b - offsetof(struct job, batch));
  pthread_mutex_lock(&l->mu);
  j->next = l->free_jobs;
  l->free_jobs = j;
  l->outstanding--;
  l->releases++;
  pthread_cond_signal(&l->cv_free);
  pthread_mutex_unlock(&l->mu);
}

void stk_loader_cancel(struct stk_loader *l) { atomic_store(&l->cancel, 1); }

int stk_loader_epoch_batches(struct stk_loader *l, uint64_t *out, char *errmsg) {
  char err[STK_ERRMSG_MAX] = "";
  int rc = l->tok ? 0 : stk_dataset_count(l->ds, NULL, err); /* a streamed dataset's total */
  if (rc) return stk__errf(errmsg, rc, "%s", err);
  uint32_t world = l->o.sampler.world ? l->o.sampler.world : 1;
  uint64_t n = l->tok ? stk_tokens_num_windows(l->tok) : l->ds->nsamples;
  uint64_t share = stk__share_len(n, 0, l->o.sampler.rank, world, l->o.shares);
  if (l->o.epoch_samples && share > l->o.epoch_samples) share = l->o.epoch_samples;
  uint64_t b = l->o.batch_size;
  *out = l->o.drop_last ? share / b : (share + b - 1) / b;
  return 0;
}

void stk_loader_close(struct stk_loader *l) {
  if (!l) return;
  atomic_store(&l->cancel, 1);
  pthread_mutex_lock(&l->mu);
  pthread_cond_broadcast(&l->cv_free);
  pthread_mutex_unlock(&l->mu);
  pthread_join(l->reader, NULL);
  stk__lookahead_stop(l->la);
  /* Let the workers finish the tasks already queued: they write into job
   * buffers that must not be freed under them. */
  pthread_mutex_lock(&l->mu);
  l->stop_workers = 1;
  pthread_cond_broadcast(&l->cv_task);
  pthread_mutex_unlock(&l->mu);
  for (uint32_t i = 0; i < l->nworkers; i++) pthread_join(l->workers[i], NULL);
  stk__publish_close(l->pub, l);
  loader_free(l);
}

const char *stk_loader_errmsg(const struct stk_loader *l) { return l->err; }

void stk_loader_state(const struct stk_loader *l, struct stk_sampler_state *st) {
  *st = l->state;
  /* A saved state names its dataset, so a resume elsewhere is refused;
   * taken once (a stat per local shard), not per batch. */
  struct stk_loader *m = (struct stk_loader *)l;
  uint64_t fp = atomic_load(&m->ds_fp);
  if (!fp)
    atomic_store(&m->ds_fp, fp = l->tok ? stk_tokens_fingerprint(l->tok)
                                        : stk_sampler_fingerprint(l->ds));
  st->dataset_fp = fp;
}

const char *stk_loader_engine(const struct stk_loader *l) { return l->io_ops->name; }

void stk_loader_stats(struct stk_loader *l, struct stk_loader_stats *st) {
  static const char *names[] = {"read", "decode", "batch", "ring"};
  memset(st, 0, sizeof *st);
  for (int i = 0; i < STK_STAGE_COUNT; i++) {
    struct stk_stage_stats *s = &st->stage[i];
    s->name = names[i];
    s->busy_ns = atomic_load(&l->st[i].busy_ns);
    s->wait_in_ns = atomic_load(&l->st[i].wait_in_ns);
    s->wait_out_ns = atomic_load(&l->st[i].wait_out_ns);
    s->items = atomic_load(&l->st[i].items);
    s->bytes = atomic_load(&l->st[i].bytes);
    s->threads = l->st[i].threads;
  }
  st->wall_ns = stk_now_ns() - l->t_open;
  st->batches = l->batches_out;
  st->samples = l->samples_out;
  st->bytes = l->bytes_out;
  st->skipped = l->skipped_out;
  st->consumer_wait_ns = l->consumer_wait_ns;
  st->wait_p50_ns = stk__hist_quantile(&l->wait_hist, 0.50);
  st->wait_p99_ns = stk__hist_quantile(&l->wait_hist, 0.99);
  st->wait_max_ns = l->wait_hist.max;
  pthread_mutex_lock(&l->mu);
  st->ring_depth = l->depth;
  pthread_mutex_unlock(&l->mu);
  st->ring_depth_max = l->depth_max_seen;
  st->mem_bytes = atomic_load(&l->mem_bytes);
  st->mem_peak = atomic_load(&l->mem_peak);
  st->mem_cap = l->o.mem_cap;
  st->mem_over_cap = atomic_load(&l->mem_over);
  st->read_ops = atomic_load(&l->read_ops);
  st->read_bytes = atomic_load(&l->read_bytes);
  st->has_cache = stk_dataset_cache_stats(l->ds, &st->cache) == 0;
}

int stk_loader_open(struct stk_loader **out, struct stk_dataset *ds,
                    const struct stk_loader_opts *opts, char *errmsg) {
  return loader_open(out, ds, NULL, opts, errmsg);
}

int stk_loader_open_tokens(struct stk_loader **out, struct stk_tokens *t,
                           const struct stk_loader_opts *opts, char *errmsg) {
  if (!t) return stk__errf(errmsg, STK_EINVAL, "no token windows given");
  return loader_open(out, stk__tokens_dataset(t), t, opts, errmsg);
}

int stk_batch_tokens(const struct stk_loader *l, const struct stk_batch *b,
                     struct stk_token_batch *out) {
  if (!l->tok) return STK_EINVAL;
  stk__tokens_view(l->tok, b->data, l->o.batch_size, b->n, b->indices, out);
  return 0;
}

int stk_batch_sample(const struct stk_loader *l, const struct stk_batch *b, uint32_t i,
                     struct stk_sample *out) {
  if (!l || l->tok || l->o.decode.kind != STK_DECODE_FIELDS) return STK_EINVAL;
  return stk__fields_unpack(b, i, out);
}
