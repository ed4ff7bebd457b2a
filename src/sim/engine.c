/* The simulators' event engine (engine.h): instants popped from the event
 * heap, rounds that re-arm themselves, and the clients' hooks. */
#include "engine.h"

void stk__sim_engine_init(struct stk__sim_engine *e, int64_t start) {
  memset(e, 0, sizeof *e);
  stk__sim_heap_init(&e->h);
  e->now = start;
}

void stk__sim_engine_free(struct stk__sim_engine *e) { stk__sim_heap_free(&e->h); }

int stk__sim_engine_at(struct stk__sim_engine *e, int64_t t, uint32_t kind, uint32_t arg) {
  return stk__sim_heap_push(&e->h, t, kind, arg);
}

int stk__sim_engine_rounds(struct stk__sim_engine *e, int64_t first, int64_t period) {
  if (period <= 0) return STK_EINVAL;
  e->period = period;
  return stk__sim_heap_push(&e->h, first, STK__SIM_EV_ROUND, 0);
}

int64_t stk__sim_engine_next(const struct stk__sim_engine *e) {
  return e->h.n ? e->h.ev[0].time : INT64_MAX;
}

/* One event of the instant: a round re-arms itself first. */
static int run_one(struct stk__sim_engine *e, const struct stk__sim_hooks *hk, void *ctx,
                   const struct stk__sim_event *ev) {
  e->events++;
  if (ev->kind != STK__SIM_EV_ROUND) return hk->event ? hk->event(ctx, ev) : 0;
  uint64_t k = e->rounds++;
  int rc = stk__sim_heap_push(&e->h, ev->time + e->period, STK__SIM_EV_ROUND, 0);
  if (!rc && hk->round) rc = hk->round(ctx, k, ev->time);
  return rc;
}

int stk__sim_engine_run(struct stk__sim_engine *e, const struct stk__sim_hooks *hk, void *ctx) {
  struct stk__sim_event ev;
  int rc = 0;
  while (!rc && stk__sim_heap_pop(&e->h, &ev) == 0) {
    if (hk->live && !hk->live(ctx, &ev)) continue;
    int64_t from = e->now;
    e->now = ev.time;
    e->instants++;
    if (hk->advance && (rc = hk->advance(ctx, from, ev.time))) break;
    rc = run_one(e, hk, ctx, &ev);
    while (!rc && e->h.n && e->h.ev[0].time == ev.time) {
      struct stk__sim_event more;
      stk__sim_heap_pop(&e->h, &more);
      if (hk->live && !hk->live(ctx, &more)) continue;
      rc = run_one(e, hk, ctx, &more);
    }
    if (!rc && hk->instant) rc = hk->instant(ctx, ev.time);
    if (!rc && hk->done && hk->done(ctx)) break;
  }
  return rc;
}
