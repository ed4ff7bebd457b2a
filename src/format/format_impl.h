/* What a format is and what it sees of a dataset: the record of one shard
 * it fills (its samples' byte ranges), the hooks and capabilities it
 * declares, and the narrow calls through which it reaches the dataset.
 * The dataset itself (struct stk_dataset) and its shard table belong to
 * the dataset layer (src/dataset/dataset_impl.h), which opens shards,
 * locally or through the cache, and hands the hooks a shard and its bytes,
 * never a descriptor. See docs/internals/layers.md. */
#ifndef STOKER_FORMAT_IMPL_H
#define STOKER_FORMAT_IMPL_H

#include <pthread.h>
#include <stdint.h>
#include <sys/uio.h>

#include "../base/base.h"
#include "megatron.h"
#include "stoker/format.h"

/* Byte range of one sample inside its shard. For plain files the range is
 * the whole file (len == UINT64_MAX until the file is opened: listing a
 * directory must not stat every file). */
struct stk_index_entry {
  uint64_t off;
  uint64_t len;
};

/* One shard as a format knows it; the dataset layer keeps one per shard
 * in its table and hands it to the hooks. Where its samples are numbered
 * and whether its index is built yet are the dataset layer's own
 * (src/dataset/dataset_impl.h); a hook is told what it needs of them. */
struct stk_shard {
  char *path;                  /* owned by the dataset */
  uint64_t count;              /* samples */
  int32_t label;               /* class label for every sample, or -1 */
  struct stk_index_entry *idx; /* count entries, owned; NULL for plain files */
  uint64_t file_bytes;         /* the file's size as a dataset index records it
                                  (MDS index.json), else UINT64_MAX */
};

/* A shard's bytes as an index hook reads them: their size and a read of
 * any range. The dataset layer makes one over the shard it opened (a local
 * file, or the copy the cache staged: stk__shard_index in
 * src/dataset/shard.c); stk__bytes_mem makes one over bytes in memory. A
 * hook never learns which, and no format touches a shard's descriptor. */
struct stk__bytes {
  uint64_t size;
  /* Exactly len bytes at off into buf: 0, STK_ETRUNC when the bytes end
   * first, or the read's error code. */
  int (*read)(const struct stk__bytes *b, void *buf, size_t len, uint64_t off);
  const void *ctx; /* the reader's own */
};
static inline int stk__bytes_read(const struct stk__bytes *b, void *buf, size_t len, uint64_t off) {
  return b->read(b, buf, len, off);
}
/* A reader over n bytes at p (which must outlive it). */
void stk__bytes_mem(struct stk__bytes *b, const void *p, uint64_t n);

/* What a format sees of a dataset (opaque here): its shards in order, its
 * root (a folder, a file or a URL), the buffer its messages go to, and one
 * slot for the format's own state (MDS's column layout, Megatron's mapped
 * .idx files). The dataset layer implements these (src/dataset/table.c). */
size_t stk__ds_nshards(const struct stk_dataset *ds);
struct stk_shard *stk__ds_shard(const struct stk_dataset *ds, size_t i);
/* Shard sh's position in the table (sh from stk__ds_shard or a hook). */
size_t stk__ds_shard_no(const struct stk_dataset *ds, const struct stk_shard *sh);
const char *stk__ds_root(const struct stk_dataset *ds);
char *stk__ds_err(struct stk_dataset *ds);
/* The format's state, read with an acquire load; NULL before it is set. */
void *stk__ds_state(const struct stk_dataset *ds);
/* Set the format's state when the dataset has none yet (atomically, so
 * two threads building it lazily agree); returns the state it now holds:
 * st, or the one another thread set first (the caller frees its own). */
void *stk__ds_state_set(struct stk_dataset *ds, void *st);
/* Whether sh's sample index is built (a shard opened lazily is indexed on
 * first open, perhaps by another thread): its idx and count may be read. */
int stk__ds_shard_ready(const struct stk_dataset *ds, const struct stk_shard *sh);
/* Append a shard to the table (path copied) for list hooks; STK_ENOMEM. */
int stk__dataset_add_shard(struct stk_dataset *ds, const char *path, int32_t label);

struct stk_format_ops {
  const char *name;
  const char *desc;  /* one line for `stoker help formats` */
  const char *exts;  /* space-separated shard extensions, e.g. ".tfrecord .tfrec" */
  unsigned caps;     /* STK_FMT_* of stoker/format.h */

