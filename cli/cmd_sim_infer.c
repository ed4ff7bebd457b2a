/* stoker sim infer: an LLM inference service (Azure's 2023 traces timed by
 * Splitwise's performance model) beside training jobs on one cluster, and
 * a policy that lends the service's GPUs to training off-peak
 * (docs/sim_infer.md). */
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cmd_sim_infer.h"
#include "stoker/infer.h"
#include "stoker/mig.h"
#include "stoker/sim.h"

struct iargs {
  const char *trace, *perf, *model, *hw, *jobs, *policy, *traces, *mig;
  unsigned nodes, gpn;
  int study;
  struct stk_infer_opts o;
};

static int parse(struct iargs *a, int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    const char *s = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    uint64_t u;
    int used = 1, rc = 0;
    if (!strcmp(s, "--lend")) {
      a->o.lend = 1;
      used = 0;
    } else if (!strcmp(s, "--study")) {
      a->study = 1;
      used = 0;
    } else if (!v) {
      cli_error("sim", "infer: unexpected argument '%s'; `stoker help sim` lists the options", s);
      return -1;
    } else if (!strcmp(s, "--trace")) a->trace = v;
    else if (!strcmp(s, "--perf")) a->perf = v;
    else if (!strcmp(s, "--model")) a->model = v;
    else if (!strcmp(s, "--hardware")) a->hw = v;
    else if (!strcmp(s, "--jobs")) a->jobs = v;
    else if (!strcmp(s, "--job-policy")) a->policy = v;
    else if (!strcmp(s, "--traces")) a->traces = v;
    else if (!strcmp(s, "--mig")) a->mig = v;
    else if (!strcmp(s, "--mig-delay")) {
      rc = cli_double("sim", s, v, 0, 1e5, &a->o.mig_delay_s);
      if (!rc && a->o.mig_delay_s == 0) a->o.mig_delay_s = -1; /* the library's "none" */
    }
    else if (!strcmp(s, "--tp")) {
      if (!(rc = cli_u64("sim", s, v, 1, 64, &u))) a->o.tp = (unsigned)u;
    } else if (!strcmp(s, "--replicas")) {
      if (!(rc = cli_u64("sim", s, v, 1, 4096, &u))) a->o.replicas = (unsigned)u;
    } else if (!strcmp(s, "--min-replicas")) {
      if (!(rc = cli_u64("sim", s, v, 1, 4096, &u))) a->o.min_replicas = (unsigned)u;
    } else if (!strcmp(s, "--max-batch")) {
      if (!(rc = cli_u64("sim", s, v, 1, 4096, &u))) a->o.max_batch = (unsigned)u;
    } else if (!strcmp(s, "--prefill-tokens")) {
      if (!(rc = cli_u64("sim", s, v, 1, 1 << 24, &u))) a->o.prefill_tokens = (unsigned)u;
    } else if (!strcmp(s, "--scale")) rc = cli_double("sim", s, v, 1e-3, 1e4, &a->o.rate_scale);
    else if (!strcmp(s, "--horizon")) rc = cli_double("sim", s, v, 1, 1e8, &a->o.horizon);
    else if (!strcmp(s, "--ttft")) rc = cli_double("sim", s, v, 1e-3, 1e5, &a->o.ttft_slo_s);
    else if (!strcmp(s, "--tbt")) rc = cli_double("sim", s, v, 1e-4, 1e3, &a->o.tbt_slo_s);
    else if (!strcmp(s, "--headroom")) rc = cli_double("sim", s, v, 0, 100, &a->o.headroom);
    else if (!strcmp(s, "--start")) rc = cli_double("sim", s, v, 0, 1e5, &a->o.start_s);
    else if (!strcmp(s, "--interval")) rc = cli_double("sim", s, v, 1, 86400, &a->o.interval);
    else if (!strcmp(s, "--cluster")) {
      unsigned nn, gg;
      char tail;
      if (sscanf(v, "%ux%u%c", &nn, &gg, &tail) != 2 || nn < 1 || nn > 64 || gg < 1 || gg > 16) {
        cli_error("sim", "--cluster: '%s' is not NODESxGPUS (1..64 x 1..16)", v);
        return -1;
      }
      a->nodes = nn;
      a->gpn = gg;
    } else {
      cli_error("sim", "infer: unexpected argument '%s'; `stoker help sim` lists the options", s);
      return -1;
    }
    if (rc) return -1;
    i += used;
  }
  return 0;
}

