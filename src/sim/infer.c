/* An LLM inference service of replicas, simulated request by request and
 * iteration by iteration (stoker/infer.h). A replica runs one iteration
 * at a time: when requests wait and it has room (max_batch), a prefill of
 * those it admits, in arrival order while their prompts total at most
 * prefill_tokens, and at least one (their first tokens; decoding pauses
 * meanwhile, as in vLLM's default), else one decode step of every request it holds (one
 * token each). Requests wait in one FIFO queue that every serving replica
 * draws from. With lending, a controller at every interval sizes the
 * service for the last interval's arrival rate plus the queue drained
 * within the next interval, x (1 + headroom), over what one replica
 * sustains within the TBT target; replicas beyond that stop taking requests, finish what
 * they hold and lend their GPUs to training from the next interval; a
 * replica taken back serves start_s later (its weights loaded again).
 * The run is a client of the event engine (engine.h) on a clock of exact
 * doubles: the events only wake the service at the next arrival, end of
 * an iteration, replica start or controller tick, and each instant then
 * runs everything due at it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "infer_impl.h"

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double pct(const double *sorted, size_t n, double q) {
  if (!n) return 0;
  size_t k = (size_t)ceil(q * (double)n);
  return sorted[k ? k - 1 : 0];
}

/* Requests a replica sustains within the TBT target: at the largest batch
 * whose decode step meets it, one mean prefill alone plus the mean tokens
 * at that step shared by the batch; prefills and decode steps pf and dec
 * times as long as the perf model's (1 on whole GPUs). */
static double replica_cap(const struct stk_infer_perf *p, const struct stk_infer_trace *t,
                          unsigned max_batch, double tbt_slo, double pf, double dec) {
  unsigned b = 1;
  for (unsigned k = 1; k <= max_batch; k++)
    if (stk_infer_tbt_s(p, t->mean_prompt, k) * dec <= tbt_slo) b = k;
  double per = stk_infer_prefill_s(p, t->mean_prompt, 1) * pf +
               t->mean_gen * (stk_infer_tbt_s(p, t->mean_prompt, b) * dec) / b;
  return 1 / per;
}

/* Start the next iteration of replica r at now, if it has one. */
static void iterate(const struct stk_infer_perf *p, const struct stk_infer_opts *o,
                    struct rep *r, struct rq *q, size_t *qhead, size_t narrived, double now) {
  if (r->busy || (r->state != R_SERVE && r->state != R_DRAIN)) return;
  unsigned room = o->max_batch - (unsigned)r->nact;
  double dur = 0, sum = 0;
  if (r->state == R_SERVE && *qhead < narrived && room > 0) {
    int k = 0;
    while (*qhead < narrived && room-- > 0 &&
           (k == 0 || sum + q[*qhead].prompt <= o->prefill_tokens)) {
      size_t i = (*qhead)++;
      r->act[r->nact + k++] = i;
      sum += q[i].prompt;
    }
    r->npre = k;
    r->prefill = 1;
    dur = stk_infer_prefill_s(p, sum / k, (unsigned)k) * r->pf;
  } else if (r->nact > 0) {
    for (int k = 0; k < r->nact; k++) sum += q[r->act[k]].prompt;
    r->prefill = 0;
    dur = stk_infer_tbt_s(p, sum / r->nact, (unsigned)r->nact) * r->dec;
  } else {
    if (r->state == R_DRAIN && !o->mig) r->state = R_OFF; /* on MIG the instant relayouts it */
    return;
  }
  unsigned in_batch = (unsigned)(r->nact + (r->prefill ? r->npre : 0));
  r->busy = 1;
  r->busy_until = now + dur;
  r->busy_s += dur;
  r->energy_j +=
      dur * o->tp * (o->tdp_w * stk_infer_power_frac(p, in_batch) - o->idle_w) * r->share;
}

static void finish_iteration(struct rep *r, struct rq *q, double now) {
  r->busy = 0;
  if (r->prefill) {
    for (int k = 0; k < r->npre; k++) {
      struct rq *x = &q[r->act[r->nact + k]];
      x->first = now;
      x->left = x->gen - 1;
    }
    r->nact += r->npre;
    r->npre = 0;
    r->prefill = 0;
  } else {
    for (int k = 0; k < r->nact; k++) q[r->act[k]].left--;
  }
  int m = 0;
  for (int k = 0; k < r->nact; k++) {
    struct rq *x = &q[r->act[k]];
    if (x->left == 0)
      x->finish = now;
    else
      r->act[m++] = r->act[k];
  }
  r->nact = m;
}

