/* Helpers shared by the inference-service tests (test_sim_infer*.c): a
 * toy performance model and the quiet-peak-quiet trace the lending tests
 * run, with the options that lend off-peak. */
#ifndef STOKER_TEST_SIM_INFER_H
#define STOKER_TEST_SIM_INFER_H

#include <string.h>

#include "stoker/infer.h"
#include "test.h"

/* A toy performance model: prefill 0.1 s a prompt of 512 at batch 1, 0.2 s
 * at 2, ...; a token 0.05 s at batch 1, 0.06 s at 16. */
static __attribute__((unused)) struct stk_infer_perf *toy_perf(void) {
  const char *pm = "model,hardware,prompt_size,batch_size,token_size,peak_power,average_power,"
                   "prompt_time,token_time,e2e_time,tensor_parallel\n"
                   "m,h,128,1,128,1,0.5,50,50,6400,1\n"
                   "m,h,512,1,128,1,0.5,100,50,6450,1\n"
                   "m,h,512,2,128,1,0.6,200,52,6800,1\n"
                   "m,h,512,16,128,1,0.8,1600,60,9200,1\n";
  test_write_file("toy.csv", pm, strlen(pm));
  struct stk_infer_perf *p;
  char err[STK_ERRMSG_MAX] = "";
  CHECK_MSG(stk_infer_perf_load(&p, "toy.csv", "m", "h", 1, err) == 0, "%s", err);
  return p;
}

/* 10 quiet minutes (one request every 20 s), 10 busy ones (16 a second),
 * 10 quiet again; prompts of 512, 20 tokens out. */
static __attribute__((unused)) struct stk_infer_trace peak_trace(void) {
  static struct stk_infer_req rq[12000];
  size_t n = 0;
  for (double t = 0; t < 1800;) {
    int peak = t >= 600 && t < 1200;
    rq[n++] = (struct stk_infer_req){t, 512, 20};
    t += peak ? 0.0625 : 20;
  }
  return (struct stk_infer_trace){rq, n, rq[n - 1].t, 512, 20};
}

/* 4 replicas on 2 GPUs each over the trace's 30 minutes, lending beyond
 * 25% headroom, a replica starting in 30 s. */
static __attribute__((unused)) struct stk_infer_opts lend_opts(void) {
  struct stk_infer_opts o;
  memset(&o, 0, sizeof o);
  o.replicas = 4;
  o.tp = 2;
  o.horizon = 1800;
  o.lend = 1;
  o.headroom = 0.25;
  o.start_s = 30;
  return o;
}

#endif
