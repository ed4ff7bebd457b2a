/* The loader's reader thread (its state is struct reader): it draws the
 * next batch's samples from the sampler, resolves where each lies, sorts
 * them into file order and plans coalesced reads on the I/O engine, keeps
 * a few jobs in their read phase so that I/O overlaps decoding, and hands
 * each job whose reads are done to the decode workers (workers.c).
 * Samples far larger than a read (unet3d: 90-224 MB) are read in pieces of
 * READ_CHUNK bytes by as many requests as the in-flight budget allows, so
 * the engine's threads share one sample instead of one thread copying it
 * alone. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pipeline_impl.h"
#include "tokens_impl.h"

/* ---- file descriptors ---------------------------------------------------- */

static struct fdent *fd_get(struct stk_loader *l, uint32_t shard, char *err) {
  struct fdent *victim = NULL; /* a free entry, else the least recently used idle one */
  for (int i = 0; i < FD_CACHE; i++) {
    struct fdent *e = &l->rd.fds[i];
    if (e->fd >= 0 && e->shard == shard) {
      e->last_use = ++l->rd.fd_clock;
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
  victim->last_use = ++l->rd.fd_clock;
  return victim;
}

/* ---- a batch's samples and its reads ------------------------------------ */

/* Take the next sample of this epoch for this rank; STK_EOF at the epoch's
 * end (the caller moves to the next epoch), or a code with err set when
 * counting a streamed dataset's next shards failed. */
static int next_sample(struct stk_loader *l, uint64_t *id, uint64_t *epoch, char *err) {
  if (l->rd.sampler_eof) return STK_EOF;
  if (l->o.epoch_samples && l->rd.epoch_taken >= l->o.epoch_samples) return STK_EOF;
  int rc = stk_sampler_next(l->rd.sampler, id);
  if (rc == STK_EOF) return rc; /* the epoch's end */
  if (rc) return stk__errf(err, rc, "%s", stk__sampler_errmsg(l->rd.sampler));
  *epoch = l->rd.epoch;
  l->rd.epoch_taken++;
  atomic_fetch_add_explicit(&l->rd.taken_total, 1, memory_order_relaxed);
  return 0;
}

static void advance_epoch(struct stk_loader *l) {
  l->rd.epoch++;
  l->rd.epoch_taken = 0;
  l->rd.epoch_batches = 0;
  l->rd.epoch_whole = 1;
  if (l->rd.epoch >= l->o.epochs)
    l->rd.sampler_eof = 1;
  else
    stk_sampler_set_epoch(l->rd.sampler, l->rd.epoch);
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
  s->id = id;
  s->shard = (uint32_t)sh;
  s->label = stk__shard_label(ds, sh);
  s->err = 0;
  s->verified = 0;
  if (stk__shard_pending(ds, sh) || (stk__dataset_staged(ds) && !stk__shard_indexed(ds, sh))) {
    /* Behind a cache: staging the shard builds its index (and tells its size). */
    if (!fd_get(l, (uint32_t)sh, err)) return STK_EIO;
    if (!stk__shard_indexed(ds, sh)) l->rd.file_size[sh] = stk__shard_size(ds, sh);
  }
  if (stk__sample_range(ds, sh, id, &s->off, &s->len)) return 0;
  /* A plain file: its size is learned from the descriptor opened anyway. */
  if (l->rd.file_size[sh] == UINT64_MAX) {
    struct fdent *e = fd_get(l, (uint32_t)sh, err);
    if (!e) return STK_EIO;
    struct stat st;
    if (fstat(e->fd, &st) != 0)
      return stk__errf(err, STK_EIO, "%s: fstat failed", stk__shard_path(ds, sh));
    l->rd.file_size[sh] = (uint64_t)st.st_size;
  }
  s->off = 0;
  s->len = l->rd.file_size[sh];
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
    if (s->verified) continue; /* checked as it was copied (copy_read) */
    smp.nfields = 0;
    smp.index = s->id;
    int rc = stk__sample_parse(l->ds, s->shard, j->raw + s->raw_pos, s->len, s->off, 1, &smp, err);
    if (rc)
      stk__slot_fail(l, j, s, rc, err);
    else
      s->verified = 1;
  }
}

/* The same with an engine that copies out of a mapping (mapcopy): copy
 * the read's n bytes at src into the staging buffer, each sample by its
 * format's copy_check where it has one (its checksums checked in the
 * copy's own pass), then check the rest as verify_read does. */
static void copy_read(struct stk_io_req *r, const uint8_t *src, uint64_t n) {
  struct job *j = r->ctx;
  uint32_t i = (uint32_t)(r - j->reqs);
  stk__copy_check_fn check = stk__sample_copy_check(j->loader->ds);
  uint64_t done = 0; /* bytes of the read copied */
  for (uint32_t q = j->req_lo[i]; check && q < j->req_hi[i]; q++) {
    struct slot *s = j->order[q];
    uint64_t at = (uint64_t)(j->raw + s->raw_pos - r->buf);
    if (at < done || at + s->len > n) continue; /* within the last one: copied with it */
    memcpy(r->buf + done, src + done, at - done);
    s->verified = check(r->buf + at, src + at, s->len);
    done = at + s->len;
  }
  memcpy(r->buf + done, src + done, n - done);
  verify_read(r);
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
  if (l->rd.maps) return STK__MAX((uint64_t)ALIGN, l->rd.page);
  return l->o.direct ? ALIGN : 1;
}
static uint64_t read_chunk(const struct stk_loader *l) {
  return l->rd.maps ? MAP_CHUNK : READ_CHUNK;
}
static uint64_t place(const struct stk_loader *l, uint64_t pos, uint64_t start, uint64_t span) {
  uint64_t a = read_align(l);
  pos = (pos + a - 1) & ~(a - 1);
  if (l->rd.maps && span >= STK_IO_MAP_ALIGN) pos += (start - pos) & (STK_IO_MAP_ALIGN - 1);
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
  j->mapped = l->rd.maps;
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
      r->on_read = l->rd.inline_verify && whole ? verify_read : NULL;
      r->on_copy = l->rd.inline_verify && whole ? copy_read : NULL;
      r->res = (int)order[k]->shard; /* shard until submitted; fd resolved then */
    }
    pos += span;
    k = m;
  }
  j->reqs_next = 0;
  j->reads_pending = j->nreqs;
}


