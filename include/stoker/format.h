/* Datasets on disk: sharded files in one of the formats users already have
 * (TFRecord, WebDataset tar, NumPy npy/npz, Mosaic MDS, Megatron-LM's
 * indexed token datasets, plain files), each a
 * backend behind one struct stk_format_ops. A dataset is a list of shards,
 * each with an index of the byte range of every sample, so that any sample
 * can be read by its global number. */
#ifndef STOKER_FORMAT_H
#define STOKER_FORMAT_H

#include <stdint.h>
#include <stdio.h>

#include "stoker/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define STK_FIELD_NAME_MAX 32
#define STK_MAX_FIELDS 16
#define STK_FIELD_MAX_DIMS 8

/* Element types of typed fields (token columns), by NumPy's names through
 * stk_elem_type_name(): "uint8", "int8", ..., "float64"; "bytes" for NONE. */
enum stk_elem_type {
  STK_ELEM_NONE = 0,
  STK_ELEM_U8, STK_ELEM_I8, STK_ELEM_U16, STK_ELEM_I16, STK_ELEM_F16, STK_ELEM_U32,
  STK_ELEM_I32, STK_ELEM_F32, STK_ELEM_U64, STK_ELEM_I64, STK_ELEM_F64,
  STK_ELEM_COUNT
};
STK_EXPORT const char *stk_elem_type_name(int type);
/* Item size of a type in bytes; 0 for NONE or an unknown type. */
STK_EXPORT unsigned stk_elem_type_size(int type);

/* How a field's bytes are stored. Deflated fields (npz members) are
 * inflated by the decode stage, never by the parser. A strided field is
 * one sample of an array that holds its samples along the last axis (DLIO's
 * npz files: x[..., i]): raw_len / elem elements of elem bytes, the k-th at
 * data + k * stride; len covers the span from the first to the last. The
 * decode stage gathers it into consecutive bytes. */
enum stk_encoding { STK_ENC_NONE = 0, STK_ENC_DEFLATE = 1, STK_ENC_STRIDED = 2 };

/* One named part of a sample: "jpg" and "cls" of a WebDataset sample, a
 * column of an MDS sample, an array of an npz file. data points into the
 * buffer the sample was parsed from (the caller's), never owned here. */
struct stk_field {
  char name[STK_FIELD_NAME_MAX];
  const uint8_t *data;
  uint64_t len;     /* stored bytes at data */
  uint64_t raw_len; /* bytes after decoding the encoding (== len for NONE) */
  int encoding;     /* enum stk_encoding */
  uint32_t elem;    /* STK_ENC_STRIDED: bytes per element; otherwise, when
                       nonzero, the size of the field's elements (a Megatron
                       sequence's tokens: 2 for uint16) */
  uint64_t stride;  /* STK_ENC_STRIDED: bytes from one element to the next */
  /* What the format records of the elements' type and the array's shape
   * (MDS ndarray and numeric columns): type is an enum stk_elem_type, elem
   * then its size, and the raw_len bytes are a C-order array of shape
   * shape[0..ndim) in little-endian order. type STK_ELEM_NONE: bytes (or a
   * format that records no type); ndim 0 with a type: one scalar. */
  uint8_t type;
  uint8_t ndim;
  uint64_t shape[STK_FIELD_MAX_DIMS];
};

/* A sample split into fields. label is the class (plain-file datasets: the
 * index of the first-level subfolder), or -1 when the format has none. */
struct stk_sample {
  uint64_t index; /* global sample number */
  int32_t label;
  char key[128];  /* WebDataset key, file name, or "" */
  int nfields;
  struct stk_field fields[STK_MAX_FIELDS];
};

/* Format capabilities. */
#define STK_FMT_RANDOM_ACCESS 0x1u /* per-sample index: full-permutation shuffle */
#define STK_FMT_CHECKSUM 0x2u      /* stores checksums that verify can check */
#define STK_FMT_WRITE 0x4u         /* has a writer (gen, pack) */
#define STK_FMT_LABELS 0x8u        /* samples can carry a class label */
#define STK_FMT_TREE 0x10u         /* one sample per file in a directory tree, labelled by
                                      first-level subfolder; no shard extension */
#define STK_FMT_WRITE_PER_FILE 0x20u /* the writer writes one file per sample */
#define STK_FMT_CLASS_DIRS 0x40u  /* shards may sit in first-level class folders, which
                                    * give their label (stoker gen --classes for npy) */

