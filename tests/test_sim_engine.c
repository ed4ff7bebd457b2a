/* Tests of the simulators' one event engine (src/sim/engine.h): instants
 * in (time, kind, insertion) order, events pushed into the running
 * instant, rounds that re-arm, dropped events, the done hook, and the
 * exact double clock. */
#include "../src/sim/engine.h"
#include "test.h"

struct log {
  struct stk__sim_engine e;
  char s[512];
  int stop_after, instants;
};

/* Append fmt with a and, where fmt has two numbers, b. */
static void say(struct log *L, const char *fmt, long a, long b) {
  size_t n = strlen(L->s);
  snprintf(L->s + n, sizeof L->s - n, fmt, a, b);
}

static int on_advance(void *ctx, int64_t from, int64_t to) {
  say(ctx, "[%ld>%ld]", (long)from, (long)to);
  return 0;
}

static int on_event(void *ctx, const struct stk__sim_event *e) {
  struct log *L = ctx;
  say(L, "k%ld.%ld ", (long)e->kind, (long)e->arg);
  /* an event of kind 2 brings one at its own instant and one later */
  if (e->kind == 2 && e->arg < 10) {
    CHECK(stk__sim_engine_at(&L->e, e->time, 0, e->arg + 10) == 0);
    CHECK(stk__sim_engine_at(&L->e, e->time + 5, 1, e->arg + 20) == 0);
  }
  return 0;
}

static int on_instant(void *ctx, int64_t now) {
  struct log *L = ctx;
  L->instants++;
  say(L, "|%ld ", (long)now, 0);
  return 0;
}

static int on_round(void *ctx, uint64_t k, int64_t now) {
  say(ctx, "r%ld@%ld ", (long)k, (long)now);
  return 0;
}

static int on_done(void *ctx) {
  struct log *L = ctx;
  return L->stop_after && L->instants >= L->stop_after;
}

static int drop_odd(void *ctx, const struct stk__sim_event *e) {
  (void)ctx;
  return e->arg % 2 == 0;
}

TEST(sim_engine_instants_in_order) {
  struct log L = {.s = ""};
  stk__sim_engine_init(&L.e, 0);
  CHECK(stk__sim_engine_at(&L.e, 3, 1, 1) == 0);
  CHECK(stk__sim_engine_at(&L.e, 3, 0, 2) == 0); /* a lower kind first at one instant */
  CHECK(stk__sim_engine_at(&L.e, 1, 2, 3) == 0);
  CHECK(stk__sim_engine_at(&L.e, 3, 1, 4) == 0); /* ties keep insertion order */
  CHECK(stk__sim_engine_next(&L.e) == 1);
  static const struct stk__sim_hooks hk = {
      .advance = on_advance, .event = on_event, .instant = on_instant};
  CHECK(stk__sim_engine_run(&L.e, &hk, &L) == 0);
  /* the kind-2 event at 1 brings k0.13 into its own instant and k1.23 at 6 */
  CHECK_STR(L.s, "[0>1]k2.3 k0.13 |1 [1>3]k0.2 k1.1 k1.4 |3 [3>6]k1.23 |6 ");
  CHECK(L.e.events == 6 && L.e.instants == 3 && L.e.now == 6);
  CHECK(stk__sim_engine_next(&L.e) == INT64_MAX);
  stk__sim_engine_free(&L.e);
}

TEST(sim_engine_rounds_and_done) {
  struct log L = {.s = "", .stop_after = 4};
  stk__sim_engine_init(&L.e, 0);
  CHECK(stk__sim_engine_rounds(&L.e, 0, 0) == STK_EINVAL);
  CHECK(stk__sim_engine_rounds(&L.e, 10, 10) == 0);
  CHECK(stk__sim_engine_at(&L.e, 20, 5, 0) == 0); /* before the round at 20 */
  static const struct stk__sim_hooks hk = {
      .event = on_event, .instant = on_instant, .round = on_round, .done = on_done};
  CHECK(stk__sim_engine_run(&L.e, &hk, &L) == 0);
  CHECK_STR(L.s, "r0@10 |10 k5.0 r1@20 |20 r2@30 |30 r3@40 |40 ");
  CHECK(L.e.rounds == 4 && stk__sim_engine_next(&L.e) == 50); /* re-armed, not run */
  stk__sim_engine_free(&L.e);
}

TEST(sim_engine_drops_dead_events) {
  struct log L = {.s = ""};
  stk__sim_engine_init(&L.e, 0);
  for (uint32_t i = 0; i < 4; i++) CHECK(stk__sim_engine_at(&L.e, 7 + i % 2, 3, i) == 0);
  static const struct stk__sim_hooks hk = {
      .live = drop_odd, .advance = on_advance, .event = on_event};
  CHECK(stk__sim_engine_run(&L.e, &hk, &L) == 0);
  /* time never moves for an event that is dropped: nothing at 8 */
  CHECK_STR(L.s, "[0>7]k3.0 k3.2 ");
  CHECK(L.e.now == 7 && L.e.instants == 1);
  stk__sim_engine_free(&L.e);
}

static int fail_at_two(void *ctx, const struct stk__sim_event *e) {
  (void)ctx;
  return e->arg == 2 ? STK_ENOMEM : 0;
}

TEST(sim_engine_hook_error_ends_run) {
  struct stk__sim_engine e;
  stk__sim_engine_init(&e, 0);
  for (uint32_t i = 1; i <= 3; i++) CHECK(stk__sim_engine_at(&e, i, 0, i) == 0);
  static const struct stk__sim_hooks hk = {.event = fail_at_two};
  CHECK(stk__sim_engine_run(&e, &hk, NULL) == STK_ENOMEM);
  CHECK(e.now == 2 && e.h.n == 1);
  stk__sim_engine_free(&e);
}

TEST(sim_engine_double_clock_exact) {
  const double t[] = {0, 5e-324, 1e-300, 0.1, 0.30000000000000004, 1, 1 + 0x1p-52, 3600.5, 1e12};
  for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
    CHECK(stk__sim_time_of(stk__sim_key_of(t[i])) == t[i]);
    if (i) CHECK(stk__sim_key_of(t[i - 1]) < stk__sim_key_of(t[i]));
  }
  CHECK(stk__sim_key_of(-0.0) == 0 && stk__sim_key_of(-1) == 0);
}
