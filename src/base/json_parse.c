/* The bounded JSON reader: a recursive-descent parser (depth-limited) over
 * a length-delimited text, allocating nodes and unescaped strings from one
 * arena that is freed at once. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "json_parse.h"

#define ARENA_CHUNK (64u * 1024)

struct chunk {
  struct chunk *prev;
  size_t used, cap;
  _Alignas(16) uint8_t mem[];
};

struct stk__jdoc {
  struct chunk *arena;
  struct stk__jnode *root;
};

struct parser {
  const char *p, *s, *end;
  struct stk__jdoc *doc;
  int depth;
  size_t nodes;
  int rc;
  char *err;
};

static void *arena_alloc(struct stk__jdoc *d, size_t n) {
  n = (n + 15) & ~(size_t)15;
  struct chunk *c = d->arena;
  if (!c || c->cap - c->used < n) {
    size_t cap = n > ARENA_CHUNK ? n : ARENA_CHUNK;
    struct chunk *nc = malloc(sizeof *nc + cap);
    if (!nc) return NULL;
    nc->prev = c;
    nc->used = 0;
    nc->cap = cap;
    d->arena = c = nc;
  }
  void *p = c->mem + c->used;
  c->used += n;
  return p;
}

static int fail(struct parser *ps, int rc, const char *what) {
  if (!ps->rc) {
    ps->rc = rc;
    stk__errf(ps->err, rc, "JSON: %s at byte %zu", what, (size_t)(ps->p - ps->s));
  }
  return rc;
}

static void ws(struct parser *ps) {
  while (ps->p < ps->end &&
         (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
    ps->p++;
}

static struct stk__jnode *node(struct parser *ps, enum stk__jtype t) {
  if (++ps->nodes > STK_JSON_PARSE_MAX_NODES) {
    fail(ps, STK_ERANGE, "too many values");
    return NULL;
  }
  struct stk__jnode *n = arena_alloc(ps->doc, sizeof *n);
  if (!n) {
    fail(ps, STK_ENOMEM, "out of memory");
    return NULL;
  }
  memset(n, 0, sizeof *n);
  n->type = t;
  return n;
}

static int hex4(const char *p, unsigned *v) {
  *v = 0;
  for (int i = 0; i < 4; i++) {
    char c = p[i];
    unsigned d = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
                 : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                 : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10)
                                        : 16u;
    if (d > 15) return -1;
    *v = *v << 4 | d;
  }
  return 0;
}

static size_t put_utf8(char *o, unsigned cp) {
  if (cp < 0x80) return o[0] = (char)cp, 1;
  if (cp < 0x800) return o[0] = (char)(0xc0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3f)), 2;
  if (cp < 0x10000) {
    o[0] = (char)(0xe0 | cp >> 12);
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
  }
  o[0] = (char)(0xf0 | cp >> 18);
  o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
  o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
  o[3] = (char)(0x80 | (cp & 0x3f));
  return 4;
}

/* A \u escape of four hex digits (with a following low surrogate for pairs) at ps->p (after 'u'). */
static int unicode_escape(struct parser *ps, char *o, size_t *n) {
  unsigned cp, lo;
  if (ps->end - ps->p < 4 || hex4(ps->p, &cp)) return fail(ps, STK_EFORMAT, "bad \\u escape");
  ps->p += 4;
  if (cp >= 0xd800 && cp < 0xdc00) {
    if (ps->end - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u' || hex4(ps->p + 2, &lo) ||
        lo < 0xdc00 || lo > 0xdfff)
      return fail(ps, STK_EFORMAT, "unpaired surrogate");
    ps->p += 6;
    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
  } else if (cp >= 0xdc00 && cp < 0xe000) {
    return fail(ps, STK_EFORMAT, "unpaired surrogate");
  }
  *n = put_utf8(o, cp);
  return 0;
}

/* A string at ps->p (at the opening quote); unescaped into the arena. The
 * output is never longer than the input. */
