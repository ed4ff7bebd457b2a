/* stoker sim: the GPU-cluster simulator. One run of one policy and seed,
 * the paper's policy x seed experiment table, or a replay of a trace's real
 * arrival and departure times; reports as text, JSON, CSV and SVG. */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "cmd_sim_mig.h"
#include "stoker/sim.h"

const char cmd_sim_usage[] =
    "usage: stoker sim [--nodes FILE --pods FILE] [--policy NAME] [--seed S] [OPTIONS]\n"
    "       stoker sim --experiment [--policies A,B,..] [--seeds N] [OPTIONS]\n"
    "       stoker sim --replay [--policy NAME] [OPTIONS]\n"
    "       stoker sim --jobs FILE|DIR [--job-policy LIST] [JOB OPTIONS]\n"
    "       stoker sim --pollux-table [--loads LIST] [--job-policy LIST]\n"
    "       stoker sim --list-policies\n"
    "       stoker sim mig [--gpu G] | mig --parvagpu [DIR] [--scenario N] [--allocator A]\n"
    "\n"
    "Simulate placing a trace's pods on a GPU cluster whose GPUs pods may share,\n"
    "as in \"Beware of Fragmentation\" (Weng et al., USENIX ATC'23). By default the\n"
    "pods arrive in a seeded random order and never leave, sampled with\n"
    "replacement until their GPU demand reaches --inflate times the cluster's\n"
    "GPUs; the report is the share of GPUs allocated at each arrived percentage.\n"
    "\n"
    "inputs:\n"
    "  --nodes FILE        node list: sn,cpu_milli,memory_mib,gpu,model (\"-\" = stdin)\n"
    "  --pods FILE         pod list: name,cpu_milli,memory_mib,num_gpu,gpu_milli,\n"
    "                      gpu_spec[,creation_time,deletion_time] (\"-\" = stdin)\n"
    "                      Without both, the openb traces in ../shared/data/openb\n"
    "                      (gpu_node list, default pods) are used when present.\n"
    "modes:\n"
    "  --policy NAME       placement policy (default FGD); --list-policies names them\n"
    "  --seed S            seed of the arrival order and ties (default 42)\n"
    "  --inflate R         arrived GPU demand to reach, x capacity (default 1.3)\n"
    "  --experiment        run --policies x --seeds and print the paper's table\n"
    "  --policies LIST     comma-separated policies for --experiment (default all)\n"
    "  --seeds N           seeds S, S+1, .. per policy for --experiment (default 10)\n"
    "  --threads N         concurrent runs for --experiment (default: cores)\n"
    "  --replay            replay creation and deletion times with a FIFO queue\n"
    "  --compress F        replay: arrivals F times denser, lifetimes kept (default 1)\n"
    "output:\n"
    "  --json              print the report as JSON on stdout\n"
    "  --csv FILE          experiment: one row per policy, seed and arrived\n"
    "                      percentage; replay: one row per instant (\"-\" = stdout)\n"
    "  --svg FILE          allocation curves per policy (not with --replay)\n"
    "  --pod-log FILE      replay: each pod's start and queueing delay as CSV\n"
    "  -q, --quiet         no progress line\n"
    "\n"
    "jobs over time (--jobs, --pollux-table): jobs arrive, queue, run on whole GPUs,\n"
    "resize and finish, with the Pollux OSDI'21 job model (docs/sim.md):\n"
    "  --jobs FILE|DIR     job list, repeatable; a directory runs each *.csv in it.\n"
    "                      Workload: name,time,application,num_replicas,batch_size;\n"
    "                      trace: time|submit_time|timestamp,num_gpus,duration\n"
    "  --job-policy LIST   fifo, sjf, tiresias, optimus, pollux, multi, carbon\n"
    "                      (default tiresias); a comma list runs each\n"
    "  --pollux-table      the artifact's 8 workloads at each load with tiresias,\n"
    "                      optimus and pollux, beside its published mean JCTs\n"
    "  --pollux-dir DIR    the artifact's inputs (default ../shared/data/pollux)\n"
    "  --loads LIST        loads for --pollux-table (default 0.5,1,1.5,2)\n"
    "  --traces DIR        application measurements (default: the job list's\n"
    "                      ../traces, else ../shared/data/pollux/traces)\n"
    "  --cluster NxG       nodes x GPUs per node (default 16x4)\n"
    "  --interval S        scheduling period in seconds (default 60)\n"
    "  --restart-delay S   seconds a job loses after each allocation change\n"
    "                      (default 30; 0 = none)\n"
    "  --horizon S         stop at S simulated seconds (default 1e8)\n"
    "  --gpu-model M       power per GPU: T4 (default), V100, A100, H100\n"
    "  --gpu-watts I,B     idle and busy watts per GPU instead\n"
    "  --price P           electricity price per kWh (default 0.10)\n"
    "  --carbon G|FILE     grid intensity in g/kWh, or a file of hourly values\n"
    "                      (last comma field of each line; default 400)\n"
    "  --power-cap W       cluster power cap: jobs wait while busy power would pass it\n"
    "  --threads N         concurrent runs (default: cores)\n"
    "  --json, --csv FILE, --svg FILE  as above: runs as JSON, one CSV row per job,\n"
    "                      JCT CDFs and allocated GPUs over time\n"
    "\n"
    "MIG partitions (stoker sim mig, docs/sim.md):\n"
    "  mig [--gpu G]       NVIDIA's MIG profiles, start slots and layout counts of\n"
    "                      a100-40gb, a100-80gb and h100-80gb (or only G)\n"
    "  mig --parvagpu [DIR]  ParvaGPU's SLO scenarios (DIR default\n"
    "                      ../shared/data/parvagpu): GPUs each allocator needs,\n"
    "                      the bound no plan beats, the artifact's published count\n"
    "  --scenario N        one scenario (default all)\n"
    "  --allocator A       artifact (its configurator and allocator), packed\n"
    "                      (fewest slices, exact packing) or both (default)\n"
    "  --map               list each plan's segments per GPU\n";

