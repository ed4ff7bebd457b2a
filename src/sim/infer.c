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
 * replica taken back serves start_s later (its weights loaded again). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim_impl.h"
#include "stoker/infer.h"

enum { R_OFF, R_START, R_SERVE, R_DRAIN };

struct rq {
  double arrive, first, finish;
  uint32_t prompt, gen, left;
};

struct rep {
  int state, busy, prefill;
  double ready_at, busy_until, busy_s, serve_s, energy_j;
  size_t *act; /* requests held (prefilling or decoding) */
  int nact, npre;
};

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
 * at that step shared by the batch. */
static double replica_cap(const struct stk_infer_perf *p, const struct stk_infer_trace *t,
                          unsigned max_batch, double tbt_slo) {
  unsigned b = 1;
  for (unsigned k = 1; k <= max_batch; k++)
    if (stk_infer_tbt_s(p, t->mean_prompt, k) <= tbt_slo) b = k;
  double per = stk_infer_prefill_s(p, t->mean_prompt, 1) +
               t->mean_gen * stk_infer_tbt_s(p, t->mean_prompt, b) / b;
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
    dur = stk_infer_prefill_s(p, sum / k, (unsigned)k);
  } else if (r->nact > 0) {
    for (int k = 0; k < r->nact; k++) sum += q[r->act[k]].prompt;
    r->prefill = 0;
    dur = stk_infer_tbt_s(p, sum / r->nact, (unsigned)r->nact);
  } else {
    if (r->state == R_DRAIN) r->state = R_OFF;
    return;
  }
  unsigned in_batch = (unsigned)(r->nact + (r->prefill ? r->npre : 0));
  r->busy = 1;
  r->busy_until = now + dur;
  r->busy_s += dur;
  r->energy_j += dur * o->tp * (o->tdp_w * stk_infer_power_frac(p, in_batch) - o->idle_w);
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
  if (!q || !rp || !res->lent) goto nomem;
  for (size_t k = 0; k < passes; k++)
    for (size_t i = 0; i < t->n; i++) {
      double when = ((double)k * period + t->r[i].t) / o.rate_scale;
      if (when >= horizon) break;
      uint32_t gen = t->r[i].gen ? t->r[i].gen : 1; /* the prefill's token at least */
      q[n++] = (struct rq){when, -1, -1, t->r[i].prompt, gen, gen};
    }
  for (unsigned i = 0; i < o.replicas; i++) {
    rp[i].state = R_SERVE;
    if (!(rp[i].act = malloc(sizeof(size_t) * o.max_batch))) goto nomem;
  }
  res->rate_cap = replica_cap(p, t, o.max_batch, o.tbt_slo_s);
  size_t narrived = 0, qhead = 0, tick = 0, window = 0;
  double now = 0, idle_j = 0, serve_s = 0;
  for (;;) {
    /* the next event */
    double next = INFINITY;
    if (narrived < n) next = q[narrived].arrive;
    for (unsigned i = 0; i < o.replicas; i++) {
      if (rp[i].busy && rp[i].busy_until < next) next = rp[i].busy_until;
      if (rp[i].state == R_START && rp[i].ready_at < next) next = rp[i].ready_at;
    }
    double tick_at = (double)(tick + 1) * o.interval;
    int more = tick < nticks;
    if (more && tick_at <= next) next = tick_at;
    if (!isfinite(next)) break;
    /* serving replicas' time, idle power */
    for (unsigned i = 0; i < o.replicas; i++)
      if (rp[i].state != R_OFF) {
        rp[i].serve_s += next - now;
        idle_j += (next - now) * o.tp * o.idle_w;
      }
    now = next;
    for (unsigned i = 0; i < o.replicas; i++) {
      if (rp[i].busy && rp[i].busy_until <= now) finish_iteration(&rp[i], q, now);
      if (rp[i].state == R_START && rp[i].ready_at <= now) rp[i].state = R_SERVE;
    }
    while (narrived < n && q[narrived].arrive <= now) narrived++, window++;
    if (more && tick_at <= now) {
      tick++;
      if (o.lend) control(&o, rp, (double)window / o.interval, res->rate_cap, narrived - qhead, now);
      window = 0;
      unsigned off = 0;
      for (unsigned i = 0; i < o.replicas; i++) off += rp[i].state == R_OFF;
      if (tick < nticks + 1) res->lent[tick] = off * o.tp;
    }
    for (unsigned i = 0; i < o.replicas; i++) iterate(p, &o, &rp[i], q, &qhead, narrived, now);
    if (narrived == n && qhead == n && !more) {
      int busy = 0;
      for (unsigned i = 0; i < o.replicas; i++) busy |= rp[i].busy || rp[i].nact;
      if (!busy) break;
    }
  }
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
  free(rp);
  free(q);
  return 0;
nomem:
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