  /* What generic code (detection, listing) asks of a format instead of
   * testing which backend it holds. A shard whose first bytes hold magic
   * (magic_len bytes at magic_off) is this format's; sniff, when set,
   * decides for formats without fixed magic bytes (TFRecord's checksummed
   * length), given the first n bytes. side_exts: per-shard index files that
   * live next to the shards and are never shards themselves (".idx").
   * dir_index: a dataset-level index naming the shards ("index.json"),
   * whose presence in a directory selects the format. */
  const char *magic;
  uint16_t magic_off;
  uint8_t magic_len;
  int (*sniff)(const uint8_t *buf, size_t n);
  const char *side_exts;
  const char *dir_index;
  /* A shard NAME.ext (ext: the first of exts) is this format's only when
   * NAME + pair_ext lies beside it (Megatron's corpus.bin and corpus.idx):
   * detection by extension alone would take any folder of .bin files. The
   * format reads that companion by path (local), or from its bytes through
   * index_side (remote). NULL for other formats. */
  const char *pair_ext;

  /* Find the shards under root (a directory or one file) and add them to
   * the table (stk__dataset_add_shard: paths only). NULL: the generic walk of local.c
   * keeps the files whose names end in one of exts, sorted by name. */
  int (*list)(struct stk_dataset *ds, const char *root);
  /* A dir_index format's list from the index's bytes (text, len bytes)
   * rather than a file: a remote dataset's index is fetched into memory and
   * parsed there, never written out. The shards are added as DIR/NAME;
   * dir (a folder or a URL) is where the index lies, for paths and
   * messages. */
  int (*list_index)(struct stk_dataset *ds, const char *dir, const char *text, size_t len);

  /* Fill sh->idx and sh->count from the shard's bytes (b: their size and
   * reads of them). Must validate framing enough that every range it
   * records lies inside the file, and never allocate more than the file's
   * size justifies. err gets a sentence naming the file and offset on
   * failure. */
  int (*index)(struct stk_dataset *ds, struct stk_shard *sh, const struct stk__bytes *b, char *err);
  /* A paired format's index from its companion's bytes rather than by
   * path (a remote dataset: the companion fetched whole, the shard read
   * in ranges and never staged): side is mmap'ed (side_len bytes) and
   * becomes the format's (it munmaps it, also on failure); shard_bytes is
   * the shard's size. Fills sh->idx and sh->count as index does. */
  int (*index_side)(struct stk_dataset *ds, struct stk_shard *sh, uint64_t shard_bytes,
                    void *side, uint64_t side_len, char *err);

  /* Split the bytes of one sample (exactly its index range, read by the
   * caller into buf) into out->fields, pointing into buf. k is the
   * sample's position in its shard (a file of several samples picks its
   * one by it; past count when the caller's number is not the shard's).
   * verify != 0 checks stored checksums. `off` is the range's offset in the
   * shard, for error messages. Must not read outside [buf, buf+len). Sets
   * label, key, nfields and fields of out; out->index is the caller's (left
   * as is). */
  int (*parse)(const struct stk_dataset *ds, const struct stk_shard *sh, uint64_t k,
               const uint8_t *buf, uint64_t len, uint64_t off, int verify, struct stk_sample *out,
               char *err);

  /* Copy one sample's bytes (exactly its index range, len bytes at src) to
   * dst, checking its stored checksums in the same pass. Returns 1 when
   * every one matched (parse may then skip verifying), 0 when one did not
   * or the bytes are not a well-formed sample (dst holds them all the same;
   * parse with verify says why). Optional: the loader uses it with an
   * engine that copies out of a mapping (mapcopy). */
  int (*copy_check)(uint8_t *dst, const uint8_t *src, uint64_t len);

  /* Dataset-level figures beyond samples and bytes, for `stoker inspect`
   * (stk_dataset_property): the i-th name and its value as text into
   * buf[n]; STK_ENOENT past the last. Optional. */
  int (*property)(const struct stk_dataset *ds, int i, const char **name, char *buf, size_t n);

  /* Release the format's state (stk__ds_state), when the dataset is
   * closed. Optional. */
  void (*free_state)(struct stk_dataset *ds);

  /* Writer hooks (STK_FMT_WRITE). The generic writer in writer.c handles
   * shard rotation, temp names and renames; these write bytes. */
  int (*wr_shard_begin)(struct stk_writer *w);
  int (*wr_sample)(struct stk_writer *w, const struct stk_sample *s);
  int (*wr_shard_end)(struct stk_writer *w);
  int (*wr_finish)(struct stk_writer *w); /* dataset-level index; optional */
  /* The format stores the CRC32C of a sample's first field (TFRecord), so
   * a writer's caller that has it saves work by passing it. */
  int wr_crc_hint;
};

/* Backends, one file each. */
extern const struct stk_format_ops stk__fmt_tfrecord;
extern const struct stk_format_ops stk__fmt_wds;
extern const struct stk_format_ops stk__fmt_npy;
extern const struct stk_format_ops stk__fmt_npz;
extern const struct stk_format_ops stk__fmt_mds;
extern const struct stk_format_ops stk__fmt_files;
extern const struct stk_format_ops stk__fmt_megatron;
extern const struct stk_format_ops stk__fmt_npy_tokens; /* after npy: by name only */

