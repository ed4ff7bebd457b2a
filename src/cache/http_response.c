/* The HTTP engine's response side (see http_engine.c): the curl header
 * callback, the choice of where a response's body goes (the caller's fd,
 * memory, or an error body kept for the message) and the body callback,
 * which writes to the fd only once the response is known to carry exactly
 * the requested range. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "http_job.h"

/* Decide where the body of the response whose headers just ended goes, or
 * that it must not be accepted (local_rc set). Runs before the first body
 * byte and, for an empty body, when the transfer ends. */
void stk__http_decide_sink(struct job *j) {
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

int stk__http_buf_append(struct job *j, const char *p, size_t n, size_t max) {
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
int stk__http_wb_flush(struct job *j) {
  if (!j->wb_len) return 0;
  if (fd_write(j, j->wb, j->wb_len, j->wb_at)) return -1;
  j->wb_at += j->wb_len;
  j->wb_len = 0;
  return 0;
}

/* curl's write callback, on the engine thread. Returning less than n
 * aborts the transfer with CURLE_WRITE_ERROR; local_rc says why. */
size_t stk__http_on_body(char *p, size_t size, size_t nmemb, void *ud) {
  struct job *j = ud;
  const struct stk__http_req *r = j->r;
  size_t n = size * nmemb;
  if (canceled(j)) {
    j->local_rc = STK_ECANCELED;
    return 0;
  }
  if (j->sink == SINK_UNDECIDED) stk__http_decide_sink(j);
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
      if (j->wb_len + n > WB_CAP && stk__http_wb_flush(j)) return 0;
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
      if (stk__http_buf_append(j, p, n, r->mem_max)) {
        j->local_rc = STK_ENOMEM;
        snprintf(j->local_msg, sizeof j->local_msg, "out of memory for the body");
        return 0;
      }
      break;
    case SINK_ERRBODY: /* keep the head: enough for an S3 <Error> */
      if (j->buf_len < ERRBODY_MAX)
        (void)stk__http_buf_append(j, p, STK__MIN(n, ERRBODY_MAX - j->buf_len), ERRBODY_MAX);
      break;
    case SINK_NONE:
    case SINK_UNDECIDED:
      break;
  }
  j->bytes += n;
  count(&j->h->n_bytes, n);
  return n;
}

/* An S3 checksum header's CRC32C: base64 of its four big-endian bytes
 * ("AAAAAA=="). Anything else, such as the composite "...-N" of a
 * multipart object (a checksum of its parts' checksums), is not the
 * whole body's CRC32C: 0. */
static int crc32c_b64(const char *v, const char *end, uint32_t *out) {
  if (end - v != 8 || v[6] != '=' || v[7] != '=') return 0;
  uint64_t acc = 0;
  for (int i = 0; i < 6; i++) {
    int c = (unsigned char)v[i], d;
    if (c >= 'A' && c <= 'Z') d = c - 'A';
    else if (c >= 'a' && c <= 'z') d = c - 'a' + 26;
    else if (c >= '0' && c <= '9') d = c - '0' + 52;
    else if (c == '+') d = 62;
    else if (c == '/') d = 63;
    else return 0;
    acc = acc << 6 | (uint64_t)d;
  }
  if (acc & 0xf) return 0; /* the 4 padding bits */
  *out = (uint32_t)(acc >> 4);
  return 1;
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
void stk__http_reset_response(struct job *j) {
  j->have_cl = j->have_cr = j->cr_total_known = 0;
  j->etag[0] = 0;
  j->retry_after_ns = -1;
  j->sink = SINK_UNDECIDED;
  j->local_rc = 0;
  j->bytes = 0;
  j->crc = 0;
  j->has_origin_crc = 0;
  j->wb_len = 0;
  j->wb_at = 0;
  j->expect = UINT64_MAX;
  j->buf_len = 0;
  if (j->buf) j->buf[0] = 0;
}

/* curl's header callback: one header line at a time, CRLF included. */
size_t stk__http_on_header(char *p, size_t size, size_t nmemb, void *ud) {
  struct job *j = ud;
  size_t n = size * nmemb;
  const char *end = p + n;
  while (end > p && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ')) end--;
  if (n >= 5 && !strncmp(p, "HTTP/", 5)) { /* a new response (after a redirect): start over */
    stk__http_reset_response(j);
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
  } else if (IS("x-amz-checksum-crc32c")) {
    j->has_origin_crc = crc32c_b64(v, end, &j->origin_crc);
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
