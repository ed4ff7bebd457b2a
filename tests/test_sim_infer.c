/* Inference beside training (issue 22 section 4): the service model
 * against Splitwise's own measurements at low load, the Azure trace
 * reader, refusals, and the lending policy (GPUs lent off-peak, taken
 * back at a peak, training kept within what is left to it). */
#include <math.h>
#include <unistd.h>

#include "../src/sim/jobs_impl.h"
#include "stoker/infer.h"
#include "test.h"
#include "test_sim_infer.h"

static struct stk_infer_perf *perf_or_skip(const char *hw, unsigned tp) {
  const char *data = test_shared_data();
  char csv[4200];
  if (data) snprintf(csv, sizeof csv, "%s/splitwise/perf_model.csv", data);
  if (!data || access(csv, R_OK) != 0) return NULL;
  struct stk_infer_perf *p;
  char err[STK_ERRMSG_MAX] = "";
  CHECK_MSG(stk_infer_perf_load(&p, csv, "llama2-70b", hw, tp, err) == 0, "%s", err);
  return p;
}

/* At low load (the point's batch arriving at once on one replica) every
 * request's end-to-end time is the measured one within 4% (the
 * measurements' own spread) at each point of the prompt and batch sweeps
 * (128 generated tokens) of llama2-70b on A100 at TP 2, 4, 8 and H100 at
 * TP 4. Left out, and counted: two points inconsistent with their own
 * prompt and per-token times (A100 TP 2 at batch 32 and 64: 18.4 s and
 * 160 s measured where prompt + 127 tokens give 15.8 s and 9.3 s; the KV
 * cache of 64 requests hardly fits beside 140 GB of weights on two GPUs).
 * The token sweep (256 to 8192 tokens) is not the model's: its per-token
 * times differ from the 128-token runs' by up to 9% with no trend in
 * length (A100 TP 2: 54.8 ms at 128 tokens, 60.0 ms at 256 to 8192), and
 * its end-to-end times stop growing past about 25 s (runs that ended
 * early); at 256 tokens the model is within 10%. */
TEST(sim_infer_matches_perf_model_at_low_load) {
  const char *hws[4] = {"a100-80gb", "a100-80gb", "a100-80gb", "h100-80gb"};
  const unsigned tps[4] = {2, 4, 8, 4};
  int checked = 0, odd = 0;
  for (int h = 0; h < 4; h++) {
    struct stk_infer_perf *p = perf_or_skip(hws[h], tps[h]);
    if (!p) SKIP("shared data (../shared/data/splitwise) is absent");
    const struct stk_infer_point *pt;
    size_t np = stk_infer_perf_points(p, &pt);
    CHECK(np >= 19);
    for (size_t i = 0; i < np; i++) {
      if (pt[i].tokens > 256) continue;
      double tol = pt[i].tokens == 128 ? 0.04 : 0.1;
      double own = pt[i].prompt_s + (pt[i].tokens - 1) * pt[i].token_s;
      if (fabs(own / pt[i].e2e_s - 1) > 0.1) {
        CHECK(tps[h] == 2 && pt[i].batch >= 32);
        odd++;
        continue;
      }
      struct stk_infer_req rq[64];
      struct stk_infer_trace t = {rq, pt[i].batch, 0, pt[i].prompt, pt[i].tokens};
      for (unsigned k = 0; k < pt[i].batch; k++)
        rq[k] = (struct stk_infer_req){0, pt[i].prompt, pt[i].tokens};
      struct stk_infer_opts o;
      memset(&o, 0, sizeof o);
      o.max_batch = pt[i].batch;
      o.prefill_tokens = pt[i].batch * pt[i].prompt; /* the batch's prompts in one prefill */
      o.tp = tps[h];
      struct stk_infer_result r;
      char err[STK_ERRMSG_MAX] = "";
      CHECK_MSG(stk_infer_run(p, &t, &o, &r, err) == 0, "%s", err);
      CHECK_EQ(r.requests, pt[i].batch);
      for (size_t k = 0; k < r.requests; k++)
        CHECK_MSG(fabs(r.e2e[k] / pt[i].e2e_s - 1) < tol,
                  "%s tp %u prompt %u batch %u tokens %u: %.3f s, measured %.3f s", hws[h], tps[h],
                  pt[i].prompt, pt[i].batch, pt[i].tokens, r.e2e[k], pt[i].e2e_s);
      stk_infer_result_free(&r);
      checked++;
    }
    stk_infer_perf_free(p);
  }
  CHECK_EQ(odd, 2);
  CHECK_EQ(checked, 4 * 14 - 2); /* 7 prompt sizes, 6 more batches, 256 tokens */
}

