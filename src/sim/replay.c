/* Replay mode: the trace's pods arrive at their real creation times, run
 * for their real lifetimes (deletion - creation) and leave; a pod that fits
 * nowhere waits in a FIFO queue, which is retried in order whenever a pod
 * leaves. Reports allocation and fragmentation over time and each pod's
 * queueing delay through callbacks, so memory stays bounded by the trace's
 * compact pod records and the pods running. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "jobs_impl.h"

enum { EV_DEPART = 0, EV_ARRIVE = 1 }; /* at one instant, departures first */

struct rec {
  int64_t create, dur; /* dur < 0: never leaves */
  uint32_t kind, name; /* name: offset into the name pool */
  struct stk__sim_bind b;
  uint64_t order; /* row number, for a stable sort */
};

struct trace {
  struct rec *r;
  size_t n, cap;
  char *names;
  size_t nlen, ncap;
};

static int add_name(struct trace *t, const char *s, uint32_t *off) {
  size_t len = strlen(s) + 1;
  if (t->nlen + len > t->ncap) {
    size_t cap = t->ncap ? t->ncap * 2 : 65536;
    while (cap < t->nlen + len) cap *= 2;
    char *p = realloc(t->names, cap);
    if (!p) return STK_ENOMEM;
    t->names = p;
    t->ncap = cap;
  }
  if (t->nlen > UINT32_MAX - len) return STK_ERANGE;
  memcpy(t->names + t->nlen, s, len);
  *off = (uint32_t)t->nlen;
  t->nlen += len;
  return 0;
}

static int by_creation(const void *a, const void *b) {
  const struct rec *x = a, *y = b;
  if (x->create != y->create) return x->create < y->create ? -1 : 1;
  return x->order < y->order ? -1 : x->order > y->order;
}

static int grow(struct trace *t, char *errmsg) {
  if (t->n < t->cap) return 0;
  size_t cap = t->cap ? t->cap * 2 : 4096;
  struct rec *grown = realloc(t->r, cap * sizeof *grown);
  if (!grown) return stk__errf(errmsg, STK_ENOMEM, "out of memory");
  t->r = grown;
  t->cap = cap;
  return 0;
}

/* A duration trace (Philly's), read as the job engine reads it, as pods
 * of whole GPUs: each job one pod on one node, as the placement model has
 * it. */
static int load_jobs(const struct stk_sim_cluster *c, const char *path, double compress,
                     struct trace *t, struct stk_sim_workload **wout, char *errmsg) {
  struct stk_sim_jobs *J;
  int rc = stk_sim_jobs_load(&J, NULL, path, errmsg);
  if (rc) return rc;
  uint32_t *kinds = malloc(sizeof *kinds * (J->n ? J->n : 1));
  if (!kinds) rc = stk__errf(errmsg, STK_ENOMEM, "out of memory");
  if (!rc) rc = stk__sim_workload_jobs(wout, c, J, path, kinds, errmsg);
  for (size_t i = 0; !rc && i < J->n; i++) {
    const struct stk__jspec *s = &J->job[i];
    if ((rc = grow(t, errmsg))) break;
    struct rec *x = &t->r[t->n];
    memset(x, 0, sizeof *x);
    int64_t ct = llround(s->submit);
    x->create = compress > 1 ? (int64_t)((double)ct / compress) : ct;
    x->dur = llround(s->duration);
    x->kind = kinds[i];
    x->order = t->n;
    if ((rc = add_name(t, s->name, &x->name))) {
      stk__errf(errmsg, rc, "out of memory");
      break;
    }
    t->n++;
  }
  if (!rc) qsort(t->r, t->n, sizeof *t->r, by_creation);
  if (rc && *wout) {
    stk_sim_workload_free(*wout);
    *wout = NULL;
  }
  free(kinds);
  stk_sim_jobs_free(J);
  return rc;
}

