/* stoker top: a live terminal view of the agent's figures, per GPU and per
 * job (busy, idle, throttled, input-stalled, power), readable at a glance
 * like nvtop. It runs its own agent in-process; nothing else is needed. */
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

const char cmd_top_usage[] =
    "usage: stoker top [OPTIONS]\n"
    "\n"
    "A live view per GPU (utilization, power, memory, temperature, throttle\n"
    "reasons, job) and per job (GPUs, busy, idle, throttled and input-stalled\n"
    "shares of its allocated GPU time since top started, power, idle streak).\n"
    "Ctrl-C quits.\n"
    "\n"
    "  --interval S          seconds between frames (default 1)\n"
    "  --frames N            draw N frames and exit\n"
    "  --plain               no screen clearing (a log of frames)\n"
    "  --nvml LIB            NVML library (as for stoker watch)\n"
    "  --mapping-dir DIR     dcgm-exporter HPC job-mapping directory\n"
    "  --runtime-dir DIR     loader publications (default /dev/shm/stoker)\n"
    "  --proc-root DIR       /proc to read (default /proc)\n"
    "  --fast-time           do not sleep between frames (replays; tests)\n";

static const char *pct(double part, double whole, char *buf, size_t n) {
  if (!(whole > 0)) return "-";
  snprintf(buf, n, "%.0f%%", 100 * part / whole);
  return buf;
}

static void reasons_text(uint64_t r, char *buf, size_t n) {
  static const struct { uint64_t bit; const char *name; } names[] = {
      {0x4, "power-cap"}, {0x8, "hw-slow"}, {0x10, "sync-boost"}, {0x20, "sw-thermal"},
      {0x40, "hw-thermal"}, {0x80, "power-brake"}};
  buf[0] = 0;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (r & names[i].bit) {
      size_t l = strlen(buf);
      snprintf(buf + l, n - l, "%s%s", l ? "," : "", names[i].name);
    }
  if (!buf[0]) snprintf(buf, n, "-");
}

static void draw(FILE *f, const struct stk_watch_view *v, int clear) {
  if (clear) fputs("\033[H\033[2J", f);
  char a[32], b[32];
  fprintf(f, "stoker top   cpu %s busy, %s steal   memory %s used\n",
          isnan(v->cpu_busy) ? "-" : (snprintf(a, sizeof a, "%.0f%%", 100 * v->cpu_busy), a),
          isnan(v->cpu_steal) ? "-" : (snprintf(b, sizeof b, "%.1f%%", 100 * v->cpu_steal), b),
          isnan(v->mem_used_ratio) ? "-" : (snprintf(a, sizeof a, "%.0f%%", 100 * v->mem_used_ratio), a));
  fprintf(f, "%s\n\n", v->nvml_status);
  if (v->ngpus) {
    fprintf(f, "%-4s %-28s %5s %8s %17s %5s  %-18s %s\n", "GPU", "MODEL", "UTIL", "POWER",
            "MEMORY (MiB)", "TEMP", "THROTTLE", "JOB");
    for (unsigned i = 0; i < v->ngpus; i++) {
      const struct stk_watch_gpu_view *g = &v->gpus[i];
      if (g->lost) {
        fprintf(f, "%-4u %-28.28s  LOST (fell off the bus)\n", g->index, g->model);
        continue;
      }
      char util[16] = "-", pw[16] = "-", mem[32] = "-", temp[16] = "-", thr[64];
      if (!isnan(g->util)) snprintf(util, sizeof util, "%.0f%%", g->util);
      if (!isnan(g->power_w)) snprintf(pw, sizeof pw, "%.0f W", g->power_w);
      if (!isnan(g->mem_used_mib) && !isnan(g->mem_total_mib))
        snprintf(mem, sizeof mem, "%.0f/%.0f", g->mem_used_mib, g->mem_total_mib);
      if (!isnan(g->temp_c)) snprintf(temp, sizeof temp, "%.0fC", g->temp_c);
      reasons_text(g->reasons, thr, sizeof thr);
      fprintf(f, "%-4u %-28.28s %5s %8s %17s %5s  %-18.18s %s\n", g->index, g->model, util, pw, mem,
              temp, thr, g->job[0] ? g->job : "-");
    }
    fputc('\n', f);
  }
  if (!v->njobs) {
    fprintf(f, "no jobs: no GPU processes, mapped GPUs or stoker loaders seen yet\n");
    return;
  }
  fprintf(f, "%-24s %4s %4s %6s %6s %9s %13s %8s %9s\n", "JOB", "GPUS", "LDRS", "BUSY", "IDLE",
          "THROTTLED", "INPUT-STALLED", "POWER", "IDLE FOR");
  for (unsigned i = 0; i < v->njobs; i++) {
    const struct stk_watch_job_view *j = &v->jobs[i];
    char c1[16], c2[16], c3[16], c4[16], pw[16], idle[16];
    snprintf(pw, sizeof pw, "%.0f W", j->power_w);
    if (j->idle_streak_s > 0)
      snprintf(idle, sizeof idle, "%.1f min", j->idle_streak_s / 60);
    else
      snprintf(idle, sizeof idle, "-");
    fprintf(f, "%-24.24s %4u %4u %6s %6s %9s %13s %8s %9s\n", j->job, j->gpus, j->loaders,
            pct(j->busy_s, j->allocated_s, c1, sizeof c1), pct(j->idle_s, j->allocated_s, c2, sizeof c2),
            pct(j->throttled_s, j->allocated_s, c3, sizeof c3),
            pct(j->input_stalled_s, j->allocated_s, c4, sizeof c4), j->gpus ? pw : "-", idle);
  }
}