/* Buffers and read requests of a filled job: 0, STK_EAGAIN (wait for
 * memory), or a code with j->errmsg set. */
static int plan_job(struct stk_loader *l, struct job *j) {
  if (l->tok) {
    j->nreqs = j->reqs_next = j->reads_pending = 0;
    return stk__job_memory(l, j, 0, stk__tokens_batch_bytes(l->tok, l->o.batch_size));
  }
  uint64_t raw;
  uint32_t nreqs;
  plan_size(l, j, &raw, &nreqs);
  int rc = reqs_reserve(j, nreqs);
  if (rc) return stk__errf(j->errmsg, rc, "out of memory for %u read requests", nreqs);
  rc = stk__job_memory(l, j, raw, l->fixed_out ? (uint64_t)l->fixed_out * j->n : 0);
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
    j->epoch = l->rd.epoch;
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
        if (stk__skips(l, rc)) {
          stk__note_skip(l, id, rc, j->errmsg);
          j->errmsg[0] = 0;
          j->skipped++;
          continue;
        }
        j->err = rc;
        break;
      }
      j->n++;
    }
    stk_sampler_save(l->rd.sampler, &j->state_after);
    int epoch_end = j->n < l->o.batch_size && !j->err;
    if (j->err) return 0;
    if (epoch_end) {
      int partial = j->n > 0, keep = partial && !l->o.drop_last;
      /* A whole epoch that gave this rank no batch: so will every later one
       * (its share depends only on the sample count, rank, world and batch
       * size), so the run ends here instead of spinning through them. */
      int barren = l->rd.epoch_whole && l->rd.epoch_batches == 0 && !keep;
      if (!l->rd.sampler_eof) advance_epoch(l);
      if (keep) return 0;
      if (barren && !l->rd.sampler_eof) {
        stk_log(STK_LOG_WARN, "rank %u of %u gets no batch of an epoch (batch size %u%s): its "
                 "run ends", l->sampler.rank, l->sampler.world ? l->sampler.world : 1,
                 l->o.batch_size, l->o.drop_last ? ", drop_last" : "");
        l->rd.sampler_eof = 1;
      }
      if (l->rd.sampler_eof) return STK_EOF;
      continue;
    }
    l->rd.epoch_batches++;
    return 0;
  }
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
      j = stk__job_new(l);
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
    if (!s->err && b < q->buf + q->len && b + s->len > q->buf) stk__slot_fail(l, j, s, code, msg);
  }
}

static void submit_some(struct stk_loader *l) {
  for (uint32_t r = 0; r < l->rd.nreading; r++) {
    struct job *j = l->rd.reading[r];
    while (j->reqs_next < j->nreqs) {
      struct stk_io_req *q = &j->reqs[j->reqs_next];
      /* Mapped bytes are the page cache's, not buffers: only requests count. */
      if (l->rd.inflight_reqs >= l->o.io_depth ||
          (!l->rd.maps && l->rd.inflight_bytes > 0 &&
           l->rd.inflight_bytes + q->len > l->o.max_inflight))
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
      l->rd.io_ops->submit(l->rd.io, q);
      l->rd.inflight_reqs++;
      l->rd.inflight_bytes += q->len;
      j->reqs_next++;
    }
  }
}

