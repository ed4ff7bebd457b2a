/* The loader: a producer/consumer pipeline that streams batches of samples
 * from a dataset to a consumer.
 *
 *   sampler -> read (I/O engine) -> decode workers -> batcher -> prefetch ring
 *
 * The consumer calls stk_loader_next() for a batch and stk_batch_release()
 * when done with it. Every stage accounts its busy time, the time it waited
 * for input and the time it was blocked on output; the consumer's own wait
 * per batch is the time an accelerator would have starved. */
#ifndef STOKER_LOADER_H
#define STOKER_LOADER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "stoker/cache.h"
#include "stoker/error.h"
#include "stoker/format.h"
#include "stoker/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- sampler --------------------------------------------------------- */

enum stk_shuffle {
  STK_SHUFFLE_AUTO = 0, /* GLOBAL for random-access formats, else BLOCK */
  STK_SHUFFLE_NONE,     /* dataset order */
  STK_SHUFFLE_GLOBAL,   /* a full seeded permutation of all samples per epoch */
  STK_SHUFFLE_BLOCK,    /* seeded shard order, then samples shuffled within
                           consecutive windows of shuffle_window samples: a
                           bounded shuffle buffer whose order is reproducible
                           from (seed, epoch, position) alone */
};

/* Where an epoch stands; enough to resume with exactly the same remaining
 * order, for any world size. position counts samples of the epoch's global
 * order already delivered by all ranks together. */
struct stk_sampler_state {
  uint64_t seed;
  uint64_t epoch;
  uint64_t position;
  /* stk_sampler_fingerprint() of the dataset the state belongs to, or 0
   * when not recorded (states from before it existed). stk_sampler_save
   * leaves it 0; set it when writing a state out, so that a restore on
   * another dataset is refused. */
  uint64_t dataset_fp;
};

struct stk_sampler;

/* Set with stk_sampler_opts_init(): it records struct_size, and the library
 * reads only that many bytes (fields added later take their defaults); a
 * struct_size larger than the library's is refused. A struct left zeroed
 * (struct_size 0) is taken to be this header's. */
struct stk_sampler_opts {
  size_t struct_size; /* set by stk_sampler_opts_init(); 0 = this header's */
  enum stk_shuffle shuffle;
  uint64_t seed;
  uint64_t shuffle_window; /* BLOCK mode window; 0 = 4096 */
  uint32_t rank, world;    /* this rank of world ranks; world 0 = 1 */
};

#define stk_sampler_opts_init(o) stk_sampler_opts_init_sized((o), sizeof *(o))
STK_EXPORT void stk_sampler_opts_init_sized(struct stk_sampler_opts *o, size_t size);

/* The sampler is usable on its own (tests, other loaders). It reads only
 * shard sample counts from ds. opts NULL: every option its default.
 * STK_EINVAL (logged, naming stk_sampler_opts) for a struct_size larger
 * than this library's or a rank not below world. */
STK_EXPORT int stk_sampler_open(struct stk_sampler **out, const struct stk_dataset *ds,
                     const struct stk_sampler_opts *opts);
STK_EXPORT void stk_sampler_close(struct stk_sampler *s);
/* Next global sample number for this rank, or STK_EOF at the end of the
 * epoch. Advances the shared position by one round (world samples) each
 * time every rank would have taken one. */
STK_EXPORT int stk_sampler_next(struct stk_sampler *s, uint64_t *sample);
/* Start epoch e (position 0). */
STK_EXPORT void stk_sampler_set_epoch(struct stk_sampler *s, uint64_t e);
/* Samples this rank gets in the current epoch. */
STK_EXPORT uint64_t stk_sampler_epoch_len(const struct stk_sampler *s);
/* Save the state at a round boundary (after a whole batch of every rank). */
STK_EXPORT void stk_sampler_save(const struct stk_sampler *s, struct stk_sampler_state *st);
/* Restore a saved state, possibly into a sampler of another world size;
 * STK_EINVAL if the seed differs, the position is past the epoch, or the
 * state records a dataset fingerprint that is not this dataset's (the
 * dataset given to stk_sampler_open must then still be open). */