/* The controller at a tick: replicas wanted, then replicas started,
 * drained or taken back. */
static void control(const struct stk_infer_opts *o, struct rep *rp, double rate, double cap,
                    size_t waiting, double now) {
  unsigned R = o->replicas, have = 0;
  for (unsigned i = 0; i < R; i++)
    if (rp[i].state == R_SERVE || rp[i].state == R_START) have++;
  /* the arrivals, and the queue drained within the next interval */
  double want = ceil((rate + (double)waiting / o->interval) * (1 + o->headroom) / cap);
  if (want < o->min_replicas) want = o->min_replicas;
  if (want > R) want = R;
  unsigned need = (unsigned)want;
  for (unsigned i = 0; i < R && have < need; i++)
    if (rp[i].state == R_DRAIN) { /* still holds its GPUs: serves again at once */
      rp[i].state = R_SERVE;
      have++;
    }
  for (unsigned i = 0; i < R && have < need; i++)
    if (rp[i].state == R_OFF) {
      rp[i].state = R_START;
      rp[i].ready_at = now + o->start_s;
      have++;
    }
  while (have > need) { /* a replica still starting first, else the one holding fewest */
    int best = -1;
    for (unsigned i = 0; i < R; i++) {
      if (rp[i].state != R_SERVE && rp[i].state != R_START) continue;
      if (best < 0 || (rp[i].state == R_START && rp[best].state != R_START) ||
          (rp[i].state == rp[best].state && rp[i].nact < rp[best].nact))
        best = (int)i;
    }
    if (best < 0) break;
    struct rep *r = &rp[best];
    r->state = r->state == R_START || (!r->busy && r->nact == 0) ? R_OFF : R_DRAIN;
    have--;
  }
}

/* ---- the run as the engine's client ------------------------------------ */

enum { EV_DONE, EV_READY, EV_ARRIVE, EV_TICK }; /* wake-ups; arg: replica, request, tick */

struct irun {
  struct stk__sim_engine e;
  const struct stk_infer_perf *p;
  const struct stk_infer_opts *o;
  struct stk_infer_result *res;
  struct rq *q;
  struct rep *rp;
  size_t n, nticks, narrived, qhead, tick, window;
  double idle_j;
  int stop;
  struct stk__infer_mig mig; /* with o->mig */
  double *lent_mig;          /* per interval: GPUs lent as instances */
  char *errmsg;
};

/* A wake-up for every replica starting whose start has none yet. */
static int arm(struct irun *I) {
  for (unsigned i = 0; i < I->o->replicas; i++) {
    struct rep *r = &I->rp[i];
    if (r->state != R_START || r->armed == r->ready_at) continue;
    r->armed = r->ready_at;
    int rc = stk__sim_engine_at(&I->e, stk__sim_key_of(r->ready_at), EV_READY, i);
    if (rc) return rc;
  }
  return 0;
}

/* A replica's start that was called off (or moved) wakes nothing. */
static int infer_live(void *ctx, const struct stk__sim_event *e) {
  const struct irun *I = ctx;
  double at = stk__sim_time_of(e->time);
  if (e->kind == EV_READY) return I->rp[e->arg].state == R_START && I->rp[e->arg].ready_at == at;
  if (e->kind == EV_DONE) return I->rp[e->arg].busy && I->rp[e->arg].busy_until == at;
  return 1;
}

/* Serving replicas' time and idle power up to the instant. */
static int infer_advance(void *ctx, int64_t from, int64_t to) {
  struct irun *I = ctx;
  double now = stk__sim_time_of(from), next = stk__sim_time_of(to);
  for (unsigned i = 0; i < I->o->replicas; i++)
    if (I->rp[i].state != R_OFF) {
      I->rp[i].serve_s += next - now;
      I->idle_j += (next - now) * I->o->tp * I->o->idle_w * I->rp[i].share;
    }
  return 0;
}

static int infer_event(void *ctx, const struct stk__sim_event *e) {
  (void)ctx, (void)e; /* a wake-up: the instant does the work */
  return 0;
}

/* Everything due at now: iterations ended, replicas ready, arrivals, the
 * controller's tick; then every replica's next iteration, each wake-up
 * that brings pushed. */
