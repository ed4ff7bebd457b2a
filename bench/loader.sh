#!/usr/bin/env bash
# Loader benchmarks B1-B5: see bench/loader.py. ROUNDS=N sets the rounds.
exec /usr/bin/python3 "$(dirname "$0")/loader.py" --rounds "${ROUNDS:-3}" "$@"
