/* Text helpers of the HTTP engine's users: percent-encoding (S3 keys and
 * queries) and the few XML shapes S3 sends (errors, ListObjectsV2 pages).
 * Pure functions over untrusted bytes, fuzzed by tests/fuzz/fuzz_s3list.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_impl.h"

size_t stk__url_encode(const char *in, char *out, size_t n, int keep_slash) {
  static const char hex[] = "0123456789ABCDEF";
  size_t k = 0;
  for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
    int plain = (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
                *p == '-' || *p == '_' || *p == '.' || *p == '~' || (keep_slash && *p == '/');
    if (plain) {
      if (k + 1 < n) out[k] = (char)*p;
      k++;
    } else {
      if (k + 3 < n) {
        out[k] = '%';
        out[k + 1] = hex[*p >> 4];
        out[k + 2] = hex[*p & 15];
      } else if (k < n) {
        n = k + 1; /* no half escapes: stop output here */
      }
      k += 3;
    }
  }
  if (n) out[STK__MIN(k, n - 1)] = 0;
  return k;
}

const char *stk__xml_elem(const char *p, const char *end, const char *tag, size_t *len,
                          const char **next) {
  char open[64], close[66];
  int ol = snprintf(open, sizeof open, "<%s>", tag);
  int cl = snprintf(close, sizeof close, "</%s>", tag);
  if (ol <= 0 || cl <= 0 || (size_t)ol >= sizeof open || (size_t)cl >= sizeof close) return NULL;
  const char *s = memmem(p, (size_t)(end - p), open, (size_t)ol);
  if (!s) return NULL;
  s += ol;
  const char *e = memmem(s, (size_t)(end - s), close, (size_t)cl);
  if (!e) return NULL;
  *len = (size_t)(e - s);
  if (next) *next = e + cl;
  return s;
}

/* Append code point cp as UTF-8; -1 when it does not fit or is invalid. */
static int put_utf8(char *out, size_t n, size_t *k, uint32_t cp) {
  char b[4];
  size_t m;
  if (cp == 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
  if (cp < 0x80) {
    b[0] = (char)cp, m = 1;
  } else if (cp < 0x800) {
    b[0] = (char)(0xC0 | (cp >> 6)), b[1] = (char)(0x80 | (cp & 63)), m = 2;
  } else if (cp < 0x10000) {
    b[0] = (char)(0xE0 | (cp >> 12)), b[1] = (char)(0x80 | ((cp >> 6) & 63));
    b[2] = (char)(0x80 | (cp & 63)), m = 3;
  } else {
    b[0] = (char)(0xF0 | (cp >> 18)), b[1] = (char)(0x80 | ((cp >> 12) & 63));
    b[2] = (char)(0x80 | ((cp >> 6) & 63)), b[3] = (char)(0x80 | (cp & 63)), m = 4;
  }
  if (*k + m >= n) return -1;
  memcpy(out + *k, b, m);
  *k += m;
  return 0;
}

long stk__xml_text(const char *s, size_t len, char *out, size_t n) {
  static const struct {
    const char *name;
    char c;
  } ents[] = {{"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}};
  size_t k = 0;
  if (n == 0) return -1;
  for (size_t i = 0; i < len;) {
    if (s[i] != '&') {
      if (k + 1 >= n) return -1;
      out[k++] = s[i++];
      continue;
    }
    const char *semi = memchr(s + i, ';', STK__MIN(len - i, (size_t)12));
    if (!semi) return -1;
    const char *name = s + i + 1;
    size_t nl = (size_t)(semi - name);
    int found = 0;
    if (nl >= 2 && name[0] == '#') { /* &#NN; or &#xHH; */
      int hexa = name[1] == 'x' || name[1] == 'X';
      uint32_t cp = 0;
      size_t d = hexa ? 2 : 1;
      if (d == nl) return -1;
      for (; d < nl; d++) {
        int c = name[d], v;
        if (c >= '0' && c <= '9')
          v = c - '0';
        else if (hexa && ((c | 32) >= 'a' && (c | 32) <= 'f'))
          v = (c | 32) - 'a' + 10;
        else
          return -1;
        cp = cp * (hexa ? 16 : 10) + (uint32_t)v;
        if (cp > 0x10FFFF) return -1;
      }
      if (put_utf8(out, n, &k, cp)) return -1;
      found = 1;
    } else {
      for (size_t e = 0; e < STK__ARRAY_LEN(ents); e++)
        if (strlen(ents[e].name) == nl && !memcmp(name, ents[e].name, nl)) {
          if (k + 1 >= n) return -1;
          out[k++] = ents[e].c;
          found = 1;
          break;
        }
    }
    if (!found) return -1;
    i = (size_t)(semi - s) + 1;
  }
  out[k] = 0;
  return (long)k;
}