enum {
  O_NODES = 256,
  O_PODS,
  O_POLICY,
  O_POLICIES,
  O_SEED,
  O_SEEDS,
  O_INFLATE,
  O_EXPERIMENT,
  O_REPLAY,
  O_THREADS,
  O_JSON,
  O_CSV,
  O_SVG,
  O_PODLOG,
  O_LIST,
  O_COMPRESS
};

static const struct option options[] = {
    {"nodes", 1, 0, O_NODES},
    {"pods", 1, 0, O_PODS},
    {"policy", 1, 0, O_POLICY},
    {"policies", 1, 0, O_POLICIES},
    {"seed", 1, 0, O_SEED},
    {"seeds", 1, 0, O_SEEDS},
    {"inflate", 1, 0, O_INFLATE},
    {"experiment", 0, 0, O_EXPERIMENT},
    {"replay", 0, 0, O_REPLAY},
    {"threads", 1, 0, O_THREADS},
    {"json", 0, 0, O_JSON},
    {"csv", 1, 0, O_CSV},
    {"svg", 1, 0, O_SVG},
    {"pod-log", 1, 0, O_PODLOG},
    {"list-policies", 0, 0, O_LIST},
    {"quiet", 0, 0, 'q'},
    {"compress", 1, 0, O_COMPRESS},
    {0, 0, 0, 0},
};

struct sim_args {
  const char *nodes, *pods, *policy, *csv, *svg, *podlog;
  char *policies_buf;
  const char *policies[32];
  size_t npolicies;
  uint64_t seed, seeds, threads;
  double inflate, compress;
  int experiment, replay, json, quiet, list, seed_set, seeds_set, inflate_set;
  char nodes_buf[PATH_MAX], pods_buf[PATH_MAX];
};

static int parse_policies(struct sim_args *a, const char *v) {
  free(a->policies_buf);
  a->policies_buf = strdup(v);
  if (!a->policies_buf) return -1;
  a->npolicies = 0;
  for (char *save = NULL, *t = strtok_r(a->policies_buf, ",", &save); t;
       t = strtok_r(NULL, ",", &save)) {
    if (!*t) continue;
    if (stk_sim_policy_find(t) < 0) {
      cli_error("sim", "--policies: no policy '%s'; `stoker sim --list-policies` names them", t);
      return -1;
    }
    if (a->npolicies == 32) {
      cli_error("sim", "--policies: too many");
      return -1;
    }
    a->policies[a->npolicies++] = stk_sim_policy_name((size_t)stk_sim_policy_find(t));
  }
  if (!a->npolicies) {
    cli_error("sim", "--policies: empty list");
    return -1;
  }
  return 0;
}

static int parse_args(struct sim_args *a, int argc, char **argv) {
  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "q", options, NULL)) != -1) {
    switch (c) {
      case O_NODES:
        a->nodes = optarg;
        break;
      case O_PODS:
        a->pods = optarg;
        break;
      case O_POLICY:
        if (stk_sim_policy_find(optarg) < 0) {
          cli_error("sim", "--policy: no policy '%s'; `stoker sim --list-policies` names them",
                    optarg);
          return -1;
        }
        a->policy = stk_sim_policy_name((size_t)stk_sim_policy_find(optarg));
        break;
      case O_POLICIES:
        if (parse_policies(a, optarg)) return -1;
        break;
      case O_SEED:
        if (cli_u64("sim", "--seed", optarg, 0, UINT64_MAX / 2, &a->seed)) return -1;
        a->seed_set = 1;
        break;
      case O_SEEDS:
        if (cli_u64("sim", "--seeds", optarg, 1, 10000, &a->seeds)) return -1;
        a->seeds_set = 1;
        break;
      case O_THREADS:
        if (cli_u64("sim", "--threads", optarg, 1, 1024, &a->threads)) return -1;
        break;
      case O_INFLATE:
        if (cli_double("sim", "--inflate", optarg, 0.01, 100, &a->inflate)) return -1;
        a->inflate_set = 1;
        break;
      case O_EXPERIMENT:
        a->experiment = 1;
        break;
      case O_REPLAY:
        a->replay = 1;
        break;
      case O_JSON:
        a->json = 1;
        break;
      case O_CSV:
        a->csv = optarg;
        break;
      case O_SVG:
        a->svg = optarg;
        break;
      case O_PODLOG:
        a->podlog = optarg;
        break;
      case O_COMPRESS:
        if (cli_double("sim", "--compress", optarg, 1, 1e9, &a->compress)) return -1;
        break;
      case O_LIST:
        a->list = 1;
        break;
      case 'q':
        a->quiet = 1;
        break;
      default:
        fprintf(stderr, "`stoker help sim` lists the options\n");
        return -1;
    }
  }
  if (optind < argc) {
    cli_error("sim", "unexpected argument '%s'; `stoker help sim` lists the options", argv[optind]);
    return -1;
  }
  if (a->experiment && a->replay) {
    cli_error("sim", "--experiment and --replay are different modes; pick one");
    return -1;
  }
  if (a->replay && (a->svg || a->inflate_set || a->npolicies || a->seeds_set)) {
    cli_error(
        "sim",
        "--replay takes one --policy and --seed; --svg, --inflate, --policies and --seeds are "
        "for the arrival experiments");
    return -1;
  }
  if (!a->experiment && (a->npolicies || a->seeds_set)) {
    cli_error("sim", "--policies and --seeds need --experiment (or use --policy and --seed)");
    return -1;
  }
  if ((a->podlog || a->compress) && !a->replay) {
    cli_error("sim", "--pod-log and --compress need --replay");
    return -1;
  }
  if ((a->nodes == NULL) != (a->pods == NULL)) {
    cli_error("sim", "give both --nodes and --pods, or neither for the openb default traces");
    return -1;
  }
  return 0;
}

