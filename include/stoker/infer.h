/* Inference beside training in the simulator (issue 22 section 4): an LLM
 * service of replicas (one model on tp GPUs with tensor parallelism) that
 * batch requests iteration by iteration, timed by Splitwise's measured
 * performance model (perf_model.csv: prompt time, time per generated
 * token, power), fed by Azure's 2023 LLM traces (arrival, prompt tokens,
 * generated tokens), and a policy that lends whole replicas' GPUs to
 * training off-peak and takes them back at peaks; the training side is
 * the job engine (stoker/sim.h) with the GPUs left to it each round
 * (stk_sim_jobs_opts.usable_series). On MIG GPUs (stoker/mig.h) the
 * policy may also shrink a replica onto a smaller instance of each of its
 * GPUs and lend the rest of every GPU as instances.
 *
 * Every call that can fail returns 0 or a negative STK_E* code with one
 * sentence in errmsg (STK_ERRMSG_MAX bytes, may be NULL). */
#ifndef STOKER_INFER_H
#define STOKER_INFER_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/error.h"
#include "stoker/export.h"

#ifdef __cplusplus
extern "C" {
#endif

struct stk_mig_geometry;

/* ---- performance model ---------------------------------------------- */

/* One (model, hardware, tensor parallelism) of perf_model.csv: the
 * repeats of each measured point averaged. The file measures one factor at
 * a time around prompt 512, batch 1, 128 tokens; the model is separable:
 * prefill(p, k) = P1(p) x PB(k) / PB(1), tbt(c, b) = T1(c) x TB(b) / TB(1),
 * each curve interpolated linearly between measured points (and
 * proportionally past the last); exact at every measured point. */
struct stk_infer_perf;

STK_EXPORT int stk_infer_perf_load(struct stk_infer_perf **out, const char *csv, const char *model,
                                   const char *hardware, unsigned tp, char *errmsg);
STK_EXPORT void stk_infer_perf_free(struct stk_infer_perf *p);
/* Seconds of one prefill iteration of k prompts of mean_prompt tokens. */
STK_EXPORT double stk_infer_prefill_s(const struct stk_infer_perf *p, double mean_prompt,
                                      unsigned k);
/* Seconds of one decode iteration of a batch of b requests whose mean
 * prompt is mean_prompt tokens. */
STK_EXPORT double stk_infer_tbt_s(const struct stk_infer_perf *p, double mean_prompt, unsigned b);
/* Average power of a busy GPU at batch b, as a fraction of its TDP (the
 * last measured batch's where larger batches have none). */
STK_EXPORT double stk_infer_power_frac(const struct stk_infer_perf *p, unsigned b);
/* One measured point (averaged over its repeats), i < count: prompt,
 * batch and generated tokens, prompt, per-token and end-to-end seconds.
 * Returns the number of points. */
struct stk_infer_point {
  unsigned prompt, batch, tokens;
  double prompt_s, token_s, e2e_s;
};
STK_EXPORT size_t stk_infer_perf_points(const struct stk_infer_perf *p,
                                        const struct stk_infer_point **points);

/* ---- request traces -------------------------------------------------- */

struct stk_infer_req {
  double t; /* arrival, s from the first request */
  uint32_t prompt, gen;
};
/* Requests in arrival order from 0 (stk_infer_run refuses others). */
struct stk_infer_trace {
  struct stk_infer_req *r;
  size_t n;
  double span; /* last arrival, s */
  double mean_prompt, mean_gen;
};
/* Azure's trace (TIMESTAMP "YYYY-MM-DD HH:MM:SS[.frac]", ContextTokens,
 * GeneratedTokens), sorted by arrival. */
STK_EXPORT int stk_infer_trace_load(struct stk_infer_trace **out, const char *csv, char *errmsg);
STK_EXPORT void stk_infer_trace_free(struct stk_infer_trace *t);

/* ---- the service ------------------------------------------------------ */

/* Set with stk_infer_opts_init(): the library reads only struct_size bytes
 * (later fields take their defaults) and refuses a larger struct, naming
 * it (docs/internals/api.md). */
struct stk_infer_opts {
  size_t struct_size; /* set by stk_infer_opts_init(); 0 = this header's */
  double rate_scale;   /* arrivals this many times faster; 0 = 1 */
  double horizon;      /* s; the trace repeats to fill it; 0 = one pass */
  unsigned replicas;   /* the service's replicas (each tp GPUs); 0 = 1 */
  unsigned tp;         /* GPUs per replica; 0 = 1 (only counts GPUs) */
  unsigned max_batch;  /* requests a replica batches; 0 = 16 */
  unsigned prefill_tokens; /* prompt tokens one prefill admits (one prompt at
                            * least); 0 = 4096 */
  double ttft_slo_s;   /* targets a request must meet; 0 = 5 s and 0.2 s */
  double tbt_slo_s;
  int lend;            /* 0: every replica always serves; 1: lend off-peak */
  double interval;     /* controller period = training round, s; 0 = 60 */
  double headroom;     /* lend: replicas for rate x (1 + headroom); <0 = 0 */
  double start_s;      /* lend: a reclaimed replica serves after this; 0 = 60 */
  unsigned min_replicas; /* lend: never fewer serving; 0 = 1 */
  double tdp_w, idle_w; /* per GPU; 0 = 400 W and 50 W (A100, as stoker sim --gpu-model) */
  /* lend on MIG instances too (NULL: whole replicas only). Each GPU of a
   * replica holds one of three layouts: a whole-GPU instance serving, a
   * mig_serve instance serving beside instances lent (the rest of the GPU,
   * largest profiles first), or a whole-GPU instance lent. The controller
   * keeps the last replica it needs on mig_serve when that covers the
   * rate; a layout changes only once the replica has drained (and the
   * lent instances are taken back), and new instances serve mig_delay_s
   * later, then start_s more. On mig_serve a prefill takes 7/compute and a
   * decode step 8/memory slices times as long as on the whole GPU, and it
   * draws compute/7 of the GPU's power (stated assumptions). */
  const struct stk_mig_geometry *mig;
  int mig_serve;       /* profile index in mig; fewer than 7 compute slices */
  double mig_delay_s;  /* instance creation; 0 = STK_MIG_RECONFIG_DELAY_S, < 0 = none */
};
#define stk_infer_opts_init(o) stk_infer_opts_init_sized((o), sizeof *(o))
STK_EXPORT void stk_infer_opts_init_sized(struct stk_infer_opts *o, size_t size);

struct stk_infer_result {
  size_t requests, met;     /* served, and within both targets */
  double attain;            /* met / requests */
  double ttft_p50, ttft_p99; /* s */
  double tbt_p50, tbt_p99;   /* s, per request: (finish - first token) / (gen - 1) */
  double e2e_mean;
  double util;               /* busy replica-seconds / serving replica-seconds */
  double energy_kwh;         /* the service's GPUs while they serve */
  double lent_gpu_h;         /* GPU-hours lent to training */
  double rate_cap;           /* requests/s one replica sustains within tbt_slo */
  /* per interval: GPUs the service lent over that round */
  uint32_t *lent;
  size_t nlent;
  /* per request served, in arrival order: end-to-end seconds */
  double *e2e;
  double lent_mig_gpu_h;     /* of lent_gpu_h: lent as MIG instances beside serving ones */
  uint64_t reconfigs;        /* GPUs whose MIG layout changed */
  double rate_cap_mig;       /* requests/s one replica sustains on mig_serve */
};
STK_EXPORT int stk_infer_run(const struct stk_infer_perf *p, const struct stk_infer_trace *t,
                             const struct stk_infer_opts *o, struct stk_infer_result *res,
                             char *errmsg);
STK_EXPORT void stk_infer_result_free(struct stk_infer_result *r);

#ifdef __cplusplus
}
#endif

#endif
