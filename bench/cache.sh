#!/usr/bin/env bash
# Shard cache benchmarks C1-C4: see bench/cache.py. ROUNDS=N sets the rounds.
exec /usr/bin/python3 "$(dirname "$0")/cache.py" --rounds "${ROUNDS:-3}" "$@"
