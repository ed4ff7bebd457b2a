/* stoker sim's command line, shared between its files: cmd_sim.c (the
 * placement simulator and the dispatcher), cmd_sim_jobs_args.c (the jobs
 * simulator's options), cmd_sim_jobs.c (its runs) and cmd_sim_pollux.c (the
 * Pollux artifact's table). */
#ifndef STOKER_CLI_CMD_SIM_H
#define STOKER_CLI_CMD_SIM_H

#include <stdint.h>

#include "cli.h"
#include "stoker/sim.h"

/* Output helpers of cmd_sim.c: a path's last part ("<stdin>" for "-"), and
 * output files written whole or not at all through stk_outfile. */
const char *sim_base(const char *p);
struct stk_outfile *sim_open_out(const char *opt, const char *path);
int sim_close_out(const char *opt, struct stk_outfile *o);

/* The options of stoker sim --jobs and --pollux-table. */
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
  /* --gpu-types: a heterogeneous cluster, each type's measurements loaded
   * from the traces directory */
  char *types_buf;
  struct stk_sim_gpu_type types[8];
  struct stk_sim_apps *type_apps[8];
  size_t ntypes;
};

/* Parse --gpu-types: "sia" (the Sia artifact's default cluster,
 * aws:6x4,rtx:3x8,dgx-ext:2x8) or TYPE:NODESxGPUS,..: 0 or -1 printed. */
int simj_parse_types(struct jobs_args *a, const char *v);

/* Parse the jobs options into *a (zeroed by the caller): 0 or -1 with the
 * error printed. */
int simj_parse(struct jobs_args *a, int argc, char **argv);
/* Read --carbon FILE's hourly values into a->o: 0 or -1 with the error printed. */
int simj_load_carbon(struct jobs_args *a);
/* GPUs a power cap lets work at once (the engine's rule). */
int simj_cap_gpus(const struct jobs_args *a, int gpus);
unsigned simj_nodes(const struct jobs_args *a);
unsigned simj_gpn(const struct jobs_args *a);
int simj_is_dir(const char *p);

/* cmd_sim_pollux.c: the .csv files of a directory sorted by name; the
 * Pollux artifact's inputs; the table beside its published figures. */
int simj_list_csv(const char *dir, char ***out, size_t *n);
const char *simj_pollux_dir(const struct jobs_args *a, char *buf, size_t cap);
void simj_pollux_table(const struct jobs_args *a, const struct stk_sim_jobs_result *res);

/* cmd_sim_jobs.c: stoker sim --jobs / --pollux-table. */
int cmd_sim_jobs(int argc, char **argv);

#endif