STK_EXPORT int stk_sampler_restore(struct stk_sampler *s, const struct stk_sampler_state *st);
/* A fingerprint of the dataset's layout, the same for any seed, rank or
 * path it is reached by: format, shard names below the dataset's root,
 * their sample counts and sizes as opening the dataset learned them (the end
 * of a shard's last indexed sample; none for plain files). Never 0. Asks
 * the file system nothing. */
STK_EXPORT uint64_t stk_sampler_fingerprint(const struct stk_dataset *ds);

/* ---- decode ---------------------------------------------------------- */

/* FIELDS: each sample as all its fields (or those decode->field lists,
 * comma-separated), with their names, element types and shapes, its key
 * and label: read them with stk_batch_sample(). Deflated fields come
 * inflated, strided ones gathered, the rest as stored. */
enum stk_decode_kind { STK_DECODE_RAW = 0, STK_DECODE_JPEG, STK_DECODE_NPY, STK_DECODE_FIELDS };
enum stk_dtype { STK_DTYPE_U8 = 0, STK_DTYPE_F32 };
enum stk_layout { STK_LAYOUT_HWC = 0, STK_LAYOUT_CHW };

/* Set with stk_decode_cfg_init(), sized as stk_sampler_opts is. */
struct stk_decode_cfg {
  size_t struct_size; /* set by stk_decode_cfg_init(); 0 = this header's */
  int kind;          /* enum stk_decode_kind */
  const char *field; /* field to decode (e.g. "jpg"); NULL = the first */
  /* JPEG: the ResNet-50 training transform. */
  int out_h, out_w;  /* output size; 0 = 224 */
  int train;         /* 1: random resized crop + random flip; 0: center crop */
  float scale_min, scale_max; /* crop area range; 0,0 = 0.08, 1.0 */
  float ratio_min, ratio_max; /* crop aspect range; 0,0 = 3/4, 4/3 */
  int dtype;         /* enum stk_dtype; F32 is normalized by mean/std */
  int layout;        /* enum stk_layout */
  float mean[3], std[3]; /* in 0..255 units; std all zeros = ImageNet's std, and
                            ImageNet's mean when mean is all zeros too; a std
                            given with a zero mean is mean 0 */
};

#define stk_decode_cfg_init(o) stk_decode_cfg_init_sized((o), sizeof *(o))
STK_EXPORT void stk_decode_cfg_init_sized(struct stk_decode_cfg *o, size_t size);

/* ---- loader ---------------------------------------------------------- */

/* Allocator for batch buffers, so pinned (page-locked) memory can back
 * them. alloc returns memory of at least size bytes aligned to 4096, or
 * NULL; free releases it. Called only when the pool grows, never per
 * sample or per batch in steady state. */
struct stk_allocator {
  void *(*alloc)(void *ctx, size_t size);
  void (*free)(void *ctx, void *p, size_t size);
  void *ctx;
};

/* What a sample that cannot be read, parsed or decoded (a corrupt or
 * truncated image, a checksum mismatch, a file gone) does to the run.
 * SKIP: it is left out of its batch and counted (stk_batch.skipped,
 * stk_loader_stats.skipped); the first is logged as a warning naming its
 * shard, offset and why, the rest at info level. FAIL: the run stops with
 * that error (stk_loader_next returns it, errmsg naming the same). DEFAULT
 * (0) is SKIP, so that one bad file in a million does not end a long run
 * (the ImageNet training set has CMYK JPEGs and a PNG named .JPEG, which
 * decode, and web-scraped sets have truncated files), except that 64
 * samples in a row that fail (or every sample of a shorter run) stop the
 * run with the latest error: that is a wrong dataset or option, or a
 * dataset gone, not a bad file. Under DEFAULT a failing source (STK_EIO,
 * ENET, ETIMEDOUT, ENOMEM, ENOSPC, ...: an origin down past its retries)
 * stops the run at once, as FAIL does. FAIL was 0 before DEFAULT existed;
 * a program built then that set it explicitly now gets DEFAULT. */
enum stk_on_error { STK_ON_ERROR_DEFAULT = 0, STK_ON_ERROR_SKIP = 1, STK_ON_ERROR_FAIL = 2 };

