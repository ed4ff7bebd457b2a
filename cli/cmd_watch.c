/* stoker watch: the metrics agent. Samples GPUs (NVML), the host (/proc)
 * and the node's stoker loaders, attributes GPU time, throttling and input
 * stalls to jobs, serves them to Prometheus on /metrics, and optionally
 * reaps jobs whose GPUs sat idle. --once prints one reading and exits. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli.h"

const char cmd_watch_usage[] =
    "usage: stoker watch [OPTIONS]\n"
    "\n"
    "Sample every GPU (NVML, loaded at run time), the host (/proc) and every\n"
    "stoker loader on this node; attribute GPU time, throttling and input stalls\n"
    "to jobs; serve it all on http://HOST:PORT/metrics for Prometheus, device\n"
    "metrics under dcgm-exporter's names (DCGM_FI_DEV_GPU_UTIL, ...). Without a\n"
    "GPU or NVML it serves the host and loader metrics and says why once.\n"
    "\n"
    "sampling:\n"
    "  --interval S          seconds between samples (default 1)\n"
    "  --once                sample twice, one interval apart, print, exit\n"
    "  --json                print JSON (with --once, or at exit)\n"
    "  --samples N           stop after N samples\n"
    "  --fast-time           do not sleep: each sample stands for one interval\n"
    "                        (replaying a fake NVML scenario; tests)\n"
    "sources:\n"
    "  --nvml LIB            NVML library (default $STOKER_NVML_LIB, else\n"
    "                        libnvidia-ml.so.1); 'none' turns GPU metrics off\n"
    "  --mapping-dir DIR     dcgm-exporter HPC job-mapping directory (files named\n"
    "                        by GPU index or GPU.INSTANCE, one job id a line)\n"
    "  --pod-resources SOCK  the kubelet's pod-resources socket: the pods holding\n"
    "                        each GPU (default\n"
    "                        /var/lib/kubelet/pod-resources/kubelet.sock when it\n"
    "                        exists); 'none' turns it off\n"
    "  --pod-publications    also read loader publications in each GPU process's\n"
    "                        own /dev/shm/stoker (a pod's; no hostPath needed)\n"
    "  --runtime-dir DIR     loader publications (default $STOKER_RUNTIME_DIR,\n"
    "                        else /dev/shm/stoker)\n"
    "  --proc-root DIR       /proc to read (default /proc)\n"
    "  --hostname NAME       the hostname label (default this host's name)\n"
    "figures:\n"
    "  --price-kwh X         energy price per kWh (adds stoker_job_energy_cost_total)\n"
    "  --carbon-g-kwh X      grams CO2e per kWh (adds stoker_job_carbon_grams_total)\n"
    "  --job-ttl S           forget a job unseen for S seconds (default 300)\n"
    "serving:\n"
    "  --listen ADDR         HOST:PORT or :PORT (default :9400, dcgm-exporter's);\n"
    "                        a scraper that sends Accept-Encoding: gzip gets gzip\n"
    "  --web-config-file FILE  TLS and basic auth, in Prometheus exporter-toolkit's\n"
    "                        web configuration format (also --web.config.file);\n"
    "                        read again when it or its certificate changes\n"
    "  --no-http             do not serve\n"
    "  --port-file FILE      write the port served on (useful with port 0)\n"
    "  --metrics-out FILE    also write the exposition to FILE after each sample\n"
    "                        (atomically; for node_exporter's textfile collector)\n"
    "  --keep-serving        after --samples N, keep serving until interrupted\n"
    "cardinality (fewer series on a large fleet):\n"
    "  --no-process-series   no per-process series (stoker_gpu_process_*,\n"
    "                        stoker_process_cpu_seconds_total)\n"
    "  --no-job-labels       no hpc_job on device series: one per GPU or MIG\n"
    "                        instance (stoker_job_* keep their jobs)\n"
    "idle-job reaper (off by default):\n"
    "  --reap-after MIN      act on a job whose GPUs were all idle in every\n"
    "                        sample for MIN minutes\n"
    "  --reap-warn MIN       warn this long before acting (default MIN/2)\n"
    "  --reap-command CMD    run CMD ({job} is replaced; {pod}, {namespace} for a\n"
    "                        pod), e.g. 'scancel {job}' (only where squeue puts\n"
    "                        the job on this node alone)\n"
    "  --reap-warn-command CMD  run at the warning ({job}, {minutes})\n"
    "  --reap-exempt PATTERN never act on jobs matching PATTERN (repeatable)\n"
    "  --reap-prometheus URL act only where this Prometheus shows the job idle\n"
    "                        on all its nodes (every node's agent scraped)\n"
    "  --reap-dry-run        log what would be done, run nothing\n"
    "  -q, --quiet           no status lines on stderr\n"
    "\n"
    "SIGTERM stops it cleanly (exit 0: systemctl stop, a pod's deletion); Ctrl-C\n"
    "(SIGINT) exits 130.\n";

enum {
  O_INTERVAL = 1, O_ONCE, O_JSON, O_SAMPLES, O_FAST, O_NVML, O_MAPDIR, O_RUNDIR, O_PROC,
  O_HOST, O_PRICE, O_CARBON, O_TTL, O_LISTEN, O_NOHTTP, O_PORTFILE, O_OUT, O_KEEP, O_REAP,
  O_REAPWARN, O_REAPCMD, O_REAPWARNCMD, O_EXEMPT, O_DRY, O_NOPROC, O_NOJOBLAB,
  O_PODRES, O_WEBCFG, O_REAPPROM, O_PODPUB
};

static int write_atomic(const char *path, const char *buf, size_t len) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) return -1;
  int ok = fwrite(buf, 1, len, f) == len;
  ok &= fclose(f) == 0;
  if (!ok || rename(tmp, path) != 0) {
    unlink(tmp);
    return -1;
  }
  return 0;
}

/* SIGTERM is how a service manager stops an agent (systemctl stop, a
 * pod's deletion): a clean stop, exit 0, so that the unit ends inactive,
 * not failed. SIGINT (Ctrl-C at a terminal) stays an interruption (130).
 * As with cli_catch_signals(), a second signal takes the default action. */
