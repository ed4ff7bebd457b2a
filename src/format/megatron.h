/* Megatron's indexed dataset as the token windows read it: a dtype of
 * Megatron's DType enum, and one shard's checked .idx, mapped by the
 * format (megatron.c) for the dataset's lifetime. The one piece of a
 * format the layers above see, and only through the dataset layer's
 * interface (src/dataset/dataset.h), which includes it; the rest of the
 * formats' internals (format_impl.h) stays below. */
#ifndef STOKER_FORMAT_MEGATRON_H
#define STOKER_FORMAT_MEGATRON_H

#include <stddef.h>
#include <stdint.h>

struct stk_dataset;

/* Megatron's indexed dataset (megatron.c), for the token samplers built on
 * it. A dtype of Megatron's DType enum: its code in the .idx, item size,
 * whether it is signed or floating point, and NumPy's name for it. */
struct stk__megatron_dtype {
  uint8_t code, size, is_signed, is_float;
  const char *name;
};
const struct stk__megatron_dtype *stk__megatron_dtype_by_code(unsigned code);
const struct stk__megatron_dtype *stk__megatron_dtype_by_name(const char *name);
/* One pair's checked .idx, mapped for the dataset's lifetime: the arrays
 * point into the mapping, little-endian and possibly unaligned (read them
 * with stk__ld32/stk__ld64): lengths (int32, tokens) and pointers (int64,
 * bytes into the .bin) of `sequences` sequences, and documents + 1
 * document indices (int64; sequence numbers, first 0, last `sequences`). */
struct stk__megatron_shard {
  const struct stk__megatron_dtype *dtype;
  uint64_t sequences, documents, tokens;
  const uint8_t *lengths, *pointers, *doc_index;
  const uint8_t *map; /* owned by the dataset */
  size_t map_len;
};
/* Shard si's index (after it was indexed), or NULL when the dataset is not
 * a Megatron one or the shard is not indexed yet. */
const struct stk__megatron_shard *stk__megatron_shard(const struct stk_dataset *ds, size_t si);

#endif
