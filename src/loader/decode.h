/* Decode ops: what the loader's decode workers do to one field of a sample
 * on its way into the batch buffer. One backend per file behind struct
 * stk_decode_ops (raw passthrough, JPEG with the ResNet-50 training
 * transform, npy array extraction), listed in stk__decoders[]. */
#ifndef STOKER_DECODE_H
#define STOKER_DECODE_H

#include <stdint.h>

#include "../base/base.h"
#include "stoker/format.h"
#include "stoker/loader.h"

/* Per-worker scratch that a decoder keeps between calls (a turbojpeg
 * handle, resize buffers, a zlib stream). Created lazily on first use by
 * the decoder itself and freed by its thread_free hook. */
struct stk_decode_tls {
  void *state[4]; /* indexed by decoder id */
};

struct stk_decode_ops {
  const char *name; /* "raw", "jpeg", "npy" */

  /* Bytes this field will occupy in the batch buffer. Fixed-size outputs
   * (jpeg to HxW) ignore the field; variable ones return its decoded size.
   * Must be cheap: called for every sample before the batch is laid out. */
  int (*out_size)(const struct stk_decode_cfg *cfg, const struct stk_field *in, uint64_t *size,
                  char *err);

  /* Decode in to out (cap bytes, at least out_size). rng is the sample's
   * own stream (seeded by seed, epoch and sample number), so augmentation
   * is reproducible whatever thread runs it. Sets *out_len. */
  int (*decode)(const struct stk_decode_cfg *cfg, void **tls, const struct stk_field *in,
                uint8_t *out, uint64_t cap, uint64_t *out_len, struct stk_rng *rng, char *err);

  /* Free what decode left in *tls. Optional. */
  void (*thread_free)(void *tls);
};

extern const struct stk_decode_ops stk__dec_raw;
extern const struct stk_decode_ops stk__dec_jpeg;
extern const struct stk_decode_ops stk__dec_npy;

/* The fields decoder (decode_fields.c): a whole sample, not one field, so
 * the pipeline calls these instead of an ops table: the record's size, and
 * the record packed into out (cap bytes). images is the loader's
 * image_fields; tls the worker's image decoder state (&tls[STK_DECODE_JPEG],
 * freed with that op's), rng the sample's stream (pack only). */
struct stk__fields_ctx {
  const struct stk_decode_cfg *cfg;
  const char *images;
  void **tls;
  struct stk_rng *rng;
};
int stk__fields_size(const struct stk__fields_ctx *x, const struct stk_sample *s, uint64_t *size,
                     char *err);
int stk__fields_pack(const struct stk__fields_ctx *x, const struct stk_sample *s, uint8_t *out,
                     uint64_t cap, uint64_t *out_len, char *err);
/* Sample i of a FIELDS batch from its record (stk_batch_sample checks the
 * loader's kind first). */
int stk__fields_unpack(const struct stk_batch *b, uint32_t i, struct stk_sample *out);

/* What a .npy file held in memory (n bytes at p) is, for the fields
 * decoder: a C-order array of a little-endian numeric dtype with at most
 * STK_FIELD_MAX_DIMS dimensions sets f's type, elem, ndim and shape and
 * *hdr_len (the bytes before its data), returning 0; anything else (or a
 * bad header) returns 1 and leaves f alone. */
int stk__npy_describe(const uint8_t *p, uint64_t n, struct stk_field *f, uint64_t *hdr_len);

/* Inflate a raw-deflate (zip method 8) field into out; exact size expected. */
int stk__inflate(const uint8_t *in, uint64_t in_len, uint8_t *out, uint64_t out_len, char *err);
/* Gather a strided field (STK_ENC_STRIDED: one sample of an array holding
 * its samples along the last axis) into raw_len consecutive bytes. */
int stk__gather(const struct stk_field *in, uint8_t *out, uint64_t cap, uint64_t *out_len,
                char *err);

#endif
