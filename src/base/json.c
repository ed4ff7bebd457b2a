/* A streaming JSON writer: enough structure tracking to place commas and
 * indentation, no buffering beyond stdio's. Reports are written with it. */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "base.h"

void stk_json_init(struct stk_json *j, FILE *f, int indent) {
  memset(j, 0, sizeof *j);
  j->f = f;
  j->indent = indent;
  j->first[0] = 1;
}

static void newline(struct stk_json *j) {
  if (!j->indent) return;
  fputc('\n', j->f);
  for (int i = 0; i < j->depth * j->indent; i++) fputc(' ', j->f);
}

/* Called before every value or key: a comma if a sibling came before. */
static void sep(struct stk_json *j) {
  if (j->after_key) {
    j->after_key = 0;
    return;
  }
  if (!j->first[j->depth]) fputc(',', j->f);
  j->first[j->depth] = 0;
  if (j->depth > 0) newline(j);
}

static void open(struct stk_json *j, char c) {
  sep(j);
  fputc(c, j->f);
  if (j->depth < STK_JSON_MAX_DEPTH - 1) j->depth++;
  j->first[j->depth] = 1;
}

static void close_(struct stk_json *j, char c) {
  int empty = j->first[j->depth];
  if (j->depth > 0) j->depth--;
  if (!empty) newline(j);
  fputc(c, j->f);
  if (j->depth == 0 && j->indent) fputc('\n', j->f);
}

void stk_json_obj_begin(struct stk_json *j) { open(j, '{'); }
void stk_json_obj_end(struct stk_json *j) { close_(j, '}'); }
void stk_json_arr_begin(struct stk_json *j) { open(j, '['); }
void stk_json_arr_end(struct stk_json *j) { close_(j, ']'); }

static void put_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    switch (*p) {
      case '"': fputs("\\\"", f); break;
      case '\\': fputs("\\\\", f); break;
      case '\n': fputs("\\n", f); break;
      case '\r': fputs("\\r", f); break;
      case '\t': fputs("\\t", f); break;
      default:
        if (*p < 0x20)
          fprintf(f, "\\u%04x", *p);
        else
          fputc(*p, f);
    }
  }
  fputc('"', f);
}

void stk_json_key(struct stk_json *j, const char *key) {
  sep(j);
  put_str(j->f, key);
  fputs(j->indent ? ": " : ":", j->f);
  j->after_key = 1;
}

void stk_json_str(struct stk_json *j, const char *s) {
  sep(j);
  if (s)
    put_str(j->f, s);
  else
    fputs("null", j->f);
}
void stk_json_u64(struct stk_json *j, uint64_t v) {
  sep(j);
  fprintf(j->f, "%" PRIu64, v);
}
void stk_json_i64(struct stk_json *j, int64_t v) {
  sep(j);
  fprintf(j->f, "%" PRId64, v);
}
void stk_json_dbl(struct stk_json *j, double v) {
  sep(j);
  if (isfinite(v))
    fprintf(j->f, "%.17g", v);
  else
    fputs("null", j->f);
}
void stk_json_bool(struct stk_json *j, int v) {
  sep(j);
  fputs(v ? "true" : "false", j->f);
}
void stk_json_null(struct stk_json *j) {
  sep(j);
  fputs("null", j->f);
}
void stk_json_kstr(struct stk_json *j, const char *k, const char *s) {
  stk_json_key(j, k);
  stk_json_str(j, s);
}
void stk_json_ku64(struct stk_json *j, const char *k, uint64_t v) {
  stk_json_key(j, k);
  stk_json_u64(j, v);
}
void stk_json_kdbl(struct stk_json *j, const char *k, double v) {
  stk_json_key(j, k);
  stk_json_dbl(j, v);
}
