/* The HTTP engine under the http:// and s3:// origins (origin_http.c,
 * origin_s3.c): libcurl, one thread per origin, retries.
 *
 * Callers block in stk__http_do while one thread per origin drives
 * every transfer through one libcurl multi handle, so connections are
 * reused across requests and threads (the multi's pool, at most max_conns
 * to a host). A request is a `struct job` on its caller's stack: queued
 * under the mutex, picked up by the thread (woken by curl_multi_wakeup),
 * added to the multi, and on completion either finished (the caller is
 * signalled on its own condvar) or parked with a not-before time for its
 * retry. Backoff waits therefore never block other transfers: the thread
 * polls with a timeout that ends at the nearest due time, and at most
 * every CANCEL_POLL_MS while some request can be canceled.
 *
 * Bodies go straight from curl's write callback to the caller's fd with
 * pwrite; the first body byte is only written once the response is known
 * to carry exactly the requested range (206 with a matching Content-Range,
 * or 200 when the range is the whole object), so a server that ignores
 * Range fails clearly instead of writing wrong bytes. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "http_impl.h"

#define BACKOFF_BASE_NS 100000000ull  /* 100 ms */
#define BACKOFF_CAP_NS 10000000000ull /* 10 s */
#define CANCEL_POLL_MS 50             /* how late a cancel may be seen */
#define IDLE_POLL_MS 5000             /* nothing to do: wake now and then anyway */
#define ERRBODY_MAX 4096              /* bytes of an error body kept for the message */

