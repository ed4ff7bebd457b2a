/* Experiment mode, the methodology of the FGD paper's artifact: the trace's
 * pods arrive one by one in a seeded random order and never leave; if their
 * GPU demand falls short of the target share of capacity (130%), pods
 * sampled with replacement from the trace follow until the next one would
 * pass it; if it exceeds the target, the longest random prefix that stays
 * within it arrives. After every arrival the allocated share of GPUs and the
 * fragmentation are recorded against the arrived demand. Runs of several
 * policies and seeds share the read-only cluster and workload and spread
 * over a pool of threads. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"

#define EV_ARRIVE 1

/* The arrival stream of one run. */
struct gen {
  const struct stk_sim_workload *w;
  struct stk_rng rng;
  uint64_t *fen;   /* Fenwick tree of originals not yet arrived, by kind */
  uint64_t *cum;   /* cumulative kind counts, for draws with replacement */
  uint32_t n, top; /* kinds; highest power of two <= n */
  uint64_t left, total;
  double target;
  int64_t milli; /* GPU demand arrived so far */
  int over;      /* the trace alone exceeds the target */
  int phase;     /* 0 originals, 1 samples, 2 done */
};

static int gen_init(struct gen *g, const struct stk_sim_workload *w, uint64_t seed, double target) {
  memset(g, 0, sizeof *g);
  g->w = w;
  g->n = w->nkind;
  stk_rng_seed(&g->rng, stk_mix64(seed, 0xa77));
  g->fen = calloc(g->n + 1, sizeof *g->fen);
  g->cum = malloc(g->n * sizeof *g->cum);
  if (!g->fen || !g->cum) return STK_ENOMEM;
  for (uint32_t i = 0; i < g->n; i++) {
    g->total += w->kind[i].count;
    g->cum[i] = g->total;
    for (uint32_t j = i + 1; j <= g->n; j += j & -j) g->fen[j] += w->kind[i].count;
  }
  g->left = g->total;
  g->top = 1;
  while (g->top * 2 <= g->n) g->top *= 2;
  g->target = target;
  g->over = (double)w->total_milli > target;
  return 0;
}

static void gen_free(struct gen *g) {
  free(g->fen);
  free(g->cum);
}

static int64_t demand(const struct stk_sim_workload *w, uint32_t k) {
  const struct stk__sim_spec *s = &w->spec[w->kind[k].spec];
  return (int64_t)s->num * s->milli;
}

/* Next arriving kind, or -1 when the stream is done. */
static int64_t gen_next(struct gen *g) {
  const struct stk_sim_workload *w = g->w;
  if (g->phase == 0 && g->left == 0) g->phase = 1;
  if (g->phase == 0) {
    uint64_t r = stk_rng_below(&g->rng, g->left);
    uint32_t pos = 0; /* Fenwick descent to the kind holding the r-th pod */
    for (uint32_t step = g->top; step; step >>= 1)
      if (pos + step <= g->n && g->fen[pos + step] <= r) pos += step, r -= g->fen[pos];
    for (uint32_t j = pos + 1; j <= g->n; j += j & -j) g->fen[j]--;
    g->left--;
    int64_t d = demand(w, pos);
    if (g->over && (double)(g->milli + d) > g->target) {
      g->phase = 2;
      return -1;
    }
    g->milli += d;
    return pos;
  }
  if (g->phase == 1 && !g->over) {
    uint64_t r = stk_rng_below(&g->rng, g->total);
    uint32_t lo = 0, hi = g->n - 1;
    while (lo < hi) {
      uint32_t mid = (lo + hi) / 2;
      if (g->cum[mid] > r)
        hi = mid;
      else
        lo = mid + 1;
    }
    /* The artifact's stopping test adds the milli-GPU of one GPU only. */
    const struct stk__sim_spec *s = &w->spec[w->kind[lo].spec];
    if ((double)(g->milli + s->milli) > g->target) {
      g->phase = 2;
      return -1;
    }
    g->milli += demand(w, lo);
    return lo;
  }
  g->phase = 2;
  return -1;
}

static int class_of(const struct stk__sim_spec *s) {
  if (s->num == 0) return 0;
  if (s->share) return 1;
  return s->num == 1 ? 2 : 3;
}

/* The run as the engine's client: one pod arrives per tick, is placed or
 * fails, and the allocation at its percentage of the cluster is noted;
 * the generator's next pod arrives one tick later. */
