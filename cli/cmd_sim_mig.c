/* stoker sim mig: NVIDIA MIG geometry (profiles, start slots, how many
 * layouts each GPU allows) and ParvaGPU's six SLO scenarios planned by the
 * artifact's method and by stoker's packed allocator (docs/sim-mig.md). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cmd_sim_mig.h"
#include "stoker/mig.h"

static void print_geometry(const struct stk_mig_geometry *g) {
  printf("%s (%s): %d compute slices, %d memory slices of %u GB\n", g->name, g->product,
         STK_MIG_COMPUTE_SLICES, STK_MIG_MEMORY_SLICES, g->memory_gb / STK_MIG_MEMORY_SLICES);
  printf("  %-12s %7s %6s  %s\n", "profile", "compute", "memory", "start slots");
  for (size_t i = 0; i < g->nprofiles; i++) {
    const struct stk_mig_profile *p = &g->profiles[i];
    printf("  %-12s %7u %6u  ", p->name, p->compute, p->memory);
    for (unsigned s = 0; s < p->nstarts; s++) printf("%s%u", s ? "," : "", p->starts[s]);
    printf("\n");
  }
  uint32_t base = 0;
  for (size_t i = 0; i < g->nprofiles; i++)
    if (!g->profiles[i].media && (g->profiles[i].compute > 1 || g->profiles[i].memory == 1))
      base |= 1u << i;
  uint64_t all, max, all2, max2;
  stk_mig_count_layouts(g, base, &all, &max);
  stk_mig_count_layouts(g, (1u << g->nprofiles) - 1, &all2, &max2);
  printf("  layouts: %llu maximal of %llu (1g with one memory slice, 2g..7g); %llu maximal of "
         "%llu with every profile\n",
         (unsigned long long)max, (unsigned long long)all - 1, (unsigned long long)max2,
         (unsigned long long)all2 - 1);
}

static const char *find_dir(char *buf, size_t cap) {
  if (!cli_shared_data(buf, cap, "parvagpu/SLO/SLO_req_rate.csv")) return NULL;
  char *slo = strstr(buf, "/SLO/SLO_req_rate.csv");
  *slo = 0;
  return buf;
}

static void print_map(const struct stk_parva *p, const struct stk_parva_plan *pl) {
  for (size_t i = 0; i < pl->nseg; i++) {
    const struct stk_parva_segment *s = &pl->seg[i];
    printf("    gpu %-3u %-12s %ug@%u  batch %-3u x%u procs  %8.1f req/s  %7.1f ms\n", s->gpu,
           stk_parva_model(p, s->model), s->size, s->start, s->batch, s->procs, s->rate,
           s->latency_ms);
  }
}

int cmd_sim_mig(int argc, char **argv) {
  const char *gpu = NULL, *dir = NULL, *alloc = "both";
  unsigned scen = 0;
  int map = 0, parva = 0;
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--online")) return cmd_sim_mig_online(argc, argv);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int more = i + 1 < argc;
    if (!strcmp(a, "--gpu") && more)
      gpu = argv[++i];
    else if (!strcmp(a, "--parvagpu")) {
      parva = 1;
      if (more && argv[i + 1][0] != '-') dir = argv[++i];
    } else if (!strcmp(a, "--scenario") && more) {
      uint64_t v;
      if (cli_u64("sim", "--scenario", argv[++i], 1, 64, &v)) return CLI_USAGE;
      scen = (unsigned)v;
    } else if (!strcmp(a, "--allocator") && more)
      alloc = argv[++i];
    else if (!strcmp(a, "--map"))
      map = 1;
    else {
      cli_error("sim", "mig: unexpected argument '%s'; `stoker help sim` lists the options", a);
      return CLI_USAGE;
    }
  }
  if (strcmp(alloc, "artifact") && strcmp(alloc, "packed") && strcmp(alloc, "both")) {
    cli_error("sim", "--allocator: '%s' is not artifact, packed or both", alloc);
    return CLI_USAGE;
  }
  if (!parva) {
    if (scen || map) {
      cli_error("sim", "mig: --scenario and --map need --parvagpu");
      return CLI_USAGE;
    }
    for (size_t i = 0; i < stk_mig_geometry_count(); i++) {
      const struct stk_mig_geometry *g = stk_mig_geometry_at(i);
      if (gpu && g != stk_mig_geometry_find(gpu)) continue;
      print_geometry(g);
    }
    if (gpu && !stk_mig_geometry_find(gpu)) {
      cli_error("sim", "--gpu: no MIG geometry '%s' (a100-40gb, a100-80gb, h100-80gb)", gpu);
      return CLI_USAGE;
    }
    return CLI_OK;
  }
  if (gpu && strcasecmp(gpu, "a100-80gb")) {
    cli_error("sim", "--gpu: ParvaGPU's profiles were measured on the a100-80gb, not '%s'", gpu);
    return CLI_USAGE;
  }
  char buf[PATH_MAX];
  if (!dir && !(dir = find_dir(buf, sizeof buf))) {
    cli_error("sim", "--parvagpu: no DIR given and ../shared/data/parvagpu (or "
                     "$STOKER_DATA/parvagpu) was not found");
    return CLI_USAGE;
  }
  char err[STK_ERRMSG_MAX];
  struct stk_parva *p;
  if (stk_parva_load(&p, dir, err)) {
    cli_error("sim", "%s", err);
    return CLI_FAIL;
  }
  unsigned first = scen ? scen : 1, last = scen ? scen : stk_parva_scenarios(p);
  if (scen > stk_parva_scenarios(p)) {
    cli_error("sim", "--scenario: %u, but %s has %u", scen, dir, stk_parva_scenarios(p));
    stk_parva_free(p);
    return CLI_USAGE;
  }
  printf("ParvaGPU on %s: %u models, A100 80GB (MIG), latency under SLO / 2 x 0.9\n", dir,
         stk_parva_models(p));
  printf("%-8s %-9s %5s %7s %6s %10s  %s\n", "scenario", "allocator", "GPUs", "slices", "bound",
         "published", "check");
  /* the published counts belong to the artifact's own 11 models and 6 scenarios */
  int artifact_data = stk_parva_models(p) == 11 && stk_parva_scenarios(p) == 6;
  int rc = CLI_OK;
  for (unsigned s = first; s <= last; s++)
    for (int m = 0; m < 2; m++) {
      if ((m == 0 && !strcmp(alloc, "packed")) || (m == 1 && !strcmp(alloc, "artifact")))
        continue;
      struct stk_parva_plan pl;
      if (stk_parva_plan(p, s, m ? STK_PARVA_PACKED : STK_PARVA_ARTIFACT, &pl, err)) {
        cli_error("sim", "%s", err);
        rc = CLI_FAIL;
        continue;
      }
      char why[STK_ERRMSG_MAX];
      int bad = stk_parva_check(p, &pl, why);
      char pub[16] = "-";
      if (artifact_data && stk_parva_published_gpus(s)) snprintf(pub, sizeof pub, "%u", stk_parva_published_gpus(s));
      printf("%-8u %-9s %5u %7u %6u %10s  %s\n", s, m ? "packed" : "artifact", pl.gpus,
             pl.slices, pl.lower_bound, pub, bad ? why : "ok: every SLO met");
      if (bad) rc = CLI_FAIL;
      if (map) print_map(p, &pl);
      stk_parva_plan_free(&pl);
    }
  stk_parva_free(p);
  return rc;
}
