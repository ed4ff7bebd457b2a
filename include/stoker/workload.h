/* Training workloads as DLIO and MLPerf Storage define them: dataset shape,
 * reader settings, the emulated accelerator's compute time per batch and
 * the accelerator-utilization (AU) threshold a run must meet. Built-in
 * presets carry the values of DLIO's workload configs; a DLIO YAML file can
 * describe any other. */
#ifndef STOKER_WORKLOAD_H
#define STOKER_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* DLIO's checkpoint section and the model it sizes checkpoints from. Zero
 * (or "") in any field means DLIO's default: after_epoch 1, epochs_between
 * 1, steps_between none (checkpoint by epoch), model_size 10240 bytes for a
 * model that is not a transformer, vocab 32000, hidden 2048, ffn 8192,
 * heads 32, kv heads 8, fp16 model and fp32 optimizer, tensor and pipeline
 * parallelism 1, data parallelism from the rank count. */
struct stk_ckpt_spec {
  int enabled;             /* workflow.checkpoint */
  int no_train;            /* workflow.train False: a checkpoint-only workload */
  char folder[1024];       /* checkpoint.checkpoint_folder ("" = ./checkpoints) */
  uint32_t after_epoch, epochs_between;
  uint64_t steps_between;  /* checkpoint every N steps instead of by epoch */
  double time_between_s;   /* checkpoint-only: compute before each save or load */
  uint32_t num_write, num_read; /* checkpoint-only: saves, then loads of them */
  int fsync;               /* checkpoint.fsync: fsync each file after writing it */
  uint64_t model_size;     /* model.model_size (bytes; DLIO reads model_size_bytes) */
  char model_type[32];     /* model.type: "transformer" sizes by the shape below */
  uint32_t num_layers;     /* model.num_layers; 0 = no transformer layers */
  uint64_t vocab, hidden, ffn;
  uint32_t heads, kv_heads;
  char model_dtype[8], optimizer_dtype[8]; /* int8 uint8 fp16 bf16 fp32 fp64 */
  uint32_t tp, pp, dp, zero_stage; /* model.parallelism.tensor, pipeline, data, zero_stage */
};

/* Both filled by the library (the presets, stk_workload_load_yaml) and
 * read by it (the benchmark, the checkpoint sizes, doctor's feed table):
 * set it up with stk_workload_init(), which zeroes it and records
 * struct_size. The library then writes no further than struct_size and
 * reads no further either (fields added later take their defaults); a
 * struct_size larger than the library's is refused where it is read,
 * naming stk_workload. A struct left zeroed (struct_size 0) is taken to
 * be this header's. The struct_size the caller set is never changed. */
struct stk_workload {
  size_t struct_size;     /* set by stk_workload_init(); 0 = this header's */
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
  struct stk_ckpt_spec ckpt; /* checkpoints (ckpt.enabled 0: none) */
  /* Token windows (format "megatron"): each sample is a window of
   * seq_len + 1 tokens in Megatron GPTDataset's order (stoker/tokens.h),
   * the dataset a Megatron corpus of files x samples_per_file documents
   * of about doc_tokens tokens each; 0 = the format's own samples. */
  uint32_t seq_len;
  uint64_t doc_tokens;
};

#define stk_workload_init(w) stk_workload_init_sized((w), sizeof *(w))
STK_EXPORT void stk_workload_init_sized(struct stk_workload *w, size_t size);

/* Fill *out with a built-in preset: name "unet3d", "resnet50" or
 * "cosmoflow"; accel "a100", "h100" (and "b200" for unet3d); "gpt8b"
 * (token windows, h100); NULL accel means h100. STK_ENOENT for an
 * unknown pair. */
STK_EXPORT int stk_workload_preset(const char *name, const char *accel, struct stk_workload *out);

/* Preset by position, for listings: STK_ENOENT past the end. */
STK_EXPORT int stk_workload_preset_at(int i, struct stk_workload *out);

#ifdef __cplusplus
}
#endif
#endif
