/* A small, bounded JSON reader: parses a whole text into a tree of nodes
 * held in one arena, with limits on input size and nesting depth, so that
 * hostile input costs at most memory proportional to its length. Used for
 * MDS index.json; fit for small configuration files. */
#ifndef STOKER_JSON_PARSE_H
#define STOKER_JSON_PARSE_H

#include <stddef.h>
#include <stdint.h>

enum stk__jtype { STK_JNULL = 0, STK_JBOOL, STK_JNUM, STK_JSTR, STK_JARR, STK_JOBJ };

/* One value. Objects and arrays list their children through child/next in
 * document order; a child of an object has its member name in key. All
 * strings are NUL-terminated, unescaped UTF-8 owned by the document. */
struct stk__jnode {
  enum stk__jtype type;
  int is_int;          /* STK_JNUM: the text was an integer that fits in i */
  int b;               /* STK_JBOOL */
  double num;          /* STK_JNUM */
  int64_t i;           /* STK_JNUM with is_int */
  const char *str;     /* STK_JSTR */
  size_t len;          /* STK_JSTR: bytes (may hold NULs); ARR/OBJ: children */
  const char *key;     /* member name inside an object, else NULL */
  struct stk__jnode *child, *next;
};

struct stk__jdoc;

#define STK_JSON_PARSE_MAX_DEPTH 64
#define STK_JSON_PARSE_MAX_BYTES (64u << 20)
#define STK_JSON_PARSE_MAX_NODES (4u << 20)

/* Parse len bytes of text (which need not be NUL-terminated). Returns 0 and
 * *out (free with stk__json_free), or STK_EFORMAT / STK_ERANGE (too big or
 * too deep) / STK_ENOMEM with a sentence naming the byte offset in err
 * (STK_ERRMSG_MAX bytes, may be NULL). */
int stk__json_parse(struct stk__jdoc **out, const char *text, size_t len, char *err);
void stk__json_free(struct stk__jdoc *d);
/* The root value; owned by d. */
const struct stk__jnode *stk__json_root(const struct stk__jdoc *d);

/* Member of an object by name (the last one if repeated), or NULL (also
 * when obj is NULL or not an object). */
const struct stk__jnode *stk__json_get(const struct stk__jnode *obj, const char *key);
/* Element i of an array, or NULL. Linear in i. */
const struct stk__jnode *stk__json_at(const struct stk__jnode *arr, size_t i);
/* Typed getters: the string, or NULL if absent or not a string; the
 * integer into *v (0) or -1 if absent, not an integer or negative when
 * unsigned is asked for. */
const char *stk__json_str(const struct stk__jnode *obj, const char *key);
int stk__json_u64(const struct stk__jnode *obj, const char *key, uint64_t *v);

#endif
