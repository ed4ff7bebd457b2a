/* stoker sim mig --online [TRACE]: requests for MIG instances replayed over
 * time on a cluster of MIG GPUs under FIFO, MIG-aware placement with
 * reconfiguration and the multi-objective policy (docs/sim-mig-online.md). */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli.h"
#include "cmd_sim_mig.h"
#include "stoker/mig_online.h"

/* "openb" and "philly" name the shared traces; anything else is a path. */
static const char *trace_path(const char *arg, char *buf, size_t cap) {
  const char *rel = NULL;
  if (!strcmp(arg, "openb")) rel = "openb/openb_pod_list_default.csv";
  if (!strcmp(arg, "philly")) rel = "philly/philly.csv";
  if (!rel) return arg;
  return cli_shared_data(buf, cap, rel);
}

static void print_mix(const struct stk_mig_geometry *g, const struct stk_mig_trace *t) {
  size_t multi = 0;
  for (size_t i = 0; i < t->n; i++) multi += t->req[i].count > 1;
  printf("  requests by profile:");
  for (size_t p = 0; p < g->nprofiles && p < 16; p++)
    if (t->by_profile[p]) printf(" %s %zu", g->profiles[p].name, t->by_profile[p]);
  printf(" (%zu of them several whole GPUs)\n", multi);
}

