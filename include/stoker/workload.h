/* Training workloads as DLIO and MLPerf Storage define them: dataset shape,
 * reader settings, the emulated accelerator's compute time per batch and
 * the accelerator-utilization (AU) threshold a run must meet. Built-in
 * presets carry the values of DLIO's workload configs; a DLIO YAML file can
 * describe any other. */
#ifndef STOKER_WORKLOAD_H
#define STOKER_WORKLOAD_H

#include <stdint.h>

#include "stoker/error.h"

#ifdef __cplusplus
extern "C" {
#endif

struct stk_workload {
  char name[64];          /* "resnet50" */
  char accel[32];         /* "h100", or "" for a config without one */
  char format[16];        /* "tfrecord", "npz", ... */
  double record_bytes;    /* mean bytes per sample */
  double record_stdev;    /* normal spread of the sample size; 0 = fixed */
  uint64_t samples_per_file;
  uint64_t files;
  uint32_t batch;
  uint32_t read_threads;
  uint32_t epochs;
  double compute_s;       /* emulated compute time per batch, seconds */
  double compute_stdev;   /* 0 = constant */
  double au_min;          /* AU threshold, 0..1 */
  char data_folder[1024]; /* where the dataset lives ("" = choose one) */
};

/* Fill *out with a built-in preset: name "unet3d", "resnet50" or
 * "cosmoflow"; accel "a100", "h100" (and "b200" for unet3d); NULL accel
 * means h100. STK_ENOENT for an unknown pair. */
STK_EXPORT int stk_workload_preset(const char *name, const char *accel, struct stk_workload *out);

/* Preset by position, for listings: STK_ENOENT past the end. */
STK_EXPORT int stk_workload_preset_at(int i, struct stk_workload *out);

#ifdef __cplusplus
}
#endif
#endif
