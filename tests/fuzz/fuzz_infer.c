/* Fuzz target for inference's inputs: the input is split at "@@\n" into a
 * Splitwise perf_model.csv and an Azure LLM trace (a missing part takes a
 * fixed default). What loads is served for one pass of the trace, with and
 * without lending, and lending on MIG instances (a100-80gb, 4g). Malformed
 * rows must give an error naming file and line, never a crash, a read past
 * a buffer or an endless run. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stoker/infer.h"
#include "stoker/mig.h"

static char dir[64];

static void put(const char *name, const void *d, size_t n) {
  char p[160];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "wb");
  if (!f) abort();
  if (n && fwrite(d, 1, n, f) != n) abort();
  fclose(f);
}

static void cleanup(void) {
  char p[160];
  snprintf(p, sizeof p, "%s/perf.csv", dir);
  unlink(p);
  snprintf(p, sizeof p, "%s/trace.csv", dir);
  unlink(p);
  rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!dir[0]) {
    snprintf(dir, sizeof dir, "/tmp/stoker-fuzz-infer.XXXXXX");
    if (!mkdtemp(dir)) abort();
    atexit(cleanup);
  }
  static const char *defaults[] = {
      "model,hardware,prompt_size,batch_size,token_size,peak_power,average_power,prompt_time,"
      "token_time,e2e_time,tensor_parallel\nm,h,512,1,128,1,0.5,100,40,5000,1\n"
      "m,h,512,4,128,1,0.6,300,45,6000,1\n",
      "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9,100,5\n"};
  const char *names[] = {"perf.csv", "trace.csv"};
  size_t at = 0;
  for (int part = 0; part < 2; part++) {
    const uint8_t *end = NULL;
    for (size_t i = at; i + 3 <= size; i++)
      if (!memcmp(data + i, "@@\n", 3)) {
        end = data + i;
        break;
      }
    size_t len = end ? (size_t)(end - (data + at)) : size - at;
    if (at < size && (len || end))
      put(names[part], data + at, len);
    else
      put(names[part], defaults[part], strlen(defaults[part]));
    at = end ? (size_t)(end - data) + 3 : size;
  }
  char p1[160], p2[160], err[512];
  snprintf(p1, sizeof p1, "%s/perf.csv", dir);
  snprintf(p2, sizeof p2, "%s/trace.csv", dir);
  struct stk_infer_perf *perf = NULL;
  struct stk_infer_trace *t = NULL;
  if (stk_infer_perf_load(&perf, p1, "m", "h", 1, err) == 0 &&
      stk_infer_trace_load(&t, p2, err) == 0 && t->n <= 2000 && t->span <= 1e6) {
    for (int lend = 0; lend < 3; lend++) {
      struct stk_infer_opts o;
      memset(&o, 0, sizeof o);
      o.replicas = 3;
      o.max_batch = 4;
      o.lend = lend > 0;
      if (lend == 2) {
        o.tp = 2;
        o.mig = stk_mig_geometry_find("a100-80gb");
        o.mig_serve = stk_mig_profile_find(o.mig, "4g");
      }
      struct stk_infer_result r;
      if (stk_infer_run(perf, t, &o, &r, err) == 0) {
        if (r.requests > t->n + 1 || !(r.attain >= 0 && r.attain <= 1)) abort();
        for (size_t i = 0; i < r.requests; i++)
          if (!(r.e2e[i] >= 0) || !isfinite(r.e2e[i])) abort();
        if (!(r.lent_mig_gpu_h >= 0 && r.lent_mig_gpu_h <= r.lent_gpu_h + 1e-9) ||
            (!o.mig && r.reconfigs))
          abort();
        stk_infer_result_free(&r);
      }
    }
  }
  stk_infer_trace_free(t);
  stk_infer_perf_free(perf);
  return 0;
}