/* ---- engine ----------------------------------------------------------- */

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
  uint64_t bytes;  /* body bytes of this attempt */
  uint32_t crc;    /* CRC32C of the bytes written to the fd in this attempt */
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

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;
static void curl_init(void) { curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

static void list_push(struct job **head, struct job *j) {
  j->prev = NULL;
  j->next = *head;
  if (*head) (*head)->prev = j;
  *head = j;
}

static void list_remove(struct job **head, struct job *j) {
  if (j->prev)
    j->prev->next = j->next;
  else
    *head = j->next;
  if (j->next) j->next->prev = j->prev;
  j->prev = j->next = NULL;
}

static int flag_set(const int *f) { return f && __atomic_load_n(f, __ATOMIC_ACQUIRE) != 0; }

/* The request's own flag, or the origin's (stk_origin_opts.cancel). */
static int canceled(const struct job *j) { return flag_set(j->r->cancel) || flag_set(j->h->cancel); }

static void count(uint64_t *c, uint64_t v) { __atomic_fetch_add(c, v, __ATOMIC_RELAXED); }

/* Replace every registered secret in msg by "***" (never longer: the
 * secrets are at least 4 bytes). */
static void scrub(const struct stk__http *h, char *msg) {
  for (size_t i = 0; i < h->nsecrets; i++) {
    size_t sl = strlen(h->secrets[i]);
    for (char *p = msg; (p = strstr(p, h->secrets[i])) != NULL; p += 3) {
      memmove(p + 3, p + sl, strlen(p + sl) + 1);
      memcpy(p, "***", 3);
    }
  }
}

/* End job j with rc and a message "<display>: <what>[ (after N attempts
 * over T s)]", and wake its caller. The job is in no list here. */
static void finish(struct stk__http *h, struct job *j, int rc, const char *what) {
  j->rc = rc;
  if (rc == STK_ECANCELED) {
    snprintf(j->msg, sizeof j->msg, "%s: canceled", j->r->display);
  } else if (rc) {
    count(rc == STK_ENOENT ? &h->n_missing : &h->n_errors, 1);
    if (j->attempts > 1)
      snprintf(j->msg, sizeof j->msg, "%s: %s (after %u attempts over %.1f s)", j->r->display, what,
               j->attempts, (double)(stk_now_ns() - j->first_ns) / 1e9);
    else
      snprintf(j->msg, sizeof j->msg, "%s: %s", j->r->display, what);
    scrub(h, j->msg);
  }
  pthread_mutex_lock(&h->mu);
  j->done = 1;
  pthread_cond_signal(&j->cv);
  pthread_mutex_unlock(&h->mu);
}

/* Park j for another attempt after a retryable failure, unless its budget
 * (attempts, time since the first attempt) is spent: then finish it. */
static void retry_or_finish(struct stk__http *h, struct job *j, int rc, const char *what) {
  uint64_t now = stk_now_ns(), elapsed = now - j->first_ns;
  if (j->attempts >= h->max_attempts || elapsed >= h->retry_max_ns) {
    finish(h, j, rc, what);
    return;
  }
  uint64_t left = h->retry_max_ns - elapsed, wait;
  if (j->retry_after_ns >= 0) {
    /* The server said when: earlier would be refused again, and a wait
     * past the budget would break the caller's deadline. */
    wait = (uint64_t)j->retry_after_ns;
    if (wait > left) {
      char m[STK_ERRMSG_MAX];
      snprintf(m, sizeof m, "%.300s; Retry-After %.0f s is beyond the retry budget", what,
               (double)wait / 1e9);
      finish(h, j, rc, m);
      return;
    }
  } else {
    /* Full jitter: uniform in [0, min(cap, base * 2^(attempt-1))]. */
    uint32_t shift = STK__MIN(j->attempts - 1, 30u);
    uint64_t ceil_ns = STK__MIN(BACKOFF_CAP_NS, BACKOFF_BASE_NS << shift);
    wait = STK__MIN(stk_rng_below(&h->rng, ceil_ns + 1), left);
  }
  if (stk_log_get_level() >= STK_LOG_DEBUG) {
    char m[STK_ERRMSG_MAX];
    snprintf(m, sizeof m, "%s: %s; attempt %u, retrying in %.0f ms", j->r->display, what,
             j->attempts, (double)wait / 1e6);
    scrub(h, m);
    stk_log(STK_LOG_DEBUG, "%s", m);
  }
  j->not_before_ns = now + wait;
  list_push(&h->parked, j);
}

/* Decide where the body of the response whose headers just ended goes, or
 * that it must not be accepted (local_rc set). Runs before the first body
 * byte and, for an empty body, when the transfer ends. */
static void decide_sink(struct job *j) {
  const struct stk__http_req *r = j->r;
  long st = 0;
  curl_easy_getinfo(j->easy, CURLINFO_RESPONSE_CODE, &st);
  if (st < 200 || st > 299) {
    j->sink = SINK_ERRBODY;
    return;
  }
  if (r->method == STK__HTTP_HEAD) {
    j->sink = SINK_NONE;
    return;
  }
  if (r->method >= STK__HTTP_PUT) { /* PUT, POST, DELETE: the reply, whole */
    j->sink = SINK_MEM;
    j->expect = j->have_cl ? j->content_length : UINT64_MAX;
    return;
  }
  j->sink = r->fd >= 0 ? SINK_FD : SINK_MEM;
  int ranged = r->off != 0 || r->len != UINT64_MAX;
  uint64_t want_end = r->len == UINT64_MAX ? UINT64_MAX : r->off + r->len - 1;
  if (st == 206) {
    if (!j->have_cr) {
      j->local_rc = STK_EIO;
      snprintf(j->local_msg, sizeof j->local_msg, "HTTP 206 without a valid Content-Range");
      return;
    }
    if (want_end == UINT64_MAX && j->cr_total_known) want_end = j->cr_total - 1;
    if (j->cr_start != r->off || (j->cr_end != want_end && want_end != UINT64_MAX)) {
      if (j->cr_start == r->off && j->cr_total_known && j->cr_total <= want_end) {
        j->local_rc = STK_ERANGE;
        snprintf(j->local_msg, sizeof j->local_msg,
                 "bytes %llu-%llu requested of an object of %llu bytes", (unsigned long long)r->off,
                 (unsigned long long)want_end, (unsigned long long)j->cr_total);
      } else {
        j->local_rc = STK_EIO;
        snprintf(j->local_msg, sizeof j->local_msg,
                 "server sent bytes %llu-%llu for a request of bytes %llu-%llu",
                 (unsigned long long)j->cr_start, (unsigned long long)j->cr_end,
                 (unsigned long long)r->off, (unsigned long long)want_end);
      }
      return;
    }
    j->expect = j->cr_end - j->cr_start + 1;
    return;
  }
  if (st != 200) {
    j->local_rc = STK_EIO;
    snprintf(j->local_msg, sizeof j->local_msg, "unexpected HTTP %ld for a GET", st);
    return;
  }
  /* 200: the whole object. Right only when the whole object is what was
   * asked for, which needs its length. */
  j->expect = j->have_cl ? j->content_length : UINT64_MAX;
  if (!ranged) return;
  if (r->off == 0 && j->have_cl && j->content_length == r->len) return;
  if (r->off == 0 && j->have_cl && j->content_length < r->len) {
    j->local_rc = STK_ERANGE;
    snprintf(j->local_msg, sizeof j->local_msg, "%llu bytes requested of an object of %llu bytes",
             (unsigned long long)r->len, (unsigned long long)j->content_length);
    return;
  }
  j->local_rc = STK_EIO;
  snprintf(j->local_msg, sizeof j->local_msg,
           "server ignored the Range header (HTTP 200 for bytes %llu-%llu); "
           "ranged reads need a server that supports them",
           (unsigned long long)r->off, (unsigned long long)want_end);
}

static int buf_append(struct job *j, const char *p, size_t n, size_t max) {
  if (j->buf_len + n + 1 > j->buf_cap) {
    size_t cap = j->buf_cap ? j->buf_cap : 4096;
    while (cap < j->buf_len + n + 1) cap *= 2;
    if (cap > max + 1) cap = max + 1;
    char *b = realloc(j->buf, cap);
    if (!b) return STK_ENOMEM;
    j->buf = b;
    j->buf_cap = cap;
  }
  memcpy(j->buf + j->buf_len, p, n);
  j->buf_len += n;
  j->buf[j->buf_len] = 0;
  return 0;
}

#define WB_CAP (1u << 20)

/* Write n bytes at p to the request's fd at offset at (from fd_off);
 * 0, or -1 with local_rc and local_msg set. */
static int fd_write(struct job *j, const char *p, size_t n, uint64_t at) {
  const struct stk__http_req *r = j->r;
  at += r->fd_off;
  while (n) {
    ssize_t w = pwrite(r->fd, p, n, (off_t)at);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int e = w < 0 ? errno : EIO;
      char ebuf[128];
      j->local_rc = stk__from_errno(e);
      snprintf(j->local_msg, sizeof j->local_msg, "cannot write the body: %s",
               strerror_r(e, ebuf, sizeof ebuf));
      return -1;
    }
    p += w;
    n -= (size_t)w;
    at += (uint64_t)w;
  }
  return 0;
}

