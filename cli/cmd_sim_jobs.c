/* stoker sim --jobs and --pollux-table: jobs over time, each job list x
 * policy run on a pool of threads, reported as text, JSON, CSV and SVG. */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd_sim.h"

struct jrun {
  const struct stk_sim_jobs *jobs;
  char label[160];
  const char *policy;
  double load;
  int workload;
  struct stk_sim_jobs_result res;
  int rc;
  char err[STK_ERRMSG_MAX];
};

struct jpool {
  struct jrun *runs;
  size_t n, next, done;
  const struct stk_sim_jobs_opts *o;
  int progress;
  pthread_mutex_t mu;
};

static void *jworker(void *arg) {
  struct jpool *p = arg;
  for (;;) {
    pthread_mutex_lock(&p->mu);
    size_t i = p->next < p->n && !cli_stop_requested() ? p->next++ : SIZE_MAX;
    pthread_mutex_unlock(&p->mu);
    if (i == SIZE_MAX) return NULL;
    struct jrun *r = &p->runs[i];
    struct stk_sim_jobs_opts o = *p->o;
    o.policy = r->policy;
    r->rc = stk_sim_jobs_run(r->jobs, &o, &r->res, r->err);
    pthread_mutex_lock(&p->mu);
    p->done++;
    if (p->progress) fprintf(stderr, "\rsim: %zu/%zu runs", p->done, p->n);
    pthread_mutex_unlock(&p->mu);
  }
}

static void jobs_progress(void *ctx, double now, size_t done, size_t total) {
  (void)ctx;
  fprintf(stderr, "\rsim: day %.1f, %zu/%zu jobs done", now / 86400, done, total);
}

