#!/usr/bin/env bash
# stoker bench benchmarks E1-E2: see bench/emulator.py. ROUNDS=N sets the rounds.
exec /usr/bin/python3 "$(dirname "$0")/emulator.py" --rounds "${ROUNDS:-3}" "$@"