struct xrun {
  struct stk__sim_engine e;
  const struct stk_sim_workload *w;
  struct stk__sim_state *st;
  struct gen *g;
  struct stk_sim_result *res;
  double gpus, *sa, *sf, *sr;
  uint64_t *cnt, *cntr;
  uint32_t nb;
  int64_t arrived;
};

static int xrun_event(void *ctx, const struct stk__sim_event *ev) {
  struct xrun *X = ctx;
  const struct stk_sim_workload *w = X->w;
  struct stk__sim_state *st = X->st;
  struct stk_sim_result *res = X->res;
  uint32_t k = ev->arg;
  const struct stk__sim_spec *sp = &w->spec[w->kind[k].spec];
  X->arrived += (int64_t)sp->num * sp->milli;
  res->pods++;
  struct stk__sim_bind b;
  if (stk__sim_schedule(st, k, &b) == 0) {
    stk__sim_bind(st, k, &b);
    res->placed++;
  } else {
    res->failed++;
    res->failed_by_class[class_of(sp)]++;
    res->failed_never_fit += w->kind[k].never_fit;
  }
  double pct = (double)X->arrived / X->gpus / 10.0;
  double alloc = (double)st->used_milli / X->gpus / 10.0;
  double frag = st->frag_sum > 0 ? st->frag_sum : 0;
  uint32_t bkt = (uint32_t)stk__sim_round(pct);
  if (bkt < X->nb) {
    X->cnt[bkt]++;
    X->sa[bkt] += alloc;
    X->sf[bkt] += frag / 1000.0;
    if (st->idle_milli > 0) {
      X->cntr[bkt]++;
      X->sr[bkt] += 100.0 * frag / (double)st->idle_milli;
    }
  }
  res->final_alloc = alloc;
  res->final_frag = frag / 1000.0;
  res->final_frag_ratio = st->idle_milli > 0 ? 100.0 * frag / (double)st->idle_milli : 0;
  int64_t next = gen_next(X->g);
  return next >= 0 ? stk__sim_engine_at(&X->e, ev->time + 1, EV_ARRIVE, (uint32_t)next) : 0;
}

