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
#include "cmd_sim.h"
#include "cmd_sim_infer.h"
#include "cmd_sim_mig.h"

const char cmd_sim_usage[] =
    "usage: stoker sim [--nodes FILE --pods FILE] [--policy NAME] [--seed S] [OPTIONS]\n"
    "       stoker sim --experiment [--policies A,B,..] [--seeds N] [OPTIONS]\n"
    "       stoker sim --replay [--policy NAME] [OPTIONS]\n"
    "       stoker sim --jobs FILE|DIR [--job-policy LIST] [JOB OPTIONS]\n"
    "       stoker sim --pollux-table [--loads LIST] [--job-policy LIST]\n"
    "       stoker sim --list-policies\n"
    "       stoker sim mig [--gpu G] | mig --parvagpu [DIR] [--scenario N] [--allocator A]\n"
    "       stoker sim mig --online [openb|philly|FILE] [--gpus N] [--mig-policy LIST]\n"
    "       stoker sim infer [--trace code|conv|FILE] [--lend] [--jobs FILE] [--study]\n"
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
    "                      --pods may also be a duration trace (submit time,\n"
    "                      num_gpus, duration: Philly's): each job a pod of\n"
    "                      whole GPUs on one node, asking no CPU or memory\n"
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
    "  --job-policy LIST   fifo, sjf, tiresias, optimus, pollux, multi, carbon,\n"
    "                      gavel, sia, sia-glpk (the last three need --gpu-types;\n"
    "                      sia solves its program exactly, sia-glpk with GLPK)\n"
    "                      (default tiresias); a comma list runs each\n"
    "  --pollux-table      the artifact's 8 workloads at each load with tiresias,\n"
    "                      optimus and pollux, beside its published mean JCTs\n"
    "  --pollux-dir DIR    the artifact's inputs (default ../shared/data/pollux)\n"
    "  --loads LIST        loads for --pollux-table (default 0.5,1,1.5,2)\n"
    "  --traces DIR        application measurements (default: the job list's\n"
    "                      ../traces, else ../shared/data/pollux/traces)\n"
    "  --cluster NxG       nodes x GPUs per node (default 16x4)\n"
    "  --gpu-types SPEC    heterogeneous cluster, TYPE:NxG,.. (Sia artifact types aws,\n"
    "                      rtx, dgx-ext, quad, dgx, azure; \"sia\" = aws:6x4,rtx:3x8,\n"
    "                      dgx-ext:2x8); --traces holds placements-TYPE.csv\n"
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
    "  --placer P          fifo, sjf, tiresias, multi, carbon: a placement policy\n"
    "                      (FGD, BestFit, ...) places each job as pods of whole\n"
    "                      GPUs, one node per pod (default: the nodes with the\n"
    "                      most free GPUs); mig[:PROFILE]: each GPU an A100 80 GB\n"
    "                      cut into MIG instances, a 1-GPU job on one PROFILE\n"
    "                      instance (default 2g), k GPUs on k 7g instances\n"
    "  --threads N         concurrent runs (default: cores)\n"
    "  --json, --csv FILE, --svg FILE  as above: runs as JSON, one CSV row per job,\n"
    "                      JCT CDFs and allocated GPUs over time\n"
    "\n"
    "MIG partitions (stoker sim mig, docs/sim-mig.md):\n"
    "  mig [--gpu G]       NVIDIA's MIG profiles, start slots and layout counts of\n"
    "                      a100-40gb, a100-80gb and h100-80gb (or only G)\n"
    "  mig --parvagpu [DIR]  ParvaGPU's SLO scenarios (DIR default\n"
    "                      ../shared/data/parvagpu): GPUs each allocator needs,\n"
    "                      the bound no plan beats, the artifact's published count\n"
    "  --scenario N        one scenario (default all)\n"
    "  --allocator A       artifact (its configurator and allocator), packed\n"
    "                      (fewest slices, exact packing) or both (default)\n"
    "  --map               list each plan's segments per GPU\n"
    "  mig --online [TRACE]  requests replayed over time on MIG GPUs (TRACE: openb,\n"
    "                      the default, philly, or a pod list or duration trace):\n"
    "                      utilization under each policy\n"
    "  --gpu G, --gpus N   the GPUs (default a100-80gb, 64)\n"
    "  --mig-policy LIST   fifo (first fit, no reconfiguration), fifo-reconf (first\n"
    "                      fit, reconfigures idle instances), mig-aware (least\n"
    "                      fragmentation, reconfigures), multi (weighted score,\n"
    "                      backfills); default all four\n"
    "  --compress F        arrivals F times denser; --delay S instance creation (5)\n"
    "  --one-gpu P         profile of a one-GPU job of a duration trace (2g)\n"
    "  --weights F,W,R     multi: fragmentation, hours waited, reconfiguration\n"
    "                      (1,1,0.5); --window N waiting requests it weighs (32)\n"
    "\n"
    "inference beside training (stoker sim infer, docs/sim_infer.md):\n"
    "  --trace T           code or conv (Azure 2023, ../shared/data) or a FILE\n"
    "  --scale X           arrivals X times faster (default 1); --horizon S repeats\n"
    "                      the trace to fill S seconds\n"
    "  --perf FILE         Splitwise perf_model.csv; --model (llama2-70b),\n"
    "                      --hardware (a100-80gb), --tp N (4)\n"
    "  --replicas N        the service's replicas (8); --max-batch B (16),\n"
    "                      --prefill-tokens N (4096 prompt tokens a prefill admits)\n"
    "  --ttft S, --tbt S   targets (5 s, 0.2 s)\n"
    "  --lend              lend whole replicas' GPUs to training off-peak:\n"
    "                      --headroom H (0.25), --start S (60: a replica taken\n"
    "                      back serves S later), --interval S (60),\n"
    "                      --min-replicas N (1: never fewer serving)\n"
    "  --mig P             lend on MIG instances too: the last replica needed may\n"
    "                      serve on profile P (e.g. 4g) of each GPU and lend the\n"
    "                      rest; --mig-delay S instance creation (5)\n"
    "  --jobs FILE         training on the same cluster (--cluster NxG, 16x4;\n"
    "                      --job-policy P, pollux; --traces DIR)\n"
    "  --study             keep-all, then lending at headroom 0..200% (with --mig,\n"
    "                      whole replicas then MIG): the most GPU-hours lent at\n"
    "                      >= 99% SLO attainment\n";

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

