/* The http:// and https:// origin: objects are URLs under a prefix, fetched
 * with ranged GETs through the shared engine (http_engine.c), listed from
 * the server's directory listing pages (http_listing.c) where it writes
 * them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http_impl.h"

/* ---- the http:// origin ------------------------------------------------- */

struct http_origin {
  struct stk_origin base;
  struct stk__http *eng;
  char *prefix;      /* scheme://[user:pass@]host[:port]/path/ (ends with '/') */
  char *query;       /* "?..." kept for every object (a shared token), or "" */
  char *disp_prefix; /* redacted prefix */
};

/* The URL of object name: the prefix, the name percent-encoded except for
 * '/' and characters URLs allow as they are, the query. */
static char *object_url(const struct http_origin *ho, const char *name, int display) {
  const char *pre = display ? ho->disp_prefix : ho->prefix;
  const char *q = display ? (ho->query[0] ? "?***" : "") : ho->query;
  size_t n = strlen(pre) + 3 * strlen(name) + strlen(q) + 1;
  char *u = malloc(n);
  if (!u) return NULL;
  size_t k = (size_t)snprintf(u, n, "%s", pre);
  static const char hex[] = "0123456789ABCDEF";
  for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
    if (*p > 0x20 && *p < 0x7f && !strchr("%?#\"<>\\^`{|} ", *p)) {
      u[k++] = (char)*p;
    } else {
      u[k++] = '%';
      u[k++] = hex[*p >> 4];
      u[k++] = hex[*p & 15];
    }
  }
  snprintf(u + k, n - k, "%s", q);
  return u;
}

static void http_close(struct stk_origin *o) {
  struct http_origin *ho = (struct http_origin *)o;
  if (!ho) return;
  stk__http_free(ho->eng);
  free(ho->prefix);
  free(ho->query);
  free(ho->disp_prefix);
  free(ho->base.url);
  free(ho);
}

static int http_open(struct stk_origin **out, const char *url, const struct stk_origin_opts *o,
                     char *err) {
  char red[2048];
  stk__url_redact(url, red, sizeof red);
  const char *rest = !strncasecmp(url, "http://", 7)    ? url + 7
                     : !strncasecmp(url, "https://", 8) ? url + 8
                                                        : NULL;
  if (!rest || !*rest || *rest == '/' || *rest == '?' || *rest == '#')
    return stk__errf(err, STK_EINVAL, "%s: not an http(s) URL with a host", red);
  for (const char *p = url; *p; p++)
    if ((unsigned char)*p <= 0x20 || *p == 0x7f)
      return stk__errf(err, STK_EINVAL, "%s: URL holds a space or control character", red);
  struct http_origin *ho = calloc(1, sizeof *ho);
  if (!ho) return stk__errf(err, STK_ENOMEM, "out of memory");
  ho->base.ops = &stk__origin_http;
  /* Split off the query (kept) and the fragment (dropped). */
  size_t plen = strcspn(url, "?#");
  size_t qlen = url[plen] == '?' ? strcspn(url + plen, "#") : 0;
  int slash = url[plen - 1] == '/';
  ho->prefix = malloc(plen + 2);
  ho->query = strndup(url + plen, qlen);
  ho->base.url = strdup(red);
  if (ho->prefix) {
    memcpy(ho->prefix, url, plen);
    strcpy(ho->prefix + plen, slash ? "" : "/");
  }
  char dp[2048];
  if (ho->prefix) stk__url_redact(ho->prefix, dp, sizeof dp);
  ho->disp_prefix = strdup(dp);
  int rc;
  if (!ho->prefix || !ho->query || !ho->base.url || !ho->disp_prefix) {
    rc = stk__errf(err, STK_ENOMEM, "out of memory");
  } else {
    rc = stk__http_new(&ho->eng, o, err);
  }
  if (rc) {
    http_close(&ho->base);
    return rc;
  }
  *out = &ho->base;
  return 0;
}

static int http_request(struct http_origin *ho, struct stk__http_req *r, const char *name,
                        char *err) {
  char *url = object_url(ho, name, 0), *disp = object_url(ho, name, 1);
  int rc;
  if (!url || !disp) {
    rc = stk__errf(err, STK_ENOMEM, "out of memory");
  } else {
    r->url = url;
    r->display = disp;
    rc = stk__http_do(ho->eng, r, err);
  }
  free(url);
  free(disp);
  return rc;
}

static int http_stat(struct stk_origin *o, const char *name, struct stk_obj_info *info, char *err) {
  struct stk__http_req r = {.method = STK__HTTP_HEAD, .fd = -1};
  int rc = http_request((struct http_origin *)o, &r, name, err);
  if (rc == 0 && info) *info = r.info;
  return rc;
}

static int http_get(struct stk_origin *o, const char *name, uint64_t off, uint64_t len, int fd,
                    uint64_t fd_off, struct stk_obj_info *info, const int *cancel, char *err) {
  struct stk__http_req r = {.method = STK__HTTP_GET,
                            .off = off,
                            .len = len,
                            .fd = fd,
                            .fd_off = fd_off,
                            .cancel = cancel};
  int rc = http_request((struct http_origin *)o, &r, name, err);
  if (rc == 0 && info) *info = r.info;
  return rc;
}