int stk_sim_run(const struct stk_sim_cluster *c, const struct stk_sim_workload *w,
                const struct stk_sim_run_opts *oin, struct stk_sim_result *res, char *errmsg) {
  memset(res, 0, sizeof *res);
  struct stk_sim_run_opts own; /* an older caller's struct is read only to its end */
  int trc = stk__opts_take(&own, sizeof own, oin, "stk_sim_run_opts", errmsg);
  if (trc) return trc;
  const struct stk_sim_run_opts *opts = &own;
  const char *pname = opts && opts->policy ? opts->policy : "FGD";
  const struct stk_sim_policy_ops *pol = stk__sim_policy_get(pname);
  if (!pol) return stk__errf(errmsg, STK_EINVAL, "no policy '%s'", pname);
  double inflate = opts && opts->inflate > 0 ? opts->inflate : 1.3;
  if (!(inflate > 0 && inflate <= 100))
    return stk__errf(errmsg, STK_EINVAL, "inflate %g is out of range (0..100]", inflate);
  if (w->cluster != c)
    return stk__errf(errmsg, STK_EINVAL, "the workload was loaded for another cluster");
  if (c->gpus == 0)
    return stk__errf(errmsg, STK_EINVAL,
                     "the node list has no GPUs; experiment mode measures GPU allocation");
  if (w->total_milli == 0)
    return stk__errf(errmsg, STK_EEMPTY,
                     "the pod list requests no GPUs; experiment mode needs GPU pods");
  uint64_t seed = opts ? opts->seed : 0;
  snprintf(res->policy, sizeof res->policy, "%s", pol->name);
  res->seed = seed;
  res->inflate = inflate;
  res->total_gpu_milli = c->gpus * STK__SIM_MILLI;

  uint32_t nb = (uint32_t)ceil(inflate * 100) + 3;
  double *sa = calloc(nb, sizeof *sa), *sf = calloc(nb, sizeof *sf), *sr = calloc(nb, sizeof *sr);
  uint64_t *cnt = calloc(nb, sizeof *cnt), *cntr = calloc(nb, sizeof *cntr);
  struct stk__sim_state st;
  struct gen g;
  struct xrun X;
  memset(&X, 0, sizeof X);
  stk__sim_engine_init(&X.e, 0);
  int rc = 0, have_state = 0;
  memset(&g, 0, sizeof g);
  if (!sa || !sf || !sr || !cnt || !cntr ||
      gen_init(&g, w, seed, inflate * (double)res->total_gpu_milli)) {
    rc = STK_ENOMEM;
    goto out;
  }
  if ((rc = stk__sim_state_init(&st, c, w, pol, seed))) goto out;
  have_state = 1;

  uint64_t t0 = stk_now_ns(), c0 = stk__sim_thread_ns();
  const double gpus = (double)c->gpus;
  X.w = w, X.st = &st, X.g = &g, X.res = res, X.gpus = gpus;
  X.sa = sa, X.sf = sf, X.sr = sr, X.cnt = cnt, X.cntr = cntr, X.nb = nb;
  int64_t next = gen_next(&g);
  if (next >= 0 && (rc = stk__sim_engine_at(&X.e, 0, EV_ARRIVE, (uint32_t)next))) goto out;
  static const struct stk__sim_hooks hooks = {.event = xrun_event};
  if ((rc = stk__sim_engine_run(&X.e, &hooks, &X))) goto out;
  res->events = X.e.events;
  int64_t arrived = X.arrived;
  res->wall_s = (double)(stk_now_ns() - t0) / 1e9;
  res->cpu_s = (double)(stk__sim_thread_ns() - c0) / 1e9;
  res->arrived_gpu_milli = (uint64_t)arrived;
  res->used_gpu_milli = (uint64_t)st.used_milli;

  res->npct = (uint32_t)stk__sim_round(inflate * 100) + 1;
  if (res->npct > nb - 1) res->npct = nb - 1;
  res->alloc = malloc(res->npct * sizeof *res->alloc);
  res->frag = malloc(res->npct * sizeof *res->frag);
  res->frag_ratio = malloc(res->npct * sizeof *res->frag_ratio);
  if (!res->alloc || !res->frag || !res->frag_ratio) {
    rc = STK_ENOMEM;
    goto out;
  }
  for (uint32_t p = 0; p < res->npct; p++) {
    /* The artifact's analysis: the mean over arrivals at this rounded
     * percentage, else over those at the neighbouring ones. */
    uint64_t n = cnt[p], nr = cntr[p];
    double a = sa[p], f = sf[p], r = sr[p];
    if (!n) {
      for (int d = -1; d <= 1; d += 2) {
        int q = (int)p + d;
        if (q < 0 || (uint32_t)q >= nb) continue;
        n += cnt[q], nr += cntr[q], a += sa[q], f += sf[q], r += sr[q];
      }
    }
    res->alloc[p] = n ? a / (double)n : NAN;
    res->frag[p] = n ? f / (double)n : NAN;
    res->frag_ratio[p] = nr ? r / (double)nr : NAN;
  }
out:
  if (rc) {
    stk_sim_result_free(res);
    stk__errf(errmsg, rc, "%s", rc == STK_ENOMEM ? "out of memory" : stk_strerror(rc));
  }
  if (have_state) stk__sim_state_free(&st);
  gen_free(&g);
  stk__sim_engine_free(&X.e);
  free(sa);
  free(sf);
  free(sr);
  free(cnt);
  free(cntr);
  return rc;
}

void stk_sim_result_free(struct stk_sim_result *r) {
  if (!r) return;
  free(r->alloc);
  free(r->frag);
  free(r->frag_ratio);
  r->alloc = r->frag = r->frag_ratio = NULL;
  r->npct = 0;
}

void stk_sim_results_free(struct stk_sim_result *r, size_t n) {
  if (!r) return;
  for (size_t i = 0; i < n; i++) stk_sim_result_free(&r[i]);
  free(r);
}

double stk_sim_result_at(const struct stk_sim_result *r, double pct) {
  if (!r->npct || !(pct >= 0) || pct > (double)(r->npct - 1)) return NAN;
  uint32_t i = (uint32_t)pct;
  if (i >= r->npct - 1) return r->alloc[r->npct - 1];
  double f = pct - i;
  return r->alloc[i] * (1 - f) + r->alloc[i + 1] * f;
}

/* ---- policies x seeds on a thread pool ------------------------------- */

struct pool {
  pthread_mutex_t mu;
  pthread_cond_t done_cv;
  const struct stk_sim_cluster *c;
  const struct stk_sim_workload *w;
  const struct stk_sim_experiment_opts *o;
  const char *const *policies;
  uint32_t seeds, total, next, done;
  struct stk_sim_result *res;
  int rc;
  char err[STK_ERRMSG_MAX];
};