static void print_service(const struct stk_infer_result *r, const char *label) {
  printf("%-10s %8.3f%% %7.2f %7.2f %7.3f %7.3f %6.1f%% %9.1f %9.1f\n", label, 100 * r->attain,
         r->ttft_p50, r->ttft_p99, r->tbt_p50, r->tbt_p99, 100 * r->util, r->energy_kwh,
         r->lent_gpu_h);
}

/* --mig PROFILE: the hardware's MIG geometry and the serving profile,
 * which must hold the replica's share of the model's fp16 weights. */
static int setup_mig(struct iargs *a) {
  char hw[64];
  snprintf(hw, sizeof hw, "%s", a->hw);
  char *pcap = strstr(hw, "-pcap"); /* a power-capped GPU has the same geometry */
  if (pcap) *pcap = 0;
  const struct stk_mig_geometry *g = stk_mig_geometry_find(hw);
  if (!g) {
    cli_error("sim", "--mig: %s has no MIG geometry (a100-40gb, a100-80gb, h100-80gb have)", a->hw);
    return -1;
  }
  int pi = stk_mig_profile_find(g, a->mig);
  if (pi < 0) {
    cli_error("sim", "--mig: no profile '%s' on %s (`stoker sim mig --gpu %s` lists them)", a->mig,
              g->name, g->name);
    return -1;
  }
  static const struct {
    const char *model;
    double weights_gb; /* fp16 */
  } sizes[] = {{"llama2-70b", 140}, {"bloom-176b", 352}};
  double mem_gb = (double)g->memory_gb * g->profiles[pi].memory / STK_MIG_MEMORY_SLICES;
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
    if (!strcmp(sizes[i].model, a->model) && sizes[i].weights_gb / a->o.tp > mem_gb) {
      cli_error("sim",
                "--mig %s: %s's weights take %.0f GB per GPU at TP %u (%.0f GB in fp16); the "
                "instance holds %.0f GB",
                g->profiles[pi].name, a->model, sizes[i].weights_gb / a->o.tp, a->o.tp,
                sizes[i].weights_gb, mem_gb);
      return -1;
    }
  a->o.mig = g;
  a->o.mig_serve = pi;
  return 0;
}

/* Training on the cluster with the GPUs the service leaves it, round by
 * round: every GPU less the service's, plus what it lends. */
static int run_training(const struct iargs *a, const struct stk_infer_result *ir,
                        const struct stk_sim_jobs *jobs, unsigned svc_gpus, const char *label) {
  unsigned total = a->nodes * a->gpn;
  uint32_t *series = malloc(sizeof(uint32_t) * (ir->nlent ? ir->nlent : 1));
  if (!series) return -1;
  for (size_t k = 0; k < ir->nlent; k++) series[k] = total - svc_gpus + ir->lent[k];
  struct stk_sim_jobs_opts o;
  memset(&o, 0, sizeof o);
  o.policy = a->policy;
  o.nodes = a->nodes;
  o.gpus_per_node = a->gpn;
  o.interval = a->o.interval;
  o.idle_w = 50; /* A100, as --gpu-model A100 */
  o.busy_w = 400;
  o.price_kwh = 0.1;
  o.usable_series = series;
  o.nusable = ir->nlent;
  struct stk_sim_jobs_result r;
  char err[STK_ERRMSG_MAX] = "";
  int rc = stk_sim_jobs_run(jobs, &o, &r, err);
  free(series);
  if (rc) {
    cli_error("sim", "%s", err);
    return -1;
  }
  double kwh = 0;
  for (size_t i = 0; i < r.nrec; i++) kwh += r.rec[i].energy_kwh;
  printf("%-10s training %s: %zu of %zu jobs done, mean JCT %.2f h, p99 %.2f h, "
         "%.1f%% of the cluster's GPUs allocated, %.1f kWh busy, %llu restarts\n",
         label, r.policy, r.completed, r.jobs, r.jct_mean / 3600, r.jct_p99 / 3600,
         100 * r.util_mean, kwh, (unsigned long long)r.restarts);
  printf("%-10s energy: service %.1f + training %.1f kWh = $%.2f at $0.10/kWh\n", label,
         ir->energy_kwh, kwh, (ir->energy_kwh + kwh) * 0.1);
  stk_sim_jobs_result_free(&r);
  return 0;
}

