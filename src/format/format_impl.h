/* The inside of a dataset, shared by the format backends and the loader:
 * shards with their sample index, and the hooks a format implements. The
 * loader reads byte ranges itself (through an I/O engine) and hands each
 * sample's bytes to the format's parse hook. */
#ifndef STOKER_FORMAT_IMPL_H
#define STOKER_FORMAT_IMPL_H

#include <stdint.h>

#include "../base/base.h"
#include "stoker/format.h"

/* Byte range of one sample inside its shard. For plain files the range is
 * the whole file (len == UINT64_MAX until the file is opened: listing a
 * directory must not stat every file). */
struct stk_index_entry {
  uint64_t off;
  uint64_t len;
};

struct stk_shard {
  char *path;                  /* owned by the dataset */
  uint64_t first;              /* global number of the first sample */
  uint64_t count;              /* samples */
  int32_t label;               /* class label for every sample, or -1 */
  struct stk_index_entry *idx; /* count entries, owned; NULL for plain files */
};

struct stk_dataset {
  const struct stk_format_ops *fmt;
  char *root;
  struct stk_shard *shards;
  size_t nshards;
  uint64_t nsamples;
  void *fmt_state; /* backend-owned (MDS column layout, ...) */
  char err[STK_ERRMSG_MAX];
};

struct stk_format_ops {
  const char *name;
  const char *desc;  /* one line for `stoker help formats` */
  const char *exts;  /* space-separated shard extensions, e.g. ".tfrecord .tfrec" */
  unsigned caps;

  /* Find the shards under root (a directory or one file) and fill
   * ds->shards/nshards (paths only). NULL: the generic walk of dataset.c
   * keeps the files whose names end in one of exts, sorted by name. */
  int (*list)(struct stk_dataset *ds, const char *root);

  /* Fill sh->idx and sh->count from the shard open at fd. Must validate
   * framing enough that every range it records lies inside the file, and
   * never allocate more than the file's size justifies. err gets a
   * sentence naming the file and offset on failure. */
  int (*index)(struct stk_dataset *ds, struct stk_shard *sh, int fd, char *err);

  /* Split the bytes of one sample (exactly its index range, read by the
   * caller into buf) into out->fields, pointing into buf. verify != 0
   * checks stored checksums. `off` is the range's offset in the shard, for
   * error messages. Must not read outside [buf, buf+len). */
  int (*parse)(const struct stk_dataset *ds, const struct stk_shard *sh, const uint8_t *buf,
               uint64_t len, uint64_t off, int verify, struct stk_sample *out, char *err);

  /* Release fmt_state. Optional. */
  void (*free_state)(struct stk_dataset *ds);

  /* Writer hooks (STK_FMT_WRITE). The generic writer in writer.c handles
   * shard rotation, temp names and renames; these write bytes. */
  int (*wr_shard_begin)(struct stk_writer *w);
  int (*wr_sample)(struct stk_writer *w, const struct stk_sample *s);
  int (*wr_shard_end)(struct stk_writer *w);
  int (*wr_finish)(struct stk_writer *w); /* dataset-level index; optional */
};

/* Backends, one file each. */
extern const struct stk_format_ops stk__fmt_tfrecord;
extern const struct stk_format_ops stk__fmt_wds;
extern const struct stk_format_ops stk__fmt_npy;
extern const struct stk_format_ops stk__fmt_npz;
extern const struct stk_format_ops stk__fmt_mds;
extern const struct stk_format_ops stk__fmt_files;

/* Look a backend up by name; NULL if unknown. */
const struct stk_format_ops *stk__format_find(const char *name);

/* Global sample n -> shard position (binary search over first). */
size_t stk__dataset_shard_of(const struct stk_dataset *ds, uint64_t n);

/* Open a shard for reading with the dataset's error conventions. Returns a
 * file descriptor or a negative code, with ds->err set. */
int stk__shard_open(struct stk_dataset *ds, const struct stk_shard *sh);

#endif