static void *worker(void *arg) {
  struct pool *p = arg;
  for (;;) {
    pthread_mutex_lock(&p->mu);
    int stop = p->rc != 0 || (p->o->cancel && __atomic_load_n(p->o->cancel, __ATOMIC_RELAXED));
    uint32_t j = p->next;
    if (!stop && j < p->total) p->next++;
    pthread_mutex_unlock(&p->mu);
    if (stop || j >= p->total) break;
    struct stk_sim_run_opts ro = {.policy = p->policies[j / p->seeds],
                                  .seed = p->o->seed + j % p->seeds,
                                  .inflate = p->o->inflate};
    char err[STK_ERRMSG_MAX] = "";
    int rc = stk_sim_run(p->c, p->w, &ro, &p->res[j], err);
    pthread_mutex_lock(&p->mu);
    if (rc && !p->rc) {
      p->rc = rc;
      memcpy(p->err, err, sizeof err);
    }
    p->done++;
    pthread_cond_signal(&p->done_cv);
    pthread_mutex_unlock(&p->mu);
  }
  pthread_mutex_lock(&p->mu);
  pthread_cond_signal(&p->done_cv);
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

int stk_sim_experiment(const struct stk_sim_cluster *c, const struct stk_sim_workload *w,
                       const struct stk_sim_experiment_opts *opts, struct stk_sim_result **results,
                       size_t *nresults, char *errmsg) {
  *results = NULL;
  *nresults = 0;
  struct stk_sim_experiment_opts o;
  int trc = stk__opts_take(&o, sizeof o, opts, "stk_sim_experiment_opts", errmsg);
  if (trc) return trc;
  const char *all[16];
  if (!o.policies || !o.npolicies) {
    size_t n = stk_sim_policy_count();
    for (size_t i = 0; i < n; i++) all[i] = stk_sim_policy_name(i);
    o.policies = all;
    o.npolicies = n;
  }
  for (size_t i = 0; i < o.npolicies; i++)
    if (stk_sim_policy_find(o.policies[i]) < 0)
      return stk__errf(errmsg, STK_EINVAL, "no policy '%s'", o.policies[i]);
  if (!o.seeds) o.seeds = 10;
  if (!o.inflate) o.inflate = 1.3;
  uint32_t total = (uint32_t)o.npolicies * o.seeds;
  uint32_t threads = o.threads;
  if (!threads) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    threads = n > 0 ? (uint32_t)n : 1;
  }
  if (threads > total) threads = total;
  struct pool p;
  memset(&p, 0, sizeof p);
  p.c = c, p.w = w, p.o = &o, p.policies = o.policies, p.seeds = o.seeds, p.total = total;
  p.res = calloc(total, sizeof *p.res);
  pthread_t *tid = calloc(threads, sizeof *tid);
  if (!p.res || !tid) {
    free(p.res);
    free(tid);
    return stk__errf(errmsg, STK_ENOMEM, "out of memory");
  }
  pthread_mutex_init(&p.mu, NULL);
  pthread_cond_init(&p.done_cv, NULL);
  uint32_t started = 0;
  for (; started < threads; started++)
    if (pthread_create(&tid[started], NULL, worker, &p)) break;
  if (!started) worker(&p); /* no threads to be had: run them here */
  pthread_mutex_lock(&p.mu);
  uint32_t reported = 0;
  for (;;) {
    while (reported < p.done) {
      reported++;
      if (o.progress) {
        pthread_mutex_unlock(&p.mu);
        o.progress(o.ctx, reported, total);
        pthread_mutex_lock(&p.mu);
      }
    }
    int stop = p.rc || (o.cancel && __atomic_load_n(o.cancel, __ATOMIC_RELAXED));
    if (p.done == total || (stop && p.done >= p.next)) break;
    pthread_cond_wait(&p.done_cv, &p.mu);
  }
  pthread_mutex_unlock(&p.mu);
  for (uint32_t i = 0; i < started; i++) pthread_join(tid[i], NULL);
  free(tid);
  pthread_mutex_destroy(&p.mu);
  pthread_cond_destroy(&p.done_cv);
  if (p.rc) {
    stk_sim_results_free(p.res, total);
    return stk__errf(errmsg, p.rc, "%s", p.err);
  }
  if (p.done < total) {
    stk_sim_results_free(p.res, total);
    return stk__errf(errmsg, STK_ECANCELED, "experiment canceled after %u of %u runs", p.done,
                     total);
  }
  *results = p.res;
  *nresults = total;
  return 0;
}