/* Write out what wb gathered. */
static int wb_flush(struct job *j) {
  if (!j->wb_len) return 0;
  if (fd_write(j, j->wb, j->wb_len, j->wb_at)) return -1;
  j->wb_at += j->wb_len;
  j->wb_len = 0;
  return 0;
}

/* curl's write callback, on the engine thread. Returning less than n
 * aborts the transfer with CURLE_WRITE_ERROR; local_rc says why. */
static size_t on_body(char *p, size_t size, size_t nmemb, void *ud) {
  struct job *j = ud;
  const struct stk__http_req *r = j->r;
  size_t n = size * nmemb;
  if (canceled(j)) {
    j->local_rc = STK_ECANCELED;
    return 0;
  }
  if (j->sink == SINK_UNDECIDED) decide_sink(j);
  if (j->local_rc) return 0;
  if (j->sink != SINK_ERRBODY && j->expect != UINT64_MAX && j->bytes + n > j->expect) {
    j->local_rc = STK_EIO;
    snprintf(j->local_msg, sizeof j->local_msg, "body longer than the %llu bytes announced",
             (unsigned long long)j->expect);
    return 0;
  }
  switch (j->sink) {
    case SINK_FD: {
      /* Checksummed here, while the bytes are in this core's cache: the
       * cache then need not read a fetched shard back to check it. */
      j->crc = stk_crc32c(j->crc, p, n);
      if (!j->wb && !(j->wb = malloc(WB_CAP))) { /* unbuffered, then */
        if (fd_write(j, p, n, j->bytes)) return 0;
        break;
      }
      if (j->wb_len + n > WB_CAP && wb_flush(j)) return 0;
      if (n >= WB_CAP) { /* (wb is empty now) */
        if (fd_write(j, p, n, j->bytes)) return 0;
        j->wb_at = j->bytes + n;
        break;
      }
      memcpy(j->wb + j->wb_len, p, n);
      j->wb_len += n;
      break;
    }
    case SINK_MEM:
      if (j->buf_len + n > r->mem_max) {
        j->local_rc = STK_ERANGE;
        snprintf(j->local_msg, sizeof j->local_msg, "object larger than %zu bytes", r->mem_max);
        return 0;
      }
      if (buf_append(j, p, n, r->mem_max)) {
        j->local_rc = STK_ENOMEM;
        snprintf(j->local_msg, sizeof j->local_msg, "out of memory for the body");
        return 0;
      }
      break;
    case SINK_ERRBODY: /* keep the head: enough for an S3 <Error> */
      if (j->buf_len < ERRBODY_MAX)
        (void)buf_append(j, p, STK__MIN(n, ERRBODY_MAX - j->buf_len), ERRBODY_MAX);
      break;
    case SINK_NONE:
    case SINK_UNDECIDED:
      break;
  }
  j->bytes += n;
  count(&j->h->n_bytes, n);
  return n;
}

static int parse_u64(const char *s, const char *end, uint64_t *v, const char **stop) {
  uint64_t x = 0;
  const char *p = s;
  for (; p < end && *p >= '0' && *p <= '9'; p++) {
    if (x > (UINT64_MAX - 9) / 10) return -1;
    x = x * 10 + (uint64_t)(*p - '0');
  }
  if (p == s) return -1;
  *v = x;
  if (stop) *stop = p;
  return 0;
}

/* Forget what the last response (a redirect, a failed attempt) said. */
static void reset_response(struct job *j) {
  j->have_cl = j->have_cr = j->cr_total_known = 0;
  j->etag[0] = 0;
  j->retry_after_ns = -1;
  j->sink = SINK_UNDECIDED;
  j->local_rc = 0;
  j->bytes = 0;
  j->crc = 0;
  j->wb_len = 0;
  j->wb_at = 0;
  j->expect = UINT64_MAX;
  j->buf_len = 0;
  if (j->buf) j->buf[0] = 0;
}