const char *sim_base(const char *p) {
  if (!strcmp(p, "-")) return "<stdin>";
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

/* Output files go through stk_outfile: whole or not at all ("-" = stdout). */
struct stk_outfile *sim_open_out(const char *opt, const char *path) {
  struct stk_outfile *o;
  return cli_out_open("sim", opt, path, &o) ? NULL : o;
}

int sim_close_out(const char *opt, struct stk_outfile *o) {
  return cli_out_commit("sim", opt, o);
}

/* The trace whose published figures apply: only the openb pod lists on the
 * GPU-node list the paper used. */
static const char *paper_trace(const struct sim_args *a) {
  return strcmp(sim_base(a->nodes), "openb_node_list_gpu_node.csv") ? NULL : a->pods;
}

static void describe_inputs(const struct sim_args *a, const struct stk_sim_cluster *c,
                            const struct stk_sim_workload *w) {
  struct stk_sim_cluster_info ci;
  stk_sim_cluster_info(c, &ci);
  printf("cluster  %s: %u nodes (%u with GPUs), %llu GPUs of %u model%s\n", sim_base(a->nodes),
         ci.nodes, ci.gpu_nodes, (unsigned long long)ci.gpus, ci.models, ci.models == 1 ? "" : "s");
  if (!w) return;
  struct stk_sim_workload_info wi;
  stk_sim_workload_info(w, &wi);
  printf(
      "workload %s: %llu pods (%llu CPU-only, %llu GPU-sharing, %llu whole-GPU), GPU demand %.1f%% "
      "of capacity; %u specs, %u typical\n",
      sim_base(a->pods), (unsigned long long)wi.pods, (unsigned long long)wi.cpu_pods,
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
    struct stk_outfile *f = sim_open_out("--csv", a->csv);
    if (!f) return CLI_FAIL;
    stk_sim_write_csv(stk_outfile_stream(f), r, n);
    if (sim_close_out("--csv", f)) return CLI_FAIL;
  }
  if (a->svg) {
    struct stk_outfile *f = sim_open_out("--svg", a->svg);
    if (!f) return CLI_FAIL;
    char title[512];
    snprintf(title, sizeof title, "%s on %s", sim_base(a->pods), sim_base(a->nodes));
    stk_sim_write_svg(stk_outfile_stream(f), r, n, title);
    if (sim_close_out("--svg", f)) return CLI_FAIL;
  }
  return CLI_OK;
}

static int run_single(const struct sim_args *a, const struct stk_sim_cluster *c,
                      const struct stk_sim_workload *w) {
  struct stk_sim_run_opts ro = {0, a->policy ? a->policy : "FGD", a->seed, a->inflate};
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
    if (!(ocsv = sim_open_out("--csv", a->csv))) return CLI_FAIL;
    out.csv = stk_outfile_stream(ocsv);
    fprintf(out.csv, "time,alloc_pct,frag_gpus,frag_ratio_pct,running,queued\n");
  }
  if (a->podlog) {
    if (!(olog = sim_open_out("--pod-log", a->podlog))) {
      stk_outfile_abort(ocsv);
      return CLI_FAIL;
    }
    out.podlog = stk_outfile_stream(olog);
    fprintf(out.podlog, "name,outcome,node,creation_time,start_time,queue_delay\n");
  }
  struct stk_sim_replay_opts ro = {
      0, a->policy ? a->policy : "FGD", a->seed, a->compress, on_sample, on_pod, &out};
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
  if (ocsv && sim_close_out("--csv", ocsv)) frc = CLI_FAIL;
  if (olog && sim_close_out("--pod-log", olog)) frc = CLI_FAIL;
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
    printf("replay   %s with %s, seed %llu: %llu pods over %.1f days", sim_base(a->pods), r.policy,
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

static int wants_jobs(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strncmp(argv[i], "--jobs", 6) || !strcmp(argv[i], "--pollux-table") ||
        !strncmp(argv[i], "--gpu-types", 11) ||
        !strncmp(argv[i], "--job-policy", 12))
      return 1;
  return 0;
}

int cmd_sim_run(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "mig")) return cmd_sim_mig(argc - 1, argv + 1);
  if (argc > 1 && !strcmp(argv[1], "infer")) return cmd_sim_infer(argc - 1, argv + 1);
  if (wants_jobs(argc, argv)) return cmd_sim_jobs(argc, argv);
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