struct stk_dataset;
struct stk_shard;
struct stk_writer;

/* One format backend. Hooks are documented in src/format/format_impl.h;
 * the table stk_formats[] lists them all, NULL-terminated. */
struct stk_format_ops;
extern STK_EXPORT STK_EXPORT const struct stk_format_ops *const stk_formats[];

/* Name, capability flags and description of a format by position in
 * stk_formats[]; returns STK_ENOENT past the end. */
STK_EXPORT int stk_format_info(int i, const char **name, unsigned *caps, const char **desc);

/* ---- reading --------------------------------------------------------- */

struct stk_cache_opts;

/* Set with stk_dataset_opts_init(): it records struct_size, and the library reads
 * only that many bytes (options added later take their defaults); a
 * struct_size larger than the library's is refused. A struct left zeroed
 * (struct_size 0) is taken to be this header's. */
struct stk_dataset_opts {
  size_t struct_size; /* set by stk_dataset_opts_init(); 0 = this header's */
  const char *format; /* "tfrecord", "wds", "npy", "npz", "mds", "megatron", "files", or
                         NULL to detect */
  int index_threads;  /* threads building shard indexes; 0 = number of cores */
  /* Cache tiers (stoker/cache.h) for a URL, or for a path to read through a
   * disk tier (cache->dir set). NULL: URLs get a RAM tier with defaults. */
  const struct stk_cache_opts *cache;
};
#define stk_dataset_opts_init(o) stk_dataset_opts_init_sized((o), sizeof *(o))
STK_EXPORT void stk_dataset_opts_init_sized(struct stk_dataset_opts *o, size_t size);

/* Whether path names shards one by one (a brace pattern, or a shard-list
 * file: *.txt, *.list, *.lst, *.shards) or is a URL, rather than a folder
 * or a file: callers that would create a folder at path (bench generating
 * its data) must not. */
STK_EXPORT int stk_dataset_path_is_source(const char *path);

/* Open the dataset at path: a directory of shards, a single shard file, an
 * MDS directory with index.json, or a Megatron prefix (corpus for
 * corpus.bin + corpus.idx; local only); or a URL (file://, http://, https://,
 * s3://bucket/prefix) whose shards are staged through the cache: see
 * stoker/cache.h and docs/internals/cache.md. Builds (or reads) every shard's index,
 * except for a remote dataset without a manifest or dataset index: its shards are
 * counted and indexed as they arrive (see stk_dataset_count).
 * On failure returns a code and, when errmsg is given, a sentence naming the
 * file and offset into errmsg (STK_ERRMSG_MAX bytes). *out is set only on
 * success; close it with stk_dataset_close(). */
STK_EXPORT int stk_dataset_open(struct stk_dataset **out, const char *path,
                     const struct stk_dataset_opts *opts, char *errmsg);
STK_EXPORT void stk_dataset_close(struct stk_dataset *ds);

/* The dataset as it is shown in messages: the path, pattern or list as
 * given, or a URL with credentials and query strings replaced by "***".
 * Owned by the dataset. */
STK_EXPORT const char *stk_dataset_location(const struct stk_dataset *ds);
/* Samples in the dataset. For a remote dataset opened without a manifest this
 * first counts the shards not counted yet, staging them (what
 * stk_dataset_count does, without its error): use
 * stk_dataset_samples_counted to ask without fetching anything. */
STK_EXPORT uint64_t stk_dataset_num_samples(const struct stk_dataset *ds);
/* Samples counted so far, never fetching; *complete (if given) is 1 when
 * every shard is counted. A remote dataset opened without a manifest starts
 * at 0 and counts its shards as the loader (or stk_dataset_count) stages
 * them; any other dataset is complete when opened. */
STK_EXPORT uint64_t stk_dataset_samples_counted(const struct stk_dataset *ds, int *complete);
/* Count every shard's samples now, staging (and indexing) the shards not
 * counted yet, several at a time; a no-op for a complete dataset. cancel
 * may be NULL (STK_ECANCELED when *cancel becomes nonzero). Errors name the
 * shard; an empty dataset is STK_EEMPTY. */
STK_EXPORT int stk_dataset_count(struct stk_dataset *ds, const int *cancel, char *errmsg);
STK_EXPORT size_t stk_dataset_num_shards(const struct stk_dataset *ds);
STK_EXPORT const char *stk_dataset_format(const struct stk_dataset *ds);
STK_EXPORT unsigned stk_dataset_caps(const struct stk_dataset *ds);