static int infer_instant(void *ctx, int64_t key) {
  struct irun *I = ctx;
  const struct stk_infer_opts *o = I->o;
  struct rep *rp = I->rp;
  double now = stk__sim_time_of(key);
  double tick_at = (double)(I->tick + 1) * o->interval;
  int more = I->tick < I->nticks, rc = 0;
  for (unsigned i = 0; i < o->replicas; i++) {
    if (rp[i].busy && rp[i].busy_until <= now) finish_iteration(&rp[i], I->q, now);
    if (rp[i].state == R_START && rp[i].ready_at <= now) rp[i].state = R_SERVE;
  }
  size_t seen = I->narrived;
  while (I->narrived < I->n && I->q[I->narrived].arrive <= now) I->narrived++, I->window++;
  if (I->narrived != seen && I->narrived < I->n)
    rc = stk__sim_engine_at(&I->e, stk__sim_key_of(I->q[I->narrived].arrive), EV_ARRIVE,
                            (uint32_t)I->narrived);
  if (!rc && more && tick_at <= now) {
    I->tick++;
    double rate = (double)I->window / o->interval;
    if (o->lend && !o->mig)
      control(o, rp, rate, I->res->rate_cap, I->narrived - I->qhead, now);
    if (o->lend && o->mig) /* the same demand as control()'s, in requests/s */
      rc = stk__infer_mig_control(
          &I->mig, o, rp, (rate + (double)(I->narrived - I->qhead) / o->interval) * (1 + o->headroom),
          I->res->rate_cap, I->res->rate_cap_mig, now, &I->res->reconfigs, I->errmsg);
    if (!rc) rc = arm(I);
    I->window = 0;
    unsigned off = 0, small = 0;
    for (unsigned i = 0; i < o->replicas; i++) {
      off += rp[i].state == R_OFF;
      small += (rp[i].state == R_SERVE || rp[i].state == R_START) && rp[i].level == LV_SMALL;
    }
    if (I->tick < I->nticks + 1) I->res->lent[I->tick] = off * o->tp;
    if (o->mig && I->tick < I->nticks + 1)
      I->lent_mig[I->tick] = small * o->tp * I->mig.lent_compute / (double)STK_MIG_COMPUTE_SLICES;
    if (!rc && I->tick < I->nticks)
      rc = stk__sim_engine_at(&I->e, stk__sim_key_of((double)(I->tick + 1) * o->interval),
                              EV_TICK, (uint32_t)I->tick);
  }
  for (unsigned i = 0; i < o->replicas && !rc; i++) {
    int was = rp[i].busy;
    iterate(I->p, o, &rp[i], I->q, &I->qhead, I->narrived, now);
    if (!was && rp[i].busy)
      rc = stk__sim_engine_at(&I->e, stk__sim_key_of(rp[i].busy_until), EV_DONE, i);
    if (!rc && o->mig && rp[i].state == R_DRAIN && !rp[i].busy && !rp[i].nact &&
        !(rc = stk__infer_mig_drained(&I->mig, o, &rp[i], now, &I->res->reconfigs, I->errmsg)))
      rc = arm(I);
  }
  if (I->narrived == I->n && I->qhead == I->n && !more) {
    int busy = 0;
    for (unsigned i = 0; i < o->replicas; i++) busy |= rp[i].busy || rp[i].nact;
    if (!busy) I->stop = 1;
  }
  return rc;
}

static int infer_done(void *ctx) { return ((const struct irun *)ctx)->stop; }

