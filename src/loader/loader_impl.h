/* Internals of the loader shared by its files (the pipeline's own are in
 * pipeline_impl.h). */
#ifndef STOKER_LOADER_IMPL_H
#define STOKER_LOADER_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "../base/base.h"
#include "../dataset/dataset.h"
#include "../io/io.h"
#include "decode.h"
#include "stoker/loader.h"

/* Stage counters, updated by many threads with relaxed atomics. */
struct stage_ctr {
  _Atomic uint64_t busy_ns, wait_in_ns, wait_out_ns, items, bytes;
  uint32_t threads;
};

/* The sample order walked ahead of the reader, crossing epochs as the
 * reader does (both look-aheads; lookahead.c). walk_start takes an opened
 * sampler, ties it to *stop and the shares, and places it at resume (or
 * the start); walk_next gives the next id, STK_EOF after the last epoch or
 * at a sampler failure (the reader reports those). */
struct stk__walk {
  struct stk_sampler *sampler;
  uint64_t epoch, epoch_taken, epoch_samples;
  uint32_t epochs;
  int eof;
};
int stk__walk_start(struct stk__walk *w, const int *stop, const struct stk_loader_opts *o,
                    const struct stk_sampler_state *resume);
int stk__walk_next(struct stk__walk *w, uint64_t *id);

/* The look-ahead of a dataset behind a cache (lookahead.c): a second
 * sampler walks the order ahead of the reader (whose progress is
 * *reader_taken, samples drawn) and asks the cache to stage the shards it
 * meets, as far ahead as the cache's prefetch budget in bytes allows;
 * shards leave the window (unpinned) once the reader is past them. */
struct stk__lookahead;
int stk__lookahead_start(struct stk__lookahead **out, struct stk_dataset *ds,
                         const struct stk_loader_opts *o, const struct stk_sampler_state *resume,
                         atomic_uint_fast64_t *reader_taken, char *err);
/* Stop the thread and unpin every shard in the window; NULL is a no-op. */
void stk__lookahead_stop(struct stk__lookahead *la);

/* The look-ahead of token windows over a remote corpus
 * (lookahead_tokens.c): threads walk the windows' order ahead of the
 * reader and stage the cache chunks the next windows lie in. */
struct stk__tok_lookahead;
struct stk_tokens;
int stk__tok_lookahead_start(struct stk__tok_lookahead **out, struct stk_tokens *tok,
                             const struct stk_loader_opts *o,
                             const struct stk_sampler_state *resume,
                             atomic_uint_fast64_t *reader_taken, char *err);
/* Stop its threads; NULL is a no-op. */
void stk__tok_lookahead_stop(struct stk__tok_lookahead *la);

/* The sampler's part in counting a streamed dataset (sampler.c): the flag
 * that stops a count in progress, and why the last count failed. */
void stk__sampler_set_cancel(struct stk_sampler *s, const int *cancel);
const char *stk__sampler_errmsg(const struct stk_sampler *s);
/* How the epoch is shared between ranks (enum stk_shares); set before a
 * restore. The loader's reader and look-ahead set the same. */
void stk__sampler_set_shares(struct stk_sampler *s, int shares);
/* A sampler over positions 0..n-1 in order, for orders kept elsewhere
 * (token windows: tokens.c): no dataset; fp is what a restore checks a
 * state's dataset_fp against, seed what it checks its seed against. */
int stk__sampler_open_n(struct stk_sampler **out, uint64_t n, uint64_t fp, uint64_t seed,
                        const struct stk_sampler_opts *o);
/* Samples of an epoch of n that rank takes from position `from` on. */
uint64_t stk__share_len(uint64_t n, uint64_t from, uint32_t rank, uint32_t world, int shares);

/* Copy a caller's options into the library's structs (opts.c): of each of
 * the loader's, the sampler's and the decode options only the caller's
 * struct_size bytes (0 = all), the rest zero (defaults); dst->sampler and
 * dst->decode then point at *sampler and *decode. STK_EINVAL with err
 * naming the struct whose struct_size is larger than this library's. */
int stk__loader_opts_take(struct stk_loader_opts *dst, struct stk_sampler_opts *sampler,
                          struct stk_decode_cfg *decode, const struct stk_loader_opts *src,
                          char *err);

#endif
