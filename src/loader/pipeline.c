/* The loader pipeline: opening (options, defaults that follow the sample
 * size, the I/O engine, the threads), the consumer's side of the ring
 * (stk_loader_next, which grows the ring while the consumer waits) and
 * closing. The stages are their own files: the reader thread (reader.c),
 * the decode workers (workers.c), the ring and its batches (batch.c) and
 * the job buffers within the memory cap (memory.c); what they share is
 * pipeline_impl.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pipeline_impl.h"
#include "publish.h"
#include "tokens_impl.h"

/* ---- opening ------------------------------------------------------------- */

static long ncores(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? n : 1;
}

/* Buffered reads of samples at least this large go to a thread pool by
 * default: its per-request handoff is small against the copy. Smaller
 * samples go to io_uring, which batches submissions. Where the format
 * checks a checksum as it copies (TFRecord) and checksums are checked,
 * the pool copies out of mappings of the files (mapcopy: the checksum in
 * the copy's own pass instead of a second one), provided its bus-error
 * guard is the process's SIGBUS handler, so that a file truncated under
 * it is a short read naming the file, as with pread. Elsewhere (files
 * read once, where a mapping per file costs more than it saves) it reads
 * with pread (docs/internals/loader.md). */
#define AUTO_PREAD_BYTES (64u << 10)
/* Samples larger than a read (unet3d's 90-224 MB) are mapped instead of
 * copied, unless the caller gave its own allocator (pinned memory: the
 * batches must live there) or asked for O_DIRECT. */
#define AUTO_MMAP_BYTES READ_CHUNK

static int validate(struct stk_loader *l, char *err) {
  struct stk_loader_opts *o = &l->o;
  if (!o->batch_size) o->batch_size = 32;
  if (!o->threads) o->threads = (uint32_t)ncores();
  if (!o->epochs) o->epochs = 1;
  /* A streamed dataset has counted nothing yet: its first shard, which the
   * first batch needs anyway, tells the sample size the engine and the
   * budgets follow. */
  if (stk__dataset_streamed(l->ds)) {
    int rc = stk__dataset_count_through(l->ds, 1, 0, NULL, err);
    if (rc) return rc;
  }
  l->mean_sample =
      l->tok ? stk__tokens_batch_bytes(l->tok, 1) : stk__dataset_mean_sample_bytes(l->ds);
  if (!o->io_depth) o->io_depth = 64;
  /* A token loader's ring starts at 4 (within a prefetch_max the caller
   * gave) and stays there unless the consumer keeps batches (maybe_grow):
   * depths 4 to 8 measured alike, and all better than 16
   * (docs/internals/tokens_t3.md). */
  if (!o->prefetch) o->prefetch = !l->tok ? 2 : o->prefetch_max ? STK__MIN(4u, o->prefetch_max) : 4;
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
    if (l->sampler.shuffle == STK_SHUFFLE_AUTO) l->sampler.shuffle = STK_SHUFFLE_BLOCK;
    o->direct = 0;
  }
  if (!o->alloc) o->alloc = &stk__default_allocator;
  if (o->batch_size > (1u << 20))
    return stk__errf(err, STK_EINVAL, "batch size %u is larger than 1048576", o->batch_size);
  if (o->threads > 1024) return stk__errf(err, STK_EINVAL, "%u decode threads is too many", o->threads);
  if (l->decode.kind < 0 || l->decode.kind >= (int)NDECODERS)
    return stk__errf(err, STK_EINVAL, "unknown decode kind %d", l->decode.kind);
  if (l->decode.kind == STK_DECODE_JPEG) {
    struct stk_decode_cfg *c = &l->decode;
    if (!c->out_h) c->out_h = 224;
    if (!c->out_w) c->out_w = 224;
    if (c->out_h < 1 || c->out_w < 1 || c->out_h > 16384 || c->out_w > 16384)
      return stk__errf(err, STK_EINVAL, "output size %dx%d is out of range", c->out_w, c->out_h);
  }
  return 0;
}

