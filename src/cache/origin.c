/* The origin registry: a URL's scheme picks one of the ops structs below,
 * the generic calls forward to it, and the helpers every origin needs
 * (URL redaction, fetching a small object into memory) live here. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "origin.h"

/* Every origin kind; "https" is served by the http ops. */
static const struct stk_origin_ops *const origins[] = {
    &stk__origin_file,
    &stk__origin_http,
    &stk__origin_s3,
    NULL,
};

/* Length of the scheme of s ("http" in "http://..."), 0 when s has none.
 * RFC 3986: ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) then "://". */
static size_t scheme_len(const char *s) {
  size_t n = 0;
  if (!s || !((s[0] | 32) >= 'a' && (s[0] | 32) <= 'z')) return 0;
  while (((s[n] | 32) >= 'a' && (s[n] | 32) <= 'z') || (s[n] >= '0' && s[n] <= '9') ||
         s[n] == '+' || s[n] == '-' || s[n] == '.')
    n++;
  return strncmp(s + n, "://", 3) == 0 ? n : 0;
}

int stk__origin_is_url(const char *s) { return scheme_len(s) > 0; }

int stk__origin_open(struct stk_origin **out, const char *url, const struct stk_origin_opts *o,
                     char *err) {
  *out = NULL;
  if (!url || !*url) return stk__errf(err, STK_EINVAL, "empty origin URL");
  size_t n = scheme_len(url);
  if (n == 0) return stk__origin_file.open(out, url, o, err);
  char scheme[16] = "";
  if (n < sizeof scheme) {
    for (size_t i = 0; i < n; i++) scheme[i] = (char)(url[i] | 32);
    scheme[n] = 0;
  }
  if (!strcmp(scheme, "https")) strcpy(scheme, "http");
  for (const struct stk_origin_ops *const *p = origins; *p; p++)
    if (!strcmp((*p)->scheme, scheme)) return (*p)->open(out, url, o, err);
  char red[256];
  stk__url_redact(url, red, sizeof red);
  return stk__errf(err, STK_EINVAL,
                   "%s: unknown URL scheme '%.*s' (file://, http://, https:// and s3:// are known)",
                   red, (int)STK__MIN(n, 32), url);
}

int stk__origin_stat(struct stk_origin *o, const char *name, struct stk_obj_info *info, char *err) {
  return o->ops->stat(o, name, info, err);
}

int stk__origin_get(struct stk_origin *o, const char *name, uint64_t off, uint64_t len, int fd,
                    uint64_t fd_off, struct stk_obj_info *info, const int *cancel, char *err) {
  if (len == 0) /* nothing to move; an HTTP range cannot even say it */
    return info ? o->ops->stat(o, name, info, err) : 0;
  return o->ops->get(o, name, off, len, fd, fd_off, info, cancel, err);
}

int stk__origin_get_mem(struct stk_origin *o, const char *name, size_t max, char **buf, size_t *len,
                        char *err) {
  /* Stat first, so an object over max is refused before a byte moves; then
   * fetch exactly that many bytes into a memfd (every origin writes to an
   * fd) and copy them out. */
  struct stk_obj_info info;
  *buf = NULL;
  *len = 0;
  int rc = o->ops->stat(o, name, &info, err);
  if (rc) return rc;
  if (info.size > max)
    return stk__errf(err, STK_ERANGE, "%s/%s: %llu bytes, more than the %zu allowed", o->url, name,
                     (unsigned long long)info.size, max);
  char *b = malloc((size_t)info.size + 1);
  if (!b) return stk__errf(err, STK_ENOMEM, "out of memory");
  if (info.size > 0) {
    int fd = memfd_create("stoker-origin", MFD_CLOEXEC);
    if (fd < 0) {
      free(b);
      return stk__errf(err, stk__from_errno(errno), "memfd_create: %s", strerror(errno));
    }
    rc = o->ops->get(o, name, 0, info.size, fd, 0, NULL, NULL, err);
    if (rc == 0 && (rc = stk__pread_full(fd, b, (size_t)info.size, 0)) != 0)
      stk__errf(err, rc, "%s/%s: cannot read back the fetched bytes", o->url, name);
    close(fd);
    if (rc) {
      free(b);
      return rc;
    }
  }
  b[info.size] = 0;
  *buf = b;
  *len = (size_t)info.size;
  return 0;
}

int stk__origin_list(struct stk_origin *o,
                     int (*cb)(void *arg, const char *name, const struct stk_obj_info *info),
                     void *arg, char *err) {
  return o->ops->list(o, cb, arg, err);
}

void stk__origin_stats(struct stk_origin *o, struct stk_origin_stats *st) {
  memset(st, 0, sizeof *st);
  o->ops->stats(o, st);
}

const char *stk__origin_url(const struct stk_origin *o) { return o->url; }

void stk__origin_close(struct stk_origin *o) {
  if (o) o->ops->close(o);
}

/* Append s to out[*k] within n bytes; *k counts what would have been
 * written, like snprintf. */
static void put(char *out, size_t n, size_t *k, const char *s, size_t len) {
  for (size_t i = 0; i < len; i++, (*k)++)
    if (*k + 1 < n) out[*k] = s[i];
}

void stk__url_redact(const char *url, char *out, size_t n) {
  if (n == 0) return;
  size_t k = 0, sl = scheme_len(url);
  const char *p = url;
  if (sl) {
    /* The authority runs to the first '/', '?' or '#'; credentials are
     * whatever precedes its last '@'. */
    const char *auth = url + sl + 3;
    size_t alen = strcspn(auth, "/?#");
    const char *at = NULL;
    for (const char *q = auth; q < auth + alen; q++)
      if (*q == '@') at = q;
    put(out, n, &k, url, (size_t)(auth - url));
    p = auth;
    if (at) {
      put(out, n, &k, "***", 3);
      p = at;
    }
  }
  /* A query may be a presigned URL's signature or a token: all of it goes. */
  size_t rest = strcspn(p, "?");
  put(out, n, &k, p, rest);
  if (p[rest] == '?') put(out, n, &k, "?***", 4);
  out[STK__MIN(k, n - 1)] = 0;
}