int cmd_sim_mig_online(int argc, char **argv) {
  const char *gpu = "a100-80gb", *trace = "openb", *policies = "fifo,fifo-reconf,mig-aware,multi";
  const char *one = "2g";
  uint64_t gpus = 64, window = 0;
  double compress = 1, delay = -1, wf = 0, ww = 0, wr = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int more = i + 1 < argc;
    if (!strcmp(a, "--online")) {
      if (more && argv[i + 1][0] != '-') trace = argv[++i];
    } else if (!strcmp(a, "--gpu") && more) {
      gpu = argv[++i];
    } else if (!strcmp(a, "--gpus") && more) {
      if (cli_u64("sim", "--gpus", argv[++i], 1, 100000, &gpus)) return CLI_USAGE;
    } else if (!strcmp(a, "--mig-policy") && more) {
      policies = argv[++i];
    } else if (!strcmp(a, "--compress") && more) {
      if (cli_double("sim", "--compress", argv[++i], 1, 1e9, &compress)) return CLI_USAGE;
    } else if (!strcmp(a, "--delay") && more) {
      if (cli_double("sim", "--delay", argv[++i], 0, 86400, &delay)) return CLI_USAGE;
    } else if (!strcmp(a, "--one-gpu") && more) {
      one = argv[++i];
    } else if (!strcmp(a, "--window") && more) {
      if (cli_u64("sim", "--window", argv[++i], 1, 1000000, &window)) return CLI_USAGE;
    } else if (!strcmp(a, "--weights") && more) {
      char tail;
      if (sscanf(argv[++i], "%lf,%lf,%lf%c", &wf, &ww, &wr, &tail) != 3 || !(wf > 0) ||
          !(ww >= 0) || !(wr >= 0) || wf > 1e6 || ww > 1e6 || wr > 1e6) {
        cli_error("sim", "--weights: '%s' is not FRAG,WAIT,RECONF with FRAG > 0 and the others "
                         ">= 0",
                  argv[i]);
        return CLI_USAGE;
      }
    } else {
      cli_error("sim", "mig --online: unexpected argument '%s'; `stoker help sim` lists the "
                       "options",
                a);
      return CLI_USAGE;
    }
  }
  const struct stk_mig_geometry *g = stk_mig_geometry_find(gpu);
  if (!g) {
    cli_error("sim", "--gpu: no MIG geometry '%s' (a100-40gb, a100-80gb, h100-80gb)", gpu);
    return CLI_USAGE;
  }
  int one_p = stk_mig_profile_find(g, one);
  if (one_p < 0) {
    cli_error("sim", "--one-gpu: no profile '%s' on %s", one, g->name);
    return CLI_USAGE;
  }
  enum stk_mig_policy pol[4];
  size_t npol = 0;
  char pbuf[256];
  snprintf(pbuf, sizeof pbuf, "%s", policies);
  char *save = NULL;
  for (char *p = strtok_r(pbuf, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
    if (npol == 4 || stk_mig_policy_parse(p, &pol[npol])) {
      cli_error("sim", "--mig-policy: '%s' is not fifo, fifo-reconf, mig-aware or multi (a list "
                       "of up to 4)",
                p);
      return CLI_USAGE;
    }
    npol++;
  }
  if (!npol) {
    cli_error("sim", "--mig-policy: empty list");
    return CLI_USAGE;
  }
  char buf[4200];
  const char *path = trace_path(trace, buf, sizeof buf);
  if (!path) {
    cli_error("sim", "--online %s: ../shared/data (or $STOKER_DATA) was not found; give a path",
              trace);
    return CLI_USAGE;
  }
  char err[STK_ERRMSG_MAX];
  struct stk_mig_trace *t;
  if (stk_mig_trace_load(&t, g, path, one_p, compress, err)) {
    cli_error("sim", "%s", err);
    return CLI_FAIL;
  }
  printf("MIG online: %s, %zu GPU requests on %llu x %s, arrivals compressed %gx, instance "
         "creation %g s\n",
         path, t->n, (unsigned long long)gpus, g->name, compress,
         delay < 0 ? STK_MIG_RECONFIG_DELAY_S : delay);
  if (t->openb)
    printf("  mapping: a fraction f of one GPU -> the smallest profile with compute slices >= "
           "7f and memory slices >= 8f; k whole GPUs -> k x %s\n",
           g->profiles[stk_mig_profile_for(g, 1000)].name);
  else
    printf("  mapping: a one-GPU job -> %s (--one-gpu), a k-GPU job -> k x %s\n",
           g->profiles[one_p].name, g->profiles[stk_mig_profile_for(g, 1000)].name);
  print_mix(g, t);
  printf("%-12s %8s %8s %8s %8s %8s %7s %7s %7s %7s %10s %10s %8s %8s\n", "policy", "alloc%",
         "demand%", "alloc%", "demand%", "alloc%", "time%", "started", "reject", "waiting",
         "mean wait", "max wait", "created", "reconfig");
  printf("%-12s %17s %17s %16s %23s %10s %10s\n", "", "(while arriving)", "(to the end)",
         "(queue not empty)", "", "s", "s");
  int rc = CLI_OK;
  for (size_t k = 0; k < npol; k++) {
    struct stk_mig_online_opts o = {0, g, (unsigned)gpus, pol[k], delay, wf, ww, wr,
                                    (unsigned)window, NULL};
    struct stk_mig_online_result r;
    if (stk_mig_online_run(t, &o, &r, err)) {
      cli_error("sim", "%s", err);
      rc = CLI_FAIL;
      break;
    }
    /* no span of arrivals or no queue: nothing to measure there */
    char arr[2][16] = {"-", "-"}, back[16] = "-";
    if (r.last > r.first) {
      snprintf(arr[0], sizeof arr[0], "%.1f", 100 * r.alloc_arriving);
      snprintf(arr[1], sizeof arr[1], "%.1f", 100 * r.demand_arriving);
    }
    if (r.backlog_time > 0) snprintf(back, sizeof back, "%.1f", 100 * r.alloc_backlog);
    printf("%-12s %8s %8s %8.1f %8.1f %8s %7.1f %7zu %7zu %7zu %10.0f %10.0f %8zu %8zu\n",
           stk_mig_policy_name(pol[k]), arr[0], arr[1], 100 * r.alloc_all, 100 * r.demand_all,
           back, 100 * r.backlog_time, r.started, r.rejected, r.waiting, r.mean_wait, r.max_wait,
           r.created, r.reconfigs);
  }
  stk_mig_trace_free(t);
  return rc;
}