struct stk_shard_info {
  const char *path;    /* owned by the dataset */
  uint64_t first;      /* global number of its first sample */
  uint64_t count;      /* samples in the shard */
  uint64_t bytes;      /* sum of the samples' byte ranges */
};
STK_EXPORT int stk_dataset_shard_info(const struct stk_dataset *ds, size_t i, struct stk_shard_info *out);

/* Stored bytes of sample n (its byte range in the shard) without reading
 * it; plain files are stat'ed. STK_ERANGE past the end. */
STK_EXPORT int stk_dataset_sample_bytes(struct stk_dataset *ds, uint64_t n, uint64_t *bytes);

/* Read sample n into *buf (grown with realloc as needed; the caller owns it
 * and frees it) and split it into *out, whose fields point into *buf.
 * verify != 0 checks every stored checksum. Errors name file and offset. */
STK_EXPORT int stk_dataset_read(struct stk_dataset *ds, uint64_t n, int verify, uint8_t **buf,
                     size_t *cap, struct stk_sample *out);

/* Datasets read through a cache (a URL, or a path with a cache directory):
 * stage every shard (`stoker cache warm`), calling progress after each;
 * STK_EINVAL for a dataset without a cache. */
STK_EXPORT int stk_dataset_warm(struct stk_dataset *ds, const int *cancel,
                     void (*progress)(void *arg, size_t done, size_t total), void *arg,
                     char *errmsg);
/* The cache's figures so far; STK_ENOENT when the dataset has no cache. */
struct stk_cache_stats;
STK_EXPORT int stk_dataset_cache_stats(const struct stk_dataset *ds, struct stk_cache_stats *st);

/* What the format records about the whole dataset beyond samples and
 * bytes, as name/value text (Megatron: dtype, token_bytes, tokens,
 * sequences, documents): the i-th pair from 0, its value written into
 * buf[n]; STK_ENOENT past the last, and for formats that record none.
 * *name is a static string. */
STK_EXPORT int stk_dataset_property(const struct stk_dataset *ds, int i, const char **name,
                                    char *buf, size_t n);

/* Detail string of the dataset's last error; never NULL. */
STK_EXPORT const char *stk_dataset_errmsg(const struct stk_dataset *ds);

/* ---- writing --------------------------------------------------------- */

/* Set with stk_writer_opts_init(): it records struct_size, and the library reads
 * only that many bytes (options added later take their defaults); a
 * struct_size larger than the library's is refused. A struct left zeroed
 * (struct_size 0) is taken to be this header's. */
struct stk_writer_opts {
  size_t struct_size; /* set by stk_writer_opts_init(); 0 = this header's */
  const char *format;          /* a format with STK_FMT_WRITE */
  const char *dir;             /* output directory, created if missing */
  const char *prefix;          /* shard file name prefix; NULL = "shard" */
  uint64_t shard_bytes;        /* start a new shard past this size; 0 = no limit */
  uint64_t samples_per_shard;  /* start a new shard after this many; 0 = no limit */
  int write_index;             /* also write DALI-style .idx files (tfrecord) */
};
#define stk_writer_opts_init(o) stk_writer_opts_init_sized((o), sizeof *(o))
STK_EXPORT void stk_writer_opts_init_sized(struct stk_writer_opts *o, size_t size);

/* Create a writer. Shards are written to temporary names and renamed when
 * complete, so an interrupted write never leaves a shard that reads as
 * valid. Close with stk_writer_close(), which finishes the last shard and
 * any dataset-level index (MDS index.json); stk_writer_abort() removes
 * what was written instead. */
STK_EXPORT int stk_writer_open(struct stk_writer **out, const struct stk_writer_opts *opts, char *errmsg);
/* Append one sample; the writer copies what it needs. */
STK_EXPORT int stk_writer_add(struct stk_writer *w, const struct stk_sample *s);
STK_EXPORT int stk_writer_close(struct stk_writer *w);
STK_EXPORT void stk_writer_abort(struct stk_writer *w);
STK_EXPORT const char *stk_writer_errmsg(const struct stk_writer *w);
/* Bytes written so far (for progress and write-rate figures). */
STK_EXPORT uint64_t stk_writer_bytes(const struct stk_writer *w);

#ifdef __cplusplus
}
#endif
#endif
