/* The HTTP engine that origin_http.c and origin_s3.c share: one libcurl
 * multi handle per origin, driven by one thread, with a queue of blocking
 * requests and the retry policy (backoff with full jitter, Retry-After,
 * attempt and time budgets). Also the small XML helpers both need (S3
 * error bodies, ListObjectsV2 pages). Internal to src/cache and its tests. */
#ifndef STOKER_CACHE_HTTP_IMPL_H
#define STOKER_CACHE_HTTP_IMPL_H

#include <curl/curl.h>
#include <stddef.h>
#include <stdint.h>

#include "origin.h"

/* One engine per origin: the multi handle (so its connection pool), the
 * thread (started by the first request), the counters. */
struct stk__http;

/* Create an engine with the options' limits (0 = the defaults of
 * origin.h). Connects nothing. */
int stk__http_new(struct stk__http **out, const struct stk_origin_opts *o, char *err);
/* Stop the thread (requests still in flight end with STK_ECANCELED) and
 * free everything. NULL is a no-op. */
void stk__http_free(struct stk__http *h);
/* Register a string that must never appear in an error message (a secret
 * key, a session token): messages have it replaced by "***". Call before
 * the first request; the engine keeps a copy. */
int stk__http_add_secret(struct stk__http *h, const char *s);
/* CA bundle for TLS peer verification (a PEM file path); NULL = libcurl's
 * default. STOKER_CA_BUNDLE or CURL_CA_BUNDLE in the environment, read by
 * stk__http_new, come first. Call before the first request. */
int stk__http_set_cainfo(struct stk__http *h, const char *path);
void stk__http_stats(struct stk__http *h, struct stk_origin_stats *st);

/* PUT and POST send body (body_len bytes, in memory, so a retry resends
 * it and SigV4 hashes it), DELETE sends none; the three keep a 2xx
 * response's body in mem. */
enum stk__http_method { STK__HTTP_GET, STK__HTTP_HEAD, STK__HTTP_PUT, STK__HTTP_POST, STK__HTTP_DELETE };

/* One blocking request. The caller fills the inputs; every pointer must
 * stay valid until stk__http_do returns. */
struct stk__http_req {
  int method;          /* STK__HTTP_GET or STK__HTTP_HEAD */
  const char *url;     /* what is fetched; may hold credentials */
  const char *display; /* redacted form of url, for messages */
  /* GET only: bytes [off, off+len) of the object (len UINT64_MAX: to its
   * end; off 0 and len UINT64_MAX sends no Range header) ... */
  uint64_t off, len;
  /* ... written with pwrite to fd at fd_off onwards, or, with fd < 0, into
   * a malloc'ed buffer of at most mem_max bytes (longer bodies fail with
   * STK_ERANGE). */
  int fd;
  uint64_t fd_off;
  size_t mem_max;
  const int *cancel;                /* nonzero (atomic load) ends with STK_ECANCELED; may be NULL */
  const struct curl_slist *headers; /* extra request headers; may be NULL */
  const char *aws_sigv4;            /* CURLOPT_AWS_SIGV4, or NULL for no signing */
  const char *user, *password;      /* CURLOPT_USERNAME / CURLOPT_PASSWORD, or NULL */
  int path_as_is;                   /* send the path exactly as given (S3 keys) */
  const void *body;                 /* PUT, POST: the request body */
  size_t body_len;
  /* PUT only, in place of body: bytes [body_off, body_off+body_len) of
   * body_fd, streamed with pread (a retry reads them again); not for a
   * SigV4 request, whose payload hash libcurl takes from body alone. */
  int body_from_fd, body_fd;
  uint64_t body_off;

  /* Results. info: size (Content-Range total, or Content-Length of a 200)
   * and ETag. mem: with fd < 0 on success, the body with a NUL after its
   * mem_len bytes; the caller frees it. status: the last HTTP status. */
  struct stk_obj_info info;
  char *mem;
  size_t mem_len;
  long status;
};

/* Run r to completion through the engine, retrying what is retryable.
 * Returns 0, STK_ECANCELED, or a mapped error with err set (the message
 * names r->display and, after retries, how many attempts over how long):
 * STK_ENOENT (404), STK_EACCES (401, 403; the S3 error code included),
 * STK_ERANGE (the range runs past the object, 416, body over mem_max),
 * STK_ENET (cannot resolve or connect, resets), STK_ETIMEDOUT (connect or
 * stall timeout), STK_EIO (other HTTP errors, a server ignoring Range). */
int stk__http_do(struct stk__http *h, struct stk__http_req *r, char *err);

/* Percent-encode in into out (n bytes, NUL-terminated, truncated to fit):
 * every byte but the unreserved A-Z a-z 0-9 - _ . ~ and, when keep_slash,
 * '/'. The S3 (SigV4) rule for keys and query values. Returns the length
 * the whole encoding needs (excluding the NUL), like snprintf. */
size_t stk__url_encode(const char *in, char *out, size_t n, int keep_slash);

/* XML helpers for the few flat documents S3 sends (errors, listings).
 * stk__xml_elem finds the first <tag>...</tag> in [p, end) and returns its
 * content's start (setting *len and, if next is given, *next just past the
 * closing tag), or NULL. Element text never holds a raw '<', so plain
 * search is exact for these documents. stk__xml_text decodes the five
 * predefined entities and numeric references into out (n bytes,
 * NUL-terminated) and returns the decoded length, or -1 when it does not
 * fit or an entity is malformed. */
const char *stk__xml_elem(const char *p, const char *end, const char *tag, size_t *len,
                          const char **next);
long stk__xml_text(const char *s, size_t len, char *out, size_t n);

/* Parse one ListObjectsV2 page: cb(arg, key, info) for each <Contents>
 * (key decoded, ETag unquoted), then *truncated and *next_token (malloc'ed,
 * NULL when absent; the caller frees it). Returns 0, cb's nonzero return,
 * or STK_EFORMAT with err set for a malformed page. */
int stk__s3_parse_list(const char *xml, size_t len,
                       int (*cb)(void *arg, const char *key, const struct stk_obj_info *info),
                       void *arg, int *truncated, char **next_token, char *err);

/* Parse a directory listing page (http_listing.c): nginx autoindex HTML
 * or JSON, Apache mod_autoindex, Python's http.server, or plain relative
 * links. cb(arg, name, is_dir, size) for each entry inside the folder
 * (names decoded, directories without their trailing '/', size UINT64_MAX
 * when the page does not give it exactly). Returns 0, cb's nonzero
 * return, or STK_EFORMAT with err set for a page that is neither HTML nor
 * a JSON listing. */
int stk__listing_parse(const char *body, size_t len,
                       int (*cb)(void *arg, const char *name, int is_dir, uint64_t size),
                       void *arg, char *err);

#endif