int cmd_sim_infer(int argc, char **argv) {
  struct iargs a;
  memset(&a, 0, sizeof a);
  a.trace = "code";
  a.model = "llama2-70b";
  a.hw = "a100-80gb";
  a.policy = "pollux";
  a.nodes = 16;
  a.gpn = 4;
  a.o.tp = 4;
  a.o.replicas = 8;
  a.o.interval = 60;
  a.o.headroom = 0.25;
  if (parse(&a, argc, argv)) return CLI_USAGE;
  if (a.mig && setup_mig(&a)) return CLI_USAGE;
  char tbuf[PATH_MAX], pbuf[PATH_MAX];
  const char *tpath = a.trace;
  if (!strcmp(a.trace, "code") || !strcmp(a.trace, "conv")) {
    char rel[96];
    snprintf(rel, sizeof rel, "azure-llm-2023/AzureLLMInferenceTrace_%s.csv", a.trace);
    if (!(tpath = cli_shared_data(tbuf, sizeof tbuf, rel))) {
      cli_error("sim", "--trace %s: ../shared/data/%s (or under $STOKER_DATA) was not found",
                a.trace, rel);
      return CLI_USAGE;
    }
  }
  if (!a.perf && !(a.perf = cli_shared_data(pbuf, sizeof pbuf, "splitwise/perf_model.csv"))) {
    cli_error("sim", "--perf: no FILE given and ../shared/data/splitwise/perf_model.csv (or under "
                     "$STOKER_DATA) was not found");
    return CLI_USAGE;
  }
  unsigned svc_gpus = a.o.replicas * a.o.tp;
  if (a.jobs && svc_gpus > a.nodes * a.gpn) {
    cli_error("sim", "infer: %u replicas x TP %u need %u GPUs; the cluster (--cluster) has %u",
              a.o.replicas, a.o.tp, svc_gpus, a.nodes * a.gpn);
    return CLI_USAGE;
  }
  char err[STK_ERRMSG_MAX] = "";
  struct stk_infer_perf *perf = NULL;
  struct stk_infer_trace *tr = NULL;
  struct stk_sim_apps *apps = NULL;
  struct stk_sim_jobs *jobs = NULL;
  int ret = CLI_FAIL;
  if (stk_infer_perf_load(&perf, a.perf, a.model, a.hw, a.o.tp, err) ||
      stk_infer_trace_load(&tr, tpath, err)) {
    cli_error("sim", "%s", err);
    goto out;
  }
  if (a.jobs) {
    char dbuf[PATH_MAX], jb[PATH_MAX];
    if (!a.traces) { /* the Pollux artifact's layout: workloads/../traces */
      snprintf(jb, sizeof jb, "%s", a.jobs);
      snprintf(dbuf, sizeof dbuf, "%.4000s/../traces", dirname(jb));
      a.traces = dbuf;
    }
    if (stk_sim_apps_load(&apps, a.traces, err) || stk_sim_jobs_load(&jobs, apps, a.jobs, err)) {
      cli_error("sim", "%s", err);
      goto out;
    }
  }
  printf("service: %s on %s, %u replicas x TP %u (%u GPUs), max batch %u; %s x%g, %zu requests "
         "an hour as recorded (mean prompt %.0f, generated %.0f tokens)\n",
         a.model, a.hw, a.o.replicas, a.o.tp, svc_gpus, a.o.max_batch ? a.o.max_batch : 16,
         tpath, a.o.rate_scale ? a.o.rate_scale : 1,
         (size_t)(tr->n * 3600 / (tr->span > 0 ? tr->span : 3600)), tr->mean_prompt, tr->mean_gen);
  double headrooms[] = {0, 0.1, 0.25, 0.5, 1, 2};
  /* a study with --mig: each headroom lending whole replicas, then on MIG */
  int nrun = a.study ? (a.mig ? 13 : 7) : 1;
  double best_h = -1, best_lent = 0, best_mh = -1, best_mlent = 0;
  for (int k = 0; k < nrun; k++) {
    struct stk_infer_opts o = a.o;
    char label[32];
    if (a.study) {
      o.lend = k > 0;
      if (k > 0) o.headroom = headrooms[(k - 1) % 6];
      if (k <= 6) o.mig = NULL;
    }
    if (!o.lend)
      snprintf(label, sizeof label, "keep all");
    else
      snprintf(label, sizeof label, "%s +%.0f%%", o.mig ? "mig" : "lend", 100 * o.headroom);
    struct stk_infer_result r;
    if (stk_infer_run(perf, tr, &o, &r, err)) {
      cli_error("sim", "%s", err);
      goto out;
    }
    if (k == 0) {
      printf("%zu requests over %.0f s; one replica sustains %.2f requests/s within TBT %g s; "
             "targets TTFT <= %g s, TBT <= %g s\n",
             r.requests, o.horizon > 0 ? o.horizon : tr->span / (o.rate_scale ? o.rate_scale : 1),
             r.rate_cap, o.tbt_slo_s ? o.tbt_slo_s : 0.2, o.ttft_slo_s ? o.ttft_slo_s : 5,
             o.tbt_slo_s ? o.tbt_slo_s : 0.2);
      printf("%-10s %9s %7s %7s %7s %7s %7s %9s %9s\n", "policy", "SLO met", "TTFT50", "TTFT99",
             "TBT50", "TBT99", "util", "kWh", "lent GPUh");
    }
    print_service(&r, label);
    if (o.mig && o.lend)
      printf("%-10s on MIG: %.1f of the GPU-hours lent as %u-slice instances beside %s, "
             "one such replica sustains %.2f requests/s, %llu GPU reconfigurations\n",
             label, r.lent_mig_gpu_h, STK_MIG_COMPUTE_SLICES - o.mig->profiles[o.mig_serve].compute,
             o.mig->profiles[o.mig_serve].name, r.rate_cap_mig, (unsigned long long)r.reconfigs);
    double *bl = o.mig ? &best_mlent : &best_lent, *bh = o.mig ? &best_mh : &best_h;
    if (o.lend && r.attain >= 0.99 && r.lent_gpu_h > *bl) {
      *bl = r.lent_gpu_h;
      *bh = o.headroom;
    }
    if (jobs && o.mig && o.lend)
      printf("%-10s training gets the whole GPUs lent only: the job engine places whole GPUs, "
             "not MIG instances\n",
             label);
    if (jobs && run_training(&a, &r, jobs, svc_gpus, label)) {
      stk_infer_result_free(&r);
      goto out;
    }
    stk_infer_result_free(&r);
  }
  if (a.study) {
    if (best_h >= 0)
      printf("most lent at >= 99%% SLO attainment: %.1f GPU-hours (headroom %.0f%%)\n", best_lent,
             100 * best_h);
    else
      printf("no lending run kept 99%% SLO attainment\n");
    if (a.mig && best_mh >= 0)
      printf("on MIG (%s): %.1f GPU-hours (headroom %.0f%%)\n", a.mig, best_mlent, 100 * best_mh);
    else if (a.mig)
      printf("on MIG (%s): no lending run kept 99%% SLO attainment\n", a.mig);
  }
  ret = CLI_OK;
out:
  stk_sim_jobs_free(jobs);
  stk_sim_apps_free(apps);
  stk_infer_trace_free(tr);
  stk_infer_perf_free(perf);
  return ret;
}