static struct job *job_of_req(struct stk_loader *l, struct stk_io_req *q) {
  for (uint32_t r = 0; r < l->rd.nreading; r++) {
    struct job *j = l->rd.reading[r];
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
               stk__shard_path(l->ds, s->shard), (unsigned long long)s->off,
               (unsigned long long)s->len,
               q->res == STK_ETRUNC ? "file is shorter than its index says" : stk_strerror(q->res));
      stk__slot_fail(l, j, s, q->res, msg);
    }
  }
}

/* Hand jobs whose reads are done to the decoders, oldest first. */
static void hand_over(struct stk_loader *l) {
  uint32_t w = 0;
  for (uint32_t r = 0; r < l->rd.nreading; r++) {
    struct job *j = l->rd.reading[r];
    if (j->reads_pending == 0 && j->reqs_next == j->nreqs) {
      uint64_t bytes = 0;
      for (uint32_t i = 0; i < j->n; i++) bytes += j->slots[i].len;
      ctr_add(&l->st[STK_STAGE_READ].items, j->n);
      ctr_add(&l->st[STK_STAGE_READ].bytes, bytes);
      if (j->n == 0 || j->err)
        stk__ring_put(l, j);
      else
        stk__push_tasks(l, j);
    } else {
      l->rd.reading[w++] = j;
    }
  }
  l->rd.nreading = w;
}

static void reap_some(struct stk_loader *l, int block) {
  struct stk_io_req *done[64];
  int n = l->rd.io_ops->reap(l->rd.io, done, 64, block);
  if (n < 0) {
    stk_log(STK_LOG_ERROR, "I/O engine failed: %s", stk_strerror(n));
    return;
  }
  for (int k = 0; k < n; k++) {
    struct stk_io_req *q = done[k];
    struct fdent *e = q->user;
    e->inflight--;
    struct job *j = job_of_req(l, q);
    l->rd.inflight_reqs--;
    l->rd.inflight_bytes -= q->len;
    ctr_add(&l->read_ops, 1);
    ctr_add(&l->read_bytes, q->len);
    q->user = j;
    if (q->res) read_failed(l, j, q);
    j->reads_pending--;
  }
  hand_over(l);
}

/* Plan a filled job's reads and put it in its read phase, or leave it in
 * l->rd.mem_wait (STK_EAGAIN) until a released batch frees memory. */