/* curl's header callback: one header line at a time, CRLF included. */
static size_t on_header(char *p, size_t size, size_t nmemb, void *ud) {
  struct job *j = ud;
  size_t n = size * nmemb;
  const char *end = p + n;
  while (end > p && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ')) end--;
  if (n >= 5 && !strncmp(p, "HTTP/", 5)) { /* a new response (after a redirect): start over */
    reset_response(j);
    return n;
  }
  const char *colon = memchr(p, ':', (size_t)(end - p));
  if (!colon) return n;
  size_t nl = (size_t)(colon - p);
  const char *v = colon + 1;
  while (v < end && (*v == ' ' || *v == '\t')) v++;
#define IS(name) (nl == sizeof(name) - 1 && !strncasecmp(p, name, nl))
  if (IS("content-length")) {
    j->have_cl = parse_u64(v, end, &j->content_length, NULL) == 0;
  } else if (IS("content-range")) { /* bytes START-END/TOTAL, TOTAL may be '*' */
    const char *q = v;
    j->have_cr = 0;
    if (end - q > 6 && !strncasecmp(q, "bytes ", 6) && !parse_u64(q + 6, end, &j->cr_start, &q) &&
        q < end && *q == '-' && !parse_u64(q + 1, end, &j->cr_end, &q) && q < end && *q == '/' &&
        j->cr_end >= j->cr_start) {
      j->have_cr = 1;
      j->cr_total_known = !parse_u64(q + 1, end, &j->cr_total, NULL) && j->cr_total > j->cr_end;
    }
  } else if (IS("etag")) {
    const char *a = v, *b = end;
    if (b - a >= 2 && a[0] == 'W' && a[1] == '/') a += 2; /* weak: still names a version */
    if (b - a >= 2 && *a == '"' && b[-1] == '"') a++, b--;
    size_t len = STK__MIN((size_t)(b - a), (size_t)STK_ETAG_MAX - 1);
    memcpy(j->etag, a, len);
    j->etag[len] = 0;
  } else if (IS("retry-after")) { /* delta-seconds or an HTTP-date */
    uint64_t s;
    const char *q;
    if (!parse_u64(v, end, &s, &q) && q == end) {
      j->retry_after_ns = (int64_t)STK__MIN(s, 86400ull) * 1000000000ll;
    } else {
      char date[64];
      size_t len = STK__MIN((size_t)(end - v), sizeof date - 1);
      memcpy(date, v, len);
      date[len] = 0;
      time_t t = curl_getdate(date, NULL);
      if (t != -1) {
        double d = difftime(t, time(NULL));
        j->retry_after_ns = d <= 0 ? 0 : (int64_t)(STK__MIN(d, 86400.0) * 1e9);
      }
    }
  }
#undef IS
  return n;
}

/* Text of element tag of an S3 <Error> body, cut to n bytes; "" when none. */
static void error_field(const struct job *j, const char *tag, char *out, size_t n) {
  char text[ERRBODY_MAX + 1];
  size_t len;
  out[0] = 0;
  if (!j->buf) return;
  const char *s = stk__xml_elem(j->buf, j->buf + j->buf_len, tag, &len, NULL);
  long tl = s ? stk__xml_text(s, len, text, sizeof text) : -1;
  if (tl < 0) return;
  size_t m = STK__MIN((size_t)tl, n - 1);
  memcpy(out, text, m);
  out[m] = 0;
}

/* Finish or retry j after an HTTP status outside 2xx. */
static void on_http_error(struct stk__http *h, struct job *j, long st) {
  char code[64], text[200], what[STK_ERRMSG_MAX], detail[300] = "";
  error_field(j, "Code", code, sizeof code);
  error_field(j, "Message", text, sizeof text);
  if (code[0]) snprintf(detail, sizeof detail, " %s%s%s", code, text[0] ? ": " : "", text);
  int retryable = st >= 500 || st == 429 || st == 408;
  int rc = STK_EIO;
  const char *kind = "HTTP error";
  if (st == 404 || st == 410) {
    rc = STK_ENOENT;
    kind = "not found";
  } else if (st == 401 || st == 403) {
    rc = STK_EACCES;
    kind = "access denied";
  } else if (st == 416) {
    rc = STK_ERANGE;
    kind = "range beyond the end of the object";
  } else if (st == 429) {
    kind = "too many requests";
  } else if (st >= 500) {
    kind = "server error";
  }
  snprintf(what, sizeof what, "%s (HTTP %ld%s)", kind, st, detail);
  /* Retry-After is honoured for 429 and 503 only (RFC 9110 also gives it to
   * 3xx, which curl follows itself). */
  if (st != 429 && st != 503) j->retry_after_ns = -1;
  if (retryable)
    retry_or_finish(h, j, rc, what);
  else
    finish(h, j, rc, what);
}

/* Finish or retry j after a transport failure. */
static void on_curl_error(struct stk__http *h, struct job *j, CURLcode res) {
  long os_err = 0;
  char why[CURL_ERROR_SIZE + 64], ebuf[128];
  curl_easy_getinfo(j->easy, CURLINFO_OS_ERRNO, &os_err);
  const char *detail = j->curl_err[0] ? j->curl_err : curl_easy_strerror(res);
  int rc = STK_EIO, retryable = 1;
  j->retry_after_ns = -1;
  switch (res) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
      rc = STK_ENET;
      snprintf(why, sizeof why, "cannot resolve host: %s", detail);
      break;
    case CURLE_COULDNT_CONNECT:
      rc = STK_ENET;
      snprintf(why, sizeof why, "cannot connect: %s",
               os_err ? strerror_r((int)os_err, ebuf, sizeof ebuf) : detail);
      break;
    case CURLE_OPERATION_TIMEDOUT:
      rc = STK_ETIMEDOUT;
      snprintf(why, sizeof why, "timed out: %s", detail);
      break;
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      rc = STK_ENET;
      snprintf(why, sizeof why, "connection failed: %s", detail);
      break;
    case CURLE_PARTIAL_FILE:
      snprintf(why, sizeof why, "body cut short: %s", detail);
      break;
    case CURLE_URL_MALFORMAT:
      rc = STK_EINVAL;
      retryable = 0;
      snprintf(why, sizeof why, "malformed URL: %s", detail);
      break;
    default:
      retryable = 0;
      snprintf(why, sizeof why, "%s", detail);
      break;
  }
  if (retryable)
    retry_or_finish(h, j, rc, why);
  else
    finish(h, j, rc, why);
}