#define LIST_PAGE_MAX (64u << 20) /* bytes of one listing page */
#define LIST_DEPTH_MAX 8           /* folder levels below the root */
#define LIST_DIRS_MAX 4096         /* folders listed in all */

struct list_walk {
  char **dirs; /* folders still to list, relative, each ending in '/' ("" = the root) */
  size_t n, head, cap;
  const char *dir;
  int depth;
  int (*cb)(void *arg, const char *name, const struct stk_obj_info *info);
  void *arg;
};

static int walk_push(struct list_walk *w, const char *dir, const char *name) {
  if (w->n == LIST_DIRS_MAX || w->depth + 1 > LIST_DEPTH_MAX) return 0; /* bounded */
  if (w->n == w->cap) {
    size_t nc = w->cap ? w->cap * 2 : 16;
    char **v = realloc(w->dirs, nc * sizeof *v);
    if (!v) return STK_ENOMEM;
    w->dirs = v;
    w->cap = nc;
  }
  size_t l = strlen(dir) + strlen(name) + 2;
  char *d = malloc(l);
  if (!d) return STK_ENOMEM;
  snprintf(d, l, "%s%s/", dir, name);
  w->dirs[w->n++] = d;
  return 0;
}

static int page_entry(void *arg, const char *name, int is_dir, uint64_t size) {
  struct list_walk *w = arg;
  if (is_dir) return walk_push(w, w->dir, name);
  size_t l = strlen(w->dir) + strlen(name) + 1;
  char *full = malloc(l);
  if (!full) return STK_ENOMEM;
  snprintf(full, l, "%s%s", w->dir, name);
  struct stk_obj_info info = {.size = size};
  int rc = w->cb(w->arg, full, &info);
  free(full);
  return rc;
}

/* A plain web server has no list call, but most write directory listings
 * (nginx autoindex, Apache, Python's http.server): each folder's page is
 * fetched and parsed, subfolders breadth first, bounded in depth and
 * count. A server that gives no listing (403, 404) cannot be listed. */
static int http_list(struct stk_origin *o,
                     int (*cb)(void *arg, const char *name, const struct stk_obj_info *info),
                     void *arg, char *err) {
  struct http_origin *ho = (struct http_origin *)o;
  struct list_walk w = {.cb = cb, .arg = arg};
  int rc = walk_push(&w, "", "") ? STK_ENOMEM : 0;
  if (!rc) w.dirs[0][0] = 0; /* the root itself: "" */
  size_t depth_end = 1;      /* dirs[0..depth_end) are at w.depth */
  while (!rc && w.head < w.n) {
    if (w.head == depth_end) w.depth++, depth_end = w.n;
    w.dir = w.dirs[w.head++];
    struct stk__http_req r = {.method = STK__HTTP_GET, .off = 0, .len = UINT64_MAX, .fd = -1,
                              .mem_max = LIST_PAGE_MAX};
    char rerr[STK_ERRMSG_MAX];
    rc = http_request(ho, &r, w.dir, rerr);
    if (rc == STK_ENOENT || rc == STK_EACCES) {
      rc = stk__errf(err, STK_ENOTSUP, "%s%s: the server gives no directory listing (HTTP %ld)",
                     ho->disp_prefix, w.dir, r.status);
      break;
    }
    if (rc) {
      stk__errf(err, rc, "%s", rerr);
      break;
    }
    char perr[STK_ERRMSG_MAX];
    rc = stk__listing_parse(r.mem, r.mem_len, page_entry, &w, perr);
    free(r.mem);
    if (rc == STK_EFORMAT)
      rc = stk__errf(err, STK_ENOTSUP, "%s%s: %s", ho->disp_prefix, w.dir, perr);
    else if (rc == STK_ENOMEM)
      stk__errf(err, rc, "out of memory listing %s%s", ho->disp_prefix, w.dir);
  }
  for (size_t i = 0; i < w.n; i++) free(w.dirs[i]);
  free(w.dirs);
  return rc;
}

int stk__http_put(struct stk_origin *o, const char *name, const void *body, int fd,
                  uint64_t len, char *err) {
  if (o->ops != &stk__origin_http)
    return stk__errf(err, STK_EINVAL, "%s: not an HTTP origin", o->url);
  struct stk__http_req r = {.method = STK__HTTP_PUT,
                            .fd = -1,
                            .mem_max = 1u << 20,
                            .body = body,
                            .body_len = (size_t)len,
                            .body_from_fd = !body,
                            .body_fd = fd};
  int rc = http_request((struct http_origin *)o, &r, name, err);
  free(r.mem);
  return rc;
}

int stk__http_delete(struct stk_origin *o, const char *name, char *err) {
  if (o->ops != &stk__origin_http)
    return stk__errf(err, STK_EINVAL, "%s: not an HTTP origin", o->url);
  struct stk__http_req r = {.method = STK__HTTP_DELETE, .fd = -1, .mem_max = 1u << 20};
  int rc = http_request((struct http_origin *)o, &r, name, err);
  free(r.mem);
  return rc;
}

static void http_stats(struct stk_origin *o, struct stk_origin_stats *st) {
  stk__http_stats(((struct http_origin *)o)->eng, st);
}

const struct stk_origin_ops stk__origin_http = {
    .scheme = "http",
    .open = http_open,
    .stat = http_stat,
    .get = http_get,
    .list = http_list,
    .stats = http_stats,
    .close = http_close,
};
