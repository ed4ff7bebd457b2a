/* A streaming reader for the simulator's CSV traces: one line buffer, fields
 * looked up by header name, and error messages that name the file and line,
 * so a malformed row in a million-row trace is found at once. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim_impl.h"

#define MAX_LINE (1u << 20)

/* Read one line into r->buf without its end of line; 0, STK_EOF, or an
 * error for an overlong line or a read failure. */
static int read_line(struct stk__sim_csv *r, char *errmsg) {
  size_t n = 0;
  int c;
  while ((c = getc_unlocked(r->f)) != EOF && c != '\n') {
    if (n + 2 > r->cap) {
      if (r->cap >= MAX_LINE)
        return stk__errf(errmsg, STK_EFORMAT, "%s:%llu: line longer than %u bytes", r->path,
                         (unsigned long long)r->line + 1, MAX_LINE);
      size_t cap = r->cap ? r->cap * 2 : 1024;
      char *b = realloc(r->buf, cap);
      if (!b) return stk__errf(errmsg, STK_ENOMEM, "%s: out of memory", r->path);
      r->buf = b;
      r->cap = cap;
    }
    r->buf[n++] = (char)c;
  }
  if (c == EOF && ferror(r->f))
    return stk__errf(errmsg, stk__from_errno(errno), "%s: read failed: %s", r->path,
                     strerror(errno));
  if (c == EOF && n == 0) return STK_EOF;
  if (!r->buf) {
    r->buf = malloc(16);
    if (!r->buf) return STK_ENOMEM;
    r->cap = 16;
  }
  if (n && r->buf[n - 1] == '\r') n--;
  r->buf[n] = 0;
  r->line++;
  return 0;
}

/* Split r->buf in place at commas into r->field. A field may be quoted
 * ("a, b" keeps its comma, "" inside is one quote); spaces and tabs around
 * a field are dropped, those inside quotes kept. A quote that never closes,
 * or text after a closing quote, fails with the file and line (a quoted
 * field cannot span lines). */
static int split(struct stk__sim_csv *r, char *errmsg) {
  r->nfield = 0;
  char *p = r->buf;
  for (;;) {
    if (r->nfield == r->capfield) {
      int cap = r->capfield ? r->capfield * 2 : 16;
      char **f = realloc(r->field, (size_t)cap * sizeof *f);
      if (!f) return stk__errf(errmsg, STK_ENOMEM, "%s: out of memory", r->path);
      r->field = f;
      r->capfield = cap;
    }
    while (*p == ' ' || *p == '\t') p++;
    char *start = p, *end;
    if (*p == '"') {
      char *w = p++;
      for (;;) {
        if (!*p)
          return stk__errf(errmsg, STK_EFORMAT, "%s:%llu: a quoted field has no closing quote",
                           r->path, (unsigned long long)r->line);
        if (*p == '"') {
          if (p[1] != '"') break;
          p++;
        }
        *w++ = *p++;
      }
      p++;
      end = w;
      while (*p == ' ' || *p == '\t') p++;
      if (*p && *p != ',')
        return stk__errf(errmsg, STK_EFORMAT, "%s:%llu: text after the closing quote of field %d",
                         r->path, (unsigned long long)r->line, r->nfield + 1);
    } else {
      char *comma = strchr(p, ',');
      p = end = comma ? comma : p + strlen(p);
      while (end > start && (end[-1] == ' ' || end[-1] == '\t')) end--;
    }
    char sep = *p;
    *end = 0;
    r->field[r->nfield++] = start;
    if (!sep) break;
    p++;
  }
  return 0;
}

static int blank(const char *s) {
  for (; *s; s++)
    if (*s != ' ' && *s != '\t') return 0;
  return 1;
}

int stk__sim_csv_open(struct stk__sim_csv *r, const char *path, char *errmsg) {
  memset(r, 0, sizeof *r);
  snprintf(r->path, sizeof r->path, "%s", strcmp(path, "-") ? path : "<stdin>");
  if (!strcmp(path, "-")) {
    r->f = stdin;
  } else {
    r->f = fopen(path, "r");
    if (!r->f)
      return stk__errf(errmsg, stk__from_errno(errno), "%s: cannot open: %s", path,
                       strerror(errno));
    r->own = 1;
  }
  int rc;
  do {
    rc = read_line(r, errmsg);
  } while (rc == 0 && blank(r->buf));
  if (rc == STK_EOF)
    rc = stk__errf(errmsg, STK_EEMPTY, "%s: empty file, expected a CSV header line", r->path);
  if (rc) {
    stk__sim_csv_close(r);
    return rc;
  }
  char *h = r->buf;
  if ((unsigned char)h[0] == 0xef && (unsigned char)h[1] == 0xbb && (unsigned char)h[2] == 0xbf)
    memmove(h, h + 3, strlen(h + 3) + 1); /* a UTF-8 byte-order mark */
  if ((rc = split(r, errmsg)) != 0) {
    stk__sim_csv_close(r);
    return rc;
  }
  r->nhdr = r->nfield;
  r->hdr = calloc((size_t)r->nhdr, sizeof *r->hdr);
  if (!r->hdr) {
    stk__sim_csv_close(r);
    return stk__errf(errmsg, STK_ENOMEM, "%s: out of memory", r->path);
  }
  for (int i = 0; i < r->nhdr; i++) {
    r->hdr[i] = strdup(r->field[i]);
    if (!r->hdr[i]) {
      stk__sim_csv_close(r);
      return stk__errf(errmsg, STK_ENOMEM, "%s: out of memory", r->path);
    }
  }
  return 0;
}