/* A transfer of j ended with res (removed from the multi already). */
static void on_done(struct stk__http *h, struct job *j, CURLcode res) {
  struct stk__http_req *r = j->r;
  long st = 0;
  curl_easy_getinfo(j->easy, CURLINFO_RESPONSE_CODE, &st);
  r->status = st;
  if (canceled(j) || j->local_rc == STK_ECANCELED) {
    finish(h, j, STK_ECANCELED, NULL);
    return;
  }
  if (j->local_rc) { /* a verdict of a callback: the response was wrong, not flaky */
    finish(h, j, j->local_rc, j->local_msg);
    return;
  }
  if (res != CURLE_OK) {
    on_curl_error(h, j, res);
    return;
  }
  if (st < 200 || st > 299) {
    on_http_error(h, j, st);
    return;
  }
  if (j->sink == SINK_UNDECIDED) decide_sink(j); /* an empty body */
  if (j->sink == SINK_FD) wb_flush(j);
  if (j->local_rc) {
    finish(h, j, j->local_rc, j->local_msg);
    return;
  }
  if (r->method == STK__HTTP_HEAD && !j->have_cl) {
    finish(h, j, STK_EIO, "HEAD response without Content-Length");
    return;
  }
  /* curl reports a body shorter than its Content-Length itself (above, as
   * CURLE_PARTIAL_FILE); this is the belt to those braces. */
  if (r->method == STK__HTTP_GET && j->expect != UINT64_MAX && j->bytes != j->expect) {
    char why[200];
    snprintf(why, sizeof why, "body cut short: %llu of %llu bytes", (unsigned long long)j->bytes,
             (unsigned long long)j->expect);
    j->retry_after_ns = -1;
    retry_or_finish(h, j, STK_EIO, why);
    return;
  }
  /* The object's size: HEAD's Content-Length, a 206's Content-Range total
   * (0 when the server sent '*'), a 200's length. decide_sink made sure a
   * ranged request got exactly its range. */
  if (r->method == STK__HTTP_HEAD)
    r->info.size = j->content_length;
  else if (st == 206)
    r->info.size = j->cr_total_known ? j->cr_total : 0;
  else
    r->info.size = j->have_cl ? j->content_length : j->bytes;
  memcpy(r->info.etag, j->etag, sizeof j->etag);
  r->info.crc32c = j->crc;
  r->info.has_crc = j->sink == SINK_FD;
  if (j->sink == SINK_MEM) {
    if (!j->buf && buf_append(j, "", 0, r->mem_max)) {
      finish(h, j, STK_ENOMEM, "out of memory");
      return;
    }
    r->mem = j->buf;
    r->mem_len = j->buf_len;
    j->buf = NULL;
  }
  finish(h, j, 0, NULL);
}

/* Start an attempt of j: reset what the last attempt learned, add it to
 * the multi. */
static void start_attempt(struct stk__http *h, struct job *j, uint64_t now) {
  j->up_pos = 0;
  if (j->attempts++ == 0)
    j->first_ns = now;
  else
    count(&h->n_retries, 1);
  count(&h->n_requests, 1);
  reset_response(j);
  j->curl_err[0] = 0;
  CURLMcode mc = curl_multi_add_handle(h->multi, j->easy);
  if (mc != CURLM_OK) {
    finish(h, j, STK_EIO, curl_multi_strerror(mc));
    return;
  }
  list_push(&h->active, j);
}