static const char *string(struct parser *ps, size_t *len) {
  const char *q = ++ps->p;
  while (q < ps->end && *q != '"') q += *q == '\\' ? 2 : 1;
  if (q >= ps->end) return fail(ps, STK_EFORMAT, "unterminated string"), NULL;
  char *out = arena_alloc(ps->doc, (size_t)(q - ps->p) + 1), *o = out;
  if (!out) return fail(ps, STK_ENOMEM, "out of memory"), NULL;
  while (ps->p < q) {
    char c = *ps->p++;
    if ((unsigned char)c < 0x20) return fail(ps, STK_EFORMAT, "control character in string"), NULL;
    if (c != '\\') {
      *o++ = c;
      continue;
    }
    c = *ps->p++;
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *k = c ? strchr(from, c) : NULL;
    if (k) {
      *o++ = to[k - from];
    } else if (c == 'u') {
      size_t n = 0;
      if (unicode_escape(ps, o, &n)) return NULL;
      o += n;
    } else {
      return fail(ps, STK_EFORMAT, "bad escape in string"), NULL;
    }
  }
  ps->p = q + 1;
  *o = 0;
  *len = (size_t)(o - out);
  return out;
}

static struct stk__jnode *number(struct parser *ps) {
  const char *b = ps->p;
  int integral = 1;
  if (ps->p < ps->end && *ps->p == '-') ps->p++;
  if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return fail(ps, STK_EFORMAT, "bad number"), NULL;
  if (*ps->p == '0') ps->p++;
  else while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') ps->p++;
  if (ps->p < ps->end && *ps->p == '.') {
    integral = 0;
    if (++ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return fail(ps, STK_EFORMAT, "bad number"), NULL;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') ps->p++;
  }
  if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
    integral = 0;
    if (++ps->p < ps->end && (*ps->p == '+' || *ps->p == '-')) ps->p++;
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return fail(ps, STK_EFORMAT, "bad number"), NULL;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') ps->p++;
  }
  char tmp[64];
  size_t n = (size_t)(ps->p - b);
  if (n >= sizeof tmp) return fail(ps, STK_EFORMAT, "number too long"), NULL;
  memcpy(tmp, b, n);
  tmp[n] = 0;
  struct stk__jnode *v = node(ps, STK_JNUM);
  if (!v) return NULL;
  v->num = strtod(tmp, NULL);
  if (integral) {
    errno = 0;
    long long i = strtoll(tmp, NULL, 10);
    if (errno == 0) v->is_int = 1, v->i = i;
  }
  return v;
}

static struct stk__jnode *value(struct parser *ps);

/* Members or elements up to the closing bracket, linked in order. */
static struct stk__jnode *container(struct parser *ps, int obj) {
  struct stk__jnode *c = node(ps, obj ? STK_JOBJ : STK_JARR), **tail;
  if (!c) return NULL;
  if (++ps->depth > STK_JSON_PARSE_MAX_DEPTH) return fail(ps, STK_ERANGE, "nesting too deep"), NULL;
  tail = &c->child;
  ps->p++;
  ws(ps);
  char close = obj ? '}' : ']';
  if (ps->p < ps->end && *ps->p == close) {
    ps->p++;
    ps->depth--;
    return c;
  }
  for (;;) {
    const char *key = NULL;
    size_t kl;
    ws(ps);
    if (obj) {
      if (ps->p >= ps->end || *ps->p != '"') return fail(ps, STK_EFORMAT, "expected a member name"), NULL;
      if (!(key = string(ps, &kl))) return NULL;
      ws(ps);
      if (ps->p >= ps->end || *ps->p != ':') return fail(ps, STK_EFORMAT, "expected ':'"), NULL;
      ps->p++;
    }
    struct stk__jnode *v = value(ps);
    if (!v) return NULL;
    v->key = key;
    *tail = v;
    tail = &v->next;
    c->len++;
    ws(ps);
    if (ps->p < ps->end && *ps->p == ',') {
      ps->p++;
      continue;
    }
    if (ps->p < ps->end && *ps->p == close) break;
    return fail(ps, STK_EFORMAT, obj ? "expected ',' or '}'" : "expected ',' or ']'"), NULL;
  }
  ps->p++;
  ps->depth--;
  return c;
}

