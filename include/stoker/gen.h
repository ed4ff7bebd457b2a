/* Synthetic datasets for benchmarks and tests (`stoker gen`): any format
 * stoker writes, with random-byte or JPEG payloads and optional class
 * labels, deterministic by seed (the same options write byte-identical
 * files). */
#ifndef STOKER_GEN_H
#define STOKER_GEN_H

#include <stdint.h>

#include "stoker/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What stk_gen wrote, into the struct stk_gen_opts.stats points at: set
 * its struct_size first (stk_gen_stats_init, or zero it: 0 = this
 * header's); the library writes no further (docs/internals/api.md). */
struct stk_gen_stats {
  size_t struct_size; /* set by stk_gen_stats_init(); 0 = this header's */
  uint64_t samples;
  uint64_t shards;  /* files holding samples */
  uint64_t bytes;   /* bytes written, indexes included */
  uint64_t wall_ns;
};
#define stk_gen_stats_init(st) stk_gen_stats_init_sized((st), sizeof *(st))
STK_EXPORT void stk_gen_stats_init_sized(struct stk_gen_stats *st, size_t size);

/* Set with stk_gen_opts_init(): it records struct_size, and the library reads
 * only that many bytes (options added later take their defaults); a
 * struct_size larger than the library's is refused. A struct left zeroed
 * (struct_size 0) is taken to be this header's. */
struct stk_gen_opts {
  size_t struct_size; /* set by stk_gen_opts_init(); 0 = this header's */
  const char *dir;            /* output directory */
  const char *format;         /* "tfrecord", "wds", "npy", "npz", "mds", "megatron", "files" */
  uint64_t samples;           /* > 0 */
  uint64_t size_mean;         /* random payload bytes per sample; 0 = 112 KiB */
  uint64_t size_stdev;        /* normal spread of the size; 0 = all equal */
  /* JPEG payloads of a random size in [min, max] per dimension; all 0 =
   * random bytes instead. npy/npz hold uint8 arrays of shape (h, w, 3). */
  int jpeg_min_w, jpeg_min_h, jpeg_max_w, jpeg_max_h;
  int quality;                /* JPEG quality 1..100; 0 = 90 */
  uint32_t classes;           /* labels drawn from [0, classes); 0 = none */
  uint64_t shard_bytes;       /* start a new shard past this size; 0 = none */
  uint64_t samples_per_shard; /* 0 = no limit (one shard unless shard_bytes) */
  uint64_t seed;
  int force;                  /* replace what is in dir; else dir must be empty */
  int no_index;               /* tfrecord: skip the DALI .idx files */
  struct stk_gen_stats *stats; /* filled on success when not NULL */
  /* megatron: a token corpus of `samples` documents (one sequence each).
   * Document lengths in tokens are drawn around doc_len_mean (0 = 1024)
   * with a normal spread of doc_len_stdev (0 = all equal), or lognormal
   * with that mean and stdev when doc_len_lognormal; each is kept within
   * 1 .. 2^31 - 1 tokens. Tokens are uniform in [0, vocab - 1) and each
   * document ends with vocab - 1 (its end-of-document token); vocab 0 =
   * 50257 (GPT-2's). dtype: Megatron's name ("uint8", "int8", "int16",
   * "uint16", "int32", "int64"); NULL = uint16 when vocab < 65500, else
   * int32, as Megatron's preprocessing picks. size_mean and size_stdev
   * are not used. */
  uint64_t doc_len_mean, doc_len_stdev;
  int doc_len_lognormal;
  uint64_t vocab;
  const char *dtype;
  /* How the images (jpeg_* sizes) are encoded: "jpeg" (NULL), "png"
   * (lossless) or "webp" (lossy at quality, lossless at 100); the field
   * (and a files dataset's extension) is jpg, png or webp. */
  const char *image_format;
};
#define stk_gen_opts_init(o) stk_gen_opts_init_sized((o), sizeof *(o))
STK_EXPORT void stk_gen_opts_init_sized(struct stk_gen_opts *o, size_t size);

/* Progress callback: done samples of total, bytes so far. Return nonzero
 * to stop; stk_gen then removes what it wrote and returns STK_ECANCELED. */
typedef int (*stk_gen_progress_fn)(void *ctx, uint64_t done, uint64_t total, uint64_t bytes);

/* Write the dataset described by o into o->dir (created if missing). On
 * failure nothing is left behind and errmsg (STK_ERRMSG_MAX bytes, may be
 * NULL) holds a sentence; STK_EEXIST when dir holds files and force is 0. */
STK_EXPORT int stk_gen(const struct stk_gen_opts *o, stk_gen_progress_fn progress, void *ctx,
            char *errmsg);

#ifdef __cplusplus
}
#endif
#endif
