#!/usr/bin/env bash
# Python binding benchmarks P1-P3: see bench/python.py. Needs `make python`
# (the .venv with the stoker package); SAMPLES=N sets P1's samples per run.
set -e
cd "$(dirname "$0")/.."
make --no-print-directory python >/dev/null
exec .venv/bin/python bench/python.py "$@"
