/* Internals shared by the two files of the HTTP engine: http_engine.c
 * (the engine thread, the curl multi loop, retries and errors, the
 * request API) and http_response.c (the curl callbacks that read one
 * response: headers, where the body goes, the body itself). */
#ifndef STOKER_HTTP_JOB_H
#define STOKER_HTTP_JOB_H

#include <pthread.h>
#include <stdint.h>

#include "http_impl.h"

#define ERRBODY_MAX 4096 /* bytes of an error body kept for the message */

struct job;

struct stk__http {
  CURLM *multi;
  CURLSH *share; /* TLS sessions, so a new connection resumes one */
  pthread_mutex_t share_mu;
  pthread_mutex_t mu;
  pthread_t thread;
  int started, stop;                /* under mu */
  struct job *submit, *submit_tail; /* under mu: queued, not yet seen by the thread */
  /* The thread's own lists: in the multi, and parked (new or backing off). */
  struct job *active, *parked;
  struct stk_rng rng; /* the thread's only */

  long connect_ms, stall_s;
  uint64_t retry_max_ns;
  uint32_t max_attempts;
  const int *cancel; /* the origin's flag (stk_origin_opts.cancel), or NULL */
  char *cainfo;
  char **secrets;
  size_t nsecrets;

  uint64_t n_requests, n_retries, n_errors, n_missing, n_bytes; /* atomic */
};

enum sink { SINK_UNDECIDED, SINK_NONE, SINK_FD, SINK_MEM, SINK_ERRBODY };

struct job {
  struct stk__http *h;
  struct stk__http_req *r;
  struct job *prev, *next; /* in one of the engine's lists */
  CURL *easy;
  pthread_cond_t cv;
  int done; /* under the engine's mu */
  int rc;
  char msg[STK_ERRMSG_MAX];

  /* The current attempt. Headers are those of the last response (a
   * redirect or a 100 Continue resets them). */
  uint64_t content_length, cr_start, cr_end, cr_total;
  int have_cl, have_cr, cr_total_known;
  char etag[STK_ETAG_MAX];
  int64_t retry_after_ns; /* -1: none */
  enum sink sink;
  int local_rc; /* a callback's verdict, final (not retried) */
  char local_msg[256];
  uint64_t bytes; /* body bytes of this attempt */
  uint32_t crc;   /* CRC32C of the bytes written to the fd in this attempt */
  /* The whole object's CRC32C as the origin stored it (S3's
   * x-amz-checksum-crc32c, sent in checksum mode), when it sent one. */
  uint32_t origin_crc;
  int has_origin_crc;
  /* SINK_FD: curl hands the body over in 16 KiB pieces; they are gathered
   * here and written WB_CAP at a time (64 times fewer system calls). */
  char *wb;
  size_t wb_len;
  uint64_t wb_at;  /* offset (from fd_off) of wb[0] */
  uint64_t expect; /* body bytes the response announced; UINT64_MAX unknown */
  char *buf;       /* SINK_MEM body or SINK_ERRBODY head */
  size_t buf_len, buf_cap;
  char curl_err[CURL_ERROR_SIZE];

  uint64_t up_pos; /* bytes of a body_fd upload handed to curl this attempt */

  uint32_t attempts;
  uint64_t first_ns, not_before_ns;
};

static inline int flag_set(const int *f) { return f && __atomic_load_n(f, __ATOMIC_ACQUIRE) != 0; }

/* The request's own flag, or the origin's (stk_origin_opts.cancel). */
static inline int canceled(const struct job *j) {
  return flag_set(j->r->cancel) || flag_set(j->h->cancel);
}

static inline void count(uint64_t *c, uint64_t v) { __atomic_fetch_add(c, v, __ATOMIC_RELAXED); }

/* The response side (http_response.c). decide_sink picks where the body
 * of the response whose headers just ended goes (or sets local_rc);
 * buf_append adds n bytes to j->buf, at most max; wb_flush writes what
 * SINK_FD gathered (0, or -1 with local_rc set); reset_response forgets
 * the last response's headers; on_header and on_body are the curl
 * CURLOPT_HEADERFUNCTION and CURLOPT_WRITEFUNCTION callbacks (ud: the job). */
void stk__http_decide_sink(struct job *j);
int stk__http_buf_append(struct job *j, const char *p, size_t n, size_t max);
int stk__http_wb_flush(struct job *j);
void stk__http_reset_response(struct job *j);
size_t stk__http_on_header(char *p, size_t size, size_t nmemb, void *ud);
size_t stk__http_on_body(char *p, size_t size, size_t nmemb, void *ud);

#endif