/* Programs built against this header and linked with a newer libstoker
 * keep working: set the options with stk_loader_opts_init(), which records
 * the size of the caller's struct in struct_size, and the library reads only
 * that many bytes (fields added later take their defaults); a struct_size
 * larger than the library's is refused, naming the struct. A struct left
 * zeroed (struct_size 0) is taken to be this header's. The sampler and
 * decode options are separate structs, each sized on its own, that these
 * options point at (never embedded by value: a field added to one of them
 * would move every loader option after it). stk_loader_open copies all
 * three; they need to live only until it returns (the strings they point
 * at, for the loader's life). See docs/internals/api.md. */
struct stk_loader_opts {
  size_t struct_size;     /* set by stk_loader_opts_init(); 0 = this header's */
  uint32_t batch_size;    /* samples per batch; 0 = 32 */
  uint32_t threads;       /* decode workers; 0 = number of cores */
  uint32_t epochs;        /* 0 = 1 */
  int drop_last;          /* drop a final partial batch of an epoch */
  uint64_t epoch_samples; /* use only this many of this rank's samples per
                             epoch (the first of the epoch's order); 0 = all */
  const struct stk_sampler_opts *sampler; /* NULL = every sampler option its default */
  const struct stk_decode_cfg *decode;    /* NULL = raw (every decode option its default) */
  const char *io_engine;  /* "auto", "io_uring", "pread", "mmap", "mapcopy";
                             NULL = auto (mmap for samples of 8 MiB or more,
                             else pread or io_uring by size; mapcopy only by
                             name; docs/internals/loader.md). With
                             mmap, in-place batches are the page cache's pages:
                             a file truncated while its batch is held makes
                             the next touch of those bytes raise SIGBUS, and
                             one rewritten in place changes the batch's bytes
                             (pread: copies, stable) */
  int direct;             /* O_DIRECT reads into aligned buffers */
  int skip_verify;        /* do not check stored checksums (on by default) */
  uint64_t max_inflight;  /* bytes in flight in the I/O engine; 0 = two mean
                             samples, at least 64 MiB, at most mem_cap / 2 */
  uint32_t io_depth;      /* requests in flight; 0 = 64 */
  uint32_t prefetch;      /* initial ring depth in batches; 0 = 2 (4 for a
                             token loader, whose ring grows only while the
                             consumer keeps more than two batches) */
  uint32_t prefetch_max;  /* depth the ring may grow to; 0 = 16 */
  uint64_t mem_cap;       /* cap on batch-buffer bytes (ring + in flight + held
                             by the consumer); 0 = room for four batches of
                             the mean sample size, at least 1 GiB, at most
                             half the RAM. A batch that alone needs more
                             fails with STK_ENOMEM. */
  int on_error;           /* enum stk_on_error; 0 = skip and count bad samples */
  const struct stk_allocator *alloc; /* NULL = aligned malloc */
  const struct stk_sampler_state *resume; /* NULL = start at epoch 0 */
  int shares;             /* enum stk_shares: how an epoch that world does not
                             divide is shared; 0 = STK_SHARES_UNEVEN */
  /* STK_DECODE_FIELDS: the image fields decoded here (JPEG, PNG or WebP by
   * their first bytes) instead of passed as stored, comma-separated: a
   * name, "*" for every field named *.jpg, *.jpeg, *.png or *.webp, "-name"
   * to leave one out ("*,-mask.png"). NULL or "" = none. Such a field
   * comes typed: with decode->out_h and out_w 0, the whole image at its own
   * size as uint8 RGB, as PIL's convert("RGB") and torchvision's
   * decode_image make it (images of a batch may differ in size), shape
   * (H, W, 3), or (3, H, W) with layout CHW; with either set, the image
   * decode's output (its crop, resize, flip, dtype, layout, mean/std). */
  const char *image_fields;
};

/* Ranks' shares of an epoch of n samples. UNEVEN: rank r takes positions
 * r, r + world, ... below n (shares differ by one where world does not
 * divide n). PAD: every rank takes ceil(n / world), the last round wrapping
 * to the start of the epoch's order (DistributedSampler's default). DROP:
 * every rank takes floor(n / world), the last n % world of the order left
 * out (DistributedSampler's drop_last). PAD and DROP give every rank the
 * same number of batches, so data-parallel ranks never wait on one that has
 * run out; with a streamed dataset they count it whole first. */
