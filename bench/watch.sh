#!/usr/bin/env bash
# stoker watch benchmarks W1-W3: see bench/watch.py.
exec /usr/bin/python3 "$(dirname "$0")/watch.py" "$@"