/* Set the token dtype ("uint16", "int32", ...) a megatron writer writes;
 * before its first sample. The default is uint8 (each byte a token).
 * STK_EINVAL for an unknown name. */
int stk__megatron_writer_dtype(struct stk_writer *w, const char *name);

/* An open writer: the generic part (writer.c) and the backend's state.
 * Backends write through stk__wr_write() so byte counts stay right. */
struct stk_writer {
  const struct stk_format_ops *fmt;
  char *dir, *prefix;
  uint64_t shard_bytes_max, samples_per_shard;
  int write_index;
  int in_shard;           /* a shard is begun (its file opens on first write) */
  int finished;           /* stk__writer_finish() succeeded */
  int fd;                 /* current shard's temporary file, or -1 */
  uint8_t *wbuf;          /* write buffer of the current shard */
  size_t wlen;
  /* Bytes not yet written, in file order: pieces of wbuf and pieces of the
   * caller's samples (stk__wr_write_ref), written with one writev. */
  struct iovec *iov;
  int iov_n;
  int refs;               /* iov points into a caller's sample */
  uint64_t file_off;      /* bytes written to fd so far */
  uint64_t wb_off;        /* writeback started on [0, wb_off) */
  /* For wr_sample: the CRC32C of the sample's first field, when the caller
   * of stk__writer_add_batch had it (else NULL). */
  const uint32_t *crc_hint;
  char *tmp_path;         /* current shard: temporary and final names */
  char *path;
  uint64_t shard_no;      /* shards begun so far (the current one included) */
  uint64_t shard_samples; /* samples in the current shard */
  uint64_t shard_bytes;   /* bytes in the current shard */
  uint64_t samples, bytes; /* whole dataset */
  char **done;            /* finished files, removed by stk_writer_abort() */
  size_t ndone, done_cap;
  void *state;            /* backend-owned; freed by its wr_finish or abort */
  void (*free_state)(struct stk_writer *w);
  char err[STK_ERRMSG_MAX];
};

/* Writer helpers for backends (writer.c). stk__wr_write appends to the
 * current shard, opening its temporary file on first use under the name in
 * w->path (which wr_shard_begin or wr_sample may set; default
 * stk__wr_name(w, shard_no, first extension)). stk__wr_name builds
 * "DIR/PREFIX-NNNNN" + ext (malloc'ed).
 * stk__wr_file writes one extra whole file (an .idx, index.json) through a
 * temporary name and records it for abort. */
int stk__wr_write(struct stk_writer *w, const void *p, size_t n);
/* Like stk__wr_write, but large ranges are not copied: the writer keeps a
 * pointer and writes from p before the stk_writer_add (or
 * stk__writer_add_batch) that called the hook returns, so p must stay valid
 * until then (a field of the sample being written; not a buffer the hook
 * frees or reuses). */
int stk__wr_write_ref(struct stk_writer *w, const void *p, size_t n);
char *stk__wr_name(const struct stk_writer *w, uint64_t no, const char *ext);
int stk__wr_file(struct stk_writer *w, const char *path, const void *p, size_t n);
/* Finish the last shard and the dataset-level index without freeing w, so
 * its counters (shard_no = shards written, bytes) can be read; close or
 * abort it afterwards. */
int stk__writer_finish(struct stk_writer *w);
/* stk_writer_add for n samples in order, with their bytes gathered into as
 * few writev calls as possible (several records per call, payloads
 * written straight from the samples). The samples' data must stay valid
 * until it returns. crc, when not NULL, holds stk_crc32c(0, ...) of each
 * sample's first field: a caller that made the bytes computes it while
 * they are in its cache, and a format that stores that checksum (TFRecord)
 * does not read them again. It must be right: it is written as is. */
int stk__writer_add_batch(struct stk_writer *w, const struct stk_sample *s, const uint32_t *crc,
                          size_t n);
/* Whether the format stores the CRC32C of a sample's first field, so that
 * passing crc to stk__writer_add_batch saves work. */
int stk__writer_wants_crc(const struct stk_writer *w);
/* Record a finished file (or a directory the writer created) so
 * stk_writer_abort() removes it; STK_ENOMEM. */
int stk__wr_track(struct stk_writer *w, const char *path);
int stk__wr_track_dir(struct stk_writer *w, const char *path);

/* A small read window over a shard's bytes for index hooks that walk
 * headers: it serves [off, off+len) from one buffered read of up to `cap`
 * bytes, so many small records cost one read, and large ones are skipped
 * without reading their data. */