void stk__sim_csv_close(struct stk__sim_csv *r) {
  if (r->own && r->f) fclose(r->f);
  for (int i = 0; i < r->nhdr; i++) free(r->hdr[i]);
  free(r->hdr);
  free(r->buf);
  free(r->field);
  memset(r, 0, sizeof *r);
}

int stk__sim_csv_col(const struct stk__sim_csv *r, const char *name) {
  for (int i = 0; i < r->nhdr; i++)
    if (!strcmp(r->hdr[i], name)) return i;
  return -1;
}

int stk__sim_csv_next(struct stk__sim_csv *r, char *errmsg) {
  int rc;
  do {
    rc = read_line(r, errmsg);
  } while (rc == 0 && blank(r->buf));
  if (rc) return rc;
  if ((rc = split(r, errmsg)) != 0) return rc;
  if (r->nfield != r->nhdr)
    return stk__errf(errmsg, STK_EFORMAT, "%s:%llu: %d fields, but the header has %d", r->path,
                     (unsigned long long)r->line, r->nfield, r->nhdr);
  return 0;
}

const char *stk__sim_csv_get(const struct stk__sim_csv *r, int col) {
  return col >= 0 && col < r->nfield ? r->field[col] : "";
}

int stk__sim_csv_int(const struct stk__sim_csv *r, int col, int64_t lo, int64_t hi, int allow_empty,
                     int64_t def, int64_t *out, char *errmsg) {
  const char *s = stk__sim_csv_get(r, col);
  const char *cname = col >= 0 ? r->hdr[col] : "?";
  if (!*s) {
    if (allow_empty) {
      *out = def;
      return 0;
    }
    return stk__errf(errmsg, STK_EFORMAT, "%s:%llu: %s is empty", r->path,
                     (unsigned long long)r->line, cname);
  }
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (*end == '.') { /* "12.0" from a spreadsheet: accept whole values only */
    char *e2;
    double d = strtod(s, &e2);
    if (*e2 == 0 && d == (double)(long long)d) {
      v = (long long)d;
      end = e2;
    }
  }
  if (end == s || *end || errno == ERANGE)
    return stk__errf(errmsg, STK_EFORMAT, "%s:%llu: %s '%s' is not a whole number", r->path,
                     (unsigned long long)r->line, cname, s);
  if (v < lo || v > hi)
    return stk__errf(errmsg, STK_EFORMAT, "%s:%llu: %s %lld is out of range (%lld..%lld)", r->path,
                     (unsigned long long)r->line, cname, v, (long long)lo, (long long)hi);
  *out = v;
  return 0;
}

int stk__sim_decimal(const char *s, double *out) {
  const char *p = s;
  if (*p == '+' || *p == '-') p++;
  int nd = 0;
  while (*p >= '0' && *p <= '9') p++, nd++;
  if (*p == '.') {
    p++;
    while (*p >= '0' && *p <= '9') p++, nd++;
  }
  if (!nd) return STK_EFORMAT;
  if (*p == 'e' || *p == 'E') {
    p++;
    if (*p == '+' || *p == '-') p++;
    if (*p < '0' || *p > '9') return STK_EFORMAT;
    while (*p >= '0' && *p <= '9') p++;
  }
  if (*p) return STK_EFORMAT;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (*end || errno == ERANGE || !isfinite(v)) return STK_EFORMAT;
  *out = v;
  return 0;
}

int stk__sim_csv_num(const struct stk__sim_csv *r, int col, double lo, double *out, char *errmsg) {
  const char *s = stk__sim_csv_get(r, col);
  double v = 0;
  if (stk__sim_decimal(s, &v))
    return stk__errf(errmsg, STK_EFORMAT, "%s:%llu: %s '%s' is not a number", r->path,
                     (unsigned long long)r->line, col >= 0 ? r->hdr[col] : "?", s);
  if (v < lo)
    return stk__errf(errmsg, STK_EFORMAT, "%s:%llu: %s %g is below %g", r->path,
                     (unsigned long long)r->line, col >= 0 ? r->hdr[col] : "?", v, lo);
  *out = v;
  return 0;
}
