/* Naming shards one by one, in the forms people already have: WebDataset
 * brace patterns ("train/shard-{000000..001023}.tar", several braces,
 * zero padding kept, "{a,b}" alternatives) and shard-list files (one URL
 * or path per line). These parsers see untrusted text (a list fetched from
 * a server): every bound is checked and tests/fuzz/fuzz_sources.c runs
 * them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataset_impl.h"

#define PATTERN_MAX 4096 /* bytes of one pattern */
#define GROUPS_MAX 16    /* brace groups in one pattern */
#define ALTS_MAX 4096    /* alternatives in one {a,b,...} group */

int stk__names_add(struct stk__names *l, const char *s) {
  if (l->n == l->cap) {
    size_t nc = l->cap ? l->cap * 2 : 16;
    char **v = realloc(l->v, nc * sizeof *v);
    if (!v) return STK_ENOMEM;
    l->v = v;
    l->cap = nc;
  }
  if (!(l->v[l->n] = strdup(s))) return STK_ENOMEM;
  l->n++;
  return 0;
}

void stk__names_free(struct stk__names *l) {
  for (size_t i = 0; i < l->n; i++) free(l->v[i]);
  free(l->v);
  memset(l, 0, sizeof *l);
}

/* ---- brace patterns ------------------------------------------------------ */

/* One {...}: a numeric range or a list of alternatives, at [start, end]
 * of the pattern (the braces included). */
struct group {
  size_t start, end;
  int range; /* 1: lo..hi (step), else alternatives */
  long long lo, hi, step;
  int width;      /* zero-padded width, 0 = none */
  const char *in; /* the text between the braces (alternatives) */
  size_t in_len;
  unsigned long long count;
};

int stk__brace_has(const char *s) {
  const char *o = strchr(s, '{');
  if (!o) return 0;
  const char *c = strchr(o, '}');
  if (!c) return 0;
  for (const char *p = o; p < c; p++)
    if (*p == ',' || (p[0] == '.' && p[1] == '.')) return 1;
  return 0;
}

static int parse_ll(const char *p, size_t n, long long *v, int *lead_zero) {
  if (n == 0 || n > 18) return -1;
  size_t i = 0;
  int neg = p[0] == '-';
  if (neg) i++;
  if (i == n) return -1;
  long long x = 0;
  for (; i < n; i++) {
    if (p[i] < '0' || p[i] > '9') return -1;
    x = x * 10 + (p[i] - '0');
  }
  *v = neg ? -x : x;
  *lead_zero = n - (size_t)neg > 1 && p[neg] == '0';
  return 0;
}

/* Parse the group whose '{' is at s[g->start] and '}' at s[g->end]. */
static int parse_group(const char *s, struct group *g, char *err) {
  const char *in = s + g->start + 1;
  size_t n = g->end - g->start - 1;
  const char *dots = NULL;
  for (size_t i = 0; i + 1 < n; i++)
    if (in[i] == '.' && in[i + 1] == '.') {
      dots = in + i;
      break;
    }
  if (dots && !memchr(in, ',', n)) {
    const char *b = dots + 2, *end = in + n;
    const char *dots2 = NULL;
    for (const char *p = b; p + 1 < end; p++)
      if (p[0] == '.' && p[1] == '.') {
        dots2 = p;
        break;
      }
    int z1, z2, z3;
    long long step = 1;
    if (parse_ll(in, (size_t)(dots - in), &g->lo, &z1) ||
        parse_ll(b, (size_t)((dots2 ? dots2 : end) - b), &g->hi, &z2) ||
        (dots2 && (parse_ll(dots2 + 2, (size_t)(end - dots2 - 2), &step, &z3) || step == 0)))
      return stk__errf(err, STK_EINVAL,
                       "%s: brace range {%.*s} needs whole numbers, as in "
                       "{000..099} or {0..98..2}",
                       s, (int)n, in);
    g->range = 1;
    g->step = step < 0 ? -step : step;
    if (z1 || z2) {
      size_t w1 = (size_t)(dots - in), w2 = (size_t)((dots2 ? dots2 : end) - b);
      g->width = (int)(w1 > w2 ? w1 : w2);
    }
    unsigned long long span =
        g->lo <= g->hi ? (unsigned long long)(g->hi - g->lo) : (unsigned long long)(g->lo - g->hi);
    g->count = span / (unsigned long long)g->step + 1;
    return 0;
  }
  g->in = in;
  g->in_len = n;
  g->count = 1;
  for (size_t i = 0; i < n; i++) g->count += in[i] == ',';
  if (g->count > ALTS_MAX)
    return stk__errf(err, STK_ERANGE, "%s: more than %d alternatives in one brace", s, ALTS_MAX);
  return 0;
}