static int plan_or_wait(struct stk_loader *l, struct job *j) {
  if (!j->err && j->n > 0) {
    int rc = plan_job(l, j);
    if (rc == STK_EAGAIN) {
      l->rd.mem_wait = j;
      pthread_mutex_lock(&l->mu);
      l->mem_wait_seq = j->seq;
      l->mem_wait_on = 1;
      pthread_mutex_unlock(&l->mu);
      return rc;
    }
    if (rc && j->errmsg[0])
      j->err = rc; /* the message is in place (the reader owns the job here) */
    else if (rc)
      stk__job_fail(j, rc, "out of memory for a batch");
  }
  if (l->rd.mem_wait == j) {
    l->rd.mem_wait = NULL;
    pthread_mutex_lock(&l->mu);
    l->mem_wait_on = 0;
    pthread_mutex_unlock(&l->mu);
  }
  if (j->err) {
    j->nreqs = j->reqs_next = j->reads_pending = 0;
  }
  uint64_t jb = (l->rd.maps ? 0 : j->raw_cap) + j->out_cap; /* memory, not address space */
  if (jb > atomic_load_explicit(&l->max_job_bytes, memory_order_relaxed))
    atomic_store_explicit(&l->max_job_bytes, jb, memory_order_relaxed);
  l->rd.reading[l->rd.nreading++] = j;
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

/* A job taken from the free list and not used (the sampler had no more,
 * or the run stopped while it waited for memory): it goes back. */
static void job_unused(struct stk_loader *l, struct job *j) {
  pthread_mutex_lock(&l->mu);
  j->next = l->free_jobs;
  l->free_jobs = j;
  l->outstanding--;
  if (j == l->rd.mem_wait) l->mem_wait_on = 0;
  pthread_mutex_unlock(&l->mu);
}

/* No more jobs will be made: a consumer waiting for one is told. */
static void reader_finish(struct stk_loader *l) {
  pthread_mutex_lock(&l->mu);
  l->reader_done = 1;
  pthread_cond_broadcast(&l->cv_ready);
  pthread_mutex_unlock(&l->mu);
}

void *stk__reader_main(void *arg) {
  struct stk_loader *l = arg;
  uint64_t t_start = stk_now_ns(), blocked = 0;
  int eof = 0;
  while (!atomic_load(&l->cancel)) {
    if (l->rd.mem_wait) plan_or_wait(l, l->rd.mem_wait);
    /* Keep a few jobs in their read phase so I/O overlaps decode. */
    while (!eof && !l->rd.mem_wait && l->rd.nreading < 4 &&
           l->rd.nreading < STK__ARRAY_LEN(l->rd.reading)) {
      struct job *j = try_get_job(l);
      if (!j) break;
      if (start_job(l, j) == STK_EOF) {
        job_unused(l, j);
        eof = 1;
      }
    }
    submit_some(l);
    if (l->rd.inflight_reqs > 0) {
      reap_some(l, 1);
      continue;
    }
    if (l->rd.nreading > 0) { /* jobs with nothing to read (errors, empty) */
      reap_some(l, 0);
      continue;
    }
    if (eof && !l->rd.mem_wait) break;
    /* Nothing in flight and no free job (the ring is full), or no memory
     * for the next job's buffers until a batch is released. */
    uint64_t t0 = stk_now_ns();
    pthread_mutex_lock(&l->mu);
    if (l->rd.mem_wait)
      while (l->releases == l->mem_wait_rel && !l->mem_force && !atomic_load(&l->cancel) && !l->failed)
        pthread_cond_wait(&l->cv_free, &l->mu);
    else
      while (l->outstanding >= (uint64_t)l->depth + 2 && !atomic_load(&l->cancel) && !l->failed)
        pthread_cond_wait(&l->cv_free, &l->mu);
    int failed = l->failed, mem = l->rd.mem_wait != NULL;
    pthread_mutex_unlock(&l->mu);
    blocked += stk_now_ns() - t0;
    if (!mem) atomic_fetch_add(&l->reader_idle_ns, stk_now_ns() - t0);
    if (failed) break;
  }
  while (l->rd.inflight_reqs > 0) reap_some(l, 1); /* never leave reads in flight */
  if (l->rd.mem_wait) { /* stopped while it waited: it goes back unread */
    job_unused(l, l->rd.mem_wait);
    l->rd.mem_wait = NULL;
  }
  ctr_add(&l->st[STK_STAGE_READ].wait_out_ns, blocked);
  ctr_add(&l->st[STK_STAGE_RING].wait_out_ns, blocked);
  ctr_add(&l->st[STK_STAGE_READ].busy_ns, stk_now_ns() - t_start - blocked);
  reader_finish(l);
  return NULL;
}

/* ---- a token loader's reader, run by its workers ------------------------ */

/* A token window needs no read, so a token loader runs no reader thread:
 * the thread hop cost a wake-up of the reader per released batch and
 * another of a worker per job made (docs/internals/tokens_t3.md, seventh
 * pass). A worker with no task makes the next job itself, as the reader
 * would have (the same sampler, memory cap and order), one worker at a
 * time. */
int stk__reader_can_step(struct stk_loader *l) {
  if (l->reader_done || l->failed || l->rd_busy || l->stop_workers || atomic_load(&l->cancel))
    return 0;
  if (l->mem_wait_on) return l->releases != l->mem_wait_rel || l->mem_force;
  return l->outstanding < (uint64_t)l->depth + 2;
}

uint64_t stk__reader_step(struct stk_loader *l) {
  uint64_t t0 = stk_now_ns();
  if (l->rd.mem_wait) plan_or_wait(l, l->rd.mem_wait);
  if (!l->rd.eof && !l->rd.mem_wait && !atomic_load(&l->cancel)) {
    struct job *j = try_get_job(l);
    if (j && start_job(l, j) == STK_EOF) {
      job_unused(l, j);
      l->rd.eof = 1;
    }
  }
  hand_over(l);
  uint64_t ns = stk_now_ns() - t0;
  ctr_add(&l->st[STK_STAGE_READ].busy_ns, ns);
  if (l->rd.eof && !l->rd.mem_wait) reader_finish(l);
  return ns;
}

void stk__reader_free(struct stk_loader *l) {
  struct reader *r = &l->rd;
  for (int i = 0; i < FD_CACHE; i++)
    if (r->fds[i].fd >= 0) stk__shard_close(l->ds, r->fds[i].shard, r->fds[i].fd);
  if (r->io) r->io_ops->close(r->io);
  stk_sampler_close(r->sampler);
  free(r->file_size);
}