static void *engine_thread(void *arg) {
  struct stk__http *h = arg;
  for (;;) {
    pthread_mutex_lock(&h->mu);
    int stop = h->stop;
    struct job *q = h->submit;
    h->submit = h->submit_tail = NULL;
    pthread_mutex_unlock(&h->mu);
    while (q) { /* new requests are parked with not-before 0: due now */
      struct job *next = q->next;
      list_push(&h->parked, q);
      q = next;
    }
    if (stop) break;

    /* Cancellations, then parked requests that are due. */
    uint64_t now = stk_now_ns();
    for (struct job *j = h->active, *next; j; j = next) {
      next = j->next;
      if (!canceled(j)) continue;
      curl_multi_remove_handle(h->multi, j->easy);
      list_remove(&h->active, j);
      finish(h, j, STK_ECANCELED, NULL);
    }
    for (struct job *j = h->parked, *next; j; j = next) {
      next = j->next;
      if (canceled(j)) {
        list_remove(&h->parked, j);
        finish(h, j, STK_ECANCELED, NULL);
      } else if (j->not_before_ns <= now) {
        list_remove(&h->parked, j);
        start_attempt(h, j, now);
      }
    }

    int running;
    curl_multi_perform(h->multi, &running);
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(h->multi, &left))) {
      if (m->msg != CURLMSG_DONE) continue;
      CURL *e = m->easy_handle;
      CURLcode res = m->data.result; /* m is invalid once the handle is removed */
      struct job *j;
      curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&j);
      curl_multi_remove_handle(h->multi, e);
      list_remove(&h->active, j);
      on_done(h, j, res);
    }

    /* Sleep until curl's next timer, a wakeup (a new request, close), the
     * nearest retry, or the next look at the cancel flags. */
    long wait_ms = IDLE_POLL_MS;
    now = stk_now_ns();
    for (struct job *j = h->parked; j; j = j->next) {
      long ms = j->not_before_ns <= now ? 0 : (long)((j->not_before_ns - now + 999999) / 1000000);
      wait_ms = STK__MIN(wait_ms, ms);
      if (j->r->cancel || h->cancel) wait_ms = STK__MIN(wait_ms, CANCEL_POLL_MS);
    }
    for (struct job *j = h->active; j; j = j->next)
      if (j->r->cancel || h->cancel) wait_ms = STK__MIN(wait_ms, CANCEL_POLL_MS);
    if (wait_ms > 0) curl_multi_poll(h->multi, NULL, 0, (int)wait_ms, NULL);
  }

  /* Closing: nothing should be in flight, but end whatever is. */
  while (h->active) {
    struct job *j = h->active;
    curl_multi_remove_handle(h->multi, j->easy);
    list_remove(&h->active, j);
    finish(h, j, STK_ECANCELED, NULL);
  }
  while (h->parked) {
    struct job *j = h->parked;
    list_remove(&h->parked, j);
    finish(h, j, STK_ECANCELED, NULL);
  }
  return NULL;
}

static double opt_or(double v, double dflt) { return v > 0 ? v : dflt; }

/* The share's lock: callers' threads set up and clean up easy handles that
 * use it while the engine thread runs transfers. */
static void share_lock(CURL *e, curl_lock_data d, curl_lock_access a, void *ud) {
  (void)e, (void)d, (void)a;
  pthread_mutex_lock(&((struct stk__http *)ud)->share_mu);
}
static void share_unlock(CURL *e, curl_lock_data d, void *ud) {
  (void)e, (void)d;
  pthread_mutex_unlock(&((struct stk__http *)ud)->share_mu);
}