struct stk__win {
  const struct stk__bytes *src;
  uint64_t size; /* the shard's size */
  uint8_t *buf;
  size_t cap;
  uint64_t off; /* shard offset of buf[0] */
  size_t len;   /* valid bytes in buf */
};
int stk__win_init(struct stk__win *w, const struct stk__bytes *src, size_t cap);
/* Point *p at len (<= cap) bytes at off. STK_ETRUNC if the file ends first. */
int stk__win_get(struct stk__win *w, uint64_t off, size_t len, const uint8_t **p);
void stk__win_free(struct stk__win *w);

/* Size of the file open at fd (fstat). */
int stk__fd_size(int fd, uint64_t *size);
/* Grow an index array to hold n entries (doubling); STK_ENOMEM on failure. */
int stk__idx_push(struct stk_index_entry **idx, uint64_t *cap, uint64_t n, uint64_t off,
                  uint64_t len);
/* End an index build: on rc == 0 trim idx to n entries and hand it to sh
 * (idx, count); on failure free it. Returns rc. */
int stk__idx_finish(struct stk_shard *sh, struct stk_index_entry *idx, uint64_t n, uint64_t cap,
                    int rc);
/* Reset out for parse: no fields, empty key, label = sh->label. */
void stk__sample_reset(struct stk_sample *out, const struct stk_shard *sh);
/* Append a field; STK_EFORMAT past STK_MAX_FIELDS. Names are truncated to
 * STK_FIELD_NAME_MAX - 1 bytes. */
int stk__sample_add(struct stk_sample *out, const char *name, size_t name_len,
                    const uint8_t *data, uint64_t len);
/* The enum stk_elem_type named by n bytes of name ("int32"); NONE if none. */
int stk__elem_type_by_name(const char *name, size_t n);
/* The field a token writer (megatron, npy-tokens) writes as one sequence:
 * the one named "tokens", else the first typed 1-D field (an MDS ndarray
 * column), else the first that is not a label (cls, label); NULL if none. */
const struct stk_field *stk__token_field(const struct stk_sample *s);
/* Set out->key from n bytes, truncated to fit. */
void stk__sample_key(struct stk_sample *out, const char *key, size_t n);
/* Whether a field already carries the sample's label (named cls, label,
 * class or y), so writers need not add one. */
int stk__has_label_field(const struct stk_sample *s);
/* A small decimal integer label from a field's text ("7", "7\n"); -1 if
 * the bytes are not one. */
int32_t stk__parse_label(const uint8_t *p, uint64_t n);

/* Check a .npy image in [p, p+n): magic, version, header dictionary, and
 * that the array's bytes fit. Sets *data_off to the array data's offset;
 * on failure returns STK_EFORMAT/STK_ETRUNC with *why a static reason. */
int stk__npy_check(const uint8_t *p, uint64_t n, uint64_t *data_off, const char **why);
/* What a .npy header says (npz.c reads DLIO's layout with it, npy-tokens
 * its documents): where the data starts, the item size (0 if not a simple
 * dtype), the element count, the number of dimensions and the last one,
 * the order, whether the dtype is a little-endian or single-byte integer,
 * and the dtype string itself ("<i4", truncated; "" when structured). With
 * need_data, the data must lie within the n bytes too. 0, or a code with
 * *why set. */
struct stk__npy_info {
  uint64_t data_off, itemsize, count, last;
  int ndim, fortran, is_int, is_signed;
  uint64_t shape[STK_FIELD_MAX_DIMS]; /* the first STK_FIELD_MAX_DIMS dimensions */
  char descr[16];
};
int stk__npy_info(const uint8_t *p, uint64_t n, int need_data, struct stk__npy_info *info,
                  const char **why);
/* Write a version 1.0 header for a C-order array of dtype descr ("|u1",
 * "<i8") into out; returns its length (a multiple of 64), 0 if cap is too
 * small. */
size_t stk__npy_header(uint8_t *out, size_t cap, const char *descr, const uint64_t *shape,
                       int ndim);

/* NumPy's little-endian descr of an enum stk_elem_type ("|u1", "<i4",
 * "<f8"); "|u1" for NONE. */
const char *stk__npy_descr(int type);

/* Look a backend up by name; NULL if unknown. */
const struct stk_format_ops *stk__format_find(const char *name);
/* The backend whose magic bytes (or sniff hook) match the first n bytes of
 * a shard; NULL if none does. */
const struct stk_format_ops *stk__format_sniff(const uint8_t *buf, size_t n);
/* The first backend (in table order) that claims name by its extension
 * alone; NULL if none. Formats with a pair_ext are left to the dataset
 * layer, which can look for the companion file. */
const struct stk_format_ops *stk__format_by_ext(const char *name);
/* The formats' names, comma-separated, for messages ("tfrecord, wds, ..."). */
const char *stk__format_names(void);

/* Whether name ends in one of the space-separated extensions. */
int stk__has_ext(const char *name, const char *exts);

#endif