int stk_infer_run(const struct stk_infer_perf *p, const struct stk_infer_trace *t,
                  const struct stk_infer_opts *oin, struct stk_infer_result *res, char *errmsg) {
  memset(res, 0, sizeof *res);
  struct stk_infer_opts o;
  int trc = stk__opts_take(&o, sizeof o, oin, "stk_infer_opts", errmsg);
  if (trc) return trc;
  if (o.rate_scale == 0) o.rate_scale = 1;
  if (o.replicas == 0) o.replicas = 1;
  if (o.tp == 0) o.tp = 1;
  if (o.max_batch == 0) o.max_batch = 16;
  if (o.prefill_tokens == 0) o.prefill_tokens = 4096;
  if (o.ttft_slo_s == 0) o.ttft_slo_s = 5;
  if (o.tbt_slo_s == 0) o.tbt_slo_s = 0.2;
  if (o.interval == 0) o.interval = 60;
  if (o.headroom < 0) o.headroom = 0;
  if (o.start_s == 0) o.start_s = 60;
  if (o.min_replicas == 0) o.min_replicas = 1;
  if (o.min_replicas > o.replicas) o.min_replicas = o.replicas;
  if (o.tdp_w == 0) o.tdp_w = 400;
  if (o.idle_w == 0) o.idle_w = 50;
  if (!(o.rate_scale > 0) || !isfinite(o.rate_scale) || !(o.horizon >= 0) ||
      !isfinite(o.horizon) || !(o.interval > 0) || !isfinite(o.headroom) || !(o.start_s >= 0) ||
      o.max_batch > 4096 || o.replicas > 4096 || !(o.ttft_slo_s > 0) || !(o.tbt_slo_s > 0) ||
      !(o.tdp_w >= o.idle_w) || !(o.idle_w >= 0) || !isfinite(o.tdp_w) ||
      (o.horizon > 0 ? o.horizon : 0) / o.interval > 1e7)
    return stk__errf(errmsg, STK_EINVAL,
                     "inference options out of range (rate scale %g, horizon %g, interval %g, "
                     "batch %u, replicas %u, targets %g and %g s, %g W busy, %g W idle)",
                     o.rate_scale, o.horizon, o.interval, o.max_batch, o.replicas, o.ttft_slo_s,
                     o.tbt_slo_s, o.tdp_w, o.idle_w);
  if (!t || !t->n) return stk__errf(errmsg, STK_EINVAL, "the request trace is empty");
  struct stk__infer_mig mig;
  memset(&mig, 0, sizeof mig);
  if (o.mig) {
    if (!isfinite(o.mig_delay_s) || o.mig_delay_s > 1e5)
      return stk__errf(errmsg, STK_EINVAL, "MIG lending: instance creation delay %g s is out of range",
                       o.mig_delay_s);
    int mrc = stk__infer_mig_init(&mig, &o, errmsg);
    if (mrc) return mrc;
  }
  for (size_t i = 0; i < t->n; i++)
    if (!(t->r[i].t >= (i ? t->r[i - 1].t : 0)) || !isfinite(t->r[i].t))
      return stk__errf(errmsg, STK_EINVAL, "request %zu of the trace arrives out of order (%g s)",
                       i, t->r[i].t);
  double period = t->span + t->span / (double)t->n; /* the trace repeats after its last request */
  if (period <= 0) period = 1;
  double horizon = o.horizon > 0 ? o.horizon : period / o.rate_scale;
  size_t passes = (size_t)ceil(horizon * o.rate_scale / period);
  if (passes < 1) passes = 1;
  if (passes > (size_t)1 << 20 || (double)passes * (double)t->n > 5e7)
    return stk__errf(errmsg, STK_ERANGE, "%zu passes of %zu requests are too many", passes, t->n);
  size_t n = 0;
  struct rq *q = malloc(sizeof *q * passes * t->n);
  struct rep *rp = calloc(o.replicas, sizeof *rp);
  size_t nticks = (size_t)ceil(horizon / o.interval);
  res->lent = calloc(nticks + 1, sizeof *res->lent);
  double *lent_mig = o.mig ? calloc(nticks + 1, sizeof *lent_mig) : NULL;
  if (!q || !rp || !res->lent || (o.mig && !lent_mig)) goto nomem;
  for (size_t k = 0; k < passes; k++)
    for (size_t i = 0; i < t->n; i++) {
      double when = ((double)k * period + t->r[i].t) / o.rate_scale;
      if (when >= horizon) break;
      uint32_t gen = t->r[i].gen ? t->r[i].gen : 1; /* the prefill's token at least */
      q[n++] = (struct rq){when, -1, -1, t->r[i].prompt, gen, gen};
    }
  for (unsigned i = 0; i < o.replicas; i++) {
    struct rep *r = &rp[i];
    r->state = R_SERVE;
    r->level = r->next = LV_FULL;
    r->lay = mig.lay[LV_FULL];
    r->pf = r->dec = r->share = 1;
    r->armed = -1;
    if (!(r->act = malloc(sizeof(size_t) * o.max_batch))) goto nomem;
  }
  res->rate_cap = replica_cap(p, t, o.max_batch, o.tbt_slo_s, 1, 1);
  if (o.mig) res->rate_cap_mig = replica_cap(p, t, o.max_batch, o.tbt_slo_s, mig.pf, mig.dec);
  struct irun I = {.p = p, .o = &o, .res = res, .q = q, .rp = rp, .n = n, .nticks = nticks,
                   .mig = mig, .lent_mig = lent_mig, .errmsg = errmsg};
  stk__sim_engine_init(&I.e, stk__sim_key_of(0));
  int rc = 0;
  if (n) rc = stk__sim_engine_at(&I.e, stk__sim_key_of(q[0].arrive), EV_ARRIVE, 0);
  if (!rc && nticks) rc = stk__sim_engine_at(&I.e, stk__sim_key_of(o.interval), EV_TICK, 0);
  static const struct stk__sim_hooks hooks = {.live = infer_live,
                                              .advance = infer_advance,
                                              .event = infer_event,
                                              .instant = infer_instant,
                                              .done = infer_done};
  if (!rc) rc = stk__sim_engine_run(&I.e, &hooks, &I);
  stk__sim_engine_free(&I.e);
  if (rc == STK_ENOMEM) goto nomem;
  if (rc) { /* errmsg says what */
    for (unsigned i = 0; i < o.replicas; i++) free(rp[i].act);
    free(rp);
    free(q);
    free(lent_mig);
    stk_infer_result_free(res);
    return rc;
  }
  double idle_j = I.idle_j, serve_s = 0;
  res->nlent = nticks + 1;
  /* results */
  double *ttft = malloc(sizeof(double) * (n + 1)), *tbt = malloc(sizeof(double) * (n + 1));
  res->e2e = malloc(sizeof(double) * (n + 1));
  if (!ttft || !tbt || !res->e2e) {
    free(ttft);
    free(tbt);
    goto nomem;
  }
  size_t ntb = 0;
  double e2e_sum = 0;
  for (size_t i = 0; i < n; i++) {
    const struct rq *x = &q[i];
    if (x->finish < 0) continue;
    double tf = x->first - x->arrive;
    double tb = x->gen > 1 ? (x->finish - x->first) / (x->gen - 1) : 0;
    ttft[res->requests] = tf;
    res->e2e[res->requests++] = x->finish - x->arrive;
    e2e_sum += x->finish - x->arrive;
    if (x->gen > 1) tbt[ntb++] = tb;
    if (tf <= o.ttft_slo_s && tb <= o.tbt_slo_s) res->met++;
  }
  res->attain = res->requests ? (double)res->met / (double)res->requests : 0;
  res->e2e_mean = res->requests ? e2e_sum / (double)res->requests : 0;
  qsort(ttft, res->requests, sizeof(double), cmp_d);
  qsort(tbt, ntb, sizeof(double), cmp_d);
  res->ttft_p50 = pct(ttft, res->requests, 0.5);
  res->ttft_p99 = pct(ttft, res->requests, 0.99);
  res->tbt_p50 = pct(tbt, ntb, 0.5);
  res->tbt_p99 = pct(tbt, ntb, 0.99);
  free(ttft);
  free(tbt);
  double busy_s = 0, energy_j = idle_j;
  for (unsigned i = 0; i < o.replicas; i++) {
    busy_s += rp[i].busy_s;
    serve_s += rp[i].serve_s;
    energy_j += rp[i].energy_j;
    free(rp[i].act);
  }
  res->util = serve_s > 0 ? busy_s / serve_s : 0;
  res->energy_kwh = energy_j / 3.6e6;
  for (size_t k = 0; k < res->nlent; k++)
    res->lent_gpu_h += res->lent[k] * fmin(o.interval, fmax(horizon - (double)k * o.interval, 0)) / 3600;
  for (size_t k = 0; lent_mig && k < res->nlent; k++)
    res->lent_mig_gpu_h +=
        lent_mig[k] * fmin(o.interval, fmax(horizon - (double)k * o.interval, 0)) / 3600;
  res->lent_gpu_h += res->lent_mig_gpu_h;
  free(lent_mig);
  free(rp);
  free(q);
  return 0;
nomem:
  free(lent_mig);
  if (rp)
    for (unsigned i = 0; i < o.replicas; i++) free(rp[i].act);
  free(rp);
  free(q);
  stk_infer_result_free(res);
  return stk__errf(errmsg, STK_ENOMEM, "out of memory for %zu requests", passes * t->n);
}

void stk_infer_result_free(struct stk_infer_result *r) {
  if (!r) return;
  free(r->lent);
  free(r->e2e);
  r->lent = NULL;
  r->e2e = NULL;
}
