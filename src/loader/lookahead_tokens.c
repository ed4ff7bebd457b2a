/* The look-ahead of token windows over a remote corpus: stages the chunks
 * the next windows lie in before the decode workers ask for them.
 *
 * The windows' order is a pure function of the sampler's state, as for
 * samples (lookahead.c), so a second sampler from the reader's state draws
 * the reader's future. A few threads share that walk: each draws the next
 * window, and unless the reader has drawn past it already, stages the
 * cache chunks its pieces lie in (stk__tokens_warm: nothing is copied),
 * in parallel with the others and with the workers. The walk keeps at
 * most AHEAD_BATCHES batches beyond the reader's draws (which already run
 * the ring's depth ahead of the workers), so warmed chunks are not pushed
 * out of the cache's slots before they are read; a chunk already staged
 * costs a slot lookup. A failure is left for the worker that reads the
 * window to report. */
#include <stdlib.h>

#include "loader_impl.h"
#include "tokens_impl.h"

#define THREADS 4
#define AHEAD_BATCHES 8

struct stk__tok_lookahead {
  struct stk_tokens *tok;
  struct stk_loader_opts o;
  atomic_uint_fast64_t *reader_taken;
  uint64_t ahead; /* windows beyond the reader's draws */

  pthread_mutex_t mu; /* the walk, under mu: */
  struct stk__walk walk;
  uint64_t pos;

  pthread_t th[THREADS];
  uint32_t nth;
  atomic_int stop;
};

static void *warm_main(void *arg) {
  struct stk__tok_lookahead *la = arg;
  char err[STK_ERRMSG_MAX];
  while (!atomic_load(&la->stop)) {
    uint64_t taken = atomic_load_explicit(la->reader_taken, memory_order_relaxed), id;
    pthread_mutex_lock(&la->mu);
    if (la->pos >= taken + la->ahead) { /* far enough ahead: let the reader move on */
      pthread_mutex_unlock(&la->mu);
      stk_sleep_ns(2000000);
      continue;
    }
    int rc = stk__walk_next(&la->walk, &id);
    uint64_t pos = la->pos++;
    pthread_mutex_unlock(&la->mu);
    if (rc) break; /* the order is exhausted */
    if (pos < taken) continue; /* the reader drew it already: a worker has it */
    if (stk__tokens_warm(la->tok, id, (const int *)&la->stop, err) != 0 &&
        !atomic_load(&la->stop))
      stk_log(STK_LOG_DEBUG, "token look-ahead: window %llu: %s", (unsigned long long)id, err);
  }
  return NULL;
}

int stk__tok_lookahead_start(struct stk__tok_lookahead **out, struct stk_tokens *tok,
                             const struct stk_loader_opts *o,
                             const struct stk_sampler_state *resume,
                             atomic_uint_fast64_t *reader_taken, char *err) {
  struct stk__tok_lookahead *la = calloc(1, sizeof *la);
  if (!la) return stk__errf(err, STK_ENOMEM, "out of memory");
  la->tok = tok;
  la->o = *o;
  la->reader_taken = reader_taken;
  la->ahead = (uint64_t)AHEAD_BATCHES * o->batch_size;
  atomic_init(&la->stop, 0);
  pthread_mutex_init(&la->mu, NULL);
  int rc = stk__sampler_open_n(&la->walk.sampler, stk_tokens_num_windows(tok),
                               stk_tokens_fingerprint(tok), stk__tokens_seed(tok), o->sampler);
  if (!rc) rc = stk__walk_start(&la->walk, (const int *)&la->stop, o, resume);
  for (; !rc && la->nth < THREADS; la->nth++)
    if (pthread_create(&la->th[la->nth], NULL, warm_main, la) != 0) break;
  if (!rc && la->nth == 0) rc = STK_ESYS;
  if (rc) {
    stk__tok_lookahead_stop(la);
    return stk__errf(err, rc, "cannot start the token look-ahead: %s", stk_strerror(rc));
  }
  *out = la;
  return 0;
}

void stk__tok_lookahead_stop(struct stk__tok_lookahead *la) {
  if (!la) return;
  atomic_store(&la->stop, 1);
  for (uint32_t i = 0; i < la->nth; i++) pthread_join(la->th[i], NULL);
  stk_sampler_close(la->walk.sampler);
  pthread_mutex_destroy(&la->mu);
  free(la);
}
