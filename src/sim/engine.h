/* The simulators' one event engine (docs/internals/sim_engine.md): an event
 * queue, a clock, instants and rounds, with the simulators as its clients.
 *
 * The clock is an int64 key whose unit the client chooses: seconds (the
 * placement replay), milliseconds (online MIG), rounds (the job engine),
 * or a double's bit pattern (the inference service; stk__sim_key_of()
 * orders non-negative doubles exactly, so no time is rounded).
 *
 * One step of a run is an instant: every event at the earliest time, in
 * (time, kind, insertion) order, including events pushed at that same time
 * while the instant runs. A client hooks in where it needs:
 *   live(e)     drop an event that no longer means anything (a replica's
 *               start that was called off), before time moves for it;
 *   advance     time moves from `from` to `to` (to >= from; called at the
 *               start of every instant, with to == from when an instant
 *               follows one at the same time): integrals and samples;
 *   event(e)    one event of the instant;
 *   instant     after the instant's last event: start what can start;
 *   done        asked after every instant: stop now though events remain.
 * Rounds are events of kind STK__SIM_EV_ROUND that re-arm themselves
 * `period` later before the round hook runs, and sort after every other
 * kind at their instant.
 * Every hook may be NULL; a hook's nonzero return ends the run with that
 * code. */
#ifndef STK_SIM_ENGINE_H
#define STK_SIM_ENGINE_H

#include <stdint.h>
#include <string.h>

#include "sim_impl.h"

#define STK__SIM_EV_ROUND UINT32_MAX

struct stk__sim_hooks {
  int (*live)(void *ctx, const struct stk__sim_event *e);
  int (*advance)(void *ctx, int64_t from, int64_t to);
  int (*event)(void *ctx, const struct stk__sim_event *e);
  int (*instant)(void *ctx, int64_t now);
  int (*round)(void *ctx, uint64_t k, int64_t now);
  int (*done)(void *ctx);
};

struct stk__sim_engine {
  struct stk__sim_heap h;
  int64_t now;       /* the clock: the current (or last) instant */
  int64_t period;    /* rounds: 0 = none */
  uint64_t events;   /* events run, rounds included */
  uint64_t instants; /* instants run */
  uint64_t rounds;   /* rounds run */
};

/* A clock starting at `start` (advance's first `from`). */
void stk__sim_engine_init(struct stk__sim_engine *e, int64_t start);
void stk__sim_engine_free(struct stk__sim_engine *e);
/* An event at time t (t may equal now: it runs in this instant). */
int stk__sim_engine_at(struct stk__sim_engine *e, int64_t t, uint32_t kind, uint32_t arg);
/* Rounds every `period` (> 0), the first at `first`. */
int stk__sim_engine_rounds(struct stk__sim_engine *e, int64_t first, int64_t period);
/* The earliest pending event's time, or INT64_MAX when none. */
int64_t stk__sim_engine_next(const struct stk__sim_engine *e);
/* Run instants until no event is left, done() says so, or a hook fails. */
int stk__sim_engine_run(struct stk__sim_engine *e, const struct stk__sim_hooks *hk, void *ctx);

/* A non-negative double's clock key and back: IEEE 754 orders such
 * doubles as their bit patterns read as integers. */
static inline int64_t stk__sim_key_of(double t) {
  int64_t k;
  t = t > 0 ? t : 0.0; /* -0.0 and negatives to +0 */
  memcpy(&k, &t, sizeof k);
  return k;
}
static inline double stk__sim_time_of(int64_t k) {
  double t;
  memcpy(&t, &k, sizeof t);
  return t;
}

#endif
