/* Internals shared by the two files of the MDS format: mds.c (index.json,
 * compressed shards, reading) and mds_write.c (the writer). */
#ifndef STOKER_MDS_IMPL_H
#define STOKER_MDS_IMPL_H

#include <stdint.h>

#include "format_impl.h"

#define MDS_DEFAULT_LIMIT (1ull << 26) /* streaming's default size_limit */
#define MDS_MAX_LIMIT (1ull << 31)     /* offsets are u32 */

enum { COL_BYTES = 0, COL_SCALAR, COL_NDARRAY };

struct mds_col {
  char name[STK_FIELD_NAME_MAX];
  char enc[64];
  int64_t size; /* fixed size, or -1 for variable */
  uint8_t kind; /* COL_* */
  uint8_t type; /* enum stk_elem_type; NONE in an ndarray: in each value */
  uint8_t ndim; /* an ndarray's fixed shape; 0: in each value */
  uint64_t shape[STK_FIELD_MAX_DIMS];
};

/* The columns of one shard (shards may differ), from index.json. */
struct mds_shard {
  uint64_t samples, bytes;
  int ncols, label_col, label_kind;
  struct mds_col cols[STK_MAX_FIELDS];
};

/* The writer's hooks of stk__fmt_mds (mds_write.c). */
int stk__mds_wr_begin(struct stk_writer *w);
int stk__mds_wr_sample(struct stk_writer *w, const struct stk_sample *s);
int stk__mds_wr_end(struct stk_writer *w);
int stk__mds_wr_finish(struct stk_writer *w);

#endif
