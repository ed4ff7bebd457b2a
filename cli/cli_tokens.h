/* Token-window options shared by `stoker feed` and `stoker inspect`
 * (cli_tokens.c). */
#ifndef STOKER_CLI_TOKENS_H
#define STOKER_CLI_TOKENS_H

#include <getopt.h>
#include <stdio.h>

#include "stoker/stoker.h"

#define CLI_TOKENS_MAX 64

enum {
  CLI_O_SEQ_LEN = 1100,
  CLI_O_SAMPLES,
  CLI_O_SPLIT,
  CLI_O_SPLIT_INDEX,
  CLI_O_BLEND,
  CLI_O_WINDOWS,
  CLI_O_TOKENS,
  CLI_O_INDEX_DIR
};

/* getopt_long entries, to put in a command's option table. */
#define CLI_TOKENS_OPTIONS                                                    \
  {"seq-len", 1, 0, CLI_O_SEQ_LEN}, {"samples", 1, 0, CLI_O_SAMPLES},         \
      {"split", 1, 0, CLI_O_SPLIT}, {"split-index", 1, 0, CLI_O_SPLIT_INDEX}, \
      {"blend", 1, 0, CLI_O_BLEND}, {"windows", 1, 0, CLI_O_WINDOWS},         \
      {"tokens", 1, 0, CLI_O_TOKENS}, {                                       \
    "index-dir", 1, 0, CLI_O_INDEX_DIR                                        \
  }

#define CLI_TOKENS_USAGE                                                               \
  "token windows (a Megatron dataset: PREFIX for PREFIX.bin + PREFIX.idx):\n"          \
  "  --seq-len N         windows of N + 1 tokens, in Megatron GPTDataset's order\n"    \
  "  --samples N         windows wanted (Megatron's num_samples; default: one pass,\n" \
  "                      or --epochs passes)\n"                                        \
  "  --split S           Megatron's split, e.g. 969,30,1 (default: every document)\n"  \
  "  --split-index I     which part: 0 train, 1 validation, 2 test (default 0)\n"      \
  "  --blend 'W P ...'   Megatron's BlendedDataset of datasets P by weights W\n"       \
  "                      (needs --samples)\n"                                          \
  "  --windows W         megatron (across documents, default), document (never\n"      \
  "                      across one, padded) or pack (whole documents packed)\n"       \
  "  --tokens T          int32 (default) or int64 batches\n"                           \
  "  --index-dir DIR     keep the window index files in DIR (default: beside the\n"    \
  "                      data when writable, else built in memory)\n"

struct cli_tokens {
  struct stk_tokens_opts o;
  const char *blend;
  char *blend_buf;
  const char *paths[CLI_TOKENS_MAX];
  double weights[CLI_TOKENS_MAX];
  int n;
};

void cli_tokens_init(struct cli_tokens *t);
/* 0 taken, -1 bad value (printed), 1 not a token option. */
int cli_tokens_option(const char *cmd, int c, const char *v, struct cli_tokens *t);
/* Whether any token option was given. */
int cli_tokens_wanted(const struct cli_tokens *t);
/* Open the windows of path (or of --blend); 0, or CLI_USAGE / CLI_FAIL
 * with the reason printed. */
int cli_tokens_open(const char *cmd, const char *path, struct cli_tokens *t,
                    const struct stk_dataset_opts *dopts, struct stk_tokens **out);
void cli_tokens_free(struct cli_tokens *t);
/* Report lines: the windows and each source; the delivered token rate. */
void cli_tokens_describe(FILE *f, const struct stk_tokens *tk, const struct cli_tokens *t);
void cli_tokens_rate(FILE *f, const struct stk_tokens *tk, const struct stk_loader_stats *st);
void cli_tokens_json(struct stk_json *j, const struct stk_tokens *tk,
                     const struct stk_loader_stats *st);
/* The windows as one JSON object (inspect --json): seq_len, mode, token
 * type, windows, row tokens, documents and tokens of the split (summed
 * over the sources), and each source's counts. */
void cli_tokens_json_describe(struct stk_json *j, const struct stk_tokens *tk,
                              const struct cli_tokens *t);

#endif
