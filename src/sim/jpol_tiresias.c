/* Tiresias (Gu et al., NSDI'19) as the Pollux artifact's baseline runs it:
 * discretized two-level least-attained-service. A job starts in queue 0
 * and moves to queue 1 once its executed time times its GPU count reaches
 * 16 GPU-hours; within a queue jobs keep arrival (or demotion) order. Each
 * round the queues are walked in order and every job that still fits in
 * the GPUs left runs (later, smaller jobs may pass a large one); a running
 * job that no longer fits is preempted. New jobs take the nodes with the
 * most free GPUs. Starvation promotion is off, as in the artifact. */
#include <stdlib.h>
#include <string.h>

#include "jobs_impl.h"

#define QUEUE_THRESHOLD (3600.0 * 16)

struct tstate {
  int status; /* 0 pending, 1 running */
  int queue;  /* 0 or 1 */
  int known;
  long long last_check, executed;
  size_t order; /* position key within its queue */
};

struct trun {
  size_t seq;
  size_t *q0, *q1;
  size_t n0, n1;
};

static int t_init(struct stk__jrun *rn) {
  struct trun *t = calloc(1, sizeof *t);
  if (!t) return STK_ENOMEM;
  t->q0 = malloc(sizeof(size_t) * (rn->n + 1));
  t->q1 = malloc(sizeof(size_t) * (rn->n + 1));
  rn->pol = t;
  if (!t->q0 || !t->q1) return STK_ENOMEM;
  for (size_t i = 0; i < rn->n; i++) {
    rn->js[i].pol = calloc(1, sizeof(struct tstate));
    if (!rn->js[i].pol) return STK_ENOMEM;
  }
  return 0;
}

static void t_fini(struct stk__jrun *rn) {
  struct trun *t = rn->pol;
  if (!t) return;
  free(t->q0);
  free(t->q1);
  free(t);
  rn->pol = NULL;
}

static void drop_done(struct stk__jrun *rn, size_t *q, size_t *n) {
  size_t m = 0;
  for (size_t k = 0; k < *n; k++)
    if (!rn->js[q[k]].done) q[m++] = q[k];
  *n = m;
}

static void remove_at(size_t *q, size_t *n, size_t i) {
  for (size_t k = 0; k < *n; k++)
    if (q[k] == i) {
      memmove(&q[k], &q[k + 1], sizeof(size_t) * (*n - k - 1));
      (*n)--;
      return;
    }
}

static int t_schedule(struct stk__jrun *rn, const size_t *active, size_t na) {
  struct trun *t = rn->pol;
  long long now = (long long)rn->now;
  drop_done(rn, t->q0, &t->n0);
  drop_done(rn, t->q1, &t->n1);
  for (size_t k = 0; k < na; k++) {
    struct tstate *s = rn->js[active[k]].pol;
    if (!s->known) {
      s->known = 1;
      s->status = 0;
      t->q0[t->n0++] = active[k];
    }
  }
  for (size_t k = 0; k < na; k++) {
    size_t i = active[k];
    struct stk__jstate *j = &rn->js[i];
    struct tstate *s = j->pol;
    if (s->status == 1) {
      s->executed += now - s->last_check;
      s->last_check = now;
      if (s->queue == 0 && (double)s->executed * j->spec->replicas >= QUEUE_THRESHOLD) {
        remove_at(t->q0, &t->n0, i);
        t->q1[t->n1++] = i;
        s->queue = 1;
      }
    } else {
      s->last_check = now;
    }
  }
  int left = rn->usable * rn->res->unit; /* capacity units: GPUs, or MIG slices */
  for (int pass = 0; pass < 2; pass++) {
    size_t *q = pass ? t->q1 : t->q0, nq = pass ? t->n1 : t->n0;
    for (size_t k = 0; k < nq; k++) {
      struct stk__jstate *j = &rn->js[q[k]];
      struct tstate *s = j->pol;
      int units = stk__sim_res_units(rn->res, j->spec->replicas);
      if (units <= left) {
        s->status = 1;
        left -= units;
      } else {
        s->status = 0;
        rn->new_n[q[k]] = 0;
      }
    }
  }
  /* the jobs that keep running hold their GPUs; the rest start where the
   * run's resource model places them, or wait */
  int rc = rn->res->ops->hold(rn->res, rn->new_alloc, rn->new_n, active, na);
  if (rc) return rc;
  for (int pass = 0; pass < 2; pass++) {
    size_t *q = pass ? t->q1 : t->q0, nq = pass ? t->n1 : t->n0;
    for (size_t k = 0; k < nq; k++) {
      struct stk__jstate *j = &rn->js[q[k]];
      struct tstate *s = j->pol;
      if (s->status == 1 && rn->new_n[q[k]] == 0) {
        if (rn->res->ops->place(rn->res, q[k], j->spec->replicas, rn->new_alloc[q[k]]))
          s->status = 0; /* no room on the nodes: it waits */
        else
          rn->new_n[q[k]] = j->spec->replicas;
      }
    }
  }
  return 0;
}

const struct stk__jpolicy stk__jpol_tiresias = {
    .name = "tiresias",
    .summary = "two-level discretized least-attained-service (16 GPU-hours), as the Pollux "
               "artifact's baseline",
    .queue = 1,
    .init = t_init,
    .fini = t_fini,
    .schedule = t_schedule,
};