enum stk_shares { STK_SHARES_UNEVEN = 0, STK_SHARES_PAD, STK_SHARES_DROP };

/* One batch, owned by the loader until stk_batch_release(). data holds the
 * samples back to back (fixed-size decodes) or at offsets[i] with lengths
 * len[i] (variable-size ones); labels[i] is -1 where there is none. */
struct stk_batch {
  uint32_t n;
  uint64_t epoch;
  uint64_t seq;          /* batch number since start */
  uint8_t *data;
  uint64_t bytes;        /* sum of len[] */
  const uint64_t *offsets;
  const uint64_t *len;
  const uint64_t *indices; /* global sample numbers */
  const int32_t *labels;
  uint32_t skipped;      /* samples left out by on_error (skip, the default) */
};

struct stk_loader;

/* Sample i of batch b of loader l, opened with STK_DECODE_FIELDS, split
 * into *out: its index, label and key, and its fields, whose data point
 * into the batch (valid until it is released). A field's type, ndim and
 * shape are what the format records (MDS typed columns) or a .npy
 * member's header says (a C-order array of a little-endian numeric
 * dtype: data is then the array's, without the header); type
 * STK_ELEM_NONE: bytes. STK_EINVAL when l is not a FIELDS loader or i is
 * out of range. */
STK_EXPORT int stk_batch_sample(const struct stk_loader *l, const struct stk_batch *b, uint32_t i,
                                struct stk_sample *out);

/* Zero *o (every option its default) and record sizeof *o, so that a newer
 * library knows which fields this program has. Use the macro. */
#define stk_loader_opts_init(o) stk_loader_opts_init_sized((o), sizeof *(o))
STK_EXPORT void stk_loader_opts_init_sized(struct stk_loader_opts *o, size_t size);

/* Pinned (page-locked) batch buffers through the CUDA runtime, loaded at
 * run time: fills *a with hooks over cudaMallocHost/cudaFreeHost, made on
 * the rank's own device: the allocating thread (a loader thread) selects
 * it with cudaSetDevice first, so no rank makes a context on GPU 0.
 * stk_pinned_allocator_open takes the device from LOCAL_RANK (modulo the
 * devices visible, for ranks that each see one), else device 0;
 * stk_pinned_allocator_open_device takes it (-1: the same choice). Fails
 * with STK_ENOTSUP and a sentence in errmsg when no libcudart or no device
 * is found (the caller then goes on with ordinary memory), STK_EINVAL for
 * a device the runtime does not see. Release with
 * stk_pinned_allocator_close() after the last loader using it is closed. */
STK_EXPORT int stk_pinned_allocator_open(struct stk_allocator *a, char *errmsg);
STK_EXPORT int stk_pinned_allocator_open_device(struct stk_allocator *a, int device,
                                                char *errmsg);
STK_EXPORT void stk_pinned_allocator_close(struct stk_allocator *a);

/* The device a pinned allocator allocates on, or -1 when a is not one. */
STK_EXPORT int stk_pinned_allocator_device(const struct stk_allocator *a);

/* Release a pinned batch that asynchronous host-to-device copies may still
 * be reading (x.cuda(non_blocking=True) returns before its copy is done):
 * records a CUDA event on stream (a cudaStream_t of device, the stream the
 * copies were issued on; NULL is the legacy default stream; device -1 is
 * a's device) and hands b back to l only once that event has completed,
 * from a thread of the allocator, so the caller never waits and the
 * loader never overwrites memory a copy is reading. The calling thread's
 * current device becomes device. Where the event cannot be made or
 * recorded, the release waits for the whole device instead (slower, still
 * safe) and a warning is logged once. a must come from
 * stk_pinned_allocator_open*, b from a loader using it. Call
 * stk_pinned_flush(a) before closing l: it returns once every release
 * issued so far has reached its loader. */
STK_EXPORT void stk_pinned_release(const struct stk_allocator *a, struct stk_loader *l,
                                   struct stk_batch *b, void *stream, int device);
STK_EXPORT void stk_pinned_flush(const struct stk_allocator *a);

/* Start the pipeline's threads on an open dataset (which must outlive the
 * loader). Returns 0, or a code with errmsg (if given) set. */