static struct stk__jnode *literal(struct parser *ps, const char *word, enum stk__jtype t, int b) {
  size_t n = strlen(word);
  if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n))
    return fail(ps, STK_EFORMAT, "unexpected character"), NULL;
  ps->p += n;
  struct stk__jnode *v = node(ps, t);
  if (v) v->b = b;
  return v;
}

static struct stk__jnode *value(struct parser *ps) {
  ws(ps);
  if (ps->p >= ps->end) return fail(ps, STK_EFORMAT, "unexpected end of input"), NULL;
  switch (*ps->p) {
    case '{': return container(ps, 1);
    case '[': return container(ps, 0);
    case '"': {
      size_t len;
      const char *s = string(ps, &len);
      struct stk__jnode *v = s ? node(ps, STK_JSTR) : NULL;
      if (v) v->str = s, v->len = len;
      return v;
    }
    case 't': return literal(ps, "true", STK_JBOOL, 1);
    case 'f': return literal(ps, "false", STK_JBOOL, 0);
    case 'n': return literal(ps, "null", STK_JNULL, 0);
    default: return number(ps);
  }
}

void stk__json_free(struct stk__jdoc *d) {
  if (!d) return;
  for (struct chunk *c = d->arena, *p; c; c = p) {
    p = c->prev;
    free(c);
  }
  free(d);
}

int stk__json_parse(struct stk__jdoc **out, const char *text, size_t len, char *err) {
  if (len > STK_JSON_PARSE_MAX_BYTES)
    return stk__errf(err, STK_ERANGE, "JSON: text of %zu bytes is over the %u-byte limit", len,
                     STK_JSON_PARSE_MAX_BYTES);
  struct stk__jdoc *d = calloc(1, sizeof *d);
  if (!d) return stk__errf(err, STK_ENOMEM, "out of memory");
  struct parser ps = {.p = text, .s = text, .end = text + len, .doc = d, .err = err};
  d->root = value(&ps);
  if (d->root) {
    ws(&ps);
    if (ps.p != ps.end) fail(&ps, STK_EFORMAT, "trailing characters");
  }
  if (ps.rc || !d->root) {
    stk__json_free(d);
    return ps.rc ? ps.rc : STK_EFORMAT;
  }
  *out = d;
  return 0;
}

const struct stk__jnode *stk__json_root(const struct stk__jdoc *d) { return d->root; }

const struct stk__jnode *stk__json_get(const struct stk__jnode *obj, const char *key) {
  const struct stk__jnode *found = NULL;
  if (!obj || obj->type != STK_JOBJ) return NULL;
  for (const struct stk__jnode *c = obj->child; c; c = c->next)
    if (!strcmp(c->key, key)) found = c;
  return found;
}

const struct stk__jnode *stk__json_at(const struct stk__jnode *arr, size_t i) {
  if (!arr || arr->type != STK_JARR) return NULL;
  const struct stk__jnode *c = arr->child;
  while (c && i--) c = c->next;
  return c;
}

const char *stk__json_str(const struct stk__jnode *obj, const char *key) {
  const struct stk__jnode *v = stk__json_get(obj, key);
  return v && v->type == STK_JSTR ? v->str : NULL;
}

int stk__json_u64(const struct stk__jnode *obj, const char *key, uint64_t *v) {
  const struct stk__jnode *n = stk__json_get(obj, key);
  if (!n || n->type != STK_JNUM || !n->is_int || n->i < 0) return -1;
  *v = (uint64_t)n->i;
  return 0;
}
