/* Directory listing pages as HTTP servers write them, so that a plain web
 * server's folder of shards can be read without a manifest: nginx
 * autoindex (HTML, and JSON with autoindex_format json), Apache
 * mod_autoindex, Python's http.server, and any page of plain relative
 * links. The HTML is never trusted to be well formed: links are found by
 * scanning for href attributes, and only relative names that stay inside
 * the listed folder are kept (no parent links, no absolute or external
 * URLs, no sort-order queries). Fuzzed by tests/fuzz/fuzz_listing.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../base/json_parse.h"
#include "http_impl.h"

#define NAME_MAX_BYTES 1024

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Percent-decode s in place; -1 for a malformed escape or a NUL byte. */
static int pct_decode(char *s) {
  char *o = s;
  for (char *p = s; *p; p++) {
    if (*p != '%') {
      *o++ = *p;
      continue;
    }
    int h = hexval(p[1]), l = h < 0 ? -1 : hexval(p[2]);
    if (h < 0 || l < 0 || (h == 0 && l == 0)) return -1;
    *o++ = (char)(h * 16 + l);
    p += 2;
  }
  *o = 0;
  return 0;
}

/* Whether a decoded link names something inside the folder: relative, no
 * "..", no scheme, no query or fragment, no control bytes. */
static int inside(const char *s) {
  if (!*s || *s == '/' || *s == '?' || *s == '#' || strstr(s, "://") || strchr(s, '?') ||
      strchr(s, '#') || !strncasecmp(s, "mailto:", 7) || !strncasecmp(s, "javascript:", 11))
    return 0;
  for (const char *p = s; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == '\\') return 0;
  for (const char *p = s; p; p = strchr(p, '/')) {
    if (*p == '/') p++;
    if ((p[0] == '.' && (p[1] == '/' || !p[1])) ||
        (p[0] == '.' && p[1] == '.' && (p[2] == '/' || !p[2])))
      return 0;
  }
  return 1;
}

/* A size written after the link on the same line, as nginx's autoindex
 * does ("24-Nov-2026 00:26    12345"): the line's last word with tags
 * removed, if it is all digits. Apache's rounded sizes ("1.2K") and dashes
 * give UINT64_MAX (unknown). */
static uint64_t size_after(const char *p, const char *end) {
  const char *eol = memchr(p, '\n', (size_t)(end - p));
  if (!eol) eol = end;
  char word[32];
  size_t wl = 0;
  int in_tag = 0, ended = 1;
  for (const char *q = p; q < eol; q++) {
    if (in_tag) {
      if (*q == '>') in_tag = 0, ended = 1;
      continue;
    }
    if (*q == '<') {
      /* another link on the same line: the size is not this entry's */
      if (q + 2 < eol && (q[1] | 32) == 'a' && (q[2] == ' ' || q[2] == '\t')) break;
      in_tag = 1;
      continue;
    }
    if (*q == ' ' || *q == '\t' || *q == '\r') {
      ended = 1;
      continue;
    }
    if (ended) wl = 0, ended = 0;
    if (wl + 1 < sizeof word) word[wl++] = *q;
  }
  if (wl == 0 || wl > 19) return UINT64_MAX;
  uint64_t v = 0;
  for (size_t i = 0; i < wl; i++) {
    if (word[i] < '0' || word[i] > '9') return UINT64_MAX;
    v = v * 10 + (uint64_t)(word[i] - '0');
  }
  return v;
}

static int emit(const char *raw, size_t n, uint64_t size, char *prev,
                int (*cb)(void *arg, const char *name, int is_dir, uint64_t size), void *arg) {
  if (n == 0 || n >= NAME_MAX_BYTES) return 0;
  char dec[NAME_MAX_BYTES];
  if (stk__xml_text(raw, n, dec, sizeof dec) < 0) return 0; /* entities (&amp;) */
  if (pct_decode(dec)) return 0;
  char *name = dec;
  while (name[0] == '.' && name[1] == '/') name += 2;
  size_t l = strlen(name);
  int is_dir = l > 0 && name[l - 1] == '/';
  if (is_dir) name[--l] = 0;
  if (!inside(name) || !strcmp(name, prev)) return 0; /* Apache icons repeat the link */
  snprintf(prev, NAME_MAX_BYTES, "%s", name);
  return cb(arg, name, is_dir, is_dir ? UINT64_MAX : size);
}