static int is_file(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* The openb traces next to the project: $STOKER_DATA/openb, ../shared/data
 * from the working directory or from $STOKER_ROOT, or from the binary's
 * checkout (build/stoker -> ../../shared/data). */
static int find_default_traces(struct sim_args *a) {
  char dirs[4][PATH_MAX];
  int nd = 0;
  const char *env = getenv("STOKER_DATA");
  if (env && *env) snprintf(dirs[nd++], PATH_MAX, "%s/openb", env);
  snprintf(dirs[nd++], PATH_MAX, "../shared/data/openb");
  const char *root = getenv("STOKER_ROOT");
  if (root && *root) snprintf(dirs[nd++], PATH_MAX, "%s/../shared/data/openb", root);
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = 0;
    snprintf(dirs[nd++], PATH_MAX, "%s/../../shared/data/openb", dirname(exe));
  }
  for (int i = 0; i < nd; i++) {
    snprintf(a->nodes_buf, sizeof a->nodes_buf, "%.3900s/openb_node_list_gpu_node.csv", dirs[i]);
    snprintf(a->pods_buf, sizeof a->pods_buf, "%.3900s/openb_pod_list_default.csv", dirs[i]);
    if (is_file(a->nodes_buf) && is_file(a->pods_buf)) {
      a->nodes = a->nodes_buf;
      a->pods = a->pods_buf;
      return 0;
    }
  }
  cli_error("sim",
            "no --nodes/--pods given and the openb traces were not found in ../shared/data/openb "
            "(or $STOKER_DATA/openb); pass --nodes FILE --pods FILE");
  return -1;
}

