/* The look-ahead: stages the shards the reader will need next.
 *
 * The sampler's order is a pure function of (seed, epoch, position), so a
 * second sampler started from the same state draws exactly the reader's
 * future. This thread walks it ahead of the reader, collapsing runs of
 * samples from one shard into a "visit", and keeps a window of visits:
 * every shard in the window is pinned and being staged by the cache's
 * fetchers. The window is bounded by the prefetch budget in bytes (each
 * shard counted once however often it recurs) and by MAX_VISITS; a visit
 * leaves it when the reader has drawn past its last sample, and its shard
 * is unpinned when no other visit in the window needs it. */
#include <stdlib.h>
#include <string.h>

#include "../dataset/dataset.h"
#include "loader_impl.h"

#define MAX_VISITS 65536

struct visit {
  size_t shard;
  uint64_t last; /* position (samples drawn since start) of its last sample */
};

struct stk__lookahead {
  struct stk_dataset *ds;
  struct stk_loader_opts o;
  atomic_uint_fast64_t *reader_taken;
  uint64_t budget;

  struct stk__walk walk; /* the order, as the reader walks it */
  uint64_t pos;

  struct visit *win; /* ring of MAX_VISITS */
  size_t head, len;
  uint32_t *inwin;   /* visits in the window per shard */
  uint64_t *inbytes; /* bytes each shard in the window added to win_bytes */
  uint64_t win_bytes;
  uint64_t lag;      /* samples the reader draws before it opens their shard */

  pthread_t thread;
  atomic_int stop;
};

int stk__walk_start(struct stk__walk *w, const int *stop, const struct stk_loader_opts *o,
                    const struct stk_sampler_state *resume) {
  w->epochs = o->epochs;
  w->epoch_samples = o->epoch_samples;
  stk__sampler_set_cancel(w->sampler, stop);
  stk__sampler_set_shares(w->sampler, o->shares);
  if (!resume) return 0;
  int rc = stk_sampler_restore(w->sampler, resume);
  w->epoch = resume->epoch;
  uint32_t world = o->sampler->world ? o->sampler->world : 1;
  w->epoch_taken = resume->position / world;
  if (w->epoch >= w->epochs) w->eof = 1;
  return rc;
}

/* Walking a streamed dataset's order counts its shards (staging them)
 * ahead of the reader; a count that fails ends the walk here. */
int stk__walk_next(struct stk__walk *w, uint64_t *id) {
  while (!w->eof) {
    int rc = w->epoch_samples && w->epoch_taken >= w->epoch_samples
                 ? STK_EOF
                 : stk_sampler_next(w->sampler, id);
    if (rc == 0) {
      w->epoch_taken++;
      return 0;
    }
    if (rc != STK_EOF) {
      w->eof = 1;
      break;
    }
    w->epoch++;
    w->epoch_taken = 0;
    if (w->epoch >= w->epochs) w->eof = 1;
    else stk_sampler_set_epoch(w->sampler, w->epoch);
  }
  return STK_EOF;
}

static void leave(struct stk__lookahead *la) {
  struct visit *v = &la->win[la->head];
  la->head = (la->head + 1) % MAX_VISITS;
  la->len--;
  if (--la->inwin[v->shard] == 0) {
    la->win_bytes -= la->inbytes[v->shard];
    stk__shard_unpin(la->ds, v->shard);
  }
}

static void *la_main(void *arg) {
  struct stk__lookahead *la = arg;
  uint64_t id = 0;
  int have = 0; /* id drawn but not yet in the window */
  while (!atomic_load(&la->stop)) {
    /* The reader draws samples up to a few batches before it opens their
     * shards: a visit leaves only once that lag is behind it too. */
    uint64_t taken = atomic_load_explicit(la->reader_taken, memory_order_relaxed);
    taken = taken > la->lag ? taken - la->lag : 0;
    while (la->len && la->win[la->head].last < taken) leave(la);
    if (!have && stk__walk_next(&la->walk, &id) == 0) have = 1;
    if (!have) { /* the order is exhausted: wait for the reader to finish */
      if (!la->len) break;
      stk_sleep_ns(5000000);
      continue;
    }
    size_t sh = stk__dataset_shard_of(la->ds, id);
    struct visit *back = la->len ? &la->win[(la->head + la->len - 1) % MAX_VISITS] : NULL;
    if (back && back->shard == sh) {
      back->last = la->pos++;
      have = 0;
      continue;
    }
    uint64_t size = stk__shard_size(la->ds, sh);
    if (size == UINT64_MAX) size = la->budget / 8; /* unknown: assume a large one */
    int fits = la->inwin[sh] > 0 || la->win_bytes + size <= la->budget;
    if (la->len && (!fits || la->len == MAX_VISITS)) {
      stk_sleep_ns(2000000); /* full: wait for the reader to move on */
      continue;
    }
    la->win[(la->head + la->len) % MAX_VISITS] = (struct visit){sh, la->pos++};
    la->len++;
    if (la->inwin[sh]++ == 0) {
      la->inbytes[sh] = size;
      la->win_bytes += size;
      stk__shard_prefetch(la->ds, sh);
    }
    have = 0;
  }
  while (la->len) leave(la);
  return NULL;
}

int stk__lookahead_start(struct stk__lookahead **out, struct stk_dataset *ds,
                         const struct stk_loader_opts *o, const struct stk_sampler_state *resume,
                         atomic_uint_fast64_t *reader_taken, char *err) {
  struct stk__lookahead *la = calloc(1, sizeof *la);
  if (!la) return stk__errf(err, STK_ENOMEM, "out of memory");
  la->ds = ds;
  la->o = *o;
  la->reader_taken = reader_taken;
  la->budget = stk__dataset_prefetch_budget(ds);
  la->win = calloc(MAX_VISITS, sizeof *la->win);
  la->inwin = calloc(stk_dataset_num_shards(ds), sizeof *la->inwin);
  la->inbytes = calloc(stk_dataset_num_shards(ds), sizeof *la->inbytes);
  la->lag = (uint64_t)(o->prefetch_max + 2) * o->batch_size;
  int rc = la->win && la->inwin && la->inbytes ? 0 : STK_ENOMEM;
  atomic_init(&la->stop, 0);
  if (!rc) rc = stk_sampler_open(&la->walk.sampler, ds, o->sampler);
  if (!rc) rc = stk__walk_start(&la->walk, (const int *)&la->stop, o, resume);
  if (!rc && pthread_create(&la->thread, NULL, la_main, la) != 0) rc = STK_ESYS;
  if (rc) {
    stk_sampler_close(la->walk.sampler);
    free(la->win);
    free(la->inwin);
    free(la->inbytes);
    free(la);
    return stk__errf(err, rc, "cannot start the cache look-ahead: %s", stk_strerror(rc));
  }
  *out = la;
  return 0;
}

void stk__lookahead_stop(struct stk__lookahead *la) {
  if (!la) return;
  atomic_store(&la->stop, 1);
  pthread_join(la->thread, NULL);
  stk_sampler_close(la->walk.sampler);
  free(la->win);
  free(la->inwin);
  free(la->inbytes);
  free(la);
}