/* Write alternative k of g into out at *o. */
static int put_group(const struct group *g, unsigned long long k, char *out, size_t cap,
                     size_t *o) {
  if (!g->range) { /* the k-th comma-separated alternative */
    const char *p = g->in, *end = g->in + g->in_len;
    for (; k > 0; k--) p = (const char *)memchr(p, ',', (size_t)(end - p)) + 1;
    const char *c = memchr(p, ',', (size_t)(end - p));
    size_t l = (size_t)((c ? c : end) - p);
    if (*o + l >= cap) return -1;
    memcpy(out + *o, p, l);
    *o += l;
    return 0;
  }
  long long v = g->lo <= g->hi ? g->lo + (long long)k * g->step : g->lo - (long long)k * g->step;
  int w = snprintf(out + *o, cap - *o, "%0*lld", g->width, v);
  if (w < 0 || *o + (size_t)w >= cap) return -1;
  *o += (size_t)w;
  return 0;
}

int stk__brace_expand(const char *s, size_t max, struct stk__names *out, char *err) {
  size_t n = strlen(s);
  if (n > PATTERN_MAX)
    return stk__errf(err, STK_EINVAL, "a pattern of %zu bytes is too long (at most %d)", n,
                     PATTERN_MAX);
  struct group g[GROUPS_MAX];
  char *buf = malloc(PATTERN_MAX * 4);
  int rc = buf ? 0 : stk__errf(err, STK_ENOMEM, "out of memory");
  size_t ng = 0;
  for (size_t i = 0; !rc && i < n; i++) {
    if (s[i] == '}') {
      rc = stk__errf(err, STK_EINVAL, "%s: '}' at byte %zu closes no brace", s, i);
      break;
    }
    if (s[i] != '{') continue;
    size_t j = i + 1;
    while (j < n && s[j] != '}' && s[j] != '{') j++;
    if (j == n || s[j] == '{') {
      rc = stk__errf(err, STK_EINVAL, "%s: the brace at byte %zu is %s", s, i,
                     j == n ? "not closed" : "nested (not supported)");
      break;
    }
    if (ng == GROUPS_MAX) {
      rc = stk__errf(err, STK_EINVAL, "%s: more than %d braces", s, GROUPS_MAX);
      break;
    }
    memset(&g[ng], 0, sizeof g[ng]);
    g[ng].start = i;
    g[ng].end = j;
    rc = parse_group(s, &g[ng], err);
    ng++;
    i = j;
  }
  unsigned long long total = 1;
  for (size_t k = 0; !rc && k < ng; k++) {
    if (g[k].count > max || total > max / g[k].count) {
      rc = stk__errf(err, STK_ERANGE, "%s: names more than %zu shards", s, max);
      break;
    }
    total *= g[k].count;
  }
  unsigned long long idx[GROUPS_MAX] = {0};
  for (unsigned long long t = 0; !rc && t < total; t++) {
    size_t o = 0, prev = 0;
    int bad = 0;
    for (size_t k = 0; k < ng && !bad; k++) {
      size_t lit = g[k].start - prev;
      if (o + lit >= PATTERN_MAX * 4)
        bad = 1;
      else {
        memcpy(buf + o, s + prev, lit);
        o += lit;
        bad = put_group(&g[k], idx[k], buf, PATTERN_MAX * 4, &o);
      }
      prev = g[k].end + 1;
    }
    if (!bad && o + (n - prev) < PATTERN_MAX * 4) {
      memcpy(buf + o, s + prev, n - prev);
      buf[o + n - prev] = 0;
    } else {
      rc = stk__errf(err, STK_EINVAL, "%s: an expanded name is too long", s);
      break;
    }
    if ((rc = stk__names_add(out, buf)) != 0) {
      stk__errf(err, rc, "out of memory");
      break;
    }
    /* The last brace varies fastest, as WebDataset (braceexpand) orders. */
    for (size_t k = ng; k-- > 0;) {
      if (++idx[k] < g[k].count) break;
      idx[k] = 0;
    }
  }
  free(buf);
  return rc;
}

/* ---- shard-list files ---------------------------------------------------- */

int stk__list_parse(const char *text, size_t len, const char *base_dir, size_t max,
                    struct stk__names *out, char *err) {
  size_t line = 0;
  char *buf = malloc(PATTERN_MAX * 2);
  if (!buf) return stk__errf(err, STK_ENOMEM, "out of memory");
  int rc = 0;
  for (size_t i = 0; i < len && !rc;) {
    size_t j = i;
    while (j < len && text[j] != '\n') j++;
    line++;
    size_t a = i, b = j;
    i = j + 1;
    while (a < b && (text[a] == ' ' || text[a] == '\t' || text[a] == '\r')) a++;
    /* A '#' after a blank starts a comment ("a.tar  # the first"); one
     * inside a name or URL (a fragment) is kept. */
    for (size_t k = a + 1; k < b; k++)
      if (text[k] == '#' && (text[k - 1] == ' ' || text[k - 1] == '\t')) {
        b = k;
        break;
      }
    while (b > a && (text[b - 1] == ' ' || text[b - 1] == '\t' || text[b - 1] == '\r')) b--;
    if (a == b || text[a] == '#') continue;
    if (memchr(text + a, 0, b - a)) {
      rc = stk__errf(err, STK_EFORMAT, "shard list line %zu: a NUL byte (not a text file)", line);
      break;
    }
    size_t l = b - a;
    int rel = text[a] != '/' && !memmem(text + a, l, "://", 3) && base_dir && *base_dir &&
              strcmp(base_dir, ".");
    size_t bl = rel ? strlen(base_dir) + 1 : 0;
    if (l + bl >= PATTERN_MAX * 2) {
      rc = stk__errf(err, STK_EINVAL, "shard list line %zu: longer than %d bytes", line,
                     PATTERN_MAX);
      break;
    }
    size_t o = 0;
    if (rel) o = (size_t)snprintf(buf, PATTERN_MAX * 2, "%s/", base_dir);
    memcpy(buf + o, text + a, l);
    buf[o + l] = 0;
    if (out->n >= max) {
      rc = stk__errf(err, STK_ERANGE, "shard list line %zu: more than %zu shards", line, max);
      break;
    }
    if (stk__brace_has(buf))
      rc = stk__brace_expand(buf, max - out->n, out, err);
    else if ((rc = stk__names_add(out, buf)) != 0)
      stk__errf(err, rc, "out of memory");
  }
  free(buf);
  return rc;
}