/* The model is exact at measured points and separable between them. */
TEST(sim_infer_perf_curves) {
  struct stk_infer_perf *p = perf_or_skip("a100-80gb", 4);
  if (!p) SKIP("shared data (../shared/data/splitwise) is absent");
  const struct stk_infer_point *pt;
  size_t np = stk_infer_perf_points(p, &pt);
  for (size_t i = 0; i < np; i++) {
    if (pt[i].tokens != 128 || (pt[i].batch != 1 && pt[i].prompt != 512)) continue;
    CHECK(fabs(stk_infer_prefill_s(p, pt[i].prompt, pt[i].batch) / pt[i].prompt_s - 1) < 1e-9);
    CHECK(fabs(stk_infer_tbt_s(p, pt[i].prompt, pt[i].batch) / pt[i].token_s - 1) < 1e-9);
  }
  double a = stk_infer_prefill_s(p, 768, 1), lo = stk_infer_prefill_s(p, 512, 1),
         hi = stk_infer_prefill_s(p, 1024, 1);
  CHECK(a > lo && a < hi);
  CHECK(stk_infer_tbt_s(p, 512, 12) > stk_infer_tbt_s(p, 512, 8));
  CHECK(stk_infer_power_frac(p, 64) > 0.5 && stk_infer_power_frac(p, 64) <= 1.1);
  stk_infer_perf_free(p);
}

/* Refusals name what is wrong and where. */
TEST(sim_infer_bad_inputs) {
  char err[STK_ERRMSG_MAX] = "";
  struct stk_infer_trace *t;
  const char *bad = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97,10,5\n"
                    "2023-11-16 25:00:00,10,5\n";
  test_write_file("bad.csv", bad, strlen(bad));
  CHECK(stk_infer_trace_load(&t, "bad.csv", err) == STK_EFORMAT);
  CHECK_MSG(strstr(err, "bad.csv:3") && strstr(err, "TIMESTAMP"), "%s", err);
  const char *cols = "time,prompt\n1,2\n";
  test_write_file("cols.csv", cols, strlen(cols));
  CHECK(stk_infer_trace_load(&t, "cols.csv", err) == STK_EFORMAT);
  CHECK(strstr(err, "ContextTokens") != NULL);
  const char *ok = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:04.5,100,0\n"
                   "2023-11-16 18:17:03.25,10,5\n";
  test_write_file("ok.csv", ok, strlen(ok));
  CHECK_MSG(stk_infer_trace_load(&t, "ok.csv", err) == 0, "%s", err);
  CHECK_EQ(t->n, 2);
  CHECK(t->r[0].t == 0 && t->r[0].prompt == 10 && fabs(t->r[1].t - 1.25) < 1e-9);
  CHECK_EQ(t->r[1].gen, 1); /* no generated token: its prefill's first */
  stk_infer_trace_free(t);
  struct stk_infer_perf *p;
  const char *pm = "model,hardware,prompt_size,batch_size,token_size,peak_power,average_power,"
                   "prompt_time,token_time,e2e_time,tensor_parallel\n"
                   "m,h,512,1,128,1,0.5,100,40,5000,2\n";
  test_write_file("pm.csv", pm, strlen(pm));
  CHECK(stk_infer_perf_load(&p, "pm.csv", "m", "h", 4, err) == STK_ENOENT);
  CHECK_MSG(strstr(err, "tensor parallelism 4") != NULL, "%s", err);
  CHECK(stk_infer_perf_load(&p, "pm.csv", "m", "h", 2, err) == 0);
  struct stk_infer_opts o;
  memset(&o, 0, sizeof o);
  o.rate_scale = -1;
  struct stk_infer_req rq = {0, 10, 2};
  struct stk_infer_trace one = {&rq, 1, 0, 10, 2};
  struct stk_infer_result r;
  CHECK(stk_infer_run(p, &one, &o, &r, err) == STK_EINVAL);
  CHECK(strstr(err, "rate scale") != NULL);
  o.rate_scale = 1;
  struct stk_infer_req two[2] = {{5, 10, 2}, {1, 10, 2}};
  struct stk_infer_trace back = {two, 2, 5, 10, 2};
  CHECK(stk_infer_run(p, &back, &o, &r, err) == STK_EINVAL);
  CHECK_MSG(strstr(err, "request 1 of the trace arrives out of order") != NULL, "%s", err);
  stk_infer_perf_free(p);
}

