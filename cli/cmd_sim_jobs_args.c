/* stoker sim --jobs: its options, checked and parsed into struct jobs_args
 * (cli/cmd_sim.h). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cmd_sim.h"

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
int simj_cap_gpus(const struct jobs_args *a, int gpus) {
  if (!(a->o.power_cap_w > 0)) return gpus;
  double extra = a->o.busy_w > a->o.idle_w
                     ? (a->o.power_cap_w - gpus * a->o.idle_w) / (a->o.busy_w - a->o.idle_w)
                     : a->o.power_cap_w >= gpus * a->o.idle_w ? gpus : -1;
  return extra < 0 ? 0 : extra < gpus ? (int)extra : gpus;
}

unsigned simj_nodes(const struct jobs_args *a) { return a->o.nodes ? a->o.nodes : 16; }
unsigned simj_gpn(const struct jobs_args *a) {
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
  J_TYPES,
  J_PLACER,
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
    {"gpu-types", 1, 0, J_TYPES},
    {"placer", 1, 0, J_PLACER},
    {"quiet", 0, 0, 'q'},
    {0, 0, 0, 0},
};

int simj_parse(struct jobs_args *a, int argc, char **argv) {
  int c, cluster_given = 0;
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
      case J_TYPES:
        if (simj_parse_types(a, optarg)) return -1;
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
        cluster_given = 1;
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
      case J_PLACER:
        if (stk_sim_policy_find(optarg) < 0 && strcmp(optarg, "mig") &&
            strncmp(optarg, "mig:", 4)) {
          cli_error("sim",
                    "--placer: no placement policy '%s'; `stoker sim --list-policies` names them "
                    "(or mig, mig:PROFILE for MIG instances)",
                    optarg);
          return -1;
        }
        a->o.placer = optarg;
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
  /* both size the cluster; the engine would take --gpu-types' and drop --cluster without a word */
  if (cluster_given && a->ntypes) {
    cli_error("sim", "--cluster and --gpu-types both give the cluster's size; give one "
                     "(--gpu-types TYPE:NODESxGPUS sizes each type)");
    return -1;
  }
  if (a->nloads && !a->table) {
    cli_error("sim", "--loads needs --pollux-table");
    return -1;
  }
  int gpus = (int)(simj_nodes(a) * simj_gpn(a));
  if (a->o.power_cap_w > 0 && simj_cap_gpus(a, gpus) == 0) {
    cli_error("sim",
              "--power-cap: %g W leaves no GPU able to work: %d idle GPUs draw %g W and a busy one "
              "%g W more",
              a->o.power_cap_w, gpus, gpus * a->o.idle_w, a->o.busy_w - a->o.idle_w);
    return -1;
  }
  return 0;
}

int simj_load_carbon(struct jobs_args *a) {
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

int simj_is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}


int simj_parse_types(struct jobs_args *a, const char *v) {
  free(a->types_buf);
  a->types_buf = strdup(!strcmp(v, "sia") ? "aws:6x4,rtx:3x8,dgx-ext:2x8" : v);
  if (!a->types_buf) return -1;
  a->ntypes = 0;
  char *save = NULL;
  for (char *t = strtok_r(a->types_buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    char *colon = strchr(t, ':');
    unsigned n, g;
    char tail;
    if (!colon || colon == t || sscanf(colon + 1, "%ux%u%c", &n, &g, &tail) != 2 || n < 1 ||
        n > 64 || g < 1 || g > 16) {
      cli_error("sim", "--gpu-types: '%s' is not TYPE:NODESxGPUS (1..64 x 1..16)", t);
      return -1;
    }
    if (a->ntypes == 8) {
      cli_error("sim", "--gpu-types: at most 8 types");
      return -1;
    }
    *colon = 0;
    for (size_t k = 0; k < a->ntypes; k++)
      if (!strcmp(a->types[k].name, t)) {
        cli_error("sim", "--gpu-types: type '%s' given twice", t);
        return -1;
      }
    a->types[a->ntypes].name = t;
    a->types[a->ntypes].nodes = n;
    a->types[a->ntypes++].gpus_per_node = g;
  }
  if (!a->ntypes) {
    cli_error("sim", "--gpu-types: no types in '%s'", v);
    return -1;
  }
  return 0;
}
