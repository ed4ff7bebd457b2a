/* Built-in workload presets, with the values of DLIO's workload configs
 * (the files MLPerf Storage runs; copies in ../shared/data/dlio-configs),
 * and an LLM preset of token windows (docs/bench.md, "gpt8b"). */
#include <string.h>

#include "../base/base.h"
#include "stoker/workload.h"

struct preset {
  const char *name, *accel, *format;
  double record_bytes, record_stdev;
  uint64_t samples_per_file, files;
  uint32_t batch, read_threads;
  double compute_s, au_min;
  uint32_t seq_len; /* token windows; 0 = samples */
  uint64_t doc_tokens;
};

/* gpt8b: an 8B Llama-3-shaped model at seq_len 8192, one window per
 * accelerator per step (micro-batch 1), its compute time from NVIDIA's
 * published pre-training throughput for LLAMA3-8B at seq_len 8192 on 8
 * GPUs (NeMo Framework 24.12 performance summary, FP8, GBS 128, MBS 1:
 * 12,273 tokens/s per GPU): 8192 / 12273 = 0.6675 s a window. The corpus:
 * 4096 documents of about 1024 uint16 tokens (8 MiB, 511 windows). */
#define GPT8B_COMPUTE_S (8192.0 / 12273.0)

static const struct preset presets[] = {
    {"unet3d", "a100", "npz", 146600628, 68341808, 1, 168, 7, 4, 0.636, 0.90},
    {"unet3d", "h100", "npz", 146600628, 68341808, 1, 168, 7, 4, 0.323, 0.90},
    {"unet3d", "b200", "npz", 146600628, 68341808, 1, 168, 7, 4, 0.162, 0.90},
    {"resnet50", "a100", "tfrecord", 114660.07, 0, 1251, 1024, 400, 8, 0.435, 0.90},
    {"resnet50", "h100", "tfrecord", 114660.07, 0, 1251, 1024, 400, 8, 0.224, 0.90},
    {"cosmoflow", "a100", "tfrecord", 2828486, 71311, 1, 524288, 1, 4, 0.00551, 0.70},
    {"cosmoflow", "h100", "tfrecord", 2828486, 71311, 1, 524288, 1, 4, 0.00350, 0.70},
    {"gpt8b", "h100", "megatron", 2048, 0, 4096, 1, 1, 2, GPT8B_COMPUTE_S, 0.90, 8192, 1024},
};

static void fill(const struct preset *p, struct stk_workload *w) {
  memset(w, 0, sizeof *w);
  snprintf(w->name, sizeof w->name, "%s", p->name);
  snprintf(w->accel, sizeof w->accel, "%s", p->accel);
  snprintf(w->format, sizeof w->format, "%s", p->format);
  w->record_bytes = p->record_bytes;
  w->record_stdev = p->record_stdev;
  w->samples_per_file = p->samples_per_file;
  w->files = p->files;
  w->batch = p->batch;
  w->read_threads = p->read_threads;
  w->epochs = p->seq_len ? 1 : 5; /* every DLIO training config above runs 5 epochs */
  w->compute_s = p->compute_s;
  w->au_min = p->au_min;
  w->seq_len = p->seq_len;
  w->doc_tokens = p->doc_tokens;
  if (!strcmp(p->name, "unet3d")) {
    /* The config's checkpoint section, off unless asked for (--checkpoint):
     * after epoch 5, every 2 epochs, a 499 MB model. */
    w->ckpt.model_size = 499153191;
    w->ckpt.after_epoch = 5;
    w->ckpt.epochs_between = 2;
    snprintf(w->ckpt.folder, sizeof w->ckpt.folder, "checkpoints/unet3d");
  }
}

/* The caller's struct gets no more than its struct_size. */
static void give(const struct preset *p, struct stk_workload *out) {
  struct stk_workload full;
  fill(p, &full);
  stk__result_give(out, &full, sizeof full);
}

void stk_workload_init_sized(struct stk_workload *w, size_t size) {
  stk__opts_init(w, sizeof *w, size);
}

int stk__workload_take(struct stk_workload *dst, const struct stk_workload *src, char *err) {
  return stk__opts_take(dst, sizeof *dst, src, "stk_workload", err);
}

int stk_workload_preset(const char *name, const char *accel, struct stk_workload *out) {
  if (!accel) accel = "h100";
  for (size_t i = 0; i < STK__ARRAY_LEN(presets); i++)
    if (strcmp(presets[i].name, name) == 0 && strcmp(presets[i].accel, accel) == 0) {
      give(&presets[i], out);
      return 0;
    }
  return STK_ENOENT;
}

int stk_workload_preset_at(int i, struct stk_workload *out) {
  if (i < 0 || (size_t)i >= STK__ARRAY_LEN(presets)) return STK_ENOENT;
  give(&presets[i], out);
  return 0;
}