static const char *base(const char *p) {
  if (!strcmp(p, "-")) return "<stdin>";
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

/* Output files go through stk_outfile: whole or not at all ("-" = stdout). */
static struct stk_outfile *open_out(const char *opt, const char *path) {
  struct stk_outfile *o;
  return cli_out_open("sim", opt, path, &o) ? NULL : o;
}

static int close_out(const char *opt, struct stk_outfile *o) {
  return cli_out_commit("sim", opt, o);
}

/* The trace whose published figures apply: only the openb pod lists on the
 * GPU-node list the paper used. */
static const char *paper_trace(const struct sim_args *a) {
  return strcmp(base(a->nodes), "openb_node_list_gpu_node.csv") ? NULL : a->pods;
}

static void describe_inputs(const struct sim_args *a, const struct stk_sim_cluster *c,
                            const struct stk_sim_workload *w) {
  struct stk_sim_cluster_info ci;
  stk_sim_cluster_info(c, &ci);
  printf("cluster  %s: %u nodes (%u with GPUs), %llu GPUs of %u model%s\n", base(a->nodes),
         ci.nodes, ci.gpu_nodes, (unsigned long long)ci.gpus, ci.models, ci.models == 1 ? "" : "s");
  if (!w) return;
  struct stk_sim_workload_info wi;
  stk_sim_workload_info(w, &wi);
  printf(
      "workload %s: %llu pods (%llu CPU-only, %llu GPU-sharing, %llu whole-GPU), GPU demand %.1f%% "
      "of capacity; %u specs, %u typical\n",
      base(a->pods), (unsigned long long)wi.pods, (unsigned long long)wi.cpu_pods,
      (unsigned long long)wi.share_pods, (unsigned long long)wi.gpu_pods,
      ci.gpus ? (double)wi.gpu_milli / (double)ci.gpus / 10.0 : 0.0, wi.specs, wi.typical);
  if (wi.never_fit)
    printf(
        "warning: %llu pods can never fit on any node of this cluster; they are counted as "
        "failed\n",
        (unsigned long long)wi.never_fit);
  if (wi.unknown_model_pods)
    printf("warning: %llu pods name GPU models the cluster lacks (%s)\n",
           (unsigned long long)wi.unknown_model_pods, wi.unknown_models);
}

static void progress(void *ctx, uint32_t done, uint32_t total) {
  (void)ctx;
  fprintf(stderr, "\r  runs %u/%u", done, total);
  if (done == total) fprintf(stderr, "\r%*s\r", 20, "");
  fflush(stderr);
}

static int write_files(const struct sim_args *a, const struct stk_sim_result *r, size_t n) {
  if (a->csv) {
    struct stk_outfile *f = open_out("--csv", a->csv);
    if (!f) return CLI_FAIL;
    stk_sim_write_csv(stk_outfile_stream(f), r, n);
    if (close_out("--csv", f)) return CLI_FAIL;
  }
  if (a->svg) {
    struct stk_outfile *f = open_out("--svg", a->svg);
    if (!f) return CLI_FAIL;
    char title[512];
    snprintf(title, sizeof title, "%s on %s", base(a->pods), base(a->nodes));
    stk_sim_write_svg(stk_outfile_stream(f), r, n, title);
    if (close_out("--svg", f)) return CLI_FAIL;
  }
  return CLI_OK;
}

static int run_single(const struct sim_args *a, const struct stk_sim_cluster *c,
                      const struct stk_sim_workload *w) {
  struct stk_sim_run_opts ro = {a->policy ? a->policy : "FGD", a->seed, a->inflate};
  struct stk_sim_result r;
  char err[STK_ERRMSG_MAX];
  if (stk_sim_run(c, w, &ro, &r, err)) {
    cli_error("sim", "%s", err);
    return CLI_FAIL;
  }
  int rc = CLI_OK;
  if (a->json) {
    stk_sim_write_json(stdout, &r, 1, paper_trace(a));
  } else if (!(a->csv && !strcmp(a->csv, "-"))) {
    describe_inputs(a, c, w);
    printf(
        "policy   %s, seed %llu: %llu pods arrived (GPU demand %.1f%% of capacity), %llu placed, "
        "%llu failed (%llu could never fit)\n",
        r.policy, (unsigned long long)r.seed, (unsigned long long)r.pods,
        (double)r.arrived_gpu_milli / (double)r.total_gpu_milli * 100.0,
        (unsigned long long)r.placed, (unsigned long long)r.failed,
        (unsigned long long)r.failed_never_fit);
    printf("\n%9s %11s %15s %12s\n", "arrived %", "allocated %", "fragmented GPUs", "frag ratio %");
    for (uint32_t p = 0; p < r.npct; p++) {
      if ((p % 10 && p != r.npct - 1) || isnan(r.alloc[p])) continue;
      printf("%9u %11.2f %15.1f ", p, r.alloc[p], r.frag[p]);
      if (isnan(r.frag_ratio[p]))
        printf("%12s\n", "-");
      else
        printf("%12.2f\n", r.frag_ratio[p]);
    }
    double pub100 = stk_sim_published(paper_trace(a), r.policy, 100),
           pub130 = stk_sim_published(paper_trace(a), r.policy, 130);
    if (!isnan(pub130) && fabs(r.inflate - 1.3) < 1e-9) {
      printf("\npaper (mean of 10 seeds): ");
      if (!isnan(pub100)) printf("%.2f at 100%%, ", pub100);
      printf("%.2f at 130%%\n", pub130);
    }
    printf(
        "\nsimulated in %.3f s (%.3f s CPU): %llu events, %.0f events/s, %.1f us per placement "
        "decision\n",
        r.wall_s, r.cpu_s, (unsigned long long)r.events,
        r.wall_s > 0 ? (double)r.events / r.wall_s : 0,
        r.pods ? r.wall_s * 1e6 / (double)r.pods : 0);
  }
  rc = write_files(a, &r, 1);
  stk_sim_result_free(&r);
  return rc;
}

static int run_experiment(const struct sim_args *a, const struct stk_sim_cluster *c,
                          const struct stk_sim_workload *w) {
  struct stk_sim_experiment_opts eo;
  memset(&eo, 0, sizeof eo);
  eo.policies = a->npolicies ? a->policies : NULL;
  eo.npolicies = a->npolicies;
  eo.seed = a->seed_set ? a->seed : 42;
  eo.seeds = (uint32_t)a->seeds;
  eo.inflate = a->inflate;
  eo.threads = (uint32_t)a->threads;
  eo.cancel = &cli_interrupted;
  if (!a->quiet && !a->json && cli_progress_enabled()) eo.progress = progress;
  cli_catch_signals();
  struct stk_sim_result *r;
  size_t n;
  char err[STK_ERRMSG_MAX];
  uint64_t t0 = stk_now_ns();
  int rc = stk_sim_experiment(c, w, &eo, &r, &n, err);
  double wall = (double)(stk_now_ns() - t0) / 1e9;
  if (rc) {
    if (cli_stop_requested()) {
      cli_error("sim", "interrupted");
      return CLI_INTERRUPTED;
    }
    cli_error("sim", "%s", err);
    return CLI_FAIL;
  }
  if (a->json) {
    stk_sim_write_json(stdout, r, n, paper_trace(a));
  } else if (!(a->csv && !strcmp(a->csv, "-"))) {
    describe_inputs(a, c, w);
    printf("\n");
    stk_sim_write_table(stdout, r, n, paper_trace(a));
    double cpu = 0;
    for (size_t i = 0; i < n; i++) cpu += r[i].wall_s;
    printf("\n%zu runs in %.2f s (%.3f s per run on average, %u threads)\n", n, wall,
           cpu / (double)n,
           a->threads ? (unsigned)a->threads : (unsigned)sysconf(_SC_NPROCESSORS_ONLN));
  }
  rc = write_files(a, r, n);
  stk_sim_results_free(r, n);
  return rc;
}

struct replay_out {
  FILE *csv, *podlog;
  int json;
};

static void on_sample(void *ctx, const struct stk_sim_sample *s) {
  struct replay_out *o = ctx;
  if (o->csv)
    fprintf(o->csv, "%lld,%.4f,%.3f,%.4f,%llu,%llu\n", (long long)s->time, s->alloc, s->frag,
            s->frag_ratio, (unsigned long long)s->running, (unsigned long long)s->queued);
}

static void on_pod(void *ctx, const struct stk_sim_pod_record *p) {
  struct replay_out *o = ctx;
  if (!o->podlog) return;
  stk_csv_field(o->podlog, p->name);
  stk_csv_field(o->podlog, p->outcome);
  stk_csv_field(o->podlog, p->node);
  fprintf(o->podlog, "%lld,%lld,%lld\n", (long long)p->creation, (long long)p->start,
          (long long)p->delay);
}

static int run_replay(const struct sim_args *a, const struct stk_sim_cluster *c) {
  struct replay_out out = {NULL, NULL, a->json};
  struct stk_outfile *ocsv = NULL, *olog = NULL;
  if (a->csv) {
    if (!(ocsv = open_out("--csv", a->csv))) return CLI_FAIL;
    out.csv = stk_outfile_stream(ocsv);
    fprintf(out.csv, "time,alloc_pct,frag_gpus,frag_ratio_pct,running,queued\n");
  }
  if (a->podlog) {
    if (!(olog = open_out("--pod-log", a->podlog))) {
      stk_outfile_abort(ocsv);
      return CLI_FAIL;
    }
    out.podlog = stk_outfile_stream(olog);
    fprintf(out.podlog, "name,outcome,node,creation_time,start_time,queue_delay\n");
  }
  struct stk_sim_replay_opts ro = {
      a->policy ? a->policy : "FGD", a->seed, a->compress, on_sample, on_pod, &out};
  struct stk_sim_replay_result r;
  char err[STK_ERRMSG_MAX];
  int rc = stk_sim_replay(c, a->pods, &ro, &r, err);
  int frc = CLI_OK;
  if (rc) { /* a failed replay leaves no half-written files */
    stk_outfile_abort(ocsv);
    stk_outfile_abort(olog);
    cli_error("sim", "%s", err);
    return CLI_FAIL;
  }
  if (ocsv && close_out("--csv", ocsv)) frc = CLI_FAIL;
  if (olog && close_out("--pod-log", olog)) frc = CLI_FAIL;
  if (a->json) {
    struct stk_json j;
    stk_json_init(&j, stdout, 2);
    stk_json_obj_begin(&j);
    stk_json_kstr(&j, "mode", "replay");
    stk_json_kstr(&j, "trace", a->pods);
    stk_json_kstr(&j, "policy", r.policy);
    stk_json_ku64(&j, "seed", r.seed);
    stk_json_kdbl(&j, "compress", a->compress > 1 ? a->compress : 1);
    stk_json_ku64(&j, "pods", r.pods);
    stk_json_ku64(&j, "placed", r.placed);
    stk_json_ku64(&j, "placed_after_wait", r.placed_after_wait);
    stk_json_ku64(&j, "still_queued", r.still_queued);
    stk_json_ku64(&j, "never_fit", r.never_fit);
    stk_json_ku64(&j, "max_queue", r.max_queue);
    stk_json_kdbl(&j, "delay_mean_s", r.delay_mean);
    stk_json_kdbl(&j, "delay_p50_s", r.delay_p50);
    stk_json_kdbl(&j, "delay_p90_s", r.delay_p90);
    stk_json_kdbl(&j, "delay_p99_s", r.delay_p99);
    stk_json_kdbl(&j, "delay_max_s", r.delay_max);
    stk_json_kdbl(&j, "alloc_mean_pct", r.alloc_mean);
    stk_json_kdbl(&j, "alloc_peak_pct", r.alloc_peak);
    stk_json_kdbl(&j, "frag_ratio_mean_pct", r.frag_ratio_mean);
    stk_json_key(&j, "time_first");
    stk_json_i64(&j, r.t_first);
    stk_json_key(&j, "time_last");
    stk_json_i64(&j, r.t_last);
    stk_json_ku64(&j, "events", r.events);
    stk_json_kdbl(&j, "wall_s", r.wall_s);
    stk_json_obj_end(&j);
    putchar('\n');
  } else if (!(a->csv && !strcmp(a->csv, "-")) && !(a->podlog && !strcmp(a->podlog, "-"))) {
    describe_inputs(a, c, NULL);
    printf("replay   %s with %s, seed %llu: %llu pods over %.1f days", base(a->pods), r.policy,
           (unsigned long long)r.seed, (unsigned long long)r.pods,
           (double)(r.t_last - r.t_first) / 86400.0);
    if (a->compress > 1) printf(" (arrivals %gx denser)", a->compress);
    printf("\n");
    printf(
        "placed   %llu (%llu after waiting in the queue), %llu still queued at the end, %llu can "
        "never fit\n",
        (unsigned long long)r.placed, (unsigned long long)r.placed_after_wait,
        (unsigned long long)r.still_queued, (unsigned long long)r.never_fit);
    printf(
        "queueing delay: mean %.1f s, p50 %.0f s, p90 %.0f s, p99 %.0f s, max %.0f s; longest "
        "queue %llu\n",
        r.delay_mean, r.delay_p50, r.delay_p90, r.delay_p99, r.delay_max,
        (unsigned long long)r.max_queue);
    printf(
        "GPU allocation: time-weighted mean %.2f%%, peak %.2f%%; mean fragmentation ratio %.2f%%\n",
        r.alloc_mean, r.alloc_peak, r.frag_ratio_mean);
    printf("simulated in %.3f s: %llu events, %.0f events/s\n", r.wall_s,
           (unsigned long long)r.events, r.wall_s > 0 ? (double)r.events / r.wall_s : 0);
  }
  return frc;
}

/* ---- jobs mode: stoker sim --jobs / --pollux-table -------------------- */

/* Power of one GPU idle and at work, by model: the busy figure is the
 * board's maximum power from NVIDIA's datasheets (T4 70 W, V100 SXM2
 * 300 W, A100 SXM4 400 W, H100 SXM5 700 W); the idle figure is what such
 * boards typically draw with nothing running (an assumption, see
 * docs/sim.md). */
static const struct {
  const char *name;
  double idle, busy;
} gpu_models[] = {
    {"T4", 10, 70}, {"V100", 40, 300}, {"A100", 50, 400}, {"H100", 70, 700},
};

struct jobs_args {
  const char *jobs[64];
  size_t njobs;
  const char *policies[16];
  size_t npolicies;
  char *policies_buf;
  const char *traces, *pollux_dir, *csv, *svg, *carbon_file;
  double loads[8];
  size_t nloads;
  struct stk_sim_jobs_opts o;
  uint64_t threads;
  int table, json, quiet;
  double *carbon;
  size_t ncarbon;
};

/* A plain finite decimal number ("0.5", "400", "1e3"), never hexadecimal,
 * nan or inf: 0 and *out, or -1. */
static int decimal(const char *s, double *out) {
  const char *p = s;
  int nd = 0;
  if (*p == '+' || *p == '-') p++;
  for (; *p >= '0' && *p <= '9'; p++) nd++;
  if (*p == '.')
    for (p++; *p >= '0' && *p <= '9'; p++) nd++;
  if (!nd) return -1;
  if (*p == 'e' || *p == 'E') {
    p++;
    if (*p == '+' || *p == '-') p++;
    if (*p < '0' || *p > '9') return -1;
    while (*p >= '0' && *p <= '9') p++;
  }
  if (*p) return -1;
  errno = 0;
  double v = strtod(s, NULL);
  if (errno == ERANGE || !isfinite(v)) return -1;
  *out = v;
  return 0;
}

/* GPUs a power cap lets work at once: what the cap leaves after the idle
 * draw of every GPU, in busy GPUs (the engine's rule). */
static int cap_gpus(const struct jobs_args *a, int gpus) {
  if (!(a->o.power_cap_w > 0)) return gpus;
  double extra = a->o.busy_w > a->o.idle_w
                     ? (a->o.power_cap_w - gpus * a->o.idle_w) / (a->o.busy_w - a->o.idle_w)
                     : a->o.power_cap_w >= gpus * a->o.idle_w ? gpus : -1;
  return extra < 0 ? 0 : extra < gpus ? (int)extra : gpus;
}

static unsigned opt_nodes(const struct jobs_args *a) { return a->o.nodes ? a->o.nodes : 16; }
static unsigned opt_gpn(const struct jobs_args *a) {
  return a->o.gpus_per_node ? a->o.gpus_per_node : 4;
}

enum {
  J_JOBS = 300,
  J_POLICY,
  J_TRACES,
  J_CLUSTER,
  J_INTERVAL,
  J_RESTART,
  J_HORIZON,
  J_GPU_MODEL,
  J_WATTS,
  J_PRICE,
  J_CARBON,
  J_CAP,
  J_TABLE,
  J_PDIR,
  J_LOADS,
  J_THREADS,
  J_JSON,
  J_CSV,
  J_SVG,
};

static const struct option job_options[] = {
    {"jobs", 1, 0, J_JOBS},
    {"job-policy", 1, 0, J_POLICY},
    {"traces", 1, 0, J_TRACES},
    {"cluster", 1, 0, J_CLUSTER},
    {"interval", 1, 0, J_INTERVAL},
    {"restart-delay", 1, 0, J_RESTART},
    {"horizon", 1, 0, J_HORIZON},
    {"gpu-model", 1, 0, J_GPU_MODEL},
    {"gpu-watts", 1, 0, J_WATTS},
    {"price", 1, 0, J_PRICE},
    {"carbon", 1, 0, J_CARBON},
    {"power-cap", 1, 0, J_CAP},
    {"pollux-table", 0, 0, J_TABLE},
    {"pollux-dir", 1, 0, J_PDIR},
    {"loads", 1, 0, J_LOADS},
    {"threads", 1, 0, J_THREADS},
    {"json", 0, 0, J_JSON},
    {"csv", 1, 0, J_CSV},
    {"svg", 1, 0, J_SVG},
    {"quiet", 0, 0, 'q'},
    {0, 0, 0, 0},
};

static int jobs_parse(struct jobs_args *a, int argc, char **argv) {
  int c;
  optind = 1;
  a->o.idle_w = 10;
  a->o.busy_w = 70;
  a->o.price_kwh = 0.10;
  a->o.carbon_g_kwh = 400;
  while ((c = getopt_long(argc, argv, "q", job_options, NULL)) != -1) {
    switch (c) {
      case J_JOBS:
        if (a->njobs == 64) {
          cli_error("sim", "--jobs: at most 64");
          return -1;
        }
        a->jobs[a->njobs++] = optarg;
        break;
      case J_POLICY: {
        free(a->policies_buf);
        a->policies_buf = strdup(optarg);
        if (!a->policies_buf) return -1;
        a->npolicies = 0;
        char *save = NULL;
        for (char *t = strtok_r(a->policies_buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
          int i = stk_sim_job_policy_find(t);
          if (i < 0) {
            cli_error("sim", "--job-policy: no policy '%s'; `stoker sim --list-policies` names them",
                      t);
            return -1;
          }
          if (a->npolicies == 16) {
            cli_error("sim", "--job-policy: too many");
            return -1;
          }
          a->policies[a->npolicies++] = stk_sim_job_policy_name((size_t)i);
        }
        if (!a->npolicies) {
          cli_error("sim", "--job-policy: empty list");
          return -1;
        }
        break;
      }
      case J_TRACES:
        a->traces = optarg;
        break;
      case J_CLUSTER: {
        unsigned n, g;
        char tail;
        if (sscanf(optarg, "%ux%u%c", &n, &g, &tail) != 2 || n < 1 || n > 64 || g < 1 || g > 16) {
          cli_error("sim", "--cluster: '%s' is not NODESxGPUS (1..64 x 1..16)", optarg);
          return -1;
        }
        a->o.nodes = n;
        a->o.gpus_per_node = g;
        break;
      }
      case J_INTERVAL:
        if (cli_double("sim", "--interval", optarg, 1, 86400, &a->o.interval)) return -1;
        break;
      case J_RESTART:
        if (cli_double("sim", "--restart-delay", optarg, 0, 86400, &a->o.restart_delay)) return -1;
        if (a->o.restart_delay == 0) a->o.restart_delay = -1;
        break;
      case J_HORIZON:
        if (cli_double("sim", "--horizon", optarg, 1, 1e12, &a->o.horizon)) return -1;
        break;
      case J_GPU_MODEL: {
        size_t i = 0;
        while (i < sizeof gpu_models / sizeof gpu_models[0] && strcasecmp(gpu_models[i].name, optarg))
          i++;
        if (i == sizeof gpu_models / sizeof gpu_models[0]) {
          cli_error("sim", "--gpu-model: no model '%s' (T4, V100, A100, H100)", optarg);
          return -1;
        }
        a->o.idle_w = gpu_models[i].idle;
        a->o.busy_w = gpu_models[i].busy;
        break;
      }
      case J_WATTS: {
        double i, b;
        char tail;
        if (sscanf(optarg, "%lf,%lf%c", &i, &b, &tail) != 2 || !(i >= 0) || !(b >= i) || b > 1e5) {
          cli_error("sim", "--gpu-watts: '%s' is not IDLE,BUSY watts with 0 <= IDLE <= BUSY",
                    optarg);
          return -1;
        }
        a->o.idle_w = i;
        a->o.busy_w = b;
        break;
      }
      case J_PRICE:
        if (cli_double("sim", "--price", optarg, 0, 1e6, &a->o.price_kwh)) return -1;
        break;
      case J_CARBON: {
        char *end;
        double v;
        (void)strtod(optarg, &end);
        if (*optarg && !*end) { /* a number (or nan, inf, 0x..), not a file */
          if (decimal(optarg, &v) || !(v >= 0) || v > 1e5) {
            cli_error("sim", "--carbon: '%s' is not g/kWh (a finite number from 0 to 100000)",
                      optarg);
            return -1;
          }
          a->o.carbon_g_kwh = v;
        } else {
          a->carbon_file = optarg;
        }
        break;
      }
      case J_CAP:
        if (cli_double("sim", "--power-cap", optarg, 1, 1e12, &a->o.power_cap_w)) return -1;
        break;
      case J_TABLE:
        a->table = 1;
        break;
      case J_PDIR:
        a->pollux_dir = optarg;
        break;
      case J_LOADS: {
        a->nloads = 0;
        const char *s = optarg;
        while (*s) {
          char tok[32];
          size_t n = strcspn(s, ",");
          double v = NAN;
          if (n < sizeof tok) {
            memcpy(tok, s, n);
            tok[n] = 0;
            if (decimal(tok, &v)) v = NAN;
          }
          /* a load the artifact published; NaN (which compares with
           * nothing) never gets that far */
          if (!isfinite(v) || a->nloads == 8 ||
              !isfinite(stk_sim_jobs_published("tiresias", v, 0))) {
            cli_error("sim", "--loads: '%s' is not a list of 0.5, 1, 1.5, 2", optarg);
            return -1;
          }
          a->loads[a->nloads++] = v;
          s += n;
          if (*s) s++;
        }
        break;
      }
      case J_THREADS:
        if (cli_u64("sim", "--threads", optarg, 1, 1024, &a->threads)) return -1;
        break;
      case J_JSON:
        a->json = 1;
        break;
      case J_CSV:
        a->csv = optarg;
        break;
      case J_SVG:
        a->svg = optarg;
        break;
      case 'q':
        a->quiet = 1;
        break;
      default:
        fprintf(stderr, "`stoker help sim` lists the options (jobs mode: --jobs or --pollux-table)\n");
        return -1;
    }
  }
  if (optind < argc) {
    cli_error("sim", "unexpected argument '%s'; `stoker help sim` lists the options", argv[optind]);
    return -1;
  }
  if (a->table && a->njobs) {
    cli_error("sim", "--pollux-table runs the artifact's workloads; it takes no --jobs");
    return -1;
  }
  if (!a->table && !a->njobs) {
    cli_error("sim", "give --jobs FILE or --pollux-table");
    return -1;
  }
  if (a->nloads && !a->table) {
    cli_error("sim", "--loads needs --pollux-table");
    return -1;
  }
  int gpus = (int)(opt_nodes(a) * opt_gpn(a));
  if (a->o.power_cap_w > 0 && cap_gpus(a, gpus) == 0) {
    cli_error("sim",
              "--power-cap: %g W leaves no GPU able to work: %d idle GPUs draw %g W and a busy one "
              "%g W more",
              a->o.power_cap_w, gpus, gpus * a->o.idle_w, a->o.busy_w - a->o.idle_w);
    return -1;
  }
  return 0;
}

static int load_carbon(struct jobs_args *a) {
  FILE *f = fopen(a->carbon_file, "r");
  if (!f) {
    cli_error("sim", "--carbon: %s: cannot open: %s", a->carbon_file, strerror(errno));
    return -1;
  }
  char line[256];
  size_t cap = 0, ln = 0;
  while (fgets(line, sizeof line, f)) {
    ln++;
    char *p = line;
    while (*p == ' ' || *p == '\t') p++;
    if (*p == '#' || *p == '\n' || !*p) continue;
    char *last = strrchr(p, ',');
    char *num = last ? last + 1 : p;
    while (*num == ' ' || *num == '\t') num++;
    char *e = num + strlen(num);
    while (e > num && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r' || e[-1] == '\n')) *--e = 0;
    double v;
    if (decimal(num, &v) || !(v >= 0) || v > 1e5) {
      /* a first line that does not start like a number is a header */
      if (ln == 1 && !strchr("0123456789+-.", *num)) continue;
      cli_error("sim", "--carbon: %s:%zu: '%.40s' is not g/kWh (a finite number from 0 to 100000)",
                a->carbon_file, ln, num);
      fclose(f);
      return -1;
    }
    if (a->ncarbon == cap) {
      cap = cap ? 2 * cap : 256;
      double *n = realloc(a->carbon, sizeof(double) * cap);
      if (!n) {
        fclose(f);
        return -1;
      }
      a->carbon = n;
    }
    a->carbon[a->ncarbon++] = v;
  }
  fclose(f);
  if (!a->ncarbon) {
    cli_error("sim", "--carbon: %s: no values", a->carbon_file);
    return -1;
  }
  a->o.carbon_series = a->carbon;
  a->o.ncarbon = a->ncarbon;
  a->o.carbon_step_s = 3600;
  return 0;
}

static int is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

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

static int cmp_str(const void *x, const void *y) {
  return strcmp(*(char *const *)x, *(char *const *)y);
}

/* The CSV files of a directory, sorted by name (workload-1 .. workload-8
 * keep their numeric order for up to nine files). */
static int list_csv(const char *dir, char ***out, size_t *n) {
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

static const char *find_pollux_dir(const struct jobs_args *a, char *buf, size_t cap) {
  if (a->pollux_dir) return a->pollux_dir;
  const char *env = getenv("STOKER_DATA");
  if (env && *env) {
    snprintf(buf, cap, "%s/pollux", env);
    if (is_dir(buf)) return buf;
  }
  snprintf(buf, cap, "../shared/data/pollux");
  if (is_dir(buf)) return buf;
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = 0;
    snprintf(buf, cap, "%.3900s/../../shared/data/pollux", dirname(exe));
    if (is_dir(buf)) return buf;
  }
  return NULL;
}

/* --pollux-table: the eight workloads per policy and load beside the
 * artifact's published means. The header names the configuration run; a
 * workload whose jobs did not all finish is never averaged over its
 * finished jobs alone: its cell is a marked lower bound (jobs still
 * running or waiting at the horizon) or '-' (jobs that can never run), and
 * its row is not compared with the published figures. */
static void print_pollux_table(const struct jobs_args *a, const struct stk_sim_jobs_result *res) {
  unsigned nodes = opt_nodes(a), gpn = opt_gpn(a);
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
           cap_gpus(a, (int)(nodes * gpn)));
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

static int run_jobs(int argc, char **argv) {
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
  if (jobs_parse(&a, argc, argv)) goto out;
  rc = CLI_FAIL;
  if (a.carbon_file && load_carbon(&a)) goto out;
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
    pdir = find_pollux_dir(&a, pbuf, sizeof pbuf);
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
      if (is_dir(a.jobs[i])) {
        char **v;
        size_t m;
        if (list_csv(a.jobs[i], &v, &m)) goto out;
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
    snprintf(tbuf, sizeof tbuf, "%.4000s/../traces", dirname(tmp));
    if (is_dir(tbuf)) traces = tbuf;
  }
  if (!traces) {
    const char *pd = find_pollux_dir(&a, pbuf, sizeof pbuf);
    if (pd) {
      snprintf(tbuf, sizeof tbuf, "%.4000s/traces", pd);
      traces = tbuf;
    }
  }
  if (traces && stk_sim_apps_load(&apps, traces, err)) {
    cli_error("sim", "%s", err);
    goto out;
  }
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
        snprintf(r->label, sizeof r->label, "%.150s", base(files[i]));
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
    print_pollux_table(&a, res);
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
    struct stk_outfile *o = open_out("--csv", a.csv);
    if (!o) werr = 1;
    else {
      stk_sim_jobs_write_csv(stk_outfile_stream(o), res, nruns, labels);
      werr |= close_out("--csv", o) != 0;
    }
  }
  if (a.svg) {
    struct stk_outfile *o = open_out("--svg", a.svg);
    if (!o) werr = 1;
    else {
      stk_sim_jobs_write_svg(stk_outfile_stream(o), res, nruns, labels, "stoker sim --jobs: JCT CDF and allocated GPUs");
      werr |= close_out("--svg", o) != 0;
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
  free(a.policies_buf);
  free(a.carbon);
  return rc;
}

static int wants_jobs(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strncmp(argv[i], "--jobs", 6) || !strcmp(argv[i], "--pollux-table") ||
        !strncmp(argv[i], "--job-policy", 12))
      return 1;
  return 0;
}

int cmd_sim_run(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "mig")) return cmd_sim_mig(argc - 1, argv + 1);
  if (wants_jobs(argc, argv)) return run_jobs(argc, argv);
  struct sim_args a;
  memset(&a, 0, sizeof a);
  a.seed = 42;
  if (parse_args(&a, argc, argv)) {
    free(a.policies_buf);
    return CLI_USAGE;
  }
  if (a.list) {
    printf("placement policies (--policy, --policies):\n");
    for (size_t i = 0; i < stk_sim_policy_count(); i++)
      printf("%-14s %s\n", stk_sim_policy_name(i), stk_sim_policy_summary(i));
    printf("\njob policies (--job-policy):\n");
    for (size_t i = 0; i < stk_sim_job_policy_count(); i++)
      printf("%-14s %s\n", stk_sim_job_policy_name(i), stk_sim_job_policy_summary(i));
    free(a.policies_buf);
    return CLI_OK;
  }
  if (!a.nodes && find_default_traces(&a)) {
    free(a.policies_buf);
    return CLI_USAGE;
  }
  if (!strcmp(a.nodes, "-") && !strcmp(a.pods, "-")) {
    cli_error("sim", "--nodes and --pods cannot both be stdin");
    free(a.policies_buf);
    return CLI_USAGE;
  }
  if ((a.csv && cli_out_check("sim", "--csv", a.csv)) ||
      (a.svg && cli_out_check("sim", "--svg", a.svg))) { /* before a long experiment */
    free(a.policies_buf);
    return CLI_USAGE;
  }
  char err[STK_ERRMSG_MAX];
  struct stk_sim_cluster *c = NULL;
  struct stk_sim_workload *w = NULL;
  int rc = CLI_FAIL;
  if (stk_sim_cluster_load(&c, a.nodes, err)) {
    cli_error("sim", "%s", err);
    goto out;
  }
  if (a.replay) {
    rc = run_replay(&a, c);
    goto out;
  }
  if (stk_sim_workload_load(&w, c, a.pods, err)) {
    cli_error("sim", "%s", err);
    goto out;
  }
  rc = a.experiment ? run_experiment(&a, c, w) : run_single(&a, c, w);
out:
  stk_sim_workload_free(w);
  stk_sim_cluster_free(c);
  free(a.policies_buf);
  return rc;
}