static void loader_free(struct stk_loader *l) {
  for (uint32_t i = 0; i < l->njobs; i++) stk__job_free(l, l->jobs[i]);
  stk__reader_free(l);
  free(l->jobs);
  free(l->ready);
  free(l->tasks);
  free(l->workers);
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
  l->rd.epoch_whole = 1;
  /* An older caller's structs may be shorter; a newer one's are refused. */
  int rc = stk__loader_opts_take(&l->o, &l->sampler, &l->decode, opts, err);
  if (tok) { /* the order is the windows' own; each is copied from mapped tokens */
    l->sampler.shuffle = STK_SHUFFLE_NONE;
    l->sampler.seed = stk__tokens_seed(tok);
    l->decode.kind = STK_DECODE_RAW;
    l->o.io_engine = "pread";
    l->o.direct = 0;
    l->fixed_out = stk__tokens_row_bytes(tok);
    l->self_fill = 1; /* no reads: the workers make the jobs (stk__reader_step) */
  }
  pthread_mutex_init(&l->mu, NULL);
  pthread_mutex_init(&l->skip_mu, NULL);
  pthread_cond_init(&l->cv_free, NULL);
  pthread_cond_init(&l->cv_ready, NULL);
  pthread_cond_init(&l->cv_task, NULL);
  for (int i = 0; i < FD_CACHE; i++) l->rd.fds[i].fd = -1;
  if (!rc) rc = validate(l, err);
  if (!rc && !stk__dataset_streamed(ds) && stk_dataset_samples_counted(ds, NULL) == 0)
    rc = stk__errf(err, STK_EEMPTY, "%s: the dataset has no samples", stk_dataset_location(ds));
  /* A streamed dataset counts its shards as they arrive; a global shuffle
   * needs every count first. */
  if (!rc && stk__dataset_streamed(ds) && l->sampler.shuffle == STK_SHUFFLE_GLOBAL &&
      !stk__dataset_all_counted(ds)) {
    stk_log(STK_LOG_INFO, "%s: staging every shard to count its samples (--shuffle global)",
            stk_dataset_location(ds));
    rc = stk_dataset_count(ds, NULL, err);
  }
  if (!rc && (l->o.on_error < STK_ON_ERROR_DEFAULT || l->o.on_error > STK_ON_ERROR_FAIL))
    rc = stk__errf(err, STK_EINVAL, "on_error: %d is not the default (0), skip (1) or fail (2)",
                   l->o.on_error);
  if (!rc && (l->o.shares < STK_SHARES_UNEVEN || l->o.shares > STK_SHARES_DROP))
    rc = stk__errf(err, STK_EINVAL, "shares: %d is not uneven (0), pad (1) or drop (2)",
                   l->o.shares);
  if (!rc) {
    rc = tok ? stk__sampler_open_n(&l->rd.sampler, stk_tokens_num_windows(tok),
                                   stk_tokens_fingerprint(tok), stk__tokens_seed(tok), &l->sampler)
             : stk_sampler_open(&l->rd.sampler, ds, &l->sampler);
    if (rc) stk__errf(err, rc, "cannot start the sampler: %s", stk_strerror(rc));
  }
  if (!rc) stk__sampler_set_cancel(l->rd.sampler, (const int *)&l->cancel);
  if (!rc) stk__sampler_set_shares(l->rd.sampler, l->o.shares);
  if (!rc && l->o.resume) {
    rc = stk_sampler_restore(l->rd.sampler, l->o.resume);
    if (rc == STK_EINVAL)
      stk__errf(err, rc, "cannot resume: the saved state does not match this dataset or seed");
    else if (rc)
      stk__errf(err, rc, "cannot resume: %s", stk__sampler_errmsg(l->rd.sampler));
    l->rd.epoch = l->o.resume->epoch;
    uint32_t world = l->sampler.world ? l->sampler.world : 1;
    l->rd.epoch_taken = l->o.resume->position / world;
    l->rd.epoch_whole = l->o.resume->position == 0;
    if (!rc && l->rd.epoch >= l->o.epochs) l->rd.sampler_eof = 1;
  }
  if (!rc) l->dec = stk__loader_decoders[l->decode.kind];
  if (!rc && l->decode.kind == STK_DECODE_JPEG) rc = l->dec->out_size(&l->decode, NULL, &l->fixed_out, err);
  if (!rc) {
    size_t ns = stk_dataset_num_shards(ds);
    l->rd.file_size = malloc(ns * sizeof *l->rd.file_size);
    if (!l->rd.file_size) rc = stk__errf(err, STK_ENOMEM, "out of memory");
    for (size_t i = 0; !rc && i < ns; i++) l->rd.file_size[i] = UINT64_MAX;
  }
  if (!rc) {
    struct stk_io_opts io = {.depth = l->o.io_depth, .threads = (uint32_t)STK__MAX(2, ncores())};
    const char *engine = l->o.io_engine;
    if ((!engine || !*engine || !strcmp(engine, "auto")) && !l->o.direct) {
      if (l->mean_sample >= AUTO_MMAP_BYTES && l->o.alloc == &stk__default_allocator)
        engine = "mmap";
      else if (l->mean_sample >= AUTO_PREAD_BYTES)
        engine = !l->o.skip_verify && stk__sample_copy_check(l->ds) && stk__io_guard_ready()
                     ? "mapcopy"
                     : "pread";
    }
    rc = stk__io_open(engine, l->o.direct, &io, &l->rd.io_ops, &l->rd.io, err);
    if (!rc && l->o.direct && (l->rd.io_ops->maps || l->rd.io_ops == &stk__io_mapcopy))
      rc = stk__errf(err, STK_EINVAL,
                     "the %s engine reads through the page cache: it cannot be combined with "
                     "direct I/O", l->rd.io_ops->name);
  }
  if (rc) {
    loader_free(l);
    return stk__errf(errmsg, rc, "%s", err);
  }
  l->rd.inline_verify = l->rd.io_ops->inline_hook && !l->o.skip_verify;
  l->rd.maps = l->rd.io_ops->maps;
  long pg = sysconf(_SC_PAGESIZE);
  l->rd.page = pg > 0 ? (uint64_t)pg : ALIGN;
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
  stk_sampler_save(l->rd.sampler, &l->state);
  l->t_open = stk_now_ns();
  if (tok && stk__tokens_chunked(tok) && stk__dataset_prefetch_budget(ds))
    rc = stk__tok_lookahead_start(&l->tla, tok, &l->o, l->o.resume, &l->rd.taken_total, err);
  if (!rc && !tok && stk__dataset_prefetch_budget(ds))
    rc = stk__lookahead_start(&l->la, ds, &l->o, l->o.resume, &l->rd.taken_total, err);
  if (rc) {
    loader_free(l);
    return stk__errf(errmsg, rc, "%s", err);
  }
  uint32_t started = 0;
  for (; started < l->nworkers; started++)
    if (pthread_create(&l->workers[started], NULL, stk__worker_main, l) != 0) break;
  if (started < l->nworkers ||
      (!l->self_fill && pthread_create(&l->rd.thread, NULL, stk__reader_main, l) != 0)) {
    atomic_store(&l->cancel, 1); /* workers that make jobs make no more */
    pthread_mutex_lock(&l->mu);
    l->stop_workers = 1;
    pthread_cond_broadcast(&l->cv_task);
    pthread_mutex_unlock(&l->mu);
    for (uint32_t i = 0; i < started; i++) pthread_join(l->workers[i], NULL);
    stk__lookahead_stop(l->la);
    stk__tok_lookahead_stop(l->tla);
    loader_free(l);
    return stk__errf(errmsg, STK_ESYS, "cannot start loader threads");
  }
  /* Named for `top -H` and for benches that split the CPU time by thread
   * (bench/tokens.c); a name that cannot be set changes nothing else. */
  for (uint32_t i = 0; i < started; i++) pthread_setname_np(l->workers[i], "stk-decode");
  if (!l->self_fill) pthread_setname_np(l->rd.thread, "stk-read");
  l->pub = stk__publish_open(stk_dataset_location(ds));
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
  /* A token loader's reader always idles (it only numbers windows), and
   * every window costs the workers the same: a deeper ring has no uneven
   * work to absorb, and spreads the workers' writes over more memory
   * (docs/internals/tokens_t3.md). It grows only for batches the consumer
   * keeps beyond this one and the one before it, which take ring places
   * from the workers. */
  if (l->tok && l->next_seq - l->releases <= 2) return;
  uint64_t idle = atomic_load(&l->reader_idle_ns);
  if (idle - l->grow_mark < wait_ns / 4) return;
  l->grow_mark = idle;
  if ((uint64_t)(l->depth + 3) * atomic_load(&l->max_job_bytes) > l->o.mem_cap) return;
  l->depth++;
  if (l->depth > l->depth_max_seen) l->depth_max_seen = l->depth;
  pthread_cond_signal(l->self_fill ? &l->cv_task : &l->cv_free);
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
      rc = stk__all_skipped_check(l);
      if (!rc) rc = STK_EOF;
      break;
    }
    /* Every ring place is held by a batch the consumer took and has not
     * released, so the reader cannot make the next one: grow for it now
     * (the consumer keeps more batches than the ring holds), up to
     * prefetch_max (past the memory cap if need be: the reader's memory
     * wait gives way as below). At prefetch_max the wait goes on until a
     * release: a
     * consumer may release from another thread (the Python binding, once
     * a pinned batch's copies complete), so it is not an error here; the
     * binding says so for the batches its own objects hold. */
    if (l->next_seq - l->releases >= (uint64_t)l->depth + 2 && l->depth < l->o.prefetch_max) {
      l->depth++;
      if (l->depth > l->depth_max_seen) l->depth_max_seen = l->depth;
      pthread_cond_signal(l->self_fill ? &l->cv_task : &l->cv_free);
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
      pthread_cond_broadcast(l->self_fill ? &l->cv_task : &l->cv_free);
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
    l->ready_waiters++;
    pthread_cond_timedwait(&l->cv_ready, &l->mu, &ts);
    l->ready_waiters--;
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



void stk_loader_cancel(struct stk_loader *l) { atomic_store(&l->cancel, 1); }

int stk_loader_epoch_batches(struct stk_loader *l, uint64_t *out, char *errmsg) {
  char err[STK_ERRMSG_MAX] = "";
  int rc = l->tok ? 0 : stk_dataset_count(l->ds, NULL, err); /* a streamed dataset's total */
  if (rc) return stk__errf(errmsg, rc, "%s", err);
  uint32_t world = l->sampler.world ? l->sampler.world : 1;
  uint64_t n = l->tok ? stk_tokens_num_windows(l->tok) : stk_dataset_samples_counted(l->ds, NULL);
  uint64_t share = stk__share_len(n, 0, l->sampler.rank, world, l->o.shares);
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
  if (!l->self_fill) pthread_join(l->rd.thread, NULL);
  stk__lookahead_stop(l->la);
  stk__tok_lookahead_stop(l->tla);
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

const char *stk_loader_engine(const struct stk_loader *l) { return l->rd.io_ops->name; }


int stk_loader_open(struct stk_loader **out, struct stk_dataset *ds,
                    const struct stk_loader_opts *opts, char *errmsg) {
  return loader_open(out, ds, NULL, opts, errmsg);
}

int stk_loader_open_tokens(struct stk_loader **out, struct stk_tokens *t,
                           const struct stk_loader_opts *opts, char *errmsg) {
  if (!t) return stk__errf(errmsg, STK_EINVAL, "no token windows given");
  return loader_open(out, stk__tokens_dataset(t), t, opts, errmsg);
}