/* Read the pod list into compact records and a workload of its kinds. */
static int load(const struct stk_sim_cluster *c, const char *path, double compress, struct trace *t,
                struct stk_sim_workload **wout, char *errmsg) {
  if (stk__sim_is_job_trace(path)) return load_jobs(c, path, compress, t, wout, errmsg);
  struct stk__sim_pods p;
  int rc = stk__sim_pods_open(&p, c, path, errmsg);
  if (rc) return rc;
  struct stk__sim_csv *r = &p.r;
  const struct stk__sim_podcols *pc = &p.pc;
  if (pc->ctime < 0) {
    rc = stk__errf(errmsg, STK_EFORMAT,
                   "%s: replay needs a creation_time column (and usually deletion_time)", r->path);
    goto out;
  }
  while ((rc = stk__sim_csv_next(r, errmsg)) == 0) {
    int64_t ct, dt;
    if ((rc = stk__sim_csv_int(r, pc->ctime, 0, INT64_MAX / 4, 0, 0, &ct, errmsg)) ||
        (rc = stk__sim_csv_int(r, pc->dtime, 0, INT64_MAX / 4, 1, -1, &dt, errmsg)))
      goto out;
    if (dt >= 0 && dt < ct) {
      rc =
          stk__errf(errmsg, STK_EFORMAT, "%s:%llu: deletion_time %lld is before creation_time %lld",
                    r->path, (unsigned long long)r->line, (long long)dt, (long long)ct);
      goto out;
    }
    int k = stk__sim_pods_add_row(&p, errmsg);
    if (k < 0) {
      rc = k;
      goto out;
    }
    if ((rc = grow(t, errmsg))) goto out;
    struct rec *x = &t->r[t->n];
    memset(x, 0, sizeof *x);
    x->create = compress > 1 ? (int64_t)((double)ct / compress) : ct;
    x->dur = dt < 0 ? -1 : dt - ct;
    x->kind = (uint32_t)k;
    x->order = t->n;
    const char *nm = stk__sim_csv_get(r, pc->name);
    char gen[32];
    if (!*nm) {
      snprintf(gen, sizeof gen, "pod-%zu", t->n);
      nm = gen;
    }
    if ((rc = add_name(t, nm, &x->name))) {
      stk__errf(errmsg, rc, "out of memory");
      goto out;
    }
    t->n++;
  }
  if (rc != STK_EOF) goto out;
  rc = 0;
  if (t->n == 0) {
    rc = stk__errf(errmsg, STK_EEMPTY, "%s: no pods after the header", r->path);
    goto out;
  }
  if ((rc = stk__sim_workload_finish(p.w, c))) {
    stk__errf(errmsg, rc, "out of memory");
    goto out;
  }
  qsort(t->r, t->n, sizeof *t->r, by_creation);
out:
  if (!rc) {
    *wout = p.w;
    p.w = NULL; /* the caller's now */
  }
  stk__sim_pods_close(&p);
  return rc;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

struct run {
  const struct stk_sim_cluster *c;
  const struct stk_sim_replay_opts *o;
  struct stk_sim_replay_result *res;
  struct trace t;
  struct stk__sim_state st;
  struct stk__sim_engine e;
  struct stk_sim_workload *w;
  uint32_t *queue;
  size_t nq;
  int64_t *waits; /* delays > 0 of placed pods */
  size_t nwaits, capwaits;
  double sum_delay;
  uint64_t running;
  double alloc_int, frag_int; /* time integrals of allocation and fragmentation */
};

static void report_pod(struct run *R, const struct rec *x, int64_t start, const char *outcome) {
  if (!R->o->on_pod) return;
  struct stk_sim_pod_record p = {R->t.names + x->name,
                                 start >= 0 ? R->c->name[R->st.order[x->b.node]] : "",
                                 outcome,
                                 x->create,
                                 start,
                                 start >= 0 ? start - x->create : -1};
  R->o->on_pod(R->o->ctx, &p);
}

static int start_pod(struct run *R, uint32_t i, int64_t now) {
  struct rec *x = &R->t.r[i];
  stk__sim_bind(&R->st, x->kind, &x->b);
  R->running++;
  R->res->placed++;
  int64_t delay = now - x->create;
  if (delay > 0) {
    R->res->placed_after_wait++;
    if (R->nwaits == R->capwaits) {
      size_t cap = R->capwaits ? R->capwaits * 2 : 1024;
      int64_t *p = realloc(R->waits, cap * sizeof *p);
      if (!p) return STK_ENOMEM;
      R->waits = p;
      R->capwaits = cap;
    }
    R->waits[R->nwaits++] = delay;
    R->sum_delay += (double)delay;
  }
  report_pod(R, x, now, "placed");
  if (x->dur >= 0) return stk__sim_engine_at(&R->e, now + x->dur, EV_DEPART, i);
  return 0;
}

static void sample(struct run *R, int64_t now) {
  struct stk__sim_state *st = &R->st;
  struct stk_sim_sample s;
  s.time = now;
  s.alloc = st->total_milli ? 100.0 * (double)st->used_milli / (double)st->total_milli : 0;
  double frag = st->frag_sum > 0 ? st->frag_sum : 0;
  s.frag = frag / 1000.0;
  s.frag_ratio = st->idle_milli > 0 ? 100.0 * frag / (double)st->idle_milli : 0;
  s.running = R->running;
  s.queued = R->nq;
  if (s.alloc > R->res->alloc_peak) R->res->alloc_peak = s.alloc;
  if (R->o->on_sample) R->o->on_sample(R->o->ctx, &s);
}

/* The engine's hooks: time moving samples the instant left and adds it
 * to the integrals; an arrival starts its pod or queues it and brings the
 * next arrival in; a departure retries the queue. */
static int replay_advance(void *ctx, int64_t from, int64_t to) {
  struct run *R = ctx;
  if (to == from) return 0;
  sample(R, from);
  double dt = (double)(to - from);
  const struct stk__sim_state *st = &R->st;
  R->alloc_int += dt * (double)st->used_milli / (double)(st->total_milli ? st->total_milli : 1);
  R->frag_int +=
      dt *
      (st->idle_milli > 0 ? (st->frag_sum > 0 ? st->frag_sum : 0) / (double)st->idle_milli : 0);
  return 0;
}

static int replay_event(void *ctx, const struct stk__sim_event *ev) {
  struct run *R = ctx;
  struct stk_sim_replay_result *res = R->res;
  const struct stk_sim_workload *w = R->w;
  int64_t now = ev->time;
  uint32_t i = ev->arg;
  struct rec *x = &R->t.r[i];
  int rc = 0;
  if (ev->kind == EV_ARRIVE) {
    if (i + 1 < R->t.n && (rc = stk__sim_engine_at(&R->e, R->t.r[i + 1].create, EV_ARRIVE, i + 1)))
      return rc;
    if (w->kind[x->kind].never_fit) {
      res->never_fit++;
      report_pod(R, x, -1, "never_fits");
    } else if (stk__sim_schedule(&R->st, x->kind, &x->b) == 0) {
      rc = start_pod(R, i, now);
    } else {
      R->queue[R->nq++] = i;
      if (R->nq > res->max_queue) res->max_queue = R->nq;
    }
    return rc;
  }
  /* A departure frees room on one node only, and every queued pod fit
   * nowhere before it, so only pods that fit that node can start now. */
  stk__sim_unbind(&R->st, x->kind, &x->b);
  R->running--;
  const struct stk__sim_hot *freed = &R->st.hot[x->b.node];
  size_t keep = 0;
  for (size_t q = 0; q < R->nq; q++) {
    uint32_t j = R->queue[q];
    const struct stk__sim_kind *k = &w->kind[R->t.r[j].kind];
    if (!rc && stk__sim_fits(freed, &w->spec[k->spec], k->mem) &&
        stk__sim_schedule(&R->st, R->t.r[j].kind, &R->t.r[j].b) == 0) {
      rc = start_pod(R, j, now);
      continue;
    }
    R->queue[keep++] = j;
  }
  R->nq = keep;
  return rc;
}

int stk_sim_replay(const struct stk_sim_cluster *c, const char *pods_path,
                   const struct stk_sim_replay_opts *opts, struct stk_sim_replay_result *res,
                   char *errmsg) {
  memset(res, 0, sizeof *res);
  struct stk_sim_replay_opts own; /* NULL: every option its default */
  int trc = stk__opts_take(&own, sizeof own, opts, "stk_sim_replay_opts", errmsg);
  if (trc) return trc;
  const struct stk_sim_replay_opts *o = &own;
  const char *pname = o->policy ? o->policy : "FGD";
  const struct stk_sim_policy_ops *pol = stk__sim_policy_get(pname);
  if (!pol) return stk__errf(errmsg, STK_EINVAL, "no policy '%s'", pname);
  struct run R;
  memset(&R, 0, sizeof R);
  R.c = c, R.o = o, R.res = res;
  stk__sim_engine_init(&R.e, 0);
  struct stk_sim_workload *w = NULL;
  if (o->compress < 0 || o->compress > 1e9)
    return stk__errf(errmsg, STK_EINVAL, "compress %g is out of range", o->compress);
  int rc = load(c, pods_path, o->compress, &R.t, &w, errmsg);
  if (rc) goto out_trace;
  snprintf(res->policy, sizeof res->policy, "%s", pol->name);
  res->seed = o->seed;
  res->pods = R.t.n;
  if ((rc = stk__sim_state_init(&R.st, c, w, pol, o->seed))) {
    stk__errf(errmsg, rc, "out of memory");
    goto out_w;
  }
  R.queue = malloc(R.t.n * sizeof *R.queue);
  if (!R.queue) {
    rc = stk__errf(errmsg, STK_ENOMEM, "out of memory");
    goto out_state;
  }
  uint64_t t0 = stk_now_ns(), c0 = stk__sim_thread_ns();
  R.w = w;
  res->t_first = R.t.r[0].create;
  R.e.now = res->t_first;
  rc = stk__sim_engine_at(&R.e, R.t.r[0].create, EV_ARRIVE, 0);
  static const struct stk__sim_hooks hooks = {.advance = replay_advance, .event = replay_event};
  if (!rc) rc = stk__sim_engine_run(&R.e, &hooks, &R);
  int64_t now = R.e.now;
  res->events = R.e.events;
  double alloc_int = R.alloc_int, frag_int = R.frag_int;
  if (rc) {
    stk__errf(errmsg, rc, "out of memory");
    goto out_state;
  }
  sample(&R, now);
  res->t_last = now;
  res->wall_s = (double)(stk_now_ns() - t0) / 1e9;
  res->cpu_s = (double)(stk__sim_thread_ns() - c0) / 1e9;
  for (size_t q = 0; q < R.nq; q++) report_pod(&R, &R.t.r[R.queue[q]], -1, "queued");
  res->still_queued = R.nq;
  double span = (double)(res->t_last - res->t_first);
  res->alloc_mean = span > 0 ? 100.0 * alloc_int / span : res->alloc_peak;
  res->frag_ratio_mean = span > 0 ? 100.0 * frag_int / span : 0;
  if (res->placed) {
    if (R.nwaits) qsort(R.waits, R.nwaits, sizeof *R.waits, cmp_i64); /* NULL when none */
    uint64_t zeros = res->placed - R.nwaits;
    double qs[3] = {0.50, 0.90, 0.99},
           *out[3] = {&res->delay_p50, &res->delay_p90, &res->delay_p99};
    for (int k = 0; k < 3; k++) {
      uint64_t rank = (uint64_t)ceil(qs[k] * (double)res->placed); /* nearest rank */
      if (rank < 1) rank = 1;
      *out[k] = rank <= zeros ? 0 : (double)R.waits[rank - zeros - 1];
    }
    res->delay_mean = R.sum_delay / (double)res->placed;
    res->delay_max = R.nwaits ? (double)R.waits[R.nwaits - 1] : 0;
  }
out_state:
  stk__sim_state_free(&R.st);
out_w:
  stk_sim_workload_free(w);
out_trace:
  stk__sim_engine_free(&R.e);
  free(R.queue);
  free(R.waits);
  free(R.t.r);
  free(R.t.names);
  return rc;
}
