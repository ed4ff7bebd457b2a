/* Origins: where a remote dataset's durable master copy lives. One ops
 * struct, one file per kind:
 *
 *   origin_file.c   file:///path or a plain path (local disk, NFS, a
 *                   parallel file system): pread/pwrite, no retries
 *   origin_http.c   http:// and https://: ranged GETs through one libcurl
 *                   multi handle driven by one thread (connection reuse,
 *                   timeouts, retries with backoff and jitter, Retry-After)
 *   origin_s3.c     s3://bucket/prefix: the HTTP engine plus SigV4 signing,
 *                   path-style or virtual-host style, credentials from the
 *                   environment or the AWS shared files, ListObjectsV2
 *
 * Every call is blocking and thread-safe: the cache's fill threads call
 * them concurrently. Object names are relative to the origin's root (the
 * URL's path or prefix), e.g. "shard-00001.tfrecord". Error messages name
 * the object by its redacted URL: no credentials, no signature, no query
 * string of a presigned URL ever appears in one. */
#ifndef STOKER_CACHE_ORIGIN_H
#define STOKER_CACHE_ORIGIN_H

#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"

#define STK_ETAG_MAX 80

struct stk_origin_opts {
  double connect_timeout_s; /* TCP+TLS connect; 0 = 10 */
  double stall_timeout_s;   /* abort a transfer moving < 1 byte/s for this long; 0 = 30 */
  double retry_max_s;       /* give up retrying one request after this long; 0 = 120 */
  uint32_t max_attempts;    /* attempts per request (first included); 0 = 10 */
  uint32_t max_conns;       /* connections to one host (requests in flight); 0 = 32 */
  /* s3:// only. NULL/0 = from the environment (AWS_ENDPOINT_URL,
   * AWS_REGION / AWS_DEFAULT_REGION), else AWS's own endpoint, us-east-1. */
  const char *s3_endpoint;  /* "http://127.0.0.1:9000" or "https://s3.example.com" */
  const char *s3_region;
  int s3_addressing;        /* 0 = auto (path style for a custom endpoint, virtual-host
                               style for AWS), 1 = path style, 2 = virtual-host style */
  const char *s3_profile;   /* shared-file profile; NULL = $AWS_PROFILE or "default" */
  /* Every request of the origin (a manifest, a HEAD, a listing's pages, a
   * shard, and its retries) ends with STK_ECANCELED within 50 ms of *cancel
   * becoming nonzero, besides the flag a get is given; NULL = none. */
  const int *cancel;
};

/* What the origin knows of one object. */
struct stk_obj_info {
  uint64_t size;
  char etag[STK_ETAG_MAX]; /* as sent, quotes removed; "" when none */
  /* After a get: CRC32C of the bytes written, computed as they arrived
   * (has_crc), so a cache need not read them back; origins that copy in
   * the kernel (file) leave has_crc 0. */
  uint32_t crc32c;
  int has_crc;
  /* The body was a whole object whose CRC32C the origin sent (S3 checksum
   * mode) and it matched; a mismatch fails the get (STK_ECRC). */
  int origin_checked;
};

/* Counters, summed over the origin's life. */
struct stk_origin_stats {
  uint64_t requests;  /* requests sent, retries included */
  uint64_t retries;   /* requests sent again after a retryable failure */
  uint64_t errors;    /* requests that failed for good (after retries), lookups of
                         objects that do not exist excepted: */
  uint64_t missing;   /* requests answered "no such object" (404, NoSuchKey, ENOENT):
                         how a dataset without a manifest is recognised, so not
                         errors; a shard that is missing fails its read anyway */
  uint64_t bytes;     /* body bytes received (all attempts) */
};

struct stk_origin;

struct stk_origin_ops {
  const char *scheme; /* "file", "http", "s3" */
  int (*open)(struct stk_origin **out, const char *url, const struct stk_origin_opts *o,
              char *err);
  int (*stat)(struct stk_origin *o, const char *name, struct stk_obj_info *info, char *err);
  int (*get)(struct stk_origin *o, const char *name, uint64_t off, uint64_t len, int fd,
             uint64_t fd_off, struct stk_obj_info *info, const int *cancel, char *err);
  int (*list)(struct stk_origin *o,
              int (*cb)(void *arg, const char *name, const struct stk_obj_info *info),
              void *arg, char *err);
  void (*stats)(struct stk_origin *o, struct stk_origin_stats *st);
  void (*close)(struct stk_origin *o);
};

/* The generic part every origin starts with (the ops and a redacted URL). */
struct stk_origin {
  const struct stk_origin_ops *ops;
  char *url; /* redacted display form, owned */
};

/* 1 if s names a remote or explicit origin (has "scheme://"), else 0. */
int stk__origin_is_url(const char *s);

