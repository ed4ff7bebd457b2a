/* stoker sim --pollux-table: the Pollux OSDI'21 artifact's eight workloads per
 * policy and load beside its published mean JCTs. */
#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd_sim.h"

static int cmp_str(const void *x, const void *y) {
  return strcmp(*(char *const *)x, *(char *const *)y);
}

/* The CSV files of a directory, sorted by name (workload-1 .. workload-8
 * keep their numeric order for up to nine files). */
int simj_list_csv(const char *dir, char ***out, size_t *n) {
  DIR *d = opendir(dir);
  if (!d) {
    cli_error("sim", "%s: cannot open: %s", dir, strerror(errno));
    return -1;
  }
  char **v = NULL;
  size_t m = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (l < 5 || strcmp(e->d_name + l - 4, ".csv")) continue;
    char **nv = realloc(v, sizeof *v * (m + 1));
    if (!nv) break;
    v = nv;
    v[m] = malloc(strlen(dir) + l + 2);
    if (!v[m]) break;
    sprintf(v[m], "%s/%s", dir, e->d_name);
    m++;
  }
  closedir(d);
  if (!m) {
    cli_error("sim", "%s: no .csv job lists", dir);
    free(v);
    return -1;
  }
  qsort(v, m, sizeof *v, cmp_str);
  *out = v;
  *n = m;
  return 0;
}

const char *simj_pollux_dir(const struct jobs_args *a, char *buf, size_t cap) {
  if (a->pollux_dir) return a->pollux_dir;
  const char *env = getenv("STOKER_DATA");
  if (env && *env) {
    snprintf(buf, cap, "%s/pollux", env);
    if (simj_is_dir(buf)) return buf;
  }
  snprintf(buf, cap, "../shared/data/pollux");
  if (simj_is_dir(buf)) return buf;
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = 0;
    snprintf(buf, cap, "%.3900s/../../shared/data/pollux", dirname(exe));
    if (simj_is_dir(buf)) return buf;
  }
  return NULL;
}

/* --pollux-table: the eight workloads per policy and load beside the
 * artifact's published means. The header names the configuration run; a
 * workload whose jobs did not all finish is never averaged over its
 * finished jobs alone: its cell is a marked lower bound (jobs still
 * running or waiting at the horizon) or '-' (jobs that can never run), and
 * its row is not compared with the published figures. */
void simj_pollux_table(const struct jobs_args *a, const struct stk_sim_jobs_result *res) {
  unsigned nodes = simj_nodes(a), gpn = simj_gpn(a);
  double iv = a->o.interval > 0 ? a->o.interval : 60;
  double rd = a->o.restart_delay == 0 ? 30 : a->o.restart_delay < 0 ? 0 : a->o.restart_delay;
  printf("Average JCT (s) of the Pollux OSDI'21 artifact's workloads beside its published "
         "results-jobload\n");
  printf("simulated: %u node%s x %u GPU%s, %g s rounds, ", nodes, nodes == 1 ? "" : "s", gpn,
         gpn == 1 ? "" : "s", iv);
  if (rd > 0)
    printf("%g s restarts", rd);
  else
    printf("no restart delay");
  if (a->o.power_cap_w > 0)
    printf(", power cap %g W (%d GPUs can work)", a->o.power_cap_w,
           simj_cap_gpus(a, (int)(nodes * gpn)));
  if (a->o.horizon > 0) printf(", horizon %g s", a->o.horizon);
  printf("\n");
  printf("published: 16 nodes x 4 GPUs, 60 s rounds, 30 s restarts\n");
  char diff[96] = "";
  if (nodes != 16 || gpn != 4) strcat(diff, ", cluster");
  if (iv != 60) strcat(diff, ", rounds");
  if (rd != 30) strcat(diff, ", restarts");
  if (a->o.power_cap_w > 0) strcat(diff, ", power cap");
  if (*diff)
    printf("note: this run differs in %s; the diff columns compare unlike configurations\n",
           diff + 2);
  printf("%-9s %4s", "policy", "load");
  for (int w = 1; w <= 8; w++) printf("  %7s%d", "w", w);
  printf("  %8s %9s %7s %8s %11s\n", "mean", "published", "diff %", "max |w|%", "jobs done");
  int marked = 0;
  size_t nfiles = a->nloads * 8;
  for (size_t p = 0; p < a->npolicies; p++)
    for (size_t l = 0; l < a->nloads; l++) {
      double sum = 0, worst = 0;
      size_t jobs = 0, done = 0, never = 0, left = 0;
      printf("%-9s %4.1f", a->policies[p], a->loads[l]);
      for (int w = 0; w < 8; w++) {
        const struct stk_sim_jobs_result *x = &res[p * nfiles + l * 8 + (size_t)w];
        jobs += x->jobs;
        done += x->completed;
        never += x->too_large;
        left += x->unfinished;
        char cell[32];
        if (x->too_large)
          snprintf(cell, sizeof cell, "-");
        else if (x->unfinished)
          snprintf(cell, sizeof cell, ">%.1f", x->jct_mean_bound);
        else
          snprintf(cell, sizeof cell, "%.1f", x->jct_mean);
        printf("  %8s", cell);
        sum += x->too_large ? 0 : x->unfinished ? x->jct_mean_bound : x->jct_mean;
        double pub = stk_sim_jobs_published(a->policies[p], a->loads[l], w + 1);
        if (isfinite(pub) && fabs(x->jct_mean / pub - 1) > worst)
          worst = fabs(x->jct_mean / pub - 1);
      }
      double pub = stk_sim_jobs_published(a->policies[p], a->loads[l], 0);
      char mean[32], jd[40];
      if (never)
        snprintf(mean, sizeof mean, "-");
      else
        snprintf(mean, sizeof mean, "%s%.1f", left ? ">" : "", sum / 8);
      snprintf(jd, sizeof jd, "%zu/%zu", done, jobs);
      printf("  %8s", mean);
      if (done == jobs && isfinite(pub))
        printf(" %9.1f %+7.1f %8.1f", pub, 100 * (sum / 8 / pub - 1), 100 * worst);
      else if (isfinite(pub))
        printf(" %9.1f %7s %8s", pub, "-", "-");
      else
        printf(" %9s %7s %8s", "-", "-", "-");
      printf(" %11s\n", jd);
      if (done < jobs) marked = 1;
    }
  if (!marked) return;
  for (size_t p = 0; p < a->npolicies; p++)
    for (size_t l = 0; l < a->nloads; l++) {
      size_t jobs = 0, done = 0, never = 0, left = 0;
      for (int w = 0; w < 8; w++) {
        const struct stk_sim_jobs_result *x = &res[p * nfiles + l * 8 + (size_t)w];
        jobs += x->jobs;
        done += x->completed;
        never += x->too_large;
        left += x->unfinished;
      }
      if (done == jobs) continue;
      printf("%s load %.1f: %zu of %zu jobs finished", a->policies[p], a->loads[l], done, jobs);
      if (never)
        printf("; %zu never run (they ask for more GPUs than the cluster%s allows)", never,
               a->o.power_cap_w > 0 ? " or its power cap" : "");
      if (left)
        printf("; %zu had not finished at the horizon (%g s)", left,
               a->o.horizon > 0 ? a->o.horizon : 1e8);
      printf("\n");
    }
  printf("> marks a lower bound (an unfinished job counted until the run stopped), - a workload "
         "with jobs that never run; rows with either are not compared with the published "
         "figures\n");
}