STK_EXPORT int stk_loader_open(struct stk_loader **out, struct stk_dataset *ds,
                    const struct stk_loader_opts *opts, char *errmsg);
/* Block until the next batch is ready and hand it out. Returns 0, STK_EOF
 * after the last epoch, or the first pipeline error (with errmsg set; the
 * loader is then stopped). The batch stays valid until released. The ring
 * grows for batches the consumer keeps, up to prefetch_max; a consumer
 * holding prefetch_max + 2 batches waits until one is released (from
 * another thread: a single-threaded consumer must release first). */
STK_EXPORT int stk_loader_next(struct stk_loader *l, struct stk_batch **out);
/* Like stk_loader_next() but never blocks: STK_EAGAIN when the next batch
 * is not ready yet (nothing is counted then). */
STK_EXPORT int stk_loader_try_next(struct stk_loader *l, struct stk_batch **out);
STK_EXPORT void stk_batch_release(struct stk_loader *l, struct stk_batch *b);
/* Stop the threads and free everything; unreleased batches die with it. */
STK_EXPORT void stk_loader_close(struct stk_loader *l);
/* Batches this rank gets in a whole epoch with these options (its share,
 * epoch_samples, batch_size, drop_last), counting a streamed dataset whole
 * first; a share that skipped samples (on_error) thin may give fewer. 0,
 * or a code with errmsg set. */
STK_EXPORT int stk_loader_epoch_batches(struct stk_loader *l, uint64_t *out, char *errmsg);
/* Ask the pipeline to stop soon; next() then returns STK_ECANCELED.
 * Safe from a signal handler's thread (only sets a flag). */
STK_EXPORT void stk_loader_cancel(struct stk_loader *l);
STK_EXPORT const char *stk_loader_errmsg(const struct stk_loader *l);
/* Sampler state after the last batch handed out, with the dataset's
 * fingerprint (the first call computes it: a stat per local shard): save
 * it to resume; a resume on another dataset is refused. */
STK_EXPORT void stk_loader_state(const struct stk_loader *l, struct stk_sampler_state *st);
/* Name of the I/O engine in use ("io_uring", "pread" or "mmap"). */
STK_EXPORT const char *stk_loader_engine(const struct stk_loader *l);

/* ---- stats ----------------------------------------------------------- */

enum stk_stage { STK_STAGE_READ = 0, STK_STAGE_DECODE, STK_STAGE_BATCH, STK_STAGE_RING,
                 STK_STAGE_COUNT };

struct stk_stage_stats {
  const char *name;
  uint64_t busy_ns;       /* summed over the stage's threads */
  uint64_t wait_in_ns;    /* blocked waiting for input */
  uint64_t wait_out_ns;   /* blocked because the next stage was full */
  uint64_t items, bytes;
  uint32_t threads;
};

struct stk_loader_stats {
  struct stk_stage_stats stage[STK_STAGE_COUNT];
  uint64_t wall_ns;        /* since open */
  uint64_t batches, samples, bytes, skipped;
  uint64_t consumer_wait_ns; /* total time next() blocked */
  uint64_t wait_p50_ns, wait_p99_ns, wait_max_ns; /* per batch */
  uint32_t ring_depth, ring_depth_max;
  uint64_t mem_bytes;      /* batch-buffer bytes allocated now */
  uint64_t mem_peak;       /* the most ever allocated at once */
  uint64_t mem_cap;        /* the cap in force (opts.mem_cap or its default) */
  uint64_t mem_over_cap;   /* times a batch exceeded the cap because the
                              consumer held every other batch (else 0) */
  uint64_t read_ops, read_bytes; /* I/O requests after coalescing */
  int has_cache;           /* the dataset is read through a cache: */
  struct stk_cache_stats cache;
};

/* Snapshot the stats; safe while the pipeline runs. */
STK_EXPORT void stk_loader_stats(struct stk_loader *l, struct stk_loader_stats *st);
/* Write the stats as a JSON object (the keys of struct stk_loader_stats). */
STK_EXPORT void stk_loader_stats_json(const struct stk_loader_stats *st, struct stk_json *j);

#ifdef __cplusplus
}
#endif
#endif
