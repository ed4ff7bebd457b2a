#!/usr/bin/env bash
# The LLM preset: `stoker bench --workload gpt8b`, an 8B model's token
# windows (seq_len 8192) from a generated Megatron corpus, one window per
# emulated accelerator per step at NVIDIA's published H100 rate
# (docs/bench.md, "LLM preset"). Prints stoker bench's report and writes
# bench/results/gpt.json. ACCELERATORS=N (default 8); GPT_DATA=DIR keeps
# the corpus there (default: made once under $TMPDIR).
set -euo pipefail
cd "$(dirname "$0")/.."
args=(--workload gpt8b --accelerators "${ACCELERATORS:-8}" --json bench/results/gpt.json)
if [ -n "${GPT_DATA:-}" ]; then args+=(--data "$GPT_DATA"); fi
exec "${BUILD:-build}/stoker" bench "${args[@]}"
