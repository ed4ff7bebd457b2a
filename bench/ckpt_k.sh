#!/usr/bin/env bash
# Checkpoint K2-K4 of issue 20 (async save blocking time, drain against curl,
# restore against the cache's cold read): see bench/ckpt_k.py. Needs the
# stoker package in .venv (`make python`), moto (scripts/install-deps test),
# nginx and curl.
set -e
cd "$(dirname "$0")/.."
make --no-print-directory python >/dev/null
exec .venv/bin/python bench/ckpt_k.py "$@"
