#!/usr/bin/env bash
# MLPerf Storage workloads on DLIO's data layout, D1-D2: see bench/dlio.py.
# ROUNDS=N sets the rounds (default 1: D1 reads several GB per round).
exec /usr/bin/python3 "$(dirname "$0")/dlio.py" --rounds "${ROUNDS:-1}" "$@"
