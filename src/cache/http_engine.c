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
 * Bodies go straight from curl's write callback (http_response.c) to the
 * caller's fd with pwrite; the first body byte is only written once the
 * response is known to carry exactly the requested range (206 with a
 * matching Content-Range, or 200 when the range is the whole object), so a
 * server that ignores Range fails clearly instead of writing wrong bytes. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "http_job.h"

#define BACKOFF_BASE_NS 100000000ull  /* 100 ms */
#define BACKOFF_CAP_NS 10000000000ull /* 10 s */
#define CANCEL_POLL_MS 50             /* how late a cancel may be seen */
#define IDLE_POLL_MS 5000             /* nothing to do: wake now and then anyway */

/* ---- engine ----------------------------------------------------------- */

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
  if (j->sink == SINK_UNDECIDED) stk__http_decide_sink(j); /* an empty body */
  if (j->sink == SINK_FD) stk__http_wb_flush(j);
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
  /* A whole object (200) whose CRC32C the origin stored and sent (S3 in
   * checksum mode) must match the body, computed as it arrived: a
   * mismatch is a damaged transfer, tried again. A range (206) carries no
   * checksum of its own bytes; the whole object's, if sent, says nothing
   * about them. */
  if (r->method == STK__HTTP_GET && j->sink == SINK_FD && st == 200 && j->has_origin_crc &&
      j->crc != j->origin_crc) {
    char why[200];
    snprintf(why, sizeof why,
             "body fails the origin's checksum (crc32c %08x, x-amz-checksum-crc32c %08x)", j->crc,
             j->origin_crc);
    j->retry_after_ns = -1;
    retry_or_finish(h, j, STK_ECRC, why);
    return;
  }
  /* The object's size: HEAD's Content-Length, a 206's Content-Range total
   * (0 when the server sent '*'), a 200's length. stk__http_decide_sink made sure a
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
  r->info.origin_checked = j->sink == SINK_FD && st == 200 && j->has_origin_crc;
  if (j->sink == SINK_MEM) {
    if (!j->buf && stk__http_buf_append(j, "", 0, r->mem_max)) {
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
  stk__http_reset_response(j);
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
  SET(CURLOPT_HEADERFUNCTION, stk__http_on_header);
  SET(CURLOPT_HEADERDATA, (void *)j);
  SET(CURLOPT_WRITEFUNCTION, stk__http_on_body);
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
