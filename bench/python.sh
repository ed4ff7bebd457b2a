#!/usr/bin/env bash
# Python binding benchmarks P1-P5: see bench/python.py. Needs `make python`
# (the .venv with the stoker package); SAMPLES=N sets P1's samples per run.
# P1's anchors (DALI, SPDL) and P4's (webdataset) run in their own environment, .venv-anchors,
# which bench/anchors-setup installs from PyPI on first use and refreshes
# when bench/anchors-requirements.txt or the package changes (ANCHORS=0
# skips that step). Where it cannot, P1 still runs and their rows say why.
set -e
cd "$(dirname "$0")/.."
make --no-print-directory python >/dev/null
if [ "${ANCHORS:-1}" != 0 ]; then
  bench/anchors-setup ||
    echo "bench python: bench/anchors-setup failed (above); P1's anchor rows say why" >&2
fi
exec .venv/bin/python bench/python.py "$@"