int cmd_top_run(int argc, char **argv) {
  enum { O_INTERVAL = 1, O_FRAMES, O_PLAIN, O_NVML, O_MAPDIR, O_RUNDIR, O_PROC, O_FAST };
  static const struct option opts[] = {
      {"interval", 1, 0, O_INTERVAL}, {"frames", 1, 0, O_FRAMES}, {"plain", 0, 0, O_PLAIN},
      {"nvml", 1, 0, O_NVML}, {"mapping-dir", 1, 0, O_MAPDIR}, {"runtime-dir", 1, 0, O_RUNDIR},
      {"proc-root", 1, 0, O_PROC}, {"fast-time", 0, 0, O_FAST}, {"help", 0, 0, 'h'},
      {0, 0, 0, 0}};
  struct stk_watch_opts o = {0};
  o.nvml_lib = getenv("STOKER_NVML_LIB");
  uint64_t frames = 0;
  int plain = !isatty(1);
  int c;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case O_INTERVAL:
      if (cli_double("top", "--interval", optarg, 0.05, 3600, &o.interval_s)) return CLI_USAGE;
      break;
    case O_FRAMES:
      if (cli_u64("top", "--frames", optarg, 1, 1000000000, &frames)) return CLI_USAGE;
      break;
    case O_PLAIN: plain = 1; break;
    case O_NVML: o.nvml_lib = optarg; break;
    case O_MAPDIR: o.mapping_dir = optarg; break;
    case O_RUNDIR: o.runtime_dir = optarg; break;
    case O_PROC: o.proc_root = optarg; break;
    case O_FAST: o.fast_time = 1; break;
    case 'h': cli_usage(stdout, "top"); return CLI_OK;
    default:
      cli_error("top", "unknown option '%s' (see: stoker help top)", argv[optind - 1]);
      return CLI_USAGE;
    }
  }
  if (optind < argc) {
    cli_error("top", "unexpected argument '%s'", argv[optind]);
    return CLI_USAGE;
  }
  char err[STK_ERRMSG_MAX];
  struct stk_watch *w;
  stk_log_set_level(STK_LOG_ERROR); /* warnings would scroll the screen */
  if (stk_watch_open(&w, &o, err) != 0) {
    cli_error("top", "%s", err);
    return CLI_USAGE;
  }
  cli_catch_signals();
  stk_watch_sample(w); /* the baseline; the first frame follows one interval later */
  int rc = CLI_OK;
  for (uint64_t n = 0; !frames || n < frames; n++) {
    if (stk_watch_wait(w, &cli_interrupted)) break;
    stk_watch_sample(w);
    struct stk_watch_view v;
    if (stk_watch_view(w, &v) != 0) {
      rc = CLI_FAIL;
      break;
    }
    draw(stdout, &v, !plain);
    if (plain) fputc('\n', stdout);
    fflush(stdout);
    stk_watch_view_free(&v);
  }
  stk_watch_close(w);
  return rc;
}