/* ---- one origin for many names ------------------------------------------- */

/* Length of "scheme://authority" of a URL, 0 for a path. */
static size_t authority_len(const char *s) {
  const char *p = strstr(s, "://");
  if (!p) return 0;
  for (const char *q = s; q < p; q++)
    if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') ||
          *q == '+' || *q == '-' || *q == '.'))
      return 0;
  return (size_t)(p + 3 - s) + strcspn(p + 3, "/");
}

int stk__names_common_root(struct stk__names *l, char **root, char *err) {
  if (!l->n) return stk__errf(err, STK_EINVAL, "no shards named");
  if (l->n == 1 && strchr(l->v[0], '?') && authority_len(l->v[0])) {
    /* One presigned URL: the origin keeps its query for the one object. */
    char *s = l->v[0], *q = strchr(s, '?');
    char *slash = NULL;
    for (char *p = s; p < q; p++)
      if (*p == '/') slash = p;
    if (!slash || (size_t)(slash - s) < authority_len(s))
      return stk__errf(err, STK_EINVAL, "not a URL of an object under a host");
    size_t dl = (size_t)(slash - s), ql = strlen(q);
    char *name = strndup(slash + 1, (size_t)(q - slash - 1));
    *root = malloc(dl + ql + 1);
    if (!name || !*root) {
      free(name);
      free(*root);
      *root = NULL;
      return stk__errf(err, STK_ENOMEM, "out of memory");
    }
    memcpy(*root, s, dl);
    memcpy(*root + dl, q, ql + 1);
    free(l->v[0]);
    l->v[0] = name;
    return 0;
  }
  for (size_t i = 0; i < l->n; i++)
    if (strchr(l->v[i], '?'))
      return stk__errf(err, STK_EINVAL,
                       "%.*s...: a shard URL with a query string (a presigned "
                       "URL) cannot share an origin; name shards by plain URLs",
                       (int)strcspn(l->v[i], "?"), l->v[i]);
  const char *first = l->v[0];
  for (size_t i = 0; i < l->n; i++) {
    if (!l->v[i][0]) return stk__errf(err, STK_EINVAL, "an empty shard name in the list");
    if ((l->v[i][0] == '/') != (first[0] == '/'))
      return stk__errf(err, STK_EINVAL,
                       "%s and %s: absolute and relative shard names mixed; name every shard "
                       "one way",
                       first, l->v[i]);
  }
  size_t auth = authority_len(first);
  for (size_t i = 1; i < l->n; i++) {
    size_t a = authority_len(l->v[i]);
    if (a != auth || (a && strncmp(l->v[i], first, a)))
      return stk__errf(err, STK_EINVAL,
                       "%s and %s: shards on different origins (one dataset "
                       "reads from one server, bucket or directory)",
                       first, l->v[i]);
  }
  /* The common prefix of the names' directories, cut at a '/'. */
  size_t pre = strrchr(first, '/') ? (size_t)(strrchr(first, '/') - first) : 0;
  for (size_t i = 1; i < l->n && pre; i++) {
    const char *s = l->v[i];
    size_t k = 0;
    while (k < pre && s[k] && s[k] == first[k]) k++;
    if (k == pre && s[k] == '/') continue;
    size_t cut = k < pre ? k : pre; /* the last '/' both share, at or before k */
    while (cut > 0 && !(first[cut] == '/' && s[cut] == '/')) cut--;
    pre = cut;
  }
  if (auth && pre < auth)
    return stk__errf(err, STK_EINVAL, "%s: not a URL of an object under a host or bucket", first);
  if (pre == 0 && first[0] != '/') { /* relative local names in the current directory */
    *root = strdup(".");
  } else {
    *root = pre ? strndup(first, pre) : strdup("/");
  }
  if (!*root) return stk__errf(err, STK_ENOMEM, "out of memory");
  size_t skip = pre == 0 && first[0] != '/' ? 0 : pre + 1;
  for (size_t i = 0; i < l->n; i++) memmove(l->v[i], l->v[i] + skip, strlen(l->v[i] + skip) + 1);
  return 0;
}
