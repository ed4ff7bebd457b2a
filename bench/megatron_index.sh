#!/usr/bin/env bash
# T1 of issue 18: Megatron-LM's GPT and blend index build against stoker's,
# and whether every array is identical (bench/megatron_index.py). Megatron is
# megatron-core from PyPI in the anchors' environment (.venv-anchors, which
# bench/anchors-setup installs on first use; ANCHORS=0 skips that step).
# Arguments go to the script: --tokens 1e9 --docs 1e6 --seq 4096 by default.
set -e
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
make --no-print-directory BUILD="$BUILD" "$BUILD/bench/gpt_index" >/dev/null
if [ "${ANCHORS:-1}" != 0 ]; then
  bench/anchors-setup || echo "bench megatron_index: bench/anchors-setup failed (above)" >&2
fi
if ! .venv-anchors/bin/python -c 'import megatron.core' 2>/dev/null; then
  echo "bench megatron_index: megatron-core is not installed in .venv-anchors (see .venv-anchors/anchors-status)" >&2
  exit 1
fi
exec .venv-anchors/bin/python bench/megatron_index.py --stoker "$BUILD/bench/gpt_index" \
  --json bench/results/megatron_index.json "$@"