/* Lending: 4 replicas of about 5.7 requests/s each; 10 quiet minutes (one
 * request every 20 s), 10 busy ones (16 a second), 10 quiet again. The controller lends three replicas
 * in the first quiet part, takes them back during the peak and lends again
 * after it; without lending nothing is lent. Every request is served. */
TEST(sim_infer_lends_off_peak) {
  struct stk_infer_perf *p = toy_perf();
  struct stk_infer_trace tr = peak_trace();
  struct stk_infer_opts o = lend_opts();
  struct stk_infer_result r;
  char err[STK_ERRMSG_MAX] = "";
  CHECK_MSG(stk_infer_run(p, &tr, &o, &r, err) == 0, "%s", err);
  CHECK(r.requests >= tr.n); /* and the repeat's first if it starts before 1800 s */
  CHECK_EQ(r.nlent, 31);
  CHECK_EQ(r.lent[0], 0);
  CHECK_EQ(r.lent[5], 6); /* three replicas of 2 GPUs */
  CHECK_EQ(r.lent[15], 0);
  CHECK_EQ(r.lent[25], 6);
  CHECK_MSG(r.lent_gpu_h > 1.5 && r.lent_gpu_h <= 2.0, "%.2f GPU-h", r.lent_gpu_h); /* 20 min x 6 */
  CHECK(r.rate_cap > 0.5);
  stk_infer_result_free(&r);
  o.lend = 0;
  CHECK_MSG(stk_infer_run(p, &tr, &o, &r, err) == 0, "%s", err);
  CHECK(r.lent_gpu_h == 0);
  CHECK(r.attain > 0.99);
  stk_infer_result_free(&r);
  stk_infer_perf_free(p);
}

/* Training under GPUs lent round by round: a 4-GPU job runs while 4 are
 * left, is stopped when the service takes two back (round 3) and runs
 * again when they return (round 6); no round uses more than it is left. */
TEST(sim_infer_training_respects_lent_gpus) {
  const char *csv = "jobid,submit_time,num_gpus,duration\na,0,4,600\nb,0,2,300\n";
  test_write_file("jobs.csv", csv, strlen(csv));
  struct stk_sim_jobs *j;
  char err[STK_ERRMSG_MAX] = "";
  CHECK_MSG(stk_sim_jobs_load(&j, NULL, "jobs.csv", err) == 0, "%s", err);
  uint32_t series[8] = {4, 4, 4, 2, 2, 2, 4, 4};
  struct stk_sim_jobs_opts o;
  memset(&o, 0, sizeof o);
  o.policy = "fifo";
  o.nodes = 1;
  o.gpus_per_node = 4;
  o.restart_delay = -1;
  o.usable_series = series;
  o.nusable = 8;
  o.keep_samples = 1;
  struct stk_sim_jobs_result r;
  CHECK_MSG(stk_sim_jobs_run(j, &o, &r, err) == 0, "%s", err);
  CHECK_EQ(r.completed, 2);
  for (size_t k = 0; k < r.nsamples; k++) {
    size_t round = (size_t)(r.samples[k].time / 60);
    uint32_t cap = series[round < 8 ? round : 7];
    CHECK_MSG(r.samples[k].gpus_alloc <= cap, "round %zu: %u GPUs of %u", round,
              r.samples[k].gpus_alloc, cap);
  }
  CHECK(r.rec[0].finish > 600 + 60); /* a lost its GPUs for three rounds */
  stk_sim_jobs_result_free(&r);
  o.nusable = 0;
  CHECK(stk_sim_jobs_run(j, &o, &r, err) == STK_EINVAL);
  CHECK(strstr(err, "series is empty") != NULL);
  stk_sim_jobs_free(j);
}