/* Open the origin for url by its scheme; a plain path is file://. Errors:
 * STK_EINVAL for a malformed URL or unknown scheme, STK_ENOENT for a local
 * root that does not exist. Remote origins do not connect here. */
int stk__origin_open(struct stk_origin **out, const char *url, const struct stk_origin_opts *o,
                     char *err);

/* Size and ETag of an object: STK_ENOENT when it does not exist (HTTP 404,
 * S3 NoSuchKey), STK_EACCES when refused (401/403, a bad signature). */
int stk__origin_stat(struct stk_origin *o, const char *name, struct stk_obj_info *info,
                     char *err);

/* Fetch bytes [off, off+len) of object name (len UINT64_MAX: to its end)
 * and pwrite them to fd at fd_off onwards. Retries what is retryable
 * (5xx, 429, timeouts, resets, a body shorter than announced) within the
 * limits of the options, restarting the range where the last attempt's
 * bytes stopped being trustworthy (from its start). Returns 0 when every
 * byte arrived (info, if given, filled from the response), STK_ECANCELED
 * when *cancel became nonzero, else an error with err set. */
int stk__origin_get(struct stk_origin *o, const char *name, uint64_t off, uint64_t len,
                    int fd, uint64_t fd_off, struct stk_obj_info *info, const int *cancel,
                    char *err);

/* Fetch a whole small object (a manifest, index.json) into a malloc'ed
 * buffer with a NUL after its *len bytes; objects over max bytes fail with
 * STK_ERANGE. */
int stk__origin_get_mem(struct stk_origin *o, const char *name, size_t max, char **buf,
                        size_t *len, char *err);

/* List every object under the origin's root (S3 ListObjectsV2, a local
 * directory walk; HTTP cannot list: STK_ENOTSUP). Names are relative to the
 * root. cb returning nonzero stops the walk with that code. */
int stk__origin_list(struct stk_origin *o,
                     int (*cb)(void *arg, const char *name, const struct stk_obj_info *info),
                     void *arg, char *err);

void stk__origin_stats(struct stk_origin *o, struct stk_origin_stats *st);
const char *stk__origin_url(const struct stk_origin *o);
void stk__origin_close(struct stk_origin *o);

/* The local path a file URL names (file:///abs or file://localhost/abs),
 * its %XX escapes decoded as pathlib's as_uri() and browsers write them,
 * a query or fragment dropped; malloc'ed into *path. STK_EINVAL, with err,
 * for another host, a relative path or an escaped NUL. */
int stk__file_url_path(const char *url, char **path, char *err);

/* Copy url into out (n bytes) with credentials (user:password@), and any
 * query string, replaced by "***"; for every message and report. */
void stk__url_redact(const char *url, char *out, size_t n);

/* Writes to an S3 origin (the checkpoint tier's drain), each retried as a
 * read is, signed over its body. name is relative to the origin's root.
 * stk__s3_put: one object from memory. A multipart upload: begin (its id
 * into upload_id, n bytes), parts 1..N of at least 5 MiB but the last
 * (each part's ETag into etag, STK_ETAG_MAX bytes), complete with the
 * parts' ETags in order, or abort (best effort). */
int stk__s3_put(struct stk_origin *o, const char *name, const void *body, size_t len, char *err);
int stk__s3_multipart_begin(struct stk_origin *o, const char *name, char *upload_id, size_t n,
                            char *err);
int stk__s3_multipart_part(struct stk_origin *o, const char *name, const char *upload_id,
                           int part, const void *body, size_t len, char *etag, char *err);
int stk__s3_multipart_complete(struct stk_origin *o, const char *name, const char *upload_id,
                               int parts, char (*etags)[STK_ETAG_MAX], char *err);
void stk__s3_multipart_abort(struct stk_origin *o, const char *name, const char *upload_id);
/* Delete object name (S3 answers 204 whether or not it existed). */
int stk__s3_delete(struct stk_origin *o, const char *name, char *err);

/* A PUT to an HTTP(S) origin (a WebDAV server: nginx's dav_methods PUT,
 * which makes the file appear whole): the object name from memory (body)
 * or, with body NULL, streamed from bytes [0, len) of fd; retried as a
 * read is. */
int stk__http_put(struct stk_origin *o, const char *name, const void *body, int fd,
                  uint64_t len, char *err);
/* A DELETE of name at an HTTP(S) origin (WebDAV; a name ending in '/' is a
 * folder, removed with what it holds): STK_ENOENT when it is not there. */
int stk__http_delete(struct stk_origin *o, const char *name, char *err);

extern const struct stk_origin_ops stk__origin_file;
extern const struct stk_origin_ops stk__origin_http;
extern const struct stk_origin_ops stk__origin_s3;

#endif