static volatile sig_atomic_t terminated;

static void on_term(int sig) {
  int saved = errno;
  terminated = 1;
  __atomic_store_n(&cli_interrupted, 1, __ATOMIC_RELAXED);
  signal(sig, SIG_DFL);
  errno = saved;
}

static void catch_term(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_term;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
}

int cmd_watch_run(int argc, char **argv) {
  static const struct option opts[] = {
      {"interval", 1, 0, O_INTERVAL}, {"once", 0, 0, O_ONCE}, {"json", 0, 0, O_JSON},
      {"samples", 1, 0, O_SAMPLES}, {"fast-time", 0, 0, O_FAST}, {"nvml", 1, 0, O_NVML},
      {"mapping-dir", 1, 0, O_MAPDIR}, {"runtime-dir", 1, 0, O_RUNDIR},
      {"proc-root", 1, 0, O_PROC}, {"hostname", 1, 0, O_HOST}, {"price-kwh", 1, 0, O_PRICE},
      {"carbon-g-kwh", 1, 0, O_CARBON}, {"job-ttl", 1, 0, O_TTL}, {"listen", 1, 0, O_LISTEN},
      {"no-http", 0, 0, O_NOHTTP}, {"port-file", 1, 0, O_PORTFILE},
      {"metrics-out", 1, 0, O_OUT}, {"keep-serving", 0, 0, O_KEEP},
      {"reap-after", 1, 0, O_REAP}, {"reap-warn", 1, 0, O_REAPWARN},
      {"reap-command", 1, 0, O_REAPCMD}, {"reap-warn-command", 1, 0, O_REAPWARNCMD},
      {"reap-exempt", 1, 0, O_EXEMPT}, {"reap-dry-run", 0, 0, O_DRY}, {"quiet", 0, 0, 'q'},
      {"no-process-series", 0, 0, O_NOPROC}, {"no-job-labels", 0, 0, O_NOJOBLAB},
      {"pod-resources", 1, 0, O_PODRES}, {"web-config-file", 1, 0, O_WEBCFG},
      {"web.config.file", 1, 0, O_WEBCFG}, {"reap-prometheus", 1, 0, O_REAPPROM},
      {"pod-publications", 0, 0, O_PODPUB},
      {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
  struct stk_watch_opts o = {0};
  const char *podres = NULL;
  int once = 0, json = 0, no_http = 0, quiet = 0, keep = 0;
  uint64_t samples = 0;
  const char *listen = ":9400", *port_file = NULL, *out = NULL;
  const char *exempt[65] = {0};
  int nexempt = 0;
  double minutes;
  o.nvml_lib = getenv("STOKER_NVML_LIB");
  int c;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "qh", opts, NULL)) != -1) {
    switch (c) {
    case O_INTERVAL:
      if (cli_double("watch", "--interval", optarg, 0.01, 3600, &o.interval_s)) return CLI_USAGE;
      break;
    case O_ONCE: once = 1; break;
    case O_JSON: json = 1; break;
    case O_SAMPLES:
      if (cli_u64("watch", "--samples", optarg, 1, UINT64_MAX / 2, &samples)) return CLI_USAGE;
      break;
    case O_FAST: o.fast_time = 1; break;
    case O_NVML: o.nvml_lib = optarg; break;
    case O_MAPDIR: o.mapping_dir = optarg; break;
    case O_PODRES: podres = optarg; break;
    case O_WEBCFG: o.web_config_file = optarg; break;
    case O_REAPPROM: o.reap_prometheus = optarg; break;
    case O_PODPUB: o.pod_publications = 1; break;
    case O_RUNDIR: o.runtime_dir = optarg; break;
    case O_PROC: o.proc_root = optarg; break;
    case O_HOST: o.hostname = optarg; break;
    case O_PRICE:
      if (cli_double("watch", "--price-kwh", optarg, 0, 1e6, &o.price_per_kwh)) return CLI_USAGE;
      break;
    case O_CARBON:
      if (cli_double("watch", "--carbon-g-kwh", optarg, 0, 1e6, &o.carbon_g_per_kwh)) return CLI_USAGE;
      break;
    case O_TTL:
      if (cli_double("watch", "--job-ttl", optarg, 1, 1e9, &o.job_ttl_s)) return CLI_USAGE;
      break;
    case O_LISTEN: listen = optarg; break;
    case O_NOHTTP: no_http = 1; break;
    case O_PORTFILE: port_file = optarg; break;
    case O_OUT: out = optarg; break;
    case O_KEEP: keep = 1; break;
    case O_REAP:
      if (cli_double("watch", "--reap-after", optarg, 0.001, 1e7, &minutes)) return CLI_USAGE;
      o.reap_after_s = minutes * 60;
      break;
    case O_REAPWARN:
      if (cli_double("watch", "--reap-warn", optarg, 0, 1e7, &minutes)) return CLI_USAGE;
      o.reap_warn_s = minutes * 60;
      break;
    case O_REAPCMD: o.reap_command = optarg; break;
    case O_REAPWARNCMD: o.reap_warn_command = optarg; break;
    case O_EXEMPT:
      if (nexempt >= 64) {
        cli_error("watch", "--reap-exempt: at most 64 patterns");
        return CLI_USAGE;
      }
      exempt[nexempt++] = optarg;
      break;
    case O_DRY: o.reap_dry_run = 1; break;
    case O_NOPROC: o.no_process_series = 1; break;
    case O_NOJOBLAB: o.no_job_labels = 1; break;
    case 'q': quiet = 1; break;
    case 'h': cli_usage(stdout, "watch"); return CLI_OK;
    default:
      cli_error("watch", "unknown option '%s' (see: stoker help watch)", argv[optind - 1]);
      return CLI_USAGE;
    }
  }
  if (optind < argc) {
    cli_error("watch", "unexpected argument '%s'", argv[optind]);
    return CLI_USAGE;
  }
  if ((o.reap_command || o.reap_warn_command || o.reap_dry_run || nexempt) && !(o.reap_after_s > 0)) {
    cli_error("watch", "the reaper options need --reap-after MIN");
    return CLI_USAGE;
  }
  if (o.reap_after_s > 0 && !o.reap_command && !o.reap_dry_run) {
    cli_error("watch", "--reap-after needs --reap-command CMD (or --reap-dry-run)");
    return CLI_USAGE;
  }
  if (o.reap_warn_s > 0 && o.reap_warn_s > o.reap_after_s) {
    cli_error("watch", "--reap-warn must not be longer than --reap-after");
    return CLI_USAGE;
  }
  if (keep && !samples) {
    cli_error("watch", "--keep-serving goes with --samples N");
    return CLI_USAGE;
  }
  if (!quiet) stk_log_set_level(stk_log_get_level() < STK_LOG_WARN ? STK_LOG_WARN : stk_log_get_level());
  else stk_log_set_level(STK_LOG_ERROR);
  o.reap_exempt = exempt;
  /* A node agent keeps a descriptor per GPU process: use the hard limit. */
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  char err[STK_ERRMSG_MAX];
  struct stk_watch *w;
  /* Kubernetes pods: the kubelet's socket where this node has one. */
  static const char kubelet_sock[] = "/var/lib/kubelet/pod-resources/kubelet.sock";
  if (!podres && access(kubelet_sock, F_OK) == 0) podres = kubelet_sock;
  o.pod_resources_socket = podres && strcmp(podres, "none") ? podres : NULL;
  if (stk_watch_open(&w, &o, err) != 0) {
    cli_error("watch", "%s", err);
    return CLI_USAGE;
  }
  if (!quiet) fprintf(stderr, "stoker watch: %s\n", stk_watch_nvml_status(w));
  cli_catch_signals();
  catch_term();
  if (once) {
    no_http = 1;
    samples = 2;
  }
  /* The first sample before serving: a scrape never sees an empty page. */
  stk_watch_sample(w);
  if (!no_http) {
    int port = 0;
    int src = stk_watch_serve(w, listen, &port, err);
    if (src != 0) {
      cli_error("watch", "%s", err);
      stk_watch_close(w);
      return src == STK_EINVAL ? CLI_USAGE : CLI_FAIL;
    }
    if (!quiet) fprintf(stderr, "stoker watch: serving http://%s/metrics (port %d)\n", listen, port);
    if (port_file) {
      char pb[32];
      int n = snprintf(pb, sizeof pb, "%d\n", port);
      if (write_atomic(port_file, pb, (size_t)n) != 0) {
        cli_error("watch", "%s: cannot write the port file", port_file);
        stk_watch_close(w);
        return CLI_FAIL;
      }
    }
  }
  int rc = CLI_OK;
  for (uint64_t n = 0; !samples || n < samples; n++) {
    if (n && stk_watch_wait(w, &cli_interrupted)) break;
    if (cli_stop_requested()) break;
    if (n) stk_watch_sample(w);
    if (out) {
      char *buf;
      size_t len;
      if (stk_watch_prometheus(w, &buf, &len) == 0) {
        if (write_atomic(out, buf, len) != 0) {
          cli_error("watch", "%s: cannot write", out);
          free(buf);
          rc = CLI_FAIL;
          break;
        }
        free(buf);
      }
    }
  }
  while (keep && rc == CLI_OK && !cli_stop_requested()) stk_sleep_ns(100000000);
  if (once || json) {
    if (json) {
      struct stk_json j;
      stk_json_init(&j, stdout, 2);
      stk_watch_json(w, &j);
      fputc('\n', stdout);
    } else {
      char *buf;
      size_t len;
      if (stk_watch_prometheus(w, &buf, &len) == 0) {
        fwrite(buf, 1, len, stdout);
        free(buf);
      }
    }
  }
  stk_watch_close(w);
  if (rc == CLI_OK && cli_stop_requested() && !keep && !terminated) rc = CLI_INTERRUPTED;
  return rc;
}