int stk__http_new(struct stk__http **out, const struct stk_origin_opts *o, char *err) {
  static const struct stk_origin_opts none;
  if (!o) o = &none;
  pthread_once(&curl_once, curl_init);
  if (curl_init_rc != CURLE_OK)
    return stk__errf(err, STK_ESYS, "libcurl initialization failed: %s",
                     curl_easy_strerror(curl_init_rc));
  struct stk__http *h = calloc(1, sizeof *h);
  if (!h) return stk__errf(err, STK_ENOMEM, "out of memory");
  h->connect_ms = (long)(opt_or(o->connect_timeout_s, 10) * 1000);
  double stall = opt_or(o->stall_timeout_s, 30);
  h->stall_s = stall < 1 ? 1 : (long)(stall + 0.5); /* curl counts whole seconds */
  h->retry_max_ns = (uint64_t)(opt_or(o->retry_max_s, 120) * 1e9);
  h->max_attempts = o->max_attempts ? o->max_attempts : 10;
  h->cancel = o->cancel;
  long conns = o->max_conns ? (long)o->max_conns : 32;
  stk_rng_seed(&h->rng, stk_mix64(stk_now_ns(), (uint64_t)(uintptr_t)h ^ (uint64_t)getpid()));
  const char *ca = getenv("STOKER_CA_BUNDLE");
  if (!ca || !*ca) ca = getenv("CURL_CA_BUNDLE");
  if (ca && *ca && !(h->cainfo = strdup(ca))) goto nomem;
  h->multi = curl_multi_init();
  h->share = curl_share_init();
  if (!h->multi || !h->share) {
    curl_multi_cleanup(h->multi);
    curl_share_cleanup(h->share);
    goto nomem;
  }
  pthread_mutex_init(&h->mu, NULL);
  pthread_mutex_init(&h->share_mu, NULL);
  curl_share_setopt(h->share, CURLSHOPT_LOCKFUNC, share_lock);
  curl_share_setopt(h->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
  curl_share_setopt(h->share, CURLSHOPT_USERDATA, (void *)h);
  curl_share_setopt(h->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
  curl_multi_setopt(h->multi, CURLMOPT_MAX_HOST_CONNECTIONS, conns);
  curl_multi_setopt(h->multi, CURLMOPT_MAXCONNECTS, conns);
  curl_multi_setopt(h->multi, CURLMOPT_PIPELINING, (long)CURLPIPE_NOTHING);
  *out = h;
  return 0;
nomem:
  free(h->cainfo);
  free(h);
  return stk__errf(err, STK_ENOMEM, "out of memory");
}

void stk__http_free(struct stk__http *h) {
  if (!h) return;
  pthread_mutex_lock(&h->mu);
  h->stop = 1;
  int started = h->started;
  pthread_mutex_unlock(&h->mu);
  if (started) {
    curl_multi_wakeup(h->multi);
    pthread_join(h->thread, NULL);
  }
  curl_multi_cleanup(h->multi);
  curl_share_cleanup(h->share); /* every easy handle using it is gone */
  pthread_mutex_destroy(&h->mu);
  pthread_mutex_destroy(&h->share_mu);
  for (size_t i = 0; i < h->nsecrets; i++) free(h->secrets[i]);
  free(h->secrets);
  free(h->cainfo);
  free(h);
}

int stk__http_add_secret(struct stk__http *h, const char *s) {
  if (!s || strlen(s) < 4) return 0; /* nothing that short is a secret worth hiding */
  char **v = realloc(h->secrets, (h->nsecrets + 1) * sizeof *v);
  if (!v) return STK_ENOMEM;
  h->secrets = v;
  if (!(v[h->nsecrets] = strdup(s))) return STK_ENOMEM;
  h->nsecrets++;
  return 0;
}

int stk__http_set_cainfo(struct stk__http *h, const char *path) {
  if (h->cainfo || !path || !*path) return 0; /* the environment's comes first */
  return (h->cainfo = strdup(path)) ? 0 : STK_ENOMEM;
}

void stk__http_stats(struct stk__http *h, struct stk_origin_stats *st) {
  st->requests = __atomic_load_n(&h->n_requests, __ATOMIC_RELAXED);
  st->retries = __atomic_load_n(&h->n_retries, __ATOMIC_RELAXED);
  st->errors = __atomic_load_n(&h->n_errors, __ATOMIC_RELAXED);
  st->missing = __atomic_load_n(&h->n_missing, __ATOMIC_RELAXED);
  st->bytes = __atomic_load_n(&h->n_bytes, __ATOMIC_RELAXED);
}

/* Set up j's easy handle for r. Options survive the handle's removal from
 * the multi, so every attempt reuses them. */
/* curl's read callback of a body_fd upload, on the engine thread. */
static size_t on_upload(char *buf, size_t size, size_t nitems, void *ud) {
  struct job *j = ud;
  const struct stk__http_req *r = j->r;
  if (canceled(j)) {
    j->local_rc = STK_ECANCELED;
    return CURL_READFUNC_ABORT;
  }
  uint64_t left = r->body_len - j->up_pos;
  size_t n = (size_t)STK__MIN((uint64_t)(size * nitems), left);
  if (n == 0) return 0;
  ssize_t got;
  do got = pread(r->body_fd, buf, n, (off_t)(r->body_off + j->up_pos));
  while (got < 0 && errno == EINTR);
  if (got <= 0) {
    char ebuf[128];
    j->local_rc = got < 0 ? stk__from_errno(errno) : STK_ETRUNC;
    snprintf(j->local_msg, sizeof j->local_msg, "cannot read the body to send: %s",
             got < 0 ? strerror_r(errno, ebuf, sizeof ebuf) : "the file ended early");
    return CURL_READFUNC_ABORT;
  }
  j->up_pos += (uint64_t)got;
  return (size_t)got;
}

/* curl rewinds an upload it must send again (a redirect, an auth retry). */
static int on_upload_seek(void *ud, curl_off_t off, int origin) {
  struct job *j = ud;
  if (origin != SEEK_SET || off < 0 || (uint64_t)off > j->r->body_len) return CURL_SEEKFUNC_CANTSEEK;
  j->up_pos = (uint64_t)off;
  return CURL_SEEKFUNC_OK;
}

static int setup_easy(struct stk__http *h, struct job *j, char *range, size_t range_n) {
  const struct stk__http_req *r = j->r;
  CURL *e = j->easy;
  CURLcode c = CURLE_OK;
#define SET(opt, val) \
  if (c == CURLE_OK) c = curl_easy_setopt(e, opt, val)
  SET(CURLOPT_URL, r->url);
  SET(CURLOPT_PRIVATE, (void *)j);
  SET(CURLOPT_NOSIGNAL, 1L);
  SET(CURLOPT_SHARE, h->share);
  SET(CURLOPT_USERAGENT, "stoker/" STOKER_VERSION);
  SET(CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
  SET(CURLOPT_TCP_NODELAY, 1L);
  SET(CURLOPT_TCP_KEEPALIVE, 1L);
  SET(CURLOPT_CONNECTTIMEOUT_MS, h->connect_ms);
  SET(CURLOPT_LOW_SPEED_LIMIT, 1L);
  SET(CURLOPT_LOW_SPEED_TIME, h->stall_s);
  SET(CURLOPT_BUFFERSIZE, 256L * 1024);
  SET(CURLOPT_FOLLOWLOCATION, 1L);
  SET(CURLOPT_MAXREDIRS, 5L);
  SET(CURLOPT_PROTOCOLS_STR, "http,https");
  SET(CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  SET(CURLOPT_ERRORBUFFER, j->curl_err);
  SET(CURLOPT_HEADERFUNCTION, on_header);
  SET(CURLOPT_HEADERDATA, (void *)j);
  SET(CURLOPT_WRITEFUNCTION, on_body);
  SET(CURLOPT_WRITEDATA, (void *)j);
  if (r->method == STK__HTTP_HEAD) SET(CURLOPT_NOBODY, 1L);
  if (r->method == STK__HTTP_PUT && r->body_from_fd) {
    SET(CURLOPT_UPLOAD, 1L);
    SET(CURLOPT_INFILESIZE_LARGE, (curl_off_t)r->body_len);
    SET(CURLOPT_READFUNCTION, on_upload);
    SET(CURLOPT_READDATA, (void *)j);
    SET(CURLOPT_SEEKFUNCTION, on_upload_seek);
    SET(CURLOPT_SEEKDATA, (void *)j);
  } else if (r->method == STK__HTTP_PUT || r->method == STK__HTTP_POST) {
    SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
    SET(CURLOPT_POSTFIELDS, r->body ? (const char *)r->body : "");
    if (r->method == STK__HTTP_PUT) SET(CURLOPT_CUSTOMREQUEST, "PUT");
  }
  if (r->method == STK__HTTP_DELETE) SET(CURLOPT_CUSTOMREQUEST, "DELETE");
  if (h->cainfo) SET(CURLOPT_CAINFO, h->cainfo);
  if (r->headers) SET(CURLOPT_HTTPHEADER, (struct curl_slist *)r->headers);
  if (r->aws_sigv4) SET(CURLOPT_AWS_SIGV4, r->aws_sigv4);
  if (r->user) SET(CURLOPT_USERNAME, r->user);
  if (r->password) SET(CURLOPT_PASSWORD, r->password);
  if (r->path_as_is) SET(CURLOPT_PATH_AS_IS, 1L);
  if (r->method == STK__HTTP_GET && (r->off != 0 || r->len != UINT64_MAX)) {
    if (r->len == UINT64_MAX)
      snprintf(range, range_n, "%llu-", (unsigned long long)r->off);
    else
      snprintf(range, range_n, "%llu-%llu", (unsigned long long)r->off,
               (unsigned long long)(r->off + r->len - 1));
    SET(CURLOPT_RANGE, range);
  }
#undef SET
  return c == CURLE_OK ? 0 : -1;
}

int stk__http_do(struct stk__http *h, struct stk__http_req *r, char *err) {
  r->mem = NULL;
  r->mem_len = 0;
  r->status = 0;
  memset(&r->info, 0, sizeof r->info);
  if (r->method == STK__HTTP_GET && r->len == 0)
    return stk__errf(err, STK_EINVAL, "%s: empty range", r->display);
  if (r->method == STK__HTTP_GET && r->len != UINT64_MAX && r->off + r->len < r->off)
    return stk__errf(err, STK_ERANGE, "%s: range overflows", r->display);
  if (flag_set(r->cancel) || flag_set(h->cancel))
    return stk__errf(err, STK_ECANCELED, "%s: canceled", r->display);

  struct job j;
  memset(&j, 0, sizeof j);
  j.h = h;
  j.r = r;
  j.retry_after_ns = -1;
  char range[64];
  if (!(j.easy = curl_easy_init())) return stk__errf(err, STK_ENOMEM, "out of memory");
  if (setup_easy(h, &j, range, sizeof range)) {
    curl_easy_cleanup(j.easy);
    return stk__errf(err, STK_ENOTSUP, "%s: this libcurl lacks a needed option", r->display);
  }
  pthread_cond_init(&j.cv, NULL);

  pthread_mutex_lock(&h->mu);
  int rc = 0;
  if (h->stop) {
    rc = stk__errf(err, STK_ECANCELED, "%s: origin closed", r->display);
  } else if (!h->started) {
    int e = pthread_create(&h->thread, NULL, engine_thread, h);
    if (e)
      rc = stk__errf(err, STK_ESYS, "cannot start the HTTP thread: %s", strerror(e));
    else
      h->started = 1;
  }
  if (rc == 0) {
    j.next = NULL;
    if (h->submit_tail)
      h->submit_tail->next = &j;
    else
      h->submit = &j;
    h->submit_tail = &j;
    curl_multi_wakeup(h->multi);
    while (!j.done) pthread_cond_wait(&j.cv, &h->mu);
  }
  pthread_mutex_unlock(&h->mu);

  pthread_cond_destroy(&j.cv);
  curl_easy_cleanup(j.easy);
  free(j.buf);
  free(j.wb);
  if (rc) return rc;
  if (j.rc) {
    if (err) snprintf(err, STK_ERRMSG_MAX, "%s", j.msg);
    free(r->mem);
    r->mem = NULL;
    r->mem_len = 0;
  }
  return j.rc;
}