static int parse_html(const char *body, size_t len,
                      int (*cb)(void *arg, const char *name, int is_dir, uint64_t size), void *arg,
                      size_t *links) {
  const char *p = body, *end = body + len;
  char prev[NAME_MAX_BYTES] = "";
  *links = 0;
  while (p < end) {
    const char *h = NULL;
    for (const char *q = p; q + 5 <= end; q++)
      if ((q[0] | 32) == 'h' && !strncasecmp(q, "href", 4)) {
        h = q;
        break;
      }
    if (!h) break;
    const char *q = h + 4;
    while (q < end && (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r')) q++;
    if (q >= end || *q != '=') {
      p = h + 4;
      continue;
    }
    q++;
    while (q < end && (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r')) q++;
    if (q >= end) break;
    const char *v = q, *ve;
    if (*q == '"' || *q == '\'') {
      char quote = *q;
      v = q + 1;
      ve = memchr(v, quote, (size_t)(end - v));
      if (!ve) break;
    } else {
      ve = v;
      while (ve < end && *ve != ' ' && *ve != '>' && *ve != '\t' && *ve != '\n') ve++;
    }
    (*links)++;
    /* The size (nginx) follows the link's closing tag on the same line. */
    const char *close = NULL;
    for (const char *c = ve; c + 4 <= end && *c != '\n'; c++)
      if (c[0] == '<' && c[1] == '/' && (c[2] | 32) == 'a' && c[3] == '>') {
        close = c + 4;
        break;
      }
    uint64_t size = close ? size_after(close, end) : UINT64_MAX;
    int rc = emit(v, (size_t)(ve - v), size, prev, cb, arg);
    if (rc) return rc;
    p = ve + (ve < end);
  }
  return 0;
}

static int parse_json(const char *body, size_t len,
                      int (*cb)(void *arg, const char *name, int is_dir, uint64_t size), void *arg,
                      char *err) {
  struct stk__jdoc *doc = NULL;
  char jerr[STK_ERRMSG_MAX];
  int rc = stk__json_parse(&doc, body, len, jerr);
  if (rc) return stk__errf(err, STK_EFORMAT, "not a JSON listing: %s", jerr);
  const struct stk__jnode *root = stk__json_root(doc);
  if (root->type != STK_JARR) {
    stk__json_free(doc);
    return stk__errf(err, STK_EFORMAT, "not a JSON listing (an array of entries)");
  }
  char prev[NAME_MAX_BYTES] = "";
  for (const struct stk__jnode *e = root->child; e && !rc; e = e->next) {
    const char *name = stk__json_str(e, "name"), *type = stk__json_str(e, "type");
    if (!name || !type) continue;
    int is_dir = !strcmp(type, "directory");
    if (!is_dir && strcmp(type, "file")) continue; /* links and others */
    uint64_t size = UINT64_MAX;
    if (!is_dir && stk__json_u64(e, "size", &size)) size = UINT64_MAX;
    size_t n = strlen(name);
    if (n == 0 || n + 1 >= NAME_MAX_BYTES || strchr(name, '/')) continue;
    if (!inside(name) || !strcmp(name, prev)) continue;
    snprintf(prev, sizeof prev, "%s", name);
    rc = cb(arg, name, is_dir, size);
  }
  stk__json_free(doc);
  return rc;
}

int stk__listing_parse(const char *body, size_t len,
                       int (*cb)(void *arg, const char *name, int is_dir, uint64_t size), void *arg,
                       char *err) {
  size_t i = 0;
  while (i < len && (body[i] == ' ' || body[i] == '\n' || body[i] == '\r' || body[i] == '\t')) i++;
  if (i < len && body[i] == '[') return parse_json(body + i, len - i, cb, arg, err);
  if (i == len || body[i] != '<')
    return stk__errf(err, STK_EFORMAT, "not a directory listing (neither HTML nor JSON)");
  size_t links;
  return parse_html(body, len, cb, arg, &links);
}