int cmd_sim_jobs(int argc, char **argv) {
  struct jobs_args a;
  memset(&a, 0, sizeof a);
  int rc = CLI_USAGE;
  char err[STK_ERRMSG_MAX];
  struct stk_sim_apps *apps = NULL;
  struct stk_sim_jobs **lists = NULL;
  char **files = NULL;
  size_t nfiles = 0, nruns = 0;
  struct jrun *runs = NULL;
  const char **labels = NULL;
  char pbuf[PATH_MAX], tbuf[PATH_MAX + 16];
  if (simj_parse(&a, argc, argv)) goto out;
  rc = CLI_FAIL;
  if (a.carbon_file && simj_load_carbon(&a)) goto out;
  if (!a.npolicies) {
    if (a.table) {
      a.policies[0] = "tiresias";
      a.policies[1] = "optimus";
      a.policies[2] = "pollux";
      a.npolicies = 3;
    } else {
      a.policies[a.npolicies++] = "tiresias";
    }
  }
  const char *pdir = NULL;
  if (a.table) {
    pdir = simj_pollux_dir(&a, pbuf, sizeof pbuf);
    if (!pdir) {
      cli_error("sim", "--pollux-table: the artifact's inputs were not found in "
                       "../shared/data/pollux (or $STOKER_DATA/pollux); pass --pollux-dir DIR");
      rc = CLI_USAGE;
      goto out;
    }
    if (!a.nloads) {
      a.loads[0] = 0.5;
      a.loads[1] = 1;
      a.loads[2] = 1.5;
      a.loads[3] = 2;
      a.nloads = 4;
    }
    files = calloc(a.nloads * 8, sizeof *files);
    if (!files) goto out;
    for (size_t l = 0; l < a.nloads; l++)
      for (int w = 1; w <= 8; w++) {
        char p[PATH_MAX + 64];
        if (a.loads[l] == 1)
          snprintf(p, sizeof p, "%.3900s/workloads/workload-%d.csv", pdir, w);
        else
          snprintf(p, sizeof p, "%.3900s/workloads-%.1f/workload-%d.csv", pdir, a.loads[l], w);
        files[nfiles++] = strdup(p);
      }
  } else {
    for (size_t i = 0; i < a.njobs; i++) {
      if (simj_is_dir(a.jobs[i])) {
        char **v;
        size_t m;
        if (simj_list_csv(a.jobs[i], &v, &m)) goto out;
        char **nf = realloc(files, sizeof *files * (nfiles + m));
        if (!nf) goto out;
        files = nf;
        for (size_t k = 0; k < m; k++) files[nfiles++] = v[k];
        free(v);
      } else {
        char **nf = realloc(files, sizeof *files * (nfiles + 1));
        if (!nf) goto out;
        files = nf;
        files[nfiles++] = strdup(a.jobs[i]);
      }
    }
  }
  /* the application measurements: --traces, the artifact's layout next to
   * the job list (DIR/../traces), or the shared data */
  const char *traces = a.traces;
  if (!traces && pdir) {
    snprintf(tbuf, sizeof tbuf, "%.4000s/traces", pdir);
    traces = tbuf;
  }
  if (!traces && nfiles) {
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", files[0]);
    char *d = dirname(tmp);
    snprintf(tbuf, sizeof tbuf, "%.4000s/../traces", d);
    if (simj_is_dir(tbuf)) traces = tbuf;
    else { /* the Sia artifact's workloads/TRACE/workload-N.csv */
      snprintf(tbuf, sizeof tbuf, "%.4000s/../../traces", d);
      if (simj_is_dir(tbuf)) traces = tbuf;
    }
  }
  if (!traces) {
    const char *pd = simj_pollux_dir(&a, pbuf, sizeof pbuf);
    if (pd) {
      snprintf(tbuf, sizeof tbuf, "%.4000s/traces", pd);
      traces = tbuf;
    }
  }
  if (traces && stk_sim_apps_load(&apps, traces, err)) {
    cli_error("sim", "%s", err);
    goto out;
  }
  for (size_t t = 0; t < a.ntypes; t++) {
    if (!traces) {
      cli_error("sim", "--gpu-types: no application measurements found; pass --traces DIR");
      goto out;
    }
    if (stk_sim_apps_load_type(&a.type_apps[t], traces, a.types[t].name, err)) {
      cli_error("sim", "--gpu-types %s: %s", a.types[t].name, err);
      goto out;
    }
    a.types[t].apps = a.type_apps[t];
  }
  a.o.types = a.ntypes ? a.types : NULL;
  a.o.ntypes = (uint32_t)a.ntypes;
  lists = calloc(nfiles, sizeof *lists);
  if (!lists) goto out;
  for (size_t i = 0; i < nfiles; i++)
    if (stk_sim_jobs_load(&lists[i], apps, files[i], err)) {
      cli_error("sim", "%s", err);
      goto out;
    }
  nruns = nfiles * a.npolicies;
  runs = calloc(nruns, sizeof *runs);
  labels = calloc(nruns, sizeof *labels);
  if (!runs || !labels) goto out;
  for (size_t p = 0; p < a.npolicies; p++)
    for (size_t i = 0; i < nfiles; i++) {
      struct jrun *r = &runs[p * nfiles + i];
      r->jobs = lists[i];
      r->policy = a.policies[p];
      if (a.table) {
        r->load = a.loads[i / 8];
        r->workload = (int)(i % 8) + 1;
        snprintf(r->label, sizeof r->label, "%s load %.1f workload-%d", r->policy, r->load,
                 r->workload);
      } else {
        snprintf(r->label, sizeof r->label, "%.150s", sim_base(files[i]));
      }
      labels[p * nfiles + i] = r->label;
    }
  a.o.keep_samples = a.svg != NULL;
  struct jpool pool = {.runs = runs, .n = nruns, .o = &a.o};
  pool.progress = !a.quiet && cli_progress_enabled() && nruns > 1;
  if (!a.quiet && cli_progress_enabled() && nruns == 1) a.o.progress = jobs_progress;
  a.o.cancel = &cli_interrupted;
  pthread_mutex_init(&pool.mu, NULL);
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  size_t nt = a.threads ? a.threads : (size_t)(ncpu > 0 ? ncpu : 1);
  if (nt > nruns) nt = nruns;
  pthread_t th[64];
  if (nt > 64) nt = 64;
  cli_catch_signals();
  size_t started = 0;
  for (size_t t = 1; t < nt; t++)
    if (pthread_create(&th[t], NULL, jworker, &pool) == 0) started = t;
  jworker(&pool);
  for (size_t t = 1; t <= started; t++) pthread_join(th[t], NULL);
  pthread_mutex_destroy(&pool.mu);
  if (pool.progress || a.o.progress) fprintf(stderr, "\r\033[K");
  if (cli_stop_requested()) {
    cli_error("sim", "interrupted");
    rc = CLI_INTERRUPTED;
    goto out;
  }
  for (size_t i = 0; i < nruns; i++)
    if (runs[i].rc) {
      cli_error("sim", "%s: %s", runs[i].label, runs[i].err);
      goto out;
    }
  struct stk_sim_jobs_result *res = malloc(sizeof *res * nruns);
  if (!res) goto out;
  for (size_t i = 0; i < nruns; i++) res[i] = runs[i].res;
  if (a.json) {
    stk_sim_jobs_write_json(stdout, res, nruns, labels);
  } else if (a.table) {
    simj_pollux_table(&a, res);
  } else {
    stk_sim_jobs_write_table(stdout, res, nruns, labels);
    for (size_t i = 0; i < nruns; i++) {
      if (res[i].too_large)
        printf("%s: %zu jobs ask for more GPUs than the cluster (or its power cap) allows and "
               "never run\n",
               labels[i], res[i].too_large);
      if (res[i].unfinished)
        printf("%s: %zu jobs had not finished at the horizon\n", labels[i], res[i].unfinished);
    }
    if (a.o.busy_w > 0)
      printf("energy at %.0f W idle / %.0f W busy per GPU, $%.2f/kWh, %s: cost $%.2f, %.1f kg CO2 "
             "(first run)\n",
             a.o.idle_w, a.o.busy_w, a.o.price_kwh, a.carbon_file ? a.carbon_file : "constant grid",
             res[0].cost, res[0].carbon_kg);
  }
  int werr = 0;
  if (a.csv) {
    struct stk_outfile *o = sim_open_out("--csv", a.csv);
    if (!o) werr = 1;
    else {
      stk_sim_jobs_write_csv(stk_outfile_stream(o), res, nruns, labels);
      werr |= sim_close_out("--csv", o) != 0;
    }
  }
  if (a.svg) {
    struct stk_outfile *o = sim_open_out("--svg", a.svg);
    if (!o) werr = 1;
    else {
      stk_sim_jobs_write_svg(stk_outfile_stream(o), res, nruns, labels, "stoker sim --jobs: JCT CDF and allocated GPUs");
      werr |= sim_close_out("--svg", o) != 0;
    }
  }
  free(res);
  rc = werr ? CLI_FAIL : CLI_OK;
out:
  if (runs)
    for (size_t i = 0; i < nruns; i++) stk_sim_jobs_result_free(&runs[i].res);
  free(runs);
  free(labels);
  if (lists)
    for (size_t i = 0; i < nfiles; i++) stk_sim_jobs_free(lists[i]);
  free(lists);
  for (size_t i = 0; i < nfiles; i++) free(files[i]);
  free(files);
  stk_sim_apps_free(apps);
  for (size_t t = 0; t < a.ntypes; t++) stk_sim_apps_free(a.type_apps[t]);
  free(a.types_buf);
  free(a.policies_buf);
  free(a.carbon);
  return rc;
}

