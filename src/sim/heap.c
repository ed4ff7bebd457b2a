/* The simulator's event queue: a binary min-heap keyed by (time, kind,
 * insertion sequence), so that simultaneous events are processed in a fixed
 * order and every run is deterministic. */
#include <stdlib.h>

#include "sim_impl.h"

static int before(const struct stk__sim_event *a, const struct stk__sim_event *b) {
  if (a->time != b->time) return a->time < b->time;
  if (a->kind != b->kind) return a->kind < b->kind;
  return a->seq < b->seq;
}

void stk__sim_heap_init(struct stk__sim_heap *h) {
  h->ev = NULL;
  h->n = h->cap = 0;
  h->seq = 0;
}

void stk__sim_heap_free(struct stk__sim_heap *h) {
  free(h->ev);
  stk__sim_heap_init(h);
}

int stk__sim_heap_push(struct stk__sim_heap *h, int64_t time, uint32_t kind, uint32_t arg) {
  if (h->n == h->cap) {
    size_t cap = h->cap ? h->cap * 2 : 256;
    struct stk__sim_event *ev = realloc(h->ev, cap * sizeof *ev);
    if (!ev) return STK_ENOMEM;
    h->ev = ev;
    h->cap = cap;
  }
  struct stk__sim_event e = {time, kind, arg, h->seq++};
  size_t i = h->n++;
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (!before(&e, &h->ev[p])) break;
    h->ev[i] = h->ev[p];
    i = p;
  }
  h->ev[i] = e;
  return 0;
}

int stk__sim_heap_pop(struct stk__sim_heap *h, struct stk__sim_event *out) {
  if (h->n == 0) return STK_EOF;
  *out = h->ev[0];
  struct stk__sim_event last = h->ev[--h->n];
  size_t i = 0, n = h->n;
  for (;;) {
    size_t l = 2 * i + 1, m = i;
    const struct stk__sim_event *best = &last;
    if (l < n && before(&h->ev[l], best)) m = l, best = &h->ev[l];
    if (l + 1 < n && before(&h->ev[l + 1], best)) m = l + 1;
    if (m == i) break;
    h->ev[i] = h->ev[m];
    i = m;
  }
  if (n) h->ev[i] = last;
  return 0;
}
